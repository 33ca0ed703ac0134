// `serve` on a real PostgreSQL whose backends are terminated while the control plane's writes are
// inside their transactions, as a Patroni failover or `pg_ctl stop -m fast` terminates them, end
// to end with the compiled binary. postgres-js answered each such close with a ROLLBACK written to
// the closed socket: an uncaught TypeError on serve's stderr each time, and serve (which Bun keeps
// alive past it while its top-level await is pending) then ended a clean stop with exit code 1.
// Now serve keeps answering, `status` works afterwards, the stderr holds no TypeError, and a
// SIGTERM ends serve with 0.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import postgres from "postgres";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { type Postgres, startPostgres } from "../helpers/postgres";

let pg: Postgres;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterAll(async () => {
  await pg?.stop();
}, 30_000);

const ROUNDS = 3;

describe("serve on PostgreSQL, its backends terminated mid-transaction", () => {
  test(`${ROUNDS} times: serve keeps answering, status works, no uncaught TypeError, and a SIGTERM ends it with 0`, async () => {
    const { dir, bin } = scratchWithBinary();
    // Renewed every 300 ms: the lease's write is soon under way, waiting for the row the test holds.
    const serve = await startServe(bin, dir, ["--store", pg.url, "--lease-renew", "300ms", "--lease-ttl", "10s"]);
    try {
      await until("serve to lead", async () => (await fetch(`${serve.adminUrl}/healthz?leader=1`)).status === 200, 15_000);
      for (let round = 0; round < ROUNDS; round++) {
        // A session of the test's own, reserved and idle in its transaction, holds the lease row.
        const holder = postgres(pg.url, { max: 1, onnotice: () => {}, connection: { application_name: "lock-holder" } });
        const r = await holder.reserve();
        await r`BEGIN`;
        await r`SELECT 1 FROM leases WHERE name = 'leader' FOR UPDATE`;
        await until("serve's lease renewal to wait for the row, inside its transaction", async () => Number((await pg.sql(`SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = 'llmgw' AND wait_event_type = 'Lock'`))[0]!.n) >= 1, { timeoutMs: 10_000, everyMs: 20 });
        const killed = await pg.sql(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'llmgw'`);
        expect(killed.length).toBeGreaterThanOrEqual(1);
        await r`COMMIT`;
        r.release();
        await holder.end({ timeout: 1 });
        expect((await fetch(`${serve.adminUrl}/healthz`)).status).toBe(200);
      }
      expect(serve.proc.exitCode).toBeNull();
      await until("status to answer", () => run(bin, ["status"], { cwd: dir }).code === 0, { timeoutMs: 15_000, everyMs: 200 });
      const uncaught = () => serve.stderr().match(/^.*TypeError.*$/gm) ?? [];
      expect(uncaught()).toEqual([]);
      serve.proc.kill("SIGTERM");
      expect(await serve.proc.exited).toBe(0);
      expect(uncaught()).toEqual([]);
    } finally {
      serve.proc.kill("SIGKILL");
    }
  }, 90_000);
});
