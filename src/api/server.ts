// Assembles a running head node: store, controller, the admin/agent listener, and the control
// loop. `llmgw serve`, `llmgw demo` and the integration tests all start it through here.

import { X509Certificate, createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Hono } from "hono";
import type { Logger } from "pino";
import { ConfigError, type ServeConfig } from "../config";
import { ensureDataDir, localUrl, resolveEngineSecret, resolveToken, writeServerInfo } from "../config/datadir";
import { type Clock, systemClock } from "../control/clock";
import { Controller } from "../control/controller";
import { Store } from "../store";
import { storeFailure } from "../store/errors";
import { VERSION } from "../version";
import { Router } from "../router/router";
import { buildAdminApp } from "./app";

export interface RunningServer {
  adminUrl: string;
  /** The admin listener's Hono app (its `routes` list every route it serves). */
  adminApp: Hono;
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
  clock?: Clock;
  /** Run the control loop on a timer (tests drive ticks by hand instead). */
  loop?: boolean;
}

/**
 * Whether replicas get engine keys. Off until the router presents each endpoint's key to its
 * engine (EndpointInfo.key as `Authorization: Bearer <key>`): a keyed engine refuses every
 * request sent without it.
 */
const ENGINE_KEYS = false;

export async function startServer({ config, log, clock = systemClock, loop = true }: StartOptions): Promise<RunningServer> {
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
    clock,
    log,
    version: VERSION,
    dataDir,
    ...(ENGINE_KEYS ? { engineSecret: engineSecret.token } : {}),
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
  const app = buildAdminApp({ controller, log, adminToken: admin.token, joinToken: join_.token, version: VERSION });

  let adminServer: ReturnType<typeof Bun.serve>;
  try {
    adminServer = Bun.serve({
      hostname: config.admin_listen.host,
      port: config.admin_listen.port,
      fetch: app.fetch,
      ...(tls ? { tls: { cert: tls.cert, key: tls.key } } : {}),
      // Agents long-poll here; keep idle connections around a little longer.
      idleTimeout: 120,
      // Hono's bodyLimit answers 413 in the API's error shape (from Content-Length, or while
      // reading a chunked body); Bun's own limit, which answers with an empty body, stays out of its way.
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    });
  } catch (e) {
    store.close();
    throw new Error(`cannot listen on ${config.admin_listen.host}:${config.admin_listen.port} (admin): ${(e as Error).message}`);
  }
  const scheme = tls ? "https" : "http";
  const adminUrl = localUrl(config.admin_listen.host, adminServer.port!, scheme);

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
  });
  let routerAddr: { url: string; port: number };
  try {
    routerAddr = router.start();
  } catch (e) {
    await adminServer.stop(true);
    store.close();
    throw new Error(`cannot listen on ${config.listen.host}:${config.listen.port} (router): ${(e as Error).message}`);
  }
  controller.setEndpointSink(router);
  controller.setUsageSource(router);
  const routerUrl = localUrl(config.listen.host, routerAddr.port, scheme);
  if (tls) log.info({ cert: tls.certPath, key: tls.keyPath, fingerprint256: tls.fingerprint256 }, "TLS on: the router and the admin/agent API serve HTTPS");
  log.info({ listen: `${config.listen.host}:${routerAddr.port}`, url: routerUrl }, "router listening");
  writeServerInfo(dataDir, {
    admin_url: adminUrl,
    router_url: routerUrl,
    pid: process.pid,
    version: VERSION,
    started_at: new Date().toISOString(),
    ...(tls ? { tls_cert: tls.certPath, tls_fingerprint: tls.fingerprint256 } : {}),
  });
  log.info({ admin: `${config.admin_listen.host}:${adminServer.port}`, url: adminUrl, version: VERSION }, "admin API listening");

  let timer: ReturnType<typeof setInterval> | undefined;
  if (loop) {
    let failing: string | undefined;
    const tick = () => {
      try {
        controller.tick();
        if (failing) log.info({ was: failing }, "control loop recovered: the store is writable again");
        failing = undefined;
      } catch (e) {
        // A failed tick (a locked or full disk, say) is logged once per cause and retried
        // next tick; the server stays up and keeps serving what it has.
        const sf = storeFailure(e);
        const cause = sf?.code ?? (e as Error).message;
        if (cause !== failing) log.error(sf ? { code: sf.code } : { err: e }, `control loop tick failed: ${sf?.message ?? (e as Error).message}`);
        failing = cause;
      }
    };
    timer = setInterval(tick, config.reconcile_interval);
    // Heartbeats with news, catalog and node changes reconcile at once, not on the next tick.
    controller.setWakeHandler(tick);
    tick();
  }

  let stopped = false;
  return {
    adminUrl,
    adminApp: app,
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
      await adminServer.stop(true);
      store.close();
      log.info("server stopped");
    },
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
