// A fleet of 200 nodes (mixed classes, MIG, unhealthy GPUs, two fabrics, weights) fed through
// the agent API, replicas on top, and the summary checked against the node and replica tables
// the API returns, recomputed here independently.

import { afterAll, beforeAll, expect, test } from "bun:test";
import type { ModelView, NodeView, ReplicaView, Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
beforeAll(async () => {
  s = await testServer();
});
afterAll(() => s.stop());

/** Deterministic pseudo-random numbers, so a failure reproduces. */
function rng(seed: number) {
  return () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
}

test("200 nodes: the summary equals what the tables say", async () => {
  const rand = rng(42);
  const plans: { name: string; classes: string[]; unhealthy: number[]; fabric: string; models: string[] }[] = [];
  for (let i = 0; i < 200; i++) {
    const kind = i % 5;
    const classes =
      kind === 0 ? Array(8).fill("H100-80GB")
      : kind === 1 ? Array(8).fill("A100-80GB")
      : kind === 2 ? ["A100-80GB/3g.40gb", "A100-80GB/3g.40gb", "A100-80GB/1g.10gb", ...Array(7).fill("A100-80GB")] // one card in MIG mode
      : kind === 3 ? Array(4).fill("L40S")
      : Array(8).fill("H200-141GB");
    const unhealthy = rand() < 0.1 ? [Math.floor(rand() * classes.length)] : [];
    const models = ["llama-8b", "qwen-72b", "mistral-7b", "deepseek"].filter(() => rand() < 0.3);
    plans.push({ name: `gpu-${String(i).padStart(3, "0")}`, classes, unhealthy, fabric: i < 120 ? "ib-a" : "ib-b", models });
  }
  for (const p of plans) {
    const res = await s.agent(heartbeat({ name: p.name, gpus: p.classes, unhealthy: p.unhealthy, fabrics: [p.fabric], models: p.models }));
    expect(res.status).toBe(200);
  }
  // Some nodes administered, some gone quiet.
  for (const n of ["gpu-001", "gpu-002"]) await s.admin(`/api/v1/nodes/${n}/cordon`, { method: "POST" });
  await s.admin("/api/v1/nodes/gpu-003/drain", { method: "POST" });

  await s.admin("/api/v1/apply", {
    method: "POST",
    body: JSON.stringify({
      models: [
        { name: "llama-8b", replicas: { min: 2 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] },
        { name: "qwen-72b", replicas: { min: 1 }, profiles: [{ name: "a100", engine: "vllm", gpu_class: "A100-80GB", gpus: 4 }] },
        { name: "huge", replicas: { min: 1 }, profiles: [{ name: "two", engine: "vllm", gpu_class: "H200-141GB", gpus: 8, nodes: 2 }] },
        { name: "od", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "l40s", engine: "vllm", gpu_class: "L40S", gpus: 1 }] },
      ],
    }),
  });
  // A few nodes stop heartbeating.
  s.clock.advance(10_000);
  for (const p of plans.slice(10)) await s.agent(heartbeat({ name: p.name, gpus: p.classes, unhealthy: p.unhealthy, fabrics: [p.fabric], models: p.models }));
  s.clock.advance(6_000); // nodes 0..9 now 17 s silent: unreachable

  const now = s.clock.now();
  // Replicas written as the reconciler would place them (no tick runs here, so they stay as written): one per H100 node on GPUs 0-1, a 2-node one on H200s.
  const states = ["ready", "ready", "ready", "starting", "failed", "draining"] as const;
  let k = 0;
  for (const p of plans.filter((_, i) => i % 5 === 0).slice(0, 30)) {
    const id = `r-${k}`;
    s.seed.replica({ id, model: k % 2 ? "llama-8b" : "qwen-72b", profile: "p", state: states[k % states.length]!, shards: [{ node: p.name, gpus: [0, 1] }], createdAt: now, updatedAt: now });
    k++;
  }
  s.seed.replica({ id: "r-huge", model: "huge", profile: "two", state: "ready", shards: [{ node: "gpu-004", gpus: [0, 1, 2, 3, 4, 5, 6, 7] }, { node: "gpu-009", gpus: [0, 1, 2, 3, 4, 5, 6, 7] }], createdAt: now, updatedAt: now });
  await s.seed.modelState("od", { lastRequestedAt: now });
  // The router's view: some replicas used recently, some long ago, the rest never seen.
  s.seed.usage({ lastUsed: () => new Map([["r-0", now - 30_000], ["r-1", now - 3_600_000], ["r-2", now - 700_000], ["r-huge", now - 86_400_000]]), inflightByModel: () => new Map() });
  const summary = (await (await s.admin("/api/v1/summary")).json()) as Summary;
  const nodes = (await (await s.admin("/api/v1/nodes")).json()) as NodeView[];
  const replicas = (await (await s.admin("/api/v1/replicas")).json()) as ReplicaView[];
  const models = (await (await s.admin("/api/v1/models")).json()) as ModelView[];
  expect(nodes.length).toBe(200);

  // Node totals from the node table.
  const count = (st: string) => nodes.filter((n) => n.state === st).length;
  expect(summary.nodes).toEqual({ total: 200, ready: count("ready"), cordoned: count("cordoned"), draining: count("draining"), unreachable: count("unreachable") });
  expect(summary.nodes.unreachable).toBe(10);

  // Classes from the GPUs in the node table.
  const classes = new Map<string, { total: number; used: number; unhealthy: number }>();
  for (const n of nodes)
    for (const g of n.gpus) {
      const c = classes.get(g.class) ?? { total: 0, used: 0, unhealthy: 0 };
      c.total++;
      if (!g.healthy) c.unhealthy++;
      else if (g.in_use_by) c.used++;
      classes.set(g.class, c);
    }
  expect(summary.gpus).toEqual([...classes].map(([cls, c]) => ({ class: cls, ...c })).sort((a, b) => a.class.localeCompare(b.class)));
  expect(summary.gpus.map((g) => g.class)).toContain("A100-80GB/3g.40gb");
  expect(summary.gpus.some((g) => g.unhealthy > 0)).toBe(true);

  // Fabrics from the node table.
  for (const f of ["ib-a", "ib-b"]) {
    const inF = nodes.filter((n) => n.fabrics.includes(f));
    expect(summary.fabrics.find((x) => x.fabric === f)).toEqual({
      fabric: f,
      nodes: inF.length,
      nodes_with_weights: inF.filter((n) => n.models.length > 0).length,
      models_present: new Set(inF.flatMap((n) => n.models)).size,
      largest_free_block: inF.filter((n) => n.state === "ready" && n.gpu_total > 0 && n.gpu_free === n.gpu_total).length,
    });
  }

  // Replicas and idleness from the replica table.
  const rc = (st: string) => replicas.filter((r) => r.state === st).length;
  expect(summary.replicas).toEqual({ ready: rc("ready"), starting: rc("starting"), draining: rc("draining"), failed: rc("failed") });
  expect(summary.idle_replicas.map((r) => r.id)).toEqual(["r-huge", "r-1", "r-2"].filter((id) => replicas.find((r) => r.id === id)!.state === "ready"));
  expect(summary.idle_replicas.find((r) => r.id === "r-huge")!.gpus).toBe(16);
  expect(replicas.find((r) => r.id === "r-5")!.idle_seconds).toBe(-1);

  // Models from the model table.
  const satisfied = models.filter((m) => !m.parked && m.ready >= m.desired).length;
  expect(summary.models).toEqual({ total: models.length, satisfied, short: models.length - satisfied });
  expect(summary.unplaceable).toEqual(models.filter((m) => m.unplaceable).map((m) => m.name).sort());
  expect(models.find((m) => m.name === "od")!.desired).toBe(1);
  expect(summary.unplaceable).toContain("od");
});
