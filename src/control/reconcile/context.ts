// What every reconcile step reads: the snapshot indexed once, the time, and the rules for
// reading time stamps across gaps the control plane did not watch. Read-only; steps write only
// into the PlanBuilder.

import type { EngineReport } from "../../protocol/heartbeat";
import type { NodeState } from "../../protocol/views";
import type { Stall } from "../load";
import type { WeightsStanding } from "../weights-placement";
import { heardAt } from "../reachability";
import { nodeState } from "../views";
import type { ReconcileConfig } from "./config";
import type { ModelRow, ModelStateRow, NodeRow, ReplicaRow, Snapshot } from "../types";

export interface ReconcileInput {
  snapshot: Snapshot;
  now: number;
  lastUsed: ReadonlyMap<string, number>;
  config: ReconcileConfig;
  newId: () => string;
  /** Since when the control plane has watched without a gap (its start, or its clock's last jump). */
  watchedSince?: number;
  /** When the clock last jumped (forward past any plausible gap, or backward). */
  jumpedAt?: number;
  /** Per node, the engines its last heartbeat reported; a node absent here has not said (unknown). */
  engines?: ReadonlyMap<string, readonly EngineReport[]>;
  /** When the head node was not listening (load.ts): discounted from nodes' silence. */
  deaf?: readonly Stall[];
  /** Per node, how good it is for each Hub model's weights (weights-placement.ts); absent: nothing known. */
  weights?: WeightsStanding;
  /** The router's requests in flight per replica (absent id: none); undefined: no router's word. */
  inflight?: ReadonlyMap<string, number>;
}

export interface ReconcileContext {
  snapshot: Snapshot;
  now: number;
  lastUsed: ReadonlyMap<string, number>;
  cfg: ReconcileConfig;
  watchedSince: number;
  jumpedAt: number;
  engines: ReadonlyMap<string, readonly EngineReport[]> | undefined;
  deaf: readonly Stall[];
  weights: WeightsStanding | undefined;
  inflight: ReadonlyMap<string, number> | undefined;
  nodes: ReadonlyMap<string, NodeRow>;
  /** The nodes being drained (most often none): what onDrainingNode asks of every replica. */
  draining: ReadonlySet<string>;
  /** Each node's state, its heartbeat read as observed (see heartbeatAt). */
  nodeState: ReadonlyMap<string, NodeState>;
  models: ReadonlyMap<string, ModelRow>;
  /** Model state as the snapshot has it. */
  modelState: ReadonlyMap<string, ModelStateRow>;
}

export function contextOf({ snapshot, now, lastUsed, config, watchedSince = Number.NEGATIVE_INFINITY, jumpedAt = Number.NEGATIVE_INFINITY, engines, deaf = [], weights, inflight }: ReconcileInput): ReconcileContext {
  const ctx: ReconcileContext = {
    snapshot,
    now,
    lastUsed,
    cfg: config,
    watchedSince,
    jumpedAt,
    engines,
    deaf,
    weights,
    inflight,
    nodes: new Map(snapshot.nodes.map((n) => [n.name, n])),
    draining: new Set(snapshot.nodes.filter((n) => n.adminState === "draining").map((n) => n.name)),
    nodeState: new Map(),
    models: new Map(snapshot.models.map((m) => [m.name, m])),
    modelState: new Map(snapshot.modelState.map((s) => [s.model, s])),
  };
  ctx.nodeState = new Map(snapshot.nodes.map((n) => [n.name, nodeState(n.adminState, heartbeatAt(ctx, n), now, config.nodeTimeoutMs)]));
  return ctx;
}

/**
 * A node's last heartbeat, counted from when the control plane started watching and moved later
 * by the time the head node was deaf since (so the unreachable and replace deadlines discount it).
 */
export function heartbeatAt(ctx: Pick<ReconcileContext, "now" | "watchedSince"> & { deaf?: readonly Stall[] }, n: { lastHeartbeat: number }): number {
  return heardAt(n.lastHeartbeat, ctx.now, ctx.watchedSince, ctx.deaf);
}

/** Whether any shard of the replica is on a node being drained. */
export function onDrainingNode(ctx: Pick<ReconcileContext, "draining">, r: ReplicaRow): boolean {
  if (ctx.draining.size === 0) return false;
  for (const s of r.shards) if (ctx.draining.has(s.node)) return true;
  return false;
}

/** Where engines on the node are reached, and whose ports they share: its address, or its name when it has none. */
export function addressOf(ctx: Pick<ReconcileContext, "nodes">, node: string): string {
  return ctx.nodes.get(node)?.address ?? node;
}

// Every step asks the keys of every GPU held, and of every GPU again for placement: each is
// built once (a new string per ask costs its allocation and its hashing in the set).
const gpuKeys = new Map<string, string[]>();

/** A GPU's key in sets of held GPUs. */
export const gpuKey = (node: string, idx: number): string => {
  let keys = gpuKeys.get(node);
  if (!keys) {
    if (gpuKeys.size >= 100_000) gpuKeys.clear();
    gpuKeys.set(node, (keys = []));
  }
  return (keys[idx] ??= `${node}\u0000${idx}`);
};
