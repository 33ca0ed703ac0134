// The intake's news path reads once, decides once and writes once: a heartbeat whose reports
// change something is decided on the fast path's read (while nothing changed the replicas since,
// the group reuses that decision instead of reading and deciding again), and what its arrival
// means (registered, parked models tried again, reachable again) is written in the same
// transaction as its replicas' verdicts.

import { describe, expect, test } from "bun:test";
import { StoreImage } from "../../src/control/image";
import type { ReplicaRead } from "../../src/control/store-port";
import type { NewEvent, PlanWrite } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { testControl } from "../helpers/control";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";
import { T0, heartbeat, model } from "../helpers/fleet";

const H = "H100-80GB";

/** The in-memory image, counting what the intake asks of it. */
class Counting extends StoreImage {
  reads = 0;
  plans: PlanWrite[] = [];
  appended: NewEvent[] = [];
  unparks = 0;
  override replicaSnapshot(node?: string): Promise<ReplicaRead> {
    this.reads++;
    return super.replicaSnapshot(node);
  }
  override applyPlan(plan: PlanWrite, now: number, fence?: Parameters<StoreImage["applyPlan"]>[2]): Promise<void> {
    this.plans.push(plan);
    return super.applyPlan(plan, now, fence);
  }
  override appendEvent(e: NewEvent & { at: number }): Promise<number> {
    this.appended.push(e);
    return super.appendEvent(e);
  }
  override unpark(m: string): Promise<boolean> {
    this.unparks++;
    return super.unpark(m);
  }
  reset(): void {
    this.reads = 0;
    this.plans = [];
    this.appended = [];
    this.unparks = 0;
  }
}

function setup() {
  const clock = new ManualScheduler(T0);
  const store = new Counting(new Store({ path: ":memory:", ...SQLITE_DEFAULTS }), clock);
  const ctl = testControl({ store, scheduler: clock, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  return { clock, store, ctl };
}

const ready = (ids: { id: string; port: number }[]) => ids.map((a) => ({ id: a.id, state: "ready" as const, port: a.port, error: null }));

describe("a heartbeat with news", () => {
  test("whose reports make a replica ready is read and decided once, and written in one transaction", async () => {
    const { store, ctl } = setup();
    const n1 = heartbeat({ name: "n1", gpus: [H] });
    await ctl.intake.heartbeat(n1);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const placed = ctl.projector.response("n1").assignments;
    expect(placed).toHaveLength(1);
    // Its inventory as stored: the heartbeat takes the fast path, which finds news in its reports.
    await ctl.intake.heartbeat(n1);
    store.reset();
    await ctl.intake.heartbeat({ ...n1, replicas: ready(placed) });
    expect(store.reads).toBe(1);
    expect(store.plans.map((p) => p.events.map((e) => e.kind))).toEqual([["replica.ready"]]);
    expect((await ctl.views.replicas())[0]!.state).toBe("ready");
    // Said again, it is no news: answered on the fast path, nothing written.
    store.reset();
    await ctl.intake.heartbeat({ ...n1, replicas: ready(placed) });
    expect(store.plans).toEqual([]);
  });

  test("from a node found unreachable: its return and its replicas' verdicts in one transaction, no event apart", async () => {
    const { clock, store, ctl } = setup();
    const n1 = heartbeat({ name: "n1", gpus: [H] });
    await ctl.intake.heartbeat(n1);
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const placed = ctl.projector.response("n1").assignments;
    clock.advance(20_000);
    await ctl.loop.tick();
    expect((await ctl.views.node("n1")).state).toBe("unreachable");
    store.reset();
    await ctl.intake.heartbeat({ ...n1, replicas: ready(placed) });
    expect(store.appended).toEqual([]);
    expect(store.plans.map((p) => p.events.map((e) => e.kind))).toEqual([["node.reachable", "replica.ready"]]);
    expect(store.reads).toBe(1);
  });

  test("that registers a node: registered and the parked models tried again in one transaction", async () => {
    const { store, ctl } = setup();
    await ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H] }));
    await ctl.catalog.putModels([model({ name: "m" }), model({ name: "q" })]);
    await store.updateModelState("m", { parked: true, failures: 5, reason: "broke" });
    store.reset();
    await ctl.intake.heartbeat(heartbeat({ name: "n2", gpus: [H] }));
    expect(store.unparks).toBe(0);
    expect(store.appended).toEqual([]);
    expect(store.plans.map((p) => p.events.map((e) => [e.kind, e.subject]))).toEqual([
      [
        ["node.registered", "node/n2"],
        ["model.unparked", "model/m"],
      ],
    ]);
    expect((await ctl.views.models()).find((x) => x.name === "m")!.parked).toBe(false);
  });
});
