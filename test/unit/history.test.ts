// The dashboard's hour of history: rates and windowed TTFT percentiles from the difference of
// the router's cumulative snapshots, a restarted router, a clock going back, and the bounds
// (window, points per series, models and classes kept), on a ManualScheduler.

import { describe, expect, test } from "bun:test";
import { History, bucketQuantile, startSampling } from "../../src/api/history";
import { ManualScheduler } from "../../src/lib/scheduler";
import { type ModelTraffic, TTFT_BUCKETS_MS, type TrafficSource } from "../../src/protocol/routing";
import type { ClassUse } from "../../src/protocol/views";

const NB = TTFT_BUCKETS_MS.length + 1;
/** Counts with `n` requests in bucket `i`. */
const counts = (...pairs: [number, number][]) => {
  const c = Array<number>(NB).fill(0);
  for (const [i, n] of pairs) c[i] = n;
  return c;
};
const traffic = (model: string, p: Partial<ModelTraffic> = {}): ModelTraffic => ({ model, requests: 0, errors: 0, output_tokens: 0, ttft_counts: counts(), inflight: 0, queued: 0, ...p });
const gpu = (cls: string, used: number, total = 8, unhealthy = 0): ClassUse => ({ class: cls, used, total, unhealthy });

/** A fake router whose cumulative counters the test sets. */
class FakeTraffic implements TrafficSource {
  now: ModelTraffic[] = [];
  fail = false;
  async traffic() {
    if (this.fail) throw new Error("router link down");
    return this.now.map((t) => ({ ...t, ttft_counts: [...t.ttft_counts] }));
  }
}

describe("bucketQuantile", () => {
  test("interpolates within the bucket the rank falls in, as histogram_quantile does", () => {
    // 100 requests all in (100, 250]: the median is halfway through it.
    expect(bucketQuantile(counts([3, 100]), 0.5)).toBe(175);
    // 90 fast (≤ 25 ms), 10 slow in (1000, 2500]: p50 in the first bucket, p99 in the slow one.
    const c = counts([0, 90], [6, 10]);
    expect(bucketQuantile(c, 0.5)).toBeCloseTo(25 * (50 / 90), 6);
    expect(bucketQuantile(c, 0.99)).toBeCloseTo(1000 + 1500 * (9 / 10), 6);
    // Beyond the last bound: that bound (the page says "≥").
    expect(bucketQuantile(counts([NB - 1, 5]), 0.99)).toBe(30000);
    expect(bucketQuantile(counts(), 0.5)).toBeUndefined();
  });
});

describe("History", () => {
  test("rates and percentiles come from the difference of consecutive snapshots, not the totals", async () => {
    const clock = new ManualScheduler();
    const src = new FakeTraffic();
    const h = new History();
    // A router that has been up a while: large totals, all slow.
    src.now = [traffic("m", { requests: 1000, errors: 10, output_tokens: 50_000, ttft_counts: counts([8, 1000]), inflight: 3, queued: 1 })];
    const { timer, sample } = startSampling({ history: h, scheduler: clock, traffic: src, gpus: async () => [gpu("H100", 2)], intervalMs: 15_000 });
    await sample();
    expect(h.model("m")).toHaveLength(1);
    // The first sample has gauges and no rates.
    expect(h.model("m")[0]).toMatchObject({ rps: null, tokens_ps: null, ttft_p50: null, inflight: 3, queued: 1 });

    // In the next 15 s: 30 requests, 3 failed, 1500 tokens, all fast.
    src.now = [traffic("m", { requests: 1030, errors: 13, output_tokens: 51_500, ttft_counts: counts([1, 30], [8, 1000]), inflight: 5, queued: 0 })];
    await clock.run(15_000);
    const p = h.model("m")[1]!;
    expect(p.rps).toBeCloseTo(2, 9);
    expect(p.errors_ps).toBeCloseTo(0.2, 9);
    expect(p.tokens_ps).toBeCloseTo(100, 9);
    // Windowed: only the 30 fast ones, not the 1000 slow ones from before.
    expect(p.ttft_p50).toBeGreaterThan(25);
    expect(p.ttft_p50).toBeLessThanOrEqual(50);
    expect(p.ttft_p99).toBeLessThanOrEqual(50);
    expect(p).toMatchObject({ inflight: 5, queued: 0 });

    // A quiet interval: zero rate, no percentile.
    await clock.run(15_000);
    expect(h.model("m")[2]).toMatchObject({ rps: 0, tokens_ps: 0, ttft_p50: null, ttft_p99: null });
    expect(h.gpuClass("H100").map((g) => g.used)).toEqual([2, 2, 2]);
    timer.cancel();
  });

  test("a restarted router (counters back near zero) counts from zero, never negative", () => {
    const h = new History();
    h.record(0, [traffic("m", { requests: 500, ttft_counts: counts([2, 500]) })], []);
    h.record(10_000, [traffic("m", { requests: 20, ttft_counts: counts([2, 20]) })], []);
    expect(h.model("m")[1]!.rps).toBeCloseTo(2, 9);
    expect(h.model("m")[1]!.ttft_p50).toBeGreaterThan(50);
  });

  test("a sample at or before the newest (the clock went back) is dropped whole", () => {
    const h = new History();
    h.record(100_000, [traffic("m", { requests: 10 })], [gpu("A", 1)]);
    h.record(90_000, [traffic("m", { requests: 20 })], [gpu("A", 5)]);
    h.record(100_000, [traffic("m", { requests: 20 })], [gpu("A", 5)]);
    expect(h.model("m")).toHaveLength(1);
    expect(h.gpuClass("A").map((g) => g.used)).toEqual([1]);
    // The next real interval is measured from the kept sample.
    h.record(110_000, [traffic("m", { requests: 30 })], [gpu("A", 5)]);
    expect(h.model("m")[1]!.rps).toBeCloseTo(2, 9);
  });

  test("a failed read of the router skips the traffic, keeps the GPU figures, and the next rate spans both intervals", async () => {
    const clock = new ManualScheduler();
    const src = new FakeTraffic();
    const h = new History();
    const errors: unknown[] = [];
    src.now = [traffic("m", { requests: 0 })];
    const { timer } = startSampling({ history: h, scheduler: clock, traffic: src, gpus: async () => [gpu("A", 1)], onError: (e) => errors.push(e) });
    await clock.run(0);
    src.fail = true;
    await clock.run(15_000);
    src.fail = false;
    src.now = [traffic("m", { requests: 60 })];
    await clock.run(15_000);
    expect(errors).toHaveLength(1);
    expect(h.model("m").map((p) => p.rps)).toEqual([null, 2]);
    expect(h.gpuClass("A")).toHaveLength(3);
    timer.cancel();
  });

  test("after an hour old points are gone: at most an hour's worth per series, and a model gone quiet is forgotten", async () => {
    const clock = new ManualScheduler();
    const src = new FakeTraffic();
    const h = new History();
    src.now = [traffic("stays"), traffic("goes")];
    const { timer } = startSampling({ history: h, scheduler: clock, traffic: src, gpus: async () => [gpu("A", 1)], intervalMs: 15_000 });
    await clock.run(0);
    await clock.run(10 * 60_000);
    // "goes" leaves the catalog (the router stops reporting it).
    src.now = [traffic("stays", { requests: 5 })];
    await clock.run(2 * 3600_000);
    const pts = h.model("stays");
    expect(pts.length).toBe(241); // 0, 15 s … 60 min
    expect(pts[pts.length - 1]!.at - pts[0]!.at).toBe(3600_000);
    expect(clock.now() - pts[0]!.at).toBeLessThanOrEqual(h.windowMs);
    expect(h.models()).toEqual(["stays"]);
    expect(h.model("goes")).toEqual([]);
    expect(h.gpuClass("A").length).toBe(241);
    timer.cancel();
  });

  test("hard caps: models and classes kept, points per series", () => {
    const h = new History({ maxModels: 3, maxClasses: 2, maxPoints: 10 });
    for (let i = 0; i < 50; i++) {
      const models = Array.from({ length: 8 }, (_, k) => traffic(`m${k}`, { requests: i }));
      h.record(i * 1000, models, [gpu("A", 1), gpu("B", 1), gpu("C", 1)]);
    }
    expect(h.models()).toEqual(["m0", "m1", "m2"]);
    expect(h.untrackedModels).toBe(5);
    expect(h.classes()).toEqual(["A", "B"]);
    expect(h.untrackedClasses).toBe(1);
    expect(h.model("m0")).toHaveLength(10);
    expect(h.model("m0")[9]!.at).toBe(49_000);
    expect(h.gpuClass("A")).toHaveLength(10);
  });
});
