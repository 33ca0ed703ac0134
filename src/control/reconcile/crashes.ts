// Crash loops: a replica that became ready and then crashed, again and again. Failed starts park
// a model (failures.ts), but a replica that reaches ready first ends that count, so an engine that
// dies a minute into serving would be restarted for ever. Crashes are counted apart, as
// Kubernetes' CrashLoopBackOff counts restarts: each crash within the crash window of its
// replica becoming ready adds one, the next start waits the restart backoff for that many (so the
// waits grow, capped), and the model is parked with the crash's cause once they reach
// max_failures. A replica that stays ready for the window ends the loop, as does one crash after
// a long run. Pure, like the other steps: the reports path records, the tick settles.

import { exactDuration, humanMs, oneLine, plural } from "../../lib/format";
import { FAILURE_TEXT_MAX } from "./engine-failure";
import { observedFrom } from "../views";
import { backoffDelay, inBackoff } from "./failures";
import type { ReconcileConfig } from "./config";
import type { ReconcileContext } from "./context";
import type { Plan, PlanBuilder } from "./plan";
import type { ModelStateRow, ReplicaRow } from "../types";

export type CrashConfig = Pick<ReconcileConfig, "maxFailures" | "crashWindowMs" | "backoffMs" | "backoffMaxMs">;

/** What recordCrash decided, for the replica's event. */
export interface CrashVerdict {
  /** Crashes in a row, this one included (1 after a long run). */
  crashes: number;
  /** The model is parked by this crash. */
  parked: boolean;
  /** How long the model waits before its next start (0 when parked: it does not start). */
  backoffMs: number;
}

/** Why a model was parked for crashing: what the window is, how often, and the engine's own words. */
export function crashLoopReason(crashes: number, cfg: Pick<ReconcileConfig, "crashWindowMs">, error: string): string {
  return `crashed within ${humanMs(cfg.crashWindowMs)} of becoming ready, ${plural(crashes, "time")} in a row; last: ${error}`;
}

/**
 * Records that ready replica `r` of `model` failed at `now` with `error` (an exit, a signal, the
 * engine's last lines): counts it unless the replica had run past the window, and parks the
 * model once the count reaches maxFailures.
 */
export function recordCrash(plan: Plan, r: Pick<ReplicaRow, "model" | "readyAt">, st: ModelStateRow | undefined, error: string, now: number, cfg: CrashConfig): CrashVerdict {
  const pending = plan.modelState.get(r.model) ?? {};
  const ranFor = r.readyAt === null ? 0 : now - r.readyAt;
  const crashes = ranFor >= cfg.crashWindowMs ? 1 : (pending.crashes ?? st?.crashes ?? 0) + 1;
  const wasParked = pending.parked ?? st?.parked ?? false;
  const parks = !wasParked && crashes >= cfg.maxFailures;
  // A model parked already keeps the reason it was parked for.
  const reason = wasParked ? {} : { reason: parks ? crashLoopReason(crashes, cfg, error) : error };
  plan.modelState.set(r.model, { ...pending, crashes, lastFailureAt: now, ...reason, ...(parks ? { parked: true } : {}) });
  if (parks)
    plan.events.push({
      kind: "model.parked",
      subject: `model/${r.model}`,
      message: `model ${r.model} parked after ${plural(crashes, "crash", "crashes")}, each within ${humanMs(cfg.crashWindowMs)} of becoming ready; not retried until unparked or changed. Last error: ${oneLine(error, FAILURE_TEXT_MAX)}`,
    });
  return { crashes, parked: parks || wasParked, backoffMs: parks || wasParked ? 0 : backoffDelay(crashes, cfg) };
}

/** A wait as people read it: exact below a minute (100ms, 4s), compact above (5m). */
const waitText = (ms: number) => (ms < 60_000 ? exactDuration(Math.max(0, Math.ceil(ms))) : humanMs(ms));

/** What a replica.failed event adds for a crash: where the loop stands and when the next start comes. */
export function crashNote(v: CrashVerdict, cfg: Pick<ReconcileConfig, "maxFailures">): string {
  if (v.parked) return `; crash ${v.crashes} in a row: the model is parked`;
  return `; crash ${v.crashes} of ${cfg.maxFailures} before the model is parked; next start in ${waitText(v.backoffMs)} at the earliest`;
}

/** While a model waits out its restart backoff: after what, and for how much longer (explain says it). */
export function backoffNote(st: ModelStateRow | undefined, now: number, cfg: Pick<ReconcileConfig, "backoffMs" | "backoffMaxMs">): string | undefined {
  if (!st || st.lastFailureAt === null || !inBackoff(st, now, cfg)) return undefined;
  const run = st.crashes > st.failures ? `${plural(st.crashes, "crash", "crashes")} soon after becoming ready` : plural(st.failures, "failed start");
  const left = st.lastFailureAt + backoffDelay(Math.max(st.failures, st.crashes), cfg) - now;
  return `waits out its restart backoff after ${run} in a row (${waitText(left)} more)`;
}

/**
 * The tick's step: a model whose replica came up after its last crash and has stayed ready for
 * the whole window is out of its loop, so its count goes back to 0. A parked model keeps its
 * count: it says why it is parked.
 */
export function settleCrashes(ctx: ReconcileContext, b: PlanBuilder): void {
  let loops: Map<string, ModelStateRow> | undefined;
  for (const st of ctx.modelState.values()) if (st.crashes > 0 && !st.parked) (loops ??= new Map()).set(st.model, st);
  if (!loops) return;
  for (const r of ctx.snapshot.replicas) {
    const st = loops.get(r.model);
    if (!st || r.readyAt === null || b.isRemoved(r) || b.stateOf(r) !== "ready") continue;
    if (st.lastFailureAt !== null && r.readyAt < st.lastFailureAt) continue;
    // Time the control plane did not watch is not time it saw the replica ready.
    if (ctx.now - observedFrom(r.readyAt, ctx.now, ctx.watchedSince) < ctx.cfg.crashWindowMs) continue;
    b.setModel(r.model, { crashes: 0 });
    loops.delete(r.model);
  }
}

/** The count that parked a model, and what it counts: "5 failed starts" or "3 crashes". */
export function parkedAfter(st: Pick<ModelStateRow, "failures" | "crashes">): string {
  return st.crashes > st.failures ? plural(st.crashes, "crash", "crashes") : plural(st.failures, "failed start");
}
