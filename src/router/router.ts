// The router: one OpenAI-compatible endpoint in front of every replica. It keeps the endpoint
// table the control plane publishes (EndpointSink), answers which replicas anyone wants
// (UsageSource), picks a replica per request through the balancer, and proxies the request with
// streaming, retries before the first byte, timeouts and clean cancellation. Plain Bun.serve
// with a hand-written dispatch: this is the hot path, and framework routing costs throughput.

import type { Server } from "bun";
import { createHash, timingSafeEqual } from "node:crypto";
import type { ApiKeyEntry, CatalogEntry, DemandSink, EndpointInfo, EndpointSink, UsageSource } from "../protocol/routing";
import { Balancer, type Lease } from "./balancer";
import { EngineMetricsPoller } from "./engine-metrics";
import { openAIError, sseErrorFrame } from "./errors";
import { prefixKey } from "./prefix-key";
import { Counter, Gauge, Histogram, Registry } from "./prom";

export interface RouterOptions {
  host: string;
  port: number;
  now?: () => number;
  maxBodyBytes?: number;
  /** Attempts per request, counting the first; retries happen only before any byte reached the client. */
  maxAttempts?: number;
  /** Upstream must send its first byte within this. */
  firstByteTimeoutMs?: number;
  /** And then never go quiet for longer than this between chunks. */
  idleTimeoutMs?: number;
  /** How long a request for a cold on-demand model waits for a replica to come up. */
  coldStartTimeoutMs?: number;
  /** A failing endpoint (connection error, 5xx) is passed over this long. */
  cooldownMs?: number;
  /** Engine /metrics polling interval; 0 turns polling off. */
  metricsIntervalMs?: number;
  /** Require a client API key (created with `llmgw keys create`) on /v1/*. Off by default. */
  requireApiKey?: boolean;
  /** The admin token: it alone opens GET /metrics. */
  adminToken?: string;
  demand?: DemandSink;
  log?: { info(o: object, m?: string): void; warn(o: object, m?: string): void; debug(o: object, m?: string): void };
  tls?: { cert: string; key: string };
  /** Bounded-load factor of the prefix-affinity hashing (default 1.25). */
  loadFactor?: number;
  /** Bun.serve's idle timeout for requests the router does not proxy (tests lower it). */
  serverIdleTimeoutSec?: number;
}

/**
 * Every route the router serves and who may call it. Dispatch goes through this table, and a
 * test walks it to check each route refuses callers without the right token: a route added
 * here without thinking about auth fails that test.
 */
export const ROUTER_ROUTES = [
  { method: "POST", path: "/v1/", prefix: true, auth: "client" },
  { method: "GET", path: "/v1/models", prefix: false, auth: "client" },
  { method: "GET", path: "/v1/models/", prefix: true, auth: "client" },
  { method: "GET", path: "/metrics", prefix: false, auth: "admin" },
  { method: "GET", path: "/healthz", prefix: false, auth: "none" },
  { method: "GET", path: "/health", prefix: false, auth: "none" },
] as const;
type RouteDef = (typeof ROUTER_ROUTES)[number];

const RETRY_STATUS = new Set([429, 502, 503, 504]);
const sha256hex = (s: string) => createHash("sha256").update(s).digest("hex");
const digest = (s: string) => createHash("sha256").update(s).digest();
// Named lists rather than "everything but hop-by-hop": building headers is per-request work on
// the hot path, and engines need (and send) only a few.
const PASS_UP = ["accept", "x-request-id", "traceparent", "tracestate", "user-agent"] as const;
const PASS_DOWN = ["content-type", "cache-control", "x-request-id", "openai-processing-ms"] as const;
const enc = new TextEncoder();
const dec = new TextDecoder();
/** Bodies up to this size are buffered when not streamed: one write instead of a stream is faster. */
const BUFFER_LIMIT = 1024 * 1024;

export class Router implements EndpointSink, UsageSource {
  readonly balancer: Balancer;
  private catalog = new Map<string, CatalogEntry>();
  private keys = new Map<string, ApiKeyEntry>();
  private catalogList: CatalogEntry[] = [];
  private server: Server<undefined> | undefined;
  private poller: EngineMetricsPoller | undefined;
  private readonly waiters = new Set<() => void>();
  private readonly watches = new Set<Watch>();
  private sweeper: ReturnType<typeof setInterval> | undefined;
  private readonly o: Required<Omit<RouterOptions, "requireApiKey" | "adminToken" | "demand" | "log" | "tls" | "serverIdleTimeoutSec" | "loadFactor">> & RouterOptions;

  // metrics
  private readonly registry = new Registry();
  private readonly requests: Counter;
  private readonly retries: Counter;
  private readonly upstreamErrors: Counter;
  private readonly ttfb: Histogram;
  private readonly duration: Histogram;

  constructor(opts: RouterOptions) {
    this.o = {
      now: Date.now,
      maxBodyBytes: 8 * 1024 * 1024,
      maxAttempts: 3,
      firstByteTimeoutMs: 300_000,
      idleTimeoutMs: 120_000,
      coldStartTimeoutMs: 300_000,
      cooldownMs: 5_000,
      metricsIntervalMs: 1_000,
      ...opts,
    };
    this.balancer = new Balancer({ now: this.o.now, ...(this.o.loadFactor !== undefined ? { loadFactor: this.o.loadFactor } : {}) });
    const buckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
    this.requests = this.registry.add(new Counter("llmgw_router_requests_total", "Requests by model and HTTP status.", ["model", "status"]));
    this.ttfb = this.registry.add(new Histogram("llmgw_router_time_to_first_byte_seconds", "Time from request to the upstream's first body byte.", ["model"], buckets));
    this.duration = this.registry.add(new Histogram("llmgw_router_request_duration_seconds", "Time from request to the end of the response.", ["model"], buckets));
    this.retries = this.registry.add(new Counter("llmgw_router_retries_total", "Requests retried on another replica before any byte reached the client.", ["model", "reason"]));
    this.upstreamErrors = this.registry.add(new Counter("llmgw_router_upstream_errors_total", "Failures talking to replicas.", ["model", "kind"]));
    this.registry.add(
      new Gauge("llmgw_router_inflight_requests", "Requests in flight per replica endpoint.", ["endpoint", "model"], () =>
        this.balancer.endpoints().map((e) => [[e.id, e.info.models[0] ?? ""], e.inflight] as [string[], number]),
      ),
    );
  }

  // ---- EndpointSink / UsageSource ------------------------------------------------------

  setEndpoints(endpoints: EndpointInfo[]): void {
    this.balancer.setEndpoints(endpoints);
    for (const w of [...this.waiters]) w();
  }

  setCatalog(models: CatalogEntry[]): void {
    const map = new Map<string, CatalogEntry>();
    for (const m of models) {
      map.set(m.name, m);
      for (const a of m.aliases) map.set(a, m);
    }
    this.catalog = map;
    this.catalogList = models;
  }

  setApiKeys(keys: ApiKeyEntry[]): void {
    this.keys = new Map(keys.map((k) => [k.sha256, k]));
  }

  lastUsed(): ReadonlyMap<string, number> {
    return this.balancer.lastUsed();
  }

  inflightByModel(): ReadonlyMap<string, number> {
    return this.balancer.inflightByModel();
  }

  // ---- serving ------------------------------------------------------------------------

  start(): { url: string; port: number } {
    this.server = Bun.serve({
      hostname: this.o.host,
      port: this.o.port,
      // Our own limit answers 413 in OpenAI's shape: from Content-Length before reading, or
      // while reading a chunked body. Bun's own limit is kept out of its way.
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
      ...(this.o.serverIdleTimeoutSec !== undefined ? { idleTimeout: this.o.serverIdleTimeoutSec } : {}),
      ...(this.o.tls ? { tls: { cert: Bun.file(this.o.tls.cert), key: Bun.file(this.o.tls.key) } } : {}),
      fetch: (req, server) => this.handle(req, server),
      error: (err) => {
        this.o.log?.warn({ err: err.message }, "router request failed");
        return openAIError(500, "internal error in the router; see the server log");
      },
    });
    // Deadline granularity: a quarter of the shortest timeout, within 10–250 ms.
    const every = Math.max(10, Math.min(250, Math.min(this.o.firstByteTimeoutMs, this.o.idleTimeoutMs) / 4));
    this.sweeper = setInterval(() => this.sweep(), every);
    this.sweeper.unref?.();
    if (this.o.metricsIntervalMs > 0) {
      this.poller = new EngineMetricsPoller({
        endpoints: () => this.balancer.endpoints(),
        apply: (id, load) => this.balancer.setMetrics(id, load),
        intervalMs: this.o.metricsIntervalMs,
        log: this.o.log,
      });
      this.poller.start();
    }
    const port = this.server.port!;
    return { url: `http://${this.o.host.includes(":") ? `[${this.o.host}]` : this.o.host}:${port}`, port };
  }

  async stop(): Promise<void> {
    this.poller?.stop();
    if (this.sweeper) clearInterval(this.sweeper);
    for (const w of [...this.waiters]) w();
    await this.server?.stop(true);
  }

  private route(method: string, path: string): RouteDef | undefined {
    for (const r of ROUTER_ROUTES) if (r.method === method && (r.prefix ? path.startsWith(r.path) && path.length > r.path.length : path === r.path)) return r;
    return undefined;
  }

  private handle(req: Request, server: Server<undefined>): Response | Promise<Response> {
    const url = req.url;
    const start = url.indexOf("/", url.indexOf("//") + 2);
    const q = url.indexOf("?", start);
    const path = q < 0 ? url.slice(start) : url.slice(start, q);
    const route = this.route(req.method, path);
    if (!route) return openAIError(404, `no route ${req.method} ${path}; the router serves POST /v1/* and GET /v1/models`, { code: "not_found" });
    let pool: string | undefined;
    if (route.auth === "admin") {
      if (!this.o.adminToken || !this.bearerIs(req, this.o.adminToken)) return openAIError(401, `${req.method} ${path} needs the admin token as a bearer token`, { code: "invalid_api_key" });
    } else if (route.auth === "client") {
      const auth = this.authorize(req);
      if (auth instanceof Response) return auth;
      pool = auth.pool;
    }
    switch (route.path) {
      case "/v1/":
        return this.proxy(req, server, url.slice(start), pool);
      case "/v1/models":
        return this.listModels(pool);
      case "/v1/models/": {
        let id: string;
        try {
          id = decodeURIComponent(path.slice("/v1/models/".length));
        } catch {
          return openAIError(400, "the model id in the path is not valid percent-encoding", { param: "model", code: "invalid_request" });
        }
        return this.getModel(id, pool);
      }
      case "/metrics":
        return new Response(this.registry.render(), { headers: { "content-type": "text/plain; version=0.0.4; charset=utf-8" } });
      default:
        return new Response('{"status":"ok"}', { headers: { "content-type": "application/json" } });
    }
  }

  /** Constant-time comparison of a bearer token against a secret. */
  private bearerIs(req: Request, token: string): boolean {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "");
    return m !== null && timingSafeEqual(digest(m[1]!), digest(token));
  }

  /** Checks the client's API key when keys are required; returns an error response, or the key's pool. */
  private authorize(req: Request): Response | { pool?: string } {
    if (!this.o.requireApiKey) return {};
    const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.get("authorization") ?? "");
    // Keys are looked up by their SHA-256: the secret itself is never compared or kept.
    const key = m ? this.keys.get(sha256hex(m[1]!)) : undefined;
    if (!key) return openAIError(401, "Incorrect or missing API key: send Authorization: Bearer <key> (create one with `llmgw keys create NAME`)", { code: "invalid_api_key" });
    return key.pool ? { pool: key.pool } : {};
  }

  private listModels(pool: string | undefined): Response {
    const data = [];
    for (const m of this.catalogList) {
      if (pool && m.pool !== pool) continue;
      data.push({ id: m.name, object: "model", created: m.created, owned_by: "llmgw" });
      for (const a of m.aliases) data.push({ id: a, object: "model", created: m.created, owned_by: "llmgw", root: m.name });
    }
    return Response.json({ object: "list", data });
  }

  private getModel(id: string, pool: string | undefined): Response {
    const m = this.catalog.get(id);
    if (!m || (pool && m.pool !== pool)) return openAIError(404, `The model '${id}' does not exist`, { code: "model_not_found", param: "model" });
    return Response.json({ id, object: "model", created: m.created, owned_by: "llmgw", ...(id !== m.name ? { root: m.name } : {}) });
  }

  /** Waits until the model has an endpoint, the deadline passes, or the client goes away. */
  private waitForEndpoint(model: string, pool: string | undefined, signal: AbortSignal): Promise<boolean> {
    return new Promise((resolve) => {
      if (this.balancer.has(model, pool)) return resolve(true);
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.waiters.delete(check);
        signal.removeEventListener("abort", onAbort);
        resolve(ok);
      };
      const check = () => {
        if (this.balancer.has(model, pool)) done(true);
        else if (!this.server) done(false);
      };
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), this.o.coldStartTimeoutMs);
      this.waiters.add(check);
      signal.addEventListener("abort", onAbort);
    });
  }

  private async proxy(req: Request, server: Server<undefined>, pathAndQuery: string, keyPool: string | undefined): Promise<Response> {
    const t0 = performance.now();
    // A key bound to a pool decides the pool; otherwise the client may pick one by header.
    const pool = keyPool ?? req.headers.get("x-llmgw-pool") ?? undefined;

    const max = this.o.maxBodyBytes;
    const declared = Number(req.headers.get("content-length") ?? 0);
    if (declared > max) return openAIError(413, `request body is ${declared} bytes; the limit is ${max}`, { code: "request_too_large" });
    const buf = declared > 0 ? await req.arrayBuffer() : await readCapped(req, max);
    if (buf === undefined || buf.byteLength > max) return openAIError(413, `request body is over the limit of ${max} bytes`, { code: "request_too_large" });
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(dec.decode(buf));
    } catch (e) {
      return openAIError(400, `We could not parse the JSON body of your request: ${(e as Error).message}`, { code: "invalid_json" });
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) return openAIError(400, "the request body must be a JSON object", { code: "invalid_request" });
    const model = body.model;
    if (model === undefined || model === "") return openAIError(400, "you must provide a model parameter", { param: "model", code: "missing_model" });
    if (typeof model !== "string") return openAIError(400, `model must be a string, not ${model === null ? "null" : Array.isArray(model) ? "an array" : typeof model}`, { param: "model", code: "invalid_type" });

    if (!this.balancer.has(model, pool)) {
      const entry = this.catalog.get(model);
      if (!entry || (pool !== undefined && entry.pool !== pool))
        return openAIError(404, `The model '${model}' does not exist${pool ? ` in pool '${pool}'` : ""}`, { param: "model", code: "model_not_found" });
      // Nothing serves it: tell the control plane someone wants it. An on-demand model is
      // worth waiting for; any other is starting, failing or unplaceable, and the client is
      // better served by a prompt 503 it can retry.
      this.o.demand?.requestModel(model);
      server.timeout(req, 0);
      if (!entry.on_demand || !(await this.waitForEndpoint(model, pool, req.signal))) {
        this.requests.inc([entry.name, "503"]);
        return openAIError(503, `no replica of '${model}' is ready${entry.on_demand ? ` after waiting ${Math.round(this.o.coldStartTimeoutMs / 1000)}s for one to start` : ""}; try again shortly`, {
          code: "model_not_ready",
          headers: { "retry-after": entry.on_demand ? "30" : "10" },
        });
      }
    }

    // Generation can take long before anything is written; our own timeouts govern instead.
    server.timeout(req, 0);
    const key = prefixKey(body);
    const stream = body.stream === true;
    const headers = forwardHeaders(req.headers);
    let exclude: Set<string> | undefined;
    let lastError = "no replica answered";
    for (let attempt = 0; attempt < this.o.maxAttempts; attempt++) {
      const lease = this.balancer.acquire(model, key, pool, exclude);
      if (!lease) break;
      const ep = lease.endpoint;
      const canonical = ep.info.models[0] ?? model;
      // SGLang serves one name; any alias is sent to it as the model's own name.
      const payload = ep.info.engine === "sglang" && model !== canonical ? JSON.stringify({ ...body, model: canonical }) : buf;
      const outcome = await this.attempt(req, lease, pathAndQuery, headers, payload, stream, canonical, t0);
      if (outcome instanceof Response) return outcome;
      lastError = outcome.error;
      this.retries.inc([canonical, outcome.kind]);
      (exclude ??= new Set()).add(ep.id);
      if (req.signal.aborted) break;
    }
    const name = this.catalog.get(model)?.name ?? model;
    this.requests.inc([name, "502"]);
    return openAIError(502, `upstream failure for model '${model}': ${lastError}`, { code: "upstream_error" });
  }

  /**
   * One try at one replica. Returns the client's response, or why it should be retried elsewhere
   * (only ever before a byte was sent to the client).
   */
  private async attempt(
    req: Request,
    lease: Lease,
    pathAndQuery: string,
    headers: Record<string, string>,
    payload: string | ArrayBuffer,
    stream: boolean,
    model: string,
    t0: number,
  ): Promise<Response | { kind: string; error: string }> {
    const ep = lease.endpoint;
    const ac = new AbortController();
    let why: "client" | "first_byte" | "idle" | undefined;
    const onClientAbort = () => {
      why ??= "client";
      ac.abort();
    };
    req.signal.addEventListener("abort", onClientAbort);
    // Timeouts are deadlines checked by one sweep for all requests, not a timer per request
    // and per chunk: moving a deadline is a number store on the hot path.
    const watch: Watch = {
      deadline: performance.now() + this.o.firstByteTimeoutMs,
      expire: () => {
        why ??= "first_byte";
        ac.abort();
      },
    };
    this.watches.add(watch);
    let released = false;
    const finish = (status: number) => {
      if (released) return;
      released = true;
      this.watches.delete(watch);
      req.signal.removeEventListener("abort", onClientAbort);
      lease.release();
      this.requests.inc([model, String(status)]);
      this.duration.observe([model], (performance.now() - t0) / 1000);
    };
    const fail = (kind: string, error: string, cool: boolean) => {
      released = true;
      this.watches.delete(watch);
      req.signal.removeEventListener("abort", onClientAbort);
      lease.release();
      if (cool) this.balancer.cooldown(ep.id, this.o.cooldownMs);
      this.upstreamErrors.inc([model, kind]);
      return { kind, error };
    };

    let res: Response;
    try {
      res = await fetch(ep.url + pathAndQuery, { method: "POST", headers, body: payload, signal: ac.signal, redirect: "manual" });
    } catch (e) {
      if (why === "client") {
        finish(499);
        return new Response(null, { status: 499 });
      }
      const msg = why === "first_byte" ? `no answer from ${ep.id} within ${this.o.firstByteTimeoutMs / 1000}s` : `cannot reach ${ep.id}: ${(e as Error).message}`;
      return fail(why === "first_byte" ? "timeout" : "connect", msg, true);
    }

    if (RETRY_STATUS.has(res.status)) {
      const text = await res.text().catch(() => "");
      const kind = res.status === 429 ? "busy" : `http_${res.status}`;
      // A busy engine is healthy; a 5xx one is passed over for a while. A client's 4xx never counts.
      return fail(kind, `${ep.id} answered ${res.status}${text ? `: ${text.slice(0, 200)}` : ""}`, res.status !== 429);
    }
    // Any other 5xx is the engine's own answer and goes to the client, but the replica is
    // passed over for a while: a client's 4xx never counts against it.
    if (res.status >= 500) this.balancer.cooldown(ep.id, this.o.cooldownMs);
    const outHeaders = responseHeaders(res.headers, ep.id);

    const len = Number(res.headers.get("content-length") ?? -1);
    if (!stream && len >= 0 && len <= BUFFER_LIMIT) {
      // Small and whole: read it all, then answer in one write. Dying mid-body is still
      // before the client saw a byte, so it is retried like a refused connection.
      let data: ArrayBuffer;
      try {
        data = await res.arrayBuffer();
      } catch (e) {
        if (why === "client") {
          finish(499);
          return new Response(null, { status: 499 });
        }
        return fail("reset", `${ep.id} failed while answering: ${(e as Error).message}`, true);
      }
      this.ttfb.observe([model], (performance.now() - t0) / 1000);
      finish(res.status);
      return new Response(data, { status: res.status, headers: outHeaders });
    }

    const reader = res.body!.getReader();
    let first: { done: boolean; value?: Uint8Array };
    try {
      first = await reader.read();
    } catch (e) {
      if (why === "client") {
        finish(499);
        return new Response(null, { status: 499 });
      }
      return fail(why === "first_byte" ? "timeout" : "reset", `${ep.id} failed before its first byte: ${(e as Error).message}`, true);
    }
    this.ttfb.observe([model], (performance.now() - t0) / 1000);
    const sse = (res.headers.get("content-type") ?? "").includes("text/event-stream");
    const status = res.status;
    const idleMs = this.o.idleTimeoutMs;
    watch.deadline = performance.now() + idleMs;
    watch.expire = () => {
      why ??= "idle";
      ac.abort();
    };
    const cooldown = () => this.balancer.cooldown(ep.id, this.o.cooldownMs);
    const countError = (kind: string) => this.upstreamErrors.inc([model, kind]);

    // A "direct" stream: chunks go straight to the socket, with no queue between us and it.
    const body = new ReadableStream<Uint8Array>({
      type: "direct",
      async pull(c: ReadableStreamDirectController) {
        try {
          if (first.value) await c.write(first.value);
          if (!first.done) {
            c.flush();
            for (;;) {
              const { value, done } = await reader.read();
              if (done) break;
              watch.deadline = performance.now() + idleMs;
              // Awaiting a full buffer is the backpressure: a slow client slows the upstream read.
              // 0 means the client has gone: stop reading from the engine at once.
              let wrote = c.write(value);
              if (typeof wrote !== "number") wrote = await wrote;
              if (wrote === 0 && value.byteLength > 0) throw new ClientGone();
              c.flush();
            }
          }
          c.close();
          finish(status);
        } catch (e) {
          if (e instanceof ClientGone) {
            why ??= "client";
            ac.abort();
          }
          if (why === "client" || released) {
            finish(499);
            return;
          }
          // The replica died or went quiet mid-stream: bytes already reached the client, so
          // no retry. End the stream with an error event it can see, never a silent cut.
          const what = why === "idle" ? `no data from replica ${ep.id} for ${idleMs / 1000}s` : `replica ${ep.id} failed mid-stream: ${(e as Error).message}`;
          countError(why === "idle" ? "idle_timeout" : "mid_stream");
          if (why !== "idle") cooldown();
          try {
            if (sse) {
              c.write(enc.encode(sseErrorFrame(what)));
              c.close();
            } else c.close(new Error(what));
          } catch {
            // the client is already gone
          }
          finish(502);
        }
      },
      cancel() {
        why ??= "client";
        ac.abort();
        finish(499);
      },
    } satisfies Bun.DirectUnderlyingSource<Uint8Array>);
    return new Response(body, { status, headers: outHeaders });
  }

  /** Expires the deadlines that have passed; one sweep for every request in flight. */
  private sweep(): void {
    const now = performance.now();
    for (const w of this.watches) if (now > w.deadline) {
      this.watches.delete(w);
      w.expire();
    }
  }
}

/** The client went away while a chunk was being written to it. */
class ClientGone extends Error {}

interface Watch {
  deadline: number;
  expire: () => void;
}

/** Reads a body without a Content-Length, giving up (undefined) as soon as it passes `max` bytes. */
async function readCapped(req: Request, max: number): Promise<ArrayBuffer | undefined> {
  if (!req.body) return new ArrayBuffer(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of req.body) {
    size += chunk.byteLength;
    if (size > max) return undefined;
    parts.push(chunk);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out.buffer;
}

/** Headers passed upstream: the body's type, and what identifies or traces the request. */
function forwardHeaders(h: Headers): Record<string, string> {
  const out: Record<string, string> = { "content-type": "application/json" };
  for (const k of PASS_UP) {
    const v = h.get(k);
    if (v !== null) out[k] = v;
  }
  return out;
}

/** Headers passed back to the client: what describes the body, plus which replica answered. */
function responseHeaders(h: Headers, replica: string): Record<string, string> {
  const out: Record<string, string> = { "x-llmgw-replica": replica };
  for (const k of PASS_DOWN) {
    const v = h.get(k);
    if (v !== null) out[k] = v;
  }
  return out;
}
