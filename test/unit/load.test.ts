import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import { BEHIND_MS, CALM_STEPS, LoadMonitor, MAX_FACTOR, SAMPLE_MS, deafTime, nextInterval, sheddingFor, timeoutInForce } from "../../src/control/load";
import { heardAt, reachability } from "../../src/control/reachability";
import { headLine } from "../../src/cli/status";
import type { NodeRow } from "../../src/control/types";

describe("deafTime", () => {
  test("agrees with counting every millisecond, for random overlapping stalls and windows", () => {
    let seed = 7;
    const rnd = (n: number) => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) % n);
    for (let round = 0; round < 200; round++) {
      const stalls = Array.from({ length: rnd(12) }, () => ({ end: rnd(2_000), ms: rnd(400) }));
      const since = rnd(2_000);
      const now = since + rnd(1_000);
      let naive = 0;
      for (let t = since; t < now; t++) if (stalls.some((s) => t >= s.end - s.ms && t < s.end)) naive++;
      expect(deafTime(stalls, since, now)).toBe(naive);
    }
  });

  test("counts only the part of each stall inside [since, now]", () => {
    const stalls = [{ end: 1_000, ms: 500 }, { end: 5_000, ms: 2_000 }];
    expect(deafTime(stalls, 0, 10_000)).toBe(2_500);
    expect(deafTime(stalls, 800, 10_000)).toBe(2_200);
    expect(deafTime(stalls, 4_000, 4_500)).toBe(500);
    expect(deafTime(stalls, 6_000, 10_000)).toBe(0);
  });
  test("overlapping stalls (a stall and the queue wait it caused) count once", () => {
    expect(deafTime([{ end: 5_000, ms: 3_000 }, { end: 5_500, ms: 3_000 }, { end: 4_000, ms: 500 }], 0, 10_000)).toBe(3_500);
  });
  test("no stalls, no deaf time", () => {
    expect(deafTime([], 0, 1e9)).toBe(0);
  });
});

describe("the interval policy", () => {
  const cfg = 5_000;
  const start = { ms: cfg, lastBehind: Number.NEGATIVE_INFINITY, changedAt: Number.NEGATIVE_INFINITY };
  test("behind doubles it, at most once per configured interval, up to MAX_FACTOR ×", () => {
    let s = nextInterval(start, true, 0, cfg);
    expect(s.ms).toBe(10_000);
    s = nextInterval(s, true, 1_000, cfg);
    expect(s.ms).toBe(10_000);
    s = nextInterval(s, true, 5_000, cfg);
    expect(s.ms).toBe(20_000);
    s = nextInterval(s, true, 10_000, cfg);
    expect(s.ms).toBe(cfg * MAX_FACTOR);
  });
  test("holds while calm is short, then returns one step per calm period", () => {
    let s = nextInterval(nextInterval(start, true, 0, cfg), true, 5_000, cfg);
    expect(s.ms).toBe(20_000);
    const calm = CALM_STEPS * cfg;
    s = nextInterval(s, false, 5_000 + calm - 1, cfg);
    expect(s.ms).toBe(20_000);
    s = nextInterval(s, false, 5_000 + calm, cfg);
    expect(s.ms).toBe(10_000);
    s = nextInterval(s, false, 5_000 + calm + 1, cfg);
    expect(s.ms).toBe(10_000);
    s = nextInterval(s, false, 5_000 + 2 * calm, cfg);
    expect(s.ms).toBe(cfg);
    s = nextInterval(s, false, 5_000 + 10 * calm, cfg);
    expect(s.ms).toBe(cfg);
  });
  test("the timeout in force covers 3 × any interval announced in the window", () => {
    expect(timeoutInForce(15_000, [], 0, 5_000)).toBe(15_000);
    expect(timeoutInForce(15_000, [], 0, 20_000)).toBe(60_000);
    // Back to 5 s at t=100 s, after 20 s: nodes may still follow 20 s until they hear it.
    const announced = [{ at: 100_000, ms: 20_000 }, { at: 100_000, ms: 5_000 }];
    expect(timeoutInForce(15_000, announced, 110_000, 5_000)).toBe(60_000);
    expect(timeoutInForce(15_000, announced, 121_000, 5_000)).toBe(15_000);
  });
  test("shedding follows the order: summary, metrics, unchanged heartbeats", () => {
    expect(sheddingFor(0)).toEqual([]);
    expect(sheddingFor(BEHIND_MS)).toEqual(["summary"]);
    expect(sheddingFor(4_000)).toEqual(["summary", "metrics"]);
    expect(sheddingFor(60_000)).toEqual(["summary", "metrics", "unchanged_heartbeats"]);
  });
});

/** A scheduler whose mono() can jump without running timers: a stalled process. */
class StallableScheduler extends ManualScheduler {
  extra = 0;
  override mono(): number {
    return super.mono() + this.extra;
  }
  override now(): number {
    return super.now() + this.extra;
  }
}

describe("LoadMonitor", () => {
  test("a stall shows as one gap: deaf time, a slower interval, one behind and one caught-up episode", () => {
    const s = new StallableScheduler();
    const m = new LoadMonitor(s, 1_000, 3_000);
    m.start();
    s.advance(2_000);
    expect(m.behindMs()).toBe(0);
    expect(m.intervalMs()).toBe(1_000);
    const t0 = s.now();
    s.extra += 9_000; // SIGSTOP for 9 s
    s.advance(SAMPLE_MS);
    expect(m.behindMs()).toBeGreaterThanOrEqual(8_900);
    expect(deafTime(m.deafSpans(), t0, s.now())).toBeGreaterThanOrEqual(8_900);
    expect(m.intervalMs()).toBe(2_000);
    expect(m.nodeTimeoutInForce()).toBe(6_000);
    expect(m.shedding()).toContain("summary");
    expect(m.takeEpisodes().map((e) => e.kind)).toEqual(["head.behind"]);
    expect(m.takeEpisodes()).toEqual([]);
    s.advance(CALM_STEPS * 1_000 + SAMPLE_MS);
    expect(m.intervalMs()).toBe(1_000);
    // Nodes may not have heard the shorter interval yet.
    expect(m.nodeTimeoutInForce()).toBe(6_000);
    expect(m.takeEpisodes().map((e) => e.kind)).toEqual(["head.caught_up"]);
    s.advance(20_000);
    expect(m.nodeTimeoutInForce()).toBe(3_000);
    expect(m.behindMs()).toBe(0);
    expect(m.view()).toEqual({ behind_ms: 0, heartbeat_interval_ms: 1_000, configured_interval_ms: 1_000, shedding: [] });
    m.stop();
  });
  test("queue waits count as load and as deaf time", () => {
    const s = new ManualScheduler();
    const m = new LoadMonitor(s, 5_000, 15_000);
    m.queueWait(2_000);
    expect(m.behindMs()).toBe(2_000);
    expect(m.intervalMs()).toBe(10_000);
    expect(deafTime(m.deafSpans(), s.now() - 10_000, s.now())).toBe(2_000);
    m.queueWait(10);
    expect(deafTime(m.deafSpans(), s.now() - 10_000, s.now())).toBe(2_000);
  });
});

describe("reachability with deaf time", () => {
  const node = (lastHeartbeat: number): NodeRow => ({ name: "n1", adminState: "active", lastHeartbeat }) as unknown as NodeRow;
  test("silence while the head node was stalled does not make a node unreachable", () => {
    const now = 100_000;
    const input = { nodes: [node(now - 10_000)], now, watchedSince: 0, nodeTimeoutMs: 3_000, unreachable: new Set<string>() };
    expect(reachability(input).events.map((e) => e.kind)).toEqual(["node.unreachable"]);
    const deaf = [{ end: now - 500, ms: 9_000 }];
    expect(reachability({ ...input, deaf }).events).toEqual([]);
    expect(heardAt(now - 10_000, now, 0, deaf)).toBe(now - 1_000);
  });
  test("a node silent well beyond the stall is still unreachable", () => {
    const now = 100_000;
    const deaf = [{ end: now - 500, ms: 9_000 }];
    expect(reachability({ nodes: [node(now - 20_000)], now, watchedSince: 0, nodeTimeoutMs: 3_000, unreachable: new Set<string>(), deaf }).events.map((e) => e.kind)).toEqual(["node.unreachable"]);
  });
});

describe("status line", () => {
  test("only when behind, with the slowed interval", () => {
    expect(headLine({ head: { behind_ms: 4_200, heartbeat_interval_ms: 10_000, configured_interval_ms: 5_000, shedding: ["summary"] } })).toContain("head node behind by 4.2 s: heartbeats slowed to 10 s");
    expect(headLine({ head: { behind_ms: 0, heartbeat_interval_ms: 5_000, configured_interval_ms: 5_000, shedding: [] } })).toBeUndefined();
    expect(headLine({})).toBeUndefined();
  });
});

describe("report grace with deaf time", () => {
  test("a starting replica is not failed as unreported while the head node was the one not listening", async () => {
    const { processReports } = await import("../../src/control/reconcile/reports");
    const { RECONCILE_DEFAULTS } = await import("../helpers/control-settings");
    const now = 1_000_000;
    const replica = { id: "r", model: "m", state: "starting", createdAt: now - 20_000, failures: 0, shards: [{ node: "a", gpus: [0] }] };
    const input = { snapshot: { replicas: [replica], modelState: [] }, node: "a", reports: [], now, config: RECONCILE_DEFAULTS } as unknown as Parameters<typeof processReports>[0];
    expect(processReports(input).events.map((e) => e.kind)).toEqual(["replica.failed"]);
    expect(processReports({ ...input, deaf: [{ end: now - 1_000, ms: 10_000 }] }).events).toEqual([]);
  });
});
