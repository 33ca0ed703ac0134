// Losing PostgreSQL is an ordinary event for the store: while the server is down (killed with
// SIGKILL, or shut down cleanly) every call rejects with StoreUnavailableError naming host:port
// and never the URL's password; once it is back on the same port, the same store works again
// without being reopened, and watch() hears other instances again. A server that goes silent
// instead (a partition mid-failover: a TCP proxy that stops forwarding) costs a call its
// deadline, no more, and a head node's admin API answers 503 within it.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { StoreUnavailableError } from "../../src/control/errors";
import type { StoreChange } from "../../src/control/types";
import { startHead } from "../../src/app/head";
import { ServeConfig } from "../../src/config";
import { ManualScheduler } from "../../src/lib/scheduler";
import { openStore } from "../../src/store/open";
import { PgStore } from "../../src/store/pg";
import { heartbeat } from "../helpers/fleet";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { TcpProxy } from "../helpers/tcp-proxy";
import { scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const SECRET = "hunter2-secret";
const NOW = 1_800_000_000_000;
let pg: Postgres;
let url: string;
beforeAll(async () => {
  pg = await startPostgres();
  // Trust authentication ignores the password; it is there to be kept out of every message.
  url = pg.url.replace("postgres@", `postgres:${SECRET}@`);
}, 60_000);
afterAll(async () => {
  await pg?.stop();
}, 30_000);

async function unavailable(p: Promise<unknown>): Promise<StoreUnavailableError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(StoreUnavailableError);
  const err = e as StoreUnavailableError;
  expect(err.code).toBe("store_unavailable");
  expect(err.message).toContain(`127.0.0.1:${pg.port}`);
  expect(err.message).not.toContain(SECRET);
  return err;
}

const emptyPlan = { create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [{ kind: "k", subject: "s", message: "m" }] };

describe("PostgreSQL going away and coming back", () => {
  for (const how of ["kill9", "halt"] as const) {
    test(`${how === "kill9" ? "kill -9 of every server process" : "a clean shutdown"}: calls fail as store_unavailable meanwhile, then work again; watch resumes`, async () => {
      const a = await PgStore.open({ url, retries: 2 });
      const b = await PgStore.open({ url, retries: 2 });
      try {
        await a.applyHeartbeat(heartbeat({ name: "n1" }), NOW);
        const heard: StoreChange[] = [];
        a.watch((c) => heard.push(c));
        await until("the watcher to stand", async () => {
          await b.saveNodeReport("n1", "{}", NOW);
          return heard.length > 0;
        }, { timeoutMs: 10_000, everyMs: 100 });

        await pg[how]();
        // Reads, idempotent writes (tried again, then given up) and a plan (never tried blindly).
        const errs = [
          await unavailable(a.snapshot()),
          await unavailable(a.touchNodes([{ name: "n1", at: NOW + 1 }])),
          await unavailable(a.acquireLease("a", 10_000)),
          await unavailable(a.applyPlan(emptyPlan, NOW)),
          await unavailable(b.listEvents({ limit: 5 })),
        ];
        for (const e of errs) expect(e.driverCode).toBeString();

        await pg.start();
        await until("the store to answer again", () => a.countNodes().then(() => true, () => false), { timeoutMs: 15_000, everyMs: 50 });
        await a.touchNodes([{ name: "n1", at: NOW + 2 }]);
        expect((await a.snapshot()).nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([["n1", NOW + 2]]);
        await a.applyPlan(emptyPlan, NOW);
        // Written exactly once, though the first try failed while the server was down.
        expect((await b.listEvents({ limit: 10 })).length).toBe(1);
        await b.listEvents({ limit: 1 });

        // The watcher's connection came back by itself: another instance's commit is heard again.
        heard.length = 0;
        await until("a change heard after the restart", async () => {
          await b.saveNodeReport("n1", `{"t":${Date.now()}}`, NOW);
          return heard.length > 0;
        }, { timeoutMs: 15_000, everyMs: 100 });
        await a.applyPlan({ ...emptyPlan, events: [] }, NOW);
        await pg.sql("DELETE FROM events");
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    }, 60_000);
  }

  test("a server that answers read-only (a standby, after a failover) is store_unavailable, and the store recovers when a writable one answers", async () => {
    const a = await PgStore.open({ url, retries: 1 });
    try {
      // What a demoted primary looks like to a connection that outlived the switch.
      await a.countNodes();
      await pg.sql("ALTER DATABASE llmgw SET default_transaction_read_only = on", "postgres");
      await pg.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'llmgw'", "postgres");
      const err = await unavailable(a.touchNodes([{ name: "n1", at: NOW }]));
      expect(err.driverCode).toBe("25006");
      expect(err.message).toContain("standby");
      expect(await a.countNodes()).toBeGreaterThanOrEqual(0); // reads still work
      await pg.sql("ALTER DATABASE llmgw SET default_transaction_read_only = off", "postgres");
      // The pool was started afresh, so new connections see the writable server.
      await until("writes to work again", () => a.touchNodes([{ name: "n1", at: NOW + 3 }]).then(() => true, () => false), { timeoutMs: 10_000, everyMs: 50 });
    } finally {
      await pg.sql("ALTER DATABASE llmgw SET default_transaction_read_only = off", "postgres");
      await a.close();
    }
  }, 30_000);

  test("openStore on a server that is not there fails at once with a clear message and no password", async () => {
    const dead = `postgres://llmgw:${SECRET}@127.0.0.1:1/llmgw`;
    const t0 = performance.now();
    const err = await openStore({ target: dead, dataDir: "/nonexistent" }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toStartWith("cannot open the PostgreSQL store postgres://llmgw:***@127.0.0.1:1/llmgw: cannot reach PostgreSQL at 127.0.0.1:1 (ECONNREFUSED)");
    expect(err!.message).not.toContain(SECRET);
    expect(performance.now() - t0).toBeLessThan(5000);
  }, 30_000);
});

describe("PostgreSQL that stops answering mid-call (a partition: no error, only silence)", () => {
  const DEADLINE = 1000;
  /** Settles p; the error it rejected with and how long it took (undefined error: it answered). */
  async function timed(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
    const t0 = performance.now();
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    return { err, ms: performance.now() - t0 };
  }
  function silent(err: unknown, port: number): void {
    expect(err).toBeInstanceOf(StoreUnavailableError);
    const e = err as StoreUnavailableError;
    expect(e.code).toBe("store_unavailable");
    expect(e.message).toStartWith(`PostgreSQL at 127.0.0.1:${port} did not answer within 1s (--db-query-timeout)`);
    expect(e.message).not.toContain(SECRET);
  }

  test("each call fails as store_unavailable within its deadline, reads, writes and plans alike; the same store works again once the way is open", async () => {
    const proxy = new TcpProxy({ host: pg.host, port: pg.port });
    proxy.start();
    const a = await PgStore.open({ url: url.replace(`:${pg.port}/`, `:${proxy.port}/`), queryTimeoutMs: DEADLINE });
    try {
      await a.applyHeartbeat(heartbeat({ name: "n1" }), NOW);
      // Under way when the proxy stops forwarding: asked, never answered.
      const calls = [a.snapshot(), a.touchNodes([{ name: "n1", at: NOW + 1 }]), a.acquireLease("a", 10_000), a.applyPlan(emptyPlan, NOW), a.listEvents({ limit: 5 })].map(timed);
      proxy.freeze();
      for (const { err, ms } of await Promise.all(calls)) {
        silent(err, proxy.port);
        expect(ms).toBeLessThan(DEADLINE + 500);
      }
      // Asked while it is silent: the same (its fresh connections get no further).
      const later = await timed(a.countNodes());
      silent(later.err, proxy.port);
      expect(later.ms).toBeGreaterThanOrEqual(DEADLINE - 50);
      expect(later.ms).toBeLessThan(DEADLINE + 500);

      proxy.thaw();
      await until("the store to answer again", () => a.countNodes().then(() => true, () => false), { timeoutMs: 10_000, everyMs: 50 });
      await a.touchNodes([{ name: "n1", at: NOW + 2 }]);
      expect((await a.snapshot()).nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([["n1", NOW + 2]]);
    } finally {
      proxy.stop();
      await a.close();
      await pg.sql("DELETE FROM nodes; DELETE FROM events; DELETE FROM leases");
    }
  }, 30_000);

  test("a head node's admin API answers 503 with the store's reason within the deadline, reads and writes, and 200 again once the store answers", async () => {
    const proxy = new TcpProxy({ host: pg.host, port: pg.port });
    proxy.start();
    const dataDir = scratchDir("llmgw-pg-deadline-");
    const config = ServeConfig.parse({ data_dir: dataDir, admin_listen: "127.0.0.1:0", listen: "127.0.0.1:0", store: url.replace(`:${pg.port}/`, `:${proxy.port}/`), db_query_timeout: `${DEADLINE}ms`, router_thread: false });
    const { server } = await startHead({ config, log: pino({ level: "silent" }), scheduler: new ManualScheduler(NOW), loop: false });
    const token = readFileSync(join(dataDir, "admin.token"), "utf8").trim();
    const admin = (path: string, init: RequestInit = {}) => fetch(`${server.adminUrl}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, signal: AbortSignal.timeout(15_000) });
    const put = () => admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }) });
    try {
      expect((await admin("/api/v1/summary")).status).toBe(200);
      proxy.freeze();
      // What `status` asks (the summary reads recent evictions from the events) and a catalog
      // write: each refused within the deadline, saying why.
      const refused = async (what: string, ask: () => Promise<Response>) => {
        const t0 = performance.now();
        const res = await ask();
        const ms = performance.now() - t0;
        console.log(`PostgreSQL silent behind the proxy (deadline ${DEADLINE} ms): ${what} answered ${res.status} in ${Math.round(ms)} ms`);
        expect(ms).toBeLessThan(DEADLINE + 1000);
        expect(res.status).toBe(503);
        expect(res.headers.get("retry-after")).not.toBeNull();
        const body = (await res.json()) as { error: { code: string; message: string } };
        expect(body.error.code).toBe("store_unavailable");
        expect(body.error.message).toContain("did not answer within 1s (--db-query-timeout)");
      };
      await refused("the summary (status)", () => admin("/api/v1/summary"));
      await refused("a catalog write", put);

      proxy.thaw();
      await until("writes to work again", async () => [200, 201].includes((await put()).status), { timeoutMs: 15_000, everyMs: 100 });
      expect((await admin("/api/v1/summary")).status).toBe(200);
    } finally {
      await server.stop();
      proxy.stop();
      await pg.sql("DELETE FROM models; DELETE FROM model_state");
    }
  }, 60_000);
});
