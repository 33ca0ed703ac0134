// Step 4: per model, its desired state against what it has. Replicas on draining nodes move
// (stop once the rest cover what is wanted), surplus stops, old failed records go, and what is
// still short becomes a placement request — unless the model is parked or in backoff.

import type { PlacementRequest } from "../placement";
import { desiredReplicas } from "../views";
import { type ReconcileContext, onDrainingNode } from "./context";
import { inBackoff } from "./failures";
import type { PlanBuilder } from "./plan";
import { rollModel } from "./rollout";
import { type ModelRow, type ModelStateRow, type ReplicaRow, emptyModelState } from "../types";

/** What one model is short, as placement takes it, with what orders it among the others. */
export interface ModelRequest extends PlacementRequest {
  ready: number;
  desired: number;
  /** Only a roll's surge replica is asked for (rollout.ts): its failing to fit is not the model's. */
  surgeOnly?: boolean;
}

export interface ModelDecisions {
  /** Models short of what they want and free to start more, in catalog order. */
  requests: ModelRequest[];
  /** Models that have what they want (and are not parked). */
  satisfied: string[];
}

/** The replicas not removed so far, per model, in snapshot order. */
export function replicasByModel(replicas: readonly ReplicaRow[], b: PlanBuilder): Map<string, ReplicaRow[]> {
  const byModel = new Map<string, ReplicaRow[]>();
  for (const r of replicas) {
    if (b.isRemoved(r)) continue;
    let l = byModel.get(r.model);
    if (!l) byModel.set(r.model, (l = []));
    l.push(r);
  }
  return byModel;
}

export function decideModels(ctx: ReconcileContext, b: PlanBuilder, mstate: ReadonlyMap<string, ModelStateRow>, byModel: ReadonlyMap<string, ReplicaRow[]>): ModelDecisions {
  const out: ModelDecisions = { requests: [], satisfied: [] };
  for (const m of ctx.snapshot.models) {
    const d = decideModel(ctx, b, m, mstate.get(m.name), byModel.get(m.name) ?? []);
    if (d === "satisfied") out.satisfied.push(m.name);
    else if (d) out.requests.push(d);
  }
  return out;
}

/** One model: its request, "satisfied", or undefined (parked, or waiting out a backoff). */
export function decideModel(ctx: ReconcileContext, b: PlanBuilder, m: ModelRow, st: ModelStateRow | undefined, reps: readonly ReplicaRow[]): ModelRequest | "satisfied" | undefined {
  const pending = b.plan.modelState.get(m.name);
  const parked = pending?.parked ?? st?.parked ?? false;
  const desired = desiredReplicas(m.spec, st, ctx.now);
  const active = reps.filter((r) => b.stateOf(r) === "starting" || b.stateOf(r) === "ready");
  const staying = active.filter((r) => !onDrainingNode(ctx, r));
  const moving = active.filter((r) => onDrainingNode(ctx, r));
  let readyStaying = staying.filter((r) => b.stateOf(r) === "ready").length;

  moveOffDraining(b, m.name, moving, readyStaying, desired);
  // A parked model is not rolled: nothing new of it would start.
  const roll = parked ? undefined : rollModel(ctx, b, m, staying, desired, reps.some((r) => b.stateOf(r) === "draining"));
  if (roll?.rolling) readyStaying -= roll.stoppedReady + stopSurplus(ctx, b, m.name, roll.fresh, desired);
  else readyStaying -= stopSurplus(ctx, b, m.name, staying, desired);
  forgetFailed(b, reps, readyStaying >= desired && !parked);

  const need = desired - Math.min(staying.filter((r) => b.stateOf(r) !== "draining").length, desired);
  const surge = roll?.surge ?? 0;
  if (need + surge <= 0 || parked) return parked ? undefined : "satisfied";
  if (inBackoff(pending ? { ...(st ?? emptyModelState(m.name)), ...pending } : st, ctx.now, ctx.cfg)) return undefined;
  return {
    model: m.name,
    count: need + surge,
    profiles: m.spec.profiles,
    placement: m.spec.placement,
    nodesInUse: new Set(active.flatMap((r) => r.shards.map((s) => s.node))),
    ready: readyStaying,
    desired,
    ...(need <= 0 ? { surgeOnly: true } : {}),
  };
}

/**
 * Drain: a replica on a draining node stops only once the replicas elsewhere cover what is
 * wanted, so the model never has fewer ready than before the drain began. Starting ones have
 * served nothing yet and stop at once.
 */
export function moveOffDraining(b: PlanBuilder, model: string, moving: readonly ReplicaRow[], readyStaying: number, desired: number): void {
  for (const r of moving) {
    if (b.stateOf(r) === "starting" || readyStaying >= desired) {
      b.setState(r, "draining");
      b.event({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${model}: its node ${r.shards[0]!.node} is draining and ${readyStaying} ready elsewhere cover it` });
    }
  }
}

/**
 * Surplus: starting ones first (they serve nothing yet), then the longest idle; a replica whose
 * idleness is unknown counts as busy, never as idle. Returns how many ready replicas it stopped.
 */
export function stopSurplus(ctx: Pick<ReconcileContext, "lastUsed">, b: PlanBuilder, model: string, staying: readonly ReplicaRow[], desired: number): number {
  if (staying.length <= desired) return 0;
  const order = [...staying].sort((x, y) => {
    const sx = b.stateOf(x) === "starting" ? 0 : 1;
    const sy = b.stateOf(y) === "starting" ? 0 : 1;
    if (sx !== sy) return sx - sy;
    const ux = ctx.lastUsed.get(x.id) ?? Number.POSITIVE_INFINITY;
    const uy = ctx.lastUsed.get(y.id) ?? Number.POSITIVE_INFINITY;
    return ux - uy || (x.id < y.id ? -1 : 1);
  });
  let ready = 0;
  for (const r of order.slice(0, staying.length - desired)) {
    if (b.stateOf(r) === "ready") ready++;
    b.setState(r, "draining");
    b.event({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${model}: it wants ${desired}, has ${staying.length}` });
  }
  return ready;
}

/** Failed records: only the newest is kept, for display; none once the model is satisfied. */
export function forgetFailed(b: PlanBuilder, reps: readonly ReplicaRow[], satisfied: boolean): void {
  const failed = reps.filter((r) => b.stateOf(r) === "failed").sort((x, y) => y.updatedAt - x.updatedAt);
  for (const r of failed.slice(satisfied ? 0 : 1)) b.remove(r);
}
