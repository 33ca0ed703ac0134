// The in-memory image's state (index.ts): the store's rows held in maps, and the pure functions
// that read and change them. Rows are replaced, never edited, so a snapshot handed out never
// changes under its holder.

import type { HeartbeatRequest } from "../../protocol/heartbeat";
import { type ApiKeyRow, type ChangeRead, CHANGE_KINDS, type GpuRow, type ModelRow, type ModelStateRow, type NodeRow, type ReplicaRow, type Snapshot, type TeamRow, emptyModelState } from "../types";

/** The snapshot without what only the control plane's memory adds. */
export type Base = Omit<Snapshot, "discovery" | "revisions" | "version">;
/** The snapshot's arrays, each built again only when its collection changed. */
export type Collection = "nodes" | "gpus" | "weights" | "models" | "replicas" | "modelState";

export interface State {
  nodes: Map<string, NodeRow>;
  gpus: Map<string, GpuRow[]>;
  weights: Map<string, string[]>;
  models: Map<string, ModelRow>;
  aliases: Map<string, string>;
  replicas: Map<string, ReplicaRow>;
  byNode: Map<string, Set<string>>;
  modelState: Map<string, ModelStateRow>;
  allowed: Map<string, string>;
  apiKeys: Map<string, ApiKeyRow>;
  teams: Map<string, TeamRow>;
  credOf: Map<string, string>;
  nodeOfCred: Map<string, string>;
  /** The store's change seq this memory holds everything up to. */
  cursor: number;
}

export const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** Each map's keys as last sorted: reused while the map holds exactly those keys (same size, every one present). */
const sortedKeys = new WeakMap<Map<string, unknown>, string[]>();
export const keysOf = (m: Map<string, unknown>): string[] => {
  const last = sortedKeys.get(m);
  if (last && last.length === m.size && last.every((k) => m.has(k))) return last;
  const keys = [...m.keys()].sort(cmp);
  sortedKeys.set(m, keys);
  return keys;
};
/** A node's weights as snapshot rows, built once per list (lists are replaced, never edited). */
const weightRowsOf = new WeakMap<string[], { node: string; model: string }[]>();
export const weightRows = (node: string, models: string[]) => {
  let rows = weightRowsOf.get(models);
  if (!rows) weightRowsOf.set(models, (rows = models.map((model) => ({ node, model }))));
  return rows;
};
export const byKey = <T>(m: Map<string, T>): T[] => keysOf(m).map((k) => m.get(k)!);
const sameList = <T, U>(a: readonly T[], b: readonly U[], eq: (x: T, y: U) => boolean) => a.length === b.length && a.every((x, i) => eq(x, b[i]!));
const sameRecord = (a: Record<string, string>, b: Record<string, string>) => {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
};
/** Drops keys whose value is undefined, as the store's updates do. */
export const defined = <T extends object>(patch: T): Partial<T> => Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<T>;

export function emptyState(cursor: number): State {
  return {
    nodes: new Map(),
    gpus: new Map(),
    weights: new Map(),
    models: new Map(),
    aliases: new Map(),
    replicas: new Map(),
    byNode: new Map(),
    modelState: new Map(),
    allowed: new Map(),
    apiKeys: new Map(),
    teams: new Map(),
    credOf: new Map(),
    nodeOfCred: new Map(),
    cursor,
  };
}

/** The snapshot's arrays built from the state. */
export function baseOf(s: State): Base {
  const gpus: GpuRow[] = [];
  const weights: { node: string; model: string }[] = [];
  for (const n of keysOf(s.gpus)) gpus.push(...s.gpus.get(n)!);
  for (const n of keysOf(s.weights)) weights.push(...weightRows(n, s.weights.get(n)!));
  return { nodes: byKey(s.nodes), gpus, weights, models: byKey(s.models), replicas: byKey(s.replicas), modelState: byKey(s.modelState) };
}

/** The cached snapshot with the dirty collections' arrays (and the nodes', when last-seen moved) built again; the rest stay the same arrays. */
export function rebuilt(s: State, c: Base, dirty: ReadonlySet<Collection>, nodesStale: boolean): Base {
  const out = { ...c };
  if (nodesStale || dirty.has("nodes")) out.nodes = byKey(s.nodes);
  if (dirty.has("gpus")) {
    out.gpus = [];
    for (const n of keysOf(s.gpus)) out.gpus.push(...s.gpus.get(n)!);
  }
  if (dirty.has("weights")) {
    out.weights = [];
    for (const n of keysOf(s.weights)) out.weights.push(...weightRows(n, s.weights.get(n)!));
  }
  if (dirty.has("models")) out.models = byKey(s.models);
  if (dirty.has("replicas")) out.replicas = byKey(s.replicas);
  if (dirty.has("modelState")) out.modelState = byKey(s.modelState);
  return out;
}

/** True when the heartbeat says exactly what the node's rows already hold. */
export function unchanged(s: State, hb: HeartbeatRequest): boolean {
  const n = s.nodes.get(hb.node);
  if (!n || n.address !== hb.address || n.agentVersion !== hb.agent_version || (n.agentProtocol ?? null) !== (hb.protocol ?? null)) return false;
  if (!sameList(n.fabrics, hb.fabrics, (a, b) => a === b) || !sameRecord(n.labels, hb.labels)) return false;
  const gpus = s.gpus.get(hb.node) ?? [];
  const hg = [...hb.gpus].sort((a, b) => a.index - b.index);
  const gpuSame = (g: GpuRow, h: HeartbeatRequest["gpus"][number]) =>
    g.index === h.index && g.uuid === h.uuid && g.name === h.name && g.class === h.class && g.memoryMib === h.memory_mib && g.healthy === h.healthy && g.parent === h.parent;
  if (!sameList(gpus, hg, gpuSame)) return false;
  const models = [...new Set(hb.models)].sort(cmp);
  return sameList(s.weights.get(hb.node) ?? [], models, (a, b) => a === b);
}

/** A heartbeat the store took, into the state; `seenAt` is the node's last-seen time memory holds (never earlier than now). */
export function remember(s: State, hb: HeartbeatRequest, now: number, seenAt: number | undefined, join?: { credentialHash: string; pending: boolean }): void {
  const prev = s.nodes.get(hb.node);
  s.nodes.set(hb.node, {
    name: hb.node,
    address: hb.address,
    labels: hb.labels,
    fabrics: hb.fabrics,
    adminState: prev?.adminState ?? (join?.pending ? "pending" : "none"),
    lastHeartbeat: Math.max(now, seenAt ?? now),
    agentVersion: hb.agent_version,
    agentProtocol: hb.protocol ?? null,
    registeredAt: join && s.credOf.get(hb.node) !== join.credentialHash ? now : (prev?.registeredAt ?? now),
  } as NodeRow);
  if (join) {
    const old = s.credOf.get(hb.node);
    if (old !== undefined) s.nodeOfCred.delete(old);
    s.credOf.set(hb.node, join.credentialHash);
    s.nodeOfCred.set(join.credentialHash, hb.node);
  }
  const gpus = [...hb.gpus]
    .sort((a, b) => a.index - b.index)
    .map((g): GpuRow => ({ node: hb.node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent }));
  if (gpus.length > 0) s.gpus.set(hb.node, gpus);
  else s.gpus.delete(hb.node);
  const models = [...new Set(hb.models)].sort(cmp);
  if (models.length > 0) s.weights.set(hb.node, models);
  else s.weights.delete(hb.node);
}

/**
 * Another writer's changes into memory: each node, model, replica, key and team they name takes its
 * rows as read (none read: deleted). False, and nothing applied, when the changes do not follow
 * the cursor without a gap or name a kind this version does not know: the caller loads everything.
 */
export function applyChanges(s: State, read: ChangeRead, touched: ReadonlyMap<string, number>): boolean {
  let next = s.cursor + 1;
  for (const c of read.changes) if (c.seq !== next++ || !CHANGE_KINDS.has(c.kind)) return false;
  if (read.changes.length === 0) return true;
  const keys = { node: new Set<string>(), model: new Set<string>(), replica: new Set<string>(), key: new Set<string>(), team: new Set<string>() };
  for (const c of read.changes) keys[c.kind as keyof typeof keys].add(c.key);
  applyNodes(s, keys.node, read, touched);
  const models = new Map(read.models.map((m) => [m.name, m]));
  const states = new Map(read.modelState.map((m) => [m.model, m]));
  for (const name of keys.model) {
    dropModel(s, name);
    const m = models.get(name);
    if (m) setModel(s, m);
    const st = states.get(name);
    if (st) s.modelState.set(name, st);
    else s.modelState.delete(name);
  }
  const replicas = new Map(read.replicas.map((r) => [r.id, r]));
  for (const id of keys.replica) {
    const r = replicas.get(id);
    if (r) setReplica(s, r);
    else dropReplica(s, id);
  }
  const apiKeys = new Map(read.apiKeys.map((k) => [k.name, k]));
  for (const name of keys.key) {
    const k = apiKeys.get(name);
    if (k) s.apiKeys.set(name, k);
    else s.apiKeys.delete(name);
  }
  const teams = new Map(read.teams.map((t) => [t.name, t]));
  for (const name of keys.team) setOrDelete(s.teams, name, teams.get(name));
  s.cursor = read.changes[read.changes.length - 1]!.seq;
  return true;
}

/** The named nodes' rows, GPUs, weights, credentials and allowed addresses, as read; a last-seen time in memory that is newer stays. */
function applyNodes(s: State, names: ReadonlySet<string>, read: ChangeRead, touched: ReadonlyMap<string, number>): void {
  if (names.size === 0) return;
  const rows = new Map(read.nodes.map((n) => [n.name, n]));
  const gpus = new Map<string, GpuRow[]>();
  for (const g of read.gpus) (gpus.get(g.node) ?? gpus.set(g.node, []).get(g.node)!).push(g);
  const weights = new Map<string, string[]>();
  for (const w of read.weights) (weights.get(w.node) ?? weights.set(w.node, []).get(w.node)!).push(w.model);
  const creds = new Map(read.credentials.map((c) => [c.node, c.hash]));
  const addresses = new Map(read.addresses.map((a) => [a.node, a.address]));
  for (const name of names) {
    const row = rows.get(name);
    const seen = Math.max(s.nodes.get(name)?.lastHeartbeat ?? 0, touched.get(name) ?? 0);
    if (row) s.nodes.set(name, seen > row.lastHeartbeat ? { ...row, lastHeartbeat: seen } : row);
    else s.nodes.delete(name);
    setOrDelete(s.gpus, name, gpus.get(name));
    setOrDelete(s.weights, name, weights.get(name));
    const old = s.credOf.get(name);
    if (old !== undefined && s.nodeOfCred.get(old) === name) s.nodeOfCred.delete(old);
    const hash = creds.get(name);
    if (hash !== undefined) {
      s.credOf.set(name, hash);
      s.nodeOfCred.set(hash, name);
    } else s.credOf.delete(name);
    const address = addresses.get(name);
    if (address !== undefined) s.allowed.set(name, address);
    else s.allowed.delete(name);
  }
}

/** The snapshot collections the changes read touch. */
export function changedCollections(read: ChangeRead): Collection[] {
  const kinds = new Set(read.changes.map((c) => c.kind));
  const out: Collection[] = [];
  if (kinds.has("node")) out.push("nodes", "gpus", "weights");
  if (kinds.has("model")) out.push("models", "modelState");
  if (kinds.has("replica")) out.push("replicas");
  return out.length > 0 ? out : ["nodes"];
}

function setOrDelete<T>(m: Map<string, T>, key: string, v: T | undefined): void {
  if (v !== undefined) m.set(key, v);
  else m.delete(key);
}

export function setModel(s: State, m: ModelRow): void {
  s.models.set(m.name, m);
  for (const a of m.spec.aliases ?? []) s.aliases.set(a, m.name);
}

/** Forgets a model and the aliases it owns (its state stays: the caller decides). */
export function dropModel(s: State, name: string): void {
  const m = s.models.get(name);
  if (!m) return;
  for (const a of m.spec.aliases ?? []) if (s.aliases.get(a) === name) s.aliases.delete(a);
  s.models.delete(name);
}

export function setReplica(s: State, r: ReplicaRow): void {
  const old = s.replicas.get(r.id);
  if (old) for (const sh of old.shards) s.byNode.get(sh.node)?.delete(r.id);
  s.replicas.set(r.id, r);
  for (const sh of r.shards) (s.byNode.get(sh.node) ?? s.byNode.set(sh.node, new Set()).get(sh.node)!).add(r.id);
}

export function dropReplica(s: State, id: string): void {
  const old = s.replicas.get(id);
  if (!old) return;
  for (const sh of old.shards) s.byNode.get(sh.node)?.delete(id);
  s.replicas.delete(id);
}

export function patchModelState(s: State, model: string, patch: Partial<Omit<ModelStateRow, "model">>): void {
  s.modelState.set(model, { ...(s.modelState.get(model) ?? emptyModelState(model)), ...defined(patch) });
}
