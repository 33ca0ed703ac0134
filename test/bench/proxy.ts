// Benchmark: proxy throughput. wrk (one thread, 64 keep-alive connections, pinned to core 0)
// POSTs chat requests for 8 s per target (four 2 s rounds, the targets taking turns) to a fake
// engine (ttft 0, no token delay): directly, through llmgw's router (its own process,
// lib/router-main.ts), the same router on Bun.serve instead of its own server
// (LLMGW_HTTP_SERVER=bun: what the own server is worth), through nginx (one worker, keep-alive
// upstream, proxy_buffering off), through haproxy (one thread, `option http-no-delay`), and
// for reference through a bare Bun.serve+fetch proxy (lib/bare-proxy.ts: Bun's floor with fetch)
// and a Bun.serve proxy whose upstream client is a hand-rolled HTTP/1.1 over Bun.connect
// (lib/raw-proxy.ts: Bun without fetch, the floor of any Bun.serve proxy: one socket write
// each way and none of the router's work; llmgw's router has its own server on Bun.listen
// instead, src/http/server.ts, and beats it), and the floor of ANY Bun proxy (lib/floor-proxy.ts:
// Bun.listen in front, pooled Bun.connect sockets behind, bytes relayed as they come with only
// the message boundaries parsed: if it is below nginx, no Bun router can reach nginx here; printed
// as floor/nginx, floor/haproxy and llmgw/floor), and the same floor with the work no router can
// skip (lib/floor-proxy.ts --lean: both heads read by the router's tokenizer, the JSON body, the
// replica picked, heads of its own written, tokens counted: if it is below nginx, no redesign of
// the request path reaches nginx here; printed as lean/nginx, lean/haproxy and llmgw/lean).
// Every proxy and the engine share core 1. Three workloads: (a) small non-streamed answers (4
// tokens), (b) streamed answers of 20 tokens (22 SSE events) as the fake engine writes them at
// token delay 0, all in one 4,972-byte write ("streamed as one chunk"), and (c) the same answers
// with the engine flushing each event on its own (--flush-events: "streamed, flushed per event",
// a write per token as an engine generating them makes; a second engine, with its own set of
// proxies in front of it). Prints req/s, latency, the CPU each process spent per request (the
// proxy's user time apart: its own code, where the kernel's socket work is about the same for
// every proxy), the share of core 1 other people's processes took meanwhile
// (the machine is shared: above a few %, a figure is noise), and the ratios llmgw/nginx and
// llmgw/haproxy (target ≥ 1.0: nginx for small answers, haproxy for streams) and llmgw/direct, from req/s and again from
// the CPU each request cost core 1 round by round (less hostage to the machine's slow spells). --ablate adds bare-proxy variants that each add one piece of the
// router's per-request work (lib/bare-proxy.ts flags), to see what the router's own cost is made
// of (another minute). Needs wrk, nginx, haproxy and taskset on PATH and 2+ cores. About 3.5 minutes:
//   bun test/bench/proxy.ts [seconds-per-target, default 8] [--ablate] [--baseline DIR]

import { groupCpuSeconds, groupCpuTimes, othersMeter } from "./lib/cpu";
import { BUN, type Child, cleanupOnExit, fakeEngineProc, haproxyProc, killAll, nginxProc, routerProc, spawnChild, table } from "./lib/procs";

const DURATION_S = Number(process.argv.slice(2).find((a, i, all) => !a.startsWith("--") && all[i - 1] !== "--baseline") ?? 8);
const ABLATE = process.argv.includes("--ablate");
// --baseline DIR: the router of another checkout (say, main) measured in the same interleaved
// rounds, for before/after figures that share one run's noise.
const baselineAt = process.argv.indexOf("--baseline");
const BASELINE = baselineAt > 0 ? process.argv[baselineAt + 1] : undefined;
const WARMUP_S = 2;
const FLOOR = "floor: Bun.listen+Bun.connect relay";
const LEAN = "lean: floor + what a router must do";
const ROUNDS = 4;
const CONNECTIONS = 64;
const MODEL = "m";
const PROXY_CPUS = "1";
const LOAD_CPUS = "0";

interface Workload {
  key: string;
  title: string;
  body: object;
  /** Served by the engine that writes each streamed event on its own (fake engine --flush-events). */
  flushed: boolean;
}
const STREAM_BODY = { model: MODEL, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 20, stream: true };
const WORKLOADS: Workload[] = [
  { key: "small", title: "(a) small non-streamed chat, 4 tokens", body: { model: MODEL, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 4 }, flushed: false },
  { key: "stream", title: "(b) streamed chat, 20 tokens, streamed as one chunk (the engine writes its 22 events at once)", body: STREAM_BODY, flushed: false },
  { key: "flushed", title: "(c) streamed chat, 20 tokens, streamed flushed per event (the engine writes each event on its own)", body: STREAM_BODY, flushed: true },
];

interface WrkResult {
  rps: number;
  p50: string;
  p99: string;
  non2xx: number;
  errors: string;
  requests: number;
}

/** wrk for `seconds` (whole seconds: wrk reads no fraction, so an odd duration's half-rounds are rounded). */
async function wrk(url: string, script: string, seconds: number): Promise<WrkResult> {
  const c = await spawnChild("wrk", ["wrk", "-t1", `-c${CONNECTIONS}`, `-d${Math.max(1, Math.round(seconds))}s`, "--latency", "-s", script, `${url}/v1/chat/completions`], {
    cpus: LOAD_CPUS,
    waitUrl: false,
  });
  await c.proc.exited;
  await c.outputDone;
  const out = c.lines.join("\n");
  if (c.proc.exitCode !== 0) throw new Error(`wrk failed (${c.proc.exitCode}): ${out}\n${c.stderr()}`);
  const num = (re: RegExp) => Number(re.exec(out)?.[1] ?? NaN);
  const sock = /Socket errors: (.*)/.exec(out)?.[1] ?? "";
  return {
    rps: num(/Requests\/sec:\s+([\d.]+)/),
    p50: /\s50%\s+(\S+)/.exec(out)?.[1] ?? "?",
    p99: /\s99%\s+(\S+)/.exec(out)?.[1] ?? "?",
    non2xx: num(/Non-2xx or 3xx responses:\s+(\d+)/) || 0,
    errors: sock,
    requests: num(/(\d+) requests in/),
  };
}

/** One request by hand first: a proxy that answers errors fast would otherwise look fast. */
async function check(url: string, w: Workload): Promise<void> {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(w.body) });
  const text = await r.text();
  const ok = r.status === 200 && ((w.body as { stream?: boolean }).stream ? text.includes("data: [DONE]") : /"finish_reason":"(stop|length)"/.test(text));
  if (!ok) throw new Error(`${url} answered ${r.status}: ${text.slice(0, 300)}`);
}

function median(xs: number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/** An engine and every proxy in front of it, all on core 1. */
interface Targets {
  engine: Child;
  core1: Child[];
  router: Child;
  nginx: Child;
  haproxy: Child;
  onBun: Child;
  bare: Child;
  bareBuf: Child;
  raw: Child;
  floor: Child;
  lean: Child;
  baseline: Child | undefined;
  ablations: Record<string, [string, string, Child][]>;
}

async function startTargets(flushed: boolean): Promise<Targets> {
  const tag = flushed ? " (flushing engine)" : "";
  const engine = await fakeEngineProc(`engine${tag}`, { model: MODEL, ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 4096, flushEvents: flushed }, { cpus: PROXY_CPUS });
  const router = await routerProc("router", MODEL, [engine.url], { cpus: PROXY_CPUS });
  const nginx = await nginxProc("nginx", engine.url, { cpus: PROXY_CPUS });
  const haproxy = await haproxyProc("haproxy", engine.url, { cpus: PROXY_CPUS });
  // The router on Bun.serve instead of its own server (LLMGW_HTTP_SERVER=bun): what the own server is worth.
  const onBun = await routerProc("router-bun", MODEL, [engine.url], { cpus: PROXY_CPUS, env: { LLMGW_HTTP_SERVER: "bun" } });
  const bareEnv = { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" };
  const bare = await spawnChild("bare", [BUN, "test/bench/lib/bare-proxy.ts", engine.url], { cpus: PROXY_CPUS, env: bareEnv });
  const bareBuf = await spawnChild("bare-buffered", [BUN, "test/bench/lib/bare-proxy.ts", engine.url, "--buffer"], { cpus: PROXY_CPUS, env: bareEnv });
  const raw = await spawnChild("raw", [BUN, "test/bench/lib/raw-proxy.ts", engine.url], { cpus: PROXY_CPUS });
  const floor = await spawnChild("floor", [BUN, "test/bench/lib/floor-proxy.ts", engine.url], { cpus: PROXY_CPUS });
  const lean = await spawnChild("lean", [BUN, "test/bench/lib/floor-proxy.ts", engine.url, "--lean"], { cpus: PROXY_CPUS });
  const core1 = [engine, router, nginx, haproxy, onBun, bare, bareBuf, raw, floor, lean];
  const baseline = BASELINE === undefined ? undefined : await routerProc("router-baseline", MODEL, [engine.url], { cpus: PROXY_CPUS, cwd: BASELINE });
  if (baseline) core1.push(baseline);
  const ablations: Record<string, [string, string, Child][]> = { small: [], stream: [], flushed: [] };
  if (ABLATE) {
    const variant = async (flags: string[]) => {
      const c = await spawnChild(`bare ${flags.join(" ")}`, [BUN, "test/bench/lib/bare-proxy.ts", engine.url, ...flags], { cpus: PROXY_CPUS, env: bareEnv });
      core1.push(c);
      return c;
    };
    const sig = await variant(["--buffer", "--signal"]);
    const hdr = await variant(["--buffer", "--headers"]);
    const all = await variant(["--buffer", "--signal", "--headers"]);
    const wrap = await variant(["--wrap"]);
    const wrapAll = await variant(["--wrap", "--signal", "--headers"]);
    ablations.small!.push(["  + abort signal, timer", sig.url, sig], ["  + header copies", hdr.url, hdr], ["  + both", all.url, all]);
    ablations.stream!.push(["  + JS stream wrapper", wrap.url, wrap], ["  + wrapper, signal, headers", wrapAll.url, wrapAll]);
    ablations.flushed = ablations.stream!;
  }
  return { engine, core1, router, nginx, haproxy, onBun, bare, bareBuf, raw, floor, lean, baseline, ablations };
}

cleanupOnExit();
const dir = (await Bun.$`mktemp -d /tmp/llmgw-bench-proxy.XXXXXX`.text()).trim();
/** Per workload: llmgw/lean and llmgw/nginx from req/s (and the baseline's over nginx), for the summary at the end. */
const summary: string[] = [];
try {
  const info = (await Bun.$`uname -r`.text()).trim();
  console.log(`proxy throughput: wrk -t1 -c${CONNECTIONS}, ${DURATION_S} s per target in ${ROUNDS} interleaved rounds, on core ${LOAD_CPUS}; engine and proxies on core ${PROXY_CPUS}; Bun ${Bun.version}, ${(await Bun.$`nginx -v 2>&1`.text()).trim()}, Linux ${info}`);

  let set: Targets | undefined;
  for (const w of WORKLOADS) {
    // One engine and its proxies at a time: the one-write engine's for (a) and (b), then the
    // flushing engine's for (c).
    if (set === undefined || set.engine.name.includes("flushing") !== w.flushed) {
      if (set !== undefined) await Promise.all(set.core1.map((c) => c.kill()));
      set = await startTargets(w.flushed);
    }
    const { engine, core1, router, nginx, haproxy, onBun, bare, bareBuf, raw, floor, lean, baseline, ablations } = set;
    const script = `${dir}/${w.key}.lua`;
    await Bun.write(script, `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ${JSON.stringify(JSON.stringify(w.body))}\n`);
    const targets: [string, string, Child | undefined][] = [
      ["direct", engine.url, undefined],
      ["llmgw router", router.url, router],
      ...(baseline ? ([["llmgw router (baseline checkout)", baseline.url, baseline]] as [string, string, Child][]) : []),
      ["nginx (1 worker)", nginx.url, nginx],
      ["haproxy (1 thread)", haproxy.url, haproxy],
      ["llmgw router on Bun.serve", onBun.url, onBun],
      ["bare Bun proxy (streams body)", bare.url, bare],
    ];
    if (w.key === "small") targets.push(["bare Bun proxy (buffers body)", bareBuf.url, bareBuf]);
    targets.push(...ablations[w.key]!);
    targets.push(["Bun.serve + raw-socket client", raw.url, raw]);
    targets.push([FLOOR, floor.url, floor]);
    targets.push([LEAN, lean.url, lean]);
    // Each target is measured in ROUNDS slices of the duration, the targets taking turns, so a
    // slow spell of the (shared, virtual) machine is spread over all of them instead of one.
    interface Acc {
      requests: number;
      seconds: number;
      perRound: number[];
      p50: string[];
      p99: string[];
      non2xx: number;
      errors: string[];
      pCpu: number;
      /** The proxy's user CPU (its own code; the rest is the kernel's, mostly socket calls every proxy makes alike). */
      pUser: number;
      eCpu: number;
      /** Per round: the proxy's CPU over the engine's, for the same requests (the machine's speed cancels out). */
      relCpu: number[];
      /** Per round: proxy and engine µs of CPU per request, together (what one request costs core 1). */
      coreUs: number[];
      others: number[];
    }
    const acc = new Map<string, Acc>();
    for (const [name, url] of targets) {
      await check(url, w);
      await wrk(url, script, WARMUP_S);
      acc.set(name, { requests: 0, seconds: 0, perRound: [], p50: [], p99: [], non2xx: 0, errors: [], pCpu: 0, pUser: 0, eCpu: 0, relCpu: [], coreUs: [], others: [] });
    }
    const slice = DURATION_S / ROUNDS;
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, url, proxy] of targets) {
        const a = acc.get(name)!;
        const p0 = proxy ? groupCpuTimes(proxy.pid) : { user: 0, system: 0 };
        const e0 = groupCpuSeconds(engine.pid);
        const others = othersMeter(() => core1.map((c) => c.pid), 1);
        const r = await wrk(url, script, slice);
        a.others.push(others());
        const p1 = proxy ? groupCpuTimes(proxy.pid) : p0;
        const pRound = p1.user + p1.system - (p0.user + p0.system);
        const eRound = groupCpuSeconds(engine.pid) - e0;
        a.pCpu += pRound;
        a.pUser += p1.user - p0.user;
        a.eCpu += eRound;
        if (eRound > 0) a.relCpu.push(pRound / eRound);
        if (r.requests > 0) a.coreUs.push(((pRound + eRound) * 1e6) / r.requests);
        a.requests += r.requests;
        a.seconds += r.requests / r.rps;
        a.perRound.push(r.rps);
        a.p50.push(r.p50);
        a.p99.push(r.p99);
        a.non2xx += r.non2xx;
        if (r.errors) a.errors.push(r.errors);
      }
    }
    const rows: (string | number)[][] = [["target", "req/s", "per round", "p50", "p99", "non-2xx", "socket errors", "proxy µs CPU/req", "of it user", "engine µs CPU/req", "proxy/engine CPU", "others on core 1"]];
    const rps = new Map<string, number>();
    for (const [name, , proxy] of targets) {
      const a = acc.get(name)!;
      const mean = a.requests / a.seconds;
      rps.set(name, mean);
      const per = (s: number) => (a.requests > 0 ? ((s * 1e6) / a.requests).toFixed(1) : "-");
      rows.push([
        name,
        Math.round(mean),
        a.perRound.map((x) => `${(x / 1000).toFixed(1)}k`).join(" "),
        a.p50.join(" "),
        a.p99.join(" "),
        a.non2xx,
        a.errors.length ? a.errors.join("; ") : "none",
        proxy ? per(a.pCpu) : "-",
        proxy ? per(a.pUser) : "-",
        per(a.eCpu),
        proxy ? median(a.relCpu).toFixed(2) : "-",
        a.others.map((o) => `${(o * 100).toFixed(0)}%`).join(" "),
      ]);
    }
    const l = rps.get("llmgw router")!;
    console.log(`\n${w.title}`);
    console.log(table(rows));
    console.log(
      `llmgw/nginx = ${(l / rps.get("nginx (1 worker)")!).toFixed(2)}   llmgw/haproxy = ${(l / rps.get("haproxy (1 thread)")!).toFixed(2)} (target ≥ 1.0 for both)   own server/Bun.serve = ${(l / rps.get("llmgw router on Bun.serve")!).toFixed(2)}   llmgw/direct = ${(l / rps.get("direct")!).toFixed(2)}   llmgw/bare Bun proxy = ${(l / rps.get("bare Bun proxy (streams body)")!).toFixed(2)}` +
        (w.key === "small" ? `   llmgw/bare buffered = ${(l / rps.get("bare Bun proxy (buffers body)")!).toFixed(2)}` : "") +
        (baseline ? `   baseline/nginx = ${(rps.get("llmgw router (baseline checkout)")! / rps.get("nginx (1 worker)")!).toFixed(2)}   baseline/haproxy = ${(rps.get("llmgw router (baseline checkout)")! / rps.get("haproxy (1 thread)")!).toFixed(2)}` : "") +
        `   llmgw/Bun.serve+raw client = ${(l / rps.get("Bun.serve + raw-socket client")!).toFixed(2)}   Bun.serve+raw client/nginx = ${(rps.get("Bun.serve + raw-socket client")! / rps.get("nginx (1 worker)")!).toFixed(2)}`
    );
    // The same comparison from CPU instead of wall-clock throughput: core 1 is saturated, so a
    // target's req/s is 1 / (its µs + the engine's µs per request). Each round's figure is set
    // against the same round's, a few seconds apart, so a slow spell of the machine counts less
    // than it does in req/s (here the machine's speed swings by more than half within a minute).
    const coreRatio = (a: string, b: string) => {
      const x = acc.get(a)!.coreUs;
      const y = acc.get(b)!.coreUs;
      return median(x.map((v, i) => (y[i] ?? Number.NaN) / v).filter(Number.isFinite)).toFixed(2);
    };
    console.log(
      `from CPU per request, round by round: llmgw/nginx = ${coreRatio("llmgw router", "nginx (1 worker)")}   llmgw/haproxy = ${coreRatio("llmgw router", "haproxy (1 thread)")}   floor/nginx = ${coreRatio(FLOOR, "nginx (1 worker)")}   floor/haproxy = ${coreRatio(FLOOR, "haproxy (1 thread)")}   llmgw/floor = ${coreRatio("llmgw router", FLOOR)}`,
    );
    // Where the difference lies: the kernel's share is about the same for every proxy (the same
    // socket calls), so what one proxy spends over another is mostly user time, its own code.
    const userUs = (name: string) => {
      const a = acc.get(name)!;
      return a.requests > 0 ? ((a.pUser * 1e6) / a.requests).toFixed(1) : "-";
    };
    const sysUs = (name: string) => {
      const a = acc.get(name)!;
      return a.requests > 0 ? (((a.pCpu - a.pUser) * 1e6) / a.requests).toFixed(1) : "-";
    };
    console.log(
      `µs per request, user + system: llmgw ${userUs("llmgw router")} + ${sysUs("llmgw router")}   nginx ${userUs("nginx (1 worker)")} + ${sysUs("nginx (1 worker)")}   haproxy ${userUs("haproxy (1 thread)")} + ${sysUs("haproxy (1 thread)")}   floor ${userUs(FLOOR)} + ${sysUs(FLOOR)}   lean ${userUs(LEAN)} + ${sysUs(LEAN)}`,
    );
    // The lean proxy is the floor plus the work no router can skip (lib/floor-proxy.ts --lean):
    // at or above nginx, a redesigned request path could meet the target; below it, none could.
    const le = rps.get(LEAN)!;
    console.log(
      `lean/nginx = ${(le / rps.get("nginx (1 worker)")!).toFixed(2)}   lean/haproxy = ${(le / rps.get("haproxy (1 thread)")!).toFixed(2)}   llmgw/lean = ${(l / le).toFixed(2)}   from CPU per request: lean/nginx = ${coreRatio(LEAN, "nginx (1 worker)")}   lean/haproxy = ${coreRatio(LEAN, "haproxy (1 thread)")}   llmgw/lean = ${coreRatio("llmgw router", LEAN)}`,
    );
    summary.push(
      `${w.key.padEnd(8)} llmgw/lean = ${(l / le).toFixed(2)}   llmgw/nginx = ${(l / rps.get("nginx (1 worker)")!).toFixed(2)}   llmgw/haproxy = ${(l / rps.get("haproxy (1 thread)")!).toFixed(2)}` +
        (baseline ? `   baseline/lean = ${(rps.get("llmgw router (baseline checkout)")! / le).toFixed(2)}   baseline/nginx = ${(rps.get("llmgw router (baseline checkout)")! / rps.get("nginx (1 worker)")!).toFixed(2)}` : ""),
    );
    const f = rps.get(FLOOR)!;
    console.log(
      `floor/nginx = ${(f / rps.get("nginx (1 worker)")!).toFixed(2)}   floor/haproxy = ${(f / rps.get("haproxy (1 thread)")!).toFixed(2)}   llmgw/floor = ${(l / f).toFixed(2)}` +
        (baseline ? `   baseline/floor = ${(rps.get("llmgw router (baseline checkout)")! / f).toFixed(2)}` : ""),
    );
  }
  console.log(`\nsummary (from req/s):\n${summary.join("\n")}`);
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
} finally {
  await killAll();
  await Bun.$`rm -rf ${dir}`.quiet().nothrow();
}
// Nothing of ours may outlive the bench, and no stray timer may hold it open.
process.exit();
