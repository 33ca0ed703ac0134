// Crash loops: a replica that becomes ready and then crashes, again and again, is counted,
// restarted after a growing backoff, and its model parked with the crash's cause after
// max_failures crashes in a row; a replica ready for the whole crash window ends the loop.

import { describe, expect, test } from "bun:test";
import { type ReconcileConfig } from "../../../src/control/reconcile/config";
import { backoffNote, crashLoopReason, parkedAfter, recordCrash, settleCrashes } from "../../../src/control/reconcile/crashes";
import { decideModel } from "../../../src/control/reconcile/desired";
import { inBackoff } from "../../../src/control/reconcile/failures";
import { emptyPlan } from "../../../src/control/reconcile/plan";
import { processReports } from "../../../src/control/reconcile/reports";
import { type ModelStateRow, emptyModelState } from "../../../src/control/types";
import { model, snapshot } from "../../helpers/fleet";
import { H, T0, builder, ctxOf } from "./fixture";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";

const CFG: ReconcileConfig = { ...RECONCILE_DEFAULTS, maxFailures: 3, backoffMs: 2_000, backoffMaxMs: 60_000, crashWindowMs: 600_000 };
const ERROR = "exited with code 1: RuntimeError: CUDA error: an illegal memory access was encountered";
const state = (s: Partial<ModelStateRow> = {}): ModelStateRow => ({ ...emptyModelState("m"), ...s });

/** One ready replica of m on node a, ready since `readyAt`, and the model's state. */
function fleet(readyAt: number, st: Partial<ModelStateRow> = {}, now = T0) {
  const snap = snapshot({ nodes: [{ name: "a", gpus: [H] }], models: [model({ name: "m" })], replicas: [{ id: "r1", model: "m", shards: [{ node: "a", gpus: [0] }] }], modelState: [{ model: "m", ...st }], now });
  snap.replicas[0]!.readyAt = readyAt;
  return snap;
}
const crashReport = (error = ERROR) => [{ id: "r1", state: "failed" as const, port: 8100, error }];
/** What the model's reason and the events say of it: the cause, and the command that shows the rest. */
const SAID = `${ERROR} (log: llmgw logs --previous r1)`;

describe("a ready replica that crashes (processReports)", () => {
  test("is failed, and counts as the model's first crash, not as a failed start; the event says where the loop stands", () => {
    const plan = processReports({ snapshot: fleet(T0 - 30_000), node: "a", reports: crashReport(), now: T0, config: CFG });
    expect(plan.update).toEqual([{ id: "r1", patch: { state: "failed", error: ERROR, failures: 1 } }]);
    expect(plan.modelState.get("m")).toEqual({ crashes: 1, lastFailureAt: T0, reason: SAID });
    const [ev] = plan.events;
    expect(ev!.kind).toBe("replica.failed");
    expect(ev!.message).toBe(`replica r1 of m failed on a: ${SAID}; crash 1 of 3 before the model is parked; next start in 2s at the earliest`);
  });

  test("the crashes add up while each comes within the window of its replica's ready; the backoff doubles", () => {
    const plan = processReports({ snapshot: fleet(T0 - 60_000, { crashes: 1, lastFailureAt: T0 - 70_000 }), node: "a", reports: crashReport(), now: T0, config: CFG });
    expect(plan.modelState.get("m")).toMatchObject({ crashes: 2, lastFailureAt: T0 });
    expect(plan.events[0]!.message).toEndWith("; crash 2 of 3 before the model is parked; next start in 4s at the earliest");
    expect(plan.events.some((e) => e.kind === "model.parked")).toBe(false);
  });

  test("the max_failures-th crash in a row parks the model with the crash's cause, once", () => {
    const plan = processReports({ snapshot: fleet(T0 - 60_000, { crashes: 2, lastFailureAt: T0 - 70_000 }), node: "a", reports: crashReport(), now: T0, config: CFG });
    expect(plan.modelState.get("m")).toEqual({ crashes: 3, lastFailureAt: T0, parked: true, reason: `crashed within 10m of becoming ready, 3 times in a row; last: ${SAID}` });
    const parked = plan.events.filter((e) => e.kind === "model.parked");
    expect(parked.length).toBe(1);
    expect(parked[0]!.message).toBe(`model m parked after 3 crashes, each within 10m of becoming ready; not retried until unparked or changed. Last error: ${SAID}`);
    expect(plan.events.find((e) => e.kind === "replica.failed")!.message).toEndWith("; crash 3 in a row: the model is parked");
  });

  test("a replica that ran for the whole window before crashing starts the count again", () => {
    const plan = processReports({ snapshot: fleet(T0 - 600_000, { crashes: 2, lastFailureAt: T0 - 700_000 }), node: "a", reports: crashReport(), now: T0, config: CFG });
    expect(plan.modelState.get("m")).toMatchObject({ crashes: 1 });
    expect(plan.events.some((e) => e.kind === "model.parked")).toBe(false);
  });

  test("a model parked already keeps the reason it was parked for", () => {
    const plan = processReports({ snapshot: fleet(T0 - 1_000, { crashes: 0, failures: 3, parked: true, reason: "the start that parked it" }), node: "a", reports: crashReport(), now: T0, config: CFG });
    expect(plan.modelState.get("m")).toEqual({ crashes: 1, lastFailureAt: T0 });
    expect(plan.events.map((e) => e.kind)).toEqual(["replica.failed"]);
  });

  test("one the agent stopped or no longer runs is a failure as before, not a crash", () => {
    for (const reports of [[], [{ id: "r1", state: "stopped" as const, port: 8100, error: null }]]) {
      const plan = processReports({ snapshot: fleet(T0 - 1_000, { crashes: 2 }), node: "a", reports, now: T0, config: CFG });
      expect(plan.modelState.get("m")).toMatchObject({ failures: 1 });
      expect(plan.modelState.get("m")!.crashes).toBeUndefined();
    }
  });

  test("its replacement becoming ready clears failed starts but not the crash loop or its time", () => {
    const snap = snapshot({ nodes: [{ name: "a", gpus: [H] }], models: [model({ name: "m" })], replicas: [{ id: "r2", model: "m", state: "starting", shards: [{ node: "a", gpus: [0] }] }], modelState: [{ model: "m", failures: 1, crashes: 2, lastFailureAt: T0 - 5_000, reason: ERROR }] });
    const plan = processReports({ snapshot: snap, node: "a", reports: [{ id: "r2", state: "ready", port: 8100, error: null }], now: T0, config: CFG });
    expect(plan.modelState.get("m")).toEqual({ failures: 0 });
    // Without a crash loop, ready clears the failure's time and reason as before.
    const plain = snapshot({ nodes: [{ name: "a", gpus: [H] }], models: [model({ name: "m" })], replicas: [{ id: "r2", model: "m", state: "starting", shards: [{ node: "a", gpus: [0] }] }], modelState: [{ model: "m", failures: 1, lastFailureAt: T0 - 5_000, reason: ERROR }] });
    expect(processReports({ snapshot: plain, node: "a", reports: [{ id: "r2", state: "ready", port: 8100, error: null }], now: T0, config: CFG }).modelState.get("m")).toEqual({ failures: 0, lastFailureAt: null, reason: null });
  });
});

describe("recordCrash", () => {
  test("merges into what the plan already holds for the model (two crashes in one heartbeat count twice)", () => {
    const plan = emptyPlan();
    recordCrash(plan, { model: "m", readyAt: T0 - 1_000 }, state(), ERROR, T0, CFG);
    const v = recordCrash(plan, { model: "m", readyAt: T0 - 1_000 }, state(), ERROR, T0, CFG);
    expect(v).toEqual({ crashes: 2, parked: false, backoffMs: 4_000 });
    expect(plan.modelState.get("m")!.crashes).toBe(2);
  });

  test("a replica with no ready time counts as one that ran for no time", () => {
    const v = recordCrash(emptyPlan(), { model: "m", readyAt: null }, state({ crashes: 1 }), ERROR, T0, CFG);
    expect(v.crashes).toBe(2);
  });

  test("the backoff is capped at backoff_max", () => {
    const v = recordCrash(emptyPlan(), { model: "m", readyAt: T0 }, state({ crashes: 10 }), ERROR, T0, { ...CFG, maxFailures: 100 });
    expect(v.backoffMs).toBe(60_000);
  });
});

describe("backoff after crashes", () => {
  test("a model waits backoff × 2^(crashes-1) after its last crash before its next start", () => {
    expect(inBackoff(state({ crashes: 3, lastFailureAt: T0 }), T0 + 7_999, CFG)).toBe(true);
    expect(inBackoff(state({ crashes: 3, lastFailureAt: T0 }), T0 + 8_000, CFG)).toBe(false);
    // The longer of the two runs decides.
    expect(inBackoff(state({ failures: 1, crashes: 3, lastFailureAt: T0 }), T0 + 5_000, CFG)).toBe(true);
  });

  test("the model is not requested while it waits, and is once the wait is over", () => {
    const st = state({ crashes: 2, lastFailureAt: T0 });
    const fl = { nodes: [{ name: "a", gpus: [H] }], models: [model({ name: "m" })], modelState: [st] };
    const waiting = ctxOf(fl, { config: CFG, now: T0 + 3_000 });
    expect(decideModel(waiting, builder(), waiting.models.get("m")!, st, [])).toBeUndefined();
    const after = ctxOf(fl, { config: CFG, now: T0 + 4_000 });
    expect(decideModel(after, builder(), after.models.get("m")!, st, [])).toMatchObject({ model: "m", count: 1 });
  });

  test("explain's note says after what and for how long", () => {
    expect(backoffNote(state({ crashes: 2, lastFailureAt: T0 }), T0 + 1_000, CFG)).toBe("waits out its restart backoff after 2 crashes soon after becoming ready in a row (3s more)");
    expect(backoffNote(state({ failures: 1, lastFailureAt: T0 }), T0 + 500, CFG)).toBe("waits out its restart backoff after 1 failed start in a row (1500ms more)");
    expect(backoffNote(state({ crashes: 2, lastFailureAt: T0 }), T0 + 4_000, CFG)).toBeUndefined();
  });
});

describe("settleCrashes (the tick)", () => {
  const settle = (readyAt: number, st: Partial<ModelStateRow>, extra: { watchedSince?: number } = {}) => {
    const snap = fleet(readyAt, st);
    const ctx = ctxOf({}, { snapshot: snap, config: CFG, ...extra });
    const b = builder();
    settleCrashes(ctx, b);
    return b.plan.modelState.get("m");
  };

  test("a replica ready since the last crash for the whole window ends the loop", () => {
    expect(settle(T0 - 600_000, { crashes: 2, lastFailureAt: T0 - 601_000 })).toEqual({ crashes: 0 });
  });

  test("ready for less than the window, or ready since before the last crash, does not", () => {
    expect(settle(T0 - 599_999, { crashes: 2, lastFailureAt: T0 - 601_000 })).toBeUndefined();
    expect(settle(T0 - 900_000, { crashes: 2, lastFailureAt: T0 - 601_000 })).toBeUndefined();
  });

  test("a parked model keeps its count: it says why it is parked", () => {
    expect(settle(T0 - 900_000, { crashes: 3, parked: true, lastFailureAt: T0 - 901_000 })).toBeUndefined();
  });

  test("time the control plane did not watch is not time the replica was seen ready", () => {
    expect(settle(T0 - 700_000, { crashes: 2, lastFailureAt: T0 - 701_000 }, { watchedSince: T0 - 60_000 })).toBeUndefined();
  });
});

describe("what parked a model, in words", () => {
  test("crashes when they outnumber failed starts, else failed starts", () => {
    expect(parkedAfter({ failures: 0, crashes: 3 })).toBe("3 crashes");
    expect(parkedAfter({ failures: 5, crashes: 1 })).toBe("5 failed starts");
    expect(crashLoopReason(1, { crashWindowMs: 90_000 }, "x")).toBe("crashed within 1m of becoming ready, 1 time in a row; last: x");
  });
});
