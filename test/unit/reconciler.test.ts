// The reconcile loop driven by hand: a real (in-memory) store, the controller, a manual clock
// and heartbeats as agents would send them. Each case pins one rule of #3: placement of what
// is short, ready/failed from reports, backoff, parking, start timeouts, lost nodes, drain
// without ever fewer ready, surplus order, catalog removal, placement reasons.

import { beforeEach, describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { CatalogEntry, EndpointInfo } from "../../src/control/interfaces";
import type { HeartbeatResponse, ReplicaReport } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";

const H = "H100-80GB";
let store: Store;
let clock: ManualScheduler;
let ctl: TestControl;
let published: EndpointInfo[][];

function setup(reconcile: Record<string, number> = {}) {
  store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  clock = new ManualScheduler(T0);
  ctl = testControl({
    store,
    scheduler: clock,
    nodeTimeoutMs: 15_000,
    heartbeatIntervalMs: 1_000,
    reconcile: { backoffMs: 2_000, backoffMaxMs: 60_000, maxFailures: 3, replaceAfterMs: 30_000, reportGraceMs: 5_000, startTimeoutMs: 120_000, ...reconcile },
  });
  published = ctl.router.published;
  catalogs = ctl.router.catalogs;
}
let catalogs: CatalogEntry[][];

const nodesDef: NodeDef[] = [
  { name: "a", fabrics: ["f1"], gpus: [H, H] },
  { name: "b", fabrics: ["f1"], gpus: [H, H] },
];

/** Heartbeat a node reporting the given replica states; returns the answer. */
async function beat(def: NodeDef, reports: ReplicaReport[] = []): Promise<HeartbeatResponse> {
  return await ctl.intake.heartbeat({ ...heartbeat(def), replicas: reports });
}
const reps = async () => await ctl.views.replicas();
const byModel = async (m: string) => (await reps()).filter((r) => r.model === m);
const ready = (ids: string[], port = 0): ReplicaReport[] => ids.map((id) => ({ id, state: "ready", port, error: null }));
const events = async (kind: string) => (await ctl.events.events({ limit: 1000 })).filter((e) => e.kind === kind);

/** Every node reports everything assigned to it as ready. */
async function allReady() {
  for (const d of nodesDef) {
    await beat(d, ready(ctl.projector.response(d.name).assignments.map((a) => a.id)));
  }
}

beforeEach(() => setup());

describe("placing what is short", () => {
  test("min 2 becomes two starting replicas with distinct ports, assigned to their nodes", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
    await ctl.loop.tick();
    const r = await byModel("m");
    expect(r.map((x) => x.state)).toEqual(["starting", "starting"]);
    expect(r.every((x) => x.shards[0]!.gpus.length === 1)).toBe(true);
    const a = (await beat(nodesDef[0]!)).assignments.concat((await beat(nodesDef[1]!)).assignments);
    expect(a.length).toBe(2);
    expect(a[0]!.served_names).toEqual(["m"]);
    expect(a[0]!.gpu_uuids[0]).toMatch(/^GPU-/);
    expect((await events("replica.placed")).length).toBe(2);
  });

  test("bin-packing: the second replica lands on the node already in use, keeping a whole node free", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
    await ctl.loop.tick();
    const nodes = new Set((await byModel("m")).map((r) => r.shards[0]!.node));
    expect(nodes.size).toBe(1);
    expect((await ctl.views.summary()).fabrics[0]!.largest_free_block).toBe(1);
  });

  test("spread puts replicas on different nodes", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 }, placement: "spread" })]);
    await ctl.loop.tick();
    expect(new Set((await byModel("m")).map((r) => r.shards[0]!.node)).size).toBe(2);
  });

  test("ready from the agent makes a replica ready and published; endpoints carry names and aliases", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", aliases: ["mm"] })]);
    await ctl.loop.tick();
    await allReady();
    await ctl.loop.tick();
    const r = (await byModel("m"))[0]!;
    expect(r.state).toBe("ready");
    const last = published.at(-1)!;
    expect(last).toEqual([{ id: r.id, url: r.endpoint!, models: ["m", "mm"], engine: "vllm", pool: "default", weight: 1, priority: 0, gpus: 1 }]);
    expect(last[0]!.url.endsWith("/")).toBe(false);
    const n = published.length;
    await ctl.loop.tick();
    expect(published.length).toBe(n); // unchanged list: not re-published
  });

  test("a model that cannot fit gets a reason, once, and loses it when it fits", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "big", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 4 }] })]);
    await ctl.loop.tick();
    await ctl.loop.tick();
    const m = (await ctl.views.models())[0]!;
    expect(m.unplaceable).toBe(true);
    expect(m.reason).toContain("4");
    expect((await events("model.unplaceable")).length).toBe(1);
    expect((await ctl.views.summary()).unplaceable).toEqual(["big"]);
    await beat({ name: "c", fabrics: ["f1"], gpus: [H, H, H, H] });
    await ctl.loop.tick();
    expect((await byModel("big")).length).toBe(1);
    expect((await ctl.views.models())[0]!.reason).toBeNull();
  });

  test("an on-demand model wants a replica only while asked for within its idle_timeout", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "od", on_demand: true, replicas: { min: 0 }, idle_timeout: "1m" })]);
    await ctl.loop.tick();
    expect((await byModel("od")).length).toBe(0);
    expect(await ctl.catalog.requestModel("od")).toBe(true);
    await ctl.loop.tick();
    expect((await byModel("od")).length).toBe(1);
    clock.advance(61_000);
    for (const d of nodesDef) await beat(d, ready((await byModel("od")).map((r) => r.id)));
    await ctl.loop.tick();
    expect((await byModel("od"))[0]!.state).toBe("draining");
  });
});

describe("failures, backoff and parking", () => {
  async function failAll(error = "exited with code 1: CUDA out of memory") {
    for (const d of nodesDef) {
      await beat(d, ctl.projector.response(d.name).assignments.map((a) => ({ id: a.id, state: "failed", port: a.port, error })));
    }
  }

  test("a failed start is recorded with the agent's reason and retried only after the backoff", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    await failAll();
    const r = await byModel("m");
    expect(r.map((x) => [x.state, x.error])).toEqual([["failed", "exited with code 1: CUDA out of memory"]]);
    expect((await ctl.views.models())[0]!.failures).toBe(1);
    await ctl.loop.tick(); // within 2 s: no retry
    expect((await byModel("m")).filter((x) => x.state === "starting").length).toBe(0);
    expect((await ctl.views.summary()).unplaceable).toEqual([]); // short but retrying, not stuck
    clock.advance(2_001);
    await ctl.loop.tick();
    expect((await byModel("m")).filter((x) => x.state === "starting").length).toBe(1);
  });

  test("after max_failures in a row the model is parked with its last error and not retried until unparked", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    for (let i = 0; i < 3; i++) {
      for (const d of nodesDef) await beat(d);
      await ctl.loop.tick();
      await failAll(`boom ${i}`);
      clock.advance(60_000);
    }
    for (const d of nodesDef) await beat(d);
    await ctl.loop.tick();
    const m = (await ctl.views.models())[0]!;
    // The last failure's cause, and the command that shows the rest of that run's log.
    expect(m).toMatchObject({ parked: true, failures: 3, reason: expect.stringMatching(/^boom 2 \(log: llmgw logs --previous r-[0-9a-f]+\)$/) });
    expect((await ctl.views.summary()).parked).toEqual([{ model: "m", failures: 3, reason: m.reason! }]);
    expect((await byModel("m")).filter((x) => x.state !== "failed").length).toBe(0);
    expect((await events("model.parked")).length).toBe(1);
    clock.advance(3_600_000);
    for (const d of nodesDef) await beat(d);
    await ctl.loop.tick();
    expect((await byModel("m")).filter((x) => x.state === "starting").length).toBe(0);
    expect((await ctl.catalog.unpark("m")).changed).toBe(true);
    await ctl.loop.tick();
    expect((await byModel("m")).filter((x) => x.state === "starting").length).toBe(1);
  });

  test("a catalog change unparks", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    for (let i = 0; i < 3; i++) {
      for (const d of nodesDef) await beat(d);
      await ctl.loop.tick();
      await failAll();
      clock.advance(60_000);
    }
    expect((await ctl.views.models())[0]!.parked).toBe(true);
    await ctl.catalog.putModels([model({ name: "m", weight: 2 })]);
    expect((await ctl.views.models())[0]!.parked).toBe(false);
    for (const d of nodesDef) await beat(d);
    await ctl.loop.tick();
    expect((await byModel("m")).some((x) => x.state === "starting")).toBe(true);
  });

  test("new hardware unparks", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    for (let i = 0; i < 3; i++) {
      for (const d of nodesDef) await beat(d);
      await ctl.loop.tick();
      await failAll();
      clock.advance(60_000);
    }
    for (const d of nodesDef) await beat(d);
    expect((await ctl.views.models())[0]!.parked).toBe(true);
    await beat({ name: "new", gpus: [H] });
    expect((await ctl.views.models())[0]!.parked).toBe(false);
    expect((await events("model.unparked"))[0]!.message).toContain("new node new");
  });

  test("success resets the failure count", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    await failAll();
    clock.advance(2_001);
    await ctl.loop.tick();
    await allReady();
    expect((await ctl.views.models())[0]!.failures).toBe(0);
  });

  test("a replica that crashes soon after becoming ready, again and again, is restarted after a growing backoff and its model parked with the crash's cause", async () => {
    const CRASH = "exited with code 1: RuntimeError: CUDA error: an illegal memory access was encountered";
    const starting = async () => (await byModel("m")).filter((x) => x.state === "starting").length;
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    for (let crash = 1; crash <= 3; crash++) {
      expect(await starting()).toBe(1);
      await allReady();
      clock.advance(30_000); // serving for half a minute, then it dies
      await failAll(CRASH);
      // Ready first: not a failed start, so nothing resets the count.
      expect((await ctl.views.models())[0]).toMatchObject({ failures: 0, crashes: crash });
      if (crash === 3) break;
      // Backoff 2 s, then 4 s: no start before it, one after.
      const wait = 2_000 * 2 ** (crash - 1);
      clock.advance(wait - 1);
      for (const d of nodesDef) await beat(d);
      await ctl.loop.tick();
      expect(await starting()).toBe(0);
      expect((await ctl.views.explain("m")).summary).toContain(`waits out its restart backoff after ${crash} crash`);
      clock.advance(1);
      await ctl.loop.tick();
    }
    const m = (await ctl.views.models())[0]!;
    expect(m).toMatchObject({ parked: true, crashes: 3 });
    expect(m.reason).toMatch(new RegExp(`^crashed within 10m of becoming ready, 3 times in a row; last: ${CRASH} \\(log: llmgw logs --previous r-[0-9a-f]+\\)$`));
    expect((await ctl.views.summary()).parked).toEqual([{ model: "m", failures: 3, reason: m.reason! }]);
    expect((await ctl.views.explain("m")).summary).toBe(`m is parked after 3 crashes: ${m.reason}`);
    expect((await events("model.parked")).map((e) => e.message)).toEqual([`model m parked after 3 crashes, each within 10m of becoming ready; not retried until unparked or changed. Last error: ${m.reason!.slice(m.reason!.indexOf(CRASH))}`]);
    expect((await events("replica.failed")).map((e) => e.message.slice(e.message.indexOf("; crash")))).toEqual([
      "; crash 1 of 3 before the model is parked; next start in 2s at the earliest",
      "; crash 2 of 3 before the model is parked; next start in 4s at the earliest",
      "; crash 3 in a row: the model is parked",
    ]);
    // Parked: not started again, however long we wait, until unparked.
    clock.advance(3_600_000);
    for (const d of nodesDef) await beat(d);
    await ctl.loop.tick();
    expect(await starting()).toBe(0);
    expect((await ctl.catalog.unpark("m")).changed).toBe(true);
    expect((await ctl.views.models())[0]).toMatchObject({ parked: false, failures: 0, crashes: 0 });
    await ctl.loop.tick();
    expect(await starting()).toBe(1);
  });

  test("a replica that stays ready for the crash window ends its model's crash loop", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    for (let crash = 1; crash <= 2; crash++) {
      await allReady();
      clock.advance(1_000);
      await failAll();
      clock.advance(60_000);
      for (const d of nodesDef) await beat(d);
      await ctl.loop.tick();
    }
    await allReady();
    expect((await ctl.views.models())[0]).toMatchObject({ crashes: 2, ready: 1 });
    // Watched all along (a gap would be a clock jump, and time not watched does not count).
    const serve = async (ms: number) => {
      for (let t = 0; t < ms; t += 10_000) {
        clock.advance(Math.min(10_000, ms - t));
        for (const d of nodesDef) await beat(d, ready(ctl.projector.response(d.name).assignments.map((a) => a.id)));
        await ctl.loop.tick();
      }
    };
    await serve(599_000);
    expect((await ctl.views.models())[0]!.crashes).toBe(2);
    await serve(1_000);
    expect((await ctl.views.models())[0]!.crashes).toBe(0);
    // The next crash is the first of a new loop, not the third of the old one.
    await failAll();
    expect((await ctl.views.models())[0]).toMatchObject({ crashes: 1, parked: false });
  });

  test("a replica not ready within the start timeout fails", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const id = (await byModel("m"))[0]!.id;
    // The agent keeps reporting it as starting.
    for (let t = 0; t < 171; t += 10) {
      clock.advance(10_000);
      for (const d of nodesDef) await beat(d, [{ id, state: "starting", port: 1, error: null }]);
    }
    await ctl.loop.tick();
    expect((await reps()).find((x) => x.id === id)!.state).toBe("starting");
    clock.advance(10_000);
    await ctl.loop.tick();
    const r = (await reps()).find((x) => x.id === id)!;
    expect(r.state).toBe("failed");
    // 120s start timeout + 2 heartbeat intervals (1s) + 1 min.
    expect(r.error).toContain("not ready 182s after it was placed");
  });

  test("the agent is given the profile's start_timeout, or the server's --start-timeout for a profile without one", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([
      model({ name: "slow", profiles: [{ name: "p", engine: "vllm", gpu_class: H, start_timeout: "45m" }] }),
      model({ name: "plain" }),
    ]);
    await ctl.loop.tick();
    const all = [];
    for (const d of nodesDef) all.push(...(await beat(d)).assignments);
    expect(Object.fromEntries(all.map((a) => [a.model, a.start_timeout_ms]))).toEqual({ slow: 45 * 60_000, plain: 120_000 });
  });

  test("the router is told how long each model's replicas may take to start: its longest profile, plus the margin", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([
      model({ name: "slow", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, start_timeout: "5m" }, { name: "q", engine: "vllm", gpu_class: H, start_timeout: "45m" }] }),
      model({ name: "plain" }),
    ]);
    await ctl.loop.tick();
    const last = catalogs.at(-1)!;
    expect(Object.fromEntries(last.map((c) => [c.name, c.start_timeout_ms]))).toEqual({ slow: 45 * 60_000 + 62_000, plain: 120_000 + 62_000 });
  });

  test("the server's start deadline is the profile's start_timeout plus a margin, so it always comes after the agent's", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([
      model({ name: "slow", profiles: [{ name: "p", engine: "vllm", gpu_class: H, start_timeout: "5m" }] }),
      model({ name: "quick", profiles: [{ name: "p", engine: "vllm", gpu_class: H, start_timeout: "30s" }] }),
    ]);
    await ctl.loop.tick();
    const id = async (m: string) => (await byModel(m))[0]!.id;
    const [slow, quick] = [await id("slow"), await id("quick")];
    const state = async (r: string) => (await reps()).find((x) => x.id === r)!.state;
    const placed = await reps();
    const leaders = new Map([slow, quick].map((r) => [r, placed.find((x) => x.id === r)!.shards[0]!.node]));
    const advance = async (ms: number) => {
      for (let left = ms; left > 0; ) {
        const step = Math.min(left, 5_000);
        clock.advance(step);
        left -= step;
        // The agents keep saying "starting".
        for (const d of nodesDef) await beat(d, [slow, quick].filter((r) => leaders.get(r) === d.name).map((r) => ({ id: r, state: "starting", port: 1, error: null })));
      }
      await ctl.loop.tick();
    };
    // Margin: 2 heartbeat intervals (1s each) + 1 min = 62s.
    await advance(30_000 + 61_000);
    expect(await state(quick)).toBe("starting");
    await advance(2_000);
    expect(await state(quick)).toBe("failed");
    expect((await reps()).find((x) => x.id === quick)!.error).toContain("not ready 92s after it was placed");
    expect(await state(slow)).toBe("starting");
    await advance(300_000 + 62_000 - 93_000 - 1_000);
    expect(await state(slow)).toBe("starting");
    await advance(2_000);
    expect(await state(slow)).toBe("failed");
  });

  test("a ready replica the agent no longer reports has failed; a crash report carries its reason", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 }, placement: "spread" })]);
    await ctl.loop.tick();
    await allReady();
    const [r1, r2] = await byModel("m");
    await beat(nodesDef.find((d) => d.name === r1!.shards[0]!.node)!, []);
    await beat(nodesDef.find((d) => d.name === r2!.shards[0]!.node)!, [{ id: r2!.id, state: "failed", port: 1, error: "Segmentation fault" }]);
    const after = await byModel("m");
    expect(after.find((x) => x.id === r1!.id)!.state).toBe("failed");
    expect(after.find((x) => x.id === r2!.id)!.error).toBe("Segmentation fault");
  });

  test("a clock that jumps backwards does not extend a backoff", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    await failAll();
    clock.advance(-3_600_000);
    await ctl.loop.tick();
    expect((await byModel("m")).some((x) => x.state === "starting")).toBe(true);
  });
});

describe("lost nodes", () => {
  test("replicas on a node unreachable past the grace period are replaced elsewhere, without counting a failure", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", placement: "spread", replicas: { min: 2 } })]);
    await ctl.loop.tick();
    await allReady();
    const onA = (await byModel("m")).find((r) => r.shards[0]!.node === "a")!;
    // b keeps heartbeating; a goes silent.
    const keepB = async () => await beat(nodesDef[1]!, ready(ctl.projector.response("b").assignments.map((x) => x.id)));
    for (let i = 0; i < 3; i++) {
      clock.advance(10_000);
      await keepB();
      await ctl.loop.tick();
    }
    // 30 s silent: unreachable (timeout 15 s), not yet replaced (grace 30 s more).
    expect((await ctl.views.node("a")).state).toBe("unreachable");
    expect((await reps()).some((r) => r.id === onA.id)).toBe(true);
    expect((await events("node.unreachable")).length).toBe(1);
    for (let i = 0; i < 2; i++) {
      clock.advance(10_000);
      await keepB();
      await ctl.loop.tick();
    }
    expect((await reps()).some((r) => r.id === onA.id)).toBe(false);
    const now = await byModel("m");
    expect(now.length).toBe(2);
    expect(now.every((r) => r.shards[0]!.node === "b")).toBe(true);
    expect((await ctl.views.models())[0]!.failures).toBe(0);
    expect((await events("replica.lost")).length).toBe(1);
    // When a returns, it is told to run nothing.
    expect((await beat(nodesDef[0]!, ready([onA.id]))).assignments).toEqual([]);
  });
});

describe("drain", () => {
  test("replacements start first; the old replica stops only when they are ready; then the node is drained", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1 } })]);
    await ctl.loop.tick();
    await allReady();
    const old = (await byModel("m"))[0]!;
    const node = old.shards[0]!.node;
    await ctl.nodes.setNodeAdminState(node, "draining");
    await ctl.loop.tick();
    const fresh = (await byModel("m")).find((r) => r.id !== old.id)!;
    expect(fresh.shards[0]!.node).not.toBe(node);
    expect((await reps()).find((r) => r.id === old.id)!.state).toBe("ready"); // still serving
    expect((await ctl.views.summary()).replicas.ready).toBe(1);
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === old.id)!.state).toBe("ready");
    await allReady(); // the replacement comes up…
    await ctl.loop.tick(); // …and only now the old one stops
    expect((await reps()).find((r) => r.id === old.id)!.state).toBe("draining");
    expect((await ctl.views.summary()).replicas.ready).toBe(1);
    // Its agent stops it and says so; the node is then drained: cordoned and empty.
    const d = nodesDef.find((x) => x.name === node)!;
    expect((await beat(d)).assignments).toEqual([]);
    await beat(d, [{ id: old.id, state: "stopped", port: null, error: null }]);
    await ctl.loop.tick();
    expect((await ctl.views.node(node)).state).toBe("cordoned");
    expect((await events("node.drained")).length).toBe(1);
    expect((await byModel("m")).map((r) => r.id)).toEqual([fresh.id]);
  });

  test("cordon only stops new placement", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    await allReady();
    const r = (await byModel("m"))[0]!;
    await ctl.nodes.setNodeAdminState(r.shards[0]!.node, "cordoned");
    await ctl.loop.tick();
    expect((await reps()).find((x) => x.id === r.id)!.state).toBe("ready");
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
    await ctl.loop.tick();
    const second = (await byModel("m")).find((x) => x.id !== r.id)!;
    expect(second.shards[0]!.node).not.toBe(r.shards[0]!.node);
  });
});

describe("surplus and catalog changes", () => {
  test("surplus stops starting ones first, then the longest idle; unknown idleness counts as busy", async () => {
    const big: NodeDef = { name: "a", gpus: [H, H, H, H, H, H] };
    await beat(big);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 4 } })]);
    await ctl.loop.tick();
    const ids = (await byModel("m")).map((r) => r.id);
    await beat(big, ready(ids.slice(0, 3))); // three ready, one still starting
    const [busy, idle, unknown] = ids;
    ctl.router.reports({ lastUsed: () => new Map([[busy!, T0 - 1_000], [idle!, T0 - 3_600_000]]), inflightByModel: () => new Map() });
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
    await ctl.loop.tick();
    const draining = (await byModel("m")).filter((r) => r.state === "draining").map((r) => r.id).sort();
    expect(draining).toEqual([ids[3]!, idle!].sort());
    expect((await byModel("m")).find((r) => r.id === unknown)!.state).toBe("ready");
  });

  test("a model removed from the catalog has its replicas stopped and never routed", async () => {
    for (const d of nodesDef) await beat(d);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    await allReady();
    await ctl.loop.tick();
    expect(published.at(-1)!.length).toBe(1);
    await ctl.catalog.deleteModel("m");
    await ctl.loop.tick();
    expect((await byModel("m")).map((r) => r.state)).toEqual(["draining"]);
    expect(published.at(-1)).toEqual([]);
  });

  test("the long poll answers at once when the generation differs and wakes when assignments change", async () => {
    for (const d of nodesDef) await beat(d);
    const g0 = (await beat(nodesDef[0]!)).generation;
    const immediate = await ctl.intake.waitForAssignments("a", g0 + 99, 10_000);
    expect(immediate.generation).toBe(g0);
    const waiting = ctl.intake.waitForAssignments("a", g0, 10_000);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const res = await waiting;
    expect(res.generation).toBeGreaterThan(g0);
    expect(res.assignments.length).toBe(1);
  });
});

describe("multi-node replicas", () => {
  test("a two-node replica takes two whole nodes in one fabric, rank 0 leads", async () => {
    const defs: NodeDef[] = [
      { name: "x1", fabrics: ["ib-a"], gpus: [H, H] },
      { name: "x2", fabrics: ["ib-b"], gpus: [H, H] },
      { name: "y1", fabrics: ["ib-b"], gpus: [H, H] },
    ];
    for (const d of defs) await beat(d);
    await ctl.catalog.putModels([model({ name: "two", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2, nodes: 2 }] })]);
    await ctl.loop.tick();
    const r = (await byModel("two"))[0]!;
    expect(r.shards.map((s) => s.node).sort()).toEqual(["x2", "y1"]);
    const a2 = (await beat(defs[1]!)).assignments[0]!;
    const a3 = (await beat(defs[2]!)).assignments[0]!;
    expect([a2.shard.rank, a3.shard.rank].sort()).toEqual([0, 1]);
    expect(a2.shard.size).toBe(2);
    expect(a2.shard.leader_address).toBe(a3.shard.leader_address);
  });
});

describe("engines a node can run", () => {
  const noVllm = [
    { engine: "vllm" as const, version: null, error: "vllm not found on PATH" },
    { engine: "sglang" as const, version: "0.5.2", error: null },
  ];

  test("a node whose agent found no vllm gets no vllm replica, and the reason says so; it shows in the node view", async () => {
    for (const d of nodesDef) await ctl.intake.heartbeat({ ...heartbeat(d), engines: noVllm });
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    expect(await byModel("m")).toEqual([]);
    // Installing vllm would fix it: not now, not never.
    expect((await ctl.views.models())[0]!.reason).toBe("not now: no ready H100-80GB node can run vllm (2 nodes have no vllm: vllm not found on PATH)");
    expect((await ctl.views.models())[0]!.never_fits).toBe(false);
    expect((await ctl.views.node("a")).engines).toEqual(noVllm);
    // vllm installed on b: the next heartbeat says so, and the replica goes there.
    await ctl.intake.heartbeat({ ...heartbeat(nodesDef[1]!), engines: [{ engine: "vllm", version: "0.11.0", error: null }] });
    await ctl.loop.tick();
    expect((await byModel("m")).map((r) => r.shards[0]!.node)).toEqual(["b"]);
    expect((await ctl.views.models())[0]!.reason).toBeNull();
  });

  test("a node that sends no engines (an older agent, a simulated node) is not avoided: unknown is not absent", async () => {
    await ctl.intake.heartbeat({ ...heartbeat(nodesDef[0]!), engines: noVllm });
    await beat(nodesDef[1]!);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 }, placement: "spread" })]);
    await ctl.loop.tick();
    expect((await byModel("m")).map((r) => r.shards[0]!.node)).toEqual(["b", "b"]);
    expect((await ctl.views.node("b")).engines).toEqual([]);
    // An SGLang profile goes to the node that has SGLang.
    await ctl.catalog.putModels([model({ name: "s", profiles: [{ name: "p", engine: "sglang", gpu_class: H }] })]);
    await ctl.loop.tick();
    expect((await byModel("s")).map((r) => r.shards[0]!.node)).toEqual(["a"]);
  });
});

describe("make room for an on-demand model", () => {
  const one: NodeDef = { name: "solo", gpus: [H, H] };
  /** A has two ready replicas filling the node (scaled above its min of 1); B is on demand. */
  async function fill(aIdleTimeout = "30m", aPriority = 1) {
    await beat(one);
    await ctl.catalog.putModels([
      model({ name: "a", replicas: { min: 1, max: 2 }, idle_timeout: aIdleTimeout, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: aPriority }] }),
      model({ name: "b", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: 1 }] }),
    ]);
    await store.updateModelState("a", { scaleTarget: 2 });
    await ctl.loop.tick();
    await beat(one, ready(ctl.projector.response("solo").assignments.map((x) => x.id)));
    return (await byModel("a")).map((r) => r.id);
  }
  const usage = (m: Map<string, number>) => ctl.router.reports({ lastUsed: () => m, inflightByModel: () => new Map() });

  test("the longest-idle replica past its model's idle_timeout is stopped and the asked-for model placed on its GPUs", async () => {
    const [a1, a2] = await fill();
    usage(new Map([[a1!, T0 - 2 * 3_600_000], [a2!, T0 - 3_600_000]]));
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    expect((await reps()).find((r) => r.id === a1)!.state).toBe("draining");
    expect((await reps()).find((r) => r.id === a2)!.state).toBe("ready");
    const b = (await byModel("b"))[0]!;
    expect(b.shards).toEqual((await reps()).find((r) => r.id === a1)!.shards);
    expect((await events("replica.evicted"))[0]!.message).toBe(`evicted replica ${a1} of a (idle 120m) to make room for b`);
    expect((await ctl.views.summary()).evictions).toEqual([{ at: new Date(T0).toISOString(), replica: a1!, model: "a", for_model: "b", idle_seconds: 7200 }]);
    // The agent is told to stop a1 and start b in one set: it stops before it starts.
    expect(ctl.projector.response("solo").assignments.map((x) => x.id).sort()).toEqual([a2!, b.id].sort());
  });

  test("never a replica whose idleness is unknown", async () => {
    const [a1] = await fill();
    usage(new Map([[a1!, T0 - 3_600_000]])); // a2 never seen by the router
    await store.updateModelState("a", { scaleTarget: 2 });
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    // a1 is evictable, a2 (unknown) is not: exactly a1 goes.
    expect((await events("replica.evicted")).length).toBe(1);
    expect((await events("replica.evicted"))[0]!.message).toContain(a1!);
  });

  test("never one idle for less than its model's idle_timeout, never below min, never a higher-priority model", async () => {
    let [a1, a2] = await fill("3h");
    usage(new Map([[a1!, T0 - 3_600_000], [a2!, T0 - 3_600_000]]));
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    expect(await events("replica.evicted")).toEqual([]);
    expect((await ctl.views.models()).find((m) => m.name === "b")!.unplaceable).toBe(true);

    setup();
    [a1, a2] = await fill("30m");
    await store.updateModelState("a", { scaleTarget: 1 });
    await ctl.loop.tick(); // a back to its min of 1: the surplus one stops
    const left = (await byModel("a")).filter((r) => r.state === "ready").map((r) => r.id);
    usage(new Map(left.map((id) => [id, T0 - 3_600_000])));
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    expect(await events("replica.evicted")).toEqual([]);

    setup();
    // a's profile priority 0 is higher than b's 1: a is never evicted for b... unless b ranks as high.
    [a1, a2] = await fill("30m", 0);
    await ctl.catalog.putModels([model({ name: "b", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: 5 }] })]);
    usage(new Map([[a1!, T0 - 3_600_000], [a2!, T0 - 3_600_000]]));
    await ctl.catalog.requestModel("b");
    await ctl.loop.tick();
    expect(await events("replica.evicted")).toEqual([]);
  });
});

describe("load-based scaling", () => {
  test("up at once when in-flight passes the target; down only after load stays low for the delay, one step at a time", async () => {
    const big: NodeDef = { name: "a", gpus: [H, H, H, H] };
    await beat(big);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1, max: 4 }, target_inflight: 4 })]);
    let load = 0;
    ctl.router.reports({ lastUsed: () => new Map(), inflightByModel: () => new Map([["m", load]]) });
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(1);
    load = 9; // needs ceil(9/4) = 3
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(3);
    expect((await byModel("m")).length).toBe(3);
    expect((await events("model.scaled"))[0]!.message).toBe("model m scaled up to 3 (in flight 9, target 4 per replica)");
    // A dip that one replica fewer could not carry at 80% of target: no change, ever.
    load = 7; // (3-1)*4*0.8 = 6.4 ≤ 7
    clock.advance(120_000);
    await beat(big, ready(ctl.projector.response("a").assignments.map((x) => x.id)));
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(3);
    // Low load: nothing for the first minute, then one step down.
    load = 1;
    await ctl.loop.tick();
    clock.advance(30_000);
    await beat(big, ready(ctl.projector.response("a").assignments.map((x) => x.id)));
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(3);
    clock.advance(31_000);
    await beat(big, ready(ctl.projector.response("a").assignments.map((x) => x.id)));
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(2);
    // Load back up: straight up again.
    load = 16;
    await ctl.loop.tick();
    expect((await ctl.views.models())[0]!.desired).toBe(4);
  });

  test("a model without target_inflight, or with max = min, is never scaled", async () => {
    await beat({ name: "a", gpus: [H, H] });
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1, max: 2 } }), model({ name: "n", replicas: { min: 1 }, target_inflight: 1 })]);
    ctl.router.reports({ lastUsed: () => new Map(), inflightByModel: () => new Map([["m", 50], ["n", 50]]) });
    await ctl.loop.tick();
    expect((await ctl.views.models()).map((m) => m.desired)).toEqual([1, 1]);
    expect(await events("model.scaled")).toEqual([]);
  });
});
