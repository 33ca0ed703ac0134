// The usage ledger checked against the engines' own counters, per replica: the prompt and
// completion tokens the ledger counted for the requests that ended on a replica, beside the
// engine's cumulative counters from each metrics poll (engine-tokens.ts). Over the interval since
// a baseline, the engine's delta less the ledger's is the drift (llmgw_ledger_drift_tokens,
// `llmgw usage --check`): 0 when every token the engine made was counted.
//
// A sample counts only when the replica had no request in flight from the poll's start to its
// answer (no request began or ended on it meanwhile): a running request has tokens the engine
// counted and the ledger not yet. An engine whose counters went down restarted: a new baseline.
// An engine that exports no such counters is unknown, never 0.

import type { Scheduler } from "../lib/scheduler";
import type { ReplicaDrift } from "../protocol/ledger-check";
import type { EngineTokens } from "./engine-tokens";
import { labelText } from "./prom";

/** Prompt and completion tokens, as one side counted them. */
interface Pair {
  prompt: number;
  completion: number;
}

/** The engine's and the ledger's cumulative counts at one quiet moment. */
interface Sample {
  engine: Pair;
  ledger: Pair;
  at: number;
}

/** One replica's tally: the hot path adds to it, polls compare it. */
class Tally {
  prompt = 0;
  completion = 0;
  /** Requests that ended on it, to tell whether any did during a poll. */
  ends = 0;
  /** "none": its engine answered /metrics without token counters. */
  counters: "unread" | "none" | "known" = "unread";
  /** The engine's counters last seen (quiet or not): a fall is a restart. */
  seen: Pair | undefined;
  base: Sample | undefined;
  last: Sample | undefined;
  restarts = 0;
  constructor(public model: string) {}
}

/** What the reconciler reads of an endpoint when its poll ends: its id, model and requests in flight now. */
export interface PolledEndpoint {
  readonly id: string;
  readonly info: { readonly models: readonly string[] };
  readonly inflight: number;
}

export class LedgerReconciler {
  private readonly byReplica = new Map<string, Tally>();

  constructor(
    private readonly time: Pick<Scheduler, "now">,
    private readonly log?: { info(o: object, m: string): void },
  ) {}

  /**
   * An attempt that ended on `replica` with the tokens the ledger counted for it (proxy.ts: where
   * the ledger counts a request; 0 for an attempt retried elsewhere or cut by a fault of the router's).
   */
  ended(replica: string, model: string, prompt: number, completion: number): void {
    let t = this.byReplica.get(replica);
    if (t === undefined) this.byReplica.set(replica, (t = new Tally(model)));
    t.prompt += prompt;
    t.completion += completion;
    t.ends++;
  }

  /** A poll of the replica's /metrics starts: the token its end hands back. */
  begin(replica: string): number {
    return this.byReplica.get(replica)?.ends ?? 0;
  }

  /** A poll's answer was read: `tokens` undefined when it held no token counters. */
  observed(ep: PolledEndpoint, begun: number, tokens: EngineTokens | undefined): void {
    let t = this.byReplica.get(ep.id);
    if (t === undefined) this.byReplica.set(ep.id, (t = new Tally(ep.info.models[0] ?? "")));
    if (ep.info.models[0] !== undefined) t.model = ep.info.models[0];
    if (tokens === undefined) {
      t.counters = "none";
      t.base = t.last = t.seen = undefined;
      return;
    }
    t.counters = "known";
    const seen = t.seen;
    t.seen = { prompt: tokens.prompt, completion: tokens.completion };
    if (seen !== undefined && (tokens.prompt < seen.prompt || tokens.completion < seen.completion)) {
      // Counters start again from 0 when the engine does: what it counted before is gone.
      t.restarts++;
      t.base = t.last = undefined;
      this.log?.info({ replica: ep.id, model: t.model, before: seen, now: tokens }, "ledger reconciliation: the engine's token counters went down (it restarted); a new baseline is taken");
    }
    if (ep.inflight !== 0 || t.ends !== begun) return;
    const s: Sample = { engine: t.seen, ledger: { prompt: t.prompt, completion: t.completion }, at: this.time.now() };
    t.base ??= s;
    t.last = s;
  }

  /** Forgets replicas no longer routed to. */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.byReplica.keys()) if (!ids.has(id)) this.byReplica.delete(id);
  }

  /** Every replica's reconciliation, by id. */
  view(): ReplicaDrift[] {
    const out: ReplicaDrift[] = [];
    for (const [replica, t] of this.byReplica) {
      if (t.counters === "unread") continue;
      const b = t.base;
      const l = t.last;
      const d = (side: "engine" | "ledger", k: keyof Pair) => (b !== undefined && l !== undefined ? l[side][k] - b[side][k] : 0);
      const ep = d("engine", "prompt");
      const ec = d("engine", "completion");
      const lp = d("ledger", "prompt");
      const lc = d("ledger", "completion");
      out.push({
        replica,
        model: t.model,
        state: t.counters === "none" ? "no_counters" : l === undefined ? "waiting" : "checked",
        engine_prompt_tokens: ep,
        engine_completion_tokens: ec,
        ledger_prompt_tokens: lp,
        ledger_completion_tokens: lc,
        drift_prompt_tokens: ep - lp,
        drift_completion_tokens: ec - lc,
        since: b?.at ?? 0,
        checked_at: l?.at ?? 0,
        engine_restarts: t.restarts,
      });
    }
    return out.sort((a, b) => (a.replica < b.replica ? -1 : a.replica > b.replica ? 1 : 0));
  }

  /** llmgw_ledger_drift_tokens: checked replicas only (an unknown drift has no series, not a 0). */
  render(): string {
    const out = [
      "# HELP llmgw_ledger_drift_tokens Per replica, the engine's own token counters' growth since the baseline less the usage ledger's, at the last moment it had no request in flight: 0 when the ledger counted every token.",
      "# TYPE llmgw_ledger_drift_tokens gauge",
    ];
    for (const r of this.view()) {
      if (r.state !== "checked") continue;
      out.push(`llmgw_ledger_drift_tokens${labelText(LABELS, [r.replica, r.model, "prompt"])} ${r.drift_prompt_tokens}`);
      out.push(`llmgw_ledger_drift_tokens${labelText(LABELS, [r.replica, r.model, "completion"])} ${r.drift_completion_tokens}`);
    }
    return `${out.join("\n")}\n`;
  }
}

const LABELS = ["replica", "model", "kind"];
