// The plan builder: what one step decides about a replica is what the next one sees.

import { describe, expect, test } from "bun:test";
import { PlanBuilder, isEmpty } from "../../../src/control/reconcile/plan";
import { snapshot } from "../../helpers/fleet";

const [r] = snapshot({ nodes: [{ name: "a", gpus: ["H100-80GB"] }], replicas: [{ id: "r1", model: "m", shards: [{ node: "a", gpus: [0] }] }] }).replicas;

describe("PlanBuilder", () => {
  test("a new plan is empty, and a replica reads as the snapshot has it", () => {
    const b = new PlanBuilder();
    expect(isEmpty(b.plan)).toBe(true);
    expect(b.stateOf(r!)).toBe("ready");
    expect(b.isRemoved(r!)).toBe(false);
  });

  test("setState records the patch and is what stateOf answers from then on", () => {
    const b = new PlanBuilder();
    b.setState(r!, "failed", { error: "boom" });
    expect(b.stateOf(r!)).toBe("failed");
    expect(b.plan.update).toEqual([{ id: "r1", patch: { state: "failed", error: "boom" } }]);
    expect(isEmpty(b.plan)).toBe(false);
  });

  test("remove records the removal and marks the replica removed", () => {
    const b = new PlanBuilder();
    b.remove(r!);
    expect(b.isRemoved(r!)).toBe(true);
    expect(b.plan.remove).toEqual(["r1"]);
  });

  test("setModel merges into what the plan already says about the model", () => {
    const b = new PlanBuilder();
    b.setModel("m", { lastRequestedAt: 5 });
    b.setModel("m", { unplaceableReason: "full" });
    expect(b.plan.modelState.get("m")).toEqual({ lastRequestedAt: 5, unplaceableReason: "full" });
  });
});
