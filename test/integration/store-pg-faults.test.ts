// Losing PostgreSQL is an ordinary event for the store: while the server is down (killed with
// SIGKILL, or shut down cleanly) every call rejects with StoreUnavailableError naming host:port
// and never the URL's password; once it is back on the same port, the same store works again
// without being reopened, and watch() hears other instances again.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { StoreUnavailableError } from "../../src/control/errors";
import type { StoreChange } from "../../src/control/types";
import { openStore } from "../../src/store/open";
import { PgStore } from "../../src/store/pg";
import { heartbeat } from "../helpers/fleet";
import { type Postgres, startPostgres } from "../helpers/postgres";
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
