// A heartbeat's news (registered, parked models tried again, reachable again) decided as part of
// the plan processReports returns, before the replicas' verdicts and on the model state as the
// news leaves it, so the intake reads once, decides once and writes once.

import { describe, expect, test } from "bun:test";
import { processReports } from "../../../src/control/reconciler";
import { UNPARKED, newsPlan } from "../../../src/control/reconcile/news";
import { T0, snapshot } from "../../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";

const cfg = { ...RECONCILE_DEFAULTS, maxFailures: 3 };

describe("node news in the heartbeat's plan", () => {
  test("registered, each parked model tried again, reachable again: events in that order, then the verdicts", () => {
    const snap = snapshot({ replicas: [{ id: "r1", model: "m", state: "starting", shards: [{ node: "n1", gpus: [0] }] }], modelState: [{ model: "m" }] });
    const plan = processReports({
      snapshot: snap,
      node: "n1",
      reports: [{ id: "r1", state: "ready", port: 8100, error: null }],
      now: T0,
      config: cfg,
      news: { registered: { address: "10.0.0.1", gpus: 2 }, unpark: { models: ["p1", "p2"], why: "new node n1" }, reachableAgain: true },
    });
    expect(plan.events.map((e) => [e.kind, e.subject, e.message])).toEqual([
      ["node.registered", "node/n1", "node n1 registered with 2 GPUs (10.0.0.1)"],
      ["model.unparked", "model/p1", "model p1 unparked (new node n1); it will be tried again"],
      ["model.unparked", "model/p2", "model p2 unparked (new node n1); it will be tried again"],
      ["node.reachable", "node/n1", "node n1 is heartbeating again"],
      ["replica.ready", "replica/r1", "replica r1 of m ready at http://10.0.0.1:8100"],
    ]);
    expect(plan.modelState.get("p1")).toEqual(UNPARKED);
    expect(plan.modelState.get("p2")).toEqual(UNPARKED);
    expect(plan.update).toEqual([{ id: "r1", patch: { state: "ready", readyAt: T0, error: null } }]);
  });

  test("no news, no verdicts: an empty plan, as before", () => {
    const plan = processReports({ snapshot: snapshot({}), node: "n1", reports: [], now: T0, config: cfg, news: {} });
    expect(plan.events).toEqual([]);
    expect(plan.modelState.size).toBe(0);
  });

  test("a failure reported with the news counts on the model as the news leaves it: tried again, so its count starts afresh", () => {
    const snap = snapshot({
      replicas: [{ id: "r1", model: "m", state: "starting", shards: [{ node: "n1", gpus: [0] }] }],
      modelState: [{ model: "m", parked: true, failures: 3, reason: "broke", lastFailureAt: T0 - 1_000 }],
    });
    const plan = processReports({ snapshot: snap, node: "n1", reports: [{ id: "r1", state: "failed", port: null, error: "oom" }], now: T0, config: cfg, news: { unpark: { models: ["m"], why: "new node n1" } } });
    // Unparked, then one failed start: failures 1, not 4, and not parked again.
    expect(plan.modelState.get("m")).toEqual({ ...UNPARKED, failures: 1, lastFailureAt: T0, reason: "oom (log: llmgw logs --previous r1)" });
    expect(plan.events.map((e) => e.kind)).toEqual(["model.unparked", "replica.failed"]);
  });

  test("newsPlan alone writes into the plan it is given", () => {
    const plan = newsPlan("n2", { registered: { address: "10.0.0.2", gpus: 1 } });
    newsPlan("n3", { reachableAgain: true }, plan);
    expect(plan.events.map((e) => e.message)).toEqual(["node n2 registered with 1 GPU (10.0.0.2)", "node n3 is heartbeating again"]);
  });
});
