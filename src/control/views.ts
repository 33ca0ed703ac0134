// The node, replica and model tables, derived from one store snapshot. A pure function: the
// clock reading and the router's last-used map come in as arguments, so the same inputs give
// the same tables, and the summary (summary.ts) is computed from these very tables.

import { rolloutView } from "./rollout-view";
import { type FleetCapacity, fleetCapacity, modelNeverFits, neverText } from "./capacity";
import { type DrainModelFacts, drainProgress } from "./drain";
import { plural } from "../lib/format";
import { runPaced, runSteps } from "../lib/steps";
import { isFetching } from "./weights-progress";
import type { EngineReport } from "../protocol/heartbeat";
import type { GpuView, ModelView, NodeState, NodeView, ReplicaView, RolloutView, Tables } from "../protocol/views";
import { UNSTATED_PROTOCOL } from "../protocol/skew";
import type { ModelRow, ModelStateRow, ReplicaRow, Snapshot } from "./types";

export interface ViewInputs {
  snapshot: Snapshot;
  now: number;
  /** Replica id → last time the router sent it a request (ms). Absent means unknown. */
  lastUsed: ReadonlyMap<string, number>;
  /** Without a heartbeat for this long a node is unreachable. */
  nodeTimeoutMs: number;
  /** Since when the control plane has watched without a gap (clock-watch.ts). */
  watchedSince?: number;
  /** Per node, the engines its last heartbeat reported; absent when it has not said. */
  engines?: ReadonlyMap<string, readonly EngineReport[]>;
  /** The router's requests in flight per replica, for a roll's draining replicas; absent: not known. */
  inflight?: ReadonlyMap<string, number>;
}

/**
 * A time stamped before `since` (or in the future, after the clock went back) counts from
 * `since`: a gap the control plane did not watch is no evidence of silence or idleness.
 */
export function observedFrom(t: number, now: number, since: number): number {
  return t > now ? Math.min(now, since) : Math.max(t, since);
}

/** Replica states that hold their GPUs. A failed replica's process is gone, so its cards are not. */
export function holdsGpus(state: string): boolean {
  return state === "starting" || state === "ready" || state === "draining";
}

export function nodeState(adminState: string, lastHeartbeat: number, now: number, timeoutMs: number): NodeState {
  // Unreachable first: a cordoned node that stopped answering needs someone to look at the
  // machine, not at its schedule.
  if (now - lastHeartbeat > timeoutMs) return "unreachable";
  // Never placed on, whatever else it says, until an operator approves it.
  if (adminState === "pending") return "pending";
  if (adminState === "cordoned") return "cordoned";
  if (adminState === "draining") return "draining";
  return "ready";
}

/**
 * How many replicas a model should have now. Against this, not `min`, a model is satisfied:
 * an on-demand model's min is 0, yet once asked for it wants one.
 */
export function desiredReplicas(spec: ModelRow["spec"], state: ModelStateRow | undefined, now: number): number {
  const { min, max } = spec.replicas;
  if (spec.on_demand) {
    const asked = state?.lastRequestedAt != null && now - state.lastRequestedAt < spec.idle_timeout;
    if (!asked) return min;
    return Math.min(Math.max(min, 1, state?.scaleTarget ?? 0), Math.max(max, 1));
  }
  const target = state?.scaleTarget ?? min;
  return Math.min(Math.max(target, min), max);
}

/** Seconds since last use, or -1 when the router has never reported this replica. */
export function idleSeconds(id: string, lastUsed: ReadonlyMap<string, number>, now: number): number {
  const t = lastUsed.get(id);
  if (t === undefined) return -1;
  return Math.max(0, Math.floor((now - t) / 1000));
}

const iso = (ms: number) => new Date(ms).toISOString();

export function buildTables(inputs: ViewInputs): Tables {
  return runSteps(tableSteps(inputs));
}

/**
 * The same tables, paced: `pause` runs between the GPU, node, replica and model views (at a few
 * thousand nodes each is milliseconds of work), so a busy head node answers heartbeats in between.
 */
export function buildTablesPaced(inputs: ViewInputs, pause: () => Promise<void>): Promise<Tables> {
  return runPaced(tableSteps(inputs), pause);
}

function* tableSteps({ snapshot, now, lastUsed, nodeTimeoutMs, watchedSince = Number.NEGATIVE_INFINITY, engines, inflight }: ViewInputs): Generator<void, Tables> {
  const { gpusByNode, memoryByNode } = gpuViews(snapshot);
  yield;
  const weightsByNode = new Map<string, string[]>();
  for (const w of snapshot.weights) {
    let list = weightsByNode.get(w.node);
    if (!list) weightsByNode.set(w.node, (list = []));
    list.push(w.model);
  }
  const drains = drainProgress(snapshot, drainFacts(snapshot, now));
  const nodes: NodeView[] = snapshot.nodes.map((n) => {
    const gpus = gpusByNode.get(n.name) ?? [];
    let free = 0;
    let unhealthy = 0;
    for (const g of gpus) {
      if (!g.healthy) unhealthy++;
      else if (g.in_use_by === null) free++;
    }
    const view: NodeView = {
      name: n.name,
      state: nodeState(n.adminState, observedFrom(n.lastHeartbeat, now, watchedSince), now, nodeTimeoutMs),
      admin_state: n.adminState,
      address: n.address,
      fabrics: n.fabrics,
      labels: n.labels,
      agent_version: n.agentVersion,
      agent_protocol: n.agentProtocol ?? UNSTATED_PROTOCOL,
      gpus,
      models: weightsByNode.get(n.name) ?? [],
      last_heartbeat: iso(n.lastHeartbeat),
      gpu_total: gpus.length,
      gpu_free: free,
      gpu_unhealthy: unhealthy,
      gpu_memory_mib: memoryByNode.get(n.name) ?? 0,
      discovery_error: snapshot.discovery?.get(n.name)?.error ?? null,
      ...(snapshot.discovery?.get(n.name)?.kept && gpus.length > 0 ? { gpus_last_known: true as const } : {}),
      engines: (engines?.get(n.name) ?? []).map((e) => ({ engine: e.engine, version: e.version, error: e.error })),
    };
    const drain = drains.get(n.name);
    return drain ? { ...view, drain } : view;
  });
  yield;
  const replicas = replicaViews(snapshot, lastUsed, now);
  yield;
  return { nodes, replicas, models: modelViews(snapshot, now, engines, inflight) };
}

/** What the drain judgement reads per model, only when some node is draining. */
function drainFacts(snapshot: Snapshot, now: number): Map<string, DrainModelFacts> {
  const out = new Map<string, DrainModelFacts>();
  if (!snapshot.nodes.some((n) => n.adminState === "draining")) return out;
  const stateByModel = new Map(snapshot.modelState.map((s) => [s.model, s]));
  for (const m of snapshot.models) {
    const state = stateByModel.get(m.name);
    out.set(m.name, { state, desired: desiredReplicas(m.spec, state, now) });
  }
  return out;
}

/** Each node's GPUs with who holds them, and its GPU memory counting shared memory once. */
function gpuViews(snapshot: Snapshot): { gpusByNode: Map<string, GpuView[]>; memoryByNode: Map<string, number> } {
  const holder = new Map<string, string>();
  for (const r of snapshot.replicas) {
    if (!holdsGpus(r.state)) continue;
    for (const sh of r.shards) for (const g of sh.gpus) holder.set(`${sh.node}\u0000${g}`, r.id);
  }
  const gpusByNode = new Map<string, GpuView[]>();
  for (const g of snapshot.gpus) {
    let list = gpusByNode.get(g.node);
    if (!list) gpusByNode.set(g.node, (list = []));
    list.push({
      index: g.index,
      uuid: g.uuid,
      name: g.name,
      class: g.class,
      memory_mib: g.memoryMib,
      healthy: g.healthy,
      parent: g.parent,
      in_use_by: holder.get(`${g.node}\u0000${g.index}`) ?? null,
      reason: g.healthy ? null : (snapshot.discovery?.get(g.node)?.reasons.get(g.index) ?? null),
    });
  }
  // A GPU naming another of its node as parent shares that one's memory (MIG compute instances):
  // whichever is held holds the other too, as placement sees it, so free counts agree with it.
  const memoryByNode = new Map<string, number>();
  for (const [node, list] of gpusByNode) {
    let memory = 0;
    const byUuid = list.some((g) => g.parent !== null) ? new Map(list.map((g) => [g.uuid, g])) : undefined;
    const direct = (g: GpuView) => holder.get(`${node}\u0000${g.index}`) ?? null;
    for (const g of list) {
      const shared = g.parent !== null && g.parent !== g.uuid ? byUuid?.get(g.parent) : undefined;
      if (!shared) {
        memory += g.memory_mib;
        continue;
      }
      g.in_use_by ??= direct(shared);
      shared.in_use_by ??= direct(g);
    }
    memoryByNode.set(node, memory);
  }
  return { gpusByNode, memoryByNode };
}

function replicaViews(snapshot: Snapshot, lastUsed: ReadonlyMap<string, number>, now: number): ReplicaView[] {
  return snapshot.replicas.map((r) => ({
    id: r.id,
    model: r.model,
    profile: r.profile,
    // Starting for the control loop; for the operator, waiting for its weights is a state of its own.
    state: isFetching(r) ? "fetching" : r.state,
    shards: r.shards,
    endpoint: r.endpoint,
    idle_seconds: idleSeconds(r.id, lastUsed, now),
    failures: r.failures,
    error: r.error,
    created_at: iso(r.createdAt),
    ready_at: r.readyAt === null ? null : iso(r.readyAt),
  }));
}

function modelViews(snapshot: Snapshot, now: number, engines: ViewInputs["engines"], inflight: ViewInputs["inflight"]): ModelView[] {
  let cap: FleetCapacity | undefined;
  const byModel = new Map<string, ReplicaRow[]>();
  for (const r of snapshot.replicas) {
    let l = byModel.get(r.model);
    if (!l) byModel.set(r.model, (l = []));
    l.push(r);
  }
  const stateByModel = new Map(snapshot.modelState.map((s) => [s.model, s]));
  const countByModel = new Map<string, { ready: number; total: number }>();
  for (const r of snapshot.replicas) {
    let c = countByModel.get(r.model);
    if (!c) countByModel.set(r.model, (c = { ready: 0, total: 0 }));
    c.total++;
    if (r.state === "ready") c.ready++;
  }

  return snapshot.models.map((m) => {
    const st = stateByModel.get(m.name);
    const c = countByModel.get(m.name) ?? { ready: 0, total: 0 };
    const desired = desiredReplicas(m.spec, st, now);
    const parked = st?.parked ?? false;
    const short = parked || c.ready < desired;
    // Short and unable to place more is the actionable case; short with nothing else on the
    // way (no replica starting, draining or awaiting a retry) is just as stuck, even if
    // placement has not said why.
    const placementReason = st?.unplaceableReason ?? null;
    // Whether waiting can help at all: judged on the whole fleet as if all of it were free.
    const never = short && !parked ? modelNeverFits((cap ??= fleetCapacity(snapshot, engines)), m.spec) : undefined;
    const unplaceable = short && (never !== undefined || placementReason !== null || (!parked && c.total <= c.ready));
    let reason: string | null = null;
    if (parked) reason = st?.reason ?? "parked";
    else if (never !== undefined) reason = neverText(never);
    else if (placementReason !== null && short) reason = `not now: ${placementReason}`;
    else if (unplaceable) reason = `wants ${plural(desired, "replica")}, has ${c.ready} ready and none starting`;
    return {
      name: m.name,
      aliases: m.spec.aliases,
      desired,
      ready: c.ready,
      total: c.total,
      min: m.spec.replicas.min,
      max: m.spec.replicas.max,
      on_demand: m.spec.on_demand,
      parked,
      failures: st?.failures ?? 0,
      crashes: st?.crashes ?? 0,
      reason,
      unplaceable,
      never_fits: never !== undefined,
      revision: m.revision,
      ...rolloutField(rolloutView(m, st, byModel.get(m.name) ?? [], desired, now, inflight)),
    };
  });
}

const rolloutField = (r: RolloutView | undefined) => (r ? { rollout: r } : {});
