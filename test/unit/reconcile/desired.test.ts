// Step 4: per model, desired state against what it has: drains that never leave it with fewer
// ready, surplus in a fixed order, failed records kept only while they explain something, and
// what is short as a placement request.

import { describe, expect, test } from "bun:test";
import { type ModelRequest, decideModel, decideModels, forgetFailed, moveOffDraining, replicasByModel, stopSurplus } from "../../../src/control/reconcile/desired";
import { model, type ReplicaDef } from "../../helpers/fleet";
import { H, T0, builder, ctxOf, type FleetOpts } from "./fixture";

const on = (node: string, gpu: number) => [{ node, gpus: [gpu] }];
function fleet(replicas: ReplicaDef[], opts: Partial<FleetOpts> = {}): FleetOpts {
  return {
    nodes: [
      { name: "a", gpus: [H, H, H, H] },
      { name: "d", gpus: [H, H, H, H], admin: "draining" },
    ],
    models: [model({ name: "m", replicas: { min: 2 } })],
    replicas,
    ...opts,
  };
}

describe("replicasByModel", () => {
  test("groups what is not removed, in snapshot order", () => {
    const ctx = ctxOf(fleet([
      { id: "r1", model: "m", shards: on("a", 0) },
      { id: "r2", model: "x", shards: on("a", 1) },
      { id: "r3", model: "m", shards: on("a", 2) },
    ]));
    const b = builder();
    b.remove(ctx.snapshot.replicas[1]!);
    expect([...replicasByModel(ctx.snapshot.replicas, b)].map(([m, l]) => [m, l.map((r) => r.id)])).toEqual([["m", ["r1", "r3"]]]);
  });
});

describe("decideModel", () => {
  const decide = (ctx: ReturnType<typeof ctxOf>, b = builder()) => {
    const m = ctx.snapshot.models[0]!;
    return { b, d: decideModel(ctx, b, m, ctx.modelState.get(m.name), ctx.snapshot.replicas.filter((r) => r.model === m.name)) };
  };

  test("short: a request for what is missing, avoiding (for spread) the nodes it already runs on", () => {
    const { d } = decide(ctxOf(fleet([{ id: "r1", model: "m", shards: on("a", 0) }])));
    expect(d).toMatchObject({ model: "m", count: 1, placement: "binpack", ready: 1, desired: 2 });
    expect((d as ModelRequest).nodesInUse).toEqual(new Set(["a"]));
  });

  test("covered: satisfied, and nothing changes", () => {
    const { b, d } = decide(ctxOf(fleet([{ id: "r1", model: "m", shards: on("a", 0) }, { id: "r2", model: "m", state: "starting", shards: on("a", 1) }])));
    expect(d).toBe("satisfied");
    expect(b.plan.update).toEqual([]);
  });

  test("parked: neither a request nor satisfied", () => {
    const { d } = decide(ctxOf(fleet([], { modelState: [{ model: "m", parked: true, failures: 5 }] })));
    expect(d).toBeUndefined();
  });

  test("in backoff, counting a failure recorded earlier in this step: no request yet", () => {
    const ctx = ctxOf(fleet([]));
    const b = builder();
    b.setModel("m", { failures: 1, lastFailureAt: T0 });
    expect(decide(ctx, b).d).toBeUndefined();
    // Past the backoff (2s for one failure) it asks again.
    const later = ctxOf(fleet([]), { now: T0 + 2_000 });
    const b2 = builder();
    b2.setModel("m", { failures: 1, lastFailureAt: T0 });
    expect(decide(later, b2).d).toMatchObject({ count: 2 });
  });

  test("a failure this step parks it: no request", () => {
    const b = builder();
    b.setModel("m", { parked: true });
    expect(decide(ctxOf(fleet([])), b).d).toBeUndefined();
  });
});

describe("moveOffDraining", () => {
  test("a ready replica on a draining node stops only once the rest cover what is wanted; a starting one at once", () => {
    const ctx = ctxOf(fleet([
      { id: "ready", model: "m", shards: on("d", 0) },
      { id: "starting", model: "m", state: "starting", shards: on("d", 1) },
    ]));
    const [ready, starting] = ctx.snapshot.replicas;
    const short = builder();
    moveOffDraining(short, "m", [ready!, starting!], 1, 2);
    expect(short.plan.update.map((u) => u.id)).toEqual(["starting"]);
    const covered = builder();
    moveOffDraining(covered, "m", [ready!, starting!], 2, 2);
    expect(covered.plan.update.map((u) => u.id)).toEqual(["ready", "starting"]);
    expect(covered.plan.events[0]!.message).toBe("stopping replica ready of m: its node d is draining and 2 ready elsewhere cover it");
  });
});

describe("stopSurplus", () => {
  test("starting first, then the longest idle; unknown idleness counts as busy; returns the ready ones stopped", () => {
    const ctx = ctxOf(
      fleet([
        { id: "busy", model: "m", shards: on("a", 0) },
        { id: "unknown", model: "m", shards: on("a", 1) },
        { id: "idle", model: "m", shards: on("a", 2) },
        { id: "starting", model: "m", state: "starting", shards: on("a", 3) },
      ]),
      { lastUsed: new Map([["busy", T0 - 1_000], ["idle", T0 - 600_000]]) },
    );
    const b = builder();
    expect(stopSurplus(ctx, b, "m", ctx.snapshot.replicas, 1)).toBe(2);
    expect(b.plan.update.map((u) => u.id)).toEqual(["starting", "idle", "busy"]);
    expect(b.plan.events[0]!.message).toBe("stopping replica starting of m: it wants 1, has 4");
  });

  test("no surplus, nothing stopped", () => {
    const ctx = ctxOf(fleet([{ id: "r1", model: "m", shards: on("a", 0) }]));
    const b = builder();
    expect(stopSurplus(ctx, b, "m", ctx.snapshot.replicas, 1)).toBe(0);
    expect(b.plan.update).toEqual([]);
  });
});

describe("forgetFailed", () => {
  const ctx = ctxOf(fleet([
    { id: "old", model: "m", state: "failed", shards: on("a", 0) },
    { id: "new", model: "m", state: "failed", shards: on("a", 1) },
  ]));
  ctx.snapshot.replicas[0]!.updatedAt = T0 - 1_000;

  test("while the model is short the newest failure stays to explain it", () => {
    const b = builder();
    forgetFailed(b, ctx.snapshot.replicas, false);
    expect(b.plan.remove).toEqual(["old"]);
  });

  test("once it is satisfied none stays", () => {
    const b = builder();
    forgetFailed(b, ctx.snapshot.replicas, true);
    expect(b.plan.remove).toEqual(["new", "old"]);
  });
});

describe("decideModels", () => {
  test("requests and satisfied models in catalog order", () => {
    const ctx = ctxOf({
      nodes: [{ name: "a", gpus: [H, H] }],
      models: [model({ name: "b-short" }), model({ name: "a-full" }), model({ name: "c-zero", replicas: { min: 0 } })],
      replicas: [{ id: "r", model: "a-full", shards: on("a", 0) }],
    });
    const b = builder();
    const d = decideModels(ctx, b, ctx.modelState, replicasByModel(ctx.snapshot.replicas, b));
    expect(d.requests.map((r) => r.model)).toEqual(["b-short"]);
    expect(d.satisfied).toEqual(["a-full", "c-zero"]);
  });
});
