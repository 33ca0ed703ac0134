// Step 6: making room for an on-demand model that fits nowhere, by evicting the longest-idle
// replica that frees enough, within the rules that keep eviction from doing harm.

import { describe, expect, test } from "bun:test";
import type { ModelRequest } from "../../../src/control/reconcile/desired";
import { replicasByModel } from "../../../src/control/reconcile/desired";
import { heldGpus, placeShort, placementNodes } from "../../../src/control/reconcile/placements";
import { makeRoom } from "../../../src/control/reconcile/room";
import { model, type ReplicaDef } from "../../helpers/fleet";
import { H, T0, builder, ctxOf } from "./fixture";

const MIN = 60_000;
type Opts = { lastUsed?: Record<string, number>; others?: Partial<Parameters<typeof model>[0]>; askerPriority?: number; askerOnDemand?: boolean; replicas?: ReplicaDef[] };

/** One node, two cards, both held by replicas of "other"; "od" is asked for and fits nowhere. */
function run(o: Opts = {}) {
  const ctx = ctxOf(
    {
      nodes: [{ name: "a", gpus: [H, H] }],
      models: [
        model({ name: "od", on_demand: o.askerOnDemand ?? true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 1, priority: o.askerPriority ?? 0 }] }),
        model({ name: "other", idle_timeout: "10m", ...o.others }),
      ],
      replicas: o.replicas ?? [
        { id: "o1", model: "other", shards: [{ node: "a", gpus: [0] }] },
        { id: "o2", model: "other", shards: [{ node: "a", gpus: [1] }] },
      ],
    },
    { lastUsed: new Map(Object.entries(o.lastUsed ?? { o1: T0 - 20 * MIN, o2: T0 - 30 * MIN })) },
  );
  const b = builder();
  const requests: ModelRequest[] = [{ model: "od", count: 1, profiles: ctx.models.get("od")!.spec.profiles, placement: "binpack", nodesInUse: new Set(), ready: 0, desired: 1 }];
  const held = heldGpus(ctx, b);
  const pnodes = placementNodes(ctx, held);
  const result = placeShort(pnodes, requests);
  makeRoom(ctx, b, { requests, result, held, pnodes, byModel: replicasByModel(ctx.snapshot.replicas, b) });
  return { b, result };
}

describe("makeRoom", () => {
  test("the longest-idle replica is evicted and the asker placed on its cards, saying why", () => {
    const { b, result } = run();
    expect(b.plan.update).toEqual([{ id: "o2", patch: { state: "draining" } }]);
    expect(result.placed).toEqual([{ model: "od", profile: "p", shards: [{ node: "a", gpus: [1] }] }]);
    expect(result.unplaceable.has("od")).toBe(false);
    expect(b.plan.events).toEqual([
      {
        kind: "replica.evicted",
        subject: "replica/o2",
        message: "evicted replica o2 of other (idle 30m) to make room for od",
        data: { replica: "o2", model: "other", for_model: "od", idle_seconds: 1800 },
      },
    ]);
  });

  test("never a replica whose idleness is unknown", () => {
    const { b, result } = run({ lastUsed: { o1: T0 - 20 * MIN } });
    expect(b.plan.update.map((u) => u.id)).toEqual(["o1"]);
    expect(result.placed[0]!.shards[0]!.gpus).toEqual([0]);
    expect(run({ lastUsed: {} }).b.plan.update).toEqual([]);
  });

  test("never one idle for less than its own model's idle_timeout", () => {
    const { b, result } = run({ lastUsed: { o1: T0 - 9 * MIN, o2: T0 - 5 * MIN } });
    expect(b.plan.update).toEqual([]);
    expect(result.unplaceable.has("od")).toBe(true);
  });

  test("never taking a model below its min", () => {
    expect(run({ others: { replicas: { min: 2 } } }).b.plan.update).toEqual([]);
    expect(run({ others: { replicas: { min: 1 } } }).b.plan.update.map((u) => u.id)).toEqual(["o2"]);
  });

  test("never one of a model of higher priority (a lower number) than the asker", () => {
    expect(run({ askerPriority: 1 }).b.plan.update).toEqual([]);
  });

  test("a model that is not on demand makes no room", () => {
    const { b, result } = run({ askerOnDemand: false });
    expect(b.plan.update).toEqual([]);
    expect(result.unplaceable.has("od")).toBe(true);
  });
});
