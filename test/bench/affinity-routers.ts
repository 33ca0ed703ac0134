// Benchmark: what the routers' local sticky tables cost in prefix-cache hits when clients spread
// over several routers (one per control plane, active-active, no shared state). The workload and
// engines are affinity.ts's (8 fake engines with LRU prefix caches a fifth of the workload's
// blocks each; 200 conversations × 10 turns in 10 groups, 32 in flight), sent through 1, 2 or 3
// in-process Routers holding the same endpoint list. Two ways clients spread:
//   per request       each turn picks a router at random (seeded): a connection-level balancer
//                     or DNS round robin in front of the routers, new connection per turn;
//   per conversation  a conversation keeps its router (a client that keeps its connection, or
//                     an address-hashing balancer): then routers never see each other's keys.
// CHWBL sends a key to the same engine on every router for the same list (test/unit/
// chwbl-routers.test.ts), so what can differ is what a router's sticky table remembers (a key it
// moved off a loaded engine) and the in-flight counts each router bounds by (its own only).
// Prints per setup the hit rate (and its change against one router), TTFT, load spread, and the
// repeat turns that reached another engine than their previous turn, split by whether they also
// reached another router. About a minute:
//   bun test/bench/affinity-routers.ts

import { Router } from "../../src/router/router";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import type { EndpointInfo } from "../../src/protocol/routing";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { BLOCK_CHARS, CACHE_SHARE, CONCURRENCY, CONVERSATIONS, ENGINE, ENGINES, GROUPS, MODEL, TURNS, conversations, rng, streamTurn, userMessage, workloadBlocks } from "./lib/conversations";
import { pct, table } from "./lib/procs";

type Spread = "per request" | "per conversation";

interface Outcome {
  hitRate: number;
  ttft: number[];
  perEngine: number[];
  errors: number;
  wallMs: number;
  /** Repeat turns; those sent to another engine than the previous turn, by whether the router changed too. */
  moves: { turns: number; sameRouter: number; otherRouter: number; routerSwitches: number };
}

async function run(systemChars: number, cacheBlocks: number, routerCount: number, spread: Spread): Promise<Outcome> {
  const engines: FakeEngine[] = await Promise.all(
    Array.from({ length: ENGINES }, () =>
      startFakeEngine({
        models: [MODEL],
        ttftMs: ENGINE.ttftMs,
        tokenDelayMs: ENGINE.tokenDelayMs,
        tokens: ENGINE.tokens,
        slots: ENGINE.slots,
        prefixCache: { blocks: cacheBlocks, blockChars: BLOCK_CHARS, hitSpeedup: ENGINE.hitSpeedup },
      }),
    ),
  );
  const endpoints = engines.map((e, i): EndpointInfo => ({ id: `e${i}`, url: e.url, models: [MODEL], engine: "vllm", pool: "default", weight: 1, priority: 0 }));
  const routers: Router[] = [];
  try {
    const urls: string[] = [];
    for (let i = 0; i < routerCount; i++) {
      const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0 });
      routers.push(r);
      r.setCatalog([{ name: MODEL, aliases: [], on_demand: false, pool: "default", created: 0 }]);
      // Each control plane publishes the list in its own order: the ring must not care.
      r.setEndpoints(i % 2 === 0 ? endpoints : [...endpoints].reverse());
      urls.push(r.start().url);
    }
    const pickRouter = rng(11);
    const routerOf = (c: { id: number }) => (spread === "per conversation" ? c.id % routerCount : Math.floor(pickRouter() * routerCount));

    const convs = conversations(systemChars).map((c) => ({ ...c, lastRouter: -1 }));
    const queue = [...convs];
    const jitter = rng(7);
    const moves = { turns: 0, sameRouter: 0, otherRouter: 0, routerSwitches: 0 };
    const ttft: number[] = [];
    let errors = 0;
    const t0 = performance.now();
    const worker = async () => {
      for (;;) {
        const c = queue.shift();
        if (!c) return;
        c.messages.push({ role: "user", content: userMessage(c.id, c.turn) });
        const via = routerOf(c);
        let engine = -1;
        let reply = "";
        try {
          ({ reply, replica: engine } = await streamTurn(urls[via]!, c.messages, (ms) => ttft.push(ms)));
        } catch (e) {
          errors++;
          if (errors <= 3) console.error(`${routerCount} routers ${spread}: ${(e as Error).message}`);
        }
        c.messages.push({ role: "assistant", content: reply });
        if (c.lastEngine >= 0) {
          moves.turns++;
          if (via !== c.lastRouter) moves.routerSwitches++;
          if (engine !== c.lastEngine) {
            if (via === c.lastRouter) moves.sameRouter++;
            else moves.otherRouter++;
          }
        }
        c.lastEngine = engine;
        c.lastRouter = via;
        if (++c.turn < TURNS) queue.splice(queue.length - Math.floor(jitter() * (queue.length / 4)), 0, c);
      }
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    const wallMs = performance.now() - t0;
    const stats = engines.map((e) => e.stats());
    const hits = stats.reduce((a, s) => a + s.prefixHits, 0);
    const queries = stats.reduce((a, s) => a + s.prefixQueries, 0);
    return { hitRate: hits / queries, ttft, perEngine: stats.map((s) => s.requests), errors, wallMs, moves };
  } finally {
    await Promise.all(routers.map((r) => r.stop()));
    await Promise.all(engines.map((e) => e.stop()));
  }
}

const SETUPS: [number, Spread][] = [
  [1, "per request"],
  [2, "per conversation"],
  [3, "per conversation"],
  [2, "per request"],
  [3, "per request"],
];
const pc = (x: number) => `${(x * 100).toFixed(1)}%`;
for (const systemChars of [1200, 3000]) {
  const { distinct, ceiling } = workloadBlocks(systemChars);
  const cacheBlocks = Math.round(distinct * CACHE_SHARE);
  console.log(
    `\nsystem prompt ${systemChars} chars (router prefix key reads 2,048): ${CONVERSATIONS} conversations × ${TURNS} turns in ${GROUPS} groups, ${CONCURRENCY} in flight, ${ENGINES} engines; ` +
      `${cacheBlocks} of ${distinct} blocks per engine cache (${(CACHE_SHARE * 100).toFixed(0)}%); hit-rate ceiling ${pc(ceiling)}`,
  );
  const rows: (string | number)[][] = [["routers", "clients spread", "hit rate", "vs 1 router", "mean TTFT ms", "p99 TTFT ms", "max/mean load", "router switches", "moved, same router", "moved, other router", "errors", "wall s"]];
  let base: number | undefined;
  for (const [n, spread] of SETUPS) {
    const o = await run(systemChars, cacheBlocks, n, spread);
    base ??= o.hitRate;
    const mean = o.perEngine.reduce((a, b) => a + b, 0) / ENGINES;
    const sorted = [...o.ttft].sort((a, b) => a - b);
    const t = o.moves.turns;
    rows.push([
      n,
      n === 1 ? "-" : spread,
      pc(o.hitRate),
      n === 1 ? "-" : `${((o.hitRate - base) * 100).toFixed(1)} pt`,
      (o.ttft.reduce((a, b) => a + b, 0) / o.ttft.length).toFixed(1),
      pct(sorted, 99).toFixed(1),
      (Math.max(...o.perEngine) / mean).toFixed(2),
      pc(o.moves.routerSwitches / t),
      pc(o.moves.sameRouter / t),
      pc(o.moves.otherRouter / t),
      o.errors,
      (o.wallMs / 1000).toFixed(1),
    ]);
  }
  console.log(table(rows));
}
process.exit();
