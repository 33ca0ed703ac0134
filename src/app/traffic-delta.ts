// The traffic figures cross from the router thread to the control plane's as changes: every
// model's name each time, the figures only of those that changed since the last answer. At a
// 1,000-model catalog a whole answer is thousands of numbers that the control plane's thread
// must clone and validate, every dashboard sample, to learn that nothing moved. Both sides keep
// what was sent (the router thread) and what was received (the control plane) per model; the
// messages between two threads arrive in order and are not lost, so the two stay in step. A new
// router thread starts with nothing sent, so its first answer carries every model.

import type { ModelTraffic } from "../protocol/routing";

/** The router thread's side: the models' names and the figures that changed since the last call. */
export class TrafficSent {
  private sent = new Map<string, string>();

  delta(all: readonly ModelTraffic[]): { models: string[]; changed: ModelTraffic[] } {
    const changed: ModelTraffic[] = [];
    const next = new Map<string, string>();
    for (const t of all) {
      const key = JSON.stringify(t);
      next.set(t.model, key);
      if (this.sent.get(t.model) !== key) changed.push(t);
    }
    // Models that are gone are forgotten, so one that comes back is sent whole again.
    this.sent = next;
    return { models: all.map((t) => t.model), changed };
  }
}

/** The control plane's side: the figures as last received, per model. */
export class TrafficReceived {
  private byModel = new Map<string, ModelTraffic>();

  /**
   * Takes one answer and returns every model's figures in its order. A name with no figures
   * ever received (which a router thread in step never sends) is left out rather than made up.
   */
  take(m: { models: readonly string[]; changed: readonly ModelTraffic[] }): ModelTraffic[] {
    for (const t of m.changed) this.byModel.set(t.model, t);
    const next = new Map<string, ModelTraffic>();
    const out: ModelTraffic[] = [];
    for (const name of m.models) {
      const t = this.byModel.get(name);
      if (t === undefined) continue;
      next.set(name, t);
      out.push(t);
    }
    this.byModel = next;
    return out;
  }
}
