// Benchmark: one head node (`dist/llmgw serve`, pinned to CPU 0) against a simulated fleet in
// a separate load-generator process (test/bench/lib/scale-fleet.ts, pinned to CPU 1), per size:
//   registration  every node joins at once: time until all N have their credential;
//   converge      a catalog of N/2 models (min 1 replica, one profile per GPU class) applied
//                 through POST /api/v1/apply; converged when the summary says every model is
//                 satisfied, else at the last rise of the ready replica count once it has not
//                 risen for 10 s (printed with "stalled"); at most 120 s. The simulated nodes
//                 do not long-poll: a new assignment is seen at the next heartbeat and reported
//                 ready at the one after, so converge includes up to two intervals (~10 s);
//   steady        a window (--steady, default 60s) with every node heartbeating: heartbeat
//                 p50/p99, `llmgw status` wall time p50 (10 runs), serve's CPU % of one core
//                 (whole process and its busiest threads by name), cost per heartbeat (serve
//                 CPU-µs / heartbeats answered), node.unreachable and replica lost/removed/
//                 stopping events (none should happen: every node keeps heartbeating).
// --overload: 5,000 nodes (or --sizes), heartbeats --speed times too fast (default 5), and the
// events seen printed. Ends with a table and one JSON line.
// --store postgres: serve on a local PostgreSQL (started for the run) instead of SQLite.
//   bun test/bench/scale.ts [--sizes 100,500] [--steady 60s] [--overload] [--speed 5] [--store postgres]

import { readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { BUN, type Child, cleanupOnExit, killAll, pct, spawnChild, table } from "./lib/procs";
import { othersMeter, stealMeter } from "./lib/cpu";
import { type BenchStores, benchStores } from "./lib/ha-stores";
import { allowAddresses, applyModels, BENCH_NICE, BIN, scaleModels, startScaleHead } from "./lib/scale-head";
import { scratchDir } from "../helpers/tmp";

const arg = (name: string): string | undefined => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const OVERLOAD = process.argv.includes("--overload");
const SIZES = (arg("--sizes") ?? (OVERLOAD ? "5000" : "100,500,1000,2000,5000")).split(",").map(Number);
const STEADY_MS = parseDur(arg("--steady") ?? "60s");
const SPEED = Number(arg("--speed") ?? (OVERLOAD ? 5 : 1));
// --store postgres: serve on a local PostgreSQL started for the run (fsync on, a new database per
// size: lib/ha-stores.ts) instead of its SQLite file; PostgreSQL's own CPU is not serve's.
const STORE = arg("--store") ?? "sqlite";
if (STORE !== "sqlite" && STORE !== "postgres") throw new Error(`--store: sqlite or postgres, not ${STORE}`);
// SCALE_SERVE_ARGS="--reconcile-interval 5s": more flags for serve, to see what a setting costs.
const SERVE_ARGS = (process.env.SCALE_SERVE_ARGS ?? "").split(/\s+/).filter((a) => a !== "");
const CONVERGE_MAX_MS = 120_000;
const TICK = 100;

function parseDur(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(s);
  if (!m) throw new Error(`--steady: cannot read ${s} (e.g. 30s, 2m)`);
  return Number(m[1]) * (m[2] === "ms" ? 1 : m[2] === "m" ? 60_000 : 1000);
}

cleanupOnExit();

/** utime+stime ticks per thread of pid, keyed "tid name". */
function threadTicks(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const s = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
      const name = s.slice(s.indexOf("(") + 1, s.lastIndexOf(")"));
      const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
      out.set(`${tid === String(pid) ? "main" : name}#${tid}`, Number(f[11]) + Number(f[12]));
    } catch {
      // thread gone
    }
  }
  return out;
}
const procTicks = (pid: number) => {
  const s = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
};

interface EventView {
  id: number;
  kind: string;
  subject: string;
  message: string;
}

interface Row {
  nodes: number;
  registered: number;
  registrationMs: number;
  hbP50: number;
  hbP99: number;
  hbErrors: number;
  interval: number;
  statusP50: number;
  cpuPct: number;
  mainThreadPct: number;
  threads: string;
  convergeMs: number;
  converged: string;
  unreachable: number;
  replaced: number;
  costUs: number;
  /** Percent of serve's core (CPU 0) other processes used in the steady window: above a few %, the tail is partly theirs. */
  othersPct: number;
  /** Of othersPct, the hypervisor's steal on serve's core. */
  stealPct: number;
}

async function runSize(N: number, stores: BenchStores | undefined): Promise<{ row: Row; events: EventView[] }> {
  const dir = scratchDir("llmgw-bench-scale-");
  const url = stores ? await stores.pgUrl() : undefined;
  if (stores && !url) throw new Error(`--store postgres: ${stores.pgMissing}`);
  const head = await startScaleHead(dir, N, { cpus: "0", extraArgs: ["--max-connections", "1024", ...(url ? ["--store", url] : []), ...SERVE_ARGS] });
  const { serve, admin, adminToken, joinToken, api } = head;
  const MODELS = Math.max(1, Math.floor(N / 2));
  await allowAddresses(head, N);
  const gen: Child = await spawnChild("fleet", [BUN, "test/bench/lib/scale-fleet.ts", admin, joinToken, String(N), String(MODELS), "--speed", String(SPEED)], { waitUrl: false, cpus: "1", nofile: 20000, nice: BENCH_NICE, env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" } });
  const stats: { t: number; n: number; err: number; interval: number; ms: number[]; at: number }[] = [];
  const reg = await gen.waitLine(/^registered /, 600_000);
  const [, regMs, regCount] = reg.split(" ");
  const pump = setInterval(() => {
    while (gen.lines.length) {
      const l = gen.lines.shift()!;
      if (l.startsWith("{")) stats.push({ ...JSON.parse(l), at: performance.now() });
    }
  }, 200);
  console.log(`${N} nodes: ${regCount} registered in ${regMs} ms; applying ${MODELS} models`);

  const models = scaleModels(MODELS);
  const lastEvent = async () => (await api<EventView[]>("/events?limit=1000")).reduce((a, e) => Math.max(a, e.id), 0);
  const applyAt = performance.now();
  await applyModels(head, models);
  let converged = "stalled";
  let lastReady = -1;
  let lastRise = applyAt;
  for (;;) {
    const s = await api<{ models: { total: number; satisfied: number }; replicas: { ready: number } }>("/summary");
    const now = performance.now();
    if (s.models.total > 0 && s.models.satisfied === s.models.total) {
      converged = "all satisfied";
      lastRise = now;
      break;
    }
    if (s.replicas.ready > lastReady) {
      lastReady = s.replicas.ready;
      lastRise = now;
    }
    if (now - lastRise > 10_000 || now - applyAt > CONVERGE_MAX_MS) {
      converged = `stalled at ${s.models.satisfied}/${s.models.total}`;
      break;
    }
    await Bun.sleep(250);
  }
  const convergeMs = lastRise - applyAt;
  console.log(`${N} nodes: converge ${(convergeMs / 1000).toFixed(1)} s (${converged}); steady window ${STEADY_MS / 1000} s`);

  // The steady window.
  const afterId = await lastEvent();
  const c0 = procTicks(serve.pid);
  const th0 = threadTicks(serve.pid);
  const w0 = performance.now();
  // How much of serve's core other processes took meanwhile (the machine may be shared).
  const others = othersMeter(() => [serve.proc.pid], 0, false);
  const steal = stealMeter(0);
  const statusMs: number[] = [];
  const statusEvery = STEADY_MS / 11;
  while (performance.now() - w0 < STEADY_MS) {
    if (process.env.SCALE_NO_STATUS !== "1" && statusMs.length < 10 && performance.now() - w0 > statusEvery * (statusMs.length + 1)) {
      const t = performance.now();
      const p = Bun.spawn([BIN, "status", "--server", admin, "--token", adminToken], { stdout: "ignore", stderr: "pipe", env: { ...process.env, NO_COLOR: "1" } });
      await p.exited;
      statusMs.push(performance.now() - t);
    }
    await Bun.sleep(100);
  }
  const w1 = performance.now();
  const othersOnCore = others();
  const stolen = steal();
  const c1 = procTicks(serve.pid);
  const th1 = threadTicks(serve.pid);
  clearInterval(pump);
  while (gen.lines.length) {
    const l = gen.lines.shift()!;
    if (l.startsWith("{")) stats.push({ ...JSON.parse(l), at: performance.now() });
  }
  const inWindow = stats.filter((s) => s.at > w0 + 1000 && s.at <= w1 + 300);
  const lat = inWindow.flatMap((s) => s.ms).sort((a, b) => a - b);
  // SCALE_SECONDS=1: each second of the window (heartbeats, p99, max), to see when a tail happens.
  if (process.env.SCALE_SECONDS === "1")
    for (const s of inWindow) {
      const ms = [...s.ms].sort((a, b) => a - b);
      console.log(`  t=${((s.at - w0) / 1000).toFixed(1)} s: ${ms.length} heartbeats, p99 ${pct(ms, 99).toFixed(1)} ms, max ${(ms.at(-1) ?? 0).toFixed(1)} ms`);
    }
  const beats = inWindow.length ? inWindow.at(-1)!.n - (stats[stats.indexOf(inWindow[0]!) - 1]?.n ?? 0) : 0;
  const errs = inWindow.length ? inWindow.at(-1)!.err - (stats[stats.indexOf(inWindow[0]!) - 1]?.err ?? 0) : 0;
  const secs = (w1 - w0) / 1000;
  const cpuSecs = (c1 - c0) / TICK;
  const perThread = [...th1].map(([k, v]) => [k, (v - (th0.get(k) ?? 0)) / TICK / secs] as const).filter(([, v]) => v > 0.005).sort((a, b) => b[1] - a[1]);
  let events: EventView[] = [];
  try {
    events = (await api<EventView[]>(`/events?after=${afterId}&limit=1000`)).filter((e) => e.id > afterId);
  } catch (e) {
    console.log(`events: ${(e as Error).message}`);
  }
  const unreachable = new Set(events.filter((e) => e.kind === "node.unreachable").map((e) => e.subject)).size;
  const replaced = events.filter((e) => ["replica.lost", "replica.removed", "replica.stopping", "replica.stopped", "replica.failed", "replica.evicted"].includes(e.kind)).length;
  const row: Row = {
    nodes: N,
    registered: Number(regCount),
    registrationMs: Number(regMs),
    hbP50: pct(lat, 50),
    hbP99: pct(lat, 99),
    hbErrors: errs,
    interval: stats.at(-1)?.interval ?? 0,
    statusP50: pct(statusMs.sort((a, b) => a - b), 50),
    cpuPct: (cpuSecs / secs) * 100,
    mainThreadPct: (perThread.find(([k]) => k.startsWith("main#"))?.[1] ?? 0) * 100,
    threads: perThread.slice(0, 4).map(([k, v]) => `${k.replace(/#\d+$/, "")} ${(v * 100).toFixed(0)}%`).join(", "),
    convergeMs,
    converged,
    unreachable,
    replaced,
    costUs: beats > 0 ? (cpuSecs * 1e6) / beats : NaN,
    othersPct: othersOnCore * 100,
    stealPct: stolen * 100,
  };
  console.log(`${N} nodes: ${beats} heartbeats in ${secs.toFixed(0)} s (${errs} failed), serve ${row.cpuPct.toFixed(0)} % of a core (${row.threads}); ${events.length} events in the window${events.length > 0 ? `: ${[...new Set(events.map((e) => e.kind))].map((k) => `${k} ×${events.filter((e) => e.kind === k).length}`).join(", ")}` : ""}`);
  for (const e of events.slice(0, 5)) console.log(`  event ${e.kind} ${e.subject}: ${e.message}`);
  await gen.kill();
  await serve.kill();
  rmSync(dir, { recursive: true, force: true });
  return { row, events };
}

const ms = (x: number) => (Number.isNaN(x) ? "-" : x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(1)} ms`);

async function main(): Promise<void> {
  const rows: Row[] = [];
  const allEvents: EventView[] = [];
  const stores = STORE === "postgres" ? await benchStores({ postgres: true }) : undefined;
  if (stores?.pgMissing) throw new Error(`--store postgres: ${stores.pgMissing}`);
  if (stores) console.log("store: PostgreSQL (local, fsync on), a new database per size");
  for (const n of SIZES) {
    const { row, events } = await runSize(n, stores);
    rows.push(row);
    if (OVERLOAD) allEvents.push(...events);
  }
  console.log(
    `\n${table([
      ["nodes", "registration", "hb p50", "hb p99", "hb failed", "interval", "status p50", "converge", "serve CPU", "main thread", "µs/heartbeat", "unreachable", "replaced", "others on core", "of it steal"],
      ...rows.map((r) => [r.nodes, ms(r.registrationMs), ms(r.hbP50), ms(r.hbP99), r.hbErrors, ms(r.interval), ms(r.statusP50), `${ms(r.convergeMs)}${r.converged === "all satisfied" ? "" : " (stalled)"}`, `${r.cpuPct.toFixed(0)}%`, `${r.mainThreadPct.toFixed(0)}%`, r.costUs.toFixed(0), r.unreachable, r.replaced, `${r.othersPct.toFixed(0)}%`, `${r.stealPct.toFixed(0)}%`]),
    ])}`,
  );
  for (const r of rows) console.log(`${r.nodes} nodes: converge: ${r.converged}; serve threads: ${r.threads}`);
  const ratio = rows.length > 1 ? rows.at(-1)!.costUs / rows[0]!.costUs : NaN;
  console.log(`cost per heartbeat, ${rows.at(-1)?.nodes} vs ${rows[0]?.nodes} nodes: ${ratio.toFixed(2)}× (target ≤ 1.5×)`);
  if (OVERLOAD) {
    console.log(`\nevents in the steady window (overload, heartbeats ${SPEED}× too fast):`);
    const byKind = new Map<string, number>();
    for (const e of allEvents) byKind.set(e.kind, (byKind.get(e.kind) ?? 0) + 1);
    for (const [k, v] of byKind) console.log(`  ${k}: ${v}`);
    for (const e of allEvents.slice(0, 20)) console.log(`  #${e.id} ${e.kind} ${e.subject}: ${e.message}`);
  }
  await stores?.stop();
  console.log(JSON.stringify({ bench: "scale", store: STORE, speed: SPEED, steady_s: STEADY_MS / 1000, cost_ratio: ratio, rows }));
}

try {
  await main();
} finally {
  await killAll();
}
