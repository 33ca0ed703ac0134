// Benchmark: can one engine's /metrics slow down the requests of another model? The router
// alone (test/bench/lib/router-main.ts, its own process) in front of two engines: a fake engine
// serving model "m", and for model "h" either a second fake engine (the baseline) or a hostile
// one (test/helpers/hostile-engine.ts): 300,000 series, a 512 MiB gzip bomb to a poller that
// accepts gzip (plain text to one that asks for identity), or the bomb whatever the poller asks.
// Each phase sends small non-streamed chat requests for "m", one at a time on a keep-alive
// connection, while the router polls every engine's /metrics each second, and prints their
// p50/p99/max, the router's CPU share, its resident memory at the end, and then its CPU share
// with no requests (5 s): what the polling alone costs.
//   bun test/bench/hostile-metrics.ts [seconds-per-phase, default 10]

import { readFileSync } from "node:fs";
import { groupCpuSeconds } from "./lib/cpu";
import { BUN, cleanupOnExit, type Child, fakeEngineProc, killAll, pct, spawnChild, table } from "./lib/procs";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

const SECONDS = Number(process.argv[2] ?? 10);

cleanupOnExit();

function rssMb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) / 1024 : NaN;
}

function routerFor(endpoints: { id: string; url: string; models: string[] }[]): Promise<Child> {
  return spawnChild("router", [BUN, "test/bench/lib/router-main.ts", "--port", "0", "--model", "m", "--metrics-ms", "1000"], {
    env: { LLMGW_BENCH_ENDPOINTS: JSON.stringify(endpoints), LLMGW_BENCH_ROUTER_SETTINGS: JSON.stringify(ROUTER_DEFAULTS) },
  });
}

/** Requests for "m" one after another for `seconds`; their latencies in ms, sorted. */
async function measure(routerUrl: string, seconds: number): Promise<number[]> {
  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }], max_tokens: 4 });
  const out: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    const r = await fetch(`${routerUrl}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" } });
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`router answered ${r.status}`);
    out.push(performance.now() - t0);
  }
  return out.sort((a, b) => a - b);
}

const engine = await fakeEngineProc("engine-m", { model: "m", ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 64 });
const rows: (string | number)[][] = [["engine for model h", "requests", "p50 ms", "p99 ms", "max ms", "router CPU %", "router RSS MB", "idle CPU %", "polls of h"]];
const phases: { name: string; start: () => Promise<Child> }[] = [
  { name: "fake engine (baseline)", start: () => fakeEngineProc("engine-h", { model: "h", ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 64 }) },
  { name: "300,000 series", start: () => spawnChild("hostile", [BUN, "test/helpers/hostile-engine.ts", "--mode", "series", "--series", "300000"]) },
  { name: "gzip bomb, 512 MiB", start: () => spawnChild("hostile", [BUN, "test/helpers/hostile-engine.ts", "--mode", "bomb", "--bomb-mb", "512"], { timeoutMs: 60_000 }) },
  { name: "gzip whatever is asked", start: () => spawnChild("hostile", [BUN, "test/helpers/hostile-engine.ts", "--mode", "gzip-always", "--bomb-mb", "512"], { timeoutMs: 60_000 }) },
];
for (const phase of phases) {
  const h = await phase.start();
  const router = await routerFor([
    { id: "e-m", url: engine.url, models: ["m"] },
    { id: "e-h", url: h.url, models: ["h"] },
  ]);
  // Warm up: connections, JIT, the first poll round.
  await measure(router.url, 1.5);
  const cpu0 = groupCpuSeconds(router.pid);
  const t0 = performance.now();
  const lat = await measure(router.url, SECONDS);
  const cpu = ((groupCpuSeconds(router.pid) - cpu0) / ((performance.now() - t0) / 1000)) * 100;
  const rss = rssMb(router.pid);
  const idle0 = groupCpuSeconds(router.pid);
  await Bun.sleep(5000);
  const idle = ((groupCpuSeconds(router.pid) - idle0) / 5) * 100;
  const stats = h.url && phase.name !== phases[0]!.name ? ((await (await fetch(`${h.url}/stats`)).json()) as { requests: number }).requests : NaN;
  rows.push([phase.name, lat.length, pct(lat, 50).toFixed(2), pct(lat, 99).toFixed(2), lat[lat.length - 1]!.toFixed(1), cpu.toFixed(1), rss.toFixed(0), idle.toFixed(1), Number.isNaN(stats) ? "-" : stats]);
  await router.kill();
  await h.kill();
}
await killAll();
console.log(`\nrequests for model m through the router while it polls /metrics of m's engine and of h's, each second (${SECONDS} s per phase)\n`);
console.log(table(rows));
process.exit(0);
