// Step 5: the fleet as placement sees it once this step's removals are done, and the order
// requests are placed in.

import { describe, expect, test } from "bun:test";
import type { ModelRequest } from "../../../src/control/reconcile/desired";
import { byNeed, heldGpus, missingEngines, placementNodes } from "../../../src/control/reconcile/placements";
import { H, builder, ctxOf } from "./fixture";

describe("heldGpus", () => {
  test("starting, ready and draining replicas hold their cards; failed and removed ones do not", () => {
    const ctx = ctxOf({
      nodes: [{ name: "a", gpus: [H, H, H, H, H] }],
      replicas: [
        { id: "ready", model: "m", shards: [{ node: "a", gpus: [0] }] },
        { id: "draining", model: "m", state: "draining", shards: [{ node: "a", gpus: [1] }] },
        { id: "failed", model: "m", state: "failed", shards: [{ node: "a", gpus: [2] }] },
        { id: "removed", model: "m", shards: [{ node: "a", gpus: [3] }] },
        { id: "fails-now", model: "m", state: "starting", shards: [{ node: "a", gpus: [4] }] },
      ],
    });
    const b = builder();
    b.remove(ctx.snapshot.replicas[3]!);
    b.setState(ctx.snapshot.replicas[4]!, "failed");
    expect([...heldGpus(ctx, b)].map((k) => k.replace("\u0000", "/"))).toEqual(["a/0", "a/1"]);
  });
});

describe("missingEngines", () => {
  test("engines reported without a version, with why; unknown when the node has not said", () => {
    expect(missingEngines(undefined)).toBeUndefined();
    expect(missingEngines([{ engine: "vllm", version: "0.9.1", error: null }])).toBeUndefined();
    expect(missingEngines([{ engine: "vllm", version: null, error: "not on PATH" }, { engine: "sglang", version: null, error: null }])).toEqual(
      new Map([
        ["vllm", "not on PATH"],
        ["sglang", ""],
      ]),
    );
  });
});

describe("placementNodes", () => {
  test("every node with its state, GPUs marked used when held, weights and missing engines", () => {
    const ctx = ctxOf(
      {
        nodes: [
          { name: "a", fabrics: ["ib"], gpus: [H, H], models: ["m"] },
          { name: "c", gpus: [H], admin: "cordoned" },
        ],
      },
      { engines: new Map([["a", [{ engine: "sglang", version: null, error: "missing" }]]]) },
    );
    const nodes = placementNodes(ctx, new Set(["a\u00001"]));
    expect(nodes.map((n) => [n.name, n.state, n.fabrics, n.gpus.map((g) => g.used), [...n.weights]])).toEqual([
      ["a", "ready", ["ib"], [false, true], ["m"]],
      ["c", "cordoned", [], [false], []],
    ]);
    expect(nodes[0]!.missingEngines).toEqual(new Map([["sglang", "missing"]]));
    expect("missingEngines" in nodes[1]!).toBe(false);
  });
});

describe("byNeed", () => {
  const rq = (model: string, ready: number, desired: number) => ({ model, ready, desired }) as ModelRequest;
  test("models with nothing ready first, then the least covered, then by name", () => {
    const sorted = byNeed([rq("half", 1, 2), rq("z-none", 0, 1), rq("most", 3, 4), rq("a-none", 0, 3), rq("a-half", 2, 4)]);
    expect(sorted.map((r) => r.model)).toEqual(["a-none", "z-none", "a-half", "half", "most"]);
  });
});
