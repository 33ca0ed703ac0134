// Benchmark: many concurrent slow streams through the router. 5,000 streamed chat requests (200
// tokens 50 ms apart, about 10 s each) are opened over 2 s (2,500 new connections a second; all
// 5,000 are open together from then until the first ones end) by 4 client processes (Bun fetch
// with its request limit lifted) against llmgw's router (its own process) in front of 4
// fake-engine processes with 5,000 slots each. Prints completed/failed, total wall time against
// one stream's time, the router's peak RSS (VmRSS sampled every 100 ms) and RSS per stream,
// (peak − idle baseline) / streams (target < 50 KB), and the router's RSS once a second. Nothing
// is pinned: all processes share the machine's cores, so the CPU each kind of process spent is
// printed too, with kernel counters of dropped connection attempts.
//   --bare      a bare Bun.serve+fetch proxy (lib/bare-proxy.ts) where the router was: Bun's floor
//   --gc-ms N   the router forces a full GC every N ms (a diagnostic: garbage vs live memory)
//   --burst     open all streams in the same instant: Bun.serve listens with a backlog of 512, so
//               a burst that size overflows the accept queue (SYNs dropped, retried after 1, 3, 7 s…)
// Under a minute:
//   bun test/bench/streams.ts [streams, default 5000] [client processes, default 4] [--bare] [--gc-ms N] [--burst]

import { groupCpuSeconds, othersMeter, tcpExt } from "./lib/cpu";
import { BUN, cleanupOnExit, fakeEngineProc, killAll, rssKiB, routerProc, spawnChild, table } from "./lib/procs";

const positional = process.argv.slice(2).filter((a, i, all) => !a.startsWith("--") && all[i - 1] !== "--gc-ms");
const BARE = process.argv.includes("--bare");
const RAMP_MS = process.argv.includes("--burst") ? 0 : 2000;
const gcAt = process.argv.indexOf("--gc-ms");
const GC_MS = gcAt > 0 ? Number(process.argv[gcAt + 1]) : 0;
const STREAMS = Number(positional[0] ?? 5000);
const CLIENTS = Number(positional[1] ?? 4);
const ENGINES = 4;
const TOKENS = 200;
const TOKEN_DELAY_MS = 50;
const TTFT_MS = 50;
const MODEL = "m";
const NOFILE = 20000; // the hard limit here; the router needs two sockets per stream

interface ClientResult {
  n: number;
  ok: number;
  failed: number;
  started: number;
  ended: number;
  cpu: number;
  bytes: number;
  reads: number;
  firstByteMax: number;
  durations: [number, number, number, number];
  errors: Record<string, number>;
}

async function oneStream(url: string): Promise<{ ms: number; bytes: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Stream slowly, please." }], stream: true, max_tokens: TOKENS }),
  });
  const text = await res.text();
  if (res.status !== 200 || !text.endsWith("data: [DONE]\n\n")) throw new Error(`single stream failed: ${res.status} ${text.slice(-200)}`);
  return { ms: performance.now() - t0, bytes: text.length };
}

async function engineCompleted(url: string): Promise<number> {
  const t = await (await fetch(`${url}/metrics`)).text();
  return Number(/vllm:request_success_total\{[^}]*\} (\d+)/.exec(t)?.[1] ?? NaN);
}

cleanupOnExit();
let sampler: ReturnType<typeof setInterval> | undefined;
try {
  console.log(`streams: ${STREAMS} concurrent streams of ${TOKENS} tokens ${TOKEN_DELAY_MS} ms apart opened over ${RAMP_MS} ms via ${CLIENTS} client processes, router in front of ${ENGINES} fake engines; ulimit -n ${NOFILE}; ${(await Bun.$`nproc`.text()).trim()} cores, nothing pinned`);
  const engines = await Promise.all(
    Array.from({ length: ENGINES }, (_, i) =>
      fakeEngineProc(`engine${i}`, { model: MODEL, ttftMs: TTFT_MS, tokenDelayMs: TOKEN_DELAY_MS, tokens: TOKENS, slots: STREAMS }, { nofile: NOFILE }),
    ),
  );
  const router = BARE
    ? await spawnChild("bare", [BUN, "test/bench/lib/bare-proxy.ts", engines.map((e) => e.url).join(",")], { nofile: NOFILE, env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" } })
    : await routerProc(
        "router",
        MODEL,
        engines.map((e) => e.url),
        { nofile: NOFILE, extraArgs: GC_MS > 0 ? ["--gc-ms", String(GC_MS)] : [] },
      );
  if (BARE) console.log("proxy: bare Bun.serve+fetch proxy, round-robin over the engines (reference), not the router");
  if (GC_MS > 0) console.log(`router forces a full GC every ${GC_MS} ms (diagnostic)`);
  const before = await Promise.all(engines.map((e) => engineCompleted(e.url)));

  // One stream alone: the time every stream would take if concurrency cost nothing. It warms the router up too.
  const single = await oneStream(router.url);
  await Bun.sleep(1000);
  const idle: number[] = [];
  for (let i = 0; i < 5; i++) {
    idle.push(rssKiB(router.pid));
    await Bun.sleep(100);
  }
  const baseline = Math.min(...idle);

  let peak = baseline;
  let samples = 0;
  const timeline: number[] = [];
  sampler = setInterval(() => {
    const r = rssKiB(router.pid);
    if (samples++ % 10 === 0) timeline.push(r);
    if (r > peak) peak = r;
  }, 100);
  const cpu0 = groupCpuSeconds(router.pid);
  const tcp0 = tcpExt();
  const others = othersMeter(() => [router.pid, ...engines.map((e) => e.pid)]);
  const engineCpu0 = engines.reduce((a, e) => a + groupCpuSeconds(e.pid), 0);
  // The clients load for about a second; all of them open their streams at the same instant.
  const startAt = Date.now() + 2000;
  const per = Array.from({ length: CLIENTS }, (_, i) => Math.floor(STREAMS / CLIENTS) + (i < STREAMS % CLIENTS ? 1 : 0));
  const clients = await Promise.all(
    per.map((n, i) =>
      spawnChild(`client${i}`, [BUN, "test/bench/lib/stream-client.ts", router.url, String(n), String(startAt), String(TOKENS), String(RAMP_MS)], {
        waitUrl: false,
        nofile: NOFILE,
        env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
      }),
    ),
  );
  let deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<"timeout">((resolve) => (deadlineTimer = setTimeout(() => resolve("timeout"), 150_000)));
  const results: ClientResult[] = [];
  for (const c of clients) {
    const r = await Promise.race([c.proc.exited.then(() => c.outputDone).then(() => "done" as const), deadline]);
    if (r === "timeout") throw new Error(`client ${c.name} still running after 150 s`);
    const line = c.lines.find((l) => l.startsWith("{"));
    if (!line) throw new Error(`${c.name} printed no result (exit ${c.proc.exitCode}): ${c.stderr().slice(-500)}`);
    results.push(JSON.parse(line) as ClientResult);
  }
  clearTimeout(deadlineTimer);
  const cpu = groupCpuSeconds(router.pid) - cpu0;
  const otherLoad = others();
  const tcp1 = tcpExt();
  const tcp = (k: string) => (tcp1[k] ?? 0) - (tcp0[k] ?? 0);
  const engineCpu = engines.reduce((a, e) => a + groupCpuSeconds(e.pid), 0) - engineCpu0;
  clearInterval(sampler);
  sampler = undefined;
  await Bun.sleep(1000);
  const after = rssKiB(router.pid);
  const completedAtEngines = (await Promise.all(engines.map((e) => engineCompleted(e.url)))).reduce((a, b, i) => a + b - before[i]!, 0);

  const ok = results.reduce((a, r) => a + r.ok, 0);
  const failed = results.reduce((a, r) => a + r.failed, 0);
  const wall = Math.max(...results.map((r) => r.ended)) - startAt;
  const errors: Record<string, number> = {};
  for (const r of results) for (const [k, v] of Object.entries(r.errors)) errors[k] = (errors[k] ?? 0) + v;
  const bytes = results.reduce((a, r) => a + r.bytes, 0);
  const reads = results.reduce((a, r) => a + r.reads, 0);

  console.log(
    table([
      ["figure", "value"],
      ["streams completed", ok],
      ["streams failed", failed],
      ["completed at the engines", completedAtEngines],
      ["one stream alone (s)", (single.ms / 1000).toFixed(2)],
      ["wall time, all streams (s)", (wall / 1000).toFixed(2)],
      ["wall / (one stream + ramp)", (wall / (single.ms + RAMP_MS)).toFixed(2)],
      ["slowest stream / one stream", (Math.max(...results.map((r) => r.durations[3])) / single.ms).toFixed(2)],
      ["stream duration min/p50/p99/max (s)", `${Math.min(...results.map((r) => r.durations[0]))} / ${Math.max(...results.map((r) => r.durations[1]))} / ${Math.max(...results.map((r) => r.durations[2]))} / ${Math.max(...results.map((r) => r.durations[3]))}`.replace(/\d+/g, (m) => (Number(m) / 1000).toFixed(2))],
      ["slowest first byte (s)", (Math.max(...results.map((r) => r.firstByteMax)) / 1000).toFixed(2)],
      ["bytes per stream (client)", ok ? Math.round(bytes / STREAMS) : 0],
      ["body reads per stream (client)", ok ? (reads / STREAMS).toFixed(1) : 0],
      ["router RSS idle baseline (MB)", (baseline / 1024).toFixed(1)],
      ["router RSS peak (MB)", (peak / 1024).toFixed(1)],
      ["router RSS 1 s after (MB)", (after / 1024).toFixed(1)],
      ["RSS per stream (KB), target < 50", ((peak - baseline) / STREAMS).toFixed(1)],
      ["CPU during the run (s): router", cpu.toFixed(1)],
      ["CPU during the run (s): engines", engineCpu.toFixed(1)],
      ["CPU during the run (s): clients (whole life)", results.reduce((a, r) => a + r.cpu, 0).toFixed(1)],
      ["CPU of other people's processes (cores)", otherLoad.toFixed(2)],
      ["router CPU per SSE event (µs)", ((cpu * 1e6) / (STREAMS * (TOKENS + 2))).toFixed(1)],
      ["RSS samples", samples],
      ["kernel: listen overflows / SYN retransmits", `${tcp("ListenOverflows")} / ${tcp("TCPSynRetrans")}`],
    ]),
  );
  console.log(`router RSS each second from the start (MB): ${timeline.map((k) => (k / 1024).toFixed(0)).join(" ")}`);
  if (Object.keys(errors).length > 0) console.log("errors:", errors);
  console.log(`RSS per stream ${((peak - baseline) / STREAMS).toFixed(1)} KB: ${(peak - baseline) / STREAMS < 50 ? "meets" : "misses"} the < 50 KB target; ${failed === 0 ? "all streams completed" : `${failed} failed`}`);
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
} finally {
  if (sampler) clearInterval(sampler);
  await killAll();
}
// Nothing of ours may outlive the bench, and no stray timer may hold it open.
process.exit();
