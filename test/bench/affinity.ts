// Benchmark: prefix affinity on the fake engines' simulated prefix caches. 8 in-process fake
// engines (8 slots each; 40 ms TTFT on a full miss, 80% of it saved on a full hit) whose LRU
// caches each hold about a fifth of all the workload's distinct prompt blocks, and one workload:
// 200 conversations × 10 turns in 10 groups, every conversation of a group opening with the
// group's system prompt, each turn adding a user message and the streamed assistant reply. The
// turns go out 32 at a time, conversations taken in turn (all 200 are live at once, so the
// caches are under pressure). The same workload goes through each policy on fresh engines:
// round-robin, least-loaded (fewest in flight), llmgw's Router (real balancer and metrics poller,
// in process) and a sticky oracle (hash(conversation id) % 8). Prints per policy the prefix-cache
// hit rate (hit blocks / queried blocks, summed over the engines' stats()), mean and p99 TTFT
// measured by the client, and max/mean requests per engine. Targets: llmgw's hit rate within 5%
// of the oracle's, max/mean ≤ 1.25. It runs twice: with a 1,200-character system prompt, and with
// a 3,000-character one, longer than the 2,048 characters the router's prefix key reads (so the
// key sees the group, not the conversation).
// For diagnosis it counts the turns sent to another engine than the conversation's previous turn
// ("moved"), split by whether the router's prefix key of the prompt changed since that turn
// (whatever key the policy itself used; the router's key is the conversation's opening, so it
// never changes here) or stayed (a move by load), and runs what-ifs: the router's Balancer driven
// by the client with other settings. "no table" gives it a 2-slot sticky table, which 200 live
// conversations thrash, so it is plain bounded-load hashing (c = 1.25) as before the table;
// "sticky s" holds a key to its last endpoint up to s × its share in flight (the default is 2);
// "c" is the bound for keys placed anew. About a minute:
//   bun test/bench/affinity.ts

import { Balancer } from "../../src/router/balancer";
import { Router } from "../../src/router/router";
import { prefixKey } from "../../src/router/prefix-key";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import type { EndpointInfo } from "../../src/protocol/routing";
import { pct, table } from "./lib/procs";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

import { BLOCK_CHARS, CACHE_SHARE, CONCURRENCY, CONVERSATIONS, type Conversation, ENGINE, ENGINES, GROUPS, MODEL, TURNS, conversations, rng, streamTurn, userMessage, workloadBlocks } from "./lib/conversations";

/** Where a turn goes: an engine (index known) or the router (index read from x-llmgw-replica). */
type Dispatch = (conv: Conversation) => { url: string; engine: number; done: () => void };

interface Outcome {
  hitRate: number;
  ttft: number[];
  perEngine: number[];
  errors: number;
  wallMs: number;
  /** Turns sent to another engine than the conversation's previous turn, split by whether the router's prefix key changed. */
  moves: { keyChanged: number; sameKey: number; turns: number };
}

async function runPolicy(systemChars: number, cacheBlocks: number, policy: string): Promise<Outcome> {
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
  let router: Router | undefined;
  try {
    const inflight = new Array<number>(ENGINES).fill(0);
    let rr = 0;
    let dispatch: Dispatch;
    const counted = (i: number) => {
      inflight[i]!++;
      return { url: engines[i]!.url, engine: i, done: () => void inflight[i]!-- };
    };
    if (policy === "round-robin") dispatch = () => counted(rr++ % ENGINES);
    else if (policy === "least-loaded") {
      dispatch = () => {
        // Fewest in flight; ties go round-robin so an idle fleet is not all sent to engine 0.
        let best = -1;
        for (let k = 0; k < ENGINES; k++) {
          const i = (rr + k) % ENGINES;
          if (best < 0 || inflight[i]! < inflight[best]!) best = i;
        }
        rr++;
        return counted(best);
      };
    } else if (policy.startsWith("what-if")) {
      // The router's balancer driven directly, with other settings.
      const loadFactor = Number(/c=([\d.]+)/.exec(policy)![1]);
      const sticky = /sticky ([\d.]+)/.exec(policy);
      const b = new Balancer({ ...ROUTER_DEFAULTS.balancer, now: () => Date.now(), loadFactor, stickyLoadFactor: sticky ? Number(sticky[1]) : Math.max(ROUTER_DEFAULTS.balancer.stickyLoadFactor, loadFactor), ...(policy.includes("no table") ? { stickySlots: 2 } : {}) });
      b.setEndpoints(engines.map((e, i): EndpointInfo => ({ id: `e${i}`, url: e.url, models: [MODEL], engine: "vllm", pool: "default", weight: 1, priority: 0 })));
      dispatch = (c) => {
        const key = prefixKey({ messages: c.messages });
        const lease = b.acquire(MODEL, key)!;
        return { url: lease.endpoint.url, engine: Number(lease.endpoint.id.slice(1)), done: () => lease.release() };
      };
    } else if (policy === "sticky oracle") dispatch = (c) => counted(Number(Bun.hash.wyhash(`conversation-${c.id}`) % BigInt(ENGINES)));
    else {
      router = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0 });
      router.setCatalog([{ name: MODEL, aliases: [], on_demand: false, pool: "default", created: 0 }]);
      router.setEndpoints(engines.map((e, i): EndpointInfo => ({ id: `e${i}`, url: e.url, models: [MODEL], engine: "vllm", pool: "default", weight: 1, priority: 0 })));
      const { url } = router.start();
      dispatch = () => ({ url, engine: -1, done: () => {} });
    }

    const convs = conversations(systemChars);
    const queue = [...convs];
    // A finished turn's conversation rejoins the queue somewhere in its last quarter, not exactly
    // at the tail: a strict cycle of 200 over 8 engines would make round-robin sticky by accident.
    const jitter = rng(7);
    const moves = { keyChanged: 0, sameKey: 0, turns: 0 };
    const ttft: number[] = [];
    let errors = 0;
    const t0 = performance.now();
    const worker = async () => {
      for (;;) {
        const c = queue.shift();
        if (!c) return;
        c.messages.push({ role: "user", content: userMessage(c.id, c.turn) });
        const d = dispatch(c);
        const key = prefixKey({ messages: c.messages });
        let engine = d.engine;
        let reply = "";
        try {
          const turn = await streamTurn(d.url, c.messages, (ms) => ttft.push(ms));
          reply = turn.reply;
          if (engine < 0) engine = turn.replica;
        } catch (e) {
          errors++;
          if (errors <= 3) console.error(`${policy}: ${(e as Error).message}`);
        } finally {
          d.done();
        }
        c.messages.push({ role: "assistant", content: reply });
        if (c.lastEngine >= 0) {
          moves.turns++;
          if (engine !== c.lastEngine) {
            if (key !== c.lastKey) moves.keyChanged++;
            else moves.sameKey++;
          }
        }
        c.lastEngine = engine;
        c.lastKey = key;
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
    await router?.stop();
    await Promise.all(engines.map((e) => e.stop()));
  }
}

const POLICIES = [
  "round-robin",
  "least-loaded",
  "llmgw router",
  "sticky oracle",
  // Diagnostics: what the sticky table and its bounds are worth.
  "what-if balancer c=1.25, no table",
  "what-if balancer c=1.25, sticky 1.5",
  "what-if balancer c=1.25, sticky 3",
  "what-if balancer c=1.1, sticky 2",
];
for (const systemChars of [1200, 3000]) {
  const { distinct, ceiling } = workloadBlocks(systemChars);
  const cacheBlocks = Math.round(distinct * CACHE_SHARE);
  console.log(
    `\nsystem prompt ${systemChars} chars (router prefix key reads 2,048): ${CONVERSATIONS} conversations × ${TURNS} turns in ${GROUPS} groups, ${CONCURRENCY} in flight; ` +
      `${distinct} distinct ${BLOCK_CHARS}-char blocks, ${cacheBlocks} per engine cache (${(CACHE_SHARE * 100).toFixed(0)}%); hit-rate ceiling (one cache holding all) ${(ceiling * 100).toFixed(1)}%`,
  );
  const rows: (string | number)[][] = [["policy", "hit rate", "mean TTFT ms", "p99 TTFT ms", "max/mean load", "requests per engine", "moved: key changed", "moved: same key", "errors", "wall s"]];
  const got = new Map<string, Outcome>();
  for (const p of POLICIES) {
    const o = await runPolicy(systemChars, cacheBlocks, p);
    got.set(p, o);
    const mean = o.perEngine.reduce((a, b) => a + b, 0) / ENGINES;
    const sorted = [...o.ttft].sort((a, b) => a - b);
    rows.push([
      p,
      `${(o.hitRate * 100).toFixed(1)}%`,
      (o.ttft.reduce((a, b) => a + b, 0) / o.ttft.length).toFixed(1),
      pct(sorted, 99).toFixed(1),
      (Math.max(...o.perEngine) / mean).toFixed(2),
      o.perEngine.join(" "),
      o.moves.keyChanged,
      o.moves.sameKey,
      o.errors,
      (o.wallMs / 1000).toFixed(1),
    ]);
  }
  console.log(table(rows));
  const l = got.get("llmgw router")!;
  const oracle = got.get("sticky oracle")!;
  const lmax = Math.max(...l.perEngine) / (l.perEngine.reduce((a, b) => a + b, 0) / ENGINES);
  const rel = l.hitRate / oracle.hitRate;
  console.log(
    `llmgw hit rate ${(l.hitRate * 100).toFixed(1)}% vs oracle ${(oracle.hitRate * 100).toFixed(1)}%: ${((1 - rel) * 100).toFixed(1)}% below (${rel >= 0.95 ? "meets" : "misses"} within 5%); max/mean load ${lmax.toFixed(2)} (${lmax <= 1.25 ? "meets" : "misses"} ≤ 1.25)`,
  );
}
process.exit();
