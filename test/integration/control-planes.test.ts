// Two head nodes on one SQLite file (`serve --store FILE --ha`), in this process, each on its own
// manual clock: one leads by the lease, the other stands by. The standby decides and writes
// nothing, yet serves the admin and agent API from the store (catalog writes included), hands
// its agents the leader's assignments with the leader's epoch, and routes the store's endpoints.
// A clean stop of the leader hands the lease over at once, with a higher epoch.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import type { EndpointInfo } from "../../src/control/interfaces";
import type { HeartbeatResponse } from "../../src/protocol/heartbeat";
import type { Health, ReplicaView, Summary } from "../../src/protocol/views";
import { heartbeat, model } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";

const H = "H100-80GB";
let a: TestServer;
let b: TestServer;
let storePath: string;
/** What the standby published to its router, in order. */
const published: EndpointInfo[][] = [];

const health = async (s: TestServer, leader = false) => {
  const r = await fetch(`${s.adminUrl}/healthz${leader ? "?leader=1" : ""}`);
  return { status: r.status, body: (await r.json()) as Health };
};
const json = async <T>(r: Response | Promise<Response>): Promise<T> => (await (await r).json()) as T;

beforeAll(async () => {
  const dir = scratchDir("llmgw-ha-int-");
  storePath = join(dir, "llmgw.db");
  const common = { store: storePath, ha: true, lease_ttl: "60s", lease_renew: "1s", admin_token: "llmgw_admin_shared_token_for_both_heads", join_token: "llmgw_join_shared_token_for_both_heads" };
  a = await testServer({ ...common, name: "cp-a" });
  // The engine secret too is one for all control planes: engine keys must agree on every router.
  const bData = scratchDir("llmgw-ha-int-b-");
  copyFileSync(join(a.dataDir, "engine.secret"), join(bData, "engine.secret"));
  b = await testServer({ ...common, name: "cp-b", data_dir: bData });
  // The test sees each endpoint list b's router is handed.
  const router = b.parts.router!;
  const setEndpoints = router.setEndpoints.bind(router);
  router.setEndpoints = (e) => (published.push(e), setEndpoints(e));
});
afterAll(async () => {
  await b?.stop();
  await a?.stop();
});

describe("two control planes on one SQLite file", () => {
  test("the first leads (epoch 1), the second stands by; /healthz?leader=1 tells them apart", async () => {
    expect(a.parts.control.leadership.get()).toEqual({ leading: true, epoch: 1, name: "cp-a", holder: expect.stringMatching(/^cp-a@/) });
    expect(b.parts.control.leadership.get()).toEqual({ leading: false, epoch: 1, name: "cp-b", holder: expect.stringMatching(/^cp-b@/) });
    expect(await health(a, true)).toEqual({ status: 200, body: { status: "ok", version: expect.any(String), leading: true, epoch: 1, name: "cp-a" } });
    expect(await health(b, true)).toEqual({ status: 503, body: { status: "standing by", version: expect.any(String), leading: false, epoch: 1, name: "cp-b" } });
    expect((await health(b)).status).toBe(200);
  });

  test("a catalog write on the standby is a store transaction the leader reconciles; the standby places nothing", async () => {
    // A node heartbeats to the standby: it registers through it.
    const first = await b.agent(heartbeat({ name: "n1", fabrics: ["f"], gpus: [H, H], models: ["m"] }));
    expect(first.status).toBe(200);
    expect(((await first.json()) as HeartbeatResponse).epoch).toBe(1);
    expect((await b.admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify(model({ name: "m", replicas: { min: 1 } })) })).status).toBe(201);
    // The standby's ticks decide nothing, however often it ticks.
    for (let i = 0; i < 3; i++) await b.tick();
    expect(b.peek.counts().replicas).toBe(0);
    // The leader sees the write (its watch, or here its own reload) and places the replica.
    await until("the leader placed m", async () => {
      a.parts.image.invalidate();
      await a.tick();
      return a.peek.counts().replicas === 1;
    });
    const placed = await json<ReplicaView[]>(a.admin("/api/v1/replicas"));
    expect(placed.map((r) => [r.model, r.state])).toEqual([["m", "starting"]]);
    // The standby's admin reads come from the store: the same replica, once its watch saw the write.
    await until("the standby reads the leader's replica", async () => (await json<ReplicaView[]>(b.admin("/api/v1/replicas"))).map((r) => r.id).join() === placed[0]!.id);
  });

  test("the standby hands its agent the leader's assignment with the leader's epoch, and routes the replica once ready", async () => {
    await b.tick();
    const answer = await json<HeartbeatResponse>(b.agent(heartbeat({ name: "n1", fabrics: ["f"], gpus: [H, H], models: ["m"] })));
    expect(answer.epoch).toBe(1);
    expect(answer.assignments.map((x) => x.model)).toEqual(["m"]);
    const id = answer.assignments[0]!.id;
    const ready = await json<HeartbeatResponse>(
      b.agent({ ...heartbeat({ name: "n1", fabrics: ["f"], gpus: [H, H], models: ["m"] }), replicas: [{ id, state: "ready", port: answer.assignments[0]!.port, error: null }] }),
    );
    expect(ready.epoch).toBe(1);
    // The report's verdict is written by the standby (any control plane may), and its router serves it.
    expect((await json<ReplicaView[]>(b.admin("/api/v1/replicas"))).map((r) => [r.id, r.state])).toEqual([[id, "ready"]]);
    await b.tick();
    expect(published.at(-1)?.map((e) => [e.id, e.models[0]])).toEqual([[id, "m"]]);
    await until("the leader sees it ready", async () => {
      await a.tick();
      return (await json<ReplicaView[]>(a.admin("/api/v1/replicas")))[0]?.state === "ready";
    });
    // No second replica anywhere: the standby never placed, the leader placed once.
    expect(a.peek.counts().replicas).toBe(1);
  });

  test("the summary's control_planes: the same members from both, `this` for the one answering", async () => {
    await a.clock.run(1000);
    await b.clock.run(1000);
    const fromA = (await json<Summary>(a.admin("/api/v1/summary"))).control_planes;
    const fromB = (await json<Summary>(b.admin("/api/v1/summary"))).control_planes;
    expect(fromA.members!.map((m) => [m.name, m.state, m.this ?? false])).toEqual([
      ["cp-a", "leading", true],
      ["cp-b", "standing by", false],
    ]);
    expect(fromB.members!.map((m) => [m.name, m.state, m.this ?? false])).toEqual([
      ["cp-a", "leading", false],
      ["cp-b", "standing by", true],
    ]);
    expect(fromA.members![0]!.address).toBe(a.adminUrl);
  });

  test("the standby's long poll, like its heartbeat answer, hands out what the store holds now, not its last tick's set", async () => {
    // n2 registers through the standby, which projects its (empty) set then.
    const joined = await json<HeartbeatResponse>(b.agent(heartbeat({ name: "n2", fabrics: ["f"], gpus: ["L4-24GB"], models: ["m2"] })));
    expect(joined.assignments).toEqual([]);
    await b.tick();
    expect((await b.admin("/api/v1/models/m2", { method: "PUT", body: JSON.stringify(model({ name: "m2", replicas: { min: 1 }, profiles: [{ name: "l4", engine: "vllm", gpu_class: "L4-24GB", gpus: 1 }] })) })).status).toBe(201);
    const placed = await until("the leader placed m2 on n2", async () => {
      a.parts.image.invalidate();
      await a.tick();
      return (await json<ReplicaView[]>(a.admin("/api/v1/replicas"))).find((r) => r.model === "m2");
    });
    // The standby's reads see it (its watch of the store), but it has not ticked since: an agent
    // that fails over to it asks its long poll first (at once, wait_ms=0), and a set without the
    // leader's replica would stop its engine there.
    await until("the standby reads the leader's replica", async () => (await json<ReplicaView[]>(b.admin("/api/v1/replicas"))).some((r) => r.id === placed.id));
    const res = await fetch(`${b.adminUrl}/agent/v1/assignments?node=n2&generation=0&wait_ms=0`, { headers: { authorization: `Bearer ${b.credentials.get("n2")}` } });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as HeartbeatResponse;
    expect(answer.epoch).toBe(1);
    expect(answer.assignments.map((x) => x.id)).toEqual([placed.id]);
  });

  test("a clean stop of the leader: the standby leads on its next renewal, epoch 2, and the replica stays the same", async () => {
    const before = (await json<ReplicaView[]>(b.admin("/api/v1/replicas"))).map((r) => r.id);
    await a.stop();
    await b.clock.run(1000);
    expect(b.parts.control.leadership.get()).toEqual({ leading: true, epoch: 2, name: "cp-b", holder: expect.stringMatching(/^cp-b@/) });
    expect(await health(b, true)).toEqual({ status: 200, body: expect.objectContaining({ leading: true, epoch: 2 }) });
    await b.tick();
    expect((await json<ReplicaView[]>(b.admin("/api/v1/replicas"))).map((r) => r.id)).toEqual(before);
    const answer = await json<HeartbeatResponse>(b.agent(heartbeat({ name: "n1", fabrics: ["f"], gpus: [H, H], models: ["m"] })));
    expect(answer.epoch).toBe(2);
    const kinds = (await json<{ kind: string; subject: string }[]>(b.admin("/api/v1/events?limit=100"))).filter((e) => e.kind.startsWith("control_plane.")).map((e) => `${e.kind} ${e.subject}`);
    expect(kinds).toEqual(["control_plane.leading control_plane/cp-a", "control_plane.stepped_down control_plane/cp-a", "control_plane.leading control_plane/cp-b"]);
  });
});

describe("the floating address", () => {
  test("floating_up: whether <floating>:<this admin port>/healthz?leader=1 answers as a leader, probed with each renewal", async () => {
    const dir = scratchDir("llmgw-ha-float-");
    // Control planes on one store share one admin token (the store keeps only its digest).
    const common = { store: join(dir, "llmgw.db"), ha: true, lease_renew: "1s", admin_token: "llmgw_admin_floating_test_token_0123" };
    // The floating address on this machine: its own admin listener answers there as the leader.
    const up = await testServer({ ...common, name: "f-up", floating_address: "127.0.0.1" });
    // Nothing listens on 127.0.0.2 (the admin listener is on 127.0.0.1 only): down.
    const down = await testServer({ ...common, name: "f-down", floating_address: "127.0.0.2" });
    try {
      const cp = async (s: TestServer) => (await json<Summary>(s.admin("/api/v1/summary"))).control_planes;
      await until("the probe answered", async () => {
        await up.clock.run(1000);
        return (await cp(up)).floating_up === true;
      });
      expect(await cp(up)).toMatchObject({ floating: "127.0.0.1", floating_up: true });
      for (let i = 0; i < 3; i++) await down.clock.run(1000);
      expect(await cp(down)).toMatchObject({ floating: "127.0.0.2", floating_up: false });
    } finally {
      await down.stop();
      await up.stop();
    }
  });
});
