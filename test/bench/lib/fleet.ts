// The fleets the benchmarks measure, built in one place: a large mixed fleet (1,000 nodes × 8
// GPUs of four classes, MIG on every tenth node, a few unhealthy GPUs, cordoned and silent
// nodes) as store snapshots (summary, reconcile) and as placement input (placement), the 200
// nodes `status` is timed against, and the largest heartbeat the schema admits (isolation).
// Every fleet is a pure function of its arguments, so each run measures the same fleet and the
// figures stay comparable from run to run.

import type { PlacementNode } from "../../../src/control/placement";
import type { HeartbeatRequest } from "../../../src/protocol/heartbeat";
import { heartbeat, model, type NodeDef, type ReplicaDef, snapshot, T0 } from "../../helpers/fleet";

export { T0 } from "../../helpers/fleet";

export const CLASSES = ["H100-80GB", "A100-80GB", "L40S", "H200-141GB"] as const;
const MIG = "A100-80GB/3g.40gb";

/** A fixed-seed generator, so every run measures the same fleet. */
export function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** Node i's 8 GPUs: one class per node in turn; with `mig`, every tenth node two 3g.40gb instances and six whole A100s. */
export function gpuClasses(i: number, mig: boolean): string[] {
  if (mig && i % 10 === 0) return [MIG, MIG, ...Array<string>(6).fill("A100-80GB")];
  return Array<string>(8).fill(CLASSES[i % CLASSES.length]!);
}

/** Node i's GPUs as a simulated agent reports them (wire shape): gpuClasses(i, true), GPU 3 unhealthy on every 17th node. */
export function simGpuReports(i: number): Record<string, unknown>[] {
  return gpuClasses(i, true).map((c, g) => ({
    index: g,
    uuid: c.includes("/") ? `MIG-${i}-${g}` : `GPU-${i}-${g}`,
    name: c,
    class: c,
    memory_mib: 81559,
    healthy: !(i % 17 === 0 && g === 3),
    parent: c.includes("/") ? `GPU-${i}-card` : null,
  }));
}

export interface FleetOptions {
  nodes: number;
  mig: boolean;
  /** Node i is on fabric ib-(i % fabrics). */
  fabrics: number;
  /** The weights node i holds. */
  weights: (i: number) => string[];
  admin?: (i: number) => NodeDef["admin"];
  lastHeartbeat?: (i: number) => number | undefined;
}

/** The large fleet's nodes: gpu-0 … gpu-(n-1); GPU 3 unhealthy on every 17th. */
export function fleetNodes(o: FleetOptions): NodeDef[] {
  return Array.from({ length: o.nodes }, (_, i) => ({
    name: `gpu-${i}`,
    fabrics: [`ib-${i % o.fabrics}`],
    gpus: gpuClasses(i, o.mig),
    unhealthy: i % 17 === 0 ? [3] : [],
    models: o.weights(i),
    admin: o.admin?.(i) ?? "none",
    lastHeartbeat: o.lastHeartbeat?.(i),
  }));
}

/** Every 50th node cordoned; every 97th silent for a minute. */
const cordonedEvery50 = (i: number): NodeDef["admin"] => (i % 50 === 0 ? "cordoned" : "none");
const silentEvery97 = (i: number) => (i % 97 === 0 ? T0 - 60_000 : T0);

/**
 * The summary bench's fleet: 1,000 nodes (MIG, cordoned, silent ones among them), 500 models
 * of min 4 (20 of them parked), 2,000 replicas (two per node on GPUs 0-3 and 4-7, every 20th
 * starting), and when two of every three were last used.
 */
export function summaryFleet(NODES = 1000, MODELS = 500, REPLICAS = 2000) {
  const nodes = fleetNodes({
    nodes: NODES,
    mig: true,
    fabrics: 4,
    weights: (i) => [`m${i % MODELS}`, `m${(i * 7) % MODELS}`],
    admin: cordonedEvery50,
    lastHeartbeat: silentEvery97,
  });
  const models = Array.from({ length: MODELS }, (_, i) => model({ name: `m${i}`, replicas: { min: 4 } }));
  const replicas: ReplicaDef[] = [];
  const lastUsed = new Map<string, number>();
  for (let i = 0; i < REPLICAS; i++) {
    const node = `gpu-${i % NODES}`;
    const half = i < NODES ? [0, 1, 2, 3] : [4, 5, 6, 7];
    const id = `r-${i}`;
    replicas.push({ id, model: `m${i % MODELS}`, state: i % 20 === 0 ? "starting" : "ready", shards: [{ node, gpus: half }] });
    if (i % 3 !== 0) lastUsed.set(id, T0 - (i % 2000) * 1000);
  }
  const snap = snapshot({ nodes, models, replicas, modelState: models.slice(0, 20).map((m) => ({ model: m.name, parked: true, failures: 5, reason: "boom" })) });
  return { nodes, models, replicas, lastUsed, snap };
}

/**
 * The reconcile bench's fleet: 1,000 nodes (no MIG, every 100th draining), 500 models wanting
 * 5 replicas each (2,500) on two profiles, against 2,000 running: 500 to place, plus drains.
 */
export function reconcileFleet(NODES = 1000, MODELS = 500, REPLICAS = 2000) {
  const nodes = fleetNodes({ nodes: NODES, mig: false, fabrics: 4, weights: (i) => [`m${i % MODELS}`], admin: (i) => (i % 100 === 0 ? "draining" : "none") });
  const models = Array.from({ length: MODELS }, (_, i) =>
    model({
      name: `m${i}`,
      replicas: { min: 5 },
      placement: i % 3 === 0 ? "spread" : "binpack",
      profiles: [
        { name: "a", engine: "vllm", gpu_class: CLASSES[i % CLASSES.length]!, gpus: i % 7 === 0 ? 4 : 1 },
        { name: "b", engine: "vllm", gpu_class: CLASSES[(i + 1) % CLASSES.length]!, gpus: 1 },
      ],
    }),
  );
  const replicas: ReplicaDef[] = [];
  for (let i = 0; i < REPLICAS; i++) {
    const node = `gpu-${(i * 7) % NODES}`;
    replicas.push({ id: `r-${i}`, model: `m${i % MODELS}`, state: i % 10 === 0 ? "starting" : "ready", shards: [{ node, gpus: [i % 2 === 0 ? 0 : 4] }] });
  }
  const snap = snapshot({ nodes, models, replicas, now: T0 });
  return { nodes, models, replicas, snap };
}

/**
 * The placement bench's fleet as placement sees it: the same large fleet (MIG, every 50th
 * cordoned, every 97th unreachable, 8 fabrics, weights of two of `models` models), with whole
 * nodes in use as replicas hold them (some full, some half, some free) drawn from `seed`.
 */
export function placementFleet(NODES: number, models: number, usedShare: number, seed: number): PlacementNode[] {
  const rnd = lcg(seed);
  return fleetNodes({ nodes: NODES, mig: true, fabrics: 8, weights: (i) => [`m${i % models}`, `m${(i * 7) % models}`], admin: cordonedEvery50 }).map((d, i) => {
    const r = rnd();
    const used = r < usedShare * 0.6 ? 8 : r < usedShare * 1.4 ? 4 : 0;
    return {
      name: `gpu-${String(i).padStart(4, "0")}`,
      state: d.admin === "cordoned" ? "cordoned" : i % 97 === 0 ? "unreachable" : "ready",
      fabrics: d.fabrics!,
      gpus: d.gpus!.map((c, g) => ({ index: g, uuid: `GPU-${i}-${g}`, class: c, healthy: !d.unhealthy!.includes(g), used: g < used })),
      weights: new Set(d.models),
    };
  });
}

/**
 * The 200 nodes `llmgw status` is timed against, as their first heartbeats: two fabrics, H100
 * and L40S nodes in turn, MIG on every fifth (two instances and seven whole A100s), GPU 2
 * unhealthy on every 13th, weights on two of every three.
 */
export function statusFleet(): HeartbeatRequest[] {
  return Array.from({ length: 200 }, (_, i) =>
    heartbeat({
      name: `gpu-${i}`,
      fabrics: [i < 120 ? "ib-a" : "ib-b"],
      gpus: i % 5 === 2 ? [MIG, MIG, ...Array<string>(7).fill("A100-80GB")] : Array<string>(8).fill(i % 2 ? "H100-80GB" : "L40S"),
      unhealthy: i % 13 === 0 ? [2] : [],
      models: i % 3 ? ["llama-8b"] : [],
    }),
  );
}

/** A heartbeat as large as the schema allows in models, near 600 KB (the isolation bench's flood). */
export function maxHeartbeat(node: string): string {
  const models = Array.from({ length: 4096 }, (_, i) => `flood-model-${i}-${"w".repeat(128 - 20)}`.slice(0, 128));
  const gpus = Array.from({ length: 8 }, (_, i) => ({ index: i, uuid: `GPU-${node}-${i}`, name: "NVIDIA H100 80GB HBM3", class: "H100-80GB", memory_mib: 81559, healthy: true, parent: null }));
  return JSON.stringify({ node, address: "127.0.0.1", agent_version: "bench", fabrics: ["flood"], gpus, models, replicas: [] });
}

/**
 * Simulated node i's data-plane address in the scale benches: its own loopback address, since
 * engine ports are handed out per node address (900 each) and one shared address would cap the
 * fleet at 900 replicas. The benches allow each through the admin API, as an operator would
 * (`llmgw nodes allow-address`), because every heartbeat comes from 127.0.0.1.
 */
export function simAddress(i: number): string {
  return `127.${1 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
}
