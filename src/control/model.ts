// The in-memory model of the store: a write-through StorePort around the real one, so the
// control plane reads (snapshots, trust, credentials, the catalog) from memory and a heartbeat costs
// the same at 100 nodes as at 5,000. The store stays the truth: the model is loaded from it at
// start, every write goes to the store first and reaches memory only once the store took it, and
// a failed write (or any doubt: invalidate()) makes the next read load everything again, so
// memory never holds what the database refused.
//
// An unchanged heartbeat (same address, labels, fabrics, agent version, GPUs and weights) writes
// nothing at once: its time is kept in memory and written for all nodes in one transaction at
// most once a second (flush(), also called on stop). snapshot() hands out arrays built once per
// change (copy on write: rows are replaced, never edited, so a snapshot never changes under its
// holder); touching last-seen times rebuilds only the nodes array, lazily, on the next call.

import { letIoIn, type Scheduler } from "../lib/scheduler";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { AdminState } from "../protocol/views";
import { joinRefused } from "./admission";
import type { JoinWrite, ReplicaRead, StorePort, UnchangedHeartbeats } from "./store-port";
import { type ApiKeyRow, type ChangeRead, CHANGE_KINDS, type ControlPlaneRecord, type ControlPlaneRow, type EventRow, type Fence, type GpuRow, type Lease, type ModelRow, type ModelStateRow, type ModelWrite, type NewEvent, type NodeReportRow, type NodeRow, type NodeTrust, type PlanWrite, type ReplicaRow, type RouterUsage, type SharedTokenKind, type Snapshot, type StoreChange, type TokenDigests, emptyModelState } from "./types";

/** How often touched last-seen times reach the store. */
export const TOUCH_FLUSH_MS = 1000;
/** Changes read at once; a reader further behind loads everything (cheaper then). */
export const CHANGES_READ_LIMIT = 5000;

type Base = Omit<Snapshot, "discovery" | "revisions" | "version">;
/** The snapshot's arrays, each built again only when its collection changed. */
type Collection = "nodes" | "gpus" | "weights" | "models" | "replicas" | "modelState";

interface State {
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
  credOf: Map<string, string>;
  nodeOfCred: Map<string, string>;
  /** The store's change seq this memory holds everything up to. */
  cursor: number;
}

/** Each map's keys as last sorted: reused while the map holds exactly those keys (same size, every one present). */
const sortedKeys = new WeakMap<Map<string, unknown>, string[]>();
const keysOf = (m: Map<string, unknown>): string[] => {
  const last = sortedKeys.get(m);
  if (last && last.length === m.size && last.every((k) => m.has(k))) return last;
  const keys = [...m.keys()].sort(cmp);
  sortedKeys.set(m, keys);
  return keys;
};
/** A node's weights as snapshot rows, built once per list (lists are replaced, never edited). */
const weightRowsOf = new WeakMap<string[], { node: string; model: string }[]>();
const weightRows = (node: string, models: string[]) => {
  let rows = weightRowsOf.get(models);
  if (!rows) weightRowsOf.set(models, (rows = models.map((model) => ({ node, model }))));
  return rows;
};
const byKey = <T>(m: Map<string, T>): T[] => keysOf(m).map((k) => m.get(k)!);
const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const sameList = <T, U>(a: readonly T[], b: readonly U[], eq: (x: T, y: U) => boolean) => a.length === b.length && a.every((x, i) => eq(x, b[i]!));
const sameRecord = (a: Record<string, string>, b: Record<string, string>) => {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
};
/** Drops keys whose value is undefined, as the store's updates do. */
const defined = <T extends object>(patch: T): Partial<T> => Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<T>;

export class ModelStore implements StorePort, UnchangedHeartbeats {
  private state: State | undefined;
  private loading: Promise<State> | undefined;
  private cached: Base | undefined;
  /** Only last-seen times changed since `cached` was built. */
  private nodesStale = false;
  /** Collections changed since `cached` was built (see changed()). */
  private readonly dirty = new Set<Collection>();
  private readonly touched = new Map<string, number>();
  private lastFlush = Number.NEGATIVE_INFINITY;
  private flushTimer: { cancel(): void } | undefined;
  /** Rises with every change but last-seen touches (Snapshot.version). */
  private version = 0;
  /** Rises with every change of replicas or model state (ReplicaRead.version). */
  private replicasAt = 0;
  /** Transactions this model has asked of the store (tests and benchmarks read it). */
  writes = 0;
  /** Another writer committed: the next read first reads the store's changes since the cursor. */
  private behind = false;
  private catching: Promise<State> | undefined;
  /** Rises when one of this model's writes starts and when it ends: a change read overlapping one is not applied. */
  private writeGen = 0;
  /** Full loads and change reads so far (tests and benchmarks read them). */
  loads = 0;
  changeReads = 0;

  constructor(
    readonly inner: StorePort,
    private readonly scheduler?: Scheduler,
  ) {}

  /** Forget memory: the next read loads everything from the store again. */
  invalidate(): void {
    this.state = undefined;
    this.loading = undefined;
    this.behind = false;
    this.cached = undefined;
    this.version++;
    this.replicasAt++;
  }

  /**
   * Loads everything from the store again while reads go on from memory (the backstop against a
   * missed change notice): heartbeats answered from memory never wait for a full read. The new
   * state replaces memory unless one of this model's writes, or a full load, overlapped the read
   * (then memory stays: the change reads keep it in step, and the next reload tries again). A
   * node's last-seen time never goes back: the newer of memory's and the store's is kept.
   * True when memory was replaced.
   */
  async reload(): Promise<boolean> {
    const s = this.state;
    if (!s) {
      await this.load();
      return true;
    }
    const gen = this.writeGen;
    const fresh = await this.read();
    if (this.state !== s || gen !== this.writeGen) return false;
    // A node's last-seen time never goes back: memory's newer touches outlive the store's older rows.
    const keepTouches = () => {
      for (const [name, n] of s.nodes) {
        const f = fresh.nodes.get(name);
        if (f && n.lastHeartbeat > f.lastHeartbeat) fresh.nodes.set(name, { ...f, lastHeartbeat: n.lastHeartbeat });
      }
    };
    keepTouches();
    // The common case: the store holds what memory does (the watch missed nothing). Then memory
    // stays as it is, and so do the snapshot built from it and everything projected from that:
    // at a few thousand nodes, rebuilding them for nothing costs the head node a noticeable pause.
    const same = await this.holdsAll(fresh, s);
    if (this.state !== s || gen !== this.writeGen) return false;
    if (same) {
      s.cursor = Math.max(s.cursor, fresh.cursor);
      this.behind = true;
      return true;
    }
    // Touched while the comparison let heartbeats in.
    keepTouches();
    this.state = fresh;
    // What others committed after the read's cursor is read at the next read.
    this.behind = true;
    this.cached = undefined;
    this.version++;
    this.replicasAt++;
    return true;
  }

  /**
   * Whether `fresh` (read from the store) holds what memory does, its cursor aside. One
   * collection at a time, the I/O already due let in between (the GPU rows of a few thousand
   * nodes take milliseconds to compare).
   */
  private async holdsAll(fresh: State, mem: State): Promise<boolean> {
    for (const k of Object.keys(mem) as (keyof State)[]) {
      if (k === "cursor") continue;
      if (!Bun.deepEquals(fresh[k], mem[k])) return false;
      await letIoIn(this.scheduler);
    }
    return true;
  }

  /** Loads everything from the store now. */
  async rebuild(): Promise<void> {
    this.invalidate();
    await this.load();
  }

  private load(): Promise<State> {
    if (this.state && this.behind) return this.catchUp(this.state);
    if (this.state) return Promise.resolve(this.state);
    if (!this.loading) {
      const p = this.read().then(
        (s) => {
          if (this.loading === p) {
            this.state = s;
            this.loading = undefined;
          }
          return s;
        },
        (e) => {
          if (this.loading === p) this.loading = undefined;
          throw e;
        },
      );
      this.loading = p;
    }
    return this.loading;
  }

  /** Another writer's commits, read alone: only the rows they name are read again. */
  private catchUp(s: State): Promise<State> {
    this.catching ??= this.readChanges(s).finally(() => (this.catching = undefined));
    return this.catching;
  }

  private async readChanges(s: State): Promise<State> {
    const gen = this.writeGen;
    this.behind = false;
    this.changeReads++;
    let read: ChangeRead;
    try {
      read = await this.inner.changesSince(s.cursor, CHANGES_READ_LIMIT);
    } catch {
      this.invalidate();
      return this.load();
    }
    if (this.state !== s) return this.load();
    // One of this model's own writes overlapped the read: its rows may be older than memory. Next read.
    if (gen !== this.writeGen) {
      this.behind = true;
      return s;
    }
    // A gap (pruned, or a reader too far behind), a kind this version does not know: doubt, load everything.
    if (read.changes.length >= CHANGES_READ_LIMIT || !applyChanges(s, read, this.touched)) {
      this.invalidate();
      return this.load();
    }
    if (read.changes.length > 0) this.changed(...changedCollections(read));
    return s;
  }

  private async read(): Promise<State> {
    this.loads++;
    // Before the rows: the changes read later start where this load surely holds everything (read twice is harmless).
    const cursor = await this.inner.changeCursor();
    const snap = await this.inner.snapshot();
    const [allowed, keys, creds] = [await this.inner.listAllowedAddresses(), await this.inner.listApiKeys(), await this.inner.nodeCredentials()];
    const s: State = {
      nodes: new Map(),
      gpus: new Map(),
      weights: new Map(),
      models: new Map(),
      aliases: new Map(),
      replicas: new Map(),
      byNode: new Map(),
      modelState: new Map(),
      allowed: new Map(allowed.map((a) => [a.node, a.address])),
      apiKeys: new Map(keys.map((k) => [k.name, k])),
      credOf: new Map(creds.map((c) => [c.node, c.hash])),
      nodeOfCred: new Map(creds.map((c) => [c.hash, c.node])),
      cursor,
    };
    for (const n of snap.nodes) {
      const at = this.touched.get(n.name);
      s.nodes.set(n.name, at !== undefined && at > n.lastHeartbeat ? { ...n, lastHeartbeat: at } : n);
    }
    for (const g of snap.gpus) (s.gpus.get(g.node) ?? s.gpus.set(g.node, []).get(g.node)!).push(g);
    for (const w of snap.weights) (s.weights.get(w.node) ?? s.weights.set(w.node, []).get(w.node)!).push(w.model);
    for (const m of snap.models) setModel(s, m);
    for (const r of snap.replicas) setReplica(s, r);
    for (const st of snap.modelState) s.modelState.set(st.model, st);
    return s;
  }

  /**
   * Runs a store write; on failure memory is dropped (the next read reloads), then the error goes on.
   * A write of last-seen times alone leaves the write generation: a read it overlaps keeps the
   * newer of memory's and the store's times anyway.
   */
  private async write<T>(fn: () => Promise<T>, seenOnly = false): Promise<T> {
    this.writes++;
    if (!seenOnly) this.writeGen++;
    try {
      return await fn();
    } catch (e) {
      this.invalidate();
      throw e;
    } finally {
      if (!seenOnly) this.writeGen++;
    }
  }

  private async refreshSeen(): Promise<void> {
    const s = this.state;
    if (!s) return;
    const rows = await this.inner.nodesSeen();
    if (this.state === s) this.mergeSeen(s, rows);
  }

  /** Newer last-seen times into memory (newest wins). */
  private mergeSeen(s: State, rows: readonly { name: string; at: number }[]): void {
    for (const { name, at } of rows) {
      const n = s.nodes.get(name);
      if (n && at > n.lastHeartbeat) {
        s.nodes.set(name, { ...n, lastHeartbeat: at });
        this.nodesStale = true;
      }
    }
  }

  /** Something but last-seen times changed: the snapshot arrays of the named collections (all when none is named) are built again. */
  private changed(...which: Collection[]): void {
    if (this.cached && which.length > 0) for (const c of which) this.dirty.add(c);
    else this.cached = undefined;
    this.version++;
    if (which.length === 0 || which.includes("replicas") || which.includes("modelState")) this.replicasAt++;
  }

  replicaVersion(): number {
    return this.replicasAt;
  }

  // ---- reads --------------------------------------------------------------------------

  async snapshot(): Promise<Snapshot> {
    const s = await this.load();
    this.flushIfDue();
    if (this.cached && (this.nodesStale || this.dirty.size > 0)) this.cached = this.rebuilt(s, this.cached);
    this.nodesStale = false;
    this.dirty.clear();
    if (!this.cached) {
      const gpus: GpuRow[] = [];
      const weights: { node: string; model: string }[] = [];
      for (const n of keysOf(s.gpus)) gpus.push(...s.gpus.get(n)!);
      for (const n of keysOf(s.weights)) weights.push(...weightRows(n, s.weights.get(n)!));
      this.cached = {
        nodes: byKey(s.nodes) as NodeRow[],
        gpus: gpus as GpuRow[],
        weights: weights as { node: string; model: string }[],
        models: byKey(s.models) as ModelRow[],
        replicas: byKey(s.replicas) as ReplicaRow[],
        modelState: byKey(s.modelState) as ModelStateRow[],
      };
    }
    return { ...this.cached, version: this.version };
  }

  /** The cached snapshot with the dirty collections' arrays (and the nodes', when last-seen moved) built again; the rest stay the same arrays. */
  private rebuilt(s: State, c: Base): Base {
    const d = this.dirty;
    const out = { ...c };
    if (this.nodesStale || d.has("nodes")) out.nodes = byKey(s.nodes);
    if (d.has("gpus")) {
      out.gpus = [];
      for (const n of keysOf(s.gpus)) out.gpus.push(...s.gpus.get(n)!);
    }
    if (d.has("weights")) {
      out.weights = [];
      for (const n of keysOf(s.weights)) out.weights.push(...weightRows(n, s.weights.get(n)!));
    }
    if (d.has("models")) out.models = byKey(s.models);
    if (d.has("replicas")) out.replicas = byKey(s.replicas);
    if (d.has("modelState")) out.modelState = byKey(s.modelState);
    return out;
  }

  async replicaSnapshot(node?: string): Promise<ReplicaRead> {
    const s = await this.load();
    if (node === undefined) {
      const snap = await this.snapshot();
      return { replicas: snap.replicas, modelState: snap.modelState, version: this.replicasAt };
    }
    const replicas = [...(s.byNode.get(node) ?? [])].sort(cmp).map((id) => s.replicas.get(id)!);
    const models = new Set(replicas.map((r) => r.model));
    return { replicas, modelState: [...models].flatMap((m) => s.modelState.get(m) ?? []), version: this.replicasAt };
  }

  async nodeTrust(name: string): Promise<NodeTrust> {
    const s = await this.load();
    const row = s.nodes.get(name);
    return { exists: !!row, hasCredential: s.credOf.has(name), adminState: row?.adminState, allowedAddress: s.allowed.get(name) };
  }

  async nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return (await this.load()).nodeOfCred.get(hash);
  }

  async credentialHashOf(name: string): Promise<string | undefined> {
    return (await this.load()).credOf.get(name);
  }

  async countNodes(): Promise<number> {
    return (await this.load()).nodes.size;
  }

  async listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    const s = await this.load();
    return [...s.allowed.keys()].sort(cmp).map((node) => ({ node, address: s.allowed.get(node)! }));
  }

  async models(): Promise<ModelRow[]> {
    return byKey((await this.load()).models);
  }

  async modelByName(name: string): Promise<ModelRow | undefined> {
    return (await this.load()).models.get(name);
  }

  async modelByAlias(alias: string): Promise<ModelRow | undefined> {
    const s = await this.load();
    const m = s.aliases.get(alias);
    return m === undefined ? undefined : s.models.get(m);
  }

  async parkedModels(): Promise<string[]> {
    return [...(await this.load()).modelState.values()].filter((st) => st.parked).map((st) => st.model);
  }

  async listApiKeys(): Promise<ApiKeyRow[]> {
    return byKey((await this.load()).apiKeys);
  }

  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return this.inner.listEvents(opts);
  }

  // ---- heartbeats ---------------------------------------------------------------------

  /** True when the heartbeat says exactly what the node's rows already hold. */
  private unchanged(s: State, hb: HeartbeatRequest): boolean {
    const n = s.nodes.get(hb.node);
    if (!n || n.address !== hb.address || n.agentVersion !== hb.agent_version) return false;
    if (!sameList(n.fabrics, hb.fabrics, (a, b) => a === b) || !sameRecord(n.labels, hb.labels)) return false;
    const gpus = s.gpus.get(hb.node) ?? [];
    const hg = [...hb.gpus].sort((a, b) => a.index - b.index);
    const gpuSame = (g: GpuRow, h: HeartbeatRequest["gpus"][number]) =>
      g.index === h.index && g.uuid === h.uuid && g.name === h.name && g.class === h.class && g.memoryMib === h.memory_mib && g.healthy === h.healthy && g.parent === h.parent;
    if (!sameList(gpus, hg, gpuSame)) return false;
    const models = [...new Set(hb.models)].sort(cmp);
    return sameList(s.weights.get(hb.node) ?? [], models, (a, b) => a === b);
  }

  async applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    const s = await this.load();
    const existing = s.nodes.get(hb.node);
    if (!join && existing && this.unchanged(s, hb)) {
      this.touch(s, existing, now);
      return { created: false, taken: false };
    }
    // The same join sent again (its answer was lost) carries the same credential: see control/join.ts.
    if (join && existing && joinRefused(s.credOf.get(hb.node) ?? null, join.credentialHash)) return { created: false, taken: true };
    const result = await this.write(() => this.inner.applyHeartbeat(hb, now, join));
    if (result.taken || this.state !== s) return result;
    this.remember(s, hb, now, join);
    this.changed("nodes", "gpus", "weights");
    return result;
  }

  /** Several joins in one transaction: the ones memory already refuses are not written. */
  async applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    const s = await this.load();
    const out = joins.map(() => ({ created: false, taken: true }));
    const pick: number[] = [];
    joins.forEach((j, i) => {
      if (!(s.nodes.has(j.hb.node) && joinRefused(s.credOf.get(j.hb.node) ?? null, j.join.credentialHash))) pick.push(i);
    });
    if (pick.length === 0) return out;
    const result = await this.write(() => this.inner.applyJoins(pick.map((i) => joins[i]!), now));
    pick.forEach((i, k) => (out[i] = result[k]!));
    if (this.state !== s) return out;
    for (const i of pick) if (!out[i]!.taken) this.remember(s, joins[i]!.hb, now, joins[i]!.join);
    this.changed("nodes", "gpus", "weights");
    return out;
  }

  async nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    const s = await this.load();
    return nodes.flatMap((n) => s.gpus.get(n) ?? []);
  }

  /**
   * Several heartbeats, in order: the unchanged ones are touched in memory, the others written in
   * one transaction (a node with one written stays written for the rest of the group, so its
   * last heartbeat is what ends in the store).
   */
  async applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    const s = await this.load();
    const out = hbs.map(() => ({ created: false }));
    const written = new Set<string>();
    const pick: number[] = [];
    hbs.forEach((hb, i) => {
      const existing = s.nodes.get(hb.node);
      if (existing && !written.has(hb.node) && this.unchanged(s, hb)) this.touch(s, existing, now);
      else (written.add(hb.node), pick.push(i));
    });
    if (pick.length === 0) return out;
    const result = await this.write(() => this.inner.applyHeartbeats(pick.map((i) => hbs[i]!), now));
    pick.forEach((i, k) => (out[i] = result[k]!));
    if (this.state !== s) return out;
    for (const i of pick) this.remember(s, hbs[i]!, now);
    this.changed("nodes", "gpus", "weights");
    return out;
  }

  /**
   * True (and the node's last-seen time touched) when the heartbeat says exactly what memory
   * holds: answered with no write, nothing else to do. False when it must be written.
   */
  async touchIfUnchanged(hb: HeartbeatRequest, now: number): Promise<boolean> {
    const s = this.state ?? (await this.load());
    const existing = s.nodes.get(hb.node);
    if (!existing || !this.unchanged(s, hb)) return false;
    this.touch(s, existing, now);
    return true;
  }

  /** A heartbeat the store took, now in memory too. */
  private remember(s: State, hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): void {
    const prev = s.nodes.get(hb.node);
    s.nodes.set(hb.node, {
      name: hb.node,
      address: hb.address,
      labels: hb.labels,
      fabrics: hb.fabrics,
      adminState: prev?.adminState ?? (join?.pending ? "pending" : "none"),
      lastHeartbeat: Math.max(now, this.touched.get(hb.node) ?? now),
      agentVersion: hb.agent_version,
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

  private touch(s: State, row: NodeRow, at: number): void {
    if (at > row.lastHeartbeat) {
      s.nodes.set(row.name, { ...row, lastHeartbeat: at });
      this.nodesStale = true;
    }
    this.touched.set(row.name, Math.max(at, this.touched.get(row.name) ?? at));
    this.flushIfDue();
  }

  /** Writes touched last-seen times when a second has passed since the last flush, else arms one flush for then. */
  private flushIfDue(): void {
    if (this.touched.size === 0) return;
    const now = this.scheduler?.mono() ?? Number.POSITIVE_INFINITY;
    if (now - this.lastFlush >= TOUCH_FLUSH_MS) {
      void this.flush().catch(() => undefined);
      return;
    }
    if (!this.flushTimer && this.scheduler)
      this.flushTimer = this.scheduler
        .after(TOUCH_FLUSH_MS - (now - this.lastFlush), () => {
          this.flushTimer = undefined;
          void this.flush().catch(() => undefined);
        })
        .unref();
  }

  /** Writes every touched last-seen time in one transaction (at stop, and once a second while heartbeats come). */
  async flush(): Promise<void> {
    this.flushTimer?.cancel();
    this.flushTimer = undefined;
    if (this.touched.size === 0) return;
    this.lastFlush = this.scheduler?.mono() ?? 0;
    const seen = [...this.touched].map(([name, at]) => ({ name, at }));
    this.touched.clear();
    try {
      await this.write(() => this.inner.touchNodes(seen), true);
    } catch (e) {
      // Memory still holds the newer times (the reload below keeps them): try again next time.
      for (const { name, at } of seen) if (!this.touched.has(name)) this.touched.set(name, at);
      throw e;
    }
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    return this.write(() => this.inner.touchNodes(seen)).then(() => this.invalidate());
  }

  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return this.load().then((s) => [...s.credOf].map(([node, hash]) => ({ node, hash })));
  }

  // ---- writes applied in memory ---------------------------------------------------------

  async applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    const s = await this.load();
    await this.write(() => this.inner.applyPlan(plan, now, fence));
    if (this.state !== s) return;
    for (const r of plan.create)
      setReplica(s, { id: r.id, model: r.model, profile: r.profile, state: "starting", shards: r.shards, port: r.port, endpoint: r.endpoint, failures: 0, error: null, createdAt: now, updatedAt: now, readyAt: null } as ReplicaRow);
    for (const u of plan.update) {
      const r = s.replicas.get(u.id);
      if (r) setReplica(s, { ...r, ...defined(u.patch), updatedAt: now });
    }
    for (const id of plan.remove) dropReplica(s, id);
    for (const [model, patch] of plan.modelState) if (Object.keys(patch).length > 0) patchModelState(s, model, patch);
    for (const n of plan.nodeAdmin) {
      const row = s.nodes.get(n.node);
      if (row) s.nodes.set(n.node, { ...row, adminState: n.state });
    }
    this.changed("replicas", "modelState", ...(plan.nodeAdmin.length > 0 ? (["nodes"] as const) : []));
  }

  async updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    const s = await this.load();
    await this.write(() => this.inner.updateModelState(model, patch));
    if (this.state !== s) return;
    patchModelState(s, model, patch);
    this.changed("modelState");
  }

  // ---- rare writes: through the store, then memory loads again ------------------------

  private async thenReload<T>(fn: () => Promise<T>): Promise<T> {
    const out = await this.write(fn);
    this.invalidate();
    return out;
  }

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return this.thenReload(() => this.inner.deleteNode(name, replicaIds, events, now)).finally(() => this.touched.delete(name));
  }
  async setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    const s = await this.load();
    const out = await this.write(() => this.inner.setAllowedAddress(name, address, now));
    if (this.state === s) {
      if (address === null) s.allowed.delete(name);
      else s.allowed.set(name, address);
    }
    return out;
  }
  async setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    const s = await this.load();
    const out = await this.write(() => this.inner.setAdminState(name, state));
    const row = s.nodes.get(name);
    if (this.state === s && row && out.previous !== undefined) {
      s.nodes.set(name, { ...row, adminState: state });
      this.changed("nodes");
    }
    return out;
  }
  /** Written through: memory takes the entries as the store wrote them (a spec as its JSON reads back). */
  async saveModels(models: ModelWrite[], now: number): Promise<void> {
    const s = await this.load();
    await this.write(() => this.inner.saveModels(models, now));
    if (this.state !== s) return;
    for (const { spec, revision, created } of models) {
      const prev = s.models.get(spec.name);
      // Memory does not hold what the store just updated: doubt, so load everything again.
      if (!created && !prev) return this.invalidate();
      dropModel(s, spec.name);
      setModel(s, { name: spec.name, spec: JSON.parse(JSON.stringify(spec)) as ModelRow["spec"], revision, createdAt: created || !prev ? now : prev.createdAt, updatedAt: now });
      patchModelState(s, spec.name, { failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null });
    }
    this.changed("models", "modelState");
  }
  async deleteModel(name: string): Promise<boolean> {
    const s = await this.load();
    const out = await this.write(() => this.inner.deleteModel(name));
    if (this.state !== s) return out;
    if (out !== s.models.has(name)) this.invalidate();
    else if (out) {
      dropModel(s, name);
      s.modelState.delete(name);
      this.changed("models", "modelState");
    }
    return out;
  }
  async unpark(model: string): Promise<boolean> {
    const s = await this.load();
    const out = await this.write(() => this.inner.unpark(model));
    if (this.state !== s) return out;
    if (out !== (s.modelState.get(model)?.parked === true)) this.invalidate();
    else if (out) {
      patchModelState(s, model, { parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null });
      this.changed("modelState");
    }
    return out;
  }
  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return this.thenReload(() => this.inner.createApiKey(k));
  }
  revokeApiKey(name: string): Promise<boolean> {
    return this.thenReload(() => this.inner.revokeApiKey(name));
  }
  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return this.inner.appendEvent(e);
  }

  // ---- several control planes: not modelled, straight to the store ----------------------
  acquireLease(holder: string, ttlMs: number, take?: boolean): Promise<Lease> {
    return this.inner.acquireLease(holder, ttlMs, take);
  }
  releaseLease(holder: string): Promise<void> {
    return this.inner.releaseLease(holder);
  }
  readLease(): Promise<Lease | undefined> {
    return this.inner.readLease();
  }
  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return this.inner.upsertControlPlane(cp);
  }
  controlPlanes(): Promise<ControlPlaneRow[]> {
    return this.inner.controlPlanes();
  }
  removeControlPlane(name: string): Promise<void> {
    return this.inner.removeControlPlane(name);
  }
  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    return this.inner.reportUsage(router, watchingSince, lastUsed);
  }
  routerUsage(): Promise<RouterUsage[]> {
    return this.inner.routerUsage();
  }
  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return this.inner.saveNodeReport(node, report, now);
  }
  nodeReports(): Promise<NodeReportRow[]> {
    return this.inner.nodeReports();
  }
  sharedSecret(key: string, candidate: string): Promise<string> {
    return this.inner.sharedSecret(key, candidate);
  }
  tokenDigests(): Promise<TokenDigests> {
    return this.inner.tokenDigests();
  }
  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return this.inner.putTokenDigest(kind, sha256, mode);
  }
  changeCursor(): Promise<number> {
    return this.inner.changeCursor();
  }
  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return this.inner.changesSince(after, limit);
  }
  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return this.load().then((s) => [...s.nodes.values()].map((n) => ({ name: n.name, at: n.lastHeartbeat })));
  }

  /**
   * Another writer committed: the next read first reads the changes committed since this memory's
   * cursor and the rows they name. (Last-seen times are no changes: the store says "seen" for them.)
   */
  otherWriter(): void {
    if (this.state) this.behind = true;
  }

  /**
   * Another writer's change ("any"): the next read reads what it changed (otherWriter()), then fn
   * hears of it. Only last-seen times moved ("seen": another control plane's batched flush, once a
   * second): those are read alone and merged, newest wins.
   */
  watch(fn: (change: StoreChange) => void): () => void {
    return this.inner.watch((change) => {
      // The lease, control planes, router usage, events and node reports are not held here.
      // "any": the next read reads the store's changes since this memory's cursor (or everything, on doubt).
      if (change === "any") this.otherWriter();
      if (change === "seen") {
        void this.refreshSeen().then(
          () => fn(change),
          () => (this.invalidate(), fn(change)),
        );
        return;
      }
      fn(change);
    });
  }
  async backupTo(path: string): Promise<void> {
    await this.flush().catch(() => undefined);
    return this.inner.backupTo(path);
  }
}

/**
 * Another writer's changes into memory: each node, model, replica and key they name takes its
 * rows as read (none read: deleted). False, and nothing applied, when the changes do not follow
 * the cursor without a gap or name a kind this version does not know: the caller loads everything.
 */
function applyChanges(s: State, read: ChangeRead, touched: ReadonlyMap<string, number>): boolean {
  let next = s.cursor + 1;
  for (const c of read.changes) if (c.seq !== next++ || !CHANGE_KINDS.has(c.kind)) return false;
  if (read.changes.length === 0) return true;
  const keys = { node: new Set<string>(), model: new Set<string>(), replica: new Set<string>(), key: new Set<string>() };
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
function changedCollections(read: ChangeRead): Collection[] {
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

function setModel(s: State, m: ModelRow): void {
  s.models.set(m.name, m);
  for (const a of m.spec.aliases ?? []) s.aliases.set(a, m.name);
}

/** Forgets a model and the aliases it owns (its state stays: the caller decides). */
function dropModel(s: State, name: string): void {
  const m = s.models.get(name);
  if (!m) return;
  for (const a of m.spec.aliases ?? []) if (s.aliases.get(a) === name) s.aliases.delete(a);
  s.models.delete(name);
}

function setReplica(s: State, r: ReplicaRow): void {
  const old = s.replicas.get(r.id);
  if (old) for (const sh of old.shards) s.byNode.get(sh.node)?.delete(r.id);
  s.replicas.set(r.id, r);
  for (const sh of r.shards) (s.byNode.get(sh.node) ?? s.byNode.set(sh.node, new Set()).get(sh.node)!).add(r.id);
}

function dropReplica(s: State, id: string): void {
  const old = s.replicas.get(id);
  if (!old) return;
  for (const sh of old.shards) s.byNode.get(sh.node)?.delete(id);
  s.replicas.delete(id);
}

function patchModelState(s: State, model: string, patch: Partial<Omit<ModelStateRow, "model">>): void {
  s.modelState.set(model, { ...(s.modelState.get(model) ?? emptyModelState(model)), ...defined(patch) });
}
