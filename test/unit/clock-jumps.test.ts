// The control loop under wall-clock jumps: NTP steps, a VM resumed after a pause, an operator
// setting the date. The controller reads an injected clock, and every timeout it keeps (node
// timeout, replace-after, start timeout, backoff, idleness) compares two of its readings; when
// the clock jumps, those differences stop meaning "time that passed". The rule pinned here: a
// jump alone — forward by hours or days, backward, or back and forth — never loses, fails,
// evicts or parks anything, and never counts a failure. Only what is observed after it does.
//
// What "observed" means, and why the cases below are not contradictory with the reconciler
// tests that advance the same manual clock to make time pass: those tests keep the control plane
// watching while time passes — a tick or a heartbeat every 10 s, or a single step of at most a
// minute — as a running server does (it ticks every reconcile interval). A jump is a step of
// hours or days with nothing observed in between, which a running server never sees from time
// that really passed: it would have ticked thousands of times. So the cases here only ever step
// the clock by ≥ 3 h at once, and prove the timeouts still work after a jump by stepping in
// 10 s increments with heartbeats and ticks, as the reconciler tests do.
//
// Last, the other place the controller reads its clock: assignment generation numbers start from
// the boot time in seconds, so a restart a second or two later reuses numbers the agents hold.
//
// Same style as reconciler.test.ts: a real in-memory store, the controller, a manual clock and
// heartbeats as agents send them.

import { beforeEach, describe, expect, test } from "bun:test";
import pino from "pino";
import type { EndpointInfo } from "../../src/control/interfaces";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatResponse, ReplicaReport } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const RECONCILE = { backoffMs: 2_000, backoffMaxMs: 60_000, maxFailures: 3, replaceAfterMs: 30_000, reportGraceMs: 5_000, startTimeoutMs: 120_000 };

let store: Store;
let clock: ManualScheduler;
let ctl: TestControl;
let published: EndpointInfo[][];
/** What each simulated agent says about the replicas it was assigned: absent means "starting". */
let agentSays: Map<string, ReplicaReport["state"]>;

function newController() {
  ctl = testControl({ store, scheduler: clock, log: pino({ level: "silent" }), nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000, reconcile: RECONCILE });
  published = ctl.router.published;
}

function setup() {
  store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  clock = new ManualScheduler(T0);
  agentSays = new Map();
  newController();
}

const nodesDef: NodeDef[] = [
  { name: "a", fabrics: ["f1"], gpus: [H, H] },
  { name: "b", fabrics: ["f1"], gpus: [H, H] },
];

/** One agent heartbeat: it reports every replica it is assigned, as agentSays has it. */
async function beat(def: NodeDef): Promise<HeartbeatResponse> {
  const assigned = ctl.projector.response(def.name).assignments;
  const replicas: ReplicaReport[] = assigned.map((a) => ({ id: a.id, state: agentSays.get(a.id) ?? "starting", port: a.port, error: null }));
  return await ctl.intake.heartbeat({ ...heartbeat(def), replicas });
}
const beatAll = async (defs: NodeDef[] = nodesDef) => {
  for (const d of defs) await beat(d);
};
const reps = async () => await ctl.views.replicas();
const byModel = async (m: string) => (await reps()).filter((r) => r.model === m);
const events = async (...kinds: string[]) => (await ctl.events.events({ limit: 10_000 })).filter((e) => kinds.includes(e.kind));
/** The events no jump may cause. */
const BAD = ["replica.failed", "replica.lost", "model.parked", "replica.evicted"];

/** Every assigned replica comes up: the agents report them ready from now on. */
async function allReady() {
  for (const d of nodesDef) for (const a of ctl.projector.response(d.name).assignments) agentSays.set(a.id, "ready");
  await beatAll();
}

/** A steady fleet: model m with two ready replicas, one per node. Returns their ids. */
async function steady(): Promise<string[]> {
  await beatAll();
  await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 }, placement: "spread" })]);
  await ctl.loop.tick();
  await allReady();
  await ctl.loop.tick();
  const ids = (await byModel("m")).map((r) => r.id).sort();
  expect(ids.length).toBe(2);
  expect((await byModel("m")).every((r) => r.state === "ready")).toBe(true);
  return ids;
}

/** A running server between jumps: a heartbeat interval passes, agents report, the loop ticks. */
async function normalSecond() {
  clock.advance(1_000);
  await beatAll();
  await ctl.loop.tick();
}

async function expectUndisturbed(ids: string[]) {
  expect((await ctl.views.nodes()).map((n) => [n.name, n.state])).toEqual([["a", "ready"], ["b", "ready"]]);
  const now = await byModel("m");
  expect(now.map((r) => r.id).sort()).toEqual(ids);
  expect(now.every((r) => r.state === "ready")).toBe(true);
  expect((await ctl.views.models())[0]).toMatchObject({ name: "m", ready: 2, failures: 0, parked: false });
  expect(await events(...BAD)).toEqual([]);
  expect(published.at(-1)!.map((e) => e.id).sort()).toEqual(ids);
  // The agents are still told to run exactly these.
  expect(nodesDef.flatMap((d) => ctl.projector.response(d.name).assignments.map((a) => a.id)).sort()).toEqual(ids);
}

beforeEach(() => setup());

describe("a forward jump with every node heartbeating before and after it", () => {
  for (const [label, jump] of [["3 hours", 3 * HOUR], ["1 day", DAY], ["30 days", 30 * DAY]] as const) {
    test(`${label} forward, then heartbeats and a tick: nodes ready, the same replicas stay, nothing failed, lost, evicted or parked`, async () => {
      const ids = await steady();
      clock.advance(jump);
      await beatAll();
      await ctl.loop.tick();
      await expectUndisturbed(ids);
      // And the loop keeps running normally afterwards.
      for (let i = 0; i < 30; i++) await normalSecond();
      await expectUndisturbed(ids);
    });
  }
});

describe("a backward jump", () => {
  test("1 day back (heartbeats, ticks), then 1 day forward again as the clock is corrected: nothing is disturbed", async () => {
    const ids = await steady();
    clock.set(clock.now() - DAY);
    await beatAll();
    await ctl.loop.tick();
    await expectUndisturbed(ids);
    for (let i = 0; i < 10; i++) await normalSecond();
    await expectUndisturbed(ids);
    // NTP corrects it: back to the real time.
    clock.advance(DAY);
    await beatAll();
    await ctl.loop.tick();
    await expectUndisturbed(ids);
    for (let i = 0; i < 10; i++) await normalSecond();
    await expectUndisturbed(ids);
  });

  test("a tick right after a backward jump, before any heartbeat, disturbs nothing", async () => {
    const ids = await steady();
    clock.set(clock.now() - DAY);
    await ctl.loop.tick();
    await expectUndisturbed(ids);
    await beatAll();
    await ctl.loop.tick();
    await expectUndisturbed(ids);
  });

  // A backward step must not blind the failure detector for as long as the step: a node that
  // dies at the moment of the jump has its last heartbeat "in the future", and comparing it with
  // the clock would call it alive for a whole day. It must be found unreachable after the node
  // timeout, and its replica replaced after replace-after, of time the server actually watched.
  test("a node that dies when the clock steps back a day is still found unreachable and replaced in time", async () => {
    const ids = await steady();
    const onA = (await byModel("m")).find((r) => r.shards[0]!.node === "a")!.id;
    clock.set(clock.now() - DAY);
    const b = nodesDef[1]!;
    // b keeps heartbeating every 10 s; a is silent from the jump on. 15 s timeout + 30 s replace-after.
    for (let t = 0; t < 60_000; t += 10_000) {
      clock.advance(10_000);
      await beat(b);
      await ctl.loop.tick();
    }
    expect((await ctl.views.node("a")).state).toBe("unreachable");
    expect((await reps()).some((r) => r.id === onA)).toBe(false);
    // b starts the replacement (a stays silent).
    for (const x of ctl.projector.response("b").assignments) agentSays.set(x.id, "ready");
    await beat(b);
    await ctl.loop.tick();
    const now = (await byModel("m")).filter((r) => r.state === "ready");
    expect(now.length).toBe(2);
    expect(now.every((r) => r.shards[0]!.node === "b")).toBe(true);
    expect(now.map((r) => r.id)).toContain(ids.find((id) => id !== onA)!);
    // Lost with its node: not the model's fault.
    expect((await ctl.views.models())[0]!.failures).toBe(0);
  });
});

describe("a tick that comes before the heartbeats", () => {
  // What a running server actually sees after a forward jump: it ticks every second and agents
  // heartbeat every few, so the first tick after the jump comes before any heartbeat. Compared
  // with the jumped clock, every node has been silent for a day — past node-timeout and
  // replace-after. But the server watched the whole time and saw no silence: its previous look
  // was a second ago. Declaring every replica lost would tell every agent to stop every engine,
  // a whole-fleet outage caused by a clock. Right: nothing is lost or failed; the heartbeats
  // that follow find everything ready.
  test("1 day forward, a tick before any heartbeat: no replica is lost, failed or unassigned", async () => {
    const ids = await steady();
    clock.advance(DAY);
    await ctl.loop.tick();
    expect(await events(...BAD)).toEqual([]);
    expect((await byModel("m")).map((r) => r.id).sort()).toEqual(ids);
    expect((await byModel("m")).every((r) => r.state === "ready")).toBe(true);
    expect(nodesDef.flatMap((d) => ctl.projector.response(d.name).assignments.map((a) => a.id)).sort()).toEqual(ids);
    await beatAll();
    await ctl.loop.tick();
    await expectUndisturbed(ids);
  });

  // The same question from the other side: the server itself was away (stopped for an upgrade,
  // the head node rebooted) for an hour while the agents kept their engines serving. A new
  // controller over the same database ticks before the agents' next heartbeats. Its last look
  // at the nodes was an hour ago, not their last heartbeat: not having watched is not silence.
  test("a server back after an hour away does not declare its nodes' replicas lost before they can heartbeat", async () => {
    const ids = await steady();
    clock.advance(HOUR);
    newController();
    await ctl.loop.tick();
    expect(await events(...BAD)).toEqual([]);
    expect((await byModel("m")).map((r) => r.id).sort()).toEqual(ids);
    expect(nodesDef.flatMap((d) => ctl.projector.response(d.name).assignments.map((a) => a.id)).sort()).toEqual(ids);
    clock.advance(500);
    await beatAll();
    await ctl.loop.tick();
    await expectUndisturbed(ids);
    // But a node that really stays silent after the restart is lost after the usual time.
    const onA = (await byModel("m")).find((r) => r.shards[0]!.node === "a")!.id;
    for (let t = 0; t < 60_000; t += 10_000) {
      clock.advance(10_000);
      await beat(nodesDef[1]!);
      await ctl.loop.tick();
    }
    expect((await reps()).some((r) => r.id === onA)).toBe(false);
  });
});

describe("a replica starting across a jump", () => {
  // The start timeout (120 s here) catches an engine that never becomes ready. The agent has its
  // own, timed by the agent's monotonic timers, and reports "failed" when it fires; the server's
  // is the backstop. When the server's clock jumps a day while the agent keeps reporting the
  // replica as starting, the replica has not been starting for a day: the agent, who watches
  // it, says it is still loading, and no time has passed on its timers. Failing it would count
  // a failure against the model (parking it after a few jumps) and throw away a load that may
  // take minutes on real GPUs. Right: not failed by the jump; still failed once it has been
  // starting for the start timeout of time the server watched (heartbeats every 10 s).
  test("a day forward while the agent reports it starting: not failed by the jump; the start timeout still works after it", async () => {
    await beatAll();
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const id = (await byModel("m"))[0]!.id;
    clock.advance(30_000);
    await beatAll(); // starting, 30 s after placement
    await ctl.loop.tick();
    clock.advance(DAY);
    await beatAll(); // still starting
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === id)!.state).toBe("starting");
    expect(await events(...BAD)).toEqual([]);
    expect((await ctl.views.models())[0]!.failures).toBe(0);
    // It comes up a little later: ready, nothing counted.
    clock.advance(10_000);
    agentSays.set(id, "ready");
    await beatAll();
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === id)!.state).toBe("ready");
    expect(await events(...BAD)).toEqual([]);
  });

  test("a day forward, and it then stays starting for longer than the start timeout: it fails then, once", async () => {
    await beatAll();
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const id = (await byModel("m"))[0]!.id;
    clock.advance(DAY);
    await beatAll();
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === id)!.state).toBe("starting");
    for (let t = 0; t < 190_000; t += 10_000) {
      clock.advance(10_000);
      await beatAll();
      await ctl.loop.tick();
    }
    expect((await reps()).find((r) => r.id === id)!.state).not.toBe("starting");
    const failed = (await events("replica.failed")).filter((e) => e.subject === `replica/${id}`);
    expect(failed.length).toBe(1);
    // The start timeout (120s) plus the margin the agent's own deadline gets (2 × 1s heartbeat + 1 min).
    expect(failed[0]!.message).toContain("not ready 182s after it was placed");
  });

  // Placed while the clock was a day behind, then the clock is corrected: its placement time is
  // a day "old" at once. Same reasoning: the correction is not a day of starting.
  test("placed while the clock was a day behind, still starting when it is corrected: not failed", async () => {
    await beatAll();
    clock.set(clock.now() - DAY);
    await beatAll();
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const id = (await byModel("m"))[0]!.id;
    clock.advance(20_000);
    await beatAll();
    await ctl.loop.tick();
    clock.advance(DAY);
    await beatAll();
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === id)!.state).toBe("starting");
    expect(await events(...BAD)).toEqual([]);
    agentSays.set(id, "ready");
    clock.advance(1_000);
    await beatAll();
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === id)!.state).toBe("ready");
    expect((await ctl.views.models())[0]!.failures).toBe(0);
  });
});

describe("backoff and parking across jumps", () => {
  test("a model failing while the clock jumps back and forth is parked only after max_failures real failures, never by the jumps", async () => {
    await beatAll();
    await ctl.catalog.putModels([model({ name: "m" })]);
    const failOnce = async () => {
      await ctl.loop.tick();
      const starting = (await byModel("m")).filter((r) => r.state === "starting");
      expect(starting.length).toBe(1);
      agentSays.set(starting[0]!.id, "failed");
      await beatAll();
    };
    await failOnce();
    expect((await ctl.views.models())[0]!.failures).toBe(1);
    clock.advance(DAY); // past any backoff: retried
    await beatAll();
    await failOnce();
    expect((await ctl.views.models())[0]).toMatchObject({ failures: 2, parked: false });
    clock.set(clock.now() - 2 * DAY); // backwards: a backoff is not extended by it (reconciler.test.ts), and nothing is counted
    await beatAll();
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]).toMatchObject({ failures: 2, parked: false });
    expect(await events("model.parked")).toEqual([]);
    expect((await events("replica.failed")).length).toBe(2);
  });
});

describe("idleness across a jump", () => {
  // The router stamps last use with the same clock. A replica used a minute before the clock
  // jumps a day forward was used a minute ago, not a day ago: making room for an on-demand model
  // must not evict it as "idle for a day". (Evicted it would be, on the first request for the
  // on-demand model after the jump.) Its idleness across the jump is at best unknown, and
  // unknown is never idle.
  test("a replica used just before a day's jump forward is not evicted as idle to make room", async () => {
    const one: NodeDef = { name: "solo", gpus: [H, H] };
    await ctl.intake.heartbeat(heartbeat(one));
    await ctl.catalog.putModels([
      model({ name: "a", replicas: { min: 1, max: 2 }, idle_timeout: "30m", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: 1 }] }),
      model({ name: "b", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: 1 }] }),
    ]);
    await store.updateModelState("a", { scaleTarget: 2 });
    await ctl.loop.tick();
    const ids = (await byModel("a")).map((r) => r.id);
    expect(ids.length).toBe(2);
    const report = async () => await ctl.intake.heartbeat({ ...heartbeat(one), replicas: ctl.projector.response("solo").assignments.map((x) => ({ id: x.id, state: "ready" as const, port: x.port, error: null })) });
    await report();
    const usedAt = clock.now() - 60_000;
    ctl.router.reports({ lastUsed: () => new Map(ids.map((id) => [id, usedAt])), inflightByModel: () => new Map() });
    await ctl.loop.tick();
    clock.advance(DAY);
    await report();
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    expect(await events("replica.evicted")).toEqual([]);
    expect((await byModel("a")).filter((r) => r.state === "ready").map((r) => r.id).sort()).toEqual([...ids].sort());
  });
});

describe("assignment generations across a restart", () => {
  // An agent applies a heartbeat's assignment set only when its generation number differs from
  // the one it holds: the same number must mean the same set. A restarted server numbers its sets
  // from its boot time in seconds; the old one counted up from its own boot time, one per change.
  // An agent that holds a number the old server gave out (and missed the old server's last
  // change, cut off by its death) must never hear that same number from the new server for a
  // different set — or it keeps the old set and never starts what was placed.
  for (const delay of [0, 500, 1_000, 1_500, 2_000, 3_000, 5_000]) {
    test(`restarted ${delay} ms later: the new server's number for a node's set is never one the agent holds for another set`, async () => {
      const solo: NodeDef = { name: "a", fabrics: ["f1"], gpus: [H, H] };
      await beat(solo);
      await ctl.loop.tick();
      await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1 } })]);
      await ctl.loop.tick();
      // The agent takes this set…
      const held = await beat(solo);
      expect(held.assignments.length).toBe(1);
      // …and the next change never reaches it: the server dies right after placing it.
      await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
      await ctl.loop.tick();
      expect(ctl.projector.response("a").assignments.length).toBe(2);
      clock.advance(delay);
      newController();
      await ctl.loop.tick();
      const answer = await beat(solo);
      const ids = (r: HeartbeatResponse) => r.assignments.map((a) => a.id).sort();
      expect(ids(answer).length).toBe(2);
      // The same number must mean the same set: here the sets differ, so the numbers must too.
      expect(ids(answer)).not.toEqual(ids(held));
      expect(answer.generation).not.toBe(held.generation);
    });
  }
});
