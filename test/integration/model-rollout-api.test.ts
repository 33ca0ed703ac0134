// A roll through the head node's own API and agent API, its clock in the test's hands: what the
// agents are told (a replica draining for a roll stays assigned until its requests are done, so
// its engine keeps running), what `models NAME` answers meanwhile, and POST /models/{name}/restart.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Assignment, HeartbeatResponse } from "../../src/protocol/heartbeat";
import type { ModelView, RestartResult } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

const G = "RTX-ROLL-24GB";
const NODES = ["roll-1", "roll-2", "roll-3"];
let s: TestServer;
const running = new Map<string, Set<string>>(NODES.map((n) => [n, new Set()]));

beforeAll(async () => {
  s = await testServer({ drain_timeout: "20s" });
});
afterAll(() => s?.stop());

/** Every node heartbeats, reporting what it was assigned as ready (an agent whose engines start at once); answers each node's assignments. */
async function agents(): Promise<Assignment[]> {
  const all: Assignment[] = [];
  for (const n of NODES) {
    const reports = [...running.get(n)!].map((id) => ({ id, state: "ready" as const, port: 0, error: null }));
    const res = (await (await s.agent({ ...heartbeat({ name: n, gpus: [G], models: ["rolled"] }), replicas: reports })).json()) as HeartbeatResponse;
    running.set(n, new Set(res.assignments.map((a) => a.id)));
    all.push(...res.assignments);
  }
  return all;
}
const model = async () => (await (await s.admin("/api/v1/models/rolled")).json()) as ModelView;
const put = (args: string[]) => s.admin("/api/v1/models/rolled", { method: "PUT", body: JSON.stringify({ replicas: { min: 2 }, profiles: [{ name: "p", engine: "vllm", gpu_class: G, gpus: 1, args }] }) });
async function settle(): Promise<Assignment[]> {
  let a: Assignment[] = [];
  for (let i = 0; i < 3; i++) {
    await s.tick();
    a = await agents();
  }
  return a;
}

describe("a roll as the agents and the API see it", () => {
  test("an old replica draining for a roll stays assigned while it drains, and is let go once nothing is in flight; models NAME says so meanwhile", async () => {
    await agents();
    expect((await put(["--a"])).status).toBe(201);
    const first = await settle();
    expect((await model()).ready).toBe(2);
    const old = first.map((a) => a.id).sort();
    expect(old.length).toBe(2);

    expect((await put(["--b"])).status).toBe(200);
    await s.tick(); // the surge replica placed
    await agents(); // the agent learns of it
    await agents(); // ...and reports it ready
    await s.tick(); // one old replica drains
    const assigned = await agents();
    const view = await model();
    const draining = view.rollout?.draining[0];
    expect(draining).toBeDefined();
    expect(old).toContain(draining!.id);
    expect(view.rollout?.text).toBe(`1 of 2 replaced, old replica ${draining!.id} draining (0 requests in flight, 20 s left)`);
    // Still assigned: the agent keeps its engine running while it drains.
    expect(assigned.map((a) => a.id)).toContain(draining!.id);
    expect(view.ready).toBe(2);
    // The router has nothing of it in flight: the next step lets it go, and its agent stops it.
    await s.tick();
    expect((await agents()).map((a) => a.id)).not.toContain(draining!.id);
    const events = (await (await s.admin("/api/v1/events?limit=100")).json()) as { kind: string; subject: string }[];
    expect(events.filter((e) => e.subject === `replica/${draining!.id}`).map((e) => e.kind)).toEqual(expect.arrayContaining(["replica.replaced", "replica.drained"]));
  });

  test("POST /models/{name}/restart marks what runs; an unknown model is a 404", async () => {
    await settle();
    const res = await s.admin("/api/v1/models/rolled/restart", { method: "POST" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as RestartResult;
    expect(body).toMatchObject({ name: "rolled" });
    expect(body.replicas).toBeGreaterThan(0);
    await s.tick();
    expect((await model()).rollout?.old).toBeGreaterThan(0);
    expect((await s.admin("/api/v1/models/nope/restart", { method: "POST" })).status).toBe(404);
  });
});
