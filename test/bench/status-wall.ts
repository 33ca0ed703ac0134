// Benchmark: wall time of `dist/llmgw status` (process start included) against a compiled
// server holding 200 nodes (target: under 150 ms). Also times `llmgw version` in the same run,
// the floor any command pays, so the figure reads as a ratio. Run after `bun build.ts`:
//   bun test/bench/status-wall.ts

import { scratchWithBinary, startServe } from "../helpers/binary";
import { statusFleet } from "./lib/fleet";

const RUNS = 30;
const { dir, bin } = scratchWithBinary();
const serve = await startServe(bin, dir);
try {
  for (const hb of statusFleet()) {
    const r = await fetch(`${serve.adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${serve.joinToken}` }, body: JSON.stringify(hb) });
    if (!r.ok) throw new Error(`heartbeat ${r.status}`);
  }

  const time = (args: string[]) => {
    const t: number[] = [];
    for (let i = 0; i < RUNS + 3; i++) {
      const s = performance.now();
      const p = Bun.spawnSync([bin, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
      const ms = performance.now() - s;
      if (p.exitCode !== 0) throw new Error(`${args.join(" ")} failed: ${p.stderr.toString()}`);
      if (i >= 3) t.push(ms);
    }
    t.sort((a, b) => a - b);
    return { p50: t[Math.floor(RUNS / 2)]!, p95: t[Math.floor(RUNS * 0.95)]!, max: t.at(-1)! };
  };
  const v = time(["version"]);
  const s = time(["status"]);
  const j = time(["status", "-o", "json"]);
  const row = (label: string, x: { p50: number; p95: number; max: number }) =>
    console.log(`${label.padEnd(28)} p50 ${x.p50.toFixed(1)} ms   p95 ${x.p95.toFixed(1)} ms   max ${x.max.toFixed(1)} ms`);
  console.log(`server: 200 nodes, ${RUNS} runs each, wall time including process start`);
  row("llmgw version (floor)", v);
  row("llmgw status", s);
  row("llmgw status -o json", j);
  console.log(`status / version at p50: ${(s.p50 / v.p50).toFixed(2)}×`);
  console.log(`target < 150 ms: ${s.p50 < 150 ? "met" : "NOT met"} (${(s.p50 / 150).toFixed(2)}× the budget)`);
} finally {
  serve.proc.kill("SIGTERM");
  await serve.proc.exited;
}
