// Scale from zero with two control planes on one store: a request for an on-demand model
// reaches the router of the standby. The demand travels through the store (the standby's
// DemandSink writes the model's last request; the leader's watch wakes it), the leader places a
// replica, the standby hands the assignment to the agent that polls it, the agent reports the
// replica ready to the leader, and the standby's router, which holds the request, sees the
// endpoint through its own control plane's snapshot (watch, then publish) and serves it.

import { afterEach, describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { Router } from "../../src/router/router";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { T0, heartbeat, model } from "../helpers/fleet";
import { type Plane, type Planes, lead, startPlanes } from "../helpers/planes";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { until } from "../helpers/until";
// The engine's port, chosen by the control plane from a free block below the ephemeral range (see ports.ts).
import { freePort } from "../helpers/ports";

const H = "H100-80GB";
const cleanups: (() => unknown)[] = [];
let env: Planes | undefined;
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  env?.stop();
  env = undefined;
});

describe("scale from zero with two control planes", () => {
  test("a request held by the standby's router is served once the leader's replica is ready", async () => {
    const clock = new ManualScheduler(T0);
    // b's router, in process, on the shared clock; b's control plane publishes to it, reads its usage and hears its demand.
    let router: Router | undefined;
    env = await startPlanes({
      names: ["a", "b"],
      clock,
      control: { reconcile: { backoffMs: 2_000, backoffMaxMs: 60_000, maxFailures: 3, replaceAfterMs: 30_000, reportGraceMs: 60_000, startTimeoutMs: 120_000, basePort: freePort(16) } },
      routerOf: (name, demand) => (name === "b" ? (router = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, scheduler: clock, demand })) : undefined),
    });
    const [a, b] = env.planes as [Plane, Plane];
    await lead(a);
    // Both tick when woken (by the store's watch, by demand): the leader reconciles, the standby
    // only projects what the leader wrote, for its agent and its router.
    let ticks = 0;
    a.ctl.wakeups.listen(() => void a.ctl.loop.tick().then(() => ticks++));
    b.ctl.wakeups.listen(() => void b.ctl.loop.tick());
    const seen = { endpoints: b.published, catalogs: b.catalogs };
    const { url } = router!.start();
    cleanups.push(() => router!.stop());

    // The catalog is written through the leader; the standby's router learns it from the store.
    await a.ctl.catalog.putModels([model({ name: "od", on_demand: true, replicas: { min: 0 } })]);
    await until("b's router to know the on-demand model", () => seen.catalogs.at(-1)?.some((m) => m.name === "od" && m.on_demand));
    const node: HeartbeatRequest = { ...heartbeat({ name: "x1", gpus: [H] }), address: "127.0.0.1" };
    await b.ctl.intake.join(node);
    expect((await a.ctl.views.replicas()).length).toBe(0);

    const res = fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "od", messages: [{ role: "user", content: "hi" }] }) });
    // The agent polls b: the leader's placement reaches it through b's watch. The manual clock
    // moves a little each look, so the leader's coalesced wakes come due.
    const asg = await until("b to hand x1 the leader's assignment", () => {
      clock.advance(200);
      return b.ctl.projector.response("x1").assignments[0];
    });
    expect(asg.model).toBe("od");
    const replica = (await a.ctl.views.replicas())[0]!;
    expect(replica.id).toBe(asg.id);
    expect(ticks).toBeGreaterThan(0);
    // Nothing routes yet: the replica is starting.
    expect(seen.endpoints.flat().some((e) => e.id === asg.id)).toBe(false);

    const engine: FakeEngine = await startFakeEngine({ models: ["od"], port: asg.port, ttftMs: 1, tokenDelayMs: 1, tokens: 3 });
    cleanups.push(() => engine.stop());
    // The agent reports the replica ready to the leader (it fails over between servers).
    await a.ctl.intake.heartbeat({ ...node, replicas: [{ id: asg.id, state: "ready", port: asg.port, error: null }] });
    const answer = await res;
    expect(answer.status).toBe(200);
    expect(answer.headers.get("x-llmgw-replica")).toBe(asg.id);
    expect(((await answer.json()) as { object: string }).object).toBe("chat.completion");
    // The request's use reached b's router's map, stamped on the shared clock.
    expect(router!.lastUsed().has(asg.id)).toBe(true);
  });
});
