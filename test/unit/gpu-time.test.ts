// GPU-seconds per request (router/gpu-time.ts): each request's share of its replica's GPUs while
// it held a slot there, from each replica's virtual clock, on the injected clock.

import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import { GpuClock, GpuTime } from "../../src/router/gpu-time";

const replica = (gpus?: number) => ({ info: gpus === undefined ? {} : { gpus } });

describe("GpuTime", () => {
  test("a request alone on a replica of 2 GPUs for 3 s has 6 GPU-seconds", () => {
    const clock = new ManualScheduler();
    const g = new GpuTime(clock);
    const ep = replica(2);
    const v = g.start(ep);
    clock.advance(3000);
    expect(g.end(ep, v)).toBeCloseTo(6, 9);
  });

  test("overlapping requests share the replica: each has its share of each moment, and the shares add up to the time it was busy", () => {
    const clock = new ManualScheduler();
    const g = new GpuTime(clock);
    const ep = replica(1);
    const a = g.start(ep); // alone for 1 s
    clock.advance(1000);
    const b = g.start(ep); // together for 2 s
    clock.advance(2000);
    const ga = g.end(ep, a);
    clock.advance(1000); // b alone for 1 s
    const gb = g.end(ep, b);
    expect(ga).toBeCloseTo(1 + 1, 9);
    expect(gb).toBeCloseTo(1 + 1, 9);
    expect(ga + gb).toBeCloseTo(4, 9);
    // Idle time is nobody's.
    clock.advance(5000);
    const c = g.start(ep);
    clock.advance(500);
    expect(g.end(ep, c)).toBeCloseTo(0.5, 9);
  });

  test("three at once on 4 GPUs for 3 s: 4 GPU-seconds each; replicas have clocks of their own", () => {
    const clock = new ManualScheduler();
    const g = new GpuTime(clock);
    const ep = replica(4);
    const other = replica(8);
    const vs = [g.start(ep), g.start(ep), g.start(ep)];
    const o = g.start(other);
    clock.advance(3000);
    for (const v of vs) expect(g.end(ep, v)).toBeCloseTo(4, 9);
    expect(g.end(other, o)).toBeCloseTo(24, 9);
  });

  test("a replica without GPUs meters nothing; an end without a start is 0", () => {
    const clock = new ManualScheduler();
    const g = new GpuTime(clock);
    const ep = replica();
    const v = g.start(ep);
    clock.advance(1000);
    expect(g.end(ep, v)).toBe(0);
    expect(g.end(replica(1), 0)).toBe(0);
  });

  test("the clock itself: never negative, never counts down below zero requests", () => {
    const c = new GpuClock();
    expect(c.end(10, 1, 0)).toBe(0);
    expect(c.inflight).toBe(0);
    const v = c.start(10, 1);
    expect(c.end(5, 1, v)).toBe(0); // a clock read earlier than the last: no time passed
  });
});
