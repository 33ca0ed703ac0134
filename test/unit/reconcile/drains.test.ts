// Step 9: a draining node with nothing left on it is drained: cordoned and empty.

import { describe, expect, test } from "bun:test";
import { finishDrains } from "../../../src/control/reconcile/drains";
import type { ReplicaDef } from "../../helpers/fleet";
import { H, builder, ctxOf } from "./fixture";

const fleet = (replicas: ReplicaDef[]) =>
  ctxOf({
    nodes: [
      { name: "d", gpus: [H, H], admin: "draining" },
      { name: "a", gpus: [H] },
    ],
    replicas,
  });

describe("finishDrains", () => {
  test("empty: cordoned, with an event; nodes not draining are left alone", () => {
    const b = builder();
    finishDrains(fleet([{ id: "r", model: "m", shards: [{ node: "a", gpus: [0] }] }]), b);
    expect(b.plan.nodeAdmin).toEqual([{ node: "d", state: "cordoned" }]);
    expect(b.plan.events).toEqual([{ kind: "node.drained", subject: "node/d", message: "node d drained: cordoned and empty" }]);
  });

  test("a failed replica does not hold the drain up", () => {
    const b = builder();
    finishDrains(fleet([{ id: "r", model: "m", state: "failed", shards: [{ node: "d", gpus: [0] }] }]), b);
    expect(b.plan.nodeAdmin).toEqual([{ node: "d", state: "cordoned" }]);
  });

  test("a replica still on it (draining counts) holds it; one removed or failed earlier in the step does not", () => {
    const ctx = fleet([
      { id: "stays", model: "m", state: "draining", shards: [{ node: "d", gpus: [0] }] },
      { id: "goes", model: "m", shards: [{ node: "d", gpus: [1] }] },
    ]);
    const held = builder();
    finishDrains(ctx, held);
    expect(held.plan.nodeAdmin).toEqual([]);
    const done = builder();
    done.remove(ctx.snapshot.replicas[0]!);
    done.setState(ctx.snapshot.replicas[1]!, "failed");
    finishDrains(ctx, done);
    expect(done.plan.nodeAdmin).toEqual([{ node: "d", state: "cordoned" }]);
  });
});
