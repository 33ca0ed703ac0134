// Weights served to the peers of this node's fabric, on the agent's listener: one whole,
// verified file of a snapshot in the Hugging Face cache under the models directory, to a
// request carrying the grant the head node issued for that file (derived from this node's
// credential: the requesting node's own credential opens nothing), before the grant ends.
// Range is honoured so an interrupted copy resumes; serves at once are bounded, and their bytes
// go through the node's transfer rate limit shared with its fetches.

import { errorText } from "../lib/format";
import { bearerToken, sameSecret } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import { transferGrant } from "../protocol/weights";
import { parsePeerWeightsRequest, WEIGHTS_PEER_PREFIX } from "../protocol/weights-peer";
import { cacheEntry } from "../hub/download";
import { type AgentLogger, silentLogger } from "./log";
import { snapshotBlob } from "./weights-disk";
import { type ByteRate, UNLIMITED } from "./weights-rate";

export { WEIGHTS_PEER_PREFIX };

/** Largest piece sent at once: the rate limit's waits stay well within the listener's idle timeout. */
const PIECE = 64 * 1024;

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
  /** Grants end by its wall clock. */
  scheduler: Pick<Scheduler, "now">;
  /** Serves at once; past it a request is answered 503 with Retry-After. */
  maxServes?: number;
  /** The node's transfer rate limit, shared with its fetches. */
  rate?: ByteRate;
  log?: AgentLogger;
}

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
    const blob = await snapshotBlob(cacheEntry(this.o.modelsDir, want.repo), want.revision, want.path);
    if (blob === undefined) return text(404, "this node holds no whole verified copy of that file");
    if (this.active >= this.maxServes) return text(503, `this node serves ${this.maxServes} files at once; try again shortly`, { "retry-after": "2" });
    const range = byteRange(req.headers.get("range"), blob.size);
    if (range === "unsatisfiable") return text(416, "range not satisfiable", { "content-range": `bytes */${blob.size}` });
    const { start, end } = range ?? { start: 0, end: blob.size - 1 };
    // Content-Length is stated, but Bun (1.4.5, measured) sends a streamed body of more than one
    // chunk chunked and drops it; the fetcher knows the size from its order, and Content-Range
    // states it. A Blob body would keep it, but then neither the rate limit nor the count of
    // serves could follow the bytes.
    const headers: Record<string, string> = { "content-type": "application/octet-stream", "content-length": String(end + 1 - start), "accept-ranges": "bytes" };
    if (range) headers["content-range"] = `bytes ${start}-${end}/${blob.size}`;
    const key = `${want.repo}@${want.revision}`;
    this.log.debug({ repo: want.repo, revision: want.revision, path: want.path, start, end }, "serving weights to a peer");
    return new Response(this.stream(blob.file, start, end, key, req.signal), { status: range ? 206 : 200, headers });
  }

  /** The bytes start..end of a file, read from disk as the peer takes them, through the rate limit; the serve's slot is held until it ends. */
  private stream(file: string, start: number, end: number, key: string, signal: AbortSignal): ReadableStream<Uint8Array> {
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
