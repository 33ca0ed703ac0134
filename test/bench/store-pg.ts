// The store's reads and writes at 1,000 nodes × 8 GPUs, 2,000 replicas, 500 models, on a real
// local PostgreSQL 15 (test/helpers/postgres.ts) against SQLite in a temp file, in one run:
// the snapshot read (target well under 30 ms), a batch of 1,000 last-seen touches, heartbeats
// (applyHeartbeat) one after another and 16 at a time.
//
//   bun test/bench/store-pg.ts

import { rmSync } from "node:fs";
import { join } from "node:path";
import type { StorePort } from "../../src/control/store-port";
import { Store } from "../../src/store";
import { PgStore } from "../../src/store/pg";
import { heartbeat, model } from "../helpers/fleet";
import { startPostgres } from "../helpers/postgres";
import { scratchDir } from "../helpers/tmp";
import { PG_DEFAULTS, SQLITE_DEFAULTS } from "../helpers/control-settings";

const NODES = 1000;
const GPUS = 8;
const REPLICAS = 2000;
const MODELS = 500;
const NOW = 1_800_000_000_000;

const hb = (i: number) => heartbeat({ name: `node-${String(i).padStart(4, "0")}`, gpus: Array(GPUS).fill("H100-80GB"), models: [`m${i % MODELS}`] });

async function fill(s: StorePort): Promise<void> {
  for (let i = 0; i < NODES; i++) await s.applyHeartbeat(hb(i), NOW);
  await s.saveModels(Array.from({ length: MODELS }, (_, i) => ({ spec: model({ name: `m${i}` }), revision: 1, created: true })), NOW);
  for (let c = 0; c < REPLICAS; c += 500) {
    const create = Array.from({ length: 500 }, (_, k) => {
      const i = c + k;
      return { id: `r${String(i).padStart(5, "0")}`, model: `m${i % MODELS}`, profile: "default", shards: [{ node: `node-${String(i % NODES).padStart(4, "0")}`, gpus: [i % GPUS] }], port: 20000 + i, endpoint: `http://10.0.0.1:${20000 + i}` };
    });
    await s.applyPlan({ create, update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [] }, NOW);
  }
}

function stats(xs: number[]) {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
  return { p50: q(0.5), p95: q(0.95), max: s.at(-1)! };
}

async function time(n: number, fn: (i: number) => Promise<unknown>): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await fn(i);
    out.push(performance.now() - t0);
  }
  return out;
}

async function measure(name: string, s: StorePort) {
  const t0 = performance.now();
  await fill(s);
  const fillMs = performance.now() - t0;
  const snap = await s.snapshot();
  if (snap.nodes.length !== NODES || snap.gpus.length !== NODES * GPUS || snap.replicas.length !== REPLICAS || snap.models.length !== MODELS) throw new Error(`${name}: the fleet is not what was written`);
  await time(5, () => s.snapshot()); // warm up
  const cpu0 = process.cpuUsage();
  const read = stats(await time(40, () => s.snapshot()));
  const cpu = process.cpuUsage(cpu0);
  // This process's CPU per read (the database server's own, for PostgreSQL, not counted): less
  // sensitive than wall time to other load on the machine.
  const cpuMs = (cpu.user + cpu.system) / 1000 / 40;
  const touch = stats(await time(20, (k) => s.touchNodes(Array.from({ length: NODES }, (_, i) => ({ name: `node-${String(i).padStart(4, "0")}`, at: NOW + k + 1 })))));
  const seq = performance.now();
  for (let i = 0; i < 500; i++) await s.applyHeartbeat(hb(i), NOW + 100);
  const seqRate = 500 / ((performance.now() - seq) / 1000);
  const par = performance.now();
  for (let c = 0; c < NODES; c += 16) await Promise.all(Array.from({ length: 16 }, (_, k) => s.applyHeartbeat(hb((c + k) % NODES), NOW + 200)));
  const parRate = NODES / ((performance.now() - par) / 1000);
  return { name, cpuMs, fillS: +(fillMs / 1000).toFixed(1), snapshot: read, touch1000: touch, heartbeatsPerS: { sequential: Math.round(seqRate), concurrent16: Math.round(parRate) } };
}

const fmt = (o: { p50: number; p95: number; max: number }) => `p50 ${o.p50.toFixed(1)} ms, p95 ${o.p95.toFixed(1)} ms, max ${o.max.toFixed(1)} ms`;

const dir = scratchDir("llmgw-bench-");
const pg = await startPostgres();
try {
  const lite = new Store({ path: join(dir, "bench.db"), ...SQLITE_DEFAULTS });
  const a = await measure("SQLite", lite);
  lite.close();
  const store = await PgStore.open({ ...PG_DEFAULTS, url: pg.url });
  const b = await measure("PostgreSQL", store);
  await store.close();
  console.log(`load average ${(await import("node:os")).loadavg()[0]!.toFixed(1)} on ${(await import("node:os")).cpus().length} cores`);
  console.log(`store at ${NODES} nodes × ${GPUS} GPUs, ${REPLICAS} replicas, ${MODELS} models`);
  for (const r of [a, b]) {
    console.log(`${r.name.padEnd(10)} snapshot ${fmt(r.snapshot)}; this process's CPU ${r.cpuMs.toFixed(1)} ms per read`);
    console.log(`${"".padEnd(10)} touchNodes(1000) ${fmt(r.touch1000)}`);
    console.log(`${"".padEnd(10)} heartbeats ${r.heartbeatsPerS.sequential}/s one at a time, ${r.heartbeatsPerS.concurrent16}/s 16 at a time (fill ${r.fillS} s)`);
  }
} finally {
  await pg.stop();
  rmSync(dir, { recursive: true, force: true });
}
