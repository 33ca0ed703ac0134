// Why a drain is or is not getting anywhere (control/drain.ts), through the node table: a
// replacement starting elsewhere is progress; no room elsewhere now is blocked with placement's
// reason; no other node able ever to hold the model, or the model parked, is never. And the
// summary's stuck drains and the status screen's Attention line that come of it.

import { describe, expect, test } from "bun:test";
import { drainNeverFits } from "../../src/control/drain";
import { summarize } from "../../src/control/summary";
import { buildTables } from "../../src/control/views";
import { drainAttention, renderStatus } from "../../src/cli/status";
import { T0, model, snapshot } from "../helpers/fleet";

const H = "H100-80GB";
const big = model({ name: "llama-70b", replicas: { min: 1 }, profiles: [{ name: "tp4", engine: "vllm", gpu_class: H, gpus: 4 }] });

function tables(opts: Parameters<typeof snapshot>[0]) {
  return buildTables({ snapshot: snapshot({ ...opts, now: T0 }), now: T0, lastUsed: new Map(), nodeTimeoutMs: 15_000 });
}
const nodeOf = (t: ReturnType<typeof tables>, name: string) => t.nodes.find((n) => n.name === name)!;

describe("drain progress per draining node", () => {
  test("only draining nodes carry it", () => {
    const t = tables({ nodes: [{ name: "gpu-01", gpus: [H] }, { name: "gpu-02", admin: "cordoned", gpus: [H] }] });
    expect(t.nodes.every((n) => n.drain === undefined)).toBe(true);
  });

  test("an empty draining node: nothing remaining, nothing blocked", () => {
    const t = tables({ nodes: [{ name: "gpu-03", admin: "draining", gpus: [H] }] });
    expect(nodeOf(t, "gpu-03").drain).toEqual({ remaining: 0, replicas: [], blocked: null, never: false });
  });

  test("never: the only node of its class is the one draining", () => {
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "l40-01", gpus: ["L40S", "L40S", "L40S", "L40S"] }],
      models: [big],
      replicas: [{ id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] }],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.remaining).toBe(1);
    expect(d.never).toBe(true);
    expect(d.replicas).toEqual([{ id: "r1", model: "llama-70b", state: "ready", status: "never", reason: expect.stringContaining("no other node has H100-80GB GPUs") }]);
    expect(d.blocked).toBe("llama-70b has nowhere else to go: no other node has H100-80GB GPUs; waiting will not help (`llmgw uncordon gpu-03` calls the drain off; or add such nodes)");
  });

  test("never: other nodes of the class are too small even all free", () => {
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "gpu-04", gpus: [H, H] }],
      models: [big],
      replicas: [{ id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] }],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.never).toBe(true);
    expect(d.blocked).toContain("no other node has 4 H100-80GB GPUs (the largest has 2)");
  });

  test("never: the other nodes hold fewer replicas than the model wants, even all free", () => {
    const two = model({ name: "chat", replicas: { min: 2 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2 }] });
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H] }, { name: "gpu-04", gpus: [H, H] }],
      models: [two],
      replicas: [
        { id: "r1", model: "chat", shards: [{ node: "gpu-03", gpus: [0, 1] }] },
        { id: "r2", model: "chat", shards: [{ node: "gpu-04", gpus: [0, 1] }] },
      ],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.never).toBe(true);
    expect(d.blocked).toContain("without gpu-03, the other nodes could hold 1 of its 2 replicas even with every GPU free");
  });

  test("blocked now: room exists on the fleet but is taken; the placement reason is the cause", () => {
    const other = model({ name: "other", replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 4 }] });
    const reason = "no H100-80GB node has 4 free GPUs (1 draining; the others have 0)";
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "gpu-04", gpus: [H, H, H, H] }],
      models: [big, other],
      replicas: [
        { id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] },
        { id: "r2", model: "other", shards: [{ node: "gpu-04", gpus: [0, 1, 2, 3] }] },
      ],
      modelState: [{ model: "llama-70b", unplaceableReason: reason }],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.never).toBe(false);
    expect(d.replicas[0]!.status).toBe("blocked");
    expect(d.blocked).toBe(`llama-70b has nowhere else to go now: ${reason}`);
    // gpu-04 is not draining: nothing there.
    expect(nodeOf(t, "gpu-04").drain).toBeUndefined();
  });

  test("progress, not a stall: its replacement is starting elsewhere", () => {
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "gpu-04", gpus: [H, H, H, H] }],
      models: [big],
      replicas: [
        { id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] },
        { id: "r2", model: "llama-70b", state: "starting", shards: [{ node: "gpu-04", gpus: [0, 1, 2, 3] }] },
      ],
      // A stale reason from before the replacement was placed does not make it blocked.
      modelState: [{ model: "llama-70b", unplaceableReason: "old" }],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d).toMatchObject({ remaining: 1, blocked: null, never: false });
    expect(d.replicas[0]).toMatchObject({ status: "waiting", reason: "its replacement is starting elsewhere (0/1 ready)" });
  });

  test("covered elsewhere, starting, or stopping: it stops; failed ones do not count", () => {
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H, H, H, H, H] }, { name: "gpu-04", gpus: [H, H, H, H] }],
      models: [big],
      replicas: [
        { id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] },
        { id: "r2", model: "llama-70b", shards: [{ node: "gpu-04", gpus: [0, 1, 2, 3] }] },
        { id: "r3", model: "llama-70b", state: "draining", shards: [{ node: "gpu-03", gpus: [4] }] },
        { id: "r4", model: "llama-70b", state: "failed", shards: [{ node: "gpu-03", gpus: [5] }] },
      ],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.remaining).toBe(2);
    expect(d.replicas.map((r) => [r.id, r.status])).toEqual([["r1", "stopping"], ["r3", "stopping"]]);
    expect(d.blocked).toBeNull();
  });

  test("parked: waiting will not help until someone unparks it", () => {
    const t = tables({
      nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "gpu-04", gpus: [H, H, H, H] }],
      models: [big],
      replicas: [{ id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] }],
      modelState: [{ model: "llama-70b", parked: true, failures: 5, reason: "CUDA out of memory" }],
    });
    const d = nodeOf(t, "gpu-03").drain!;
    expect(d.never).toBe(true);
    expect(d.blocked).toBe("llama-70b is parked after 5 failed starts (CUDA out of memory); llmgw models unpark llama-70b to retry");
  });

  test("a multi-node model needs its fabric: never when the other nodes of the fabric are too few", () => {
    const mn = model({ name: "deepseek", replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2, nodes: 2 }] });
    const snap = snapshot({
      nodes: [
        { name: "a", admin: "draining", fabrics: ["ib"], gpus: [H, H] },
        { name: "b", fabrics: ["ib"], gpus: [H, H] },
        { name: "c", fabrics: ["other"], gpus: [H, H] },
      ],
      models: [mn],
    });
    expect(drainNeverFits(snap, new Set(["a"]), snap.models[0]!, 1)).toBe("without a, needs 2 H100-80GB nodes with 2 GPUs each in one fabric, and no fabric has more than 1");
    expect(drainNeverFits(snap, new Set(), snap.models[0]!, 1)).toBeUndefined();
  });
});

describe("stuck drains in the summary and under Attention in status", () => {
  const opts = {
    nodes: [
      { name: "gpu-03", admin: "draining" as const, gpus: [H, H, H, H] },
      { name: "gpu-05", admin: "draining" as const, gpus: [H] },
      { name: "l40-01", gpus: ["L40S"] },
    ],
    models: [big],
    replicas: [{ id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] }],
  };

  test("a drain that cannot finish is listed with its cause; an empty one that only takes a tick is not", () => {
    const s = summarize(tables(opts), { version: "t" });
    expect(s.stuck_drains).toEqual([{ node: "gpu-03", remaining: 1, never: true, reason: expect.stringContaining("llama-70b has nowhere else to go: no other node has H100-80GB GPUs") }]);
    const text = renderStatus(s, { color: false });
    expect(text).toMatch(/Attention\n {2}drain of gpu-03 can never finish \(1 replica left\): llama-70b has nowhere else to go: no other node has H100-80GB GPUs/);
    expect(text).not.toContain("drain of gpu-05");
  });

  test("a drain making progress is not an attention item", () => {
    const s = summarize(
      tables({
        nodes: [{ name: "gpu-03", admin: "draining", gpus: [H, H, H, H] }, { name: "gpu-04", gpus: [H, H, H, H] }],
        models: [big],
        replicas: [
          { id: "r1", model: "llama-70b", shards: [{ node: "gpu-03", gpus: [0, 1, 2, 3] }] },
          { id: "r2", model: "llama-70b", state: "starting", shards: [{ node: "gpu-04", gpus: [0, 1, 2, 3] }] },
        ],
      }),
      { version: "t" },
    );
    expect(s.stuck_drains).toBeUndefined();
    expect(renderStatus(s, { color: false })).not.toContain("Attention");
  });

  test("blocked now reads 'cannot finish'; never-ending ones come first; past five the rest are counted", () => {
    const stuck = Array.from({ length: 7 }, (_, i) => ({ node: `n${i}`, remaining: 1, never: i === 6, reason: `r${i}` }));
    const lines = drainAttention({ stuck_drains: stuck });
    expect(lines[0]).toBe("drain of n6 can never finish (1 replica left): r6");
    expect(lines[1]).toBe("drain of n0 cannot finish (1 replica left): r0");
    expect(lines.at(-1)).toBe("… and 2 more stuck drains (llmgw status -o wide)");
    expect(drainAttention({ stuck_drains: stuck }, true)).toHaveLength(7);
    expect(drainAttention({})).toEqual([]);
  });
});
