// Benchmark: the router's hot path. ns per acquire+release at 4, 40 and 400 endpoints with random
// prefix keys (target: under 1 µs at 400, and 400 no more than 1.5× the cost at 4), idle and with
// requests held open, and ns per prefixKey of a typical 1 KB chat body. The 65,536 keys recur, so
// most acquires find their key in the balancer's sticky table; a last row gives every acquire a
// key never seen before (the ring walk and a table write every time).
// Run: bun test/bench/acquire.ts

import { Balancer, type Lease } from "../../src/router/balancer";
import { prefixKey } from "../../src/router/prefix-key";
import type { EndpointInfo } from "../../src/protocol/routing";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";

const SIZES = [4, 40, 400];
const ITERS = 500_000;
const RUNS = 15;
const TARGET_NS = 1000;
const TARGET_RATIO = 1.5;

// A fixed-seed generator, so every run measures the same keys.
function lcg(seed: number) {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0);
}

const rnd = lcg(42);
const KEYS = new Uint32Array(1 << 16);
for (let i = 0; i < KEYS.length; i++) KEYS[i] = rnd();
const KEY_MASK = KEYS.length - 1;

function fleet(n: number): Balancer {
  const eps: EndpointInfo[] = [];
  for (let i = 0; i < n; i++) {
    eps.push({
      id: `r-${i}`,
      url: `http://10.0.${i >> 8}.${i & 255}:8000`,
      models: ["llama-3-70b", "llama3"],
      engine: "vllm",
      pool: "default",
      weight: 1 + (i % 4 === 0 ? 1 : 0),
      priority: 0,
    });
  }
  const b = new Balancer({ ...BALANCER_DEFAULTS, now: () => performance.now() });
  b.setEndpoints(eps);
  for (let i = 0; i < n; i++) b.setMetrics(`r-${i}`, { running: 8, waiting: 0, kvUsage: 0.4 });
  return b;
}

/** No request outlives the next: every pick sees an idle fleet. */
function idle(b: Balancer, iters: number, offset: number): void {
  for (let i = 0; i < iters; i++) b.acquire("llama3", KEYS[(i + offset) & KEY_MASK]!)!.release();
}

let fresh = 0;
/** Idle, and every key new to the balancer. */
function freshKeys(b: Balancer, iters: number): void {
  for (let i = 0; i < iters; i++) b.acquire("llama3", Math.imul(++fresh, 0x9e3779b1) >>> 0 || 1)!.release();
}

/** `depth` requests in flight throughout (released oldest first), so the bound is in play. */
function loaded(depth: number) {
  const open: (Lease | undefined)[] = new Array(depth).fill(undefined);
  return (b: Balancer, iters: number, offset: number): void => {
    for (let i = 0; i < iters; i++) {
      const slot = i % depth;
      open[slot]?.release();
      open[slot] = b.acquire("llama3", KEYS[(i + offset) & KEY_MASK]!);
    }
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

type Body = (b: Balancer, iters: number, offset: number) => void;

/**
 * Median ns per op for each case. Rounds interleave the cases, so a slow patch of the machine
 * (other processes, frequency changes) hits every size alike instead of skewing the ratio.
 */
function measure(cases: { b: Balancer; body: Body }[]): number[] {
  for (const c of cases) c.body(c.b, ITERS / 5, 7); // warm-up: let the JIT settle
  const ns: number[][] = cases.map(() => []);
  for (let r = 0; r < RUNS; r++) {
    cases.forEach((c, i) => {
      const t = Bun.nanoseconds();
      c.body(c.b, ITERS, r * 4099);
      ns[i]!.push((Bun.nanoseconds() - t) / ITERS);
    });
  }
  return ns.map(median);
}

console.log(`acquire+release, median of ${RUNS} runs of ${ITERS.toLocaleString()} (random keys, Date.now clock)`);
const rows = [
  { label: "idle fleet", ns: measure(SIZES.map((n) => ({ b: fleet(n), body: idle }))) },
  { label: "2 in flight per endpoint", ns: measure(SIZES.map((n) => ({ b: fleet(n), body: loaded(2 * n) }))) },
  { label: "idle, keys never seen", ns: measure(SIZES.map((n) => ({ b: fleet(n), body: freshKeys }))) },
];
for (const { label, ns } of rows) {
  const cells = SIZES.map((n, i) => `${String(n).padStart(3)}: ${ns[i]!.toFixed(0).padStart(4)} ns`).join("   ");
  const at400 = ns[SIZES.indexOf(400)]!;
  const ratio = at400 / ns[SIZES.indexOf(4)]!;
  const ok = at400 < TARGET_NS && ratio <= TARGET_RATIO;
  console.log(`  ${label.padEnd(26)} ${cells}   400/4 ${ratio.toFixed(2)}× (target ≤ ${TARGET_RATIO}×, < ${TARGET_NS} ns)  ${ok ? "ok" : "MISSED"}`);
}

// A typical chat request: a system prompt, a short exchange, a ~1 KB total.
const chat = {
  model: "llama3",
  stream: true,
  temperature: 0.7,
  messages: [
    { role: "system", content: "You are a careful assistant for an infrastructure team. Answer precisely, cite the command you would run, and say when you are unsure. ".repeat(3) },
    { role: "user", content: "Our inference node reports CUDA out of memory when the second replica starts; the first one is fine. What should I check first?" },
    { role: "assistant", content: [{ type: "text", text: "Check gpu_memory_utilization on both replicas: two engines on one card each reserving 0.9 of its memory cannot fit. " }] },
    { role: "user", content: "They are on different cards according to CUDA_VISIBLE_DEVICES. Anything else that could make them collide, e.g. MIG or the order of device indices?" },
  ],
};
const bodySize = JSON.stringify(chat).length;
const PK_ITERS = 500_000;
let sink = 0;
for (let i = 0; i < PK_ITERS / 5; i++) sink = (sink + prefixKey(chat)) >>> 0;
const pk: number[] = [];
for (let r = 0; r < RUNS; r++) {
  const t = Bun.nanoseconds();
  for (let i = 0; i < PK_ITERS; i++) sink = (sink + prefixKey(chat)) >>> 0;
  pk.push((Bun.nanoseconds() - t) / PK_ITERS);
}
console.log(`prefixKey, ${bodySize}-byte chat body (${chat.messages.length} messages): ${median(pk).toFixed(0)} ns  (checksum ${sink})`);
