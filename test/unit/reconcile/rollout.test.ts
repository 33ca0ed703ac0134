// Rolling a model onto a new launch (reconcile/rollout.ts), step by step through the whole
// reconcile with agents simulated around it: one replica at a time with surge, never fewer than
// desired ready while there is room, without surge only when min stays ready, old replicas drained
// until their requests finish or the drain timeout passes, a second change mid-roll.

import { describe, expect, test } from "bun:test";
import { RESTART_MARK, launchOf } from "../../../src/control/launch";
import { reconcile } from "../../../src/control/reconciler";
import { rolloutView } from "../../../src/control/rollout-view";
import { explainModel } from "../../../src/control/explain";
import type { Plan } from "../../../src/control/reconcile/plan";
import type { ReplicaRow, Snapshot } from "../../../src/control/types";
import { ManualScheduler } from "../../../src/lib/scheduler";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";
import { T0, model, snapshot } from "../../helpers/fleet";
import { H } from "./fixture";

const DRAIN_MS = 30_000;
const spec = (args: string[], replicas: { min: number; max?: number } = { min: 2 }) =>
  model({ name: "m", replicas, profiles: [{ name: "default", engine: "vllm", gpu_class: H, gpus: 1, args }] });

/** A fleet of one-GPU nodes and the model, reconciled by hand, with agents that do as they are told. */
class World {
  readonly clock = new ManualScheduler(T0);
  snap: Snapshot;
  /** Requests in flight per replica, as the router would report them. */
  readonly inflight = new Map<string, number>();
  readonly events: Plan["events"] = [];
  /** The fewest ready replicas seen after any step, and the most new ones starting at once. */
  minReady = Infinity;
  maxStartingNew = 0;
  /** The most replicas in motion at once: new ones starting and old ones draining or stopping. */
  maxInMotion = 0;
  private seq = 0;

  constructor(gpus: number, m: ReturnType<typeof spec>, existing: number, modelState: { scaleTarget?: number } = {}) {
    const nodes = Array.from({ length: gpus }, (_, i) => ({ name: `n${i}`, gpus: [H], models: ["m"] }));
    this.snap = snapshot({ nodes, models: [m], modelState: [{ model: "m", ...modelState }] });
    const launch = launchOf(m, "default")!;
    this.snap.replicas = Array.from({ length: existing }, (_, i) => this.row(`old${i}`, `n${i}`, "ready", launch));
  }

  private row(id: string, node: string, state: ReplicaRow["state"], launch: string | null): ReplicaRow {
    const now = this.clock.now();
    return { id, model: "m", profile: "default", state, shards: [{ node, gpus: [0] }], port: 8100, endpoint: `http://${node}:8100`, failures: 0, error: null, createdAt: now, updatedAt: now, readyAt: now, launch, drainUntil: null };
  }

  setSpec(m: ReturnType<typeof spec>): void {
    this.snap = { ...this.snap, models: this.snap.models.map((x) => ({ ...x, spec: m, revision: x.revision + 1 })) };
  }

  /** One reconcile step, its plan applied as the store would. */
  step(): Plan {
    const now = this.clock.now();
    this.snap = { ...this.snap, nodes: this.snap.nodes.map((n) => ({ ...n, lastHeartbeat: now })) };
    const plan = reconcile({ snapshot: this.snap, now, lastUsed: new Map(), config: { ...RECONCILE_DEFAULTS, drainTimeoutMs: DRAIN_MS }, newId: () => `new${++this.seq}`, inflight: this.inflight });
    const patches = new Map(plan.update.map((u) => [u.id, u.patch]));
    let replicas = this.snap.replicas.filter((r) => !plan.remove.includes(r.id)).map((r) => ({ ...r, ...(patches.get(r.id) ?? {}) }));
    replicas = [...replicas, ...plan.create.map((c) => ({ ...this.row(c.id, c.shards[0]!.node, "starting", c.launch ?? null), readyAt: null }))];
    const state = this.snap.modelState.map((s) => ({ ...s, ...(plan.modelState.get(s.model) ?? {}) }));
    this.snap = { ...this.snap, replicas, modelState: state };
    this.events.push(...plan.events);
    this.watch();
    return plan;
  }

  /** The agents: what is starting becomes ready (or failed, with `fail`); a draining replica no longer assigned (no drain deadline) stops. */
  agents(fail = false): void {
    this.snap = {
      ...this.snap,
      replicas: this.snap.replicas.filter((r) => !(r.state === "draining" && r.drainUntil == null)).map((r) => (r.state === "starting" ? { ...r, state: fail ? ("failed" as const) : ("ready" as const) } : r)),
    };
    this.watch();
  }

  private watch(): void {
    this.minReady = Math.min(this.minReady, this.ready().length);
    const current = launchOf(this.snap.models[0]!.spec, "default");
    const startingNew = this.snap.replicas.filter((r) => r.state === "starting" && r.launch === current).length;
    this.maxStartingNew = Math.max(this.maxStartingNew, startingNew);
    this.maxInMotion = Math.max(this.maxInMotion, startingNew + this.snap.replicas.filter((r) => r.state === "draining").length);
  }

  ready(): ReplicaRow[] {
    return this.snap.replicas.filter((r) => r.state === "ready");
  }

  /** Steps (agents acting between them) until every replica runs the current launch, or `limit` steps. */
  rollToEnd(limit = 40): number {
    const current = () => launchOf(this.snap.models[0]!.spec, "default");
    for (let i = 0; i < limit; i++) {
      this.step();
      this.agents();
      if (this.snap.replicas.every((r) => r.launch === current() && r.state === "ready")) return i + 1;
    }
    throw new Error(`not rolled after ${limit} steps: ${JSON.stringify(this.snap.replicas.map((r) => [r.id, r.state, r.launch, r.drainUntil]))}`);
  }
}

describe("rolling a model onto a new launch", () => {
  test("an args change with room for one more: replaced one at a time, a new replica ready before an old one drains, never fewer than desired ready", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.step();
    expect(w.snap.replicas.length).toBe(2); // nothing to roll yet
    w.setSpec(spec(["--b"]));
    const first = w.step();
    // The surge: one new replica placed, no old one touched while it starts.
    expect(first.create.length).toBe(1);
    expect(first.update.filter((u) => u.patch.state === "draining")).toEqual([]);
    w.rollToEnd();
    expect(w.minReady).toBe(2);
    expect(w.maxStartingNew).toBe(1);
    // The next new replica only once the old one it replaced has stopped.
    expect(w.maxInMotion).toBe(1);
    expect(w.snap.replicas.map((r) => r.id).sort()).toEqual(["new1", "new2"]);
    // An event per replica replaced, each drained old replica stopped once its requests were done.
    expect(w.events.filter((e) => e.kind === "replica.replaced").map((e) => e.subject).sort()).toEqual(["replica/old0", "replica/old1"]);
    expect(w.events.filter((e) => e.kind === "replica.drained").every((e) => (e.data as { timed_out: boolean }).timed_out === false)).toBe(true);
  });

  test("a new spec whose replicas never become ready: the old ones keep serving, none is stopped", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.setSpec(spec(["--broken"]));
    for (let i = 0; i < 10; i++) {
      w.step();
      w.agents(true);
    }
    expect(w.ready().map((r) => r.id).sort()).toEqual(["old0", "old1"]);
    expect(w.events.filter((e) => e.kind === "replica.replaced")).toEqual([]);
    expect(w.minReady).toBe(2);
  });

  test("a change that alters nothing a replica is launched with (priority, replicas.max) rolls nothing", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.setSpec(model({ name: "m", replicas: { min: 2, max: 4 }, profiles: [{ name: "default", engine: "vllm", gpu_class: H, gpus: 1, args: ["--a"], priority: 3 }] }));
    const plan = w.step();
    expect(plan.create).toEqual([]);
    expect(plan.update).toEqual([]);
  });

  test("no room for a surge replica: one old drains first when min stays ready, its replacement follows", () => {
    const w = new World(2, spec(["--a"], { min: 1, max: 2 }), 2, { scaleTarget: 2 });
    w.setSpec(spec(["--b"], { min: 1, max: 2 }));
    const plan = w.step();
    expect(plan.create).toEqual([]);
    expect(plan.update.filter((u) => u.patch.state === "draining").length).toBe(1);
    expect(plan.events.find((e) => e.kind === "replica.replaced")?.message).toContain("no room for a surge replica");
    // Not the model's failure: no unplaceable reason recorded for the surge.
    expect(plan.modelState.get("m")?.unplaceableReason ?? null).toBeNull();
    w.rollToEnd();
    expect(w.minReady).toBe(1);
    expect(w.maxStartingNew).toBe(1);
  });

  test("no room and stopping one would leave fewer than min ready: the roll waits, nothing stops", () => {
    const w = new World(2, spec(["--a"]), 2);
    w.setSpec(spec(["--b"]));
    for (let i = 0; i < 3; i++) {
      const plan = w.step();
      w.agents();
      expect(plan.create).toEqual([]);
      expect(plan.update.filter((u) => u.patch.state === "draining")).toEqual([]);
    }
    // Said as the roll's wait: the model is not short, so not unplaceable.
    const st = w.snap.modelState[0]!;
    expect(st.unplaceableReason).toStartWith("rollout waits: no room for a new replica");
    const view = rolloutView(w.snap.models[0]!, st, w.snap.replicas, 2, w.clock.now());
    expect(view?.text).toStartWith("0 of 2 replaced, waiting: no room for a new replica");
    expect(view?.text).toContain("would leave fewer than min 2 ready");
    // explain says the same, and that waiting is what happens.
    const ex = explainModel({ snapshot: w.snap, now: w.clock.now(), lastUsed: new Map(), config: RECONCILE_DEFAULTS }, "m")!;
    expect(ex.summary).toContain("rollout: 0 of 2 replaced, waiting: no room for a new replica");
    expect(ex.suggestions[0]!.kind).toBe("wait");
    expect(w.ready().map((r) => r.id).sort()).toEqual(["old0", "old1"]);
    // A GPU comes free (a third node joins): the roll goes on.
    w.snap = { ...w.snap, nodes: [...w.snap.nodes, { ...w.snap.nodes[0]!, name: "n2" }], gpus: [...w.snap.gpus, { ...w.snap.gpus[0]!, node: "n2", uuid: "GPU-n2-0" }], weights: [...w.snap.weights, { node: "n2", model: "m" }] };
    expect(w.step().create.length).toBe(1);
  });

  test("a drained old replica keeps running while requests are in flight, and is stopped at the drain timeout", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.setSpec(spec(["--b"]));
    w.step();
    w.agents(); // the surge replica is ready
    w.inflight.set("old0", 3);
    w.inflight.set("old1", 3);
    const drain = w.step();
    const drained = drain.update.find((u) => u.patch.state === "draining")!;
    expect(drained.patch.drainUntil).toBe(T0 + DRAIN_MS);
    // What `models NAME` says meanwhile: the old replica draining, its requests and time left.
    w.clock.advance(8_000);
    const during = rolloutView(w.snap.models[0]!, w.snap.modelState[0], w.snap.replicas, 2, w.clock.now(), w.inflight);
    expect(during?.text).toBe(`1 of 2 replaced, old replica ${drained.id} draining (3 requests in flight, 22 s left)`);
    w.clock.advance(DRAIN_MS - 8_000 - 1);
    w.step();
    w.agents();
    expect(w.snap.replicas.find((r) => r.id === drained.id)).toMatchObject({ state: "draining", drainUntil: T0 + DRAIN_MS });
    w.clock.advance(1);
    const released = w.step();
    expect(released.update).toContainEqual({ id: drained.id, patch: { drainUntil: null } });
    expect(released.events.find((e) => e.kind === "replica.drained")).toMatchObject({ subject: `replica/${drained.id}`, data: { timed_out: true } });
  });

  test("a drained old replica is stopped as soon as it has nothing in flight", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.setSpec(spec(["--b"]));
    w.step();
    w.agents();
    w.inflight.set("old0", 2);
    w.inflight.set("old1", 2);
    const id = w.step().update.find((u) => u.patch.state === "draining")!.id;
    w.clock.advance(1000);
    expect(w.step().update.some((u) => u.id === id)).toBe(false);
    w.inflight.delete(id);
    w.clock.advance(1000);
    expect(w.step().update).toContainEqual({ id, patch: { drainUntil: null } });
  });

  test("a second change mid-roll: the first change's new replicas are outdated too, the roll goes on towards the newest", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.setSpec(spec(["--b"]));
    const first = w.step();
    const surge1 = first.create[0]!.id;
    w.setSpec(spec(["--c"]));
    const second = w.step();
    // Still starting with the outdated spec: stopped at once (it serves nothing yet).
    expect(second.update).toContainEqual({ id: surge1, patch: { state: "draining" } });
    w.agents();
    w.rollToEnd();
    expect(w.minReady).toBe(2);
    const newest = launchOf(spec(["--c"]), "default");
    expect(w.snap.replicas.every((r) => r.launch === newest)).toBe(true);
    expect(w.snap.replicas.some((r) => r.id === surge1)).toBe(false);
  });

  test("`models restart` marks replicas outdated: they roll the same way onto the same spec", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.snap = { ...w.snap, replicas: w.snap.replicas.map((r) => ({ ...r, launch: RESTART_MARK })) };
    w.rollToEnd();
    expect(w.minReady).toBe(2);
    expect(w.maxStartingNew).toBe(1);
    expect(w.snap.replicas.map((r) => r.id).sort()).toEqual(["new1", "new2"]);
  });

  test("replicas from before launch fingerprints are stamped with the current one, not rolled", () => {
    const w = new World(3, spec(["--a"]), 2);
    w.snap = { ...w.snap, replicas: w.snap.replicas.map((r) => ({ ...r, launch: null })) };
    const plan = w.step();
    expect(plan.create).toEqual([]);
    expect(plan.update).toEqual([
      { id: "old0", patch: { launch: launchOf(spec(["--a"]), "default")! } },
      { id: "old1", patch: { launch: launchOf(spec(["--a"]), "default")! } },
    ]);
  });
});
