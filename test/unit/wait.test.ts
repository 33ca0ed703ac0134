// `drain --wait` and `apply --wait` against a scripted admin API and a fake clock: a drain that
// can never finish fails at once with why; nothing moving for the stall period is said once, with
// the cause, and the wait goes on; the timeout names what holds it up; progress resets the stall.

import { describe, expect, test } from "bun:test";
import { CliError, type Client } from "../../src/cli/client";
import { StallWatch, waitForDrain, waitForModels } from "../../src/cli/wait";
import type { ModelView, NodeDrain, NodeView, ReplicaView } from "../../src/protocol/views";

interface World {
  node: Partial<NodeView>;
  replicas: Partial<ReplicaView>[];
  models: Partial<ModelView>[];
}

/** A client over `world`, which `tick` may change before each poll; the clock moves 1 s per sleep. */
function harness(world: World, tick: (n: number, w: World) => void = () => {}) {
  let now = 0;
  let polls = 0;
  const out: string[] = [];
  const client = {
    async get<T>(path: string): Promise<T> {
      if (path.startsWith("/api/v1/events")) return [] as T;
      if (path === "/api/v1/replicas") return world.replicas as T;
      if (path === "/api/v1/models") return world.models as T;
      if (path.startsWith("/api/v1/nodes/")) {
        tick(polls++, world);
        return { name: "gpu-03", state: "draining", admin_state: "draining", ...world.node } as T;
      }
      throw new Error(`unexpected ${path}`);
    },
  } as unknown as Client;
  const opts = (timeoutMs: number, stallMs: number) => ({
    timeoutMs,
    stallMs,
    intervalMs: 1000,
    now: () => now,
    sleep: async (ms: number) => void (now += ms),
    write: (s: string) => void out.push(s),
  });
  return { client, opts, out, elapsed: () => now };
}

const rep = (id: string, node: string, state: ReplicaView["state"] = "ready", model = "llama-70b"): Partial<ReplicaView> => ({ id, model, state, shards: [{ node, gpus: [0] }] });
const drainOf = (d: Partial<NodeDrain>): NodeDrain => ({ remaining: 1, replicas: [], blocked: null, never: false, ...d });

describe("drain --wait", () => {
  test("a drain that can never finish fails at once with why", async () => {
    const h = harness({ node: { drain: drainOf({ never: true, blocked: "llama-70b has nowhere else to go: no other node has H100-80GB GPUs" }) }, replicas: [rep("r1", "gpu-03")], models: [] });
    const err = await waitForDrain(h.client, "gpu-03", h.opts(600_000, 120_000)).catch((e) => e);
    expect(err).toBeInstanceOf(CliError);
    expect((err as Error).message).toBe("drain of gpu-03 can never finish: llama-70b has nowhere else to go: no other node has H100-80GB GPUs");
    expect(h.elapsed()).toBe(0);
  });

  test("blocked: the stall is said once, with its cause; the timeout names it too", async () => {
    const blocked = "llama-70b has nowhere else to go now: no H100-80GB node has 4 free GPUs";
    const h = harness({ node: { drain: drainOf({ blocked, replicas: [{ id: "r1", model: "llama-70b", state: "ready", status: "blocked", reason: "x" }] }) }, replicas: [rep("r1", "gpu-03")], models: [] });
    const err = await waitForDrain(h.client, "gpu-03", h.opts(10_000, 3_000)).catch((e) => e);
    expect((err as Error).message).toBe(`drain of gpu-03 not done after 10s: ${blocked}; it goes on in the background (llmgw events -f to watch)`);
    const stalls = h.out.filter((l) => l.includes("stalled"));
    expect(stalls).toEqual([`node/gpu-03 stalled: nothing moved for 3s, 1 replica left: ${blocked}\n`]);
    // It kept waiting to the timeout after saying so.
    expect(h.elapsed()).toBeGreaterThanOrEqual(10_000);
  });

  test("progress resets the stall: a new replica ready elsewhere, then the node empty and cordoned", async () => {
    const h = harness({ node: { drain: drainOf({}) }, replicas: [rep("r1", "gpu-03")], models: [] }, (n, w) => {
      // Every 2 s something moves, under the 3 s stall period; at the end the node is drained.
      if (n === 2) w.replicas.push(rep("r2", "gpu-04", "starting"));
      if (n === 4) w.replicas[1]!.state = "ready";
      if (n === 6) w.replicas[0]!.state = "draining";
      if (n === 8) {
        w.replicas.shift();
        w.node = { admin_state: "cordoned", state: "cordoned" };
      }
    });
    await waitForDrain(h.client, "gpu-03", h.opts(60_000, 3_000));
    expect(h.out.some((l) => l.includes("stalled"))).toBe(false);
    expect(h.out.at(-1)).toBe("node/gpu-03 drained\n");
  });

  test("an uncordoned node ends the wait: the drain was called off", async () => {
    const h = harness({ node: { admin_state: "none", state: "ready" }, replicas: [rep("r1", "gpu-03")], models: [] });
    const err = await waitForDrain(h.client, "gpu-03", h.opts(60_000, 3_000)).catch((e) => e);
    expect((err as Error).message).toContain("drain of gpu-03 stopped: the node is ready now");
  });
});

describe("apply --wait", () => {
  const m = (x: Partial<ModelView>): Partial<ModelView> => ({ name: "chat", desired: 1, ready: 0, total: 1, parked: false, never_fits: false, unplaceable: false, reason: null, ...x });

  test("a model whose ready count does not rise is said stalled with its reason, and named at the timeout", async () => {
    const h = harness({ node: {}, replicas: [], models: [m({})] });
    const err = await waitForModels(h.client, ["chat"], h.opts(5_000, 2_000)).catch((e) => e);
    expect(h.out).toContain("model/chat stalled: ready 0/1 for 2s: 1 starting, not ready yet (llmgw logs REPLICA shows the engine's output)\n");
    expect(h.out.filter((l) => l.includes("stalled"))).toHaveLength(1);
    expect((err as Error).message).toStartWith("wait for chat not done after 5s: chat ready 0/1: 1 starting, not ready yet");
  });

  test("never-fitting models end the wait at once", async () => {
    const h = harness({ node: {}, replicas: [], models: [m({ never_fits: true, unplaceable: true, reason: "can never fit on this fleet: no node has H200 GPUs" })] });
    const got = await waitForModels(h.client, ["chat"], h.opts(60_000, 2_000));
    expect(got[0]!.never_fits).toBe(true);
    expect(h.elapsed()).toBe(0);
  });
});

test("StallWatch: said once per stalled stretch; a change starts the count again", () => {
  const w = new StallWatch(100);
  expect(w.check("a", "x", 0)).toBeUndefined();
  expect(w.check("a", "x", 99)).toBeUndefined();
  expect(w.check("a", "x", 100)).toBe(100);
  expect(w.check("a", "x", 500)).toBeUndefined();
  expect(w.check("a", "y", 600)).toBeUndefined();
  expect(w.check("a", "y", 700)).toBe(100);
});
