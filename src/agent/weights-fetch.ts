// The agent's side of moving weights: it runs the transfers the head node orders (each answer
// carries the whole list: an order no longer listed is stopped, its bytes kept for a resume),
// at most a few at once, each one file from the Hub or a peer into the Hugging Face cache layout
// (hub/download.ts, verified before it is kept), and links a revision's snapshot once every
// file of it is whole, which is when a replica waiting for it may start. It reports what runs
// (TransferReport, for the head node's plan and the operator's views) and, per revision, how
// far it is (for the replica's `fetching` report). It decides nothing about sources. Before a
// revision's first transfer it asks for room on the disk (weights-room.ts); a file whose bytes
// failed their checksum from the Hub, the source of last resort, makes the revision unobtainable
// (its replicas fail with that reason, and the head node holds the model after repeated failures).

import { statSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import { ChecksumError, blobPath, cacheEntry, downloadBlob, linkSnapshot } from "../hub/download";
import type { GrowingFile, GrowingFiles } from "./weights-growing";
import { type MakeRoom, RoomGate, bytesToCome } from "./weights-room";
import { type FetchOrder, type TransferReport, type WeightFile, type WeightsManifest, blobName, manifestBytes } from "../protocol/weights";

export interface WeightsFetcherOptions {
  modelsDir: string;
  /** `after` times out a transfer whose source sends nothing for stallMs (without it, none is). */
  scheduler: Pick<Scheduler, "now"> & Partial<Pick<Scheduler, "after">>;
  log: Logger;
  /** Transfers at once (agent --weights-max-transfers). */
  maxTransfers?: number;
  /** Awaited per read (agent --weights-max-rate). */
  throttle?: (n: number) => Promise<void> | void;
  /** Something changed that the head node should hear of soon (a file arrived, a revision became whole, a transfer failed). */
  onChange?: () => void;
  /**
   * A file this fetcher wrote is whole (awaited before its revision can be whole): the disk's
   * record of what llmgw fetched, kept as it goes so that a restart mid-fetch loses none of it.
   */
  onFile?: (repo: string, revision: string, file: WeightFile) => Promise<void> | void;
  /** A revision became whole, with its files' blobs (for the disk's record of what llmgw fetched, which decides whether it is). */
  onWhole?: (repo: string, revision: string, bytes: number, blobs: string[]) => void;
  fetch?: typeof fetch;
  /** Room on the disk for a revision's missing bytes before its first transfer; without it, none is asked for. */
  makeRoom?: MakeRoom;
  /** Where the partial copies are told of as they grow, for peers copying from this node meanwhile. */
  growing?: GrowingFiles;
  /** A transfer whose source sends no byte for this long fails (default STALL_MS), and the head node plans another source. */
  stallMs?: number;
}

interface Running {
  order: FetchOrder;
  abort: AbortController;
  done: number;
  startedAt: number;
  error: string | null;
  /** Set while it runs; cleared when it failed (the slot is free, the report stays). */
  active: boolean;
  /** When it failed; a checksum failure is not tried again from the same source, others after RETRY_MS. */
  failedAt: number;
  checksum: boolean;
  /** When its last byte arrived (or it started). */
  lastAt: number;
  /** Set when it was stopped for sending nothing for stallMs. */
  stalled: boolean;
}

/**
 * How long a transfer waits for its source's next byte: a peer that is itself receiving the file
 * may pause while its own source does, but a chain behind a dead or wedged peer must come loose.
 */
export const STALL_MS = 30_000;

/** How long a transfer that failed (not on its checksum) waits before the same order is tried again. */
export const RETRY_MS = 15_000;

/** A revision's progress, for a replica waiting for it. */
export interface RevisionProgress {
  done: number;
  total: number;
  rate: number;
  from: string;
  /** A file's last failure, while it waits to be tried again (from the same source or another). */
  error?: string;
  /** Why the revision cannot be had: a file failed its checksum from the Hub, after any other source. */
  failed?: string;
}

const key = (repo: string, revision: string) => `${repo}@${revision}`;
const fileKey = (o: Pick<FetchOrder, "repo" | "revision">, path: string) => `${o.repo}@${o.revision}/${path}`;
/** A source in a report: "hub", or the node it copies from. */
const sourceName = (o: FetchOrder) => (o.from.kind === "hub" ? "hub" : o.from.node);

/**
 * The fetch a transfer uses: from a peer whose listener serves HTTPS, one that trusts exactly the
 * certificate the head node relayed from that peer's heartbeats (it lists the peer's address),
 * and nothing a CA signed; verification is never skipped.
 */
export function fetchFor(order: FetchOrder, base: typeof fetch | undefined): { fetch?: typeof fetch } {
  const cert = order.from.kind === "peer" ? order.from.cert : undefined;
  if (cert === undefined) return base !== undefined ? { fetch: base } : {};
  const f = base ?? fetch;
  const pinned = ((url: string | URL | Request, init?: RequestInit) => f(url, { ...init, tls: { ca: cert } } as RequestInit)) as typeof fetch;
  return { fetch: pinned };
}

export class WeightsFetcher {
  private wants = new Map<string, WeightsManifest>();
  /** Revisions whose snapshot is linked, whole. */
  private readonly linked = new Set<string>();
  private readonly running = new Map<string, Running>();
  private orders: FetchOrder[] = [];
  private stopped = false;
  /** Revisions whose file failed its checksum from the Hub: their replicas fail with this. */
  private readonly unobtainable = new Map<string, string>();
  private readonly room: RoomGate | undefined;

  constructor(private readonly o: WeightsFetcherOptions) {
    const makeRoom = o.makeRoom;
    this.room =
      makeRoom === undefined
        ? undefined
        : new RoomGate({
            makeRoom,
            scheduler: o.scheduler,
            onSettled: () => {
              this.o.onChange?.();
              if (!this.stopped) this.startMore();
            },
          });
  }

  /**
   * The answer's revisions and orders: new transfers start, unlisted ones stop, whole revisions
   * are linked. Orders not said (a head node without a plan yet) leave the transfers as they are.
   */
  apply(wants: readonly WeightsManifest[], said: readonly FetchOrder[] | undefined): void {
    if (this.stopped) return;
    this.wants = new Map(wants.map((w) => [key(w.repo, w.revision), w]));
    if (said !== undefined) {
      this.orders = [...said];
      const listed = new Set(said.map((o) => fileKey(o, o.file.path)));
      for (const [k, r] of this.running)
        if (!listed.has(k)) {
          r.abort.abort();
          this.running.delete(k);
        }
    }
    // A revision no longer wanted: its transfers stop and their failures are forgotten, whatever
    // orders a plan made before says (a revision wanted again is tried afresh).
    for (const [k, r] of this.running)
      if (!this.wants.has(key(r.order.repo, r.order.revision))) {
        r.abort.abort();
        this.running.delete(k);
      }
    for (const k of this.unobtainable.keys()) if (!this.wants.has(k)) this.unobtainable.delete(k);
    this.room?.keep(new Set(this.wants.keys()));
    for (const w of this.wants.values()) {
      void this.linkIfWhole(w);
      // Room is asked for as soon as a revision is wanted, orders or not: a disk that cannot take
      // it is the replica's reason even when the head node holds the transfers back for the same cause.
      if (!this.linked.has(key(w.repo, w.revision))) this.roomFor(w.repo, w.revision);
    }
    this.startMore();
  }

  /** A revision removed from the disk (weights-remove.ts): linked no more. */
  forget(repo: string, revision: string): void {
    this.linked.delete(key(repo, revision));
  }

  /** Whether a revision's snapshot is whole and linked: a replica of it may start. */
  ready(repo: string, revision: string): boolean {
    const k = key(repo, revision);
    if (this.linked.has(k)) return true;
    const w = this.wants.get(k);
    return w !== undefined && this.missing(w).length === 0 && this.linked.has(k);
  }

  /** The wanted revisions ("repo@revision"): eviction leaves them alone. */
  wanted(): Set<string> {
    return new Set(this.wants.keys());
  }

  /** How far a wanted revision is. */
  progress(repo: string, revision: string): RevisionProgress | undefined {
    const w = this.wants.get(key(repo, revision));
    if (w === undefined) return undefined;
    const total = manifestBytes(w);
    let done = total;
    for (const f of this.missing(w)) done -= f.size;
    let rate = 0;
    let error: string | undefined;
    const from = new Set<string>();
    const now = this.o.scheduler.now();
    for (const r of this.running.values()) {
      if (r.order.repo !== w.repo || r.order.revision !== w.revision) continue;
      if (!r.active) {
        error ??= r.error ?? undefined;
        continue;
      }
      done += r.done;
      rate += r.done / Math.max(1, (now - r.startedAt) / 1000);
      from.add(sourceName(r.order));
    }
    error ??= this.room?.reason(w.repo, w.revision);
    const failed = this.unobtainable.get(key(w.repo, w.revision));
    return { done, total, rate, from: [...from].sort().join(", "), ...(error !== undefined ? { error } : {}), ...(failed !== undefined ? { failed } : {}) };
  }

  /** The transfers running (or failed and waiting for another order), for the heartbeat. */
  transfers(): TransferReport[] {
    const now = this.o.scheduler.now();
    const out: TransferReport[] = [];
    for (const r of this.running.values()) {
      const o = r.order;
      out.push({ repo: o.repo, revision: o.revision, path: o.file.path, size: o.file.size, done: r.done, rate: r.active ? r.done / Math.max(1, (now - r.startedAt) / 1000) : 0, from: sourceName(o), error: r.error });
    }
    // Orders held back for want of room: the head node hears why.
    for (const o of this.orders) {
      const short = this.room?.reason(o.repo, o.revision);
      if (short !== undefined && !this.running.has(fileKey(o, o.file.path))) out.push({ repo: o.repo, revision: o.revision, path: o.file.path, size: o.file.size, done: 0, rate: 0, from: sourceName(o), error: short });
    }
    return out.sort((a, b) => (a.repo + a.path < b.repo + b.path ? -1 : 1));
  }

  private get stallMs(): number {
    return this.o.stallMs ?? STALL_MS;
  }

  /** Stops the transfer when its source sends nothing for stallMs (a dead or wedged peer upstream). */
  private watch(r: Running): { cancel(): void } | undefined {
    const after = this.o.scheduler.after;
    if (after === undefined) return undefined;
    let timer: { cancel(): void };
    const check = () => {
      const idle = this.o.scheduler.now() - r.lastAt;
      if (idle < this.stallMs) {
        timer = after.call(this.o.scheduler, this.stallMs - idle, check);
        return;
      }
      r.stalled = true;
      r.abort.abort();
    };
    timer = after.call(this.o.scheduler, this.stallMs, check);
    return { cancel: () => timer.cancel() };
  }

  /** Stops every transfer (the agent is stopping); their bytes stay for a resume. */
  stop(): void {
    this.stopped = true;
    for (const r of this.running.values()) r.abort.abort();
    this.running.clear();
  }

  /** The files of a revision whose blob is not whole here. */
  private missing(w: WeightsManifest): WeightFile[] {
    const entry = cacheEntry(this.o.modelsDir, w.repo);
    return w.files.filter((f) => sizeOf(blobPath(entry, f)) !== f.size);
  }

  /**
   * Whether a revision's transfers may start: room on the disk was made for what it still misses
   * (asked once, see weights-room.ts), and for what the revisions already let in still miss,
   * whose bytes are not on the disk yet either.
   */
  private roomFor(repo: string, revision: string): boolean {
    const room = this.room;
    if (room === undefined) return true;
    return room.allowed(repo, revision, () => {
      const w = this.wants.get(key(repo, revision));
      if (w === undefined || this.missing(w).length === 0) return 0;
      let need = this.toCome(w);
      for (const [k, other] of this.wants) if (other !== w && !this.linked.has(k) && room.made(other.repo, other.revision)) need += this.toCome(other);
      return need;
    });
  }

  /** A revision's bytes still to arrive: its missing files less their partial copies. */
  private toCome(w: WeightsManifest): number {
    const entry = cacheEntry(this.o.modelsDir, w.repo);
    return bytesToCome(this.missing(w).map((f) => ({ size: f.size, have: sizeOf(`${blobPath(entry, f)}.incomplete`) ?? 0 })));
  }

  private async linkIfWhole(w: WeightsManifest): Promise<void> {
    const k = key(w.repo, w.revision);
    if (this.linked.has(k) || this.missing(w).length > 0) return;
    try {
      await linkSnapshot(cacheEntry(this.o.modelsDir, w.repo), w.revision, w.files);
      this.linked.add(k);
      this.o.onWhole?.(w.repo, w.revision, manifestBytes(w), [...new Set(w.files.map(blobName))]);
      this.o.log.info({ repo: w.repo, revision: w.revision, files: w.files.length, bytes: manifestBytes(w) }, "weights whole and verified: snapshot linked");
      this.o.onChange?.();
    } catch (e) {
      this.o.log.warn({ repo: w.repo, revision: w.revision, err: errorText(e) }, "weights whole but their snapshot could not be linked");
    }
  }

  private startMore(): void {
    const max = this.o.maxTransfers ?? 4;
    let active = 0;
    for (const r of this.running.values()) if (r.active) active++;
    for (const order of this.orders) {
      if (active >= max) break;
      // An order of a plan made before the revision stopped being wanted here.
      if (!this.wants.has(key(order.repo, order.revision))) continue;
      const k = fileKey(order, order.file.path);
      const cur = this.running.get(k);
      if (cur !== undefined) {
        if (cur.active) continue;
        // Failed: tried again when the head node names another source, or (not a checksum) after a while.
        const same = cur.order.from.url === order.from.url;
        if (same && (cur.checksum || this.o.scheduler.now() - cur.failedAt < RETRY_MS)) continue;
        this.running.delete(k);
      }
      const entry = cacheEntry(this.o.modelsDir, order.repo);
      if (sizeOf(blobPath(entry, order.file)) === order.file.size) continue;
      if (!this.roomFor(order.repo, order.revision)) continue;
      active++;
      void this.run(k, order);
    }
  }

  private async run(k: string, order: FetchOrder): Promise<void> {
    const now = this.o.scheduler.now();
    const r: Running = { order, abort: new AbortController(), done: 0, startedAt: now, error: null, active: true, failedAt: 0, checksum: false, lastAt: now, stalled: false };
    this.running.set(k, r);
    const auth = order.from.kind === "hub" ? order.from.token : order.from.grant;
    const log = { repo: order.repo, revision: order.revision, file: order.file.path, from: sourceName(order) };
    this.o.log.info({ ...log, bytes: order.file.size }, "weights transfer started");
    const growing = this.o.growing;
    let partial: GrowingFile | undefined;
    const ended = (how: "whole" | "failed" | "stopped") => {
      if (partial !== undefined) growing?.finish(order.repo, order.revision, order.file.path, partial, how);
    };
    const watchdog = this.watch(r);
    try {
      await downloadBlob({
        url: order.from.url,
        ...(auth !== undefined ? { headers: { authorization: `Bearer ${auth}` } } : {}),
        entry: cacheEntry(this.o.modelsDir, order.repo),
        file: order.file,
        signal: r.abort.signal,
        onBytes: (n) => {
          r.done += n;
          r.lastAt = this.o.scheduler.now();
          partial?.grow(n);
        },
        onAppend: (path, have) => {
          if (partial !== undefined) ended("stopped");
          partial = growing?.begin(order.repo, order.revision, order.file.path, path, order.file.size, have);
        },
        ...(this.o.throttle ? { throttle: this.o.throttle } : {}),
        ...fetchFor(order, this.o.fetch),
      });
      this.running.delete(k);
      await this.o.onFile?.(order.repo, order.revision, order.file);
      // Linked at once: the node holds the file and serves it to its peers (the head node's plan
      // spreads a revision's files over a fabric's nodes, which then copy from each other). A
      // replica still waits for every file (ready()).
      await linkSnapshot(cacheEntry(this.o.modelsDir, order.repo), order.revision, [order.file]);
      // Whole and linked: a peer reading the partial copy reads on to its end (the same file,
      // renamed), new ones are served the blob.
      ended("whole");
      this.o.log.info(log, "weights transfer finished");
      const w = this.wants.get(key(order.repo, order.revision));
      if (w !== undefined) await this.linkIfWhole(w);
    } catch (e) {
      ended(e instanceof ChecksumError ? "failed" : "stopped");
      if (r.abort.signal.aborted && !r.stalled) return;
      const error = r.stalled ? `${order.file.path}: no bytes from ${sourceName(order)} for ${Math.round(this.stallMs / 1000)} s (stalled)` : e instanceof ChecksumError ? e.message : errorText(e);
      r.active = false;
      r.error = error;
      r.failedAt = this.o.scheduler.now();
      r.checksum = e instanceof ChecksumError;
      // The head node orders from the Hub only when no peer of the fabric holds the file: after a
      // checksum failure from it there is no other source to try.
      if (r.checksum && order.from.kind === "hub") this.unobtainable.set(key(order.repo, order.revision), `${error} (from the Hub; no other source holds it)`);
      this.o.log.warn({ ...log, err: error }, "weights transfer failed");
    } finally {
      watchdog?.cancel();
    }
    this.o.onChange?.();
    if (!this.stopped) this.startMore();
  }
}

function sizeOf(path: string): number | undefined {
  try {
    return statSync(path).size;
  } catch {
    return undefined;
  }
}

/** The snapshot folder of a revision in the cache layout, which an engine is given. */
export function snapshotDir(modelsDir: string, repo: string, revision: string): string {
  return join(cacheEntry(modelsDir, repo), "snapshots", revision);
}
