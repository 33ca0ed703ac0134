// Benchmark: what teams, keys, limits, the fair queue and the usage ledger cost, all together.
// (1) Throughput of one workload through two routers side by side (lib/router-main.ts, each its
// own process): everything OFF (no keys required, no limits, no replica bound, --usage-ledger
// off) and everything ON (keys required; two teams with a key each, one interactive and one
// batch, and 1,000 other keys; rpm, tpm and max-concurrent limits on keys and teams too high ever
// to refuse; every replica bounded by max_inflight, so each request passes the slot gate and its
// fair queue; the usage ledger on, so streamed requests are sent with include_usage and the
// usage chunk is taken out of their answers). wrk (one thread, 64 keep-alive connections, the two
// keys in turn) on core 0; both routers and the fake engines on core 1, all on 127.0.0.1. Three
// workloads: (a) small non-streamed chat (4 tokens), (b) streamed chat of 20 tokens that the
// engine writes in one go, (c) the same flushed event by event. Rounds interleave (off, on, then
// on, off, …) so the machine's slow spells fall on both; per workload it prints req/s per round,
// the medians, on/off (target >= 0.95), and the CPU µs each request cost the router (user +
// system) and the engine (the ledger's include_usage costs the engine too). Core 1 is saturated,
// so its req/s is 1 / (router + engine µs per request): on/off is given again from those, round
// by round ("from CPU"), which other people's processes on a shared machine sway far less than
// req/s (they take core 1's time, not the work a request needs). At the end the ON router says what
// its ledger counted, against the requests wrk sent.
// (2) Micro-benchmarks, ns per operation (median of 7 runs of 1,000,000) and the garbage
// collections met during 5,000,000 of them, in a child process with JSC's GC log on: the log
// names the bytes allocated between collections (the eden allowance, ~20 MB here), so N
// collections mean about N × allowance / 5e6 bytes per operation, and none means less than
// allowance / 5e6 (~4 B), less than the smallest object (16 B). Measured: the admission check (Admission.admit + release of a key with
// its team, among 10,000 limited keys; target < 1 µs and no allocation), the same with its tokens
// counted, the slot gate's acquire + release on bounded replicas, the balancer's acquire +
// release, the whole limits path of a request (admission, then the gate), and a loop making one
// small object per operation, to show the GC count sees allocation.
// --baseline DIR adds a third router, the ON one from another checkout (say, the commit before a
// change), measured in the same rounds: before and after in one run.
// Needs wrk and taskset. About 2.5 minutes:
//   bun test/bench/limits.ts [seconds-per-round, default 2] [rounds, default 8] [--micro] [--baseline DIR]

import { ManualScheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry, EndpointInfo } from "../../src/protocol/routing";
import { Admission } from "../../src/router/admission";
import { Balancer } from "../../src/router/balancer";
import { Catalog } from "../../src/router/catalog";
import type { SlotClaim } from "../../src/router/proxy";
import { SlotGate } from "../../src/router/slot-gate";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";
import { groupCpuSeconds, groupCpuTimes } from "./lib/cpu";
import { BUN, type Child, cleanupOnExit, fakeEngineProc, killAll, routerProc, spawnChild, table } from "./lib/procs";

const positional = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && all[i - 1] !== "--baseline");
const SECONDS = Number(positional[0] ?? 2);
const ROUNDS = Number(positional[1] ?? 8);
const baselineAt = process.argv.indexOf("--baseline");
const BASELINE = baselineAt > 0 ? process.argv[baselineAt + 1] : undefined;
const WARMUP_S = 2;
const CONNECTIONS = 64;
const SECRETS = ["sk-bench-web-0123456789abcdef", "sk-bench-nightly-0123456789abcdef"];
const PROMPT = [{ role: "user", content: "Say hello to the benchmark." }];
const WORKLOADS = [
  { key: "small", title: "(a) small non-streamed chat, 4 tokens", body: { model: "m", messages: PROMPT, max_tokens: 4 } },
  { key: "stream", title: "(b) streamed chat, 20 tokens, the engine's events in one write", body: { model: "m", messages: PROMPT, max_tokens: 20, stream: true } },
  { key: "flushed", title: "(c) streamed chat, 20 tokens, the engine flushing each event", body: { model: "mf", messages: PROMPT, max_tokens: 20, stream: true } },
] as const;
type Workload = (typeof WORKLOADS)[number];

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

// ---- (2) micro-benchmarks --------------------------------------------------------------------

const OPS = 1_000_000;
const HIGH = { rpm: 1e12, tpm: 1e15, maxConcurrent: 1e9 };

/** The operations measured, each a loop of n, built fresh (the same way) in the timing run and in the GC-counting child. */
function microOps(): [string, (n: number) => void][] {
  const clock = new ManualScheduler();
  const admission = new Admission(clock);
  const keys: ApiKeyEntry[] = Array.from({ length: 10_000 }, (_, i) => ({
    name: `k${i}`,
    sha256: `sha-${i}`,
    pool: null,
    team: `t${i % 50}`,
    tier: i % 2 === 0 ? "interactive" : "batch",
    limits: HIGH,
    teamLimits: HIGH,
  }));
  admission.setKeys(keys);
  const states = Array.from({ length: 64 }, (_, i) => admission.of(`sha-${i * 37}`)!);
  const balancer = new Balancer({ ...BALANCER_DEFAULTS, now: () => clock.now() });
  const eps: EndpointInfo[] = Array.from({ length: 4 }, (_, i) => ({ id: `r${i}`, url: `http://10.0.0.${i + 1}:8000`, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, max_inflight: 1_000_000 }));
  balancer.setEndpoints(eps);
  const catalog = new Catalog();
  catalog.set([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 0 }]);
  const gate = new SlotGate({ settings: { maxHeldPerModel: 64, coldStartTimeoutMs: 60_000 }, balancer, catalog, scheduler: clock, metrics: { answered() {} }, admission });
  gate.setKeys(keys);
  const claims: SlotClaim[] = Array.from({ length: 64 }, (_, i) => ({
    req: { ex: undefined as never, facts: { model: "m", stream: false, key: i * 7919 + 1, modelStart: 0, modelEnd: 0 }, pool: undefined, owner: `sha-${i * 37}`, pin: undefined, t0: 0 },
    exclude: undefined,
    resume() {},
  }));
  const owners = claims.map((c) => c.req.owner);
  const refused = () => {
    throw new Error("a check refused");
  };
  let sink: unknown;
  return [
    [
      "admission check: admit + release (key and team, 10,000 limited keys)",
      (n) => {
        for (let i = 0; i < n; i++) {
          const s = states[i & 63]!;
          if (admission.admit(s, 25) !== undefined) refused();
          s.release();
          if ((i & 1023) === 0) clock.advance(1);
        }
      },
    ],
    [
      "admission with tokens: admit + tokens + release",
      (n) => {
        for (let i = 0; i < n; i++) {
          const s = states[i & 63]!;
          if (admission.admit(s, 25) !== undefined) refused();
          admission.tokens(s, 4);
          s.release();
          if ((i & 1023) === 0) clock.advance(1);
        }
      },
    ],
    [
      "slot gate: acquire + release (4 bounded replicas, key tiers)",
      (n) => {
        for (let i = 0; i < n; i++) {
          const lease = gate.acquire(claims[i & 63]!);
          if (lease === undefined || lease === "wait") throw new Error("the gate gave no slot");
          lease.release();
        }
      },
    ],
    [
      "balancer: acquire + release (4 replicas, prefix keys)",
      (n) => {
        for (let i = 0; i < n; i++) {
          const lease = balancer.acquire("m", claims[i & 63]!.req.facts.key, undefined, undefined);
          if (lease === undefined) throw new Error("no lease");
          lease.release();
        }
      },
    ],
    [
      "a request's limits path: of + admit + gate acquire + release + tokens + release",
      (n) => {
        for (let i = 0; i < n; i++) {
          const s = admission.of(owners[i & 63]!)!;
          if (admission.admit(s, 25) !== undefined) refused();
          const lease = gate.acquire(claims[i & 63]!);
          if (lease === undefined || lease === "wait") throw new Error("the gate gave no slot");
          lease.release();
          admission.tokens(s, 4);
          s.release();
          if ((i & 1023) === 0) clock.advance(1);
        }
      },
    ],
    [
      "reference: one small object made per operation",
      (n) => {
        for (let i = 0; i < n; i++) sink = { i };
        if (sink === undefined) throw new Error("unreachable");
      },
    ],
  ];
}

/** Operations run by the GC-counting child: enough that one object each would fill the eden allowance many times. */
const GC_OPS = 5_000_000;

/** The GC-counting child: each operation GC_OPS times between markers on stderr, JSC's GC log on. */
function gcChild(): void {
  for (const [name, run] of microOps()) {
    run(200_000);
    Bun.gc(true);
    process.stderr.write(`=== begin ${name}\n`);
    run(GC_OPS);
    process.stderr.write(`=== end ${name}\n`);
  }
}

/** Collections met during GC_OPS operations of each kind, and the largest eden allowance the log named, from the child's GC log. */
async function gcCounts(): Promise<{ counts: Map<string, number>; allowance: number }> {
  const proc = Bun.spawn([BUN, import.meta.path, "--gc-child"], { env: { ...process.env, BUN_JSC_logGC: "1" }, stdout: "ignore", stderr: "pipe" });
  const log = await new Response(proc.stderr).text();
  await proc.exited;
  if (proc.exitCode !== 0) throw new Error(`the GC-counting child failed: ${log.slice(-2000)}`);
  const out = new Map<string, number>();
  let current: string | undefined;
  let allowance = 0;
  for (const line of log.split("\n")) {
    const allowed = /bytes allowed: (\d+)/.exec(line);
    if (allowed !== null) allowance = Math.max(allowance, Number(allowed[1]));
    if (line.startsWith("=== begin ")) {
      current = line.slice(10);
      out.set(current, 0);
    } else if (line.startsWith("=== end ")) current = undefined;
    else if (current !== undefined && /: START /.test(line)) out.set(current, out.get(current)! + 1);
  }
  return { counts: out, allowance };
}

async function micro(): Promise<void> {
  const rows: (string | number)[][] = [["operation", "ns/op (median of 7)", "GCs in 5e6 ops", "allocation"]];
  const { counts: gcs, allowance } = await gcCounts();
  // Without a collection requested in the child the allowance is unknown: JSC's smallest, 8 MB, is assumed.
  const eden = allowance > 0 ? allowance : 8 * 1024 * 1024;
  for (const [name, run] of microOps()) {
    run(200_000);
    const ns: number[] = [];
    for (let r = 0; r < 7; r++) {
      const t0 = Bun.nanoseconds();
      run(OPS);
      ns.push((Bun.nanoseconds() - t0) / OPS);
    }
    const g = gcs.get(name);
    const perOp = (eden / GC_OPS).toFixed(1);
    rows.push([name, median(ns).toFixed(1), g ?? "?", g === 0 ? `none (< ${perOp} B/op)` : g === undefined ? "?" : `~${Math.round((g * eden) / GC_OPS)} B/op`]);
  }
  console.log(`micro-benchmarks, Bun ${Bun.version} (targets: the admission check and the acquire path < 1000 ns, the admission check allocating nothing); eden allowance ${(eden / 1e6).toFixed(1)} MB`);
  console.log(table(rows));
}

// ---- (1) throughput, everything off against everything on ------------------------------------

interface WrkResult {
  rps: number;
  requests: number;
  non2xx: number;
  errors: string;
}

async function wrk(url: string, script: string, seconds: number): Promise<WrkResult> {
  const c = await spawnChild("wrk", ["wrk", "-t1", `-c${CONNECTIONS}`, `-d${seconds}s`, "-s", script, `${url}/v1/chat/completions`], { cpus: "0", waitUrl: false });
  await c.proc.exited;
  await c.outputDone;
  const out = c.lines.join("\n");
  if (c.proc.exitCode !== 0) throw new Error(`wrk failed: ${out}\n${c.stderr()}`);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? Number.NaN),
    requests: Number(/(\d+) requests in/.exec(out)?.[1] ?? 0),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0),
    errors: /Socket errors: (.*)/.exec(out)?.[1] ?? "",
  };
}

/** The workload's requests, the two keys in turn (the OFF router requires none and reads none). */
function luaScript(w: Workload): string {
  const auths = SECRETS.map((s) => JSON.stringify(`Bearer ${s}`)).join(", ");
  return `wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = ${JSON.stringify(JSON.stringify(w.body))}
local reqs = {}
function init(args)
  for i, a in ipairs({ ${auths} }) do
    wrk.headers["Authorization"] = a
    reqs[i] = wrk.format()
  end
end
local n = 0
function request()
  n = n + 1
  return reqs[n % 2 + 1]
end
`;
}

/** One request of each key by hand first: a router answering errors fast would look fast. */
async function check(r: Child, w: Workload, on: boolean): Promise<void> {
  for (const secret of SECRETS) {
    const res = await fetch(`${r.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${secret}` }, body: JSON.stringify(w.body) });
    const text = await res.text();
    const stream = "stream" in w.body;
    const ok = res.status === 200 && (stream ? text.includes("data: [DONE]") && !text.includes('"usage"') : /"finish_reason":"(stop|length)"/.test(text));
    if (!ok) throw new Error(`${r.name} answered ${res.status}: ${text.slice(0, 300)}`);
    if (on !== (res.headers.get("x-ratelimit-limit-requests") !== null)) throw new Error(`${r.name}: x-ratelimit-* headers ${on ? "missing" : "present"}`);
  }
  if (on) {
    const res = await fetch(`${r.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(w.body) });
    await res.arrayBuffer();
    if (res.status !== 401) throw new Error(`${r.name} answered a request without a key ${res.status}, not 401: are keys required?`);
  }
}

interface Side {
  name: string;
  child: Child;
  on: boolean;
  rps: number[];
  routerUs: number[];
  routerUserUs: number[];
  engineUs: number[];
  non2xx: number;
  errors: string[];
  requests: number;
}

async function throughput(): Promise<void> {
  const one = await fakeEngineProc("engine", { model: "m", ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 4096 }, { cpus: "1" });
  const flushing = await fakeEngineProc("engine (flushing)", { model: "mf", ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 4096, flushEvents: true }, { cpus: "1" });
  const endpoints = JSON.stringify([
    { id: "e0", url: one.url, models: ["m"] },
    { id: "e1", url: flushing.url, models: ["mf"] },
  ]);
  const env = { LLMGW_BENCH_ENDPOINTS: endpoints };
  const onArgs = ["--tenants", SECRETS.join(","), "--max-inflight", "100000"];
  const start = (name: string, extraArgs: string[], cwd?: string) => routerProc(name, "m", [], { cpus: "1", metricsIntervalMs: 0, extraArgs, env, ...(cwd !== undefined ? { cwd } : {}) });
  const side = (name: string, child: Child, on: boolean): Side => ({ name, child, on, rps: [], routerUs: [], routerUserUs: [], engineUs: [], non2xx: 0, errors: [], requests: 0 });
  const sides = [side("everything off", await start("router off", ["--usage-ledger", "off"]), false), side("everything on", await start("router on", onArgs), true)];
  if (BASELINE !== undefined) sides.push(side("on, baseline checkout", await start("router on (baseline)", onArgs, BASELINE), true));
  const engineOf = (w: Workload) => (w.key === "flushed" ? flushing : one);
  const dir = (await Bun.$`mktemp -d /tmp/llmgw-bench-limits.XXXXXX`.text()).trim();
  const summary: string[] = [];
  let sent = 0;
  console.log(`\nthroughput: wrk -t1 -c${CONNECTIONS} on core 0, ${SECONDS} s per round, ${ROUNDS} interleaved rounds per workload; routers and fake engines on core 1; Bun ${Bun.version}`);
  try {
    for (const w of WORKLOADS) {
      const script = `${dir}/${w.key}.lua`;
      await Bun.write(script, luaScript(w));
      for (const s of sides) {
        await check(s.child, w, s.on);
        await wrk(s.child.url, script, WARMUP_S);
        Object.assign(s, { rps: [], routerUs: [], routerUserUs: [], engineUs: [], non2xx: 0, errors: [], requests: 0 });
      }
      const engine = engineOf(w);
      for (let round = 0; round < ROUNDS; round++) {
        // Alternate which goes first, so a slow spell of the machine does not always fall on one.
        const order = round % 2 === 0 ? sides : [...sides].reverse();
        for (const s of order) {
          const r0 = groupCpuTimes(s.child.pid);
          const e0 = groupCpuSeconds(engine.pid);
          const r = await wrk(s.child.url, script, SECONDS);
          const n = Math.max(1, r.requests);
          const r1 = groupCpuTimes(s.child.pid);
          s.routerUs.push(((r1.user + r1.system - r0.user - r0.system) * 1e6) / n);
          s.routerUserUs.push(((r1.user - r0.user) * 1e6) / n);
          s.engineUs.push(((groupCpuSeconds(engine.pid) - e0) * 1e6) / n);
          s.rps.push(r.rps);
          s.non2xx += r.non2xx;
          s.requests += r.requests;
          if (r.errors) s.errors.push(r.errors);
          if (s.on && s.name === "everything on") sent += r.requests;
        }
      }
      const off = sides[0]!;
      // What one request cost core 1 (router and engine), and so on/off as a saturated core gives it.
      const coreUs = (s: Side, i: number) => s.routerUs[i]! + s.engineUs[i]!;
      const fromCpu = (s: Side) => Array.from({ length: ROUNDS }, (_, i) => coreUs(off, i) / coreUs(s, i));
      const rows: (string | number)[][] = [["round", ...sides.map((s) => `${s.name} (req/s)`), "on/off", "on/off from CPU"]];
      for (let i = 0; i < ROUNDS; i++) rows.push([i + 1, ...sides.map((s) => s.rps[i]!.toFixed(0)), (sides[1]!.rps[i]! / off.rps[i]!).toFixed(3), fromCpu(sides[1]!)[i]!.toFixed(3)]);
      rows.push(["median", ...sides.map((s) => median(s.rps).toFixed(0)), (median(sides[1]!.rps) / median(off.rps)).toFixed(3), median(fromCpu(sides[1]!)).toFixed(3)]);
      console.log(`\n${w.title}`);
      console.log(table(rows));
      const cpu = sides
        .map((s) => `${s.name}: router ${median(s.routerUs).toFixed(1)} µs (user ${median(s.routerUserUs).toFixed(1)}) + engine ${median(s.engineUs).toFixed(1)} µs`)
        .join("   ");
      console.log(`CPU per request (median of rounds): ${cpu}`);
      const bad = sides.filter((s) => s.non2xx > 0 || s.errors.length > 0).map((s) => `${s.name}: ${s.non2xx} non-2xx, socket errors ${s.errors.join("; ") || "none"}`);
      if (bad.length > 0) console.log(`NOT ALL ANSWERED: ${bad.join("   ")}`);
      const ratio = median(sides[1]!.rps) / median(off.rps);
      const perRound = median(sides[1]!.rps.map((x, i) => x / off.rps[i]!));
      summary.push(
        `${w.key.padEnd(8)} on/off = ${ratio.toFixed(3)} (median of rounds' ratios ${perRound.toFixed(3)}), from CPU ${median(fromCpu(sides[1]!)).toFixed(3)}` +
          (BASELINE !== undefined
            ? `   baseline on/off = ${(median(sides[2]!.rps) / median(off.rps)).toFixed(3)}, from CPU ${median(fromCpu(sides[2]!)).toFixed(3)}   on/baseline = ${(median(sides[1]!.rps) / median(sides[2]!.rps)).toFixed(3)}`
            : ""),
      );
    }
  } finally {
    await Bun.$`rm -rf ${dir}`.quiet().nothrow();
  }
  console.log(`\nsummary, throughput with everything on / everything off (target >= 0.95):\n${summary.join("\n")}`);
  // The ON router's ledger, said as it stops: every request wrk sent it in the rounds (and the warm-ups and checks) counted.
  const on = sides[1]!.child;
  await on.kill();
  await on.outputDone;
  const ledger = on.lines.find((l) => l.startsWith("ledger:"));
  console.log(`the ON router's ${ledger ?? "ledger: said nothing"} (wrk's measured rounds sent it ${sent}, beside warm-ups and checks)`);
}

if (process.argv.includes("--gc-child")) {
  gcChild();
} else {
  cleanupOnExit();
  try {
    await micro();
    if (!process.argv.includes("--micro")) await throughput();
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exitCode = 1;
  } finally {
    await killAll();
  }
  process.exit();
}
