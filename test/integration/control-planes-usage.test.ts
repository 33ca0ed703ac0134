// Two control planes on one store (one SQLite file, two connections, one manual clock), their
// routers' usage reported into the store: the leader merges every router's last-used map and
// keeps the seeds' rule that unknown is not idle. A router restart anywhere (the standby's or
// the leader's own) must not get a replica evicted or listed idle that another router served
// recently, and once every router has watched long enough with no traffic, it is idle.

import { afterEach, describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { ReplicaReport } from "../../src/protocol/heartbeat";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";
import { type Plane, type Planes, lead, RouterUsageSide, startPlanes } from "../helpers/planes";
import { until } from "../helpers/until";

const H = "H100-80GB";
const MIN = 60_000;
const solo: NodeDef = { name: "solo", gpus: [H, H] };

let env: Planes | undefined;
afterEach(() => {
  env?.stop();
  env = undefined;
});

interface World {
  clock: ManualScheduler;
  a: Plane;
  b: Plane;
  routerA: RouterUsageSide;
  routerB: RouterUsageSide;
  /** a's two ready replicas, in id order. */
  ids: [string, string];
  /** Whether b's control plane still runs its tick (reports its router's usage). */
  bAlive: boolean;
  /** Moves the clock in 10-second steps; each step the node heartbeats to the leader, the standby ticks (it reports its router's usage, decides nothing), the leader ticks. */
  advance(ms: number): Promise<void>;
}

const ready = (ids: string[]): ReplicaReport[] => ids.map((id) => ({ id, state: "ready", port: 8000, error: null }));
const evictions = async (p: Plane) => (await p.ctl.events.events({ limit: 1000 })).filter((e) => e.kind === "replica.evicted");

/**
 * Leader a, standby b. Model "m" fills the node's two GPUs (min 1, scaled to 2, idle_timeout
 * 2m); "od" is on demand and needs one GPU: only an eviction makes room for it. Router a served
 * both replicas at T0+1m, router b served the first at T0+4m50s; the clock stands at T0+5m.
 */
async function world(liveWithinMs = 15_000): Promise<World> {
  const clock = new ManualScheduler(T0);
  env = await startPlanes({ names: ["a", "b"], clock, liveWithinMs });
  const [a, b] = env.planes as [Plane, Plane];
  await lead(a);
  const routerA = new RouterUsageSide(T0);
  const routerB = new RouterUsageSide(T0);
  a.router.reports(routerA);
  b.router.reports(routerB);
  await a.ctl.intake.heartbeat(heartbeat(solo));
  await a.ctl.catalog.putModels([
    model({ name: "m", replicas: { min: 1, max: 2 }, idle_timeout: "2m" }),
    model({ name: "od", on_demand: true, replicas: { min: 0 } }),
  ]);
  await a.image.updateModelState("m", { scaleTarget: 2 });
  await a.ctl.loop.tick();
  const beat = async () => a.ctl.intake.heartbeat({ ...heartbeat(solo), replicas: ready(a.ctl.projector.response("solo").assignments.map((x) => x.id)) });
  await beat();
  const ids = (await a.ctl.views.replicas()).filter((r) => r.model === "m" && r.state === "ready").map((r) => r.id).sort() as [string, string];
  expect(ids.length).toBe(2);
  const w: World = {
    clock,
    a,
    b,
    routerA,
    routerB,
    ids,
    bAlive: true,
    async advance(ms) {
      for (let t = 0; t < ms; t += 10_000) {
        clock.advance(Math.min(10_000, ms - t));
        await beat();
        if (w.bAlive) await b.ctl.loop.tick();
        await a.ctl.loop.tick();
      }
    },
  };
  await w.advance(MIN);
  routerA.served(ids[0], clock.now());
  routerA.served(ids[1], clock.now());
  await w.advance(3 * MIN + 50_000);
  routerB.served(ids[0], clock.now());
  await w.advance(10_000);
  expect(clock.now()).toBe(T0 + 5 * MIN);
  return w;
}

const idleOf = async (p: Plane) => new Map((await p.ctl.views.replicas()).map((r) => [r.id, r.idle_seconds]));

describe("idleness across two routers", () => {
  test("before any restart: the newest stamp wins across routers (b's use of the first replica keeps it; the second, idle 4 minutes, goes)", async () => {
    const w = await world();
    const [r1, r2] = w.ids;
    // Both control planes show the same picture: r1 used 10 s ago (through b), r2 4 minutes ago (through a).
    expect(await idleOf(w.a)).toEqual(new Map([[r1, 10], [r2, 240]]));
    await until("b's view to match", async () => (await idleOf(w.b)).get(r2) === 240 || undefined);
    await w.a.ctl.catalog.requestModel("od");
    await w.a.ctl.loop.tick();
    const ev = await evictions(w.a);
    expect(ev.map((e) => e.subject)).toEqual([`replica/${r2}`]);
  });

  test("the standby's router restarts: nothing it may have served is evicted or called idle, until it has watched long enough", async () => {
    const w = await world();
    const [r1, r2] = w.ids;
    // b served r1 ten seconds ago, reported it, and restarts: its new report has lost the stamp.
    w.routerB.restart(w.clock.now());
    await w.b.ctl.loop.tick();
    await w.a.ctl.catalog.requestModel("od");
    await w.a.ctl.loop.tick();
    // With a's stamps alone (T0+1m) both replicas would be idle 4 minutes, past m's 2-minute
    // idle_timeout, and one would be evicted. b has watched 0 s: nothing is known idle.
    expect(await evictions(w.a)).toEqual([]);
    expect((await w.a.ctl.views.models()).find((m) => m.name === "od")!.unplaceable).toBe(true);
    expect(await idleOf(w.a)).toEqual(new Map([[r1, 0], [r2, 0]]));
    expect((await w.a.ctl.views.summary()).idle_replicas).toEqual([]);

    // No traffic anywhere; once b has watched past the 2-minute idle_timeout, one replica goes.
    await w.advance(2 * MIN - 10_000);
    expect(await evictions(w.a)).toEqual([]);
    await w.advance(20_000);
    const ev = await evictions(w.a);
    expect(ev.length).toBe(1);
    // Known idle since b's restart: 130 s, not the 6 minutes a's stamps alone would say.
    expect((ev[0]!.message.match(/idle (\d+)m/) ?? [])[1]).toBe("2");
    const left = ev[0]!.subject === `replica/${r1}` ? r2 : r1;

    // And after ten minutes of every router watching with no traffic, the one left is listed idle,
    // by both control planes alike.
    await w.advance(8 * MIN);
    const idle = (await w.a.ctl.views.summary()).idle_replicas;
    expect(idle.map((r) => [r.id, r.idle_seconds])).toEqual([[left, 610]]);
    await until("b's summary to list it too", async () => (await w.b.ctl.views.summary()).idle_replicas.map((r) => r.id).join() === left || undefined);
  });

  test("the leader's own router restarts: a replica another router served recently is kept; one only it had seen is unknown", async () => {
    const w = await world();
    const [r1, r2] = w.ids;
    w.routerA.restart(w.clock.now());
    await w.a.ctl.catalog.requestModel("od");
    await w.a.ctl.loop.tick();
    expect(await evictions(w.a)).toEqual([]);
    // r1's stamp comes from b; r2 was only ever served by a, whose router lost it: unknown (-1).
    expect(await idleOf(w.a)).toEqual(new Map([[r1, 0], [r2, -1]]));
    // Once a's router has watched past the idle_timeout, r1 (known) may go; r2 (unknown) never.
    await w.advance(2 * MIN + 10_000);
    expect((await evictions(w.a)).map((e) => e.subject)).toEqual([`replica/${r1}`]);
  });

  test("a control plane that stops reporting: its stamps still count, and it no longer limits once silent for liveWithinMs", async () => {
    // Reports age by the database's clock, which no manual clock moves: a short liveWithinMs, real time.
    const w = await world(1_500);
    const [r1, r2] = w.ids;
    // b's router restarts, serves r1 at once, reports once, and b's control plane goes away.
    w.routerB.restart(w.clock.now());
    w.routerB.served(r1, w.clock.now());
    await w.b.ctl.loop.tick();
    w.bAlive = false;
    await w.a.ctl.catalog.requestModel("od");
    await w.a.ctl.loop.tick();
    expect(await evictions(w.a)).toEqual([]);
    await until("b's report to age past liveWithinMs", async () => ((await w.a.store.routerUsage()).find((r) => r.router === "b")?.reportedAgoMs ?? 0) > 1_600 || undefined);
    w.clock.advance(10_000);
    await w.a.ctl.loop.tick();
    // r1's stamp from b (10 s ago) keeps it; r2 (a's, 4 minutes ago) goes: b's restart no longer limits.
    expect((await evictions(w.a)).map((e) => e.subject)).toEqual([`replica/${r2}`]);
    expect((await idleOf(w.a)).get(r1)).toBe(10);
  });
});

describe("a heartbeat answered while the leader's tick waits on the store", () => {
  test("stamps its node later than the tick's clock reading without making it unreachable", async () => {
    const clock = new ManualScheduler(T0);
    env = await startPlanes({ names: ["a"], clock });
    const [a] = env.planes as [Plane];
    await lead(a);
    a.router.reports(new RouterUsageSide(T0));
    await a.ctl.intake.heartbeat(heartbeat(solo));
    // Watched for well past the node timeout, the node heartbeating every 5 s.
    for (let t = 0; t < 2 * MIN; t += 5_000) {
      clock.advance(5_000);
      await a.ctl.intake.heartbeat(heartbeat(solo));
      await a.ctl.loop.tick();
    }
    // The next tick's usage exchange waits on the store; meanwhile the clock moves and the node's
    // unchanged heartbeat is answered (without the controller's lock).
    let release = () => {};
    let entered = () => {};
    const held = new Promise<void>((r) => (release = r));
    const waiting = new Promise<void>((r) => (entered = r));
    const report = a.image.reportUsage.bind(a.image);
    a.image.reportUsage = async (...args) => {
      entered();
      await held;
      return report(...args);
    };
    clock.advance(5_000);
    const tick = a.ctl.loop.tick();
    await waiting;
    clock.advance(50);
    await a.ctl.intake.heartbeat(heartbeat(solo));
    release();
    await tick;
    const events = (await a.ctl.events.events({ limit: 1000 })).filter((e) => e.kind === "node.unreachable");
    expect(events).toEqual([]);
    expect((await a.ctl.views.nodes()).find((n) => n.name === "solo")?.state).toBe("ready");
  });
});
