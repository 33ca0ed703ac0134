// Benchmark: one reconciler tick's placement for 1,000 nodes × 8 GPUs and 500 requests (target:
// well under 10 ms), on a mostly free fleet and on one ~70% used. Prints the median and p95 of
// the whole call, index building included, and of the indexing alone (a call with no requests).
// Run: bun test/bench/placement.ts

import { place, type PlacementNode, type PlacementRequest } from "../../src/control/placement";
import type { Profile } from "../../src/protocol/catalog";
import { CLASSES, placementFleet } from "./lib/fleet";

const NODES = 1000;
const REQUESTS = 500;

const fleet = (usedShare: number, seed: number): PlacementNode[] => placementFleet(NODES, REQUESTS, usedShare, seed);

const prof = (name: string, gpu_class: string, gpus = 1, nodes = 1): Profile => ({ name, engine: "vllm", gpu_class, gpus, nodes, priority: 0, args: [], env: {} });

const requests: PlacementRequest[] = [];
for (let i = 0; i < REQUESTS; i++) {
  const cls = CLASSES[i % CLASSES.length]!;
  const other = CLASSES[(i + 1) % CLASSES.length]!;
  let profiles: Profile[];
  let count = 1 + (i % 3);
  const kind = i % 20;
  if (kind < 8) profiles = [prof("one", cls)];
  else if (kind < 12) profiles = [prof("two", cls, 2), prof("fallback", other, 4)];
  else if (kind < 14) profiles = [prof("eight", cls, 8)];
  else if (kind < 15) ((profiles = [prof("multi", cls, 8, 2)]), (count = 1));
  else if (kind < 16) profiles = [prof("mig", "A100-80GB/3g.40gb")];
  else profiles = [prof("spread", cls)];
  requests.push({
    model: `m${i}`,
    count,
    profiles,
    placement: kind >= 16 ? "spread" : "binpack",
    nodesInUse: new Set(kind >= 16 ? [`gpu-${String(i).padStart(4, "0")}`] : []),
  });
}

function measure(label: string, fn: () => unknown, runs = 300): void {
  for (let i = 0; i < 30; i++) fn(); // warm-up: let the JIT settle
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const s = performance.now();
    fn();
    t.push(performance.now() - s);
  }
  t.sort((a, b) => a - b);
  const p50 = t[Math.floor(runs / 2)]!;
  const p95 = t[Math.floor(runs * 0.95)]!;
  console.log(`${label.padEnd(34)} p50 ${p50.toFixed(3)} ms   p95 ${p95.toFixed(3)} ms`);
}

const wanted = requests.reduce((s, r) => s + r.count, 0);
for (const [label, share] of [
  ["mostly free fleet", 0.05],
  ["~70% used fleet", 0.7],
] as const) {
  const nodes = fleet(share, 42);
  let total = 0;
  let used = 0;
  for (const n of nodes) for (const g of n.gpus) (total++, g.used && used++);
  const r = place(nodes, requests);
  console.log(
    `${label}: ${NODES} nodes, ${total} GPUs, ${((100 * used) / total).toFixed(0)}% used; ${REQUESTS} requests for ${wanted} replicas → ` +
      `${r.placed.length} placed, ${r.unplaceable.size} models with a reason`,
  );
  measure(`  place() ${label}`, () => place(nodes, requests));
  measure(`  of which indexing the fleet`, () => place(nodes, []));
}
