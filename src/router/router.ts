// src/router: the data plane. One OpenAI-compatible endpoint in front of every replica: the
// balancer (which replica serves an attempt: priority tiers, prefix affinity, bounded loads),
// the prefix key, the engine metrics poller, the router's Prometheus registry, its OpenAI-shaped
// errors. It runs in the head node's process but shares nothing with the control plane but the
// contracts of src/protocol: the control plane pushes endpoints, catalog and API keys in
// (EndpointSink) and reads usage back (UsageSource), and hears of demand through DemandSink.
//
// Imports: src/protocol (those contracts), src/http (the wire: its own HTTP/1.1 server and
// keep-alive engine client, not Bun.serve and fetch: Request/Response objects cost throughput
// on this hot path) and src/lib (scheduler, hash, net, format) only, besides its own files.
// Never src/control, never src/store, nor api, app, cli, agent or sim
// (test/unit/architecture.test.ts holds it to that). Time comes only from the injected
// Scheduler: no file here reads a clock or sets a timer of its own.
//
// A request's way: the listener (http/server.ts, connection.ts) → dispatch.ts (route, auth,
// body) → cold-start.ts while its model has no replica → proxy.ts (attempts, through the
// balancer and the engine client, http/client.ts) → the answer, back through the exchange.
// This file, the Router: it builds those parts from its options, keeps the tables the control
// plane publishes (endpoints, catalog, keys), answers what the control plane reads back, and
// starts and stops the listener, the sweep of deadlines and the engine metrics poller.

import { Http1Server, type Http1Options } from "../http/server";
import { UpstreamPool } from "../http/client";
import type { ClientExchange } from "../http/exchange";
import { hostPort } from "../lib/net";
import { type Scheduler, type Timer, realScheduler } from "../lib/scheduler";
import type { ApiKeyEntry, BudgetSpent, CatalogEntry, DemandSink, EndpointInfo, EndpointSink, FleetMetricsSink, LimitShares, LimitUseEntry, ModelTraffic, UsageRow, UsageSource } from "../protocol/routing";
import { Admission, type KeyUse } from "./admission";
import { Ledger } from "./ledger";
import { Budget, withBudgetUse } from "./budget";
import { GpuTime } from "./gpu-time";
import { Balancer, type BalancerSettings, type EndpointState } from "./balancer";
import { BodyReader } from "./body-reader";
import { Catalog } from "./catalog";
import { ColdStart } from "./cold-start";
import { Deadlines } from "./deadlines";
import { Dispatch } from "./dispatch";
import { FirstTables } from "./first-tables";
import { EngineMetricsPoller } from "./engine-metrics";
import { openAIError, openAIErrorBody, send } from "./errors";
import { AnswerHeaders } from "./headers";
import { RouterMetrics } from "./metrics";
import { type ProxyContext, type ProxyRequest, proxy } from "./proxy";
import { sizeRefusal } from "./request-body";
import { ResponseIds } from "./response-ids";
import { SlotGate } from "./slot-gate";
import type { LedgerCheckSource, ReplicaDrift } from "../protocol/ledger-check";
import { LedgerReconciler } from "./reconcile-ledger";
import { UsageCounters } from "./usage-counters";

/**
 * How long a stopping router answers the requests in flight before it cuts them (a long stream's
 * whole answer, in most cases): within the 30 s systemd gives the unit `llmgw install serve`
 * writes (TimeoutStopSec), with time left for the rest of the stop.
 */
export const ROUTER_DRAIN_MS = 25_000;

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
   * Hold requests until the control plane has handed over the catalog and the endpoints once
   * (first-tables.ts), for at most the cold-start timeout: a head node's router, which starts
   * knowing no model. Off for a router fed by hand (tests, benches).
   */
  awaitTables?: boolean;
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
  /**
   * The usage ledger (ledger.ts); false: no rows are counted, and streamed requests go to the
   * engine as the client sent them (no include_usage added, none taken out). Token limits still
   * count what streams. Default on.
   */
  usageLedger?: boolean;
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
 * Engine /metrics requests a second at most: beyond 250 engines a round takes longer than the
 * metrics interval (1,000 engines: one figure per engine every 4 s) rather than costing the
 * prompts this thread serves. An engine's own in-flight count here is exact either way.
 */
const METRICS_MAX_PER_SECOND = 250;
/** What an engine key may be: visible ASCII, so it can never end the Authorization line early. */
const KEY_CHARS = /^[\x21-\x7e]{1,512}$/;

export class Router implements EndpointSink, UsageSource, FleetMetricsSink, LedgerCheckSource {
  readonly balancer: Balancer;
  /** Keep-alive sockets to the engines. */
  readonly upstream: UpstreamPool;
  /** Requests held for a cold start. */
  readonly coldStart: ColdStart;
  private readonly scheduler: Scheduler;
  private readonly catalog = new Catalog();
  private readonly metrics: RouterMetrics;
  private readonly deadlines: Deadlines;
  private readonly bodies: BodyReader;
  private readonly dispatch: Dispatch;
  /** The keys' and teams' rate and concurrency limits. */
  private readonly admission: Admission;
  /** Slots on replicas with a concurrency bound, and the fair queue for them. */
  private readonly gate: SlotGate;
  private readonly ledger: Ledger;
  /** The keys' and teams' budgets, reserved on admission and settled where requests end. */
  private readonly budget: Budget;
  /** The ledger per replica, against the engines' own counters. */
  private readonly reconciler: LedgerReconciler;
  /** The ledger's rows as Prometheus counters per team, key and model. */
  private readonly usageCounters: UsageCounters;
  private server: Http1Server | undefined;
  /** stop() began: held requests are answered rather than held through the drain. */
  private stopping = false;
  /** Requests waiting for the first tables (RouterOptions.awaitTables). */
  private readonly firstTables: FirstTables | undefined;
  private poller: EngineMetricsPoller | undefined;
  private sweeper: Timer | undefined;
  /** The sweep's interval, and so the deadlines' granularity (set at start). */
  private tick = 250;

  constructor(private readonly o: RouterOptions) {
    const scheduler = o.scheduler ?? realScheduler;
    this.scheduler = scheduler;
    this.ledger = new Ledger(scheduler, o.usageLedger !== false);
    this.budget = new Budget(scheduler);
    // The engine pool and the listener (start()) run on the same scheduler.
    this.upstream = new UpstreamPool({ scheduler });
    this.balancer = new Balancer({ ...o.balancer, now: () => scheduler.now() });
    this.deadlines = new Deadlines(scheduler.mono());
    this.bodies = new BodyReader({ limits: { maxDepth: o.maxJsonDepth, maxValues: o.maxJsonValues }, scheduler, ...(o.log ? { log: o.log } : {}) });
    const responses = new ResponseIds();
    const admission = new Admission(scheduler);
    this.admission = admission;
    const ledger = this.ledger;
    const balancer = this.balancer;
    const catalog = this.catalog;
    const internalError = (ex: ClientExchange, e: unknown) => this.internalError(ex, e);
    this.metrics = new RouterMetrics({
      inflightByEndpoint: () => balancer.endpoints().map((e) => [e.id, e.info.models[0] ?? "", e.inflight] as [string, string, number]),
      inflightByModel: () => balancer.inflightByModel(),
      heldByModel: () => this.coldStart.heldByModel(),
      waitingByModel: () => this.gate.waitingByModel(),
    });
    this.reconciler = new LedgerReconciler(scheduler, o.log);
    this.usageCounters = new UsageCounters(() => ledger.pending());
    this.metrics.addSection(() => this.usageCounters.render());
    this.metrics.addSection(() => this.reconciler.render());
    this.gate = new SlotGate({
      settings: { maxHeldPerModel: o.maxHeldPerModel, coldStartTimeoutMs: o.coldStartTimeoutMs },
      balancer,
      catalog,
      scheduler,
      metrics: this.metrics,
      admission,
      log: o.log,
    });
    const proxyContext: ProxyContext = {
      settings: { maxAttempts: o.maxAttempts, firstByteTimeoutMs: o.firstByteTimeoutMs, idleTimeoutMs: o.idleTimeoutMs, cooldownMs: o.cooldownMs },
      balancer,
      upstream: this.upstream,
      deadlines: this.deadlines,
      time: scheduler,
      metrics: this.metrics,
      headers: new AnswerHeaders(),
      responses,
      catalog,
      admission,
      gate: this.gate,
      ledger,
      gpu: new GpuTime(scheduler),
      // With the ledger off there is nothing to check against the engines.
      ...(o.usageLedger !== false ? { reconcile: this.reconciler } : {}),
      internalError,
    };
    // Bound, not wrapped: a request passes from dispatch or cold start straight into proxy.ts.
    const toProxy: (req: ProxyRequest) => void = proxy.bind(undefined, proxyContext);
    this.coldStart = new ColdStart({
      settings: { coldStartTimeoutMs: o.coldStartTimeoutMs, coldStartProgressMs: o.coldStartProgressMs, maxHeldPerModel: o.maxHeldPerModel },
      balancer,
      catalog,
      scheduler,
      metrics: this.metrics,
      demand: o.demand,
      log: o.log,
      admission,
      ledger,
      serving: () => this.server !== undefined && !this.stopping,
      proxy: toProxy,
      internalError,
    });
    this.dispatch = new Dispatch({
      adminToken: o.adminToken,
      requireApiKey: o.requireApiKey === true,
      catalog,
      metrics: this.metrics,
      bodies: this.bodies,
      responses,
      balancer,
      time: scheduler,
      coldStart: this.coldStart,
      admission,
      budget: this.budget,
      ledger,
      proxy: toProxy,
      internalError,
    });
    const dispatch = this.dispatch;
    this.firstTables = o.awaitTables ? new FirstTables({ scheduler, waitMs: o.coldStartTimeoutMs, dispatch: (ex) => dispatch.handle(ex) }) : undefined;
  }

  // ---- EndpointSink / UsageSource ------------------------------------------------------

  setEndpoints(endpoints: EndpointInfo[]): void {
    // A key that could break the request head (a CR, a LF, a space) is a bug upstream of here;
    // such an endpoint is left out rather than sent a mangled or injected header.
    const usable = endpoints.filter((e) => e.key === undefined || KEY_CHARS.test(e.key));
    if (usable.length !== endpoints.length) this.o.log?.warn({ endpoints: endpoints.filter((e) => !usable.includes(e)).map((e) => e.id) }, "endpoints left out: engine key is not visible ASCII");
    this.balancer.setEndpoints(usable);
    this.reconciler.retain(new Set(usable.map((e) => e.id)));
    this.gate.wake();
    this.coldStart.wake();
    this.firstTables?.endpointsCame();
  }

  setCatalog(models: CatalogEntry[]): void {
    this.catalog.set(models);
    // A held request for a model that can no longer come up is answered now, not at its deadline.
    this.coldStart.wake();
    this.firstTables?.catalogCame();
  }

  setApiKeys(keys: ApiKeyEntry[]): void {
    this.dispatch.setApiKeys(keys);
    this.gate.setKeys(keys);
  }

  /** Several routers: this one's share of each key's and team's rpm and tpm. */
  setLimitShares(s: LimitShares): void {
    this.admission.setShares(s);
  }

  /** Each limited key's use of its limits now: requests in flight, requests and tokens left this minute. */
  keyUse(): KeyUse[] {
    return this.admission.use();
  }

  /** UsageSource: each limited key's and team's own use of its limits, for `llmgw keys list` and `teams list`. */
  limitUse(): LimitUseEntry[] {
    return withBudgetUse(this.admission.limitUse(), this.budget.use());
  }

  setFleetMetrics(text: string): void {
    this.metrics.setFleet(text);
  }

  /** The ledger's rows since the last take (UsageSource.takeLedger); the budgets' counts since then go with them. */
  takeLedger(): UsageRow[] {
    this.budget.taken();
    const rows = this.ledger.take();
    this.usageCounters.taken(rows);
    return rows;
  }

  /** Per replica, the ledger against the engine's own token counters (`llmgw usage --check`). */
  reconciliation(): ReplicaDrift[] {
    return this.reconciler.view();
  }

  /** LedgerCheckSource, for a router in the caller's thread (RouterLink asks the router thread for the same). */
  ledgerCheck(): Promise<ReplicaDrift[]> {
    return Promise.resolve(this.reconciler.view());
  }

  /** The number of the latest ledger take (UsageSource.ledgerGen). */
  ledgerGen(): number {
    return this.budget.gen;
  }

  /** EndpointSink.setBudgetSpent: the store's figures of the budgets' periods. */
  setBudgetSpent(spent: BudgetSpent): void {
    this.budget.setSpent(spent);
  }

  lastUsed(): ReadonlyMap<string, number> {
    return this.balancer.lastUsed();
  }

  inflightByModel(): ReadonlyMap<string, number> {
    return this.balancer.inflightByModel();
  }

  inflightByReplica(): ReadonlyMap<string, number> {
    return this.balancer.inflightByReplica();
  }

  /** Requests waiting for a slot on a model whose replicas are all at their max_inflight, per model (its name). */
  waitingForSlots(): ReadonlyMap<string, number> {
    return this.gate.waitingByModel();
  }

  /** Requests held for a cold start now, per model (its name, not an alias); absent: none. */
  heldByModel(): ReadonlyMap<string, number> {
    return this.coldStart.heldByModel();
  }

  /** TrafficSource, for a router in the caller's thread (RouterLink asks the router thread for the same). */
  traffic(): Promise<ModelTraffic[]> {
    return Promise.resolve(this.trafficNow());
  }

  /** What the router has seen of each model: every catalog model, and any other it counted. */
  trafficNow(): ModelTraffic[] {
    return this.metrics.traffic(this.catalog.list().map((m) => m.name));
  }

  // ---- serving ------------------------------------------------------------------------

  start(): { url: string; port: number } {
    const o = this.o;
    const listen: Http1Options = {
      scheduler: this.scheduler,
      hostname: o.host,
      port: o.port,
      maxBodyBytes: o.maxBodyBytes,
      ...(o.serverIdleTimeoutSec !== undefined ? { idleTimeoutMs: o.serverIdleTimeoutSec * 1000 } : {}),
      ...o.listener,
      ...(o.tls ? { tls: { cert: Bun.file(o.tls.cert), key: Bun.file(o.tls.key) } } : {}),
      errorBody: (status, message, code) => openAIErrorBody(status, sizeRefusal(message, code), { code }),
      handler: this.firstTables ? this.firstTables.handle.bind(this.firstTables) : this.dispatch.handle.bind(this.dispatch),
      onHandlerError: (err) => o.log?.warn({ err: (err as Error).message }, "router request failed"),
    };
    this.server = new Http1Server(listen);
    const port = this.server.listen();
    // Deadline granularity: a quarter of the shortest timeout, within 10–250 ms.
    const every = Math.max(10, Math.min(250, Math.min(o.firstByteTimeoutMs, o.idleTimeoutMs) / 4));
    this.tick = every;
    this.deadlines.clock = this.scheduler.mono() + every;
    this.sweeper = this.scheduler.every(every, () => this.sweep()).unref();
    if (o.metricsIntervalMs > 0) {
      this.poller = new EngineMetricsPoller({
        endpoints: () => this.balancer.endpoints(),
        apply: (id, load) => this.balancer.setMetrics(id, load),
        tokens: { begin: (ep) => this.reconciler.begin(ep.id), end: (ep, begun, t) => this.reconciler.observed(ep as EndpointState, begun, t) },
        intervalMs: o.metricsIntervalMs,
        // Spread over most of the interval and capped: polling a thousand engines at once would
        // stall the prompts this thread serves for tens of milliseconds every round.
        spreadMs: o.metricsIntervalMs * 0.8,
        maxPerSecond: METRICS_MAX_PER_SECOND,
        log: o.log,
        scheduler: this.scheduler,
      });
      this.poller.start();
    }
    return { url: `http://${hostPort(o.host, port)}`, port };
  }

  /**
   * Stops: the listener closes at once (a restarted head node can take the port while this one
   * drains), the requests in flight are answered until they end or `drainMs` passes, then what is
   * left is cut. A client sees at most a refused connection, which it may retry before any byte.
   */
  async stop(drainMs = ROUTER_DRAIN_MS): Promise<void> {
    // Requests held for the first tables or for a cold start will not see them now: answered
    // before the drain, which waits only for requests on their way to an engine.
    this.stopping = true;
    this.firstTables?.close();
    this.coldStart.wake();
    const server = this.server;
    if (server) {
      const inFlight = server.conns.size;
      if (inFlight > 0) this.o.log?.info({ connections: inFlight, drain_timeout_ms: drainMs }, "router stopping: no new connections; answering the requests in flight");
      const cut = await server.drain(drainMs);
      if (cut > 0) this.o.log?.warn({ connections: cut, drain_timeout_ms: drainMs }, "router stopped: requests still in flight after the drain timeout were cut");
    }
    this.poller?.stop();
    this.sweeper?.cancel();
    this.bodies.stop();
    this.coldStart.wake();
    this.server?.stop();
    this.server = undefined;
    this.upstream.close();
  }

  /** Expires the deadlines that have passed; one sweep for every request in flight. */
  private sweep(): void {
    this.deadlines.sweep(this.scheduler.mono(), this.tick, (e) => this.o.log?.warn({ err: (e as Error).message }, "deadline expiry failed"));
    try {
      this.upstream.sweep();
    } catch (e) {
      this.o.log?.warn({ err: (e as Error).message }, "upstream idle sweep failed");
    }
  }

  /**
   * A bug of the router's own met while handling one request: logged, and that request alone
   * answered 500 (or cut, if its answer had started). Whoever calls this has released any
   * lease the request held.
   */
  private internalError(ex: ClientExchange, e: unknown): void {
    this.o.log?.warn({ err: (e as Error)?.message, stack: (e as Error)?.stack }, "router request failed");
    try {
      if (!ex.answered) send(ex, openAIError(500, "internal error in the router; see the server log", { code: "internal_error" }));
      else ex.destroy();
    } catch {
      // Nothing more can be told to this client.
    }
  }
}
