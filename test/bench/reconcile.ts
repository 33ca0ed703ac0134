// Benchmark: one reconcile step (placement included) for 1,000 nodes × 8 GPUs, 500 models and
// 2,000 replicas (target: under 20 ms). The step is the pure function the control loop runs each
// tick; the store read and write around it are timed separately, for context.
// Run: bun test/bench/reconcile.ts

import { reconcile } from "../../src/control/reconciler";
import { Store } from "../../src/store";
import { heartbeat } from "../helpers/fleet";
import { reconcileFleet, T0 } from "./lib/fleet";
import { RECONCILE_DEFAULTS, SQLITE_DEFAULTS } from "../helpers/control-settings";

const NODES = 1000;
const MODELS = 500;
const REPLICAS = 2000;
const { nodes, models, replicas, snap } = reconcileFleet(NODES, MODELS, REPLICAS);
let n = 0;
const newId = () => `n-${n++}`;

function measure(label: string, fn: () => unknown, runs = 100): number {
  for (let i = 0; i < 10; i++) fn();
  const t: number[] = [];
  for (let i = 0; i < runs; i++) {
    const s = performance.now();
    fn();
    t.push(performance.now() - s);
  }
  t.sort((a, b) => a - b);
  const p50 = t[Math.floor(runs / 2)]!;
  console.log(`${label.padEnd(46)} p50 ${p50.toFixed(2)} ms   p95 ${t[Math.floor(runs * 0.95)]!.toFixed(2)} ms`);
  return p50;
}

console.log(`fleet: ${NODES} nodes × 8 GPUs, ${MODELS} models (min 5 each), ${REPLICAS} replicas`);
const plan = reconcile({ snapshot: snap, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS, newId });
console.log(`one step: ${plan.create.length} placed, ${plan.update.length} state changes, ${plan.events.length} events`);
const step = measure("reconcile step (pure, placement included)", () =>
  reconcile({ snapshot: snap, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS, newId }),
);

// For context: the store read every tick does at this size.
const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
for (const d of nodes) await store.applyHeartbeat(heartbeat(d), T0);
await store.saveModels(models.map((spec) => ({ spec, revision: 1, created: true })), T0);
for (const r of replicas) store.insertReplica({ id: r.id, model: r.model, profile: "a", state: r.state ?? "ready", shards: r.shards, createdAt: T0, updatedAt: T0 });
measure("store snapshot read (context, not in the target)", async () => await store.snapshot(), 30);
console.log(`target < 20 ms for the step: ${step < 20 ? "met" : "NOT met"} (${(step / 20).toFixed(2)}× the budget)`);
