// Benchmark: building the fleet summary for 1,000 nodes × 8 GPUs, 2,000 replicas and 500
// models (target: under 5 ms). Prints the median and p95 of the table derivation plus the
// summary, and of the summary alone. Run: bun test/bench/summary.ts

import { summarize } from "../../src/control/summary";
import { buildTables } from "../../src/control/views";
import { T0, summaryFleet } from "./lib/fleet";

const NODES = 1000;
const MODELS = 500;
const REPLICAS = 2000;

const { lastUsed, snap } = summaryFleet(NODES, MODELS, REPLICAS);

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
