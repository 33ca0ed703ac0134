// Step 1: replicas lost with their nodes are forgotten without blame; replicas starting past
// the head node's deadline fail, and that failure counts.

import { describe, expect, test } from "bun:test";
import { lostShard, overdueError, retireLostAndOverdue } from "../../../src/control/reconcile/lost";
import { model } from "../../helpers/fleet";
import { H, T0, builder, ctxOf } from "./fixture";

// nodeTimeout 15s + replaceAfter 30s: a node silent for over 45s is gone for good.
const GONE = 46_000;

describe("lostShard", () => {
  test("a shard on a node the store no longer has is lost", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }], replicas: [{ id: "r", model: "m", shards: [{ node: "a", gpus: [0] }, { node: "x", gpus: [0] }] }] });
    expect(lostShard(ctx, ctx.snapshot.replicas[0]!)).toEqual({ node: "x", gpus: [0] });
  });

  test("unreachable past the replacement delay is lost; unreachable for less is not", () => {
    const fleet = (silent: number) => ({ nodes: [{ name: "a", gpus: [H], lastHeartbeat: T0 - silent }], replicas: [{ id: "r", model: "m", shards: [{ node: "a", gpus: [0] }] }] });
    const lost = ctxOf(fleet(GONE));
    expect(lostShard(lost, lost.snapshot.replicas[0]!)?.node).toBe("a");
    const late = ctxOf(fleet(40_000));
    expect(lostShard(late, late.snapshot.replicas[0]!)).toBeUndefined();
  });

  test("silence while the head node itself was deaf (a stall, a queue) does not count toward replacement", () => {
    const fleet = { nodes: [{ name: "a", gpus: [H], lastHeartbeat: T0 - GONE }], replicas: [{ id: "r", model: "m", shards: [{ node: "a", gpus: [0] }] }] };
    // Deaf for 20 s of the 46 s: 26 s of real silence, unreachable but not yet replaced.
    const ctx = ctxOf(fleet, { deaf: [{ end: T0 - 5_000, ms: 20_000 }] });
    expect(ctx.nodeState.get("a")).toBe("unreachable");
    expect(lostShard(ctx, ctx.snapshot.replicas[0]!)).toBeUndefined();
    // Deaf for 40 s of it: 6 s of silence, the node is not even unreachable.
    const deafer = ctxOf(fleet, { deaf: [{ end: T0 - 1_000, ms: 40_000 }] });
    expect(deafer.nodeState.get("a")).toBe("ready");
    // The same silence without the stall: replaced.
    const plain = ctxOf(fleet);
    expect(lostShard(plain, plain.snapshot.replicas[0]!)?.node).toBe("a");
  });

  test("silence before the control plane started watching is no evidence", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H], lastHeartbeat: T0 - 10 * GONE }], replicas: [{ id: "r", model: "m", shards: [{ node: "a", gpus: [0] }] }] }, { watchedSince: T0 - 20_000 });
    expect(ctx.nodeState.get("a")).toBe("unreachable");
    expect(lostShard(ctx, ctx.snapshot.replicas[0]!)).toBeUndefined();
  });
});

describe("overdueError", () => {
  const fleet = (state: "starting" | "ready", start_timeout?: string) => ({
    nodes: [{ name: "a", gpus: [H] }],
    models: [model({ name: "m", profiles: [{ name: "default", engine: "vllm", gpu_class: H, gpus: 1, ...(start_timeout ? { start_timeout } : {}) }] })],
    replicas: [{ id: "r", model: "m", state, shards: [{ node: "a", gpus: [0] }] }],
  });

  test("starting past start timeout + margin is overdue, saying both", () => {
    const ctx = ctxOf(fleet("starting", "1m"), { now: T0 + 60_000 + 70_001 });
    expect(overdueError(ctx, ctx.snapshot.replicas[0]!)).toBe("not ready 130s after it was placed (start timeout 60s + 70s for the agent to launch it and report)");
  });

  test("within the deadline, or not starting, is not overdue", () => {
    const inTime = ctxOf(fleet("starting", "1m"), { now: T0 + 130_000 });
    expect(overdueError(inTime, inTime.snapshot.replicas[0]!)).toBeUndefined();
    const ready = ctxOf(fleet("ready", "1m"), { now: T0 + 3_600_000 });
    expect(overdueError(ready, ready.snapshot.replicas[0]!)).toBeUndefined();
  });

  test("without a profile start_timeout the configured one applies, and the agent's last error is kept", () => {
    const ctx = ctxOf(fleet("starting"), { now: T0 + 200_000, config: { startTimeoutMs: 100_000, startMarginMs: 10_000 } });
    const r = { ...ctx.snapshot.replicas[0]!, error: "loading weights" };
    expect(overdueError(ctx, r)).toBe("not ready 110s after it was placed (start timeout 100s + 10s for the agent to launch it and report): loading weights");
  });
});

describe("retireLostAndOverdue", () => {
  test("a lost replica is removed with an event; a failed one that is lost is removed silently", () => {
    const ctx = ctxOf({
      nodes: [{ name: "a", gpus: [H, H], lastHeartbeat: T0 - GONE }],
      replicas: [
        { id: "r1", model: "m", shards: [{ node: "a", gpus: [0] }] },
        { id: "r2", model: "m", state: "failed", shards: [{ node: "a", gpus: [1] }] },
      ],
    });
    const b = builder();
    retireLostAndOverdue(ctx, b);
    expect(b.plan.remove).toEqual(["r1", "r2"]);
    expect(b.plan.events.map((e) => [e.kind, e.subject])).toEqual([["replica.lost", "replica/r1"]]);
    expect(b.plan.events[0]!.message).toBe("replica r1 of m lost: node a unreachable for over 45s; replacing it");
    // Not the model's fault: nothing counted against it.
    expect(b.plan.modelState.size).toBe(0);
  });

  test("an overdue replica fails, with an event, and the failure is counted against its model", () => {
    const ctx = ctxOf(
      { nodes: [{ name: "a", gpus: [H], lastHeartbeat: T0 + 200_000 }], models: [model({ name: "m" })], replicas: [{ id: "r", model: "m", state: "starting", shards: [{ node: "a", gpus: [0] }] }] },
      { now: T0 + 200_000, config: { startTimeoutMs: 100_000, startMarginMs: 10_000 } },
    );
    const b = builder();
    retireLostAndOverdue(ctx, b);
    expect(b.plan.update).toEqual([{ id: "r", patch: { state: "failed", error: expect.stringContaining("not ready 110s") } }]);
    expect(b.stateOf(ctx.snapshot.replicas[0]!)).toBe("failed");
    expect(b.plan.events.map((e) => e.kind)).toEqual(["replica.failed"]);
    expect(b.plan.modelState.get("m")).toMatchObject({ failures: 1, lastFailureAt: T0 + 200_000 });
  });
});
