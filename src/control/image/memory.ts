// The in-memory image's memory (index.ts): the store's rows as last loaded, kept in step with the
// store. Loaded whole at start and after any doubt; another writer's commits read alone from the
// store's change feed (only the rows they name); a backstop reload that keeps what memory holds
// when the store holds the same. Also here: the snapshot handed out, its arrays built again only
// for the collections that changed, and nodes' last-seen times, kept in memory and written for
// all nodes in one transaction at most once a second.

import { letIoIn, type Scheduler } from "../../lib/scheduler";
import type { StorePort } from "../store-port";
import type { ChangeRead, NodeRow, Snapshot } from "../types";
import { type Base, type Collection, type State, applyChanges, baseOf, changedCollections, emptyState, rebuilt, setModel, setReplica } from "./state";

/** How often touched last-seen times reach the store. */
export const TOUCH_FLUSH_MS = 1000;
/** Changes read at once; a reader further behind loads everything (cheaper then). */
export const CHANGES_READ_LIMIT = 5000;

type Inner = Pick<StorePort, "changeCursor" | "changesSince" | "snapshot" | "listAllowedAddresses" | "listApiKeys" | "listTeams" | "nodeCredentials" | "nodesSeen" | "touchNodes">;

export class ImageMemory {
  private state: State | undefined;
  private loading: Promise<State> | undefined;
  private cached: Base | undefined;
  /** Only last-seen times changed since `cached` was built. */
  private nodesStale = false;
  /** Collections changed since `cached` was built (see changed()). */
  private readonly dirty = new Set<Collection>();
  /** Last-seen times held in memory and not yet written. */
  readonly touched = new Map<string, number>();
  private lastFlush = Number.NEGATIVE_INFINITY;
  private flushTimer: { cancel(): void } | undefined;
  /** Rises with every change but last-seen touches (Snapshot.version). */
  private version = 0;
  /** Rises with every change of replicas or model state (ReplicaRead.version). */
  replicaVersion = 0;
  /** Transactions asked of the store (tests and benchmarks read it). */
  writes = 0;
  /** Another writer committed: the next read first reads the store's changes since the cursor. */
  private behind = false;
  private catching: Promise<State> | undefined;
  /** Rises when one of this image's writes starts and when it ends: a change read overlapping one is not applied. */
  private writeGen = 0;
  /** Full loads and change reads so far (tests and benchmarks read them). */
  loads = 0;
  changeReads = 0;

  constructor(
    private readonly inner: Inner,
    private readonly scheduler?: Scheduler,
  ) {}

  /** The state if loaded, without waiting (the fast path). */
  get loaded(): State | undefined {
    return this.state;
  }

  /** Forget memory: the next read loads everything from the store again. */
  invalidate(): void {
    this.state = undefined;
    this.loading = undefined;
    this.behind = false;
    this.cached = undefined;
    this.version++;
    this.replicaVersion++;
  }

  /** Another writer committed: the next read first reads the changes since this memory's cursor. */
  otherWriter(): void {
    if (this.state) this.behind = true;
  }

  /**
   * Loads everything from the store again while reads go on from memory (the backstop against a
   * missed change notice). The new state replaces memory unless one of this image's writes, or a
   * full load, overlapped the read; a node's last-seen time never goes back. True when memory was
   * replaced (or found to hold what the store holds).
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
    this.replicaVersion++;
    return true;
  }

  /** Whether `fresh` (read from the store) holds what memory does, its cursor aside; one collection at a time, the I/O due let in between. */
  private async holdsAll(fresh: State, mem: State): Promise<boolean> {
    for (const k of Object.keys(mem) as (keyof State)[]) {
      if (k === "cursor") continue;
      if (!Bun.deepEquals(fresh[k], mem[k])) return false;
      await letIoIn(this.scheduler);
    }
    return true;
  }

  /** The state, loaded (whole, or another writer's changes first) when it must be. */
  load(): Promise<State> {
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
    // One of this image's own writes overlapped the read: its rows may be older than memory. Next read.
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
    const [allowed, keys, creds, teams] = [await this.inner.listAllowedAddresses(), await this.inner.listApiKeys(), await this.inner.nodeCredentials(), await this.inner.listTeams()];
    const s = emptyState(cursor);
    for (const a of allowed) s.allowed.set(a.node, a.address);
    for (const k of keys) s.apiKeys.set(k.name, k);
    for (const t of teams) s.teams.set(t.name, t);
    for (const c of creds) {
      s.credOf.set(c.node, c.hash);
      s.nodeOfCred.set(c.hash, c.node);
    }
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
  async write<T>(fn: () => Promise<T>, seenOnly = false): Promise<T> {
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

  /** Runs a store write, then drops memory (rare writes: the next read loads the store again). */
  async thenReload<T>(fn: () => Promise<T>): Promise<T> {
    const out = await this.write(fn);
    this.invalidate();
    return out;
  }

  /** Something but last-seen times changed: the snapshot arrays of the named collections (all when none is named) are built again. */
  changed(...which: Collection[]): void {
    if (this.cached && which.length > 0) for (const c of which) this.dirty.add(c);
    else this.cached = undefined;
    this.version++;
    if (which.length === 0 || which.includes("replicas") || which.includes("modelState")) this.replicaVersion++;
  }

  /** One consistent read: arrays built once per change (copy on write), the nodes' alone when only last-seen times moved. */
  async snapshot(): Promise<Snapshot> {
    let s = await this.load();
    // Memory forgotten while this waited (invalidate()): what it loaded is not memory any more, and
    // a snapshot cached from it would be served after the next load too.
    while (this.state !== s) s = await this.load();
    this.flushIfDue();
    if (this.cached && (this.nodesStale || this.dirty.size > 0)) this.cached = rebuilt(s, this.cached, this.dirty, this.nodesStale);
    this.nodesStale = false;
    this.dirty.clear();
    this.cached ??= baseOf(s);
    return { ...this.cached, version: this.version };
  }

  // ---- last-seen times ----------------------------------------------------------------

  /** A node heard from now: its last-seen time in memory, written with the others' at the next flush. */
  touch(s: State, row: NodeRow, at: number): void {
    if (at > row.lastHeartbeat) {
      s.nodes.set(row.name, { ...row, lastHeartbeat: at });
      this.nodesStale = true;
    }
    this.touched.set(row.name, Math.max(at, this.touched.get(row.name) ?? at));
    this.flushIfDue();
  }

  /** Newer last-seen times another control plane wrote, into memory (newest wins). */
  async refreshSeen(): Promise<void> {
    const s = this.state;
    if (!s) return;
    const rows = await this.inner.nodesSeen();
    if (this.state !== s) return;
    for (const { name, at } of rows) {
      const n = s.nodes.get(name);
      if (n && at > n.lastHeartbeat) {
        s.nodes.set(name, { ...n, lastHeartbeat: at });
        this.nodesStale = true;
      }
    }
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
}
