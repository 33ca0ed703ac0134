// Step 2: replicas of models no longer in the catalog stop; failed ones are forgotten.

import { describe, expect, test } from "bun:test";
import { stopUncatalogued } from "../../../src/control/reconcile/uncatalogued";
import { model } from "../../helpers/fleet";
import { H, builder, ctxOf } from "./fixture";

describe("stopUncatalogued", () => {
  const ctx = ctxOf({
    nodes: [{ name: "a", gpus: [H, H, H, H] }],
    models: [model({ name: "kept" })],
    replicas: [
      { id: "r-ready", model: "gone", shards: [{ node: "a", gpus: [0] }] },
      { id: "r-failed", model: "gone", state: "failed", shards: [{ node: "a", gpus: [1] }] },
      { id: "r-draining", model: "gone", state: "draining", shards: [{ node: "a", gpus: [2] }] },
      { id: "r-kept", model: "kept", shards: [{ node: "a", gpus: [3] }] },
    ],
  });

  test("running ones drain with an event, failed ones go, draining ones and catalogued models are left alone", () => {
    const b = builder();
    stopUncatalogued(ctx, b);
    expect(b.plan.update).toEqual([{ id: "r-ready", patch: { state: "draining" } }]);
    expect(b.plan.remove).toEqual(["r-failed"]);
    expect(b.plan.events).toEqual([{ kind: "replica.stopping", subject: "replica/r-ready", message: "stopping replica r-ready: model gone is no longer in the catalog" }]);
  });

  test("what an earlier step removed, or failed, is seen as such", () => {
    const b = builder();
    b.remove(ctx.snapshot.replicas[0]!);
    b.setState(ctx.snapshot.replicas[2]!, "failed");
    stopUncatalogued(ctx, b);
    expect(b.plan.remove).toEqual(["r-ready", "r-failed", "r-draining"]);
    expect(b.plan.events).toEqual([]);
  });
});
