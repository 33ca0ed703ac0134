// Step 3: an on-demand model in use counts as asked for: the router's newest last-used stamp
// of its replicas becomes its last request.

import { describe, expect, test } from "bun:test";
import { lastUseByModel, recordUse } from "../../../src/control/reconcile/demand";
import { model } from "../../helpers/fleet";
import { H, T0, builder, ctxOf, type FleetOpts } from "./fixture";

const fleet = (modelState: FleetOpts["modelState"] = []): FleetOpts => ({
  nodes: [{ name: "a", gpus: [H, H, H] }],
  models: [model({ name: "od", on_demand: true, replicas: { min: 0 } }), model({ name: "always" })],
  replicas: [
    { id: "o1", model: "od", shards: [{ node: "a", gpus: [0] }] },
    { id: "o2", model: "od", shards: [{ node: "a", gpus: [1] }] },
    { id: "w1", model: "always", shards: [{ node: "a", gpus: [2] }] },
  ],
  modelState,
});
const used = new Map([
  ["o1", T0 - 50_000],
  ["o2", T0 - 10_000],
  ["w1", T0 - 5_000],
]);

describe("lastUseByModel", () => {
  test("the newest stamp of any replica, per model; replicas never used are absent", () => {
    const ctx = ctxOf(fleet(), { lastUsed: new Map([...used].filter(([id]) => id !== "w1")) });
    expect([...lastUseByModel(ctx)]).toEqual([["od", T0 - 10_000]]);
  });
});

describe("recordUse", () => {
  test("an on-demand model's newest use is recorded as its last request, in the plan and in the state returned", () => {
    const ctx = ctxOf(fleet(), { lastUsed: used });
    const b = builder();
    const st = recordUse(ctx, b);
    expect([...b.plan.modelState]).toEqual([["od", { lastRequestedAt: T0 - 10_000 }]]);
    expect(st.get("od")).toEqual({ model: "od", failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: T0 - 10_000, scaleTarget: null, unplaceableReason: null });
    // Models that are always on are not tracked this way.
    expect(st.has("always")).toBe(false);
  });

  test("a use within a second of the recorded request is not news", () => {
    const ctx = ctxOf(fleet([{ model: "od", lastRequestedAt: T0 - 10_500 }]), { lastUsed: used });
    const b = builder();
    const st = recordUse(ctx, b);
    expect(b.plan.modelState.size).toBe(0);
    expect(st.get("od")!.lastRequestedAt).toBe(T0 - 10_500);
  });

  test("a stamp from the future (the clock went back) is ignored", () => {
    const ctx = ctxOf(fleet(), { lastUsed: new Map([["o1", T0 + 60_000]]) });
    const b = builder();
    recordUse(ctx, b);
    expect(b.plan.modelState.size).toBe(0);
  });

  test("the snapshot's own state is not changed", () => {
    const ctx = ctxOf(fleet([{ model: "od", failures: 2 }]), { lastUsed: used });
    recordUse(ctx, builder());
    expect(ctx.modelState.get("od")!.lastRequestedAt).toBeNull();
  });
});
