// Benchmark: what a key's rate and concurrency limits cost. (1) Throughput of small chat
// requests (4 tokens, not streamed) through the router with client keys required, its key and
// its team limited (limits too high ever to refuse: every request is admitted, counted, settled
// and answered with x-ratelimit-* headers), against the same router with keys required and no
// limits; two router processes side by side, interleaved rounds in one run, wrk (one thread, 64
// keep-alive connections) on core 0, routers and the fake engine on core 1. Prints req/s per
// round, the medians and their ratio (target ≥ 0.95). (2) ns per admission check (admit, then
// release) of one key with its team, among 10,000 limited keys (target < 1 µs), and ns per
// x-ratelimit-* header text.
// Needs wrk and taskset. About a minute:
//   bun test/bench/admission.ts [seconds-per-round, default 3] [rounds, default 6] [--micro: (2) alone]

import { ManualScheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry } from "../../src/protocol/routing";
import { Admission } from "../../src/router/admission";
import { cleanupOnExit, fakeEngineProc, killAll, routerProc, spawnChild, table } from "./lib/procs";

const [secondsArg, roundsArg] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const SECONDS = Number(secondsArg ?? 3);
const ROUNDS = Number(roundsArg ?? 6);
const KEY = "sk-bench-0123456789";
const BODY = { model: "m", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 4 };

async function wrk(url: string, script: string, seconds: number): Promise<{ rps: number; non2xx: number }> {
  const c = await spawnChild("wrk", ["wrk", "-t1", "-c64", `-d${seconds}s`, "-s", script, `${url}/v1/chat/completions`], { cpus: "0", waitUrl: false });
  await c.proc.exited;
  await c.outputDone;
  const out = c.lines.join("\n");
  if (c.proc.exitCode !== 0) throw new Error(`wrk failed: ${out}\n${c.stderr()}`);
  return { rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN), non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0) };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

async function throughput(): Promise<void> {
  const engine = await fakeEngineProc("engine", { model: "m", ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 1024 }, { cpus: "1" });
  const plain = await routerProc("keys, no limits", "m", [engine.url], { cpus: "1", metricsIntervalMs: 0, extraArgs: ["--api-key", KEY] });
  const limited = await routerProc("keys and limits", "m", [engine.url], { cpus: "1", metricsIntervalMs: 0, extraArgs: ["--api-key", KEY, "--limits"] });
  const script = `/tmp/llmgw-bench-admission-${process.pid}.lua`;
  await Bun.write(script, `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer ${KEY}"\nwrk.body = ${JSON.stringify(JSON.stringify(BODY))}\n`);
  // One request by hand first: a router answering errors fast would look fast.
  for (const r of [plain, limited]) {
    const res = await fetch(`${r.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` }, body: JSON.stringify(BODY) });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${r.name} answered ${res.status}: ${text.slice(0, 300)}`);
    if (r === limited && res.headers.get("x-ratelimit-limit-requests") === null) throw new Error("the limited router sent no x-ratelimit-* headers");
  }
  await wrk(plain.url, script, 2);
  await wrk(limited.url, script, 2);
  const rps: Record<string, number[]> = { plain: [], limited: [] };
  const rows: (string | number)[][] = [["round", "keys, no limits (req/s)", "keys and limits (req/s)", "ratio"]];
  let non2xx = 0;
  for (let i = 0; i < ROUNDS; i++) {
    // Alternate which goes first, so a slow spell of the machine does not always fall on one.
    const order = i % 2 === 0 ? (["plain", "limited"] as const) : (["limited", "plain"] as const);
    const got: Record<string, number> = {};
    for (const which of order) {
      const r = await wrk(which === "plain" ? plain.url : limited.url, script, SECONDS);
      non2xx += r.non2xx;
      got[which] = r.rps;
      rps[which]!.push(r.rps);
    }
    rows.push([i + 1, got.plain!.toFixed(0), got.limited!.toFixed(0), (got.limited! / got.plain!).toFixed(3)]);
  }
  const p = median(rps.plain!);
  const l = median(rps.limited!);
  rows.push(["median", p.toFixed(0), l.toFixed(0), (l / p).toFixed(3)]);
  console.log(`small chat requests, wrk -t1 -c64, ${SECONDS} s per round, ${ROUNDS} interleaved rounds; Bun ${Bun.version}`);
  console.log(table(rows));
  console.log(`limits on / off: ${(l / p).toFixed(3)} (target >= 0.95); non-2xx answers: ${non2xx}`);
}

function micro(): void {
  const clock = new ManualScheduler();
  const a = new Admission(clock);
  const high = { rpm: 1e12, tpm: 1e15, maxConcurrent: 1e9 };
  const keys: ApiKeyEntry[] = Array.from({ length: 10_000 }, (_, i) => ({ name: `k${i}`, sha256: `sha-${i}`, pool: null, team: `t${i % 50}`, limits: high, teamLimits: high }));
  a.setKeys(keys);
  const ITERS = 2_000_000;
  const states = Array.from({ length: 64 }, (_, i) => a.of(`sha-${i * 37}`)!);
  const run = (n: number) => {
    let refused = 0;
    for (let i = 0; i < n; i++) {
      const s = states[i & 63]!;
      if (a.admit(s, 25) !== undefined) refused++;
      a.tokens(s, 4);
      s.release();
      if ((i & 1023) === 0) clock.advance(1);
    }
    return refused;
  };
  run(200_000);
  const results: number[] = [];
  for (let r = 0; r < 7; r++) {
    const t0 = Bun.nanoseconds();
    if (run(ITERS) !== 0) throw new Error("a check refused");
    results.push((Bun.nanoseconds() - t0) / ITERS);
  }
  const h0 = Bun.nanoseconds();
  let len = 0;
  for (let i = 0; i < 200_000; i++) len += a.headers(states[i & 63]!).length;
  const headerNs = (Bun.nanoseconds() - h0) / 200_000;
  console.log(`admission check (admit + tokens + release, key and team, 10,000 limited keys): median ${median(results).toFixed(1)} ns (target < 1000 ns); x-ratelimit-* header text: ${headerNs.toFixed(0)} ns (${len > 0 ? "made" : "none"})`);
}

cleanupOnExit();
try {
  micro();
  if (!process.argv.includes("--micro")) await throughput();
} finally {
  await killAll();
}
