// src/router: the data plane. One OpenAI-compatible endpoint in front of every replica: the
// balancer (which replica serves an attempt: priority tiers, prefix affinity, bounded loads),
// the prefix key, the engine metrics poller, the router's Prometheus registry, its OpenAI-shaped
// errors, and the HTTP/1.1 wire module (the client-facing server and the keep-alive engine
// client). It runs in the head node's process but shares nothing with the control plane but
// the contracts of src/protocol: the control plane pushes endpoints, catalog and API keys in
// (EndpointSink) and reads usage back (UsageSource), and hears of demand through DemandSink.
//
// Imports: src/protocol (those contracts) and src/lib (scheduler, hash, net, format) only,
// besides its own files. Never src/control, never src/store, nor api, app, cli, agent or sim
// (test/unit/architecture.test.ts holds it to that). Time comes only from the injected
// Scheduler: no file here reads a clock or sets a timer of its own.
//
// This file, the router: it keeps the endpoint table the control plane publishes, answers which
// replicas anyone wants, picks a replica per request through the balancer, and proxies the
// request with streaming, retries before the first byte, timeouts and clean cancellation.
// Engines are reached through the router's own keep-alive HTTP/1.1 client (src/http/client.ts), not
// fetch, and clients through its own HTTP/1.1 server (src/http/server.ts), not Bun.serve, with a
// hand-written dispatch: this is the hot path, and Request/Response objects and framework
// routing cost throughput. For the same reason the hot path reads no clock for its deadlines:
// they are set from `clock`, a coarse monotonic time that one sweep (a scheduler.every timer)
// refreshes.

import { bearerToken, sameSecret, sha256hex } from "../lib/digest";
import { hostPort } from "../lib/net";
import { safeText } from "../lib/text";
import { type Scheduler, type Timer, realScheduler } from "../lib/scheduler";
import { type ApiKeyEntry, type CatalogEntry, type DemandSink, type EndpointInfo, type EndpointSink, type FleetMetricsSink, type ModelTraffic, TTFT_BUCKETS_MS, type UsageSource } from "../protocol/routing";
import { Balancer, type BalancerSettings, type Lease } from "./balancer";
import { EngineMetricsPoller } from "./engine-metrics";
import { type Reply, jsonReply, openAIError, openAIErrorBody, sseErrorFrame } from "./errors";
import { type ClientExchange, type HeaderBlock, Http1Server, type Http1Options, Pieces, type RequestHeaders } from "../http/server";
import { BodyReader } from "./body-reader";
import { type BodyFacts, type BodyRead, sizeRefusal, withModel } from "./request-body";
import { IdSniffer, ResponseIds } from "./response-ids";
import { Counter, type CounterSeries, CounterView, Gauge, Histogram, type HistogramSeries, Registry } from "./prom";
import { TokenCount, contentKey } from "./traffic";
import { unavailableReply } from "./unavailable";
import { type Exchange, type ExchangeHandler, type ExtraHeaders, type UpstreamHead, UpstreamError, UpstreamPool } from "../http/client";

/**
 * The router's settings, all required: their defaults live once, in the config schema
 * (ServeConfig), and app/router-settings.ts maps them here.
 */
export interface RouterOptions {
  host: string;
  port: number;
  /**
   * Time: the sweep of deadlines, cold-start holds, latencies, the metrics poller, the listener,
   * the engine pool, and the wall clock of last-used stamps and cooldowns. Default: the real one.
   */
  scheduler?: Scheduler;
  maxBodyBytes: number;
  /** A request body nesting arrays and objects deeper than this is refused (400) before it is parsed. */
  maxJsonDepth: number;
  /** A request body holding more JSON values than this (elements and members) is refused (413) before it is parsed. */
  maxJsonValues: number;
  /** Attempts per request, counting the first; retries happen only before any byte reached the client. */
  maxAttempts: number;
  /** Upstream must send its first byte within this. */
  firstByteTimeoutMs: number;
  /** And then never go quiet for longer than this between chunks. */
  idleTimeoutMs: number;
  /**
   * How long a request for a cold on-demand model waits for a replica to come up, at least: a
   * model whose catalog entry says its replicas may take longer to start is waited for that long.
   */
  coldStartTimeoutMs: number;
  /**
   * A streamed request (`"stream": true`) held for a cold start gets 200 and text/event-stream at
   * once, then an SSE comment line this often (and when the node of its replica becomes known)
   * saying what it waits for and how long it has, so no proxy cuts a silent connection.
   */
  coldStartProgressMs: number;
  /** Requests held for one cold model at once; past it a request is answered 503 with Retry-After. */
  maxHeldPerModel: number;
  /** A failing endpoint (connection error, 5xx) is passed over this long. */
  cooldownMs: number;
  /** Engine /metrics polling interval; 0 turns polling off. */
  metricsIntervalMs: number;
  /** How the balancer places requests (balancer.ts). */
  balancer: BalancerSettings;
  /** Require a client API key (created with `llmgw keys create`) on /v1/*. Off by default. */
  requireApiKey?: boolean;
  /** The admin token: it alone opens GET /metrics. */
  adminToken?: string;
  demand?: DemandSink;
  log?: { info(o: object, m?: string): void; warn(o: object, m?: string): void; debug(o: object, m?: string): void };
  tls?: { cert: string; key: string };
  /** How long a client connection may sit idle, or a request stall while arriving (the listener's default unless given; tests lower it). */
  serverIdleTimeoutSec?: number;
  /** The client listener's deadlines and connection caps (see Http1Options); its clock is the router's scheduler. */
  listener?: Pick<Http1Options, "headTimeoutMs" | "bodyTimeoutMs" | "bodyMinRate" | "maxConnections" | "maxConnectionsPerAddress" | "onShed">;
}

/**
 * The inference endpoints passed on to engines: OpenAI's, and the rerank, score, classify and
 * tokenize ones at least two of vLLM, SGLang and llama-server serve under the same path.
 * Nothing else reaches an engine: an engine's other paths are its admin surface (vLLM's
 * /v1/load_lora_adapter, SGLang's /update_weights, llama-server's /slots), not the clients'.
 */
export const INFERENCE_PATHS = [
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/embeddings",
  "/v1/responses",
  "/v1/rerank", // vLLM, SGLang, llama-server
  "/rerank", // vLLM, llama-server
  "/v1/score", // vLLM, SGLang
  "/classify", // vLLM, SGLang
  "/tokenize", // vLLM, SGLang, llama-server
  "/detokenize", // vLLM, SGLang, llama-server
] as const;

/**
 * Every route the router serves and who may call it. Dispatch goes through this table, and a
 * test walks it to check each route refuses callers without the right token: a route added
 * here without thinking about auth fails that test.
 */
export const ROUTER_ROUTES = [
  ...INFERENCE_PATHS.map((path) => ({ method: "POST", path, prefix: false, auth: "client", kind: "proxy" }) as const),
  { method: "GET", path: "/v1/models", prefix: false, auth: "client", kind: "models" },
  { method: "GET", path: "/v1/models/", prefix: true, auth: "client", kind: "model" },
  { method: "GET", path: "/metrics", prefix: false, auth: "admin", kind: "metrics" },
  { method: "GET", path: "/healthz", prefix: false, auth: "none", kind: "health" },
  { method: "GET", path: "/health", prefix: false, auth: "none", kind: "health" },
] as const;
type RouteDef = (typeof ROUTER_ROUTES)[number];
/** Exact routes by method, then path: one lookup per request, however long the table grows. */
const EXACT_ROUTES = new Map<string, Map<string, RouteDef>>();
for (const r of ROUTER_ROUTES) {
  if (r.prefix) continue;
  let byPath = EXACT_ROUTES.get(r.method);
  if (byPath === undefined) EXACT_ROUTES.set(r.method, (byPath = new Map()));
  byPath.set(r.path, r);
}
const PREFIX_ROUTES = ROUTER_ROUTES.filter((r) => r.prefix);
/** A dot segment ("." or "..", plain or percent-encoded) or an encoded slash or backslash, in a path. */
const DOT_SEGMENT = /(?:^|\/|%2f|%5c|\\)(?:\.|%2e){1,2}(?:$|\/|%2f|%5c|\\)/i;
const ENCODED_SLASH = /%2f|%5c|\\/i;
/** What an engine key may be: visible ASCII, so it can never end the Authorization line early. */
const KEY_CHARS = /^[\x21-\x7e]{1,512}$/;

const RETRY_STATUS = new Set([429, 502, 503, 504]);
/**
 * Engine /metrics requests a second at most: beyond 250 engines a round takes longer than the
 * metrics interval (1,000 engines: one figure per engine every 4 s) rather than costing the
 * prompts this thread serves. An engine's own in-flight count here is exact either way.
 */
const METRICS_MAX_PER_SECOND = 250;
// Named lists rather than "everything but hop-by-hop": building headers is per-request work on
// the hot path, and engines need (and send) only a few.
const PASS_UP = new Set(["accept", "x-request-id", "traceparent", "tracestate", "user-agent"]);
const PASS_DOWN = new Set(["content-type", "cache-control", "x-request-id", "openai-processing-ms"]);
const enc = new TextEncoder();
const NON_ASCII = /[^\x00-\x7f]/;
const dec = new TextDecoder();
export { utf8Text } from "./request-body";
/** Bodies up to this size are buffered when not streamed: one write instead of a stream is faster. */
const BUFFER_LIMIT = 1024 * 1024;
/** The paths whose streamed answers are SSE: only these are opened early for a held request. */
const SSE_PATHS = new Set(["/v1/chat/completions", "/v1/completions", "/v1/responses"]);
/** The head of a stream opened for a held request: SSE, never cached, never buffered by nginx. */
const HELD_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

export class Router implements EndpointSink, UsageSource, FleetMetricsSink {
  readonly balancer: Balancer;
  private catalog = new Map<string, CatalogEntry>();
  private keys = new Map<string, ApiKeyEntry>();
  private catalogList: CatalogEntry[] = [];
  /** The fleet gauges' text the control plane last sent, served after the router's own series. */
  private fleet = "";
  private server: Http1Server | undefined;
  private poller: EngineMetricsPoller | undefined;
  private readonly waiters = new Set<() => void>();
  /** Requests held for a cold start now, per model (its name): bounded by maxHeldPerModel. */
  private readonly holding = new Map<string, number>();
  /** @internal Deadlines of the attempts in flight, expired by one sweep. */
  readonly watches = new WatchList();
  /** @internal The one source of time; Attempt reads latencies off it. */
  readonly scheduler: Scheduler;
  /**
   * @internal scheduler.mono() as of the last sweep, plus one sweep interval: deadlines are
   * set from it, so they never fire early and the hot path reads no clock for them.
   */
  clock: number;
  private tick = 250;
  /** @internal Keep-alive sockets to the engines. */
  readonly upstream: UpstreamPool;
  private sweeper: Timer | undefined;
  private readonly o: RouterOptions;

  // metrics
  private readonly registry = new Registry();
  // @internal: Attempt (below) records into these.
  readonly requests: Counter;
  private readonly retries: Counter;
  readonly upstreamErrors: Counter;
  readonly ttfb: Histogram;
  readonly duration: Histogram;
  private readonly ttft: Histogram;
  private readonly outputTokens: Counter;
  readonly firstByteTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly cooldownMs: number;
  readonly maxAttempts: number;
  /** @internal Where request bodies are read: here when cheap, else on the body worker (body-reader.ts). */
  readonly bodies: BodyReader;
  /** @internal The Responses API's ids: which key made each, on which replica (response-ids.ts). */
  readonly responses = new ResponseIds();

  constructor(opts: RouterOptions) {
    const scheduler = opts.scheduler ?? realScheduler;
    this.scheduler = scheduler;
    this.clock = scheduler.mono();
    // The engine pool and the listener (start()) run on the same scheduler.
    this.upstream = new UpstreamPool({ scheduler });
    this.o = opts;
    this.firstByteTimeoutMs = this.o.firstByteTimeoutMs;
    this.idleTimeoutMs = this.o.idleTimeoutMs;
    this.cooldownMs = this.o.cooldownMs;
    this.maxAttempts = this.o.maxAttempts;
    this.balancer = new Balancer({ ...opts.balancer, now: () => scheduler.now() });
    this.bodies = new BodyReader({ limits: { maxDepth: this.o.maxJsonDepth, maxValues: this.o.maxJsonValues }, scheduler, ...(this.o.log ? { log: this.o.log } : {}) });
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
    this.registry.add(
      new Gauge("llmgw_router_held_requests", "Requests held for a cold start now, by model (at most --max-held-per-model each).", ["model"], () =>
        [...this.holding].map(([model, n]) => [[model], n] as [string[], number]),
      ),
    );
    // Per model (its canonical name), under the names the fleet's dashboards and alerts use.
    this.registry.add(new CounterView("llmgw_model_requests_total", "Requests answered per model, by HTTP status code.", ["model", "code"], this.requests));
    this.outputTokens = this.registry.add(
      new Counter("llmgw_model_output_tokens_total", "Completion tokens per model: the engine's usage when it reports one, else the streamed content chunks counted.", ["model"]),
    );
    this.ttft = this.registry.add(
      new Histogram("llmgw_model_ttft_seconds", "Time to first token per model as the router sees it: from the request (cold-start hold included) to the first byte of the answer.", ["model"], TTFT_BUCKETS_MS.map((ms) => ms / 1000)),
    );
    this.registry.add(new Gauge("llmgw_model_requests_inflight", "Requests per model being proxied to a replica now.", ["model"], () => [...this.inflightByModel()].map(([m, n]) => [[m], n] as [string[], number])));
    this.registry.add(
      new Gauge("llmgw_model_requests_queued", "Requests per model held for a replica to start (cold start) now.", ["model"], () =>
        [...this.holding].map(([m, n]) => [[m], n] as [string[], number]),
      ),
    );
  }

  // ---- EndpointSink / UsageSource ------------------------------------------------------

  setEndpoints(endpoints: EndpointInfo[]): void {
    // A key that could break the request head (a CR, a LF, a space) is a bug upstream of here;
    // such an endpoint is left out rather than sent a mangled or injected header.
    const usable = endpoints.filter((e) => e.key === undefined || KEY_CHARS.test(e.key));
    if (usable.length !== endpoints.length) this.o.log?.warn({ endpoints: endpoints.filter((e) => !usable.includes(e)).map((e) => e.id) }, "endpoints left out: engine key is not visible ASCII");
    this.balancer.setEndpoints(usable);
    this.wakeWaiters();
  }

  setCatalog(models: CatalogEntry[]): void {
    const map = new Map<string, CatalogEntry>();
    for (const m of models) {
      map.set(m.name, m);
      for (const a of m.aliases) map.set(a, m);
    }
    this.catalog = map;
    this.catalogList = models;
    // A held request for a model that can no longer come up is answered now, not at its deadline.
    this.wakeWaiters();
  }

  /** Each cold-start waiter looks again; each on its own: one that throws must not leave the others waiting. */
  private wakeWaiters(): void {
    for (const w of [...this.waiters]) {
      try {
        w();
      } catch (e) {
        this.o.log?.warn({ err: (e as Error).message }, "cold-start waiter failed");
      }
    }
  }

  setApiKeys(keys: ApiKeyEntry[]): void {
    this.keys = new Map(keys.map((k) => [k.sha256, k]));
  }

  setFleetMetrics(text: string): void {
    this.fleet = text;
  }

  lastUsed(): ReadonlyMap<string, number> {
    return this.balancer.lastUsed();
  }

  inflightByModel(): ReadonlyMap<string, number> {
    return this.balancer.inflightByModel();
  }

  /** Requests held for a cold start now, per model (its name, not an alias); absent: none. */
  heldByModel(): ReadonlyMap<string, number> {
    return this.holding;
  }

  /** TrafficSource, for a router in the caller's thread (RouterLink asks the router thread for the same). */
  traffic(): Promise<ModelTraffic[]> {
    return Promise.resolve(this.trafficNow());
  }

  /** What the router has seen of each model: every catalog model, and any other it counted. */
  trafficNow(): ModelTraffic[] {
    const sums = new Map<string, { requests: number; errors: number }>();
    for (const { labels, v } of this.requests.entries()) {
      const [model = "", status = ""] = labels;
      let s = sums.get(model);
      if (s === undefined) sums.set(model, (s = { requests: 0, errors: 0 }));
      s.requests += v;
      if (Number(status) >= 500) s.errors += v;
    }
    const inflight = this.inflightByModel();
    const names = new Set([...this.catalogList.map((m) => m.name), ...sums.keys(), ...this.perModel.keys(), ...inflight.keys(), ...this.holding.keys()]);
    return [...names].sort().map((model) => {
      const s = this.perModel.get(model);
      return {
        model,
        requests: sums.get(model)?.requests ?? 0,
        errors: sums.get(model)?.errors ?? 0,
        output_tokens: s?.tokens.v ?? 0,
        ttft_counts: s ? bucketCounts(s.ttft) : new Array<number>(TTFT_BUCKETS_MS.length + 1).fill(0),
        inflight: inflight.get(model) ?? 0,
        queued: this.holding.get(model) ?? 0,
      };
    });
  }

  // ---- serving ------------------------------------------------------------------------

  start(): { url: string; port: number } {
    const listen: Http1Options = {
      scheduler: this.scheduler,
      hostname: this.o.host,
      port: this.o.port,
      maxBodyBytes: this.o.maxBodyBytes,
      ...(this.o.serverIdleTimeoutSec !== undefined ? { idleTimeoutMs: this.o.serverIdleTimeoutSec * 1000 } : {}),
      ...this.o.listener,
      ...(this.o.tls ? { tls: { cert: Bun.file(this.o.tls.cert), key: Bun.file(this.o.tls.key) } } : {}),
      errorBody: (status, message, code) => openAIErrorBody(status, sizeRefusal(message, code), { code }),
      handler: (ex) => this.handle(ex),
      onHandlerError: (err) => this.o.log?.warn({ err: (err as Error).message }, "router request failed"),
    };
    this.server = new Http1Server(listen);
    const port = this.server.listen();
    // Deadline granularity: a quarter of the shortest timeout, within 10–250 ms.
    const every = Math.max(10, Math.min(250, Math.min(this.o.firstByteTimeoutMs, this.o.idleTimeoutMs) / 4));
    this.tick = every;
    this.clock = this.scheduler.mono() + every;
    this.sweeper = this.scheduler.every(every, () => this.sweep()).unref();
    if (this.o.metricsIntervalMs > 0) {
      this.poller = new EngineMetricsPoller({
        endpoints: () => this.balancer.endpoints(),
        apply: (id, load) => this.balancer.setMetrics(id, load),
        intervalMs: this.o.metricsIntervalMs,
        // Spread over most of the interval and capped: polling a thousand engines at once would
        // stall the prompts this thread serves for tens of milliseconds every round.
        spreadMs: this.o.metricsIntervalMs * 0.8,
        maxPerSecond: METRICS_MAX_PER_SECOND,
        log: this.o.log,
        scheduler: this.scheduler,
      });
      this.poller.start();
    }
    return { url: `http://${hostPort(this.o.host, port)}`, port };
  }

  async stop(): Promise<void> {
    this.poller?.stop();
    this.sweeper?.cancel();
    this.bodies.stop();
    for (const w of [...this.waiters]) w();
    this.server?.stop();
    this.server = undefined;
    this.upstream.close();
  }

  private route(method: string, path: string): RouteDef | undefined {
    const r = EXACT_ROUTES.get(method)?.get(path);
    if (r !== undefined) return r;
    for (const p of PREFIX_ROUTES) if (p.method === method && path.startsWith(p.path) && path.length > p.path.length) return p;
    return undefined;
  }

  private handle(ex: ClientExchange): void {
    const path = ex.path;
    // Dot segments are refused, not resolved: a path that means something else once normalised
    // (by an engine, or a proxy in front of one) is how an allow-list is walked around.
    if ((path.includes(".") || path.includes("%") || path.includes("\\")) && (DOT_SEGMENT.test(path) || (ENCODED_SLASH.test(path) && !path.startsWith("/v1/models/"))))
      return send(ex, openAIError(400, "the request path may not hold dot segments or encoded slashes", { code: "invalid_path" }));
    const route = this.route(ex.method, path);
    if (!route)
      return send(ex, openAIError(404, `no route ${ex.method} ${path.slice(0, 200)}; the router serves POST ${INFERENCE_PATHS.join(", ")} and GET /v1/models`, { code: "not_found" }));
    let pool: string | undefined;
    let owner = "";
    if (route.auth === "admin") {
      if (!this.o.adminToken || !this.bearerIs(ex, this.o.adminToken)) return send(ex, openAIError(401, `${ex.method} ${path} needs the admin token as a bearer token`, { code: "invalid_api_key" }));
    } else if (route.auth === "client") {
      const auth = this.authorize(ex);
      if ("status" in auth) return send(ex, auth);
      pool = auth.pool;
      owner = auth.owner ?? "";
    }
    switch (route.kind) {
      case "proxy":
        return this.proxy(ex, pool, owner);
      case "models":
        return send(ex, this.listModels(pool));
      case "model": {
        let id: string;
        try {
          id = decodeURIComponent(path.slice("/v1/models/".length));
        } catch {
          return send(ex, openAIError(400, "the model id in the path is not valid percent-encoding", { param: "model", code: "invalid_request" }));
        }
        return send(ex, this.getModel(id, pool));
      }
      case "metrics":
        return ex.respond(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }, this.registry.render() + this.fleet);
      default:
        return send(ex, jsonReply({ status: "ok" }));
    }
  }

  /** Constant-time comparison of a bearer token against a secret. */
  private bearerIs(ex: ClientExchange, token: string): boolean {
    const presented = bearerToken(ex.headers.get("authorization"));
    return presented !== undefined && sameSecret(presented, token);
  }

  /** Checks the client's API key when keys are required; returns an error reply, or the key's pool and SHA-256 (its owner's mark). */
  private authorize(ex: ClientExchange): Reply | { pool?: string; owner?: string } {
    if (!this.o.requireApiKey) return {};
    const presented = bearerToken(ex.headers.get("authorization"));
    // Keys are looked up by their SHA-256: the secret itself is never compared or kept.
    const key = presented !== undefined ? this.keys.get(sha256hex(presented)) : undefined;
    if (!key) return openAIError(401, "Incorrect or missing API key: send Authorization: Bearer <key> (create one with `llmgw keys create NAME`)", { code: "invalid_api_key" });
    return key.pool ? { pool: key.pool, owner: key.sha256 } : { owner: key.sha256 };
  }

  private listModels(pool: string | undefined): Reply {
    const data = [];
    for (const m of this.catalogList) {
      if (pool && m.pool !== pool) continue;
      // What no client can use now or by waiting is not offered.
      if (m.unavailable) continue;
      data.push({ id: m.name, object: "model", created: m.created, owned_by: "llmgw" });
      for (const a of m.aliases) data.push({ id: a, object: "model", created: m.created, owned_by: "llmgw", root: m.name });
    }
    return jsonReply({ object: "list", data });
  }

  private getModel(id: string, pool: string | undefined): Reply {
    const m = this.catalog.get(id);
    if (!m || (pool && m.pool !== pool)) return openAIError(404, `The model '${id}' does not exist`, { code: "model_not_found", param: "model" });
    return jsonReply({ id, object: "model", created: m.created, owned_by: "llmgw", ...(id !== m.name ? { root: m.name } : {}) });
  }

  /**
   * How long a request for this cold on-demand model is held: a replica the control plane still
   * gives time to start may yet come up, so the hold is the longer of the two.
   */
  private coldStartHoldMs(entry: CatalogEntry): number {
    return Math.max(this.o.coldStartTimeoutMs, entry.start_timeout_ms ?? 0);
  }

  /**
   * Waits until the model has an endpoint, the deadline passes, the model becomes unavailable,
   * or the client goes away. A streamed request (`progress`) is answered 200 at once, and sent
   * a comment line every coldStartProgressMs and whenever the node of its replica changes.
   */
  private waitForEndpoint(entry: CatalogEntry, model: string, pool: string | undefined, holdMs: number, ex: ClientExchange, progress: boolean, then: (ok: boolean) => void): void {
    if (this.balancer.has(model, pool)) return then(true);
    const name = entry.name;
    this.holding.set(name, (this.holding.get(name) ?? 0) + 1);
    const since = this.scheduler.mono();
    let ticker: Timer | undefined;
    let over = false;
    const done = (ok: boolean) => {
      if (over) return;
      over = true;
      timer.cancel();
      ticker?.cancel();
      this.waiters.delete(check);
      const n = (this.holding.get(name) ?? 1) - 1;
      if (n > 0) this.holding.set(name, n);
      else this.holding.delete(name);
      ex.onAbort = undefined;
      try {
        then(ok);
      } catch (e) {
        this.internalError(ex, e);
      }
    };
    /** The node the last comment named: a new one is told at once, not at the next interval. */
    let shown: string | undefined;
    const check = () => {
      if (this.balancer.has(model, pool)) done(true);
      else if (!this.server || this.catalog.get(model)?.unavailable) done(false);
      else if (progress && ex.answered && this.startingNode(name) !== shown) ex.write(this.progressLine(name, since, (shown = this.startingNode(name))));
    };
    const timer = this.scheduler.after(holdMs, () => done(false));
    this.waiters.add(check);
    ex.onAbort = () => done(false);
    if (!progress) return;
    // Headers and a first comment at once, with no grace to wait for a fast warm-up: real cold
    // starts take tens of seconds, and a client told "starting" from the first moment never
    // has to guess whether a silent connection is a cold start or a hang.
    ex.stream(200, HELD_HEADERS, this.progressLine(name, since, (shown = this.startingNode(name))));
    // A throw here would be the timer's, far from any request: it ends this hold alone.
    ticker = this.scheduler.every(this.o.coldStartProgressMs, () => {
      try {
        if (!over) ex.write(this.progressLine(name, since, (shown = this.startingNode(name))));
      } catch (e) {
        this.o.log?.warn({ err: (e as Error).message }, "cold-start progress failed");
        done(false);
      }
    });
  }

  /** Where the control plane says the model's replica is starting, if it has. */
  private startingNode(name: string): string | undefined {
    return this.catalog.get(name)?.starting?.node;
  }

  /**
   * The SSE comment a held stream is sent: the model, the node its replica starts on when the
   * control plane has said, and the seconds waited. One line, whatever the names hold.
   */
  private progressLine(name: string, since: number, node: string | undefined): Uint8Array {
    const secs = Math.round((this.scheduler.mono() - since) / 1000);
    return enc.encode(`: ${safeText(`starting ${name}${node ? ` on ${node}` : ""}`).slice(0, 300)}, ${secs} s\n\n`);
  }

  /**
   * @internal A whole reply, or, to a stream already opened for a held request (its 200 sent),
   * the reply's OpenAI-shaped error as an SSE event, then the end.
   */
  answer(ex: ClientExchange, r: Reply): void {
    if (ex.aborted) return;
    if (!ex.answered) return send(ex, r);
    ex.end(enc.encode(`data: ${r.body}\n\n`));
  }

  /**
   * POST to an inference path: its body (read whole by the server, within the size cap) is read
   * here when that is cheap, else on the body worker (body-reader.ts), then routed.
   */
  private proxy(ex: ClientExchange, keyPool: string | undefined, owner: string): void {
    const t0 = this.scheduler.mono();
    // A key bound to a pool decides the pool; otherwise the client may pick one by header.
    const pool = keyPool ?? ex.headers.get("x-llmgw-pool");
    const read = this.bodies.readNow(ex.body);
    if (read !== undefined) return this.routeBody(ex, read, pool, owner, t0);
    this.bodies.readOff(ex.body, (later) => {
      if (ex.aborted) return;
      try {
        this.routeBody(ex, later, pool, owner, t0);
      } catch (e) {
        this.internalError(ex, e);
      }
    });
  }

  /** A body read: refused, or handed to a Call (at once, or once a cold model has a replica). */
  private routeBody(ex: ClientExchange, read: BodyRead, pool: string | undefined, owner: string, t0: number): void {
    if (read.reply !== undefined) return send(ex, read.reply);
    const facts = read.facts;
    let pin: string | undefined;
    if (facts.previousResponseId !== undefined && ex.path === "/v1/responses") {
      const to = this.responses.route(facts.previousResponseId, owner, this.o.requireApiKey === true);
      if ("status" in to) return send(ex, to);
      pin = to.pin;
    }
    const model = facts.model;
    // The common case calls straight on; only a request held for a cold start needs a closure.
    if (this.balancer.has(model, pool)) return this.call(ex, facts, pool, owner, pin, t0);
    this.coldStart(ex, model, pool, facts.stream && SSE_PATHS.has(ex.path), () => this.call(ex, facts, pool, owner, pin, t0));
  }

  private call(ex: ClientExchange, facts: BodyFacts, pool: string | undefined, owner: string, pin: string | undefined, t0: number): void {
    new Call(this, ex, facts, pool, forwardHeaders(ex.headers), ex.target, t0, owner, pin).next();
  }

  /**
   * No replica serves the model: 404 if the catalog does not know it (in this pool); otherwise
   * the control plane hears of the demand, and an on-demand model is waited for (then `go`),
   * any other answered 503 at once. A streamed request (`progress`) held is answered 200 at
   * once, and any error then comes as an SSE error event.
   */
  private coldStart(ex: ClientExchange, model: string, pool: string | undefined, progress: boolean, go: () => void): void {
    const entry = this.catalog.get(model);
    if (!entry || (pool !== undefined && entry.pool !== pool))
      return send(ex, openAIError(404, `The model '${model}' does not exist${pool ? ` in pool '${pool}'` : ""}`, { param: "model", code: "model_not_found" }));
    // Nothing serves it: tell the control plane someone wants it. An on-demand model is worth
    // waiting for; any other is starting, failing or unplaceable, and the client is better
    // served by a prompt 503 it can retry.
    if (entry.unavailable) return this.unavailable(ex, entry);
    this.o.demand?.requestModel(model);
    const holdMs = this.coldStartHoldMs(entry);
    const notReady = () => {
      this.requests.inc([entry.name, "503"]);
      this.answer(
        ex,
        openAIError(503, `no replica of '${model}' is ready${entry.on_demand ? ` after waiting ${Math.round(holdMs / 1000)}s for one to start` : ""}; try again shortly`, {
          code: "model_not_ready",
          headers: { "retry-after": entry.on_demand ? "30" : "10" },
        }),
      );
    };
    if (!entry.on_demand) return notReady();
    const held = this.holding.get(entry.name) ?? 0;
    if (held >= this.o.maxHeldPerModel) {
      this.requests.inc([entry.name, "503"]);
      const message = `${held} requests are already waiting for '${entry.name}' to start, the most one model may hold (--max-held-per-model ${this.o.maxHeldPerModel}); try again shortly`;
      return send(ex, openAIError(503, message, { code: "too_many_waiting", headers: { "retry-after": "10" } }));
    }
    this.waitForEndpoint(entry, model, pool, holdMs, ex, progress, (ok) => {
      if (ok && !ex.aborted) return go();
      const now = this.catalog.get(model);
      if (now?.unavailable) return this.unavailable(ex, now);
      notReady();
    });
  }

  /** A model waiting cannot bring back (never, parked): answered at once, so no client retries in vain (unavailable.ts). */
  private unavailable(ex: ClientExchange, entry: CatalogEntry): void {
    const reply = unavailableReply(entry.unavailable!);
    this.requests.inc([entry.name, String(reply.status)]);
    this.answer(ex, reply);
  }

  private readonly perModel = new Map<string, ModelSeries>();

  /** @internal The metric series of one model, looked up once per attempt rather than per observation. */
  seriesOf(model: string): ModelSeries {
    let m = this.perModel.get(model);
    if (m === undefined) {
      m = {
        ttfb: this.ttfb.child([model]),
        duration: this.duration.child([model]),
        ok: this.requests.series([model, "200"]),
        ttft: this.ttft.child([model]),
        tokens: this.outputTokens.series([model]),
      };
      this.perModel.set(model, m);
    }
    return m;
  }

  private readonly blocks = new Map<string, Map<string, HeaderBlock>>();

  /** @internal The answer headers for a replica and a content type, rendered once. */
  replicaHeaders(id: string, type: string | undefined): HeaderBlock {
    // The last one asked for, compared first: the type is a string fresh from each engine
    // answer, and comparing it costs less than hashing it for the lookup.
    const last = this.lastBlock;
    if (last !== undefined && last.id === id && last.type === type) return last.block;
    const b = this.replicaBlock(id, type);
    this.lastBlock = { id, type, block: b };
    return b;
  }

  private lastBlock: { id: string; type: string | undefined; block: HeaderBlock } | undefined;

  private replicaBlock(id: string, type: string | undefined): HeaderBlock {
    let byType = this.blocks.get(id);
    if (byType === undefined) {
      // Replicas come and go: the cache is dropped when it outgrows the fleet, not kept forever.
      if (this.blocks.size > 4096) this.blocks.clear();
      byType = new Map();
      this.blocks.set(id, byType);
    }
    const key = type ?? "";
    let b = byType.get(key);
    if (b === undefined) {
      const text = `x-llmgw-replica: ${id}\r\n${type !== undefined ? `content-type: ${type}\r\n` : ""}`;
      b = block(text);
      if (byType.size > 16) byType.clear();
      byType.set(key, b);
    }
    return b;
  }

  /** The last answer headers of more than a content type rendered per replica, with the [name, value, …] they were made of. */
  private readonly passed = new Map<string, { pairs: string[]; block: HeaderBlock }>();

  /**
   * @internal The answer headers for a replica that passes on more than a content type (an SSE
   * stream's Cache-Control, a request id): the last ones made for it again when the engine sent
   * the same pass-down headers, as it does answer after answer.
   */
  passedHeaders(id: string, names: readonly string[], values: readonly string[]): HeaderBlock {
    const last = this.passed.get(id);
    if (last !== undefined) {
      const pairs = last.pairs;
      let j = 0;
      let same = true;
      for (let i = 0; i < names.length && same; i++) {
        if (!PASS_DOWN.has(names[i]!)) continue;
        same = j < pairs.length && pairs[j] === names[i] && pairs[j + 1] === values[i];
        j += 2;
      }
      if (same && j === pairs.length) return last.block;
    }
    let text = `x-llmgw-replica: ${id}\r\n`;
    const pairs: string[] = [];
    for (let i = 0; i < names.length; i++) {
      if (!PASS_DOWN.has(names[i]!)) continue;
      text += `${names[i]!}: ${values[i]!}\r\n`;
      pairs.push(names[i]!, values[i]!);
    }
    const b = block(text);
    // Replicas come and go: dropped when it outgrows the fleet, as the content-type cache is.
    if (this.passed.size > 4096) this.passed.clear();
    this.passed.set(id, { pairs, block: b });
    return b;
  }

  /** @internal For Call: retries are counted by replica model and reason. */
  countRetry(model: string, kind: string): void {
    this.retries.inc([model, kind]);
  }

  /** @internal For Call: the request gave up after every attempt failed. */
  gaveUp(model: string, lastError: string): Reply {
    const name = this.catalog.get(model)?.name ?? model;
    this.requests.inc([name, "502"]);
    return openAIError(502, `upstream failure for model '${model}': ${lastError}`, { code: "upstream_error" });
  }

  /** Expires the deadlines that have passed; one sweep for every request in flight. */
  private sweep(): void {
    const now = this.scheduler.mono();
    this.clock = now + this.tick;
    this.watches.expire(now, (e) => this.o.log?.warn({ err: (e as Error).message }, "deadline expiry failed"));
    try {
      this.upstream.sweep();
    } catch (e) {
      this.o.log?.warn({ err: (e as Error).message }, "upstream idle sweep failed");
    }
  }

  /**
   * @internal A bug of the router's own met while handling one request: logged, and that
   * request alone answered 500 (or cut, if its answer had started). Whoever calls this has
   * released any lease the request held.
   */
  internalError(ex: ClientExchange, e: unknown): void {
    this.o.log?.warn({ err: (e as Error)?.message, stack: (e as Error)?.stack }, "router request failed");
    try {
      if (!ex.answered) send(ex, openAIError(500, "internal error in the router; see the server log", { code: "internal_error" }));
      else ex.destroy();
    } catch {
      // Nothing more can be told to this client.
    }
  }
}

/** A model's hot metric series: time to first byte, duration, the count of 200s, TTFT, output tokens; and its requests held now. */
interface ModelSeries {
  ttfb: HistogramSeries;
  duration: HistogramSeries;
  ok: CounterSeries;
  ttft: HistogramSeries;
  tokens: CounterSeries;
}

/** A TTFT series' count per bucket of TTFT_BUCKETS_MS, and past the last (the exposition's counts are cumulative over `le`). */
function bucketCounts(h: HistogramSeries): number[] {
  const out: number[] = [];
  let below = 0;
  for (const c of h.counts) {
    out.push(c - below);
    below = c;
  }
  out.push(h.count - below);
  return out;
}

/** Why an attempt should be retried elsewhere (only ever before a byte reached the client). */
interface Failure {
  kind: string;
  error: string;
}

interface Watch {
  deadline: number;
  expire(): void;
  /** Links of the WatchList the watch is on. */
  wPrev: Watch | undefined;
  wNext: Watch | undefined;
  watched: boolean;
}

/**
 * The attempts in flight, as an intrusive list: adding and removing one is a few stores, with
 * no hashing and no allocation (a Set costs more per request than the rest of the bookkeeping).
 */
class WatchList {
  private head: Watch | undefined;
  size = 0;

  add(w: Watch): void {
    if (w.watched) return;
    w.watched = true;
    w.wPrev = undefined;
    w.wNext = this.head;
    if (this.head !== undefined) this.head.wPrev = w;
    this.head = w;
    this.size++;
  }

  delete(w: Watch): void {
    if (!w.watched) return;
    w.watched = false;
    if (w.wPrev !== undefined) w.wPrev.wNext = w.wNext;
    else this.head = w.wNext;
    if (w.wNext !== undefined) w.wNext.wPrev = w.wPrev;
    w.wPrev = w.wNext = undefined;
    this.size--;
  }

  /** Removes and expires every watch whose deadline is before `now`; one that throws does not keep the others from expiring. */
  expire(now: number, onError: (e: unknown) => void): void {
    const due: Watch[] = [];
    for (let w = this.head; w !== undefined; w = w.wNext) if (now > w.deadline) due.push(w);
    for (const w of due) {
      this.delete(w);
      try {
        w.expire();
      } catch (e) {
        onError(e);
      }
    }
  }
}

/**
 * One client request through the proxy: attempts on replicas one after the other, each on
 * another replica, until one answers or maxAttempts is reached. Callback-driven rather than a
 * loop of awaits: the hot path makes no promise at all.
 */
class Call {
  private attempts = 0;
  private exclude: Set<string> | undefined;
  private lastError = "no replica answered";
  /** The client's 200 and SSE head went out while the request was held: the engine's stream is piped into it. */
  readonly opened: boolean;
  readonly stream: boolean;
  private readonly model: string;

  constructor(
    readonly r: Router,
    readonly ex: ClientExchange,
    private readonly facts: BodyFacts,
    private readonly pool: string | undefined,
    private readonly extra: ExtraHeaders,
    readonly path: string,
    readonly t0: number,
    /** The client's API key (its SHA-256; "" without keys): a Responses API id it is answered is remembered as its. */
    readonly owner: string,
    /** The replica that holds the response this request continues, tried before any other. */
    private readonly pin: string | undefined,
  ) {
    this.opened = ex.answered;
    this.model = facts.model;
    this.stream = facts.stream;
  }

  next(): void {
    const r = this.r;
    let attempt: Attempt | undefined;
    try {
      const lease = this.attempts < r.maxAttempts && !this.ex.aborted ? this.acquire() : undefined;
      if (lease === undefined) {
        r.answer(this.ex, r.gaveUp(this.model, this.lastError));
        return;
      }
      this.attempts++;
      const ep = lease.endpoint;
      const canonical = ep.info.models[0] ?? this.model;
      attempt = new Attempt(this, lease, canonical);
      // SGLang serves one name; any alias is sent to it as the model's own name.
      const payload = ep.info.engine === "sglang" && this.model !== canonical ? withModel(this.ex.body, this.facts, canonical) : this.ex.body;
      attempt.start(this.path, payload, this.extra);
    } catch (e) {
      // Whatever threw, the lease taken for this attempt goes back and this request alone ends.
      if (attempt !== undefined) attempt.crash(e);
      else r.internalError(this.ex, e);
    }
  }

  private acquire(): Lease | undefined {
    const b = this.r.balancer;
    const pinned = this.pin !== undefined ? b.acquireOn(this.pin, this.model, this.pool, this.exclude) : undefined;
    return pinned ?? b.acquire(this.model, this.facts.key, this.pool, this.exclude);
  }

  /** An attempt failed before any byte reached the client: try another replica. */
  failed(endpointId: string, model: string, f: Failure): void {
    this.lastError = f.error;
    this.r.countRetry(model, f.kind);
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
  private headers: HeaderBlock | undefined;
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
  private readonly r: Router;
  private readonly m: ModelSeries;
  private readonly ex: ClientExchange;
  private readonly stream: boolean;
  private readonly t0: number;
  /** The answer's output tokens, counted as its bytes pass. */
  private readonly tokens = new TokenCount();
  /** A Responses API answer: its response's id is looked for in its first bytes. */
  private sniff: IdSniffer | undefined;

  constructor(
    private readonly call: Call,
    private readonly lease: Lease,
    private readonly model: string,
  ) {
    this.r = call.r;
    this.m = call.r.seriesOf(model);
    this.ex = call.ex;
    this.stream = call.stream;
    this.t0 = call.t0;
    this.deadline = this.r.clock + this.r.firstByteTimeoutMs;
    // The client already has its 200 and SSE head: the engine's body follows it, and a failure
    // ends it with an error event.
    if (call.opened) this.started = this.sse = true;
  }

  start(path: string, payload: Uint8Array, extra: ExtraHeaders): void {
    // Timeouts are deadlines checked by one sweep for all requests, not a timer per request
    // and per chunk: moving a deadline is a number store on the hot path.
    this.r.watches.add(this);
    this.ex.onAbort = () => this.kill("client");
    this.up = this.r.upstream.post(this.lease.endpoint.url, path, payload, extra, this, this.lease.endpoint.info.key);
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
      this.r.watches.delete(this);
      this.ex.onAbort = undefined;
      this.ex.onDrain = undefined;
      this.lease.release();
      this.r.requests.inc([this.model, "500"]);
    }
    this.r.internalError(this.ex, e);
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
    if (status >= 500) this.r.balancer.cooldown(this.lease.endpoint.id, this.r.cooldownMs);
    // The engine's headers can no longer be sent: its body is piped into the open stream, or
    // its error turned into an error event.
    if (this.call.opened) {
      this.mode = status < 300 ? "stream" : "event";
      return;
    }
    // The headers the client gets, as text. Usually only Content-Type is passed on, and the
    // text for it is made once per replica and type.
    let type: string | undefined;
    let more = false;
    const names = head.names;
    const values = head.values;
    for (let i = 0; i < names.length; i++) {
      const k = names[i]!;
      if (!PASS_DOWN.has(k)) continue;
      if (k === "content-type" && type === undefined) type = values[i];
      else more = true;
    }
    const id = this.lease.endpoint.id;
    this.headers = more ? this.r.passedHeaders(id, names, values) : this.r.replicaHeaders(id, type);
    this.sse = type !== undefined && type.includes("text/event-stream");
    if (this.sse) this.tokens.key = contentKey(this.call.path);
    const len = head.contentLength;
    this.mode = !this.stream && len >= 0 && len <= BUFFER_LIMIT ? "buffer" : "stream";
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
    this.parts.add(d, a, b);
    if (!this.settled) {
      this.settled = true;
      this.firstByte((this.r.scheduler.mono() - this.t0) / 1000);
    }
  }

  /** The response's id, remembered with the client's key and this replica once found. */
  private sniffId(d: Uint8Array, a: number, b: number): void {
    const s = this.sniff!;
    const id = s.feed(d, a, b);
    if (s.done) this.sniff = undefined;
    if (id !== undefined) this.r.responses.remember(id, this.call.owner, this.lease.endpoint.id);
  }

  private firstByte(seconds: number): void {
    this.m.ttfb.observe(seconds);
    this.m.ttft.observe(seconds);
  }

  private readEnd(): void {
    if (this.released || this.parts.count === 0) return;
    this.deadline = this.r.clock + this.r.idleTimeoutMs;
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
      const now = this.r.scheduler.mono();
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
      this.firstByte((this.r.scheduler.mono() - this.t0) / 1000);
    }
    const ex = this.ex;
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
      this.finish(499);
      return;
    }
    // Not a byte written to the client yet (the chunks of this read are still held): the
    // attempt fails and the request may go elsewhere, as before the first byte.
    if (!this.settled || !this.started) {
      // Messages name the replica, never its address: they go to the client.
      if (this.why === "first_byte") this.fail("timeout", `no answer from replica ${ep.id} within ${this.r.firstByteTimeoutMs / 1000}s`, true);
      else if (err.kind === "connect") this.fail("connect", `cannot reach replica ${ep.id} (${err.message})`, true);
      else if (err.kind === "protocol") this.fail("protocol", `replica ${ep.id} sent a malformed response: ${err.message}`, true);
      else this.fail("reset", `replica ${ep.id} failed before its first byte: ${err.message}`, true);
      return;
    }
    // The replica died or went quiet mid-stream: bytes already reached the client, so no
    // retry. End the stream with an error event it can see, never a silent cut.
    const idleMs = this.r.idleTimeoutMs;
    const what =
      this.why === "idle" ? `no data from replica ${ep.id} for ${idleMs / 1000}s` : err.kind === "protocol" ? `replica ${ep.id} sent a malformed response: ${err.message}` : `replica ${ep.id} failed mid-stream: ${err.message}`;
    this.r.upstreamErrors.inc([this.model, this.why === "idle" ? "idle_timeout" : err.kind === "protocol" ? "protocol" : "mid_stream"]);
    if (this.why !== "idle") this.r.balancer.cooldown(ep.id, this.r.cooldownMs);
    this.finish(502);
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

  private finish(status: number, now = this.r.scheduler.mono()): void {
    if (this.released) return;
    this.released = true;
    this.r.watches.delete(this);
    this.ex.onAbort = undefined;
    this.ex.onDrain = undefined;
    this.lease.release();
    if (status === 200) this.m.ok.v++;
    else this.r.requests.inc([this.model, String(status)]);
    this.m.duration.observe((now - this.t0) / 1000);
    this.m.tokens.v += this.tokens.total();
  }

  private fail(kind: string, error: string, cool: boolean): void {
    if (this.released) return;
    this.released = true;
    this.up?.abort();
    this.r.watches.delete(this);
    this.ex.onAbort = undefined;
    this.lease.release();
    if (cool) this.r.balancer.cooldown(this.lease.endpoint.id, this.r.cooldownMs);
    this.r.upstreamErrors.inc([this.model, kind]);
    this.call.failed(this.lease.endpoint.id, this.model, { kind, error });
  }
}

/**
 * Answer headers made of an engine's header values: latin1 text (as the client read them), so
 * a value with bytes >= 0x80 goes out as those bytes, not as their UTF-8 encoding.
 */
function block(text: string): HeaderBlock {
  return NON_ASCII.test(text) ? { text, bytes: text.length, latin1: true } : { text, bytes: text.length };
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

/** A whole reply to the client. */
function send(ex: ClientExchange, r: Reply): void {
  ex.respond(r.status, r.headers, r.body);
}

/** Headers passed upstream: what identifies or traces the request (the pool adds Host, Content-Type, Content-Length). */
function forwardHeaders(h: RequestHeaders): ExtraHeaders {
  let out: [string, string][] | undefined;
  const names = h.names;
  for (let i = 0; i < names.length; i++) {
    const n = names[i]!;
    if (PASS_UP.has(n)) (out ??= []).push([n, h.values[i]!]);
  }
  return out ?? NO_HEADERS;
}
const NO_HEADERS: ExtraHeaders = [];
