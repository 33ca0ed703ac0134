// Step 8: placement reasons are recorded when they change and cleared once the model has what
// it wants.

import { describe, expect, test } from "bun:test";
import { recordReasons } from "../../../src/control/reconcile/reasons";
import { builder, ctxOf } from "./fixture";

const state = (reasons: Record<string, string | null>) => ctxOf({ modelState: Object.entries(reasons).map(([model, unplaceableReason]) => ({ model, unplaceableReason })) }).modelState;

describe("recordReasons", () => {
  test("a new reason is recorded with an event; the same reason again is not", () => {
    const b = builder();
    recordReasons(b, state({ same: "full", changed: "old" }), new Map([["same", "full"], ["changed", "new"], ["first", "no GPUs"]]), [], []);
    expect([...b.plan.modelState]).toEqual([
      ["changed", { unplaceableReason: "new" }],
      ["first", { unplaceableReason: "no GPUs" }],
    ]);
    expect(b.plan.events.map((e) => e.message)).toEqual(["cannot place changed: new", "cannot place first: no GPUs"]);
  });

  test("cleared for a model placed this step, or satisfied; left alone when there is nothing to clear", () => {
    const b = builder();
    recordReasons(b, state({ placed: "full", satisfied: "full", still: "full", clean: null }), new Map([["still", "full"]]), [{ model: "placed" }, { model: "still" }, { model: "clean" }], ["satisfied"]);
    expect([...b.plan.modelState]).toEqual([
      ["placed", { unplaceableReason: null }],
      ["satisfied", { unplaceableReason: null }],
    ]);
    expect(b.plan.events).toEqual([]);
  });
});
