// The controller under a lease: a standby's tick decides and writes nothing (yet hands out what
// the store holds, with the leader's epoch); a leader's plan is written under its fence, and a
// fenced write steps it down with nothing written.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { FencedError } from "../../src/control/errors";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { testControl } from "../helpers/control";
import { T0, heartbeat, model } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const silent = pino({ level: "silent" });

async function setup() {
  const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  const ctl = testControl({ store, scheduler: new ManualScheduler(T0), log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  await ctl.intake.heartbeat(heartbeat({ name: "n1", fabrics: ["f"], gpus: [H, H] }));
  await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1 } })]);
  return { store, ctl };
}

describe("the controller and the lease", () => {
  test("a single head node leads under epoch 0 with no fence, as before", async () => {
    const { store, ctl } = await setup();
    expect(ctl.leadership.get()).toEqual({ leading: true, epoch: 0 });
    await ctl.loop.tick();
    expect(store.counts().replicas).toBe(1);
    expect(ctl.projector.response("n1").epoch).toBe(0);
  });

  test("standing by: ticks place nothing and write nothing; the answers carry the lease's epoch", async () => {
    const { store, ctl } = await setup();
    ctl.leadership.set({ leading: false, epoch: 4, name: "b" });
    const events = (await store.listEvents({ limit: 100 })).length;
    for (let i = 0; i < 3; i++) expect((await ctl.loop.tick()).create).toEqual([]);
    expect(store.counts().replicas).toBe(0);
    expect((await store.listEvents({ limit: 100 })).length).toBe(events);
    expect(ctl.projector.response("n1").epoch).toBe(4);
  });

  test("leading under the lease it holds: the plan is written; under one it does not hold: fenced, nothing written, stepped down", async () => {
    const { store, ctl } = await setup();
    const fenced: FencedError[] = [];
    ctl.leadership.onFenced((e) => {
      fenced.push(e);
      ctl.leadership.set({ leading: false, epoch: e.epoch, name: "a" });
    });
    // Another holds the lease: a's belief that it leads (epoch 1) is stale.
    await store.acquireLease("b", 60_000);
    ctl.leadership.set({ leading: true, epoch: 1, name: "a" });
    await ctl.loop.tick();
    expect(fenced.map((e) => e.epoch)).toEqual([1]);
    expect(ctl.leadership.get().leading).toBe(false);
    expect(store.counts().replicas).toBe(0);
    // Once a holds it (b released, a took it: epoch 2), its plan goes through.
    await store.releaseLease("b");
    const lease = await store.acquireLease("a", 60_000);
    ctl.leadership.set({ leading: true, epoch: lease.epoch, name: "a" });
    await ctl.loop.tick();
    expect(store.counts().replicas).toBe(1);
    expect(ctl.projector.response("n1").epoch).toBe(2);
  });

  test("without a fenced handler the controller steps down by itself", async () => {
    const { store, ctl } = await setup();
    await store.acquireLease("b", 60_000);
    ctl.leadership.set({ leading: true, epoch: 1, name: "a" });
    await ctl.loop.tick();
    expect(ctl.leadership.get().leading).toBe(false);
    expect(store.counts().replicas).toBe(0);
  });
});
