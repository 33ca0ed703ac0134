// What the control plane hands out, projected from one snapshot: each node's assignments (what
// it should run), the endpoints and catalog the router serves. Pure functions: the engine-key
// derivation and the revisions settled so far come in, the revisions settled now come out.

import { type FleetCapacity, fleetCapacity, modelNeverFits, neverText } from "./capacity";
import type { ModelSpec } from "../protocol/catalog";
import { sglangDataParallel } from "../protocol/engine-layout";
import type { Assignment, EngineReport } from "../protocol/heartbeat";
import type { CatalogEntry, EndpointInfo } from "./interfaces";
import { type ReconcileConfig, agentStartTimeout, parkedAfter, rendezvousPort, serverStartDeadline } from "./reconciler";
import { commonRevision } from "./revisions";
import { FETCHING_NOTE, isFetching } from "./weights-progress";
import { FAILURE_TEXT_MAX, causeOf } from "./reconcile/engine-failure";
import { oneLine } from "../lib/format";
import type { ModelStateRow, ReplicaRow, Snapshot } from "./types";

/** A replica's engine key, or null when the head node hands out none. */
export type EngineKeyOf = (replicaId: string) => string | null;

export interface AssignmentProjection {
  /** Per node (every node in the snapshot), what it should run, in replica order. */
  byNode: Map<string, Assignment[]>;
  /**
   * The revision each live replica was handed, once every one of its nodes had reported theirs:
   * a node downloading a newer revision later must not hand a shard that starts late (or again)
   * another commit than its peers loaded. Replicas no longer live are dropped.
   */
  settled: Map<string, string | null>;
}

/**
 * Every node's assignment set: the shards of replicas starting or ready whose model and profile
 * still exist, and of replicas a roll is draining until their requests in flight finish.
 */
export function assignments(
  snapshot: Snapshot,
  config: ReconcileConfig,
  engineKey: EngineKeyOf,
  settledBefore: ReadonlyMap<string, string | null>,
  /** The revision a file:///PATH source's weights were found at on some node (local-weights.ts), undefined while none has them. */
  localRevision: (source: string) => string | undefined = () => undefined,
): AssignmentProjection {
  const byNode = new Map<string, Assignment[]>(snapshot.nodes.map((n) => [n.name, []]));
  const settled = new Map<string, string | null>();
  const models = new Map(snapshot.models.map((m) => [m.name, m.spec]));
  const uuids = new Map(snapshot.gpus.map((g) => [`${g.node}\u0000${g.index}`, g.uuid]));
  const address = new Map(snapshot.nodes.map((n) => [n.name, n.address]));
  for (const r of snapshot.replicas) {
    if (r.state !== "starting" && r.state !== "ready" && !(r.state === "draining" && r.drainUntil != null)) continue;
    const spec = models.get(r.model);
    const profile = spec?.profiles.find((p) => p.name === r.profile);
    if (!spec || !profile || r.port === null) continue;
    // Weights placed at a file:// source: the revision some node found them at, and the agents copy that.
    const local = spec.source?.startsWith("file://") === true;
    const revision = local ? (localRevision(spec.source!) ?? null) : revisionFor(r, spec, snapshot, settledBefore, settled);
    const key = engineKey(r.id);
    r.shards.forEach((s, rank) => {
      let list = byNode.get(s.node);
      if (!list) byNode.set(s.node, (list = []));
      list.push({
        id: r.id,
        model: r.model,
        served_names: [spec.name, ...spec.aliases],
        profile: profile.name,
        engine: profile.engine,
        port: r.port!,
        gpus: s.gpus,
        engine_key: key,
        revision,
        // Weights from the Hub: the agent fetches the revision's snapshot before the engine starts.
        ...(spec.source !== undefined && revision !== null ? { source: spec.source } : {}),
        // Always given, so an agent's own default (shorter, on older agents) never cuts it short.
        start_timeout_ms: agentStartTimeout(profile, config),
        gpu_uuids: s.gpus.map((i) => uuids.get(`${s.node}\u0000${i}`) ?? `unknown-${i}`),
        args: profile.args,
        env: profile.env,
        shard: { rank, size: r.shards.length, leader_address: address.get(r.shards[0]!.node) ?? "", leader_port: rendezvousPort(r.port!, config) },
      });
    });
  }
  return { byNode, settled };
}

/**
 * The nodes whose assignment sets may differ between two snapshots of the in-memory image (rows
 * are replaced, never edited, so an unchanged row is the same object): nodes whose GPUs were
 * replaced, and every node of a replica that changed, came, went, whose model changed, or one of
 * whose nodes came, went or moved address. Undefined (project every node) for snapshots without a version (a plain store)
 * or when most of the fleet is touched anyway (a full reload).
 */
export function touchedNodes(prev: Snapshot, next: Snapshot): Set<string> | undefined {
  if (prev.version === undefined || next.version === undefined) return undefined;
  // Nodes come, gone or at another address: every node of a replica on one (its leader's address).
  const moved = new Set<string>();
  const nodes = new Map(prev.nodes.map((n) => [n.name, n]));
  for (const n of next.nodes) {
    if (nodes.get(n.name)?.address !== n.address) moved.add(n.name);
    nodes.delete(n.name);
  }
  for (const name of nodes.keys()) moved.add(name);
  const limit = next.nodes.length / 4;
  const touched = new Set(moved);
  touchedGpus(prev, next, touched, limit);
  if (touched.size > limit) return undefined;
  const models = new Map(prev.models.map((m) => [m.name, m]));
  const changedModels = new Set<string>();
  for (const m of next.models) {
    if (models.get(m.name) !== m) changedModels.add(m.name);
    models.delete(m.name);
  }
  for (const name of models.keys()) changedModels.add(name);
  const replicas = new Map(prev.replicas.map((r) => [r.id, r]));
  for (const r of next.replicas) {
    const p = replicas.get(r.id);
    replicas.delete(r.id);
    if (p === r && !changedModels.has(r.model) && (moved.size === 0 || !r.shards.some((sh) => moved.has(sh.node)))) continue;
    for (const sh of r.shards) touched.add(sh.node);
    for (const sh of p?.shards ?? []) touched.add(sh.node);
    if (touched.size > limit) return undefined;
  }
  for (const p of replicas.values()) for (const sh of p.shards) touched.add(sh.node);
  return touched.size > limit ? undefined : touched;
}

/** Nodes whose GPU rows differ (rows in node, index order); it stops once more than `limit` are. */
function touchedGpus(prev: Snapshot, next: Snapshot, touched: Set<string>, limit: number): void {
  if (prev.gpus === next.gpus) return;
  if (prev.gpus.length === next.gpus.length) {
    for (let i = 0; i < prev.gpus.length && touched.size <= limit; i++) {
      const g = prev.gpus[i]!;
      const h = next.gpus[i]!;
      if (g === h) continue;
      touched.add(g.node);
      touched.add(h.node);
    }
    return;
  }
  const key = (g: { node: string; index: number }) => `${g.node}\u0000${g.index}`;
  const before = new Map(prev.gpus.map((g) => [key(g), g]));
  for (const g of next.gpus) {
    if (before.get(key(g)) !== g) touched.add(g.node);
    before.delete(key(g));
  }
  for (const g of before.values()) touched.add(g.node);
}

/** The catalog's pin wins; else the revision this replica was handed, else a common one (settled once every node said). */
function revisionFor(r: ReplicaRow, spec: ModelSpec, snapshot: Snapshot, before: ReadonlyMap<string, string | null>, settled: Map<string, string | null>): string | null {
  const kept = before.get(r.id);
  if (kept !== undefined) settled.set(r.id, kept);
  const pinned = spec.revision ?? kept;
  if (pinned !== undefined) return pinned;
  const chosen = commonRevision(r.model, r.shards.map((s) => s.node), snapshot.revisions ?? new Map());
  if (chosen.settled) settled.set(r.id, chosen.revision);
  return chosen.revision;
}

/** Ready replicas of models still in the catalog, named by the model's name and aliases. */
export function endpoints(snapshot: Snapshot, engineKey: EngineKeyOf): EndpointInfo[] {
  const models = new Map(snapshot.models.map((m) => [m.name, m.spec]));
  const out: EndpointInfo[] = [];
  for (const r of snapshot.replicas) {
    if (r.state !== "ready" || !r.endpoint) continue;
    const spec = models.get(r.model);
    // A replica whose model left the catalog is being torn down; never route to it.
    if (!spec) continue;
    const profile = spec.profiles.find((p) => p.name === r.profile);
    const key = engineKey(r.id);
    const dp = profile ? sglangDataParallel(profile) : undefined;
    const gpus = r.shards.reduce((n, sh) => n + sh.gpus.length, 0);
    out.push({
      id: r.id,
      url: r.endpoint.replace(/\/+$/, ""),
      models: [spec.name, ...spec.aliases],
      engine: profile?.engine ?? "vllm",
      pool: spec.pool,
      weight: spec.weight,
      priority: profile?.priority ?? 0,
      ...(profile?.max_inflight !== undefined ? { max_inflight: profile.max_inflight } : {}),
      ...(key !== null ? { key } : {}),
      ...(dp ? { data_parallel: dp } : {}),
      ...(gpus > 0 ? { gpus } : {}),
    });
  }
  return out;
}

/** What identifies an endpoint list: an unchanged one is not re-published. */
export function endpointsFingerprint(eps: readonly EndpointInfo[]): string {
  return eps.map((e) => `${e.id}|${e.url}|${e.engine}|${e.pool}|${e.models.join(",")}|${e.weight}|${e.priority}|${e.max_inflight ?? ""}|${dpText(e.data_parallel)}|${e.gpus ?? ""}`).join(";");
}

function dpText(dp: EndpointInfo["data_parallel"]): string {
  return dp ? `${dp.dp}x${dp.tp}${dp.dp_attention ? "a" : ""}` : "";
}

/**
 * The catalog as the router needs it: names, aliases, pools, how long a cold on-demand model may
 * take, and why one can never run (judged with the engine versions the nodes reported).
 */
export function catalog(snapshot: Snapshot, config: Pick<ReconcileConfig, "startTimeoutMs" | "startMarginMs">, engines?: ReadonlyMap<string, readonly EngineReport[]>): CatalogEntry[] {
  const state = new Map(snapshot.modelState.map((st) => [st.model, st]));
  const starting = startingByModel(snapshot);
  let cap: FleetCapacity | undefined;
  return snapshot.models.map((m) => {
    const spec = m.spec;
    // The router holds a request for a cold on-demand model as long as a replica may still come up.
    const startMs = Math.max(...spec.profiles.map((p) => serverStartDeadline(p, config)));
    const entry: CatalogEntry = { name: m.name, aliases: spec.aliases, on_demand: spec.on_demand, pool: spec.pool, created: Math.floor(m.createdAt / 1000), start_timeout_ms: startMs };
    const st = state.get(m.name);
    if (st?.parked) entry.unavailable = { kind: "parked", reason: parkedReason(m.name, st, st.reason) };
    else {
      const never = modelNeverFits((cap ??= fleetCapacity(snapshot, engines)), spec);
      if (never !== undefined) entry.unavailable = { kind: "never", reason: `'${m.name}' ${neverText(never)}` };
    }
    const s = starting.get(m.name);
    if (s !== undefined) entry.starting = s;
    return entry;
  });
}

/** Per model, its oldest replica still starting that has a node: where it starts (the leader's node) and since when. */
function startingByModel(snapshot: Snapshot): Map<string, { node: string; since: number; fetching?: string }> {
  const out = new Map<string, { node: string; since: number; fetching?: string }>();
  for (const r of snapshot.replicas) {
    const node = r.shards[0]?.node;
    if (r.state !== "starting" || node === undefined) continue;
    const seen = out.get(r.model);
    // Waiting for its weights: how far, for the waiting clients' progress lines.
    const fetching = isFetching(r) ? r.error!.slice(FETCHING_NOTE.length).replace(/^: /, "") : undefined;
    if (seen === undefined || r.createdAt < seen.since) out.set(r.model, { node, since: r.createdAt, ...(fetching !== undefined ? { fetching } : {}) });
  }
  return out;
}

/** The reason quoted to a client: a crash loop's words and the failure's (with its log's pointer) whole. */
const PARKED_REASON_MAX = FAILURE_TEXT_MAX + 120;

/**
 * What a client is told of a parked model: why, and that an operator (not waiting) brings it
 * back. On one line: a reason stored by an older release held the engine's last lines.
 */
export function parkedReason(model: string, counts: Pick<ModelStateRow, "failures" | "crashes">, reason: string | null): string {
  const why = reason ? `: ${oneLine(causeOf(reason), PARKED_REASON_MAX)}` : "";
  return `'${model}' is parked after ${parkedAfter(counts)}${why}; it is not retried until an operator runs \`llmgw models unpark ${model}\``;
}
