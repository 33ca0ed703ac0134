// Weights served to the peers of this node's fabric, on the agent's listener: one whole,
// verified file of a snapshot in the Hugging Face cache under the models directory, or the
// bytes so far of a file this node is still fetching (weights-growing.ts: the peer's copy
// follows this one's as it arrives, and the peer verifies the whole file itself), to a
// request carrying the grant the head node issued for that file (derived from this node's
// credential: the requesting node's own credential opens nothing), before the grant ends.
// Range is honoured so an interrupted copy resumes; serves at once are bounded, and their bytes
// go through the node's transfer rate limit shared with its fetches.

import { errorText } from "../lib/format";
import { bearerToken, sameSecret } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import { transferGrant } from "../protocol/weights";
import { parsePeerWeightsRequest, WEIGHTS_PEER_PREFIX } from "../protocol/weights-peer";
import { type FileHandle, open } from "node:fs/promises";
import { cacheEntry } from "../hub/download";
import type { GrowingFile, GrowingFiles } from "./weights-growing";
import { type AgentLogger, silentLogger } from "./log";
import { snapshotBlob } from "./weights-disk";
import { type ByteRate, UNLIMITED } from "./weights-rate";

export { WEIGHTS_PEER_PREFIX };

/** Largest piece sent at once: the rate limit's waits stay well within the listener's idle timeout. */
const PIECE = 64 * 1024;
/** Largest piece of a partial copy read at once without a rate limit. */
const GROWING_PIECE = 1024 * 1024;
/**
 * Smallest piece of a partial copy sent while more is coming: a reader that caught up with the
 * writer waits for this much rather than sending each small write on its own (per-piece costs
 * add up along a chain).
 */
const GROWING_MIN_PIECE = 256 * 1024;
/** How long a request waits for this node to begin fetching the file (the head node ordered both in one plan). */
export const AWAIT_START_MS = 10_000;
/** How long a serve of a partial copy waits for its next byte before it gives up (its source stalled). */
export const GROWING_STALL_MS = 30_000;

/** Serves at once unless told otherwise (`agent --weights-max-transfers`). */
export const DEFAULT_MAX_SERVES = 4;

/** The bytes a Range header asks for: a span, "unsatisfiable" (416), or undefined for the whole file (absent, or a form not served). */
export function byteRange(header: string | null, size: number): { start: number; end: number } | "unsatisfiable" | undefined {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header?.trim() ?? "");
  if (!m || (m[1] === "" && m[2] === "")) return undefined;
  if (m[1] === "") {
    const n = Number(m[2]);
    return n === 0 || size === 0 ? "unsatisfiable" : { start: Math.max(0, size - n), end: size - 1 };
  }
  const start = Number(m[1]);
  const end = m[2] === "" ? size - 1 : Math.min(Number(m[2]), size - 1);
  if (start >= size || end < start) return "unsatisfiable";
  return { start, end };
}

export interface WeightsServeOptions {
  modelsDir: string;
  /** SHA-256 of this node's credential; undefined until it has one (every request is refused then). */
  credentialSha256: () => string | undefined;
  /** Grants end by its wall clock; `after` bounds the waits for a partial copy (without it, none is served). */
  scheduler: Pick<Scheduler, "now"> & Partial<Pick<Scheduler, "after">>;
  /** The files this node is fetching now, whose bytes so far it serves. */
  growing?: GrowingFiles;
  /** Serves at once; past it a request is answered 503 with Retry-After. */
  maxServes?: number;
  /** The node's transfer rate limit, shared with its fetches. */
  rate?: ByteRate;
  log?: AgentLogger;
}

/** A partial copy being served, open for reading. */
type Growing = { kind: "growing"; partial: GrowingFile; handle: FileHandle };

const text = (status: number, body: string, headers: Record<string, string> = {}) => new Response(`${body}\n`, { status, headers: { "content-type": "text/plain; charset=utf-8", ...headers } });

export class WeightsServer {
  private readonly o: WeightsServeOptions;
  private readonly maxServes: number;
  private readonly rate: ByteRate;
  private readonly log: AgentLogger;
  /** Serves running, by "repo@revision" (a revision being served is in use: not evicted). */
  private readonly running = new Map<string, number>();
  private active = 0;

  constructor(o: WeightsServeOptions) {
    this.o = o;
    this.maxServes = Math.max(1, o.maxServes ?? DEFAULT_MAX_SERVES);
    this.rate = o.rate ?? UNLIMITED;
    this.log = o.log ?? silentLogger;
  }

  /** Serves going on now. */
  get serving(): number {
    return this.active;
  }

  /** The revisions being served now, as "repo@revision": eviction leaves them alone. */
  servingRevisions(): Set<string> {
    return new Set(this.running.keys());
  }

  /**
   * Answers GET /weights/v1/ORG/NAME/REVISION/PATH?expires=MS with `Authorization: Bearer
   * <grant>`. A refusal says only which check failed: nothing of what the node holds is told
   * to a request without its grant.
   */
  async handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const want = req.method === "GET" ? parsePeerWeightsRequest(url.pathname, url.searchParams.get("expires")) : undefined;
    if (want === undefined) return text(404, "not found");
    const own = this.o.credentialSha256();
    const expected = own === undefined ? "" : transferGrant(own, want.repo, want.revision, want.path, want.expiresAt);
    const presented = bearerToken(req.headers.get("authorization"));
    // Compared even when either is missing, so a missing grant costs what a wrong one does.
    const granted = sameSecret(presented ?? "", expected) && presented !== undefined && own !== undefined;
    if (!granted) return text(401, "a grant from the head node for this file is needed");
    if (want.expiresAt <= this.o.scheduler.now()) return text(403, "the grant has expired: ask the head node for a new one");
    const found = await this.find(want.repo, want.revision, want.path);
    if (found === undefined) return text(404, "this node holds no whole verified copy of that file, and is not fetching it");
    const size = found.kind === "blob" ? found.size : found.partial.size;
    if (this.active >= this.maxServes) {
      if (found.kind === "growing") await found.handle.close();
      return text(503, `this node serves ${this.maxServes} files at once; try again shortly`, { "retry-after": "2" });
    }
    const range = byteRange(req.headers.get("range"), size);
    if (range === "unsatisfiable") {
      if (found.kind === "growing") await found.handle.close();
      return text(416, "range not satisfiable", { "content-range": `bytes */${size}` });
    }
    const { start, end } = range ?? { start: 0, end: size - 1 };
    // Content-Length is stated, but Bun (1.4.5, measured) sends a streamed body of more than one
    // chunk chunked and drops it; the fetcher knows the size from its order, and Content-Range
    // states it. A Blob body would keep it, but then neither the rate limit nor the count of
    // serves could follow the bytes.
    const headers: Record<string, string> = { "content-type": "application/octet-stream", "content-length": String(end + 1 - start), "accept-ranges": "bytes" };
    if (range) headers["content-range"] = `bytes ${start}-${end}/${size}`;
    const key = `${want.repo}@${want.revision}`;
    this.log.debug({ repo: want.repo, revision: want.revision, path: want.path, start, end, partial: found.kind === "growing" }, "serving weights to a peer");
    const body = found.kind === "blob" ? this.stream(found.file, start, end, key, req.signal) : this.streamGrowing(found, start, end, key, req.signal);
    return new Response(body, { status: range ? 206 : 200, headers });
  }

  /**
   * The file's whole verified blob, or else its partial copy being fetched here (opened now: the
   * open file is read on after the copy is renamed to its blob), waiting a little for that copy
   * to begin. Paths come from the snapshot's links and the fetcher's own partial copies, both
   * below the models directory.
   */
  private async find(repo: string, revision: string, path: string): Promise<{ kind: "blob"; file: string; size: number } | Growing | undefined> {
    const entry = cacheEntry(this.o.modelsDir, repo);
    const blob = await snapshotBlob(entry, revision, path);
    if (blob !== undefined) return { kind: "blob", ...blob };
    const after = this.o.scheduler.after;
    if (this.o.growing === undefined || after === undefined) return undefined;
    const wait = { after: (ms: number, fn: () => void) => after.call(this.o.scheduler, ms, fn) };
    const partial = await this.o.growing.await(repo, revision, path, AWAIT_START_MS, wait);
    if (partial !== undefined && partial.ended === undefined) {
      try {
        return { kind: "growing", partial, handle: await open(partial.path, "r") };
      } catch {
        // Renamed to its blob (whole) between the two looks: served from there once it is linked.
        await partial.wait(partial.size, AWAIT_START_MS, wait);
      }
    }
    const now = await snapshotBlob(entry, revision, path);
    return now === undefined ? undefined : { kind: "blob", ...now };
  }

  /** Holds a serve's slot (and the revision in use) until release() is called. */
  private hold(key: string, signal: AbortSignal): () => void {
    this.active++;
    this.running.set(key, (this.running.get(key) ?? 0) + 1);
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      this.active--;
      const n = (this.running.get(key) ?? 1) - 1;
      if (n > 0) this.running.set(key, n);
      else this.running.delete(key);
    };
    // The peer going away ends the serve, whichever of the two Bun tells first.
    signal.addEventListener("abort", release, { once: true });
    return release;
  }

  /**
   * Bytes start..end of a file still being fetched here: only those on the disk, read as they
   * arrive, through the rate limit. The serve ends in an error when the copy failed, stopped
   * short of `end`, or gained nothing for GROWING_STALL_MS: the peer's transfer then fails and
   * the head node plans it from another source.
   */
  private streamGrowing(g: Growing, start: number, end: number, key: string, signal: AbortSignal): ReadableStream<Uint8Array> {
    const release = this.hold(key, signal);
    const { partial, handle } = g;
    const rate = this.rate;
    const piece = rate !== UNLIMITED ? PIECE : GROWING_PIECE;
    const scheduler = this.o.scheduler;
    const after = scheduler.after!;
    const wait = { after: (ms: number, fn: () => void) => after.call(scheduler, ms, fn) };
    const log = this.log;
    let pos = start;
    let closed = false;
    /** Set after a wait that ran out with a few bytes come: they go as they are (a trickle). */
    let trickle = false;
    const finish = () => {
      release();
      if (!closed) {
        closed = true;
        void handle.close().catch(() => undefined);
      }
    };
    return new ReadableStream<Uint8Array>({
      async pull(c) {
        try {
          for (;;) {
            if (pos > end) {
              finish();
              return c.close();
            }
            const avail = Math.min(partial.written, end + 1) - pos;
            const enough = trickle ? 1 : Math.min(end + 1 - pos, GROWING_MIN_PIECE, piece);
            if (avail > 0 && partial.ended !== "failed" && (avail >= enough || partial.ended !== undefined)) {
              const buf = new Uint8Array(Math.min(avail, piece));
              const { bytesRead } = await handle.read(buf, 0, buf.byteLength, pos);
              if (bytesRead === 0) throw new Error(`${partial.path}: no bytes at ${pos} though ${partial.written} were written`);
              pos += bytesRead;
              trickle = false;
              await rate.take(bytesRead);
              if (!closed) c.enqueue(bytesRead === buf.byteLength ? buf : buf.subarray(0, bytesRead));
              return;
            }
            if (partial.ended !== undefined && partial.ended !== "whole") throw new Error(`the copy this node was fetching ${partial.ended === "failed" ? "failed its checksum" : "stopped"} at ${partial.written} bytes`);
            // Wait for more (a piece's worth, or the end): nothing for GROWING_STALL_MS and the source stalled.
            const before = partial.written;
            if (!(await partial.wait(pos + enough - 1, GROWING_STALL_MS, wait))) {
              if (partial.written === before) throw new Error(`no bytes arrived here for ${GROWING_STALL_MS / 1000} s`);
              trickle = true;
            }
          }
        } catch (e) {
          if (closed) return;
          finish();
          log.warn({ path: partial.path, at: pos, err: errorText(e) }, "serving a partial copy of weights to a peer stopped");
          c.error(e);
        }
      },
      cancel() {
        finish();
      },
    });
  }

  /** The bytes start..end of a file, read from disk as the peer takes them, through the rate limit; the serve's slot is held until it ends. */
  private stream(file: string, start: number, end: number, key: string, signal: AbortSignal): ReadableStream<Uint8Array> {
    const hold = this.hold(key, signal);
    let released = false;
    const release = () => {
      released = true;
      hold();
    };
    signal.addEventListener("abort", release, { once: true });
    const reader = Bun.file(file).slice(start, end + 1).stream().getReader();
    let pending = new Uint8Array(0);
    const rate = this.rate;
    const limited = rate !== UNLIMITED;
    const log = this.log;
    return new ReadableStream<Uint8Array>({
      async pull(c) {
        try {
          if (pending.byteLength === 0) {
            const { done, value } = await reader.read();
            if (done) {
              release();
              return c.close();
            }
            pending = value;
          }
          const piece = limited ? pending.subarray(0, PIECE) : pending;
          pending = pending.subarray(piece.byteLength);
          await rate.take(piece.byteLength);
          // The peer may have gone while this piece waited for the rate limit.
          if (!released) c.enqueue(piece);
        } catch (e) {
          if (released) return;
          release();
          log.warn({ path: file, err: errorText(e) }, "reading weights for a peer failed");
          c.error(e);
        }
      },
      cancel(why) {
        release();
        return reader.cancel(why);
      },
    });
  }
}
