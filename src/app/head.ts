// The assembly of a head node, and the only place that knows every role: it opens the store,
// builds the router, the control plane's parts (control-plane.ts), TLS, both listeners and the
// control loop, hands each what it uses at construction, and the admin API only what it serves.
// app/ may import every folder; only cli/ (serve, demo) and tests import app/. Time comes through
// one injected Scheduler, handed on to the control plane, the router and both listeners.

import { X509Certificate, createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import type { Hono } from "hono";
import type { Logger } from "pino";
import { buildAdminApp } from "../api/app";
import { History, startSampling } from "../api/history";
import { type FetchApp, serveApp } from "../api/listener";
import { ConfigError, type ServeConfig } from "../config";
import { ensureDataDir, localUrl, resolveEngineSecret, resolveToken, writeServerInfo } from "../config/datadir";
import { type ListenerCaps, fitCaps, openFileLimit, unauthenticatedRoom } from "../config/limits";
import { hostPort, isLoopbackHost } from "../lib/net";
import { type Scheduler, type Timer, realScheduler } from "../lib/scheduler";
import type { ModelTraffic, TrafficSource } from "../protocol/routing";
import type { NodeAdmission, RouterExposure } from "../protocol/views";
import { Http1Server } from "../http/server";
import { Router, type RouterOptions } from "../router/router";
import type { Store } from "../store";
import { type OpenedStore, openStore } from "../store/open";
import { StoreImage } from "../control/image";
import { StoreUnavailableError } from "../control/errors";
import type { FleetViews } from "../control/fleet-views";
import type { JoinToken } from "../control/join-token";
import type { DemandSink } from "../protocol/routing";
import { type ControlPlane, buildControlPlane } from "./control-plane";
import { hubFor } from "./hub";
import { type ControlPlaneMembership, advertisedUrl, defaultName, joinControlPlanes, newInstanceId, refuseNamesake } from "./control-planes";
import { type ControlSettings, controlSettings, storeSettings } from "./settings";
import { type LocalToken, type SharedSecrets, adoptSharedSecrets, keepJoinToken } from "./shared-secrets";
import { FleetPublisher } from "./fleet-publisher";
import { PatroniPoller } from "./patroni";
import { RouterLink } from "./router-thread";
import { routerSettings } from "./router-settings";
import type { RouterWorkerData } from "./router-worker";
import { type ShedLog, shedLogger } from "./router-shed";
import { PROTOCOL_VERSION } from "../protocol/version";
import { VERSION } from "../version";
import { logOutput } from "../log";

/** Largest request body on the admin listener (a catalog, a heartbeat), bytes. */
const ADMIN_MAX_BODY = 8 * 1024 * 1024;
/** The admin API's error code for the listener's own refusals, where the names differ. */
const ADMIN_CODES: Record<string, string> = { request_too_large: "body_too_large", internal: "internal" };

/** A head node as its starter sees it: where it listens, its tokens, one tick, and how to stop it. */
export interface RunningServer {
  adminUrl: string;
  /** How the router listens: open = beyond loopback with no API key required. */
  exposure: RouterExposure;
  /** How new nodes are admitted: open = beyond loopback without --approve-nodes. */
  admission: NodeAdmission;
  /** The admin listener's Hono app (its `routes` list every route it serves). */
  adminApp: Hono;
  /** The admin/agent listener. */
  adminListener: Http1Server;
  /** Connection caps in force on both listeners, after fitting them under the open-file limit. */
  caps: ListenerCaps;
  routerUrl: string;
  adminToken: string;
  joinToken: string;
  dataDir: string;
  /** The join token was generated just now: this data dir's first start. */
  firstStart: boolean;
  /** Set when both listeners serve HTTPS. */
  tls?: ServerTls;
  /** The router's traffic figures per model (fresh from its thread when it runs on one). */
  traffic: TrafficSource;
  /**
   * One control-loop tick, now: collect usage, reconcile, publish. Throws what the tick threw
   * (a store that cannot take the write); the loop itself logs and retries instead. With
   * `loop: false` this is how a test moves the control plane.
   */
  tick(): Promise<void>;
  stop(): Promise<void>;
}

export interface ServerTls {
  /** Absolute paths of the certificate and key files. */
  certPath: string;
  keyPath: string;
  /** The leaf certificate's SHA-256 fingerprint (AA:BB:…), what agents pin with --server-fingerprint. */
  fingerprint256: string;
}

export interface StartOptions {
  config: ServeConfig;
  log: Logger;
  /** Time for the control plane, the router, both listeners and the control loop (default realScheduler); tests pass a ManualScheduler. */
  scheduler?: Scheduler;
  /** Run the control loop on the scheduler (tests tick by hand instead). */
  loop?: boolean;
}

/**
 * The parts inside a running head node. Only app/ (the simulated cluster) and the test helpers
 * reach them, to put in state the API would refuse and read what it never shows; everything
 * else holds the RunningServer.
 */
export interface HeadParts {
  /** The SQLite store (absent on PostgreSQL). */
  store?: Store;
  /** The store's in-memory image the control plane reads: invalidate() it after writing to `store` directly. */
  image: StoreImage;
  control: ControlPlane;
  /** Only with the router in the main thread (tests on a ManualScheduler, `router_thread: false`). */
  router?: Router;
}

export interface Head {
  server: RunningServer;
  parts: HeadParts;
}

/**
 * The dashboard's last hour (api/history.ts), sampled from now on: GPU use per class, and the
 * router's figures once `traffic.from` is set (none before: the router is not running yet).
 */
function dashboardFeed(o: { scheduler: Scheduler; views: Pick<FleetViews, "summary">; log: Logger }): { history: History; traffic: LateTraffic; timer: Timer } {
  const history = new History();
  const traffic = new LateTraffic();
  const { timer } = startSampling({
    history,
    scheduler: o.scheduler,
    traffic,
    gpus: async () => (await o.views.summary()).gpus,
    onError: (e) => o.log.debug({ err: (e as Error).message }, "dashboard history: sample skipped"),
  });
  return { history, traffic, timer };
}

/** Starts a head node (what `llmgw serve` runs). */
export async function startServer(o: StartOptions): Promise<RunningServer> {
  return (await startHead(o)).server;
}

/** Starts a head node and keeps hold of its parts (for app/cluster.ts and the test helpers). */
export async function startHead({ config, log, scheduler = realScheduler, loop = true }: StartOptions): Promise<Head> {
  // Before anything is opened, so a bad certificate costs nothing to report.
  const tls = loadTls(config);
  const dataDir = ensureDataDir(config.data_dir);
  const admin = resolveToken(dataDir, "admin.token", config.admin_token, "llmgw_admin");
  const join_ = resolveToken(dataDir, "join.token", config.join_token, "llmgw_join");
  // Each replica's engine key is derived from this; kept so keys outlive a restart.
  const secret = resolveEngineSecret(dataDir);
  for (const [kind, t] of [["admin", admin], ["join", join_]] as const)
    log.info({ kind, source: t.source, path: t.source === "given" ? undefined : t.path }, `${kind} token ${t.source}`);

  const opened = await openStore({ target: config.store, dataDir, ...storeSettings(config) });
  const store = opened.sqlite;
  // Several control planes on one store: on by itself with PostgreSQL, asked for with SQLite.
  const ha = opened.dialect === "postgres" || config.ha === true;
  log.info({ path: opened.describe, dialect: opened.dialect, ...(ha ? { ha } : {}) }, "store opened");
  const shared = ha ? await amongOthers(opened, config, { scheduler, log, secret, admin, join: join_ }) : undefined;
  const close = () => void opened.close().catch((e) => log.warn({ err: (e as Error).message }, "store not closed cleanly"));
  const image = new StoreImage(opened.store, scheduler);
  // The join token agents present, followed in the store with several control planes, and how it is rotated.
  const { joinToken, follower, rotation } = keepJoinToken({ ...(shared ? { shared } : {}), join: join_, store: image, scheduler, log, dataDir });
  // The summary's store[] and store_error, from the store's Patroni members (serve --patroni).
  const patroni = config.patroni ? new PatroniPoller({ urls: config.patroni, scheduler, log }) : undefined;
  // Among several control planes: set once this one has joined them (the summary's control_planes).
  let member: ControlPlaneMembership | undefined;

  // Set once the router listens; the summary leaves it out until then.
  let exposure: RouterExposure = { listen: `${config.listen.host}:${config.listen.port}`, api_key_required: config.require_api_key, open: false };
  let admission: NodeAdmission | undefined;
  const caps = listenerCaps(config, log);
  const listening = { config, log, scheduler, tls, caps, shed: shedLogger(log, scheduler), awaitTables: loop };
  const settings = controlSettings(config);
  const { routing, control } = await routingAndControl(listening, { image, joinToken, dataDir, settings, adminToken: admin.token, engineSecret: shared?.engineSecret ?? secret.token, ha, patroni, member: () => member });
  patroni?.start();

  const feed = dashboardFeed({ scheduler, views: control.views, log });
  // The admin API and the dashboard get the operator's parts; the agent API who speaks, and the intake.
  const agent = { identity: control.identity, intake: control.intake, policy: settings.policy, clock: scheduler };
  const app = buildAdminApp({ control, agent, log, adminToken: admin.token, joinTokenRotation: rotation, version: VERSION, maxBodyBytes: ADMIN_MAX_BODY, routerExposure: () => exposure, nodeAdmission: () => admission, scheduler, history: feed.history, ledgerCheck: routing.sink });
  const scheme = tls ? "https" : "http";

  const adminListener = adminListenerFor(listening, app, scheme);
  let adminPort: number;
  try {
    adminPort = adminListener.listen();
  } catch (e) {
    patroni?.stop();
    close();
    throw new Error(`cannot listen on ${config.admin_listen.host}:${config.admin_listen.port} (admin): ${(e as Error).message}`);
  }
  const adminUrl = localUrl(config.admin_listen.host, adminPort, scheme);
  admission = nodeAdmission(config.admin_listen.host, adminPort, config.approve_nodes);

  const routerPort = await startRouting(listening, routing, () => {
    adminListener.stop();
    patroni?.stop();
    close();
  });
  const { router, link, sink } = routing;
  feed.traffic.from = sink;
  // From now on the router is told what to route; it holds the API keys before anyone is told where it listens.
  await control.projector.start();
  if (link) log.info({ thread: "router" }, "router runs on its own thread");
  const routerUrl = localUrl(config.listen.host, routerPort, scheme);
  if (tls) log.info({ cert: tls.certPath, key: tls.keyPath, fingerprint256: tls.fingerprint256 }, "TLS on: the router and the admin/agent API serve HTTPS");
  log.info({ listen: `${config.listen.host}:${routerPort}`, url: routerUrl }, "router listening");
  exposure = routerExposure(config.listen.host, routerPort, config.require_api_key);
  warnOpen(log, exposure, admission);
  // Among several control planes: joined (the lease asked once) before anyone is told where this one is.
  member = ha ? await joinControlPlanes({ ...membershipOptions(config, { control, image, scheduler, log, adminPort, routerUrl, scheme, tls, ...(opened.postgres ? { mayLead: () => opened.postgres!.schemaAhead() } : {}) }), onStoreNews: () => follower?.poke() }) : undefined;
  announce(listening, dataDir, { adminUrl, adminPort, routerUrl });

  const fleet = new FleetPublisher({ views: control.views, leadership: control.leadership, sink, scheduler, log });
  const timer = loop ? await startLoop(control, log, scheduler, config.reconcile_interval, () => fleet.publish()) : undefined;
  let stopped = false;
  const server: RunningServer = {
    adminUrl,
    exposure,
    admission,
    adminApp: app,
    adminListener,
    caps,
    routerUrl,
    adminToken: admin.token,
    // Empty where this control plane holds no copy of the store's join token.
    joinToken: shared && !shared.joinHeld ? "" : join_.token,
    firstStart: join_.source === "generated" && (shared?.joinHeld ?? true),
    dataDir,
    traffic: feed.traffic,
    ...(tls ? { tls: { certPath: tls.certPath, keyPath: tls.keyPath, fingerprint256: tls.fingerprint256 } } : {}),
    tick: async () => {
      await control.loop.tick();
      await fleet.publish(true);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      // First: a leader gives the lease up, so a standby takes over at once.
      await member?.stop();
      follower?.stop();
      timer?.cancel();
      feed.timer.cancel();
      patroni?.stop();
      control.load.stop();
      await sink.stop();
      adminListener.stop();
      await image.flush().catch((e) => log.warn({ err: e }, "last-seen times not written at stop"));
      await opened.close().catch((e) => log.warn({ err: (e as Error).message }, "store not closed cleanly"));
      log.info("server stopped");
    },
  };
  return { server, parts: { ...(store ? { store } : {}), image, control, ...(router ? { router } : {}) } };
}

/**
 * The router, not listening yet, and the control plane's parts around the store: the control plane
 * publishes to the router and reads its usage, and the router tells the control plane of demand
 * for models nothing serves (only once it serves, by when the control plane is built).
 */
async function routingAndControl(
  l: Listening,
  o: { image: StoreImage; joinToken: JoinToken; dataDir: string; settings: ControlSettings; adminToken: string; engineSecret: string; ha: boolean; patroni: PatroniPoller | undefined; member: () => ControlPlaneMembership | undefined },
): Promise<{ routing: Routing; control: ControlPlane }> {
  const { config, log, scheduler } = l;
  const routing = routingFor(l, { requestModel: (m) => void control.catalog.requestModel(m) }, o.adminToken);
  const patroni = o.patroni;
  const control = buildControlPlane({
    store: o.image,
    fast: o.image,
    scheduler,
    log,
    version: VERSION,
    dataDir: o.dataDir,
    settings: o.settings,
    engineSecret: o.engineSecret,
    joinToken: o.joinToken,
    hub: hubFor(config, process.env),
    sink: routing.sink,
    usage: routing.sink,
    // Several control planes: its router's usage and its nodes' reports go through the store, and
    // everyone's are read (a router silent for a lease TTL no longer limits idleness).
    ...(o.ha ? { shared: { name: config.name ?? defaultName(), liveWithinMs: config.lease_ttl } } : {}),
    summary: { ...(patroni ? { store: () => patroni.snapshot() } : {}), ...(o.ha ? { controlPlanes: () => o.member()?.view() } : {}) },
  });
  // What nodes last said beside their inventory (GPU reasons, discovery errors): a restart compares their next heartbeats with it.
  await control.memory.loadReports();
  return { routing, control };
}

/** Where this head node listens, in the data dir's server.json (what the CLI on this machine finds) and the log. */
function announce(l: Listening, dataDir: string, o: { adminUrl: string; adminPort: number; routerUrl: string }): void {
  const { config, tls, scheduler, log } = l;
  writeServerInfo(dataDir, {
    admin_url: o.adminUrl,
    admin_listen: hostPort(config.admin_listen.host, o.adminPort),
    ...(config.advertise_url ? { advertise_url: config.advertise_url } : {}),
    router_url: o.routerUrl,
    pid: process.pid,
    version: VERSION,
    started_at: new Date(scheduler.now()).toISOString(),
    ...(tls ? { tls_cert: tls.certPath, tls_fingerprint: tls.fingerprint256 } : {}),
  });
  log.info({ admin: `${config.admin_listen.host}:${o.adminPort}`, url: o.adminUrl, version: VERSION }, "admin API listening");
}

/** The router's TrafficSource, handed out before the router exists: nothing is counted until it listens. */
class LateTraffic implements TrafficSource {
  from: TrafficSource | undefined;
  traffic(): Promise<ModelTraffic[]> {
    return this.from?.traffic() ?? Promise.resolve([]);
  }
}

/** The router as the head node holds it: in this thread, or the link to its own thread; either is the control plane's sink. */
interface Routing {
  router?: Router;
  link?: RouterLink;
  sink: Router | RouterLink;
}

/** The router, on its own thread unless the config says otherwise or time is not real (a Worker cannot share a manual clock); not listening yet. */
function routingFor(l: Listening, demand: DemandSink, adminToken: string): Routing {
  const { config, log, scheduler } = l;
  if (config.router_thread && scheduler === realScheduler) {
    const link = new RouterLink({ data: routerWorkerData(l, adminToken), demand, log, scheduler });
    return { link, sink: link };
  }
  const router = routerFor(l, demand, adminToken);
  return { router, sink: router };
}

/** Starts the router listening, answering its port; when it cannot listen, `undo` runs and the error names the address. */
async function startRouting(l: Listening, routing: Routing, undo: () => void): Promise<number> {
  const { config } = l;
  try {
    const { port } = routing.link ? await routing.link.start() : routing.router!.start();
    return port;
  } catch (e) {
    undo();
    throw new Error(`cannot listen on ${config.listen.host}:${config.listen.port} (router): ${(e as Error).message}`);
  }
}

/** This control plane among the others: its name, where it is reached, the lease's timings, the floating address. */
function membershipOptions(
  config: ServeConfig,
  o: {
    control: Pick<ControlPlane, "leadership" | "loop">;
    image: StoreImage;
    scheduler: Scheduler;
    log: Logger;
    adminPort: number;
    routerUrl: string;
    scheme: "http" | "https";
    tls: LoadedTls | undefined;
    /** The store's schema check (PostgreSQL): barred from leading while it is newer than this release knows. */
    mayLead?: () => Promise<string | undefined>;
  },
): Parameters<typeof joinControlPlanes>[0] {
  const name = config.name ?? defaultName();
  const adminUrl = config.advertise_url?.replace(/\/+$/, "") ?? advertisedUrl(config.admin_listen.host, o.adminPort, o.scheme);
  if (config.lease_renew * 2 > config.lease_ttl)
    o.log.warn({ lease_ttl_ms: config.lease_ttl, lease_renew_ms: config.lease_renew }, "the lease is renewed less than twice within its TTL: one slow renewal makes the leader step down (lower --lease-renew or raise --lease-ttl)");
  return {
    leadership: o.control.leadership,
    loop: o.control.loop,
    image: o.image,
    scheduler: o.scheduler,
    log: o.log,
    record: { name, adminUrl, routerUrl: o.routerUrl, startedAt: o.scheduler.now(), version: VERSION, protocol: PROTOCOL_VERSION },
    ...(o.mayLead ? { mayLead: o.mayLead } : {}),
    instance: newInstanceId(),
    ttlMs: config.lease_ttl,
    renewMs: config.lease_renew,
    ...(config.floating_address ? { floating: { address: config.floating_address, port: o.adminPort, scheme: o.scheme, ...(o.tls ? { ca: o.tls.cert } : {}) } } : {}),
  };
}

/**
 * Several control planes on one store, before this one starts anything: refuses to run beside a
 * live one of its name (control-planes.ts), then takes the store's engine secret and the digests
 * of its tokens (shared-secrets.ts). A refusal closes the store.
 */
async function amongOthers(opened: OpenedStore, config: ServeConfig, o: { scheduler: Scheduler; log: Logger; secret: LocalToken; admin: LocalToken; join: LocalToken }): Promise<SharedSecrets> {
  const name = config.name ?? defaultName();
  try {
    await refuseNamesake({ store: opened.store, describe: opened.describe, name, ttlMs: config.lease_ttl, renewMs: config.lease_renew, scheduler: o.scheduler, log: o.log });
  } catch (e) {
    await opened.close().catch(() => undefined);
    throw e;
  }
  return adoptSharedSecrets({ opened, log: o.log, secret: o.secret, admin: o.admin, join: o.join, name, ttlMs: config.lease_ttl });
}

/**
 * Each listener has caps of its own, so a flood on one never takes the other's connections,
 * and together they stay under the open-file limit, so accept() never fails for want of a
 * descriptor: past a cap a connection is shed at once instead.
 */
function listenerCaps(config: ServeConfig, log: Logger): ListenerCaps {
  const wanted: ListenerCaps = {
    router: { total: config.max_connections, perAddress: config.max_connections_per_address },
    admin: { total: config.admin_max_connections, perAddress: config.admin_max_connections_per_address },
  };
  const fdLimit = openFileLimit();
  const caps = fitCaps(wanted, fdLimit);
  if (caps.lowered)
    log.warn(
      { open_file_limit: fdLimit, wanted: { router: wanted.router.total, admin: wanted.admin.total }, caps: { router: caps.router.total, admin: caps.admin.total } },
      `connection caps lowered to fit the open-file limit of ${fdLimit}: router ${caps.router.total}, admin/agent ${caps.admin.total}; raise the limit (ulimit -n, systemd LimitNOFILE) to keep --max-connections ${wanted.router.total} and --admin-max-connections ${wanted.admin.total}`,
    );
  else log.debug({ open_file_limit: fdLimit ?? "unknown", caps }, "connection caps");
  return caps;
}

/** What both listeners are built from. */
interface Listening {
  config: ServeConfig;
  log: Logger;
  scheduler: Scheduler;
  tls: LoadedTls | undefined;
  caps: ListenerCaps;
  shed: ShedLog;
  /** The router waits for the control plane's first tables (router/first-tables.ts): where a loop publishes them, not where a test ticks by hand. */
  awaitTables: boolean;
}

/** Deadlines both listeners keep (on the scheduler each listener is given). */
function deadlines({ config }: Listening) {
  return {
    headTimeoutMs: config.head_timeout,
    bodyTimeoutMs: config.body_timeout,
    bodyMinRate: config.body_min_rate,
  };
}

function adminListenerFor(l: Listening, app: Hono, scheme: "http" | "https"): Http1Server {
  const { config, log, tls, caps, scheduler } = l;
  return new Http1Server({
    scheduler,
    hostname: config.admin_listen.host,
    port: config.admin_listen.port,
    ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
    maxBodyBytes: ADMIN_MAX_BODY,
    // Agents keep their connection between heartbeats; a long poll is a request under way, never idle.
    idleTimeoutMs: 120_000,
    ...deadlines(l),
    maxConnections: caps.admin.total,
    maxConnectionsPerAddress: caps.admin.perAddress,
    unauthenticated: unauthenticatedRoom(caps.admin.total, config.head_timeout),
    onShed: (cap, address) => l.shed("admin", cap, address),
    errorBody: adminErrorBody,
    handler: serveApp(app as unknown as FetchApp, { scheme, errorBody: adminErrorBody, onError: (err) => log.error({ err }, "admin request failed") }),
    onHandlerError: (err) => log.error({ err }, "admin request failed"),
  });
}

function routerFor(l: Listening, demand: DemandSink, adminToken: string): Router {
  const { config, log, tls, caps, scheduler } = l;
  return new Router({
    host: config.listen.host,
    port: config.listen.port,
    scheduler,
    ...routerSettings(config),
    // It starts knowing no model: requests wait for the control plane's first tables.
    awaitTables: l.awaitTables,
    requireApiKey: config.require_api_key,
    adminToken,
    demand,
    log: log.child({ component: "router" }),
    ...(tls ? { tls: { cert: tls.certPath, key: tls.keyPath } } : {}),
    listener: {
      ...deadlines(l),
      maxConnections: caps.router.total,
      maxConnectionsPerAddress: caps.router.perAddress,
      onShed: (cap, address) => l.shed("router", cap, address),
    },
  });
}

/** The router thread's options: the router's, as plain data (no scheduler, log or callbacks). */
function routerWorkerData(l: Listening, adminToken: string): RouterWorkerData {
  const { config, log, tls, caps } = l;
  return {
    logLevel: log.level,
    // Made concrete here: the thread's own stdout is not the terminal's to ask.
    logOutput: logOutput(config.log_format),
    host: config.listen.host,
    port: config.listen.port,
    ...routerSettings(config),
    // It starts knowing no model: requests wait for the control plane's first tables.
    awaitTables: l.awaitTables,
    requireApiKey: config.require_api_key,
    adminToken,
    ...(tls ? { tls: { cert: tls.certPath, key: tls.keyPath } } : {}),
    listener: { ...deadlines(l), maxConnections: caps.router.total, maxConnectionsPerAddress: caps.router.perAddress },
  };
}

/**
 * Ticks the control loop every `intervalMs` on the scheduler, and at once when a part asks (a
 * heartbeat with news, a catalog or node change reconciles now, not on the next tick). A failed
 * tick (a locked or full disk, say) is logged once per cause and retried next tick; the server
 * stays up and keeps serving what it has.
 */
async function startLoop(control: Pick<ControlPlane, "loop" | "wakeups" | "load">, log: Logger, scheduler: Scheduler, intervalMs: number, afterTick: () => Promise<void>): Promise<Timer> {
  let failing: string | undefined;
  const tick = async () => {
    try {
      await control.loop.tick();
      await afterTick();
      if (failing) log.info({ was: failing }, "control loop recovered: the store is writable again");
      failing = undefined;
    } catch (e) {
      const sf = e instanceof StoreUnavailableError ? e : undefined;
      const cause = sf?.code ?? (e as Error).message;
      if (cause !== failing) log.error(sf ? { code: sf.code } : { err: e }, `control loop tick failed: ${sf?.message ?? (e as Error).message}`);
      failing = cause;
    }
  };
  const timer = scheduler.every(intervalMs, tick);
  control.wakeups.listen(tick);
  // How far behind the head node is: measured while the loop runs (control/load.ts).
  control.load.start();
  // The first tick completes before the server is handed out, as a test or the demo expects.
  await tick();
  return timer;
}

/** The admin API's error shape for what the listener refuses by itself (framing, limits, caps). */
function adminErrorBody(_status: number, message: string, code: string): string {
  return JSON.stringify({ error: { code: ADMIN_CODES[code] ?? code, message } });
}

type LoadedTls = ServerTls & { cert: string; key: string };

/** Reads and checks tls_cert/tls_key; every problem names the key and the file. */
function loadTls(config: ServeConfig): LoadedTls | undefined {
  if (config.tls_cert === undefined || config.tls_key === undefined) return undefined;
  const certPath = resolve(config.tls_cert);
  const keyPath = resolve(config.tls_key);
  const read = (key: string, path: string) => {
    try {
      return readFileSync(path, "utf8");
    } catch (e) {
      const err = e as NodeJS.ErrnoException;
      const why = err.code === "ENOENT" ? "no such file" : err.code === "EACCES" ? "permission denied" : err.code === "EISDIR" ? "is a directory" : err.message;
      throw new ConfigError([`${key} ${path}: cannot read it (${why})`]);
    }
  };
  const cert = read("tls_cert", certPath);
  const key = read("tls_key", keyPath);
  let x509: X509Certificate;
  try {
    x509 = new X509Certificate(cert);
  } catch (e) {
    throw new ConfigError([`tls_cert ${certPath}: not a PEM certificate (${(e as Error).message})`]);
  }
  let matches: boolean;
  try {
    matches = x509.checkPrivateKey(createPrivateKey(key));
  } catch (e) {
    throw new ConfigError([`tls_key ${keyPath}: not an unencrypted PEM private key (${(e as Error).message})`]);
  }
  if (!matches) throw new ConfigError([`tls_key ${keyPath} is not the private key of the certificate in tls_cert ${certPath}`]);
  return { certPath, keyPath, cert, key, fingerprint256: x509.fingerprint256 };
}

/**
 * How new nodes are admitted, as the summary reports it and `serve` warns about it: without
 * --approve-nodes the join token alone gets a node replicas, and with them prompts and the
 * catalog's env. Said rather than changed by default, as the open router is: every real cluster
 * listens beyond loopback (agents must reach it), so approval by default would be a step per
 * node for everyone, and an operator who distributes the join token has chosen who holds it.
 */
export function nodeAdmission(host: string, port: number, approveNodes: boolean): NodeAdmission {
  return { listen: hostPort(host, port), approve_nodes: approveNodes, open: !approveNodes && !isLoopbackHost(host) };
}

/** The start's warnings about who can use this head node without a credential of their own. */
function warnOpen(log: Logger, router: RouterExposure, admission: NodeAdmission): void {
  if (router.open)
    log.warn(
      { listen: router.listen, require_api_key: false },
      "router: open, no API key required: anyone who reaches this address can use every model (set --require-api-key and create keys with `llmgw keys create`)",
    );
  if (admission.open)
    log.warn(
      { listen: admission.listen, approve_nodes: false },
      "nodes join without approval: anyone who holds the join token and reaches this address is given replicas, and with them prompts and the catalog's env (HF_TOKEN and the like); set --approve-nodes to hold new nodes until `llmgw nodes approve NAME`",
    );
}

/** How the router listens, as the summary reports it and `serve` warns about it. */
export function routerExposure(host: string, port: number, apiKeyRequired: boolean): RouterExposure {
  return { listen: hostPort(host, port), api_key_required: apiKeyRequired, open: !apiKeyRequired && !isLoopbackHost(host) };
}
