// Benchmark: issue 15's performance figures, each on PostgreSQL and on SQLite in the same run
// (127.0.0.1 only; every process it starts is stopped when it ends):
//   reconcile  one control-plane step at 1,000 nodes × 8 GPUs, 2,000 replicas, 500 models, the
//              snapshot read included (target p50 < 30 ms): lib/ha-reconcile.ts, in process, on
//              a SQLite file and on a PostgreSQL database;
//   heartbeat  heartbeats answered per second at 1,000 nodes through `dist/llmgw serve`'s agent
//              API (target ≥ 2,000/s): lib/ha-heartbeat.ts; serve on `--store` each in turn;
//   failover   kill -9 of the leading serve to the new leader's first plan (target < lease TTL
//              + 2 s), with a short lease (5 s / 1 s) and the default (15 s / 5 s), two serve on
//              a shared SQLite file (`--store FILE --ha`) and on PostgreSQL: lib/ha-failover.ts;
//   router     the same wrk load through the standby's router and the leader's (target: the
//              standby's throughput equal to the leader's, ≥ 0.95×): lib/ha-router.ts.
// PostgreSQL is Debian's server started for the run (fsync on); without the PostgreSQL store
// on this branch its column says why. Ends with a table (figure, SQLite, PostgreSQL, target,
// met?) and one JSON line. About 4 minutes (--quick: about 1.5):
//   bun test/bench/ha.ts [--only reconcile,heartbeat,failover,router] [--quick] [--sqlite-only]

import { readFileSync } from "node:fs";
import { type FailoverFigures, failoverBench } from "./lib/ha-failover";
import { type HeartbeatFigures, heartbeatBench } from "./lib/ha-heartbeat";
import { heartbeatInproc, type InprocRate } from "./lib/ha-heartbeat-inproc";
import { type ReconcileFigures, reconcileBench } from "./lib/ha-reconcile";
import { type RouterFigures, routerBench } from "./lib/ha-router";
import { benchStores } from "./lib/ha-stores";
import { cleanupOnExit, killAll, table } from "./lib/procs";

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const PARTS = new Set((arg("--only") ?? "reconcile,inproc,heartbeat,failover,router").split(","));
const QUICK = process.argv.includes("--quick");
const NODES = 1000;

type Dialect = "sqlite" | "postgres";
const DIALECTS: Dialect[] = ["sqlite", "postgres"];
interface Results {
  reconcile: Partial<Record<Dialect, ReconcileFigures | string>>;
  inproc: Partial<Record<Dialect, { steady: InprocRate; changing: InprocRate } | string>>;
  heartbeat: Partial<Record<Dialect, HeartbeatFigures | string>>;
  failoverShort: Partial<Record<Dialect, FailoverFigures | string>>;
  failoverDefault: Partial<Record<Dialect, FailoverFigures | string>>;
  router: Partial<Record<Dialect, RouterFigures | string>>;
}
const res: Results = { reconcile: {}, inproc: {}, heartbeat: {}, failoverShort: {}, failoverDefault: {}, router: {} };

cleanupOnExit();
const loadavg = () => (readText("/proc/loadavg") ?? "?").split(" ").slice(0, 3).join(" ");
function readText(p: string): string | undefined {
  try {
    return readFileSync(p, "utf8");
  } catch {
    return undefined;
  }
}
const loadAtStart = loadavg();
const stores = await benchStores({ postgres: !process.argv.includes("--sqlite-only") });
const log = (s: string) => console.log(s);
const why = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0]!.slice(0, 200);

/** Runs fn for each dialect; a dialect that cannot be measured keeps the reason instead. */
async function each<T>(part: string, into: Partial<Record<Dialect, T | string>>, fn: (d: Dialect, target: string) => Promise<T>): Promise<void> {
  for (const d of DIALECTS) {
    const target = d === "sqlite" ? stores.sqlitePath() : await stores.pgUrl();
    if (target === undefined) {
      into[d] = stores.pgMissing ?? "not measured";
      continue;
    }
    console.log(`${part}, ${d}:`);
    try {
      into[d] = await fn(d, target);
    } catch (e) {
      into[d] = `failed: ${why(e)}`;
      console.log(`  ${into[d]}`);
    }
  }
}

try {
  if (PARTS.has("reconcile"))
    await each("reconcile", res.reconcile, async (_, target) => {
      const opened = await stores.open(target);
      const others: { close(): Promise<void> }[] = [];
      const other = async () => {
        const o = await stores.open(target);
        others.push(o);
        return o.store;
      };
      try {
        const f = await reconcileBench(opened.store, { runs: QUICK ? 10 : 40, log, other });
        const p = (s: { p50: number; p95: number; cpuP50: number }) => `p50 ${s.p50.toFixed(1)} ms, p95 ${s.p95.toFixed(1)} ms (CPU ${s.cpuP50.toFixed(1)} ms)`;
        log(`  store snapshot ${p(f.snapshotStore)}; model reload ${p(f.snapshotReload)}; tick steady ${p(f.tickSteady)}; after a local change ${p(f.tickChange)}; after another writer's commit ${p(f.tickReload)}; after a full reload ${p(f.tickFullReload)}`);
        return f;
      } finally {
        for (const o of others) await o.close();
        await opened.close();
      }
    });
  if (PARTS.has("inproc"))
    await each("heartbeat in process", res.inproc, async (_, target) => {
      const opened = await stores.open(target);
      try {
        const f = await heartbeatInproc(opened.store, { nodes: NODES, seconds: QUICK ? 4 : 10, concurrency: 64 });
        const r = (x: InprocRate) => `${x.rate.toFixed(0)}/s (p50 ${x.p50.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms, ${x.errors} failed)`;
        log(`  steady ${r(f.steady)}; changing ${r(f.changing)}`);
        return f;
      } finally {
        await opened.close();
      }
    });
  if (PARTS.has("heartbeat"))
    await each("heartbeat through serve", res.heartbeat, async (d, target) => {
      // SQLite: the single head node's own file in its data dir, as serve runs by default.
      const f = await heartbeatBench({ nodes: NODES, seconds: QUICK ? 5 : 15, concurrency: 64, storeArgs: d === "sqlite" ? [] : ["--store", target] });
      if (d === "postgres") {
        // A serve that does not read --store yet would have measured its own SQLite file instead.
        const opened = await stores.open(target);
        const stored = await opened.store.countNodes().finally(() => opened.close());
        if (stored < f.joined) throw new Error(`serve did not use --store (PostgreSQL): ${stored} nodes there, ${f.joined} joined`);
      }
      log(`  ${f.joined} joined in ${f.joinSeconds.toFixed(1)} s; steady ${f.steady.rate.toFixed(0)}/s (p50 ${f.steady.p50.toFixed(1)} ms, p99 ${f.steady.p99.toFixed(1)} ms, ${f.steady.errors} failed); changing ${f.changing.rate.toFixed(0)}/s (p50 ${f.changing.p50.toFixed(1)} ms, p99 ${f.changing.p99.toFixed(1)} ms, ${f.changing.errors} failed)`);
      return f;
    });
  if (PARTS.has("failover")) {
    const shared = (d: Dialect, target: string) => (dir: string) => (d === "sqlite" ? `${dir}/shared.db` : target);
    await each("failover, lease 5s/1s", res.failoverShort, async (d, target) => failoverBench({ store: shared(d, target), leaseTtl: "5s", leaseRenew: "1s", rounds: QUICK ? 2 : 4, log }));
    if (!QUICK) await each("failover, lease 15s/5s", res.failoverDefault, async (d, target) => failoverBench({ store: shared(d, target), leaseTtl: "15s", leaseRenew: "5s", rounds: 2, log }));
  }
  if (PARTS.has("router"))
    await each("router", res.router, async (d, target) => {
      const f = await routerBench({ store: (dir) => (d === "sqlite" ? `${dir}/shared.db` : target), seconds: QUICK ? 6 : 20, rounds: QUICK ? 2 : 4, log });
      log(`  leader ${f.leaderRps.toFixed(0)} req/s (${f.leaderPerRound.map((x) => x.toFixed(0)).join(" ")}), standby ${f.standbyRps.toFixed(0)} req/s (${f.standbyPerRound.map((x) => x.toFixed(0)).join(" ")}), ${f.non2xx} non-2xx`);
      return f;
    });
} finally {
  await killAll();
  await stores.stop();
}

// ---- the table
type Cell = { text: string; value?: number };
const cell = <T>(v: T | string | undefined, f: (x: T) => number, fmt: (n: number) => string): Cell => {
  if (v === undefined) return { text: "-" };
  if (typeof v === "string") return { text: v.length > 40 ? `${v.slice(0, 40)}…` : v };
  const n = f(v);
  return { text: fmt(n), value: n };
};
const ms = (n: number) => `${n.toFixed(1)} ms`;
const sec = (n: number) => `${(n / 1000).toFixed(2)} s`;
const met = (ok: (n: number) => boolean, ...c: Cell[]) => DIALECTS.map((d, i) => `${d === "sqlite" ? "SQLite" : "PG"} ${c[i]!.value === undefined ? "-" : ok(c[i]!.value!) ? "yes" : "NO"}`).join(", ");
const rows: string[][] = [["figure", "SQLite", "PostgreSQL", "target", "met?"]];
const row = <T>(figure: string, src: Partial<Record<Dialect, T | string>>, f: (x: T) => number, fmt: (n: number) => string, target: string, ok: (n: number) => boolean) => {
  const c = DIALECTS.map((d) => cell(src[d], f, fmt));
  if (c.every((x) => x.text === "-")) return;
  rows.push([figure, c[0]!.text, c[1]!.text, target, target === "(context)" ? "-" : met(ok, ...c)]);
};
const under30 = (n: number) => n < 30;
row("store snapshot read, p50", res.reconcile, (f: ReconcileFigures) => f.snapshotStore.p50, ms, "(context)", () => true);
row("model reload from the store, p50", res.reconcile, (f: ReconcileFigures) => f.snapshotReload.p50, ms, "(context)", () => true);
row("tick, steady state, p50", res.reconcile, (f: ReconcileFigures) => f.tickSteady.p50, ms, "< 30 ms", under30);
row("tick after a catalog change, p50", res.reconcile, (f: ReconcileFigures) => f.tickChange.p50, ms, "< 30 ms", under30);
row("tick after a reload (other writer), p50", res.reconcile, (f: ReconcileFigures) => f.tickReload.p50, ms, "< 30 ms", under30);
row("tick after a full reload (on doubt), p50", res.reconcile, (f: ReconcileFigures) => f.tickFullReload.p50, ms, "(context)", () => true);
row("tick steady, CPU of this process, p50", res.reconcile, (f: ReconcileFigures) => f.tickSteady.cpuP50, ms, "(context)", () => true);
row("tick after a reload, CPU of this process, p50", res.reconcile, (f: ReconcileFigures) => f.tickReload.cpuP50, ms, "(context)", () => true);
row("in process: heartbeats/s, unchanged", res.inproc, (f: { steady: InprocRate }) => f.steady.rate, (n) => `${n.toFixed(0)}/s`, "(context)", () => true);
row("in process: heartbeats/s, each with news", res.inproc, (f: { changing: InprocRate }) => f.changing.rate, (n) => `${n.toFixed(0)}/s`, "(context)", () => true);
row("serve: heartbeats/s, unchanged, 1,000 nodes", res.heartbeat, (f: HeartbeatFigures) => f.steady.rate, (n) => `${n.toFixed(0)}/s`, "≥ 2,000/s", (n) => n >= 2000);
row("serve: heartbeats/s, each with news", res.heartbeat, (f: HeartbeatFigures) => f.changing.rate, (n) => `${n.toFixed(0)}/s`, "≥ 2,000/s", (n) => n >= 2000);
const worst = (f: FailoverFigures) => Math.max(...f.rounds.map((r) => (Number.isNaN(r.planMs) ? Infinity : r.planMs)));
const med = (f: FailoverFigures) => [...f.rounds.map((r) => r.planMs)].sort((a, b) => a - b)[Math.floor(f.rounds.length / 2)]!;
const leadWorst = (f: FailoverFigures) => Math.max(...f.rounds.map((r) => (Number.isNaN(r.leadMs) ? Infinity : r.leadMs)));
row("serve: 1,000 nodes joined in", res.heartbeat, (f: HeartbeatFigures) => f.joinSeconds * 1000, sec, "(context)", () => true);
row("failover to first plan, 5s/1s, worst", res.failoverShort, worst, sec, "< 7 s", (n) => n < 7000);
row("failover to first plan, 5s/1s, median", res.failoverShort, med, sec, "< 7 s", (n) => n < 7000);
row("failover to leading, 5s/1s, worst", res.failoverShort, leadWorst, sec, "(context)", () => true);
row("failover to first plan, 15s/5s, worst", res.failoverDefault, worst, sec, "< 17 s", (n) => n < 17000);
row("failover to leading, 15s/5s, worst", res.failoverDefault, leadWorst, sec, "(context)", () => true);
row("router req/s through the leader", res.router, (f: RouterFigures) => f.leaderRps, (n) => n.toFixed(0), "(context)", () => true);
row("router req/s through the standby", res.router, (f: RouterFigures) => f.standbyRps, (n) => n.toFixed(0), "(context)", () => true);
row("router standby/leader", res.router, (f: RouterFigures) => f.standbyRps / f.leaderRps, (n) => `${n.toFixed(2)}×`, "≥ 0.95×", (n) => n >= 0.95);
// The machine may be shared: its load says how far wall times are to be trusted (2 cores here).
console.log(`\nissue 15 performance, ${NODES} nodes${QUICK ? " (--quick: short runs)" : ""}; PostgreSQL ${stores.pgMissing ? `not measured: ${stores.pgMissing}` : "15, local, fsync on"}; load average ${loadAtStart} at the start, ${loadavg()} at the end`);
console.log(table(rows));
console.log(JSON.stringify({ bench: "ha", quick: QUICK, ...res }));
process.exit();
