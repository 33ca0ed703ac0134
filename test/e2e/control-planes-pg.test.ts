// Several control planes on a real PostgreSQL (Debian's server, started by the test), end to end
// with the compiled binary; cp-b reaches the database through a TCP proxy the test controls.
// kill -9 of the leader (cp-a) while streams run through both routers: cp-b leads within the
// TTL and a renewal, its streams run to [DONE], the replicas keep their ids. cp-a, restarted,
// stands by. Then cp-b's database connection goes silent (the proxy forwards nothing): cp-b steps
// down before its lease could end, cp-a leads under a higher epoch, and what each answers its
// agents carries its epoch: the old one's is older. Healed, cp-b stands by under the new epoch,
// and the replicas are still the same.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { HeartbeatResponse } from "../../src/protocol/heartbeat";
import type { NodeView } from "../../src/protocol/views";
import { ADMIN_TOKEN, CHAT, HaCluster, openStream, routes } from "../helpers/ha-cluster";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { TcpProxy } from "../helpers/tcp-proxy";
import { until } from "../helpers/until";

const TTL_MS = 3000;
const RENEW_MS = 1000;

let pg: Postgres;
let proxy: TcpProxy;
let c: HaCluster;

beforeAll(async () => {
  pg = await startPostgres();
  proxy = new TcpProxy({ host: pg.host, port: pg.port });
  proxy.start();
  const direct = pg.url;
  const viaProxy = pg.url.replace(`:${pg.port}/`, `:${proxy.port}/`);
  c = new HaCluster(["--lease-ttl", `${TTL_MS}ms`, "--lease-renew", `${RENEW_MS}ms`], (name) => (name === "cp-b" ? viaProxy : direct));
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
  c.startAgent("n1", c.serve("cp-b").adminUrl);
  c.startAgent("n2", c.serve("cp-b").adminUrl);
  await until("both agents registered", async () => (await c.api<NodeView[]>("cp-b", "/api/v1/nodes")).filter((n) => n.state === "ready").length === 2, 30_000);
}, 90_000);
afterAll(async () => {
  await c?.cleanup();
  proxy?.stop();
  await pg?.stop();
}, 60_000);

/** The assignments a control plane hands node n1 now (the long poll answers at once for generation 0). */
async function assignmentsFrom(name: string): Promise<HeartbeatResponse | undefined> {
  const { credential } = JSON.parse(readFileSync(join(c.dir, "agent-n1", "node.credential"), "utf8")) as { credential: string };
  try {
    const r = await fetch(`${c.serve(name).adminUrl}/agent/v1/assignments?node=n1&generation=0&wait_ms=0`, { headers: { authorization: `Bearer ${credential}` }, signal: AbortSignal.timeout(2000) });
    return r.ok ? ((await r.json()) as HeartbeatResponse) : undefined;
  } catch {
    return undefined;
  }
}

describe("control planes on PostgreSQL", () => {
  let before: string[];

  test("kill -9 of the leader while streams run through both routers: the standby leads within TTL + one renewal, same replicas", async () => {
    const put = await fetch(`${c.serve("cp-b").adminUrl}/api/v1/models/chat`, { method: "PUT", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(CHAT) });
    expect(put.status).toBe(201);
    await until("two ready replicas", async () => (await c.replicas("cp-b")).filter((r) => r.state === "ready").length === 2, 30_000);
    await until("both routers route chat", async () => (await routes(c.serve("cp-a").routerUrl)) && (await routes(c.serve("cp-b").routerUrl)), 15_000);
    before = (await c.replicas("cp-b")).map((r) => r.id).sort();
    expect(c.engines().length).toBe(2);
    const onA = await Promise.all([1, 2].map((i) => openStream(c.serve("cp-a").routerUrl, `a ${i}: tell me everything`)));
    const onB = await Promise.all([1, 2].map((i) => openStream(c.serve("cp-b").routerUrl, `b ${i}: tell me everything`)));
    const killedAt = Date.now();
    c.kill9("cp-a");
    const tookOver = await until("cp-b leads", async () => ((await c.health("cp-b"))?.status === 200 ? Date.now() : undefined), 15_000);
    console.log(`failover (PostgreSQL, TTL ${TTL_MS} ms, renewal ${RENEW_MS} ms): kill -9 to the standby leading in ${tookOver - killedAt} ms`);
    expect(tookOver - killedAt).toBeLessThan(TTL_MS + RENEW_MS + 500);
    expect((await c.health("cp-b"))!.body).toMatchObject({ leading: true, epoch: 2 });
    const ends = await Promise.all(onB.map((s) => s.end));
    expect(ends.map((e) => e.kind)).toEqual(["done", "done"]);
    await Promise.all(onA.map((s) => s.end));
    await Bun.sleep(2000);
    expect((await c.replicas("cp-b")).map((r) => r.id).sort()).toEqual(before);
    expect(c.engines().length).toBe(2);
  }, 90_000);

  test("restarted, the killed one stands by under the new epoch", async () => {
    await c.startServe("cp-a");
    await until("cp-a answers", async () => (await c.health("cp-a")) !== undefined);
    expect(await c.health("cp-a")).toMatchObject({ status: 503, body: { leading: false, epoch: 2, name: "cp-a" } });
    await until("cp-a hands n1 the leader's assignment", async () => (await assignmentsFrom("cp-a"))?.assignments.length === 1, 10_000);
    expect((await assignmentsFrom("cp-a"))!.epoch).toBe(2);
  }, 60_000);

  test("a partitioned leader steps down before its lease ends; the new leader's epoch wins; the old one writes nothing", async () => {
    expect((await assignmentsFrom("cp-b"))!.epoch).toBe(2);
    const frozenAt = Date.now();
    proxy.freeze();
    // When the lease it holds ends, by the database (read past the proxy): it must stand down before.
    const [row] = await pg.sql("SELECT holder, expires_at FROM leases WHERE name = 'leader'");
    expect(String(row!.holder)).toStartWith("cp-b@");
    const earliestLeaseEnd = Number(row!.expires_at);
    const downAt = await until("cp-b stands down", async () => ((await c.health("cp-b"))?.status === 503 ? Date.now() : undefined), 10_000);
    expect(downAt).toBeLessThan(earliestLeaseEnd);
    const aLeadsAt = await until("cp-a leads", async () => ((await c.health("cp-a"))?.status === 200 ? Date.now() : undefined), 10_000);
    console.log(`partition (PostgreSQL): the old leader stood down ${downAt - frozenAt} ms after its connection went silent (its lease, by the database, ended ${earliestLeaseEnd - frozenAt} ms after); the new leader led after ${aLeadsAt - frozenAt} ms`);
    expect(aLeadsAt).toBeGreaterThan(downAt);
    expect((await c.health("cp-a"))!.body).toMatchObject({ leading: true, epoch: 3 });
    // What each hands its agents carries its epoch: the partitioned one's is the older.
    expect((await assignmentsFrom("cp-a"))!.epoch).toBe(3);
    const stale = await assignmentsFrom("cp-b");
    if (stale) expect(stale.epoch).toBeLessThan(3);
    // The old leader's log: it stepped down before the new one led, and never led again.
    const bLog = c.serveLog("cp-b");
    const stepped = bLog.filter((l) => l.kind === "control_plane.stepped_down").map((l) => Date.parse(String(l.time)));
    expect(stepped.length).toBeGreaterThan(0);
    expect(stepped.at(-1)!).toBeLessThan(earliestLeaseEnd);

    proxy.thaw();
    await until("cp-b stands by under epoch 3", async () => (await c.health("cp-b"))?.body.epoch === 3, 15_000);
    expect((await c.health("cp-b"))!.status).toBe(503);
    expect(bLog.length).toBeGreaterThan(0);
    expect(c.serveLog("cp-b").filter((l) => l.kind === "control_plane.leading" && Date.parse(String(l.time)) > frozenAt)).toEqual([]);
    // Nothing undone or duplicated: the same replicas, one engine each.
    await Bun.sleep(1500);
    expect((await c.replicas("cp-a")).map((r) => r.id).sort()).toEqual(before);
    expect(c.engines().length).toBe(2);
  }, 60_000);
});
