// Benchmark: what one unchanged heartbeat costs as the fleet grows (issue 14: flat from 100 to
// 5,000 nodes, ≤ 1.5×), one steady-state tick at each size, and 2,000 fresh joins. In-process:
// a head node on a manual clock, nodes of 8 GPUs, N/2 models placed by the control plane and
// reported ready. Run: bun test/bench/heartbeat-cost.ts [sizes, e.g. 100,500,1000]

import type { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { heartbeat, model } from "../helpers/fleet";
import { testServer } from "../helpers/server";

const SIZES = (process.argv[2] ?? "100,500,1000,2000,5000").split(",").map(Number);

async function size(n: number): Promise<{ hbUs: number; httpUs: number; tickMs: number }> {
  const s = await testServer({}, undefined);
  const c = s.parts.control;
  try {
    const hbs: HeartbeatRequest[] = Array.from({ length: n }, (_, i) => heartbeat({ name: `gpu-${i}`, fabrics: [`ib-${i % 4}`], gpus: Array(8).fill("H100-80GB"), models: [] }));
    for (const hb of hbs) await c.intake.heartbeat(hb);
    await s.seed.models(Array.from({ length: Math.floor(n / 2) }, (_, i) => model({ name: `m-${i}` })));
    await c.loop.tick();
    // Each node reports what it was assigned, ready; twice, so the second round changes nothing.
    for (let round = 0; round < 2; round++)
      for (const hb of hbs) {
        const { assignments } = c.projector.response(hb.node);
        hb.replicas = assignments.map((a) => ({ id: a.id, state: "ready" as const, port: a.port, error: null }));
        await c.intake.heartbeat(hb);
      }
    await c.loop.tick();
    const ready = (await c.views.replicas()).filter((r) => r.state === "ready").length;
    const t0 = performance.now();
    for (const hb of hbs) await c.intake.heartbeat(hb);
    const hbUs = ((performance.now() - t0) * 1000) / n;
    // Through the agent API over HTTP: the credential path, parse, the same intake call.
    const k = Math.min(n, 500);
    const t1 = performance.now();
    for (let i = 0; i < k; i++) {
      const res = await s.agent(hbs[i]);
      if (!res.ok) throw new Error(`heartbeat refused: ${res.status} ${await res.text()}`);
    }
    const httpUs = ((performance.now() - t1) * 1000) / k;
    const ticks: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      await c.loop.tick();
      ticks.push(performance.now() - t);
    }
    ticks.sort((a, b) => a - b);
    console.log(`${String(n).padStart(5)} nodes, ${ready} replicas ready: heartbeat ${hbUs.toFixed(1)} µs in process, ${httpUs.toFixed(0)} µs over HTTP (incl. the helper's client); tick p50 ${ticks[2]!.toFixed(1)} ms`);
    return { hbUs, httpUs, tickMs: ticks[2]! };
  } finally {
    await s.stop();
  }
}

async function joins(n: number): Promise<void> {
  const s = await testServer({}, undefined);
  try {
    const t = performance.now();
    for (let i = 0; i < n; i++) {
      const res = await s.agent(heartbeat({ name: `new-${i}`, gpus: Array(8).fill("H100-80GB") }));
      if (!res.ok) throw new Error(`join refused: ${res.status} ${await res.text()}`);
    }
    console.log(`${n} fresh joins over HTTP, one after another: ${((performance.now() - t) / 1000).toFixed(2)} s`);
  } finally {
    await s.stop();
  }
}

const out = new Map<number, Awaited<ReturnType<typeof size>>>();
for (const n of SIZES) out.set(n, await size(n));
const lo = out.get(Math.min(...SIZES))!;
const hi = out.get(Math.max(...SIZES))!;
console.log(`ratio ${Math.max(...SIZES)}/${Math.min(...SIZES)}: in process ${(hi.hbUs / lo.hbUs).toFixed(2)}×, over HTTP ${(hi.httpUs / lo.httpUs).toFixed(2)}×`);
await joins(Number(process.env.JOINS ?? 2000));
