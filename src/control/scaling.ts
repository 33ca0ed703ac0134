// Load-based scaling between a model's min and max, as a pure function: the router's in-flight
// count per model against the model's target_inflight per replica. Up at once; down only after
// the load has stayed low for delayMs, and only when one replica fewer would still be under 80%
// of target, so replicas do not flap. When the load turned low per model is state the caller
// keeps: it goes in and comes out.

import type { ModelRow, ModelStateRow, NewEvent } from "./types";

export interface ScaleInput {
  models: readonly ModelRow[];
  modelState: readonly ModelStateRow[];
  /** The router's requests in flight per model. */
  inflight: ReadonlyMap<string, number>;
  now: number;
  /** Load must stay low this long before a model scales down. */
  delayMs: number;
  /** Per model, since when its load has been low enough to scale down (from the last call). */
  lowSince: ReadonlyMap<string, number>;
}

export interface ScaleChange {
  model: string;
  from: number;
  to: number;
  load: number;
  perReplica: number;
}

export interface ScaleResult {
  changes: ScaleChange[];
  lowSince: Map<string, number>;
}

export function scale(input: ScaleInput): ScaleResult {
  const state = new Map(input.modelState.map((m) => [m.model, m]));
  const lowSince = new Map(input.lowSince);
  const changes: ScaleChange[] = [];
  for (const m of input.models) {
    const spec = m.spec;
    const per = spec.target_inflight;
    if (per === undefined || spec.replicas.max <= spec.replicas.min) continue;
    const load = input.inflight.get(m.name) ?? 0;
    const current = state.get(m.name)?.scaleTarget ?? spec.replicas.min;
    const wanted = Math.min(spec.replicas.max, Math.max(spec.replicas.min, Math.ceil(load / per)));
    let next = current;
    if (wanted > current) {
      next = wanted;
      lowSince.delete(m.name);
    } else if (wanted < current && load < (current - 1) * per * 0.8) {
      const since = lowSince.get(m.name);
      if (since === undefined || input.now < since) lowSince.set(m.name, input.now);
      else if (input.now - since >= input.delayMs) {
        next = current - 1;
        lowSince.set(m.name, input.now);
      }
    } else lowSince.delete(m.name);
    if (next !== current) changes.push({ model: m.name, from: current, to: next, load, perReplica: per });
  }
  return { changes, lowSince };
}

/** The model state as it is once the changes are written: what the reconcile step decides on. */
export function withTargets(modelState: readonly ModelStateRow[], changes: readonly ScaleChange[]): ModelStateRow[] {
  const to = new Map(changes.map((c) => [c.model, c.to]));
  const out = modelState.map((s) => (to.has(s.model) ? { ...s, scaleTarget: to.get(s.model)! } : s));
  for (const [model, scaleTarget] of to)
    if (!modelState.some((s) => s.model === model))
      out.push({ model, failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: null, scaleTarget, unplaceableReason: null });
  return out;
}

/** The event that explains a change. */
export function scaleEvent(c: ScaleChange): NewEvent {
  return { kind: "model.scaled", subject: `model/${c.model}`, message: `model ${c.model} scaled ${c.to > c.from ? "up" : "down"} to ${c.to} (in flight ${c.load}, target ${c.perReplica} per replica)` };
}
