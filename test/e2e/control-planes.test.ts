// Several control planes, end to end with the compiled binary: two `serve --ha` on one SQLite
// file (lease TTL 3 s, renewal 1 s), simulated agents heartbeating to the second, a model with two
// replicas streaming through BOTH routers. kill -9 of the leader: the standby leads within the
// TTL and a renewal, the streams through its router run to [DONE] untouched, the replicas keep
// their ids (none lost, none duplicated), the agents carry on. The killed one, restarted, rejoins
// as a standby under the new leader's epoch, and every control plane shows the same picture.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { EventView, NodeView, Summary } from "../../src/protocol/views";
import { ADMIN_TOKEN, CHAT, HaCluster, openStream, routes } from "../helpers/ha-cluster";
import { until } from "../helpers/until";

const TTL_MS = 3000;
const RENEW_MS = 1000;

let c: HaCluster;

beforeAll(async () => {
  c = new HaCluster(["--lease-ttl", `${TTL_MS}ms`, "--lease-renew", `${RENEW_MS}ms`]);
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
  const b = c.serve("cp-b");
  // The agents heartbeat to the control plane that survives (one --server URL each).
  c.startAgent("n1", b.adminUrl);
  c.startAgent("n2", b.adminUrl);
  await until("both agents registered", async () => (await c.api<NodeView[]>("cp-b", "/api/v1/nodes")).filter((n) => n.state === "ready").length === 2, 30_000);
}, 60_000);
afterAll(() => c?.cleanup(), 30_000);

describe("kill -9 of the leading control plane while streams run through both routers", () => {
  test("the standby leads within TTL + one renewal; its router's streams are untouched; same replicas, agents carry on", async () => {
    expect((await c.health("cp-a"))!.body).toMatchObject({ leading: true, epoch: 1, name: "cp-a" });
    expect((await c.health("cp-b"))!).toMatchObject({ status: 503, body: { leading: false, epoch: 1, name: "cp-b" } });
    // A catalog write on the standby: a store transaction; the leader places the replicas.
    const put = await fetch(`${c.serve("cp-b").adminUrl}/api/v1/models/chat`, {
      method: "PUT",
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify(CHAT),
    });
    expect(put.status).toBe(201);
    await until("two ready replicas", async () => (await c.replicas("cp-b")).filter((r) => r.state === "ready").length === 2, 30_000);
    await until("both routers route chat", async () => (await routes(c.serve("cp-a").routerUrl)) && (await routes(c.serve("cp-b").routerUrl)), 15_000);
    const before = (await c.replicas("cp-b")).map((r) => r.id).sort();
    const enginesBefore = c.engines().length;
    expect(enginesBefore).toBe(2);

    const onA = await Promise.all([1, 2, 3].map((i) => openStream(c.serve("cp-a").routerUrl, `a ${i}: tell me everything`)));
    const onB = await Promise.all([1, 2, 3].map((i) => openStream(c.serve("cp-b").routerUrl, `b ${i}: tell me everything`)));
    expect([...onA, ...onB].map((s) => s.status)).toEqual([200, 200, 200, 200, 200, 200]);

    const killedAt = Date.now();
    c.kill9("cp-a");
    const tookOver = await until("cp-b leads", async () => ((await c.health("cp-b"))?.status === 200 ? Date.now() : undefined), 15_000);
    const failoverMs = tookOver - killedAt;
    console.log(`failover (SQLite, TTL ${TTL_MS} ms, renewal ${RENEW_MS} ms): kill -9 to the standby leading in ${failoverMs} ms`);
    expect(failoverMs).toBeLessThan(TTL_MS + RENEW_MS + 500);
    expect((await c.health("cp-b"))!.body).toMatchObject({ leading: true, epoch: 2, name: "cp-b" });

    // The survivor's streams: every one to [DONE], no error in them.
    const ends = await Promise.all(onB.map((s) => s.end));
    expect(ends.map((e) => e.kind)).toEqual(["done", "done", "done"]);
    for (const e of ends) expect(e.text.includes('data: {"error"')).toBe(false);
    // The dead router's streams ended (its process is gone), none hangs.
    await Promise.all(onA.map((s) => s.end));

    // Some of the new leader's ticks later: the same replicas, all ready, one engine each.
    await Bun.sleep(2000);
    const after = await c.replicas("cp-b");
    expect(after.map((r) => r.id).sort()).toEqual(before);
    expect(after.every((r) => r.state === "ready")).toBe(true);
    expect(c.engines().length).toBe(enginesBefore);
    expect(await routes(c.serve("cp-b").routerUrl)).toBe(true);
    // The agents carry on: both nodes ready, their heartbeats answered with the new epoch.
    expect((await c.api<NodeView[]>("cp-b", "/api/v1/nodes")).map((n) => n.state)).toEqual(["ready", "ready"]);
    const events = (await c.api<EventView[]>("cp-b", "/api/v1/events?limit=1000")).filter((e) => e.kind.startsWith("control_plane."));
    expect(events.map((e) => `${e.kind} ${e.subject}`)).toEqual(["control_plane.leading control_plane/cp-a", "control_plane.leading control_plane/cp-b"]);
  }, 90_000);

  test("the killed control plane, restarted, rejoins as a standby under the new epoch; both show the same picture", async () => {
    await c.startServe("cp-a");
    await until("cp-a answers", async () => (await c.health("cp-a")) !== undefined);
    expect(await c.health("cp-a")).toMatchObject({ status: 503, body: { leading: false, epoch: 2, name: "cp-a" } });
    expect((await c.health("cp-b"))!.body).toMatchObject({ leading: true, epoch: 2 });
    const picture = async (name: string) => (await c.api<Summary>(name, "/api/v1/summary")).control_planes.members!.map((m) => [m.name, m.state, m.this ?? false, m.address]);
    const a = c.serve("cp-a");
    const b = c.serve("cp-b");
    await until("cp-a's picture", async () => JSON.stringify(await picture("cp-a")) === JSON.stringify([["cp-a", "standing by", true, a.adminUrl], ["cp-b", "leading", false, b.adminUrl]]), 5_000);
    // Each refreshes its picture with every renewal: cp-b sees the newcomer within one.
    await until("cp-b's picture", async () => JSON.stringify(await picture("cp-b")) === JSON.stringify([["cp-a", "standing by", false, a.adminUrl], ["cp-b", "leading", true, b.adminUrl]]), 3 * 1000);
    // Its router serves the store's endpoints, though it leads nothing.
    await until("cp-a's router routes chat", () => routes(a.routerUrl), 10_000);
    expect((await c.replicas("cp-a")).length).toBe(2);
  }, 60_000);
});
