// Idleness across routers (control/usage.ts): the newest stamp wins, and idleness is counted
// only from the latest watchingSince among the routers still reporting, so a restart anywhere
// makes idleness unknown, never idle, until that router has watched long enough.

import { describe, expect, test } from "bun:test";
import { knownIdleMs, knownIdleStamps, mergeUsage } from "../../src/control/usage";
import type { RouterUsage } from "../../src/control/types";
import { T0 } from "../helpers/fleet";

const MIN = 60_000;
const report = (router: string, watchingSince: number, used: Record<string, number>, reportedAgoMs = 1_000): RouterUsage => ({ router, watchingSince, lastUsed: new Map(Object.entries(used)), reportedAgoMs });

describe("mergeUsage", () => {
  test("newest stamp per replica wins, whichever router has it", () => {
    const m = mergeUsage({ now: T0, liveWithinMs: 15_000, reports: [report("a", T0 - 60 * MIN, { r1: T0 - 30 * MIN, r2: T0 - 5 * MIN }), report("b", T0 - 60 * MIN, { r1: T0 - 2 * MIN, r3: T0 - 40 * MIN })] });
    expect(m.lastUsed).toEqual(new Map([["r1", T0 - 2 * MIN], ["r2", T0 - 5 * MIN], ["r3", T0 - 40 * MIN]]));
    expect(m.since).toBe(T0 - 60 * MIN);
  });

  test("a router that just restarted limits idleness to the time it has watched: unknown, never idle", () => {
    // b served r1 a minute before it restarted; its new report has lost the stamp.
    const m = mergeUsage({ now: T0, liveWithinMs: 15_000, reports: [report("a", T0 - 60 * MIN, { r1: T0 - 50 * MIN }), report("b", T0 - 10_000, {})] });
    expect(m.lastUsed.get("r1")).toBe(T0 - 50 * MIN);
    expect(m.since).toBe(T0 - 10_000);
    // Known idle for 10 s only: not 50 minutes, so no 10-minute idle listing and no eviction.
    expect(knownIdleMs(m, "r1", T0)).toBe(10_000);
    expect(knownIdleStamps(m).get("r1")).toBe(T0 - 10_000);
    // A replica no router has reported stays unknown.
    expect(knownIdleMs(m, "r9", T0)).toBeUndefined();
    expect(knownIdleStamps(m).has("r9")).toBe(false);
    // Once b has watched 30 minutes with no traffic, r1 is known idle for 30 minutes.
    const later = mergeUsage({ now: T0 + 30 * MIN, liveWithinMs: 15_000, reports: [report("a", T0 - 60 * MIN, { r1: T0 - 50 * MIN }), report("b", T0 - 10_000, {})] });
    expect(knownIdleMs(later, "r1", T0 + 30 * MIN)).toBe(30 * MIN + 10_000);
  });

  test("the latest watchingSince among live routers limits; one silent past liveWithinMs does not, its stamps still count", () => {
    const reports = [report("a", T0 - 60 * MIN, {}), report("b", T0 - 20_000, {}), report("dead", T0 - 1_000, { r1: T0 - 3 * MIN }, 16_000)];
    const m = mergeUsage({ now: T0, liveWithinMs: 15_000, reports });
    expect(m.since).toBe(T0 - 20_000);
    expect(m.live.map((l) => l.router)).toEqual(["b", "a"]);
    expect(m.lastUsed.get("r1")).toBe(T0 - 3 * MIN);
    // At exactly liveWithinMs it is still alive.
    expect(mergeUsage({ now: T0, liveWithinMs: 16_000, reports }).since).toBe(T0 - 1_000);
  });

  test("no live router: only stamps remain, idleness is the stamps'", () => {
    const m = mergeUsage({ now: T0, liveWithinMs: 15_000, reports: [report("a", T0 - MIN, { r1: T0 - 20 * MIN }, 60_000)] });
    expect(m.since).toBe(Number.NEGATIVE_INFINITY);
    expect(knownIdleMs(m, "r1", T0)).toBe(20 * MIN);
  });

  test("this control plane's own fresh collection replaces its stored row", () => {
    const m = mergeUsage({
      now: T0,
      liveWithinMs: 15_000,
      reports: [report("a", T0 - 60 * MIN, { r1: T0 - 30 * MIN }), report("b", T0 - 60 * MIN, { r2: T0 - 30 * MIN })],
      own: { router: "a", watchingSince: T0 - 5_000, lastUsed: new Map([["r3", T0 - 1_000]]) },
    });
    // a's stored r1 is gone with its old row (a restarted): what a says now is what counts.
    expect(m.lastUsed).toEqual(new Map([["r2", T0 - 30 * MIN], ["r3", T0 - 1_000]]));
    expect(m.since).toBe(T0 - 5_000);
  });

  test("clocks ahead: a stamp or watchingSince from the future reads as now, never as long idle; junk stamps are dropped", () => {
    const m = mergeUsage({ now: T0, liveWithinMs: 15_000, reports: [report("a", T0 + 10 * MIN, { r1: T0 + 5 * MIN, r2: Number.NaN }, -500)] });
    expect(m.lastUsed).toEqual(new Map([["r1", T0]]));
    expect(m.since).toBe(T0);
    expect(knownIdleMs(m, "r1", T0)).toBe(0);
    // A watchingSince that is not a number limits as "just now".
    expect(mergeUsage({ now: T0, liveWithinMs: 15_000, reports: [report("a", Number.NaN, { r1: T0 - MIN })] }).since).toBe(T0);
  });
});
