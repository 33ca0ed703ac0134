// Assembles a running head node: store, controller, the admin/agent listener, and the control
// loop. `llmgw serve`, `llmgw demo` and the integration tests all start it through here.

import { X509Certificate, createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Hono } from "hono";
import type { Logger } from "pino";
import { ConfigError, type ServeConfig } from "../config";
import { ensureDataDir, localUrl, resolveEngineSecret, resolveToken, writeServerInfo } from "../config/datadir";
import { type ListenerCaps, fitCaps, openFileLimit } from "../config/limits";
import type { Clock } from "../control/clock";
import { StoreUnavailableError } from "../control/errors";
import { type Scheduler, realScheduler } from "../lib/scheduler";
import { Controller } from "../control/controller";
import { Store } from "../store";
import { isLoopbackHost } from "../lib/net";
import type { RouterExposure } from "../protocol/views";
import { VERSION } from "../version";
import { Http1Server } from "../router/http1";
import { Router } from "../router/router";
import { buildAdminApp } from "./app";
import { type FetchApp, serveApp } from "./listener";

/** Largest request body on the admin listener (a catalog, a heartbeat), bytes. */
const ADMIN_MAX_BODY = 8 * 1024 * 1024;
/** The admin API's error code for the listener's own refusals, where the names differ. */
const ADMIN_CODES: Record<string, string> = { request_too_large: "body_too_large", internal: "internal" };

export interface RunningServer {
  adminUrl: string;
  /** How the router listens: open = beyond loopback with no API key required. */
  exposure: RouterExposure;
  /** The admin listener's Hono app (its `routes` list every route it serves). */
  adminApp: Hono;
  /** The admin/agent listener. */
  adminListener: Http1Server;
  /** Connection caps in force on both listeners, after fitting them under the open-file limit. */
  caps: ListenerCaps;
  router: Router;
  routerUrl: string;
  adminToken: string;
  joinToken: string;
  dataDir: string;
  /** The join token was generated just now: this data dir's first start. */
  firstStart: boolean;
  controller: Controller;
  store: Store;
  /** Set when both listeners serve HTTPS. */
  tls?: ServerTls;
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
  /** Time for the controller (its wall clock and long-poll timers) and the router. */
  clock?: Scheduler;
  /** Run the control loop on a timer (tests drive ticks by hand instead). */
  loop?: boolean;
  /** Monotonic clock of both listeners' deadlines (default performance.now); tests pass a manual one and sweep. */
  listenerClock?: { now(): number };
}

export async function startServer({ config, log, clock = realScheduler, loop = true, listenerClock }: StartOptions): Promise<RunningServer> {
  // Before anything is opened, so a bad certificate costs nothing to report.
  const tls = loadTls(config);
  const dataDir = ensureDataDir(config.data_dir);
  const admin = resolveToken(dataDir, "admin.token", config.admin_token, "llmgw_admin");
  const join_ = resolveToken(dataDir, "join.token", config.join_token, "llmgw_join");
  // Each replica's engine key is derived from this; kept so keys outlive a restart.
  const engineSecret = resolveEngineSecret(dataDir);
  for (const [kind, t] of [["admin", admin], ["join", join_]] as const)
    log.info({ kind, source: t.source, path: t.source === "given" ? undefined : t.path }, `${kind} token ${t.source}`);

  const dbPath = join(dataDir, "llmgw.db");
  const store = new Store({ path: dbPath, busyTimeoutMs: config.db_busy_timeout });
  log.info({ path: dbPath }, "store opened");

  const controller = new Controller({
    store,
    scheduler: clock,
    log,
    version: VERSION,
    dataDir,
    engineSecret: engineSecret.token,
    nodeTimeoutMs: config.node_timeout,
    heartbeatIntervalMs: config.heartbeat_interval,
    reconcile: {
      startTimeoutMs: config.start_timeout,
      maxFailures: config.max_failures,
      backoffMs: config.restart_backoff,
      backoffMaxMs: config.restart_backoff_max,
      replaceAfterMs: config.replace_after,
      // A replica an agent has not mentioned in a few heartbeats after placement is lost.
      reportGraceMs: Math.max(3 * config.heartbeat_interval, 5_000),
      basePort: config.engine_base_port,
    },
  });
  controller.setNodePolicy({ approveNodes: config.approve_nodes, maxNodes: config.max_nodes, heartbeatRate: config.heartbeat_rate, heartbeatBurst: config.heartbeat_burst });
  // Set once the router listens; the summary leaves it out until then.
  let exposure: RouterExposure = { listen: `${config.listen.host}:${config.listen.port}`, api_key_required: config.require_api_key, open: false };
  const app = buildAdminApp({ controller, log, adminToken: admin.token, joinToken: join_.token, version: VERSION, maxBodyBytes: ADMIN_MAX_BODY, routerExposure: () => exposure });
  const scheme = tls ? "https" : "http";

  // Each listener has caps of its own, so a flood on one never takes the other's connections,
  // and together they stay under the open-file limit, so accept() never fails for want of a
  // descriptor: past a cap a connection is shed at once instead.
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
  const shedLog = shedLogger(log, clock);
  const deadlines = {
    headTimeoutMs: config.head_timeout,
    bodyTimeoutMs: config.body_timeout,
    bodyMinRate: config.body_min_rate,
    ...(listenerClock ? { clock: listenerClock } : {}),
  };

  const adminListener = new Http1Server({
    hostname: config.admin_listen.host,
    port: config.admin_listen.port,
    ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
    maxBodyBytes: ADMIN_MAX_BODY,
    // Agents keep their connection between heartbeats; a long poll is a request under way, never idle.
    idleTimeoutMs: 120_000,
    ...deadlines,
    maxConnections: caps.admin.total,
    maxConnectionsPerAddress: caps.admin.perAddress,
    onShed: (cap, address) => shedLog("admin", cap, address),
    errorBody: adminErrorBody,
    handler: serveApp(app as unknown as FetchApp, { scheme, errorBody: adminErrorBody, onError: (err) => log.error({ err }, "admin request failed") }),
    onHandlerError: (err) => log.error({ err }, "admin request failed"),
  });
  let adminPort: number;
  try {
    adminPort = adminListener.listen();
  } catch (e) {
    store.close();
    throw new Error(`cannot listen on ${config.admin_listen.host}:${config.admin_listen.port} (admin): ${(e as Error).message}`);
  }
  const adminUrl = localUrl(config.admin_listen.host, adminPort, scheme);

  const router = new Router({
    host: config.listen.host,
    port: config.listen.port,
    now: () => clock.now(),
    maxBodyBytes: config.max_body_bytes,
    maxAttempts: config.max_attempts,
    firstByteTimeoutMs: config.first_byte_timeout,
    idleTimeoutMs: config.stream_idle_timeout,
    coldStartTimeoutMs: config.cold_start_timeout,
    cooldownMs: config.endpoint_cooldown,
    requireApiKey: config.require_api_key,
    loadFactor: config.balance_load_factor,
    adminToken: admin.token,
    demand: controller,
    log: log.child({ component: "router" }),
    ...(tls ? { tls: { cert: tls.certPath, key: tls.keyPath } } : {}),
    listener: {
      ...deadlines,
      maxConnections: caps.router.total,
      maxConnectionsPerAddress: caps.router.perAddress,
      onShed: (cap, address) => shedLog("router", cap, address),
    },
  });
  let routerAddr: { url: string; port: number };
  try {
    routerAddr = router.start();
  } catch (e) {
    adminListener.stop();
    store.close();
    throw new Error(`cannot listen on ${config.listen.host}:${config.listen.port} (router): ${(e as Error).message}`);
  }
  await controller.setEndpointSink(router);
  controller.setUsageSource(router);
  const routerUrl = localUrl(config.listen.host, routerAddr.port, scheme);
  if (tls) log.info({ cert: tls.certPath, key: tls.keyPath, fingerprint256: tls.fingerprint256 }, "TLS on: the router and the admin/agent API serve HTTPS");
  log.info({ listen: `${config.listen.host}:${routerAddr.port}`, url: routerUrl }, "router listening");
  exposure = routerExposure(config.listen.host, routerAddr.port, config.require_api_key);
  if (exposure.open)
    log.warn(
      { listen: exposure.listen, require_api_key: false },
      "router: open, no API key required: anyone who reaches this address can use every model (set --require-api-key and create keys with `llmgw keys create`)",
    );
  writeServerInfo(dataDir, {
    admin_url: adminUrl,
    router_url: routerUrl,
    pid: process.pid,
    version: VERSION,
    started_at: new Date().toISOString(),
    ...(tls ? { tls_cert: tls.certPath, tls_fingerprint: tls.fingerprint256 } : {}),
  });
  log.info({ admin: `${config.admin_listen.host}:${adminPort}`, url: adminUrl, version: VERSION }, "admin API listening");

  let timer: ReturnType<typeof setInterval> | undefined;
  if (loop) {
    let failing: string | undefined;
    const tick = async () => {
      try {
        await controller.tick();
        if (failing) log.info({ was: failing }, "control loop recovered: the store is writable again");
        failing = undefined;
      } catch (e) {
        // A failed tick (a locked or full disk, say) is logged once per cause and retried
        // next tick; the server stays up and keeps serving what it has.
        const sf = e instanceof StoreUnavailableError ? e : undefined;
        const cause = sf?.code ?? (e as Error).message;
        if (cause !== failing) log.error(sf ? { code: sf.code } : { err: e }, `control loop tick failed: ${sf?.message ?? (e as Error).message}`);
        failing = cause;
      }
    };
    timer = setInterval(tick, config.reconcile_interval);
    // Heartbeats with news, catalog and node changes reconcile at once, not on the next tick.
    controller.setWakeHandler(tick);
    await tick();
  }

  let stopped = false;
  return {
    adminUrl,
    exposure,
    adminApp: app,
    adminListener,
    caps,
    router,
    routerUrl,
    adminToken: admin.token,
    joinToken: join_.token,
    firstStart: join_.source === "generated",
    dataDir,
    controller,
    store,
    ...(tls ? { tls: { certPath: tls.certPath, keyPath: tls.keyPath, fingerprint256: tls.fingerprint256 } } : {}),
    async stop() {
      if (stopped) return;
      stopped = true;
      if (timer) clearInterval(timer);
      await router.stop();
      adminListener.stop();
      store.close();
      log.info("server stopped");
    },
  };
}

/** The admin API's error shape for what the listener refuses by itself (framing, limits, caps). */
function adminErrorBody(_status: number, message: string, code: string): string {
  return JSON.stringify({ error: { code: ADMIN_CODES[code] ?? code, message } });
}

/**
 * Logs shed connections at most once per listener and cap every 10 s, with how many: a flood
 * must not turn into a flood of log lines.
 */
function shedLogger(log: Logger, clock: Clock): (listener: "router" | "admin", cap: "total" | "address", address: string) => void {
  const last = new Map<string, { at: number; count: number }>();
  return (listener, cap, address) => {
    const key = `${listener}:${cap}`;
    const now = clock.now();
    const l = last.get(key);
    if (l !== undefined && now - l.at < 10_000) {
      l.count++;
      return;
    }
    const suppressed = l?.count ?? 0;
    last.set(key, { at: now, count: 0 });
    log.warn({ listener, cap, address, suppressed }, `${listener} listener at its ${cap === "total" ? "connection cap" : "per-address connection cap"}: shedding new connections`);
  };
}

/** Reads and checks tls_cert/tls_key; every problem names the key and the file. */
function loadTls(config: ServeConfig): (ServerTls & { cert: string; key: string }) | undefined {
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

/** How the router listens, as the summary reports it and `serve` warns about it. */
export function routerExposure(host: string, port: number, apiKeyRequired: boolean): RouterExposure {
  const listen = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
  return { listen, api_key_required: apiKeyRequired, open: !apiKeyRequired && !isLoopbackHost(host) };
}
