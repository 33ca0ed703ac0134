// Rolling a model's replicas onto a new launch (a catalog change to args, env, revision or
// profile, or `models restart`): one at a time with surge. A replica of the new launch is placed
// and becomes ready before an old one is stopped; an old one stops by draining (the router sends
// it nothing new) and keeps running until its requests in flight finish or the drain timeout
// passes. With no room for the surge replica, an old one is stopped first only when the model
// keeps `min` ready without it; otherwise the roll waits. Pure decisions over the snapshot; the
// state of a roll is the replicas' own launch fingerprints and drain deadlines in the store, so
// a restarted control plane carries on where it stopped.

import { RESTART_MARK, launchOf } from "../launch";
import type { PlacementResult } from "../placement";
import type { ReconcileContext } from "./context";
import type { ModelRequest } from "./desired";
import type { PlanBuilder } from "./plan";
import type { ModelRow, ReplicaRow } from "../types";

/** What the roll asks of the rest of a model's step. */
export interface RollStep {
  /** Whether the model has outdated replicas (then the roll, not stopSurplus, stops old ones). */
  rolling: boolean;
  /** Replicas of the current launch: the ones stopSurplus may still judge against `desired`. */
  fresh: ReplicaRow[];
  /** Ready replicas the roll stopped (drained) this step. */
  stoppedReady: number;
  /** 1 when a surge replica is to be placed beyond `desired`. */
  surge: number;
}

const NOT_ROLLING = (fresh: ReplicaRow[]): RollStep => ({ rolling: false, fresh, stoppedReady: 0, surge: 0 });

/** Whether a replica runs the model's current launch; a replica whose profile is gone never does. */
export function isCurrent(m: ModelRow, r: ReplicaRow): boolean {
  return r.launch !== RESTART_MARK && r.launch === launchOf(m.spec, r.profile);
}

/**
 * Starts an old replica's drain: the router stops sending it requests at once, the agent keeps it
 * running until its requests in flight finish or `until` (reconcile: releaseDrained).
 */
export function drainOld(ctx: Pick<ReconcileContext, "now" | "cfg">, b: PlanBuilder, r: ReplicaRow, why: string): void {
  b.setState(r, "draining", { drainUntil: ctx.now + ctx.cfg.drainTimeoutMs });
  b.event({ kind: "replica.replaced", subject: `replica/${r.id}`, message: `draining replica ${r.id} of ${r.model}: ${why}`, data: { replica: r.id, model: r.model } });
}

/**
 * One model's roll, over its active replicas not on draining nodes (`staying`). Replicas from
 * before fingerprints are stamped as current; outdated ones still starting stop at once (they
 * serve nothing, and a second change mid-roll makes the first change's new ones outdated);
 * outdated ready ones drain while the rest keep `desired` ready, and otherwise a surge replica is
 * asked for, one at a time: not while another is starting or one of the model's replicas is still
 * stopping (`stopping`).
 */
export function rollModel(ctx: Pick<ReconcileContext, "now" | "cfg" | "lastUsed">, b: PlanBuilder, m: ModelRow, staying: readonly ReplicaRow[], desired: number, stopping = false): RollStep {
  const fresh: ReplicaRow[] = [];
  const old: ReplicaRow[] = [];
  for (const r of staying) {
    if (b.stateOf(r) !== "starting" && b.stateOf(r) !== "ready") continue;
    if (r.launch == null) {
      const stamp = launchOf(m.spec, r.profile);
      if (stamp !== undefined) {
        b.plan.update.push({ id: r.id, patch: { launch: stamp } });
        fresh.push(r);
        continue;
      }
    }
    (isCurrent(m, r) ? fresh : old).push(r);
  }
  if (old.length === 0) return NOT_ROLLING(fresh);
  const oldReady: ReplicaRow[] = [];
  for (const r of old) {
    if (b.stateOf(r) === "ready") oldReady.push(r);
    else {
      b.setState(r, "draining");
      b.event({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${m.name}: it was starting with an outdated spec` });
    }
  }
  const freshReady = fresh.filter((r) => b.stateOf(r) === "ready").length;
  const freshStarting = fresh.length - freshReady;
  // Longest idle first; a replica whose idleness is unknown counts as just used.
  oldReady.sort((x, y) => (ctx.lastUsed.get(x.id) ?? Number.POSITIVE_INFINITY) - (ctx.lastUsed.get(y.id) ?? Number.POSITIVE_INFINITY) || (x.id < y.id ? -1 : 1));
  const excess = Math.min(oldReady.length, freshReady + oldReady.length - desired);
  for (const r of oldReady.slice(0, Math.max(0, excess)))
    drainOld(ctx, b, r, `replaced by a replica of the new spec (${freshReady} new ready, ${freshReady + oldReady.length - 1} ready without it, ${desired} wanted)`);
  if (excess > 0) return { rolling: true, fresh, stoppedReady: excess, surge: 0 };
  // One at a time: a new replica on its way, or an old one still finishing its requests, is
  // waited for. Short of desired, the ordinary request places the replacement (on the new
  // launch); at desired, one more is the surge.
  const surge = freshStarting === 0 && !stopping && freshReady + oldReady.length >= desired ? 1 : 0;
  return { rolling: true, fresh, stoppedReady: 0, surge };
}

/**
 * After placement: a surge that found no room. The roll goes on without surge (one old replica
 * drains, its replacement is placed once its GPUs are free) only when the model keeps `min`
 * ready and no old replica is still draining (its GPUs come free soon; surge may fit then).
 * Otherwise the roll waits, and its placement reason says so (ROLL_WAITS first: the model is
 * not short, so it is not unplaceable; `models NAME` shows it as the roll's, rolloutView).
 */
export function rollWithoutSurge(ctx: Pick<ReconcileContext, "now" | "cfg" | "models" | "lastUsed">, b: PlanBuilder, requests: readonly ModelRequest[], result: PlacementResult, byModel: ReadonlyMap<string, ReplicaRow[]>): void {
  const placed = new Set(result.placed.map((p) => p.model));
  for (const req of requests) {
    if (!req.surgeOnly || placed.has(req.model)) continue;
    const why = result.unplaceable.get(req.model);
    result.unplaceable.delete(req.model);
    const m = ctx.models.get(req.model);
    if (!m) continue;
    const reps = (byModel.get(req.model) ?? []).filter((r) => !b.isRemoved(r));
    const ready = reps.filter((r) => b.stateOf(r) === "ready");
    const old = ready.filter((r) => !isCurrent(m, r)).sort((x, y) => (ctx.lastUsed.get(x.id) ?? Number.POSITIVE_INFINITY) - (ctx.lastUsed.get(y.id) ?? Number.POSITIVE_INFINITY) || (x.id < y.id ? -1 : 1));
    if (old.length === 0) continue;
    if (ready.length - 1 < m.spec.replicas.min) {
      result.unplaceable.set(req.model, `${ROLL_WAITS}no room for a new replica${why ? ` (${why})` : ""}, and stopping an old one would leave fewer than min ${m.spec.replicas.min} ready; free a GPU (or lower min) to go on`);
      continue;
    }
    drainOld(ctx, b, old[0]!, `no room for a surge replica; ${ready.length - 1} ready without it keep min ${m.spec.replicas.min}`);
  }
}

/** How a placement reason that is a roll's wait, not the model's shortage, begins. */
export const ROLL_WAITS = "rollout waits: ";

/**
 * Old replicas draining with a deadline: released (the agent told to stop them) once the router
 * has none of their requests in flight, or the deadline passed. Without word from a router the
 * deadline alone decides.
 */
export function releaseDrained(ctx: Pick<ReconcileContext, "now" | "snapshot" | "inflight">, b: PlanBuilder): void {
  for (const r of ctx.snapshot.replicas) {
    if (r.state !== "draining" || r.drainUntil == null || b.isRemoved(r)) continue;
    const inflight = ctx.inflight === undefined ? undefined : (ctx.inflight.get(r.id) ?? 0);
    const timedOut = ctx.now >= r.drainUntil;
    if (inflight !== 0 && !timedOut) continue;
    b.plan.update.push({ id: r.id, patch: { drainUntil: null } });
    const why = inflight === 0 ? "its requests in flight finished" : `the drain timeout passed with ${inflight ?? "an unknown number of"} requests in flight`;
    b.event({ kind: "replica.drained", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${r.model}: ${why}`, data: { replica: r.id, model: r.model, timed_out: inflight !== 0 } });
  }
}
