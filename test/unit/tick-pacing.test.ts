// A tick paces itself: between its named steps it lets the I/O already due run, so an unchanged
// heartbeat is answered while a tick is under way instead of after all of it (at a few thousand
// nodes a tick is tens of milliseconds of work, and each second's heartbeats would queue behind
// it). The pauses change nothing the tick decides, heartbeats that change state still wait for
// the tick, and the time spent paused is listening time, not a stall.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { StoreImage } from "../../src/control/image";
import { reconcile, reconcilePaced } from "../../src/control/reconciler";
import { buildTables, buildTablesPaced } from "../../src/control/views";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { testControl } from "../helpers/control";
import { T0, heartbeat, model, snapshot } from "../helpers/fleet";
import { RECONCILE_DEFAULTS, SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";

/** A manual clock whose `soon` can be held: the test decides when "the I/O already due" runs. */
class HeldScheduler extends ManualScheduler {
  holding = false;
  readonly held: (() => void)[] = [];
  soon = (fn: () => void): void => {
    if (this.holding) this.held.push(fn);
    else setImmediate(fn);
  };
  /** Stops holding and runs what was held. */
  release(): void {
    this.holding = false;
    for (const fn of this.held.splice(0)) setImmediate(fn);
  }
}

/** Lets promise callbacks settle (no time passes on the manual clock). */
const settle = async () => {
  for (let i = 0; i < 20; i++) await Promise.resolve();
};

describe("reconcilePaced", () => {
  test("plans exactly what reconcile plans, pausing between the steps", async () => {
    const nodes = Array.from({ length: 6 }, (_, i) => ({ name: `n${i}`, fabrics: ["f1"], gpus: [H, H, H, H] }));
    const models = [model({ name: "a", replicas: { min: 3, max: 3 } }), model({ name: "b", replicas: { min: 2, max: 2 } }), model({ name: "gone-soon" })];
    const replicas = [
      { id: "r-a0", model: "a", state: "ready" as const, shards: [{ node: "n0", gpus: [0] }] },
      { id: "r-x", model: "uncatalogued", state: "ready" as const, shards: [{ node: "n1", gpus: [0] }] },
    ];
    const input = () => {
      let n = 0;
      return { snapshot: snapshot({ nodes, models, replicas }), now: T0, lastUsed: new Map<string, number>(), newId: () => `new-${n++}`, config: RECONCILE_DEFAULTS };
    };
    const plain = reconcile(input());
    let pauses = 0;
    const paced = await reconcilePaced(input(), async () => {
      pauses++;
    });
    expect(paced).toEqual(plain);
    // Something to place and something to stop: the plan is not empty, so the comparison says something.
    expect(plain.create.length).toBe(5);
    expect(plain.update.length + plain.remove.length).toBeGreaterThan(0);
    expect(pauses).toBeGreaterThanOrEqual(5);
  });
});

describe("buildTablesPaced", () => {
  test("builds the tables buildTables builds, pausing between the views", async () => {
    const nodes = [
      { name: "n0", fabrics: ["f1"], gpus: [H, H] },
      { name: "n1", fabrics: ["f1"], gpus: [H, H], unhealthy: [1] },
    ];
    const inputs = {
      snapshot: snapshot({ nodes, models: [model({ name: "a" })], replicas: [{ id: "r-a0", model: "a", state: "ready" as const, shards: [{ node: "n0", gpus: [1] }] }] }),
      now: T0 + 1_000,
      lastUsed: new Map([["r-a0", T0]]),
      nodeTimeoutMs: 15_000,
    };
    let pauses = 0;
    const paced = await buildTablesPaced(inputs, async () => {
      pauses++;
    });
    expect(paced).toEqual(buildTables(inputs));
    expect(paced.nodes.find((n) => n.name === "n0")?.gpus[1]?.in_use_by).toBe("r-a0");
    expect(pauses).toBe(3);
  });
});

describe("a tick under way", () => {
  async function setup() {
    const clock = new HeldScheduler(T0);
    // As serve runs it: the in-memory image over the store, whose unchanged heartbeats skip the lock.
    const store = new StoreImage(new Store({ path: ":memory:", ...SQLITE_DEFAULTS }), clock);
    const ctl = testControl({ store, scheduler: clock, log: pino({ level: "silent" }), nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
    const a = heartbeat({ name: "a", fabrics: ["f1"], gpus: [H, H] });
    await ctl.intake.heartbeat(a);
    // Once more, so the next identical one is a repeat the head node has already written.
    await ctl.intake.heartbeat(a);
    await ctl.loop.tick();
    clock.holding = true;
    return { clock, ctl, a };
  }

  test("answers an unchanged heartbeat while the tick is paused between its steps", async () => {
    const { clock, ctl, a } = await setup();
    let ticked = false;
    const tick = ctl.loop.tick().then(() => (ticked = true));
    await settle();
    expect(clock.held.length).toBeGreaterThan(0);
    let answered = false;
    const hb = ctl.intake.heartbeat(a).then((r) => {
      answered = true;
      return r;
    });
    await settle();
    // Answered with the tick still paused: nothing held has run yet.
    expect(answered).toBe(true);
    expect(ticked).toBe(false);
    expect((await hb).heartbeat_interval_ms).toBe(1_000);
    clock.release();
    await tick;
    expect(ticked).toBe(true);
  });

  test("a heartbeat that changes the node waits for the tick", async () => {
    const { clock, ctl } = await setup();
    let ticked = false;
    const tick = ctl.loop.tick().then(() => (ticked = true));
    await settle();
    expect(clock.held.length).toBeGreaterThan(0);
    let answeredWhileTicking = false;
    const changed = ctl.intake.heartbeat(heartbeat({ name: "a", fabrics: ["f1"], gpus: [H, H, H] })).then((r) => {
      answeredWhileTicking = !ticked;
      return r;
    });
    await settle();
    expect(ticked).toBe(false);
    clock.release();
    await tick;
    await changed;
    expect(answeredWhileTicking).toBe(false);
    expect((await ctl.views.node("a")).gpus.length).toBe(3);
  });

  test("time spent paused is not counted as the head node falling behind", async () => {
    const { clock, ctl } = await setup();
    const tick = ctl.loop.tick();
    await settle();
    expect(clock.held.length).toBeGreaterThan(0);
    // Two seconds pass while the tick waits for its turn: others were served meanwhile.
    clock.advance(2_000);
    clock.release();
    await tick;
    expect((await ctl.views.summary()).head?.behind_ms).toBe(0);
  });
});
