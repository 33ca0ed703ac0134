// The pieces the Controller was cut into, each on its own: load-based scaling (its low-since
// state in and out), the catalog's name and revision rules, node reachability, and the broker
// of assignment generations and long polls (timed by a manual scheduler, so nothing sleeps).

import { describe, expect, test } from "bun:test";
import { AssignmentBroker, WAIT_JITTER } from "../../src/control/broker";
import { catalogChanges } from "../../src/control/catalog";
import { reachability } from "../../src/control/reachability";
import { scale } from "../../src/control/scaling";
import type { ModelRow, ModelStateRow, NodeRow } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { Assignment } from "../../src/protocol/heartbeat";
import { T0, model } from "../helpers/fleet";

const row = (spec: ReturnType<typeof model>, revision = 1): ModelRow => ({ name: spec.name, spec, revision, createdAt: T0, updatedAt: T0 });
const state = (m: string, scaleTarget: number | null): ModelStateRow => ({
  model: m,
  failures: 0,
  crashes: 0,
  parked: false,
  reason: null,
  lastFailureAt: null,
  lastRequestedAt: null,
  scaleTarget,
  unplaceableReason: null,
});

describe("scale", () => {
  const elastic = row(model({ name: "m", replicas: { min: 1, max: 6 }, target_inflight: 4 }));
  const at = (load: number, current: number | null, now: number, lowSince: ReadonlyMap<string, number> = new Map()) =>
    scale({ models: [elastic], modelState: [state("m", current)], inflight: new Map([["m", load]]), now, delayMs: 60_000, lowSince });

  test("up at once to what the load asks for, within max", () => {
    expect(at(13, 1, T0).changes).toEqual([{ model: "m", from: 1, to: 4, load: 13, perReplica: 4 }]);
    expect(at(100, 1, T0).changes[0]!.to).toBe(6);
  });

  test("down one step, only after the load stayed low for the delay; the state goes in and comes out", () => {
    const first = at(0, 4, T0);
    expect(first.changes).toEqual([]);
    expect(first.lowSince.get("m")).toBe(T0);
    expect(at(0, 4, T0 + 59_999, first.lowSince).changes).toEqual([]);
    const later = at(0, 4, T0 + 60_000, first.lowSince);
    expect(later.changes).toEqual([{ model: "m", from: 4, to: 3, load: 0, perReplica: 4 }]);
    // The next step down waits a whole delay again.
    expect(later.lowSince.get("m")).toBe(T0 + 60_000);
    // The input map is not changed.
    expect(first.lowSince.get("m")).toBe(T0);
  });

  test("no step down while one replica fewer would be at 80% of target or more; the low-since mark is dropped", () => {
    // 3 replicas, load 7: wanted 2, but 7 ≥ 2 × 4 × 0.8 = 6.4.
    const r = at(7, 3, T0 + 120_000, new Map([["m", T0]]));
    expect(r.changes).toEqual([]);
    expect(r.lowSince.has("m")).toBe(false);
  });

  test("a clock that went back restarts the low-since mark instead of scaling down", () => {
    const r = at(0, 4, T0 - 1_000, new Map([["m", T0]]));
    expect(r.changes).toEqual([]);
    expect(r.lowSince.get("m")).toBe(T0 - 1_000);
  });

  test("models without target_inflight, or with min = max, are left alone", () => {
    const fixed = row(model({ name: "f", replicas: { min: 2, max: 2 }, target_inflight: 1 }));
    const plain = row(model({ name: "p", replicas: { min: 1, max: 4 } }));
    const r = scale({ models: [fixed, plain], modelState: [], inflight: new Map([["f", 50], ["p", 50]]), now: T0, delayMs: 0, lowSince: new Map() });
    expect(r.changes).toEqual([]);
  });
});

describe("catalog rules", () => {
  const stored = [row(model({ name: "llama", aliases: ["l3"] }), 3)];
  const conflict = (r: ReturnType<typeof catalogChanges>) => r.conflicts;

  test("new, changed and unchanged specs: created at revision 1, configured at the next, unchanged not written", () => {
    const { results, writes } = catalogChanges([model({ name: "new" }), model({ name: "llama", aliases: ["l3", "l"] }), model({ name: "llama2" })], stored);
    expect(results).toEqual([
      { name: "new", result: "created", revision: 1 },
      { name: "llama", result: "configured", revision: 4 },
      { name: "llama2", result: "created", revision: 1 },
    ]);
    expect(writes.map((w) => [w.spec.name, w.revision, w.created])).toEqual([["new", 1, true], ["llama", 4, false], ["llama2", 1, true]]);
    const same = catalogChanges([stored[0]!.spec], stored);
    expect(same).toEqual({ results: [{ name: "llama", result: "unchanged", revision: 3 }], writes: [], conflicts: [] });
  });

  test("an alias that is another model's name, or another model's alias, is refused with the field's path", () => {
    expect(conflict(catalogChanges([model({ name: "x", aliases: ["llama"] })], stored))).toEqual([{ message: 'alias "llama" of model "x" is the name of model "llama"', path: ["aliases", 0] }]);
    expect(conflict(catalogChanges([model({ name: "x", aliases: ["ok", "l3"] })], stored))).toEqual([{ message: 'alias "l3" of model "x" is already an alias of model "llama"', path: ["aliases", 1] }]);
    expect(conflict(catalogChanges([model({ name: "l3" })], stored))).toEqual([{ message: 'name "l3" is already an alias of model "llama"', path: ["name"] }]);
  });

  test("a batch is judged in order, names the model's index in a file, and every conflict is found in one pass", () => {
    expect(conflict(catalogChanges([model({ name: "a", aliases: ["b"] }), model({ name: "b" })], [], true))).toEqual([{ message: 'name "b" is already an alias of model "a"', path: ["models", 1, "name"] }]);
    const all = catalogChanges([model({ name: "x", aliases: ["llama"] }), model({ name: "ok" }), model({ name: "l3" })], stored, true);
    expect(all.conflicts).toEqual([
      { message: 'alias "llama" of model "x" is the name of model "llama"', path: ["models", 0, "aliases", 0] },
      { message: 'name "l3" is already an alias of model "llama"', path: ["models", 2, "name"] },
    ]);
    // Holes (models refused for other reasons) are skipped, indices kept.
    expect(conflict(catalogChanges([undefined, model({ name: "l3" })], stored, true))).toEqual([{ message: 'name "l3" is already an alias of model "llama"', path: ["models", 1, "name"] }]);
    // An alias a model gives up in the same batch is free for the next one.
    expect(catalogChanges([model({ name: "llama" }), model({ name: "other", aliases: ["l3"] })], stored).results.map((r) => r.result)).toEqual(["configured", "created"]);
  });
});

describe("reachability", () => {
  const node = (name: string, lastHeartbeat: number): NodeRow => ({ name, address: "10.0.0.1", labels: {}, fabrics: [], adminState: "none", lastHeartbeat, agentVersion: "t", registeredAt: T0 });
  const input = { watchedSince: T0, nodeTimeoutMs: 15_000 };

  test("one event per outage; a node heard from again leaves the set", () => {
    const nodes = [node("a", T0), node("b", T0 + 20_000)];
    const first = reachability({ ...input, nodes, now: T0 + 20_000, unreachable: new Set() });
    expect(first.events).toEqual([{ kind: "node.unreachable", subject: "node/a", message: "node a unreachable: no heartbeat for 20s" }]);
    expect([...first.unreachable]).toEqual(["a"]);
    expect(reachability({ ...input, nodes, now: T0 + 30_000, unreachable: first.unreachable }).events).toEqual([]);
    const back = reachability({ ...input, nodes: [node("a", T0 + 31_000)], now: T0 + 31_000, unreachable: first.unreachable });
    expect(back.events).toEqual([]);
    expect(back.unreachable.size).toBe(0);
  });

  test("silence is counted only from when the control plane started watching", () => {
    const r = reachability({ ...input, watchedSince: T0 + 10_000, nodes: [node("a", T0)], now: T0 + 20_000, unreachable: new Set() });
    expect(r.events).toEqual([]);
  });
});

describe("assignment broker", () => {
  const a = (id: string) => ({ id }) as unknown as Assignment;

  test("generations start at the base and rise only when the set changes", () => {
    const b = new AssignmentBroker(1000, new ManualScheduler(T0));
    expect(b.current("n")).toEqual({ generation: 1000, assignments: [] });
    b.offer("n", [a("r-1")]);
    expect(b.current("n").generation).toBe(1001);
    b.offer("n", [a("r-1")]);
    expect(b.current("n").generation).toBe(1001);
    b.offer("n", []);
    expect(b.current("n")).toEqual({ generation: 1002, assignments: [] });
  });

  test("a long poll answers at once for another generation, on a change, on the scheduler's timeout, on abort and when the node is forgotten", async () => {
    const sched = new ManualScheduler(T0);
    const b = new AssignmentBroker(0, sched, () => 0);
    const settled = (p: Promise<void>) => Promise.race([p.then(() => true), sched.run(0).then(() => false)]);
    expect(await settled(b.wait("n", 7, 10_000))).toBe(true);
    expect(await settled(b.wait("n", 0, 0))).toBe(true);

    b.offer("n", []);
    const onChange = b.wait("n", 1, 10_000);
    b.offer("n", []);
    expect(await settled(onChange)).toBe(false); // the same set again is no change
    b.offer("n", [a("r-1")]);
    expect(await settled(onChange)).toBe(true);

    const onTimeout = b.wait("n", 2, 10_000);
    sched.advance(9_999);
    expect(await settled(onTimeout)).toBe(false);
    sched.advance(1);
    expect(await settled(onTimeout)).toBe(true);
    expect(sched.pending).toBe(0);

    const ac = new AbortController();
    const onAbort = b.wait("n", 2, 10_000, ac.signal);
    ac.abort();
    expect(await settled(onAbort)).toBe(true);
    expect(sched.pending).toBe(0);

    const onForget = b.wait("n", 2, 10_000);
    b.forget("n");
    expect(await settled(onForget)).toBe(true);
  });

  test("a nudge (new weight orders) answers the node's waiting poll with its set unchanged, or its next poll at once when none waits", async () => {
    const sched = new ManualScheduler(T0);
    const b = new AssignmentBroker(0, sched, () => 0);
    const settled = (p: Promise<void>) => Promise.race([p.then(() => true), sched.run(0).then(() => false)]);
    b.offer("n", []);
    const waiting = b.wait("n", 1, 10_000);
    b.nudge("other");
    expect(await settled(waiting)).toBe(false);
    b.nudge("n");
    expect(await settled(waiting)).toBe(true);
    expect(b.current("n").generation).toBe(1);
    // Nudged between two polls: the next is answered at once, the one after waits again.
    b.nudge("n");
    expect(await settled(b.wait("n", 1, 10_000))).toBe(true);
    const later = b.wait("n", 1, 10_000);
    expect(await settled(later)).toBe(false);
    sched.advance(10_000);
    expect(await settled(later)).toBe(true);
  });

  test("polls that nothing wakes end spread over the last WAIT_JITTER of their wait, never after it", async () => {
    const sched = new ManualScheduler(T0);
    const draws = [0, 0.5, 0.999];
    const b = new AssignmentBroker(0, sched, () => draws.shift()!);
    const ended: number[] = [];
    const t0 = sched.mono();
    for (let i = 0; i < 3; i++) void b.wait("n", 0, 16_000).then(() => ended.push(sched.mono() - t0));
    expect(WAIT_JITTER).toBe(1 / 16);
    for (let t = 0; t < 16_000; t += 100) {
      sched.advance(100);
      await sched.run(0);
    }
    // 16 s less 0, half and nearly all of a sixteenth.
    expect(ended.sort((x, y) => x - y)).toEqual([15_100, 15_500, 16_000]);
    expect(sched.pending).toBe(0);
  });
});
