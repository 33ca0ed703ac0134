// "Can never fit on this fleet" against "not now": judged on the fleet as if every node were
// ready and every card free, so only a class, a card count or a fabric size nobody has is never.

import { describe, expect, test } from "bun:test";
import { fleetCapacity, modelNeverFits, profileNeverFits } from "../../src/control/capacity";
import { buildTables } from "../../src/control/views";
import { T0, model, snapshot } from "../helpers/fleet";

const h100 = (n: number) => Array.from({ length: n }, () => "H100-80GB");
const fleet = snapshot({
  nodes: [
    { name: "a", fabrics: ["ib-a"], gpus: h100(8), admin: "cordoned" },
    { name: "b", fabrics: ["ib-a"], gpus: h100(8), unhealthy: [0, 1, 2, 3, 4, 5, 6, 7] },
    { name: "c", fabrics: ["ib-b"], gpus: h100(8), lastHeartbeat: T0 - 3_600_000 },
    { name: "d", fabrics: ["ib-b"], gpus: ["A100-80GB", "A100-80GB"] },
  ],
  now: T0,
});
const cap = fleetCapacity(fleet);

describe("never fits", () => {
  test("a class no node has is never, with the nearest known class suggested", () => {
    expect(profileNeverFits(cap, { gpu_class: "H200-141GB", gpus: 1, nodes: 1 })).toBe("no node has H200-141GB GPUs (the fleet has A100-80GB, H100-80GB)");
    expect(profileNeverFits(cap, { gpu_class: "h100-80gb", gpus: 1, nodes: 1 })).toBe("no node has h100-80gb GPUs (did you mean H100-80GB?)");
    expect(profileNeverFits(cap, { gpu_class: "H100-80G", gpus: 1, nodes: 1 })).toContain("did you mean H100-80GB?");
  });
  test("more cards than any node has is never; busy, cordoned, unhealthy or unreachable cards are not", () => {
    expect(profileNeverFits(cap, { gpu_class: "H100-80GB", gpus: 16, nodes: 1 })).toBe("no node has 16 H100-80GB GPUs (the largest has 8)");
    // Node a is cordoned, b all unhealthy, c unreachable: all of them could come back.
    expect(profileNeverFits(cap, { gpu_class: "H100-80GB", gpus: 8, nodes: 1 })).toBeUndefined();
  });
  test("a multi-node replica needs that many such nodes in one fabric", () => {
    expect(profileNeverFits(cap, { gpu_class: "H100-80GB", gpus: 8, nodes: 2 })).toBeUndefined();
    expect(profileNeverFits(cap, { gpu_class: "H100-80GB", gpus: 8, nodes: 3 })).toBe("needs 3 H100-80GB nodes with 8 GPUs each in one fabric, and no fabric has more than 2");
  });
  test("a model never fits only when none of its profiles can", () => {
    const two = model({ name: "m", profiles: [{ name: "big", engine: "vllm", gpu_class: "H100-80GB", gpus: 16 }, { name: "a100", engine: "vllm", gpu_class: "A100-80GB", gpus: 2 }] });
    expect(modelNeverFits(cap, two)).toBeUndefined();
    const none = model({ name: "m", profiles: [{ name: "big", engine: "vllm", gpu_class: "H100-80GB", gpus: 16 }, { name: "h200", engine: "vllm", gpu_class: "H200-141GB" }] });
    expect(modelNeverFits(cap, none)).toBe("big: no node has 16 H100-80GB GPUs (the largest has 8); h200: no node has H200-141GB GPUs (the fleet has A100-80GB, H100-80GB)");
  });
  test("a fleet with no node yet judges nothing never (a cluster still booting)", () => {
    expect(modelNeverFits(fleetCapacity(snapshot({ nodes: [], now: T0 })), model({ name: "m" }))).toBeUndefined();
  });
  test("the model view says which: never_fits with a reason that says waiting will not help", () => {
    const s = snapshot({ nodes: [{ name: "a", fabrics: ["ib-a"], gpus: h100(8) }], models: [model({ name: "huge", profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB", gpus: 16 }] })], now: T0 });
    const v = buildTables({ snapshot: s, now: T0, lastUsed: new Map(), nodeTimeoutMs: 15_000 }).models[0]!;
    expect(v.unplaceable).toBe(true);
    expect(v.never_fits).toBe(true);
    expect(v.reason).toBe("can never fit on this fleet: no node has 16 H100-80GB GPUs (the largest has 8); waiting will not help (add such nodes, or change the model's profiles)");
  });
});
