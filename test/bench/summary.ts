// Benchmark: building the fleet summary for 1,000 nodes × 8 GPUs, 2,000 replicas and 500
// models (target: under 5 ms). Prints the median and p95 of the table derivation plus the
// summary, and of the summary alone. Run: bun test/bench/summary.ts

import { summarize } from "../../src/control/summary";
import { buildTables } from "../../src/control/views";
import { T0, model, snapshot, type NodeDef, type ReplicaDef } from "../helpers/fleet";

const NODES = 1000;
const MODELS = 500;
const REPLICAS = 2000;

const classes = ["H100-80GB", "A100-80GB", "L40S", "H200-141GB"];
const nodes: NodeDef[] = [];
for (let i = 0; i < NODES; i++) {
  const mig = i % 10 === 0;
  const cls = classes[i % classes.length]!;
  const gpus = mig ? ["A100-80GB/3g.40gb", "A100-80GB/3g.40gb", ...Array(7).fill("A100-80GB")].slice(0, 8) : Array(8).fill(cls);
  nodes.push({
    name: `gpu-${i}`,
    fabrics: [`ib-${i % 4}`],
    gpus,
    unhealthy: i % 17 === 0 ? [3] : [],
    models: [`m${i % MODELS}`, `m${(i * 7) % MODELS}`],
    admin: i % 50 === 0 ? "cordoned" : "none",
    lastHeartbeat: i % 97 === 0 ? T0 - 60_000 : T0,
  });
}
const models = Array.from({ length: MODELS }, (_, i) => model({ name: `m${i}`, replicas: { min: 4 } }));
const replicas: ReplicaDef[] = [];
const lastUsed = new Map<string, number>();
for (let i = 0; i < REPLICAS; i++) {
  // Two replicas per node on GPUs 0-3 and 4-7 of the first 1,000 nodes.
  const node = `gpu-${i % NODES}`;
  const half = i < NODES ? [0, 1, 2, 3] : [4, 5, 6, 7];
  const id = `r-${i}`;
  replicas.push({ id, model: `m${i % MODELS}`, state: i % 20 === 0 ? "starting" : "ready", shards: [{ node, gpus: half }] });
  if (i % 3 !== 0) lastUsed.set(id, T0 - (i % 2000) * 1000);
}
const snap = snapshot({ nodes, models, replicas, modelState: models.slice(0, 20).map((m) => ({ model: m.name, parked: true, failures: 5, reason: "boom" })) });

function measure(label: string, fn: () => unknown, runs = 200): number {
  for (let i = 0; i < 20; i++) fn(); // warm-up: let the JIT settle
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const s = performance.now();
    fn();
    t.push(performance.now() - s);
  }
  t.sort((a, b) => a - b);
  const p50 = t[Math.floor(runs / 2)]!;
  const p95 = t[Math.floor(runs * 0.95)]!;
  console.log(`${label.padEnd(44)} p50 ${p50.toFixed(3)} ms   p95 ${p95.toFixed(3)} ms`);
  return p50;
}

console.log(`fleet: ${NODES} nodes × 8 GPUs (${snap.gpus.length} GPUs), ${REPLICAS} replicas, ${MODELS} models`);
const tables = buildTables({ snapshot: snap, now: T0, lastUsed, nodeTimeoutMs: 15_000 });
const both = measure("tables + summary (what GET /summary computes)", () =>
  summarize(buildTables({ snapshot: snap, now: T0, lastUsed, nodeTimeoutMs: 15_000 }), { version: "bench" }),
);
measure("summary alone, from ready tables", () => summarize(tables, { version: "bench" }));
const s = summarize(tables, { version: "bench" });
console.log(`check: ${s.gpus.reduce((a, g) => a + g.total, 0)} GPUs, ${s.replicas.ready} ready, ${s.idle_replicas.length} idle, ${s.unplaceable.length} unplaceable`);
console.log(`target < 5 ms: ${both < 5 ? "met" : "NOT met"} (${(both / 5).toFixed(2)}× the budget)`);
