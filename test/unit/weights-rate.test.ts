// The byte-rate bound of one node's weight transfers: within the bucket a take returns at once,
// past it the taker waits for the refill; takers together keep to the rate; time is the
// ManualScheduler's.

import { describe, expect, test } from "bun:test";
import { RateLimiter, UNLIMITED, byteRate } from "../../src/agent/weights-rate";
import { ManualScheduler } from "../../src/lib/scheduler";

const MB = 1_000_000;

/** Resolves a take's promise into a flag the test reads after moving time. */
function watch(p: Promise<void> | void): { done: boolean } {
  const w = { done: p === undefined };
  if (p !== undefined) void p.then(() => (w.done = true));
  return w;
}

describe("RateLimiter", () => {
  test("a take within the bucket returns at once; past it the taker waits until the debt is refilled", async () => {
    const s = new ManualScheduler();
    const r = new RateLimiter({ bytesPerSecond: MB, scheduler: s });
    expect(r.take(MB)).toBeUndefined();
    const w = watch(r.take(MB / 2));
    expect(w.done).toBe(false);
    await s.run(499);
    expect(w.done).toBe(false);
    await s.run(1);
    expect(w.done).toBe(true);
  });

  test("takers together keep to the rate, each released in its turn", async () => {
    const s = new ManualScheduler();
    const r = new RateLimiter({ bytesPerSecond: MB, burst: MB, scheduler: s });
    r.take(MB);
    const a = watch(r.take(MB));
    const b = watch(r.take(MB));
    await s.run(1000);
    expect([a.done, b.done]).toEqual([true, false]);
    await s.run(1000);
    expect(b.done).toBe(true);
    // 3 MB went in 2 s with a 1 MB burst: the rate.
  });

  test("a quiet spell refills the bucket up to its burst, no more", async () => {
    const s = new ManualScheduler();
    const r = new RateLimiter({ bytesPerSecond: MB, burst: 2 * MB, scheduler: s });
    expect(r.take(2 * MB)).toBeUndefined();
    await s.run(60_000);
    expect(r.take(2 * MB)).toBeUndefined();
    expect(watch(r.take(1)).done).toBe(false);
  });

  test("hub/download.ts's throttle takes it; no bound without --weights-max-rate; a bad rate is refused", () => {
    const s = new ManualScheduler();
    expect(byteRate(undefined, s)).toBe(UNLIMITED);
    expect(UNLIMITED.take(10 * MB)).toBeUndefined();
    expect(byteRate(MB, s)).toBeInstanceOf(RateLimiter);
    expect(() => new RateLimiter({ bytesPerSecond: 0, scheduler: s })).toThrow("bytesPerSecond");
    const throttle: (n: number) => Promise<void> | void = (n) => byteRate(MB, s).take(n);
    expect(throttle(1)).toBeUndefined();
  });
});
