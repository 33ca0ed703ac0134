// Before it registers, a control plane looks for a live one of its name on the store: a recent
// row that refreshes is a live namesake (refuse), one that stays still is its own earlier run.

import { describe, expect, test } from "bun:test";
import { liveNamesake, namesakeVerdict, stillAfterMs } from "../../src/control/name-clash";
import type { ControlPlaneRow } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";

const TTL = 3000;
const RENEW = 1000;
const row = (seenAgoMs: number, o: Partial<ControlPlaneRow> = {}): ControlPlaneRow => ({ name: "head", adminUrl: "http://10.0.0.1:8001", routerUrl: "http://10.0.0.1:8000", startedAt: 5, seenAgoMs, ...o });

describe("namesakeVerdict", () => {
  test("written since the first read is live; still past two renewals, or gone, is not; else watch", () => {
    const o = { ttlMs: TTL, renewMs: RENEW };
    expect(stillAfterMs(TTL, RENEW)).toBe(2500);
    expect(stillAfterMs(15_000, 5_000)).toBe(10_500);
    expect(stillAfterMs(2_000, 5_000)).toBe(2_000);
    const first = { row: row(400), at: 1000 };
    // Unwritten, a row ages as the clock runs (a read's latency aside).
    expect(namesakeVerdict(first, { row: row(900), at: 1500 }, o)).toBe("watch");
    expect(namesakeVerdict(first, { row: row(750), at: 1500 }, o)).toBe("watch");
    // Written 600 ms after the first read: seen later than it was.
    expect(namesakeVerdict(first, { row: row(450), at: 2000 }, o)).toBe("live");
    expect(namesakeVerdict(first, { row: row(900, { startedAt: 6 }), at: 1500 }, o)).toBe("live");
    expect(namesakeVerdict(first, { row: row(900, { adminUrl: "http://10.0.0.2:8001" }), at: 1500 }, o)).toBe("live");
    expect(namesakeVerdict(first, { row: row(2600), at: 3200 }, o)).toBe("gone");
    expect(namesakeVerdict(first, undefined, o)).toBe("gone");
  });
});

/** A store whose only row ages with the clock, refreshed every `refreshEveryMs` when given. */
function store(clock: ManualScheduler, first: ControlPlaneRow | undefined, refreshEveryMs?: number) {
  const t0 = clock.mono();
  return {
    reads: 0,
    async controlPlanes(): Promise<ControlPlaneRow[]> {
      this.reads++;
      if (!first) return [];
      const elapsed = clock.mono() - t0;
      const ago = refreshEveryMs === undefined ? first.seenAgoMs + elapsed : (first.seenAgoMs + elapsed) % refreshEveryMs;
      return [row(ago), { ...row(0), name: "other" }];
    },
  };
}

async function verdict(clock: ManualScheduler, s: ReturnType<typeof store>, goneAlready?: (r: ControlPlaneRow) => Promise<boolean>): Promise<{ live: ControlPlaneRow | undefined; waited: number[] }> {
  const waited: number[] = [];
  const p = liveNamesake({ store: s, scheduler: clock, name: "head", ttlMs: TTL, renewMs: RENEW, onWatch: (_r, ms) => waited.push(ms), ...(goneAlready ? { goneAlready } : {}) });
  let out: ControlPlaneRow | undefined | null = null;
  void p.then((v) => (out = v));
  for (let i = 0; i < 100 && out === null; i++) await clock.run(250);
  if (out === null) throw new Error("liveNamesake never answered");
  return { live: out ?? undefined, waited };
}

describe("liveNamesake", () => {
  test("no row, or one older than the TTL: free at once, nothing watched", async () => {
    const clock = new ManualScheduler();
    expect(await verdict(clock, store(clock, undefined))).toEqual({ live: undefined, waited: [] });
    const old = store(clock, row(TTL + 1));
    expect(await verdict(clock, old)).toEqual({ live: undefined, waited: [] });
    expect(old.reads).toBe(1);
  });

  test("a row refreshed every renewal is a live namesake", async () => {
    const clock = new ManualScheduler();
    const r = await verdict(clock, store(clock, row(200), RENEW));
    expect(r.live?.name).toBe("head");
    expect(r.waited).toEqual([2300]);
  });

  test("a recent row that stays still is this one's earlier run: free once it is two renewals old", async () => {
    const clock = new ManualScheduler();
    const started = clock.mono();
    const r = await verdict(clock, store(clock, row(200)));
    expect(r.live).toBeUndefined();
    expect(clock.mono() - started).toBeGreaterThanOrEqual(2300);
    expect(clock.mono() - started).toBeLessThanOrEqual(2300 + 250);
  });

  test("a recent row known gone at once (nothing listens at its address here) is not watched; one not known gone is", async () => {
    const clock = new ManualScheduler();
    const asked: string[] = [];
    const started = clock.mono();
    const s = store(clock, row(200));
    const r = await verdict(clock, s, async (r) => (asked.push(r.adminUrl), true));
    expect(r).toEqual({ live: undefined, waited: [] });
    expect(asked).toEqual(["http://10.0.0.1:8001"]);
    expect(s.reads).toBe(1);
    // One step of the helper's clock at most: nothing waited on the clock.
    expect(clock.mono() - started).toBeLessThanOrEqual(250);
    // Not known gone: the row is watched, and a live one found live all the same.
    const live = await verdict(clock, store(clock, row(200), RENEW), async () => false);
    expect(live.live?.name).toBe("head");
    expect(live.waited).toEqual([2300]);
  });
});
