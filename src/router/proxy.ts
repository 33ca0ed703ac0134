// One client request through to an engine: attempts on replicas one after the other (Call),
// each sending the request through the upstream pool and passing the engine's answer to the
// client (Attempt), with retries before the first byte, deadlines, and clean cancellation.
// Callback-driven rather than a loop of awaits: the hot path makes no promise at all. Its
// answers are passed on as the engine's socket reads bring them, one write to the client per
// read. It depends only on ProxyContext, the few parts of the router it uses.
//
// Where a request's usage is known, at its end, is Attempt.finish(): the one place every
// proxied answer ends (whole, streamed, cut mid-stream or left by its client), with its status,
// its duration and its output tokens.

import type { ExchangeHandler, Exchange, ExtraHeaders, UpstreamHead, UpstreamPool } from "../http/client";
import { UpstreamError } from "../http/client";
import type { ClientExchange } from "../http/exchange";
import { Pieces } from "../http/wire";
import type { Scheduler } from "../lib/scheduler";
import { type Admission, type KeyState, withRateHeaders } from "./admission";
import type { Balancer, Lease } from "./balancer";
import type { Catalog } from "./catalog";
import type { Deadlines, Watch } from "./deadlines";
import { answer, openAIError, openAIErrorBody, sseErrorFrame } from "./errors";
import { type AnswerHead, type AnswerHeaders, forwardHeaders } from "./headers";
import type { ModelSeries, RouterMetrics } from "./metrics";
import { type BodyFacts, withModel } from "./request-body";
import { IdSniffer, type ResponseIds } from "./response-ids";
import type { Ledger } from "./ledger";
import type { GpuTime } from "./gpu-time";
import type { Reservation } from "./budget";
import type { LedgerReconciler } from "./reconcile-ledger";
import { TokenCount, contentKey } from "./traffic";
import { UsageStrip, addsUsage, withUsage } from "./usage-stream";

/** One client request on its way to an engine: what dispatch read of it. */
export interface ProxyRequest {
  readonly ex: ClientExchange;
  readonly facts: BodyFacts;
  /** The pool it may be served from (its key's, or the one it asked for); undefined: any. */
  readonly pool: string | undefined;
  /** The client's API key (its SHA-256; "" without keys): a Responses API id it is answered is remembered as its. */
  readonly owner: string;
  /** The replica that holds the response this request continues, tried before any other. */
  readonly pin: string | undefined;
  /** When it arrived (the scheduler's mono()): its duration and TTFT count from here, a cold-start hold included. */
  readonly t0: number;
  /** Its key's limits (admission.ts), when the key or its team has any. */
  readonly adm?: KeyState | undefined;
  /** The prompt tokens counted for it on admission (an estimate from its size), settled from the engine's usage. */
  readonly prompt?: number;
  /** What it reserved of its key's and team's budgets (budget.ts), settled where it ends. */
  readonly budget?: Reservation | undefined;
}

/** A request asking slot-gate.ts for a slot on a replica with a concurrency bound. */
export interface SlotClaim {
  readonly req: ProxyRequest;
  /** Replicas already tried by this request. */
  readonly exclude: ReadonlySet<string> | undefined;
  /** Its slot, after waiting; undefined: the model is no longer gated, so the balancer places it. */
  resume(lease: Lease | undefined): void;
}

/** The parts of the router a request's attempts use. */
export interface ProxyContext {
  readonly settings: {
    /** Attempts per request, counting the first. */
    readonly maxAttempts: number;
    readonly firstByteTimeoutMs: number;
    readonly idleTimeoutMs: number;
    /** A failing replica is passed over this long. */
    readonly cooldownMs: number;
  };
  readonly balancer: Pick<Balancer, "acquire" | "acquireOn" | "cooldown">;
  readonly upstream: Pick<UpstreamPool, "post">;
  readonly deadlines: Deadlines;
  readonly time: Pick<Scheduler, "mono">;
  readonly metrics: Pick<RouterMetrics, "seriesOf" | "answered" | "retried" | "upstreamError">;
  readonly headers: Pick<AnswerHeaders, "answer">;
  readonly responses: Pick<ResponseIds, "remember">;
  readonly catalog: Pick<Catalog, "nameOf">;
  readonly admission: Pick<Admission, "headers" | "tokens">;
  /** The usage ledger: every request is counted in it once, where it ends; off (on: false), engines are asked for no usage. */
  readonly ledger: Pick<Ledger, "answered"> & { readonly on?: boolean };
  /** The replicas' GPU clocks: a request's share of its replica's GPUs while it held a slot (gpu-time.ts). */
  readonly gpu?: Pick<GpuTime, "start" | "end">;
  /** Per replica, what the ledger counted, to check against the engine's own counters. */
  readonly reconcile?: Pick<LedgerReconciler, "ended">;
  /**
   * Slots on replicas with a concurrency bound, and the fair queue for them (slot-gate.ts): a
   * lease, "wait" when the request was queued (or answered), undefined when the model is not gated.
   */
  readonly gate?: { acquire(claim: SlotClaim): Lease | "wait" | undefined };
  /**
   * A bug of the router's own met while handling one request: logged, and that request alone
   * answered 500 (or cut, if its answer had started). Whoever calls this has released any
   * lease the request held.
   */
  internalError(ex: ClientExchange, e: unknown): void;
}

/** Sends a request on to a replica of its model (the request's first attempt, and any retries). */
export function proxy(ctx: ProxyContext, req: ProxyRequest): void {
  new Call(ctx, req).next();
}

const RETRY_STATUS = new Set([429, 502, 503, 504]);
/** Bodies up to this size are buffered when not streamed: one write instead of a stream is faster. */
const BUFFER_LIMIT = 1024 * 1024;
const enc = new TextEncoder();
const dec = new TextDecoder();

/** Why an attempt should be retried elsewhere (only ever before a byte reached the client). */
interface Failure {
  kind: string;
  error: string;
}

/**
 * One client request through the proxy: attempts on replicas one after the other, each on
 * another replica, until one answers or maxAttempts is reached.
 */
class Call implements SlotClaim {
  private attempts = 0;
  exclude: Set<string> | undefined;
  private lastError = "no replica answered";
  /** The client's 200 and SSE head went out while the request was held: the engine's stream is piped into it. */
  readonly opened: boolean;
  /** The headers passed on to the engine. */
  private readonly extra: ExtraHeaders;
  /** The router asks the engine for the stream's usage, which the client did not: it is taken out of the answer again. */
  readonly usage: boolean;
  /** GPU-seconds of its attempts so far (a failed attempt held its slot too). */
  gpu = 0;

  constructor(
    readonly ctx: ProxyContext,
    readonly req: ProxyRequest,
  ) {
    this.opened = req.ex.answered;
    this.extra = forwardHeaders(req.ex.headers);
    this.usage = ctx.ledger.on !== false && addsUsage(req.ex.path, req.facts);
  }

  next(): void {
    let lease: Lease | undefined | "wait";
    try {
      lease = this.attempts < this.ctx.settings.maxAttempts && !this.req.ex.aborted ? this.acquire() : undefined;
    } catch (e) {
      this.ctx.internalError(this.req.ex, e);
      return;
    }
    if (lease !== "wait") this.begin(lease);
  }

  /** The slot this request waited for (slot-gate.ts); undefined: placed by the balancer after all. */
  resume(lease: Lease | undefined): void {
    if (lease === undefined) this.next();
    else this.begin(lease);
  }

  /** An attempt on the lease's replica; none: the request is answered 502. */
  private begin(lease: Lease | undefined): void {
    const { ctx, req } = this;
    let attempt: Attempt | undefined;
    try {
      if (lease === undefined) {
        answer(req.ex, withRateHeaders(this.gaveUp(), req.adm, ctx.admission));
        return;
      }
      this.attempts++;
      const ep = lease.endpoint;
      const model = req.facts.model;
      const canonical = ep.info.models[0] ?? model;
      attempt = new Attempt(this, lease, canonical);
      // SGLang serves one name; any alias is sent to it as the model's own name.
      const named = ep.info.engine === "sglang" && model !== canonical ? withModel(req.ex.body, req.facts, canonical) : req.ex.body;
      const payload = this.usage ? withUsage(named, req.facts) : named;
      attempt.start(req.ex.target, payload, this.extra);
    } catch (e) {
      // Whatever threw, the lease taken for this attempt goes back and this request alone ends.
      if (attempt !== undefined) attempt.crash(e);
      else ctx.internalError(req.ex, e);
    }
  }

  private acquire(): Lease | undefined | "wait" {
    const b = this.ctx.balancer;
    const { facts, pool, pin } = this.req;
    const pinned = pin !== undefined ? b.acquireOn(pin, facts.model, pool, this.exclude) : undefined;
    if (pinned !== undefined) return pinned;
    const gated = this.ctx.gate?.acquire(this);
    if (gated !== undefined) return gated;
    return b.acquire(facts.model, facts.key, pool, this.exclude);
  }

  /** Every attempt failed (or none could be made): 502, counted under the model's own name. */
  private gaveUp() {
    const model = this.req.facts.model;
    const name = this.ctx.catalog.nameOf(model);
    this.ctx.metrics.answered(name, 502);
    this.ctx.ledger.answered(this.req.owner, name, 502, 0, 0, 0, this.req.ex.aborted, this.gpu);
    this.req.budget?.settle(0, this.gpu);
    return openAIError(502, `upstream failure for model '${model}': ${this.lastError}`, { code: "upstream_error" });
  }

  /** An attempt failed before any byte reached the client: try another replica. */
  failed(endpointId: string, model: string, f: Failure): void {
    this.lastError = f.error;
    this.ctx.metrics.retried(model, f.kind);
    (this.exclude ??= new Set()).add(endpointId);
    this.next();
  }
}

/**
 * One try at one replica: sends the request through the upstream pool and passes the engine's
 * answer to the client, or turns it into a Failure the caller retries elsewhere. The lease is
 * released exactly once, whatever happens. Retries happen only before any byte reached the
 * client; after that, a failure ends the client's stream with an error event.
 */
class Attempt implements ExchangeHandler, Watch {
  deadline: number;
  wPrev: Watch | undefined = undefined;
  wNext: Watch | undefined = undefined;
  watched = false;
  private up: Exchange | undefined;
  private why: "client" | "first_byte" | "idle" | undefined;
  /** The client has been promised this answer: no retry from here on. */
  private settled = false;
  /** The answer's head has been written to the client. */
  private started = false;
  private released = false;
  private status = 0;
  private headers: { readonly text: string; readonly bytes: number; readonly latin1?: boolean } | undefined;
  /**
   * "buffer": whole small body, one write. "stream": passed on as it comes. "retry": a status to
   * retry on; its body is kept for the message. "event": the engine's error for a stream already
   * opened (Call.opened), kept to be sent as an SSE error event.
   */
  private mode: "buffer" | "stream" | "retry" | "event" = "stream";
  /** Body bytes not yet written, as ranges of the engine's socket reads (copied once, into the write to the client). */
  private readonly parts = new Pieces();
  private sse = false;
  /** A write is waiting for the client to take more: the engine's socket is paused. */
  private blocked = false;
  private readonly ctx: ProxyContext;
  private readonly m: ModelSeries;
  private readonly ex: ClientExchange;
  private readonly t0: number;
  /** The answer's output tokens, counted as its bytes pass. */
  private readonly tokens = new TokenCount();
  /** A Responses API answer: its response's id is looked for in its first bytes. */
  private sniff: IdSniffer | undefined;
  /** Streamed completion tokens already counted against its key's token limits. */
  private charged = 0;
  /** Takes out of the stream the usage the router asked for and the client did not (Call.usage). */
  private strip: UsageStrip | undefined;
  /** Its replica's GPU clock when it took the slot (gpu-time.ts). */
  private readonly v0: number;

  constructor(
    private readonly call: Call,
    private readonly lease: Lease,
    private readonly model: string,
  ) {
    const ctx = call.ctx;
    this.ctx = ctx;
    this.m = ctx.metrics.seriesOf(model);
    this.ex = call.req.ex;
    this.t0 = call.req.t0;
    this.deadline = ctx.deadlines.clock + ctx.settings.firstByteTimeoutMs;
    this.v0 = ctx.gpu !== undefined ? ctx.gpu.start(lease.endpoint) : 0;
    // The client already has its 200 and SSE head: the engine's body follows it, and a failure
    // ends it with an error event.
    if (call.opened) this.started = this.sse = true;
  }

  start(path: string, payload: Uint8Array, extra: ExtraHeaders): void {
    this.ctx.deadlines.add(this);
    this.ex.onAbort = () => this.kill("client");
    this.up = this.ctx.upstream.post(this.lease.endpoint.url, path, payload, extra, this, this.lease.endpoint.info.key);
  }

  /**
   * A throw of the router's own while handling this attempt: the lease goes back, the engine's
   * request is dropped, and this client alone is answered 500 (or cut mid-answer). No retry and
   * no cooldown: the replica did nothing wrong.
   */
  crash(e: unknown): void {
    const up = this.up;
    this.up = undefined;
    try {
      up?.abort();
    } catch {
      // The socket is going away either way.
    }
    if (!this.released) {
      this.released = true;
      this.ctx.deadlines.delete(this);
      this.ex.onAbort = undefined;
      this.ex.onDrain = undefined;
      this.lease.release();
      this.slotEnd();
      this.ctx.metrics.answered(this.model, 500);
      this.count(500, 0, 0, false, 0);
    }
    this.ctx.internalError(this.ex, e);
  }

  expire(): void {
    try {
      this.kill(this.settled ? "idle" : "first_byte");
    } catch (e) {
      this.crash(e);
    }
  }

  /** Drops the upstream exchange for a reason of ours (client gone, deadline passed). */
  private kill(why: "client" | "first_byte" | "idle"): void {
    if (this.released) return;
    this.why ??= why;
    this.up?.abort();
    this.onError(new UpstreamError("reset", "aborted"), this.settled);
  }

  // The engine's callbacks, each guarded: a throw of the router's own ends this request alone
  // (crash) and never unwinds into the upstream socket's handlers, where it would be taken for
  // the engine's fault.
  onHead(head: UpstreamHead): void {
    try {
      this.headIn(head);
    } catch (e) {
      this.crash(e);
    }
  }

  onData(chunk: Uint8Array): void {
    try {
      this.dataIn(chunk, 0, chunk.byteLength);
    } catch (e) {
      this.crash(e);
    }
  }

  onBytes(d: Uint8Array, a: number, b: number): void {
    try {
      this.dataIn(d, a, b);
    } catch (e) {
      this.crash(e);
    }
  }

  onReadEnd(): void {
    try {
      this.readEnd();
    } catch (e) {
      this.crash(e);
    }
  }

  onEnd(): void {
    try {
      this.end();
    } catch (e) {
      this.crash(e);
    }
  }

  onError(err: UpstreamError, received: boolean): void {
    try {
      this.error(err, received);
    } catch (e) {
      this.crash(e);
    }
  }

  private headIn(head: UpstreamHead): void {
    const status = head.status;
    this.status = status;
    if (RETRY_STATUS.has(status)) {
      this.mode = "retry";
      return;
    }
    if (status < 300 && this.ex.path === "/v1/responses") this.sniff = new IdSniffer();
    // Any other 5xx is the engine's own answer and goes to the client, but the replica is
    // passed over for a while: a client's 4xx never counts against it.
    if (status >= 500) this.ctx.balancer.cooldown(this.lease.endpoint.id, this.ctx.settings.cooldownMs);
    // The engine's headers can no longer be sent: its body is piped into the open stream, or
    // its error turned into an error event.
    if (this.call.opened) {
      this.mode = status < 300 ? "stream" : "event";
      if (status < 300 && this.call.usage) this.strip = new UsageStrip();
      return;
    }
    const h = this.ctx.headers.answer(this.lease.endpoint.id, head.names, head.values);
    const adm = this.call.req.adm;
    this.headers = adm !== undefined && adm.rated ? withLines(h, this.ctx.admission.headers(adm)) : h;
    this.sse = h.sse;
    // Only an SSE answer has a usage chunk to take out: one of another type passes untouched.
    if (h.sse && status < 300 && this.call.usage) this.strip = new UsageStrip();
    if (h.sse) this.tokens.key = contentKey(this.ex.target);
    const len = head.contentLength;
    this.mode = !this.call.req.facts.stream && len >= 0 && len <= BUFFER_LIMIT ? "buffer" : "stream";
  }

  /** Body bytes d[a, b). */
  private dataIn(d: Uint8Array, a: number, b: number): void {
    if (this.sniff !== undefined) this.sniffId(d, a, b);
    // Small and whole (or a retry's message): kept until the end. Dying mid-body is still
    // before the client saw a byte, so it is retried like a refused connection.
    // Ranges of the reads are kept, not copied: each socket read arrives in a fresh buffer (src/http/client.ts).
    if (this.mode !== "stream") {
      if (this.mode === "buffer") {
        this.parts.add(d, a, b);
        this.tokens.feed(d, a, b);
      } else if (this.parts.count < 4) this.parts.add(d, a, b);
      return;
    }
    this.tokens.feed(d, a, b);
    // Chunks of one read are gathered and written together at its end (onReadEnd): one write
    // per read from the engine, however many chunks it held.
    if (this.strip !== undefined) this.strip.pass(d, a, b, this.parts);
    else this.parts.add(d, a, b);
    if (!this.settled) {
      this.settled = true;
      this.firstByte((this.ctx.time.mono() - this.t0) / 1000);
    }
  }

  /** The response's id, remembered with the client's key and this replica once found. */
  private sniffId(d: Uint8Array, a: number, b: number): void {
    const s = this.sniff!;
    const id = s.feed(d, a, b);
    if (s.done) this.sniff = undefined;
    if (id !== undefined) this.ctx.responses.remember(id, this.call.req.owner, this.lease.endpoint.id);
  }

  private firstByte(seconds: number): void {
    this.m.ttfb.observe(seconds);
    this.m.ttft.observe(seconds);
  }

  private readEnd(): void {
    // Only a stream is written read by read; a whole answer (or an error kept for its message)
    // waits for its end, however many reads bring it.
    if (this.released || this.mode !== "stream") return;
    // The head goes out with the first read even when the strip holds all of it (an event cut
    // by the read's end): the client sees the answer start as soon as without the strip.
    if (this.parts.count === 0 && (this.started || this.strip?.holding !== true)) return;
    this.deadline = this.ctx.deadlines.clock + this.ctx.settings.idleTimeoutMs;
    const adm = this.call.req.adm;
    if (adm !== undefined && this.tokens.streamed > this.charged && adm.metered) this.chargeStreamed(adm);
    this.drain();
  }

  /** Writes what the engine sent since the last write (with the head, the first time). */
  private drain(): void {
    const parts = this.parts;
    let ok: boolean;
    // The server copies the pieces into its write; then they are emptied in place (a new
    // list per read would be garbage at every read of every stream).
    if (!this.started) {
      this.started = true;
      ok = this.ex.stream(this.status, this.headers!, parts);
    } else {
      if (parts.size === 0) return;
      ok = this.ex.write(parts);
    }
    parts.clear();
    if (ok || this.ex.aborted || this.blocked) return;
    // The client is not taking it as fast as the engine sends: stop reading from the engine
    // until it has (backpressure).
    this.blocked = true;
    this.up?.pause();
    this.ex.onDrain = () => {
      this.blocked = false;
      this.up?.resume();
    };
  }

  private end(): void {
    if (this.mode === "event") {
      const text = dec.decode(this.parts.bytes());
      this.parts.clear();
      this.settled = true;
      const ex = this.ex;
      this.finish(this.status);
      ex.end(enc.encode(errorEvent(text, this.status, this.lease.endpoint.id)));
      return;
    }
    if (this.mode === "retry") {
      const text = dec.decode(this.parts.bytes()).slice(0, 200);
      const kind = this.status === 429 ? "busy" : `http_${this.status}`;
      // A busy engine is healthy; a 5xx one is passed over for a while.
      this.fail(kind, `replica ${this.lease.endpoint.id} answered ${this.status}${text ? `: ${text}` : ""}`, this.status !== 429);
      return;
    }
    if (this.mode === "buffer") {
      const now = this.ctx.time.mono();
      this.firstByte((now - this.t0) / 1000);
      this.settled = true;
      const ex = this.ex;
      this.finish(this.status, now);
      // Head and body copied into one write, the body straight from the engine's read.
      ex.respond(this.status, this.headers!, this.parts);
      this.parts.clear();
      return;
    }
    if (!this.settled) {
      // Ended with an empty body.
      this.settled = true;
      this.firstByte((this.ctx.time.mono() - this.t0) / 1000);
    }
    const ex = this.ex;
    this.strip?.flush(this.parts);
    this.finish(this.status);
    // The whole answer came in one read: it goes out whole, in one write.
    if (!this.started) ex.respond(this.status, this.headers!, this.parts);
    else ex.end(this.parts);
    this.parts.clear();
  }

  private error(err: UpstreamError, _received: boolean): void {
    if (this.released) return;
    this.up = undefined;
    const ep = this.lease.endpoint;
    if (this.why === "client") {
      this.finish(499, undefined, true);
      return;
    }
    // Not a byte written to the client yet (the chunks of this read are still held): the
    // attempt fails and the request may go elsewhere, as before the first byte.
    if (!this.settled || !this.started) {
      // Messages name the replica, never its address: they go to the client.
      if (this.why === "first_byte") this.fail("timeout", `no answer from replica ${ep.id} within ${this.ctx.settings.firstByteTimeoutMs / 1000}s`, true);
      else if (err.kind === "connect") this.fail("connect", `cannot reach replica ${ep.id} (${err.message})`, true);
      else if (err.kind === "protocol") this.fail("protocol", `replica ${ep.id} sent a malformed response: ${err.message}`, true);
      else this.fail("reset", `replica ${ep.id} failed before its first byte: ${err.message}`, true);
      return;
    }
    // The replica died or went quiet mid-stream: bytes already reached the client, so no
    // retry. End the stream with an error event it can see, never a silent cut.
    const idleMs = this.ctx.settings.idleTimeoutMs;
    const what =
      this.why === "idle" ? `no data from replica ${ep.id} for ${idleMs / 1000}s` : err.kind === "protocol" ? `replica ${ep.id} sent a malformed response: ${err.message}` : `replica ${ep.id} failed mid-stream: ${err.message}`;
    this.ctx.metrics.upstreamError(this.model, this.why === "idle" ? "idle_timeout" : err.kind === "protocol" ? "protocol" : "mid_stream");
    if (this.why !== "idle") this.ctx.balancer.cooldown(ep.id, this.ctx.settings.cooldownMs);
    this.strip?.flush(this.parts);
    this.finish(502, undefined, true);
    if (this.sse) {
      const frame = enc.encode(sseErrorFrame(what));
      this.parts.add(frame, 0, frame.byteLength);
      this.drain();
      this.ex.end();
    } else {
      // Not SSE: there is no error event to send, so the body is cut short of its end, which
      // the client's HTTP library reports as an error.
      this.drain();
      this.ex.destroy();
    }
  }

  /** The answer's end, whatever it was: the lease goes back, and its status, duration and tokens are counted. */
  private finish(status: number, now = this.ctx.time.mono(), cut = false): void {
    if (this.released) return;
    this.released = true;
    this.ctx.deadlines.delete(this);
    this.ex.onAbort = undefined;
    this.ex.onDrain = undefined;
    this.lease.release();
    this.slotEnd();
    if (status === 200) this.m.ok.v++;
    else this.ctx.metrics.answered(this.model, status);
    this.m.duration.observe((now - this.t0) / 1000);
    const tokens = this.tokens.total();
    this.m.tokens.v += tokens;
    // The engine's prompt_tokens, read once for the ledger and the key's limits; -1: none given.
    const prompt = this.tokens.prompt();
    this.count(status, prompt, tokens, cut);
    const adm = this.call.req.adm;
    if (adm !== undefined && adm.metered) this.settle(adm, prompt, tokens);
  }

  /** Its row in the ledger: the engine's usage, or for a stream cut short, the tokens it streamed. */
  private count(status: number, prompt: number, completion: number, cut: boolean, cached = this.tokens.cached()): void {
    const p = prompt > 0 ? prompt : 0;
    this.ctx.ledger.answered(this.call.req.owner, this.model, status, p, completion, cached > 0 ? cached : 0, cut, this.call.gpu);
    this.ctx.reconcile?.ended(this.lease.endpoint.id, this.model, p, completion);
    // Settled in the same step as its ledger row: a take of the rows never splits the two (budget.ts).
    this.call.req.budget?.settle(p + completion, this.call.gpu);
  }

  /** The slot on the replica is left: its share of the replica's GPUs meanwhile is the request's. */
  private slotEnd(): void {
    const g = this.ctx.gpu;
    if (g !== undefined) this.call.gpu += g.end(this.lease.endpoint, this.v0);
  }

  /** The completion's tokens streamed since the last read, counted against its key's token limits as they pass. */
  private chargeStreamed(adm: KeyState): void {
    const n = this.tokens.streamed;
    this.ctx.admission.tokens(adm, n - this.charged);
    this.charged = n;
  }

  /** The answer's end: the engine's usage (its prompt and completion) replaces what was counted for it. */
  private settle(adm: KeyState, prompt: number, completion: number): void {
    const estimate = this.call.req.prompt ?? 0;
    this.ctx.admission.tokens(adm, completion - this.charged + (prompt >= 0 ? prompt - estimate : 0));
    this.charged = completion;
  }

  private fail(kind: string, error: string, cool: boolean): void {
    if (this.released) return;
    this.released = true;
    this.up?.abort();
    this.ctx.deadlines.delete(this);
    this.ex.onAbort = undefined;
    this.lease.release();
    this.slotEnd();
    if (cool) this.ctx.balancer.cooldown(this.lease.endpoint.id, this.ctx.settings.cooldownMs);
    // An attempt retried elsewhere counts no tokens here, but it ran here: a poll meanwhile is not quiet.
    this.ctx.reconcile?.ended(this.lease.endpoint.id, this.model, 0, 0);
    this.ctx.metrics.upstreamError(this.model, kind);
    this.call.failed(this.lease.endpoint.id, this.model, { kind, error });
  }
}

/** An answer's head with more header lines (a limited key's x-ratelimit-*): made per answer, for those keys alone. */
function withLines(h: AnswerHead, lines: string): AnswerHead {
  return h.latin1 === true ? { text: h.text + lines, bytes: h.bytes + lines.length, latin1: true, sse: h.sse } : { text: h.text + lines, bytes: h.bytes + lines.length, sse: h.sse };
}

/** An engine's error answer as an SSE error event: its own OpenAI-shaped error when it sent one. */
function errorEvent(text: string, status: number, replica: string): string {
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    if (typeof parsed === "object" && parsed !== null && typeof parsed.error === "object" && parsed.error !== null) return `data: ${JSON.stringify({ error: parsed.error })}\n\n`;
  } catch {
    // Not JSON: the message quotes it.
  }
  const shown = text.slice(0, 200);
  return `data: ${openAIErrorBody(status, `replica ${replica} answered ${status}${shown ? `: ${shown}` : ""}`, { code: "upstream_error" })}\n\n`;
}
