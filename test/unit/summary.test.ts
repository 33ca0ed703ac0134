// The fleet summary's rules, each pinned by a case that breaks if the rule does: the seeds'
// semantics (unknown ≠ idle, unhealthy ≠ free, desired not min, whole free nodes per fabric).

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { IDLE_THRESHOLD_SECONDS, summarize } from "../../src/control/summary";
import { buildTables } from "../../src/control/views";
import { T0, model, snapshot, type NodeDef, type ReplicaDef } from "../helpers/fleet";

const TIMEOUT = 15_000;
const H = "H100-80GB";

function sum(opts: Parameters<typeof snapshot>[0], lastUsed: Record<string, number> = {}, now = T0) {
  const tables = buildTables({ snapshot: snapshot({ ...opts, now: opts.now ?? T0 }), now, lastUsed: new Map(Object.entries(lastUsed)), nodeTimeoutMs: TIMEOUT });
  return { tables, s: summarize(tables, { version: "9.9.9" }) };
}

describe("node totals", () => {
  test("counts each state; a node past the timeout is unreachable even if cordoned", () => {
    const { s } = sum({
      nodes: [
        { name: "a" },
        { name: "b", admin: "cordoned" },
        { name: "c", admin: "draining" },
        { name: "d", lastHeartbeat: T0 - TIMEOUT - 1 },
        { name: "e", admin: "cordoned", lastHeartbeat: T0 - 60_000 },
        { name: "f", lastHeartbeat: T0 - TIMEOUT }, // exactly at the timeout: still ready
      ],
    });
    expect(s.nodes).toEqual({ total: 6, ready: 2, cordoned: 1, draining: 1, unreachable: 2 });
    expect(s.version).toBe("9.9.9");
  });
});

describe("nodes named", () => {
  test("the nodes in each state that needs a person, by name, at most 20; ready ones are not named", () => {
    const nodes = [
      { name: "ok", gpus: ["H100-80GB"] },
      { name: "c", admin: "cordoned" as const, gpus: ["H100-80GB"] },
      { name: "d", admin: "draining" as const, gpus: ["H100-80GB"] },
      ...Array.from({ length: 25 }, (_, i) => ({ name: `u${String(i).padStart(2, "0")}`, lastHeartbeat: T0 - 10 * TIMEOUT, gpus: ["H100-80GB"] })),
    ];
    const { s } = sum({ nodes });
    expect(s.nodes).toMatchObject({ ready: 1, cordoned: 1, draining: 1, unreachable: 25 });
    expect(s.node_names).toMatchObject({ cordoned: ["c"], draining: ["d"], pending: [] });
    expect(s.node_names!.unreachable).toHaveLength(20);
    expect(s.node_names!.unreachable[0]).toBe("u00");
  });
});

describe("GPU classes", () => {
  test("a card in MIG mode contributes its instances, each its own class, beside whole cards", () => {
    const { s } = sum({
      nodes: [{ name: "n1", gpus: ["A100-80GB/3g.40gb", "A100-80GB/3g.40gb", "A100-80GB/1g.10gb", "A100-80GB", "A100-80GB"] }],
      replicas: [{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [0] }] }],
    });
    expect(s.gpus).toEqual([
      { class: "A100-80GB", total: 2, used: 0, unhealthy: 0 },
      { class: "A100-80GB/1g.10gb", total: 1, used: 0, unhealthy: 0 },
      { class: "A100-80GB/3g.40gb", total: 2, used: 1, unhealthy: 0 },
    ]);
  });

  test("an unhealthy GPU on a busy node is neither used nor free, even under a replica", () => {
    const { s, tables } = sum({
      nodes: [{ name: "n1", gpus: [H, H, H, H], unhealthy: [1, 3] }],
      replicas: [{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [0, 1] }] }],
    });
    const c = s.gpus[0]!;
    expect(c).toEqual({ class: H, total: 4, used: 1, unhealthy: 2 });
    expect(c.total - c.used - c.unhealthy).toBe(1);
    expect(tables.nodes[0]!.gpu_free).toBe(1);
    expect(tables.nodes[0]!.gpu_unhealthy).toBe(2);
  });

  test("a failed replica's GPUs are free again; starting and draining ones hold theirs", () => {
    const { s } = sum({
      nodes: [{ name: "n1", gpus: [H, H, H, H] }],
      replicas: [
        { id: "r1", model: "m", state: "failed", shards: [{ node: "n1", gpus: [0] }] },
        { id: "r2", model: "m", state: "starting", shards: [{ node: "n1", gpus: [1] }] },
        { id: "r3", model: "m", state: "draining", shards: [{ node: "n1", gpus: [2] }] },
      ],
    });
    expect(s.gpus[0]).toEqual({ class: H, total: 4, used: 2, unhealthy: 0 });
  });
});

describe("fabrics", () => {
  test("free cards but no whole free node: largest_free_block is 0", () => {
    const { s } = sum({
      nodes: [
        { name: "a", fabrics: ["ib-a"], gpus: [H, H] },
        { name: "b", fabrics: ["ib-a"], gpus: [H, H] },
      ],
      replicas: [
        { id: "r1", model: "m", shards: [{ node: "a", gpus: [0] }] },
        { id: "r2", model: "m", shards: [{ node: "b", gpus: [1] }] },
      ],
    });
    expect(s.gpus[0]).toEqual({ class: H, total: 4, used: 2, unhealthy: 0 });
    expect(s.fabrics).toEqual([{ fabric: "ib-a", nodes: 2, nodes_with_weights: 0, models_present: 0, largest_free_block: 0 }]);
  });

  test("whole free nodes count only when ready, with GPUs, all healthy and unused", () => {
    const { s } = sum({
      nodes: [
        { name: "free1", fabrics: ["f"], gpus: [H, H] },
        { name: "free2", fabrics: ["f"], gpus: [H] },
        { name: "cordoned", fabrics: ["f"], gpus: [H], admin: "cordoned" },
        { name: "draining", fabrics: ["f"], gpus: [H], admin: "draining" },
        { name: "gone", fabrics: ["f"], gpus: [H], lastHeartbeat: T0 - 10 * TIMEOUT },
        { name: "nogpus", fabrics: ["f"] },
        { name: "broken", fabrics: ["f"], gpus: [H, H], unhealthy: [0] },
        { name: "busy", fabrics: ["f"], gpus: [H, H] },
      ],
      replicas: [{ id: "r", model: "m", shards: [{ node: "busy", gpus: [0] }] }],
    });
    expect(s.fabrics[0]!.largest_free_block).toBe(2);
    expect(s.fabrics[0]!.nodes).toBe(8);
  });

  test("weights: nodes holding any, distinct models across the fabric's nodes; a node in two fabrics counts in both", () => {
    const { s } = sum({
      nodes: [
        { name: "a", fabrics: ["ib-a"], models: ["llama", "qwen"] },
        { name: "b", fabrics: ["ib-a"], models: ["llama"] },
        { name: "c", fabrics: ["ib-a"] },
        { name: "d", fabrics: ["ib-b", "eth"], models: ["mistral"] },
        { name: "e" }, // no fabric: in no fabric's line
      ],
    });
    expect(s.fabrics).toEqual([
      { fabric: "eth", nodes: 1, nodes_with_weights: 1, models_present: 1, largest_free_block: 0 },
      { fabric: "ib-a", nodes: 3, nodes_with_weights: 2, models_present: 2, largest_free_block: 0 },
      { fabric: "ib-b", nodes: 1, nodes_with_weights: 1, models_present: 1, largest_free_block: 0 },
    ]);
  });
});

describe("replicas and idleness", () => {
  const nodes: NodeDef[] = [{ name: "n1", gpus: [H, H, H, H, H, H, H, H] }, { name: "n2", gpus: [H, H, H, H, H, H, H, H] }];

  test("replica totals by state", () => {
    const { s } = sum({
      nodes,
      replicas: [
        { id: "a", model: "m", state: "ready", shards: [{ node: "n1", gpus: [0] }] },
        { id: "b", model: "m", state: "starting", shards: [{ node: "n1", gpus: [1] }] },
        { id: "c", model: "m", state: "draining", shards: [{ node: "n1", gpus: [2] }] },
        { id: "d", model: "m", state: "failed", shards: [{ node: "n1", gpus: [3] }] },
        { id: "e", model: "m", state: "ready", shards: [{ node: "n1", gpus: [4] }] },
      ],
    });
    expect(s.replicas).toEqual({ ready: 2, starting: 1, draining: 1, failed: 1 });
  });

  test("a replica never seen by the router is unknown: idle_seconds negative, never listed idle", () => {
    const { s, tables } = sum({ nodes, replicas: [{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [0] }] }] });
    expect(tables.replicas[0]!.idle_seconds).toBeLessThan(0);
    expect(s.idle_replicas).toEqual([]);
  });

  test("idle at the threshold and beyond, longest first, GPUs summed over shards; non-ready never idle", () => {
    const replicas: ReplicaDef[] = [
      { id: "short", model: "m", shards: [{ node: "n1", gpus: [0] }] },
      { id: "edge", model: "m", shards: [{ node: "n1", gpus: [1, 2] }] },
      { id: "long", model: "big", shards: [{ node: "n1", gpus: [3, 4] }, { node: "n2", gpus: [0, 1, 2] }] },
      { id: "starting", model: "m", state: "starting", shards: [{ node: "n1", gpus: [5] }] },
      { id: "unknown", model: "m", shards: [{ node: "n1", gpus: [6] }] },
    ];
    const { s, tables } = sum(
      { nodes, replicas },
      {
        short: T0 - (IDLE_THRESHOLD_SECONDS - 1) * 1000,
        edge: T0 - IDLE_THRESHOLD_SECONDS * 1000,
        long: T0 - 3 * 3600 * 1000,
        starting: T0 - 3 * 3600 * 1000,
      },
    );
    expect(s.idle_replicas).toEqual([
      { id: "long", model: "big", idle_seconds: 3 * 3600, gpus: 5 },
      { id: "edge", model: "m", idle_seconds: IDLE_THRESHOLD_SECONDS, gpus: 2 },
    ]);
    expect(tables.replicas.find((r) => r.id === "short")!.idle_seconds).toBe(IDLE_THRESHOLD_SECONDS - 1);
    expect(tables.replicas.find((r) => r.id === "unknown")!.idle_seconds).toBe(-1);
  });

  test("a last-used stamp in the future (clock skew) reads as 0 seconds idle, not negative", () => {
    const { tables } = sum({ nodes, replicas: [{ id: "r", model: "m", shards: [{ node: "n1", gpus: [0] }] }] }, { r: T0 + 5000 });
    expect(tables.replicas[0]!.idle_seconds).toBe(0);
  });
});

describe("models", () => {
  const nodes: NodeDef[] = [{ name: "n1", gpus: [H, H, H, H] }];

  test("satisfied against desired, not min: an on-demand model asked for and placed nowhere is short and unplaceable", () => {
    const od = model({ name: "od", on_demand: true, replicas: { min: 0 } });
    const { s, tables } = sum({ nodes, models: [od], modelState: [{ model: "od", lastRequestedAt: T0 - 1000 }] });
    expect(tables.models[0]!.min).toBe(0);
    expect(tables.models[0]!.desired).toBe(1);
    expect(s.models).toEqual({ total: 1, satisfied: 0, short: 1 });
    expect(s.unplaceable).toEqual(["od"]);
  });

  test("an on-demand model not asked for within its idle_timeout wants nothing and is satisfied", () => {
    const od = model({ name: "od", on_demand: true, replicas: { min: 0 }, idle_timeout: "5m" });
    const { s, tables } = sum({ nodes, models: [od], modelState: [{ model: "od", lastRequestedAt: T0 - 5 * 60_000 }] });
    expect(tables.models[0]!.desired).toBe(0);
    expect(s.models).toEqual({ total: 1, satisfied: 1, short: 0 });
    expect(s.unplaceable).toEqual([]);
  });

  test("a scale target raises desired up to max, never beyond, never below min", () => {
    const m = model({ name: "m", replicas: { min: 1, max: 3 } });
    expect(sum({ models: [m], modelState: [{ model: "m", scaleTarget: 2 }] }).tables.models[0]!.desired).toBe(2);
    expect(sum({ models: [m], modelState: [{ model: "m", scaleTarget: 9 }] }).tables.models[0]!.desired).toBe(3);
    expect(sum({ models: [m], modelState: [{ model: "m", scaleTarget: 0 }] }).tables.models[0]!.desired).toBe(1);
  });

  test("short but still starting is a cluster doing its job, not unplaceable", () => {
    const m = model({ name: "m", replicas: { min: 2 } });
    const { s } = sum({
      nodes,
      models: [m],
      replicas: [
        { id: "a", model: "m", shards: [{ node: "n1", gpus: [0] }] },
        { id: "b", model: "m", state: "starting", shards: [{ node: "n1", gpus: [1] }] },
      ],
    });
    expect(s.models).toEqual({ total: 1, satisfied: 0, short: 1 });
    expect(s.unplaceable).toEqual([]);
  });

  test("short with a failed replica awaiting retry is not unplaceable; short with nothing on the way is", () => {
    const m = model({ name: "m", replicas: { min: 1 } });
    const retrying = sum({ nodes, models: [m], replicas: [{ id: "a", model: "m", state: "failed", shards: [{ node: "n1", gpus: [0] }] }] });
    expect(retrying.s.unplaceable).toEqual([]);
    const stuck = sum({ nodes, models: [m] });
    expect(stuck.s.unplaceable).toEqual(["m"]);
    expect(stuck.tables.models[0]!.reason).toContain("none starting");
  });

  test("a placement reason makes a short model unplaceable, with that reason, even while one is starting", () => {
    const m = model({ name: "big", replicas: { min: 2 } });
    const reason = "needs 2 whole H100-80GB nodes in one fabric; ib-a has 1, ib-b has 0";
    const { s, tables } = sum({
      nodes,
      models: [m],
      replicas: [{ id: "a", model: "big", state: "starting", shards: [{ node: "n1", gpus: [0] }] }],
      modelState: [{ model: "big", unplaceableReason: reason }],
    });
    expect(s.unplaceable).toEqual(["big"]);
    expect(s.unplaceable_reasons).toEqual({ big: `not now: ${reason}` });
    expect(tables.models[0]!.reason).toBe(`not now: ${reason}`);
  });

  test("a satisfied model is never unplaceable, even with a stale placement reason", () => {
    const m = model({ name: "m", replicas: { min: 1 } });
    const { s, tables } = sum({
      nodes,
      models: [m],
      replicas: [{ id: "a", model: "m", shards: [{ node: "n1", gpus: [0] }] }],
      modelState: [{ model: "m", unplaceableReason: "old news" }],
    });
    expect(s.models.satisfied).toBe(1);
    expect(s.unplaceable).toEqual([]);
    expect(tables.models[0]!.reason).toBeNull();
  });

  test("parked: listed with failures and reason, counted short even when ready ≥ desired, not unplaceable", () => {
    const a = model({ name: "a", replicas: { min: 1 } });
    const b = model({ name: "b", replicas: { min: 0 } });
    const { s } = sum({
      nodes,
      models: [a, b],
      modelState: [
        { model: "a", parked: true, failures: 5, reason: "exited with code 1: CUDA out of memory" },
        { model: "b", parked: true, failures: 5, reason: "bad weights" },
      ],
    });
    expect(s.parked).toEqual([
      { model: "a", failures: 5, reason: "exited with code 1: CUDA out of memory" },
      { model: "b", failures: 5, reason: "bad weights" },
    ]);
    expect(s.models).toEqual({ total: 2, satisfied: 0, short: 2 });
    expect(s.unplaceable).toEqual([]);
  });

  test("unplaceable names are sorted", () => {
    const { s } = sum({ models: [model({ name: "zeta" }), model({ name: "alpha" }), model({ name: "mid" })] });
    expect(s.unplaceable).toEqual(["alpha", "mid", "zeta"]);
  });
});

describe("the summary agrees with the tables it is built from", () => {
  const classes = ["H100-80GB", "A100-80GB", "A100-80GB/3g.40gb", "L40S"];
  const fleet = fc
    .record({
      nodes: fc.array(
        fc.record({
          gpus: fc.array(fc.constantFrom(...classes), { maxLength: 8 }),
          unhealthyMask: fc.integer({ min: 0, max: 255 }),
          fabric: fc.constantFrom("ib-a", "ib-b"),
          state: fc.constantFrom("none", "cordoned", "draining", "gone") as fc.Arbitrary<"none" | "cordoned" | "draining" | "gone">,
          models: fc.subarray(["m0", "m1", "m2"]),
        }),
        { maxLength: 12 },
      ),
      useMask: fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 12 }),
      states: fc.array(fc.constantFrom("starting", "ready", "draining", "failed") as fc.Arbitrary<"starting" | "ready" | "draining" | "failed">, { maxLength: 12 }),
      idle: fc.array(fc.option(fc.integer({ min: 0, max: 7200 })), { maxLength: 12 }),
    });

  test("class totals, fabric counts and idle list equal what the node and replica tables say", () => {
    fc.assert(
      fc.property(fleet, (f) => {
        const nodes: NodeDef[] = f.nodes.map((n, i) => ({
          name: `n${i}`,
          fabrics: [n.fabric],
          gpus: n.gpus,
          unhealthy: n.gpus.map((_, j) => j).filter((j) => (n.unhealthyMask >> j) & 1),
          admin: n.state === "gone" ? "none" : n.state,
          lastHeartbeat: n.state === "gone" ? T0 - 10 * TIMEOUT : T0,
          models: n.models,
        }));
        const replicas: ReplicaDef[] = [];
        const lastUsed: Record<string, number> = {};
        f.nodes.forEach((n, i) => {
          const mask = f.useMask[i] ?? 0;
          const gpus = n.gpus.map((_, j) => j).filter((j) => (mask >> j) & 1);
          if (gpus.length === 0) return;
          const id = `r${i}`;
          replicas.push({ id, model: "m0", state: f.states[i] ?? "ready", shards: [{ node: `n${i}`, gpus }] });
          const idle = f.idle[i];
          if (idle !== null && idle !== undefined) lastUsed[id] = T0 - idle * 1000;
        });
        const { s, tables } = sum({ nodes, replicas }, lastUsed);
        const allGpus = tables.nodes.flatMap((n) => n.gpus);
        for (const c of s.gpus) {
          const of = allGpus.filter((g) => g.class === c.class);
          expect(c.total).toBe(of.length);
          expect(c.unhealthy).toBe(of.filter((g) => !g.healthy).length);
          expect(c.used).toBe(of.filter((g) => g.healthy && g.in_use_by !== null).length);
          expect(c.total - c.used - c.unhealthy).toBeGreaterThanOrEqual(0);
        }
        expect(s.gpus.reduce((a, c) => a + c.total, 0)).toBe(allGpus.length);
        expect(s.nodes.total).toBe(tables.nodes.length);
        for (const fu of s.fabrics) {
          const inF = tables.nodes.filter((n) => n.fabrics.includes(fu.fabric));
          expect(fu.nodes).toBe(inF.length);
          expect(fu.largest_free_block).toBe(inF.filter((n) => n.state === "ready" && n.gpu_total > 0 && n.gpu_free === n.gpu_total).length);
          expect(fu.models_present).toBe(new Set(inF.flatMap((n) => n.models)).size);
        }
        const idleIds = tables.replicas.filter((r) => r.state === "ready" && r.idle_seconds >= IDLE_THRESHOLD_SECONDS).map((r) => r.id);
        expect(s.idle_replicas.map((r) => r.id).sort()).toEqual(idleIds.sort());
        for (let i = 1; i < s.idle_replicas.length; i++)
          expect(s.idle_replicas[i - 1]!.idle_seconds).toBeGreaterThanOrEqual(s.idle_replicas[i]!.idle_seconds);
        const r = s.replicas;
        expect(r.ready + r.starting + r.draining + r.failed).toBe(tables.replicas.length);
      }),
      { numRuns: 300 },
    );
  });
});

describe("what discovery reports", () => {
  const CI = "H200-141GB/1c.3g.71gb";
  const GI = "H200-141GB/3g.71gb";
  /** n1: the constructed H200 sample as the agent reports it (test/fixtures/nvidia-smi). */
  function h200Snapshot(replicas: ReplicaDef[] = []) {
    const snap = snapshot({ nodes: [{ name: "n1", gpus: [CI, GI, "H200-141GB/2g.35gb"] }], replicas });
    const mem = [72704, 72704, 35840];
    snap.gpus = snap.gpus.map((g, i) => ({ ...g, memoryMib: mem[i]!, parent: i === 0 ? snap.gpus[1]!.uuid : "GPU-n1-card" }));
    return snap;
  }
  const tablesOf = (snap: ReturnType<typeof snapshot>) => buildTables({ snapshot: snap, now: T0, lastUsed: new Map(), nodeTimeoutMs: TIMEOUT });

  test("compute instances of one GPU instance: its memory counted once", () => {
    const tables = tablesOf(h200Snapshot());
    // 72704 + 72704 + 35840 summed naively; the compute instance shares the GPU instance's memory.
    expect(tables.nodes[0]!.gpu_memory_mib).toBe(72704 + 35840);
  });

  test("a held GPU instance holds the compute instance inside it, and the reverse", () => {
    const held = tablesOf(h200Snapshot([{ id: "r1", model: "m", shards: [{ node: "n1", gpus: [1] }] }]));
    expect(held.nodes[0]!.gpus.map((g) => g.in_use_by)).toEqual(["r1", "r1", null]);
    expect(held.nodes[0]!.gpu_free).toBe(1);
    const s = summarize(held, { version: "x" });
    expect(s.gpus.find((c) => c.class === CI)).toEqual({ class: CI, total: 1, used: 1, unhealthy: 0 });
    const ci = tablesOf(h200Snapshot([{ id: "r2", model: "m", shards: [{ node: "n1", gpus: [0] }] }]));
    expect(ci.nodes[0]!.gpus.map((g) => g.in_use_by)).toEqual(["r2", "r2", null]);
  });

  test("an unschedulable card counts as unhealthy in its class, with its reason; a node's discovery error is listed", () => {
    const snap = snapshot({ nodes: [{ name: "n1", gpus: [H, "unknown"], unhealthy: [1] }, { name: "n2", gpus: ["H200-141GB"], unhealthy: [0] }, { name: "d" }] });
    const error = "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver: this node reports no GPUs";
    snap.discovery = new Map([
      ["n1", { error: null, reasons: new Map([[1, "memory.total not reported"]]) }],
      ["n2", { error: null, reasons: new Map([[0, "MIG mode with no GPU instances"]]) }],
      ["d", { error, reasons: new Map() }],
    ]);
    const tables = tablesOf(snap);
    expect(tables.nodes.map((n) => [n.name, n.discovery_error])).toEqual([["n1", null], ["n2", null], ["d", error]]);
    expect(tables.nodes[0]!.gpus.map((g) => g.reason)).toEqual([null, "memory.total not reported"]);
    const s = summarize(tables, { version: "x" });
    expect(s.gpus).toEqual([
      { class: H, total: 1, used: 0, unhealthy: 0 },
      { class: "H200-141GB", total: 1, used: 0, unhealthy: 1 },
      { class: "unknown", total: 1, used: 0, unhealthy: 1 },
    ]);
    expect(s.unhealthy_gpus).toEqual([
      { reason: "MIG mode with no GPU instances", gpus: 1, nodes: ["n2"] },
      { reason: "memory.total not reported", gpus: 1, nodes: ["n1"] },
    ]);
    expect(s.gpu_discovery).toEqual([{ node: "d", gpus: 0, error }]);
  });
});
