// The version-skew contract through the compiled binary:
//   - on PostgreSQL, two `serve --ha`: a migration this release does not have appears in the
//     store (a later release migrated it): the leader steps down and neither leads, each saying
//     why (log, /healthz, status); a third started on that store stands by at once and migrates
//     nothing. Removed again, one leads.
//   - an agent speaking a protocol this control plane does not accept (3, or 0) is refused at
//     join with both numbers and what to upgrade, even when the rest of its heartbeat does not
//     fit this release's schema (an agent of protocol 1 is taken: test/e2e/upgrade.test.ts).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { ControlPlanes } from "../../src/protocol/views";
import { run } from "../helpers/binary";
import { ADMIN_TOKEN, HaCluster, JOIN_TOKEN } from "../helpers/ha-cluster";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { until } from "../helpers/until";

const FUTURE = 4_102_444_800_000; // 2100-01-01: a migration no release of today has

let pg: Postgres;
let c: HaCluster;

beforeAll(async () => {
  pg = await startPostgres();
  c = new HaCluster(["--lease-ttl", "2s", "--lease-renew", "500ms"], () => pg.url);
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
}, 90_000);
afterAll(async () => {
  await c?.cleanup();
  await pg?.stop();
}, 60_000);

const migrations = async () => Number((await pg.sql("SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations"))[0]!.n);

describe("a store whose schema is newer than this release", () => {
  test("no control plane leads it: the leader steps down, each says why in its log, /healthz and status; one started on it migrates nothing", async () => {
    const applied = await migrations();
    await pg.sql(`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES ('from-a-later-release', ${FUTURE})`);
    await until("cp-a steps down", async () => (await c.health("cp-a"))?.body.leading === false, 10_000);
    for (const name of ["cp-a", "cp-b"]) {
      const h = await until(`${name} says why it stands by`, async () => {
        const r = await c.health(name);
        return r?.body.barred !== undefined ? r : undefined;
      }, 10_000);
      expect(h.status).toBe(503);
      expect(h.body.barred).toContain("the store's schema is newer than this release knows");
      expect(h.body.barred).toContain("2100-01-01 00:00:00 UTC");
      expect(c.serveLog(name).some((l) => String(l.msg).startsWith(`control plane ${name} stands by and will not lead: the store's schema is newer`))).toBe(true);
    }
    // Past a lease's TTL and more: still nobody leads.
    await Bun.sleep(3000);
    expect((await c.health("cp-a"))?.body.leading).toBe(false);
    expect((await c.health("cp-b"))?.body.leading).toBe(false);

    const cp = (await c.api<{ control_planes: ControlPlanes }>("cp-b", "/api/v1/summary")).control_planes;
    expect(cp.members?.find((m) => m.this)?.barred).toContain("newer than this release knows");
    expect(cp.members?.every((m) => m.state !== "leading")).toBe(true);
    const text = run(c.bin, ["status", "--server", c.serve("cp-b").adminUrl, "--token", ADMIN_TOKEN], { cwd: c.dir }).stdout.replace(/\s+/g, " ");
    expect(text).toContain("control plane cp-b stands by and will not lead: the store's schema is newer than this release knows");

    // A third control plane started on it: it starts, stands by, and runs no migration.
    await c.startServe("cp-c");
    await until("cp-c answers", async () => (await c.health("cp-c"))?.body.barred !== undefined, 10_000);
    expect((await c.health("cp-c"))?.body.leading).toBe(false);
    expect(await migrations()).toBe(applied + 1);

    // The later release's migration gone again (as if it had never run): one leads.
    await pg.sql(`DELETE FROM drizzle.__drizzle_migrations WHERE created_at = ${FUTURE}`);
    await until("one control plane leads again", async () => {
      const hs = await Promise.all(["cp-a", "cp-b", "cp-c"].map((n) => c.health(n)));
      return hs.filter((h) => h?.body.leading).length === 1;
    }, 15_000);
  }, 60_000);
});

describe("an agent of a protocol this control plane does not accept", () => {
  const heartbeat = (body: object) =>
    fetch(`${c.serve("cp-a").adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${JOIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) });

  test("protocol 3 is refused at join naming both versions and to upgrade the control plane first; protocol 0 to upgrade the agent", async () => {
    const newer = await heartbeat({ node: "n-future", address: "127.0.0.1", agent_version: "9.0.0", protocol: 3 });
    expect(newer.status).toBe(403);
    const e3 = ((await newer.json()) as { error: { code: string; message: string } }).error;
    expect(e3.code).toBe("protocol_mismatch");
    expect(e3.message).toBe("protocol: this agent speaks protocol 3, this control plane speaks 2 (accepts 1–2): upgrade the control plane first (control planes before agents; see Upgrading in the README) (node n-future)");
    // A newer agent's heartbeat may not fit this release's schema at all: its protocol is still what it is told.
    const unfit = await heartbeat({ node: "n-future", address: "127.0.0.1", protocol: 3, gpus: { shape: "of a later release" } });
    expect(unfit.status).toBe(403);
    expect(((await unfit.json()) as { error: { message: string } }).error.message).toStartWith("protocol: this agent speaks protocol 3, this control plane speaks 2 (accepts 1–2): upgrade the control plane first");
    const older = await heartbeat({ node: "n-ancient", address: "127.0.0.1", protocol: 0 });
    expect(older.status).toBe(403);
    expect(((await older.json()) as { error: { message: string } }).error.message).toContain("this agent speaks protocol 0, this control plane speaks 2 (accepts 1–2): upgrade the agent");
    const nodes = await c.api<{ name: string }[]>("cp-a", "/api/v1/nodes");
    expect(nodes.map((n) => n.name)).not.toContain("n-future");
  });
});
