// Losing PostgreSQL is an ordinary event for the store: while the server is down (killed with
// SIGKILL, or shut down cleanly) every call rejects with StoreUnavailableError naming host:port
// and never the URL's password; once it is back on the same port, the same store works again
// without being reopened, and watch() hears other instances again. A server that goes silent
// instead (a partition mid-failover: a TCP proxy that stops forwarding) costs a call its
// deadline, no more, and a head node's admin API answers 503 within it. A connection closed while
// the store's writes are inside their transactions (backends terminated, a fast shutdown, the
// server's idle limit, a cut) fails those calls, or they are tried again, and the store's process
// lives on.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import postgres from "postgres";
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
import { PG_DEFAULTS, STORE_DEFAULTS } from "../helpers/control-settings";

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
      const a = await PgStore.open({ ...PG_DEFAULTS, url, retries: 2 });
      const b = await PgStore.open({ ...PG_DEFAULTS, url, retries: 2 });
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
    const a = await PgStore.open({ ...PG_DEFAULTS, url, retries: 1 });
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
    const err = await openStore({ ...STORE_DEFAULTS, target: dead, dataDir: "/nonexistent" }).then(
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
    const a = await PgStore.open({ ...PG_DEFAULTS, url: url.replace(`:${pg.port}/`, `:${proxy.port}/`), queryTimeoutMs: DEADLINE });
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

describe("a connection the server or the network closes mid-transaction", () => {
  // The store runs in a process of its own (test/helpers/pg-store-child.ts): the TypeError
  // postgres-js threw from a setImmediate when it wrote its ROLLBACK to the closed socket reached
  // no caller and ended the process. Each case holds the row locks the store's writes take (a
  // plan, a touch, a group of heartbeats: each a transaction) from a session of its own, so that
  // the three are under way, inside their transactions, when their connections are closed.
  const CHILD = join(import.meta.dir, "../helpers/pg-store-child.ts");

  class StoreChild {
    readonly proc: Bun.Subprocess<"pipe", "pipe", "pipe">;
    private readonly lines: string[] = [];
    private wake: (() => void) | undefined;
    private ended = false;
    constructor(storeUrl: string, deadlineMs: number, idleMs?: number) {
      const proc = Bun.spawn([process.execPath, CHILD, storeUrl, String(deadlineMs), ...(idleMs ? [String(idleMs)] : [])], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
      this.proc = proc;
      void (async () => {
        let buf = "";
        for await (const chunk of proc.stdout) {
          buf += new TextDecoder().decode(chunk);
          for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
            this.lines.push(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
          }
          this.wake?.();
        }
        this.ended = true;
        this.wake?.();
      })();
    }
    /** The next line the child writes, as JSON; rejects with its exit code and stderr if it exits first. */
    async next<T>(): Promise<T> {
      while (this.lines.length === 0) {
        if (this.ended) throw new Error(`the store's process exited with ${await this.proc.exited}: ${await new Response(this.proc.stderr).text()}`);
        await new Promise<void>((r) => (this.wake = r));
      }
      return JSON.parse(this.lines.shift()!) as T;
    }
    ask<T>(cmd: string): Promise<T> {
      this.proc.stdin.write(`${cmd}\n`);
      this.proc.stdin.flush();
      return this.next<T>();
    }
    async exit(): Promise<{ code: number; stderr: string }> {
      if (!this.ended) {
        this.proc.stdin.write("exit\n");
        this.proc.stdin.flush();
      }
      const code = await Promise.race([this.proc.exited, Bun.sleep(10_000).then(() => -1)]);
      if (code === -1) this.proc.kill("SIGKILL");
      return { code, stderr: await new Response(this.proc.stderr).text() };
    }
  }

  type Outcome = "ok" | { error: string; code?: string; driverCode?: string; message: string };

  /** A session of the test's own holding the rows the child's writes lock, until commit(). */
  async function holdLocks(): Promise<{ commit(): Promise<void>; drop(): Promise<void> }> {
    // Reserved and idle in its transaction: a session the server ends has no statement under way, so nothing is written to it afterwards.
    const c = postgres(pg.url, { max: 1, onnotice: () => {}, connection: { application_name: "lock-holder" } });
    const r = await c.reserve();
    await r`BEGIN`;
    await r`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`;
    await r`SELECT 1 FROM nodes WHERE name = 'n1' FOR UPDATE`;
    return {
      async commit() {
        await r`COMMIT`;
        r.release();
        await c.end({ timeout: 1 });
      },
      async drop() {
        await c.end({ timeout: 0 });
      },
    };
  }

  /** The child's three writes, waiting for the held locks inside their transactions. */
  async function busyWaiting(child: StoreChild): Promise<void> {
    expect(await child.ask<{ started: number }>("busy")).toEqual({ started: 3 });
    await until("the three writes to wait for the locks", async () => Number((await pg.sql(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'llmgw' AND wait_event_type = 'Lock'`))[0]!.n) === 3, { timeoutMs: 10_000, everyMs: 20 });
  }

  /** Each write either went through (tried again on a fresh connection) or failed as the store being unavailable; the store's process lives, and its next call works. */
  async function survived(child: StoreChild, outcomes: Outcome[], port: number): Promise<void> {
    expect(outcomes).toHaveLength(3);
    for (const o of outcomes) {
      if (o === "ok") continue;
      expect(o.error).toBe("StoreUnavailableError");
      expect(o.code).toBe("store_unavailable");
      expect(o.message).toContain(`127.0.0.1:${port}`);
    }
    // The plan may have been committed when its connection broke: never tried blindly again.
    expect(outcomes[0]).toMatchObject({ error: "StoreUnavailableError", driverCode: "CONNECTION_CLOSED" });
    await until("the store to answer again", async () => (await child.ask<{ outcome: Outcome }>("count")).outcome === "ok", { timeoutMs: 15_000, everyMs: 50 });
    expect(child.proc.exitCode).toBeNull();
    const { code, stderr } = await child.exit();
    expect(stderr).not.toContain("TypeError");
    expect(code).toBe(0);
  }

  test("pg_terminate_backend of the store's backends (what a failover or pg_ctl stop -m fast does to them): the calls fail or are tried again, the process lives on", async () => {
    const child = new StoreChild(url, 10_000);
    try {
      await child.next();
      const held = await holdLocks();
      await busyWaiting(child);
      const killed = await pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'llmgw'`);
      expect(killed.length).toBeGreaterThanOrEqual(3);
      await held.commit();
      await survived(child, (await child.ask<{ outcomes: Outcome[] }>("settle")).outcomes, pg.port);
    } finally {
      child.proc.kill("SIGKILL");
      await pg.sql("DELETE FROM nodes; DELETE FROM events");
    }
  }, 60_000);

  test("a fast shutdown of the server mid-transaction, and a restart: the same", async () => {
    const child = new StoreChild(url, 10_000);
    try {
      await child.next();
      const held = await holdLocks();
      await busyWaiting(child);
      await pg.halt();
      const settled = await child.ask<{ outcomes: Outcome[] }>("settle");
      await held.drop();
      await pg.start();
      await survived(child, settled.outcomes, pg.port);
    } finally {
      child.proc.kill("SIGKILL");
      await pg.start();
      await pg.sql("DELETE FROM nodes; DELETE FROM events");
    }
  }, 60_000);

  test("the way to the server cut mid-transaction (a proxy closing every connection): the same", async () => {
    const proxy = new TcpProxy({ host: pg.host, port: pg.port });
    proxy.start();
    const child = new StoreChild(url.replace(`:${pg.port}/`, `:${proxy.port}/`), 10_000);
    try {
      await child.next();
      const held = await holdLocks();
      await busyWaiting(child);
      proxy.stop();
      proxy.start();
      await held.commit();
      await survived(child, (await child.ask<{ outcomes: Outcome[] }>("settle")).outcomes, proxy.port);
    } finally {
      child.proc.kill("SIGKILL");
      proxy.stop();
      await pg.sql("DELETE FROM nodes; DELETE FROM events");
    }
  }, 60_000);

  test("idle_in_transaction_session_timeout ending the transactions of a store that stopped sending mid-way (its thread held): the same", async () => {
    const child = new StoreChild(url, 10_000, 200);
    try {
      await child.next();
      const held = await holdLocks();
      await busyWaiting(child);
      // Held before the locks are granted: the answers wait in the socket while the server, past
      // its idle limit, ends the three sessions; the store reads the answers and the closes together.
      expect(await child.ask("stall 1500")).toEqual({ stalling: 1500 });
      await held.commit();
      expect(await child.next()).toEqual({ stalled: 1500 });
      await survived(child, (await child.ask<{ outcomes: Outcome[] }>("settle")).outcomes, pg.port);
    } finally {
      child.proc.kill("SIGKILL");
      await pg.sql("DELETE FROM nodes; DELETE FROM events");
    }
  }, 60_000);

  test("idle_in_transaction_session_timeout ending transactions a partition left open (the server's idle limit below the store's deadline): the same", async () => {
    const proxy = new TcpProxy({ host: pg.host, port: pg.port });
    proxy.start();
    const child = new StoreChild(url.replace(`:${pg.port}/`, `:${proxy.port}/`), 3000, 200);
    try {
      await child.next();
      const held = await holdLocks();
      await busyWaiting(child);
      // The locks are granted and each write's statement answered, but no answer gets through and
      // no next statement comes: the server sees three transactions idle, and ends them.
      proxy.freeze();
      await held.commit();
      await until("the server to end the idle transactions", async () => Number((await pg.sql(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'llmgw'`))[0]!.n) === 0, { timeoutMs: 10_000, everyMs: 20 });
      proxy.thaw();
      await survived(child, (await child.ask<{ outcomes: Outcome[] }>("settle")).outcomes, proxy.port);
    } finally {
      child.proc.kill("SIGKILL");
      proxy.stop();
      await pg.sql("DELETE FROM nodes; DELETE FROM events");
    }
  }, 60_000);
});
