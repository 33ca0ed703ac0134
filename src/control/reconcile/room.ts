// Step 6: making room. An on-demand model asked for and placed nowhere may take the GPUs of the
// longest-idle replica that frees enough of them. Never a replica whose idleness is unknown (a
// restarted router would otherwise offer up the whole fleet), never one idle for less than its
// own model's idle_timeout, never taking a model below its min, never one of a model of higher
// priority (a lower profile priority number) than the one asking.

import type { ModelSpec } from "../../protocol/catalog";
import { type PlacementNode, type PlacementResult, place } from "../placement";
import { observedFrom } from "../views";
import { type ReconcileContext, gpuKey, onDrainingNode } from "./context";
import type { ModelRequest } from "./desired";
import type { PlanBuilder } from "./plan";
import type { ReplicaRow } from "../types";

export interface RoomInput {
  /** in the order they were placed */
  requests: readonly ModelRequest[];
  /** placement's answer; evictions add their placements to it and clear the model's reason */
  result: PlacementResult;
  /** GPUs held before this step's placements (gpuKey) */
  held: ReadonlySet<string>;
  pnodes: readonly PlacementNode[];
  byModel: ReadonlyMap<string, ReplicaRow[]>;
}

/** A replica that may be evicted, with when it was last used as observed. */
export interface EvictionCandidate {
  r: ReplicaRow;
  used: number;
  m: ModelSpec;
}

const priorityOf = (spec: ModelSpec) => Math.min(...spec.profiles.map((p) => p.priority));

/** Replicas that may give up their GPUs to `req`, longest idle first. */
export function evictionCandidates(ctx: ReconcileContext, b: PlanBuilder, req: ModelRequest, spec: ModelSpec, byModel: ReadonlyMap<string, ReplicaRow[]>, evictedFrom: ReadonlyMap<string, number>): EvictionCandidate[] {
  const { now } = ctx;
  const myPriority = priorityOf(spec);
  return ctx.snapshot.replicas
    .filter((r) => !b.isRemoved(r) && b.stateOf(r) === "ready" && !onDrainingNode(ctx, r))
    .map((r) => {
      const u = ctx.lastUsed.get(r.id);
      return { r, used: u === undefined ? u : observedFrom(u, now, ctx.jumpedAt), m: ctx.models.get(r.model)?.spec };
    })
    .filter((c): c is EvictionCandidate => {
      if (c.used === undefined || !c.m || c.r.model === req.model) return false;
      if (now - c.used < c.m.idle_timeout) return false;
      if (priorityOf(c.m) < myPriority) return false;
      const active = (byModel.get(c.r.model) ?? []).filter((x) => b.stateOf(x) === "ready" || b.stateOf(x) === "starting").length;
      return active - (evictedFrom.get(c.r.model) ?? 0) - 1 >= c.m.replicas.min;
    })
    .sort((x, y) => x.used - y.used || (x.r.id < y.r.id ? -1 : 1));
}

export function makeRoom(ctx: ReconcileContext, b: PlanBuilder, { requests, result, held, pnodes, byModel }: RoomInput): void {
  const { now } = ctx;
  const placedCount = new Map<string, number>();
  for (const p of result.placed) placedCount.set(p.model, (placedCount.get(p.model) ?? 0) + 1);
  const evictedFrom = new Map<string, number>();
  for (const req of requests) {
    const spec = ctx.models.get(req.model)?.spec;
    // A roll's surge takes free GPUs only: it never evicts another model's replica.
    if (!spec?.on_demand || req.surgeOnly || (placedCount.get(req.model) ?? 0) > 0 || !result.unplaceable.has(req.model)) continue;
    const taken = new Set(held);
    for (const p of result.placed) for (const sh of p.shards) for (const g of sh.gpus) taken.add(gpuKey(sh.node, g));
    for (const c of evictionCandidates(ctx, b, req, spec, byModel, evictedFrom)) {
      const freed = new Set(c.r.shards.flatMap((sh) => sh.gpus.map((g) => gpuKey(sh.node, g))));
      const trial = pnodes.map((n) => ({ ...n, gpus: n.gpus.map((g) => ({ ...g, used: taken.has(gpuKey(n.name, g.index)) && !freed.has(gpuKey(n.name, g.index)) })) }));
      const got = place(trial, [{ ...req, count: 1 }]).placed[0];
      if (!got) continue;
      b.setState(c.r, "draining");
      evictedFrom.set(c.r.model, (evictedFrom.get(c.r.model) ?? 0) + 1);
      const idleMin = Math.floor((now - c.used) / 60_000);
      b.event({
        kind: "replica.evicted",
        subject: `replica/${c.r.id}`,
        message: `evicted replica ${c.r.id} of ${c.r.model} (idle ${idleMin}m) to make room for ${req.model}`,
        data: { replica: c.r.id, model: c.r.model, for_model: req.model, idle_seconds: Math.floor((now - c.used) / 1000) },
      });
      result.placed.push(got);
      result.unplaceable.delete(req.model);
      break;
    }
  }
}
