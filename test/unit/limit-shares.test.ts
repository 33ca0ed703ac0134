// How several routers share a key's rate limits (control/limit-shares.ts): a floor for every live
// router plus the rest by demand, capped by what the others hold, so that shares written one
// after another (as the store's transactions serialise them) never sum past 1; a router alone
// holds everything; a router gone stops counting; the demand over the last few seconds from the
// routers' cumulative counts.

import { describe, expect, test } from "bun:test";
import { DemandWindow, FALLBACK, INFLIGHT, RESERVE, type ShareRow, computeShares, computeSlots, itemOf, quietFloor } from "../../src/control/limit-shares";

const X = itemOf("key", "rpm", "alice");
const row = (router: string, demand: Record<string, number>, shares: Record<string, number>, reportedAgoMs = 0): ShareRow => ({ router, demand, shares, reportedAgoMs });
const LIVE = 3_000;

describe("computeShares", () => {
  test("alone (no row, or only its own old one): the whole limit, with demand or without", () => {
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), rows: [], liveWithinMs: LIVE })).toEqual({ shares: new Map([[X, 1]]), fallback: 1 });
    const old = [row("a", { [X]: 5 }, { [X]: 0.2, [FALLBACK]: 0.5 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 7]]), rows: old, liveWithinMs: LIVE })).toEqual({ shares: new Map([[X, 1]]), fallback: 1 });
  });

  test("three routers: a floor each, the rest by demand; nothing asked anywhere: a third each", () => {
    const rows = [row("b", { [X]: 30 }, { [X]: 0.1, [FALLBACK]: 0.1 }), row("c", { [X]: 0 }, { [X]: 0.1, [FALLBACK]: 0.1 })];
    const floor = RESERVE / 3;
    const s = computeShares({ own: "a", demand: new Map([[X, 90]]), rows, liveWithinMs: LIVE });
    expect(s.shares.get(X)!).toBeCloseTo(floor + (1 - 3 * floor) * 0.75, 6);
    expect(s.fallback).toBeCloseTo(1 / 3, 6);
    const quiet = [row("b", { [X]: 0 }, { [X]: 1 / 3, [FALLBACK]: 1 / 3 }), row("c", {}, { [FALLBACK]: 1 / 3 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), rows: quiet, liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 3, 6);
  });

  test("never more than the others leave: a router that wants more waits until their rows show they gave it up", () => {
    // b and c still hold a third each (as written before a's demand reached them).
    const rows = [row("b", { [X]: 0 }, { [X]: 1 / 3 }), row("c", { [X]: 0 }, { [X]: 1 / 3 })];
    const first = computeShares({ own: "a", demand: new Map([[X, 100]]), rows, liveWithinMs: LIVE }).shares.get(X)!;
    expect(first).toBeLessThanOrEqual(1 / 3);
    // Once they lowered theirs (to their floor), a takes what they left.
    const floor = RESERVE / 3;
    const later = [row("b", { [X]: 0 }, { [X]: floor }), row("c", { [X]: 0 }, { [X]: floor })];
    expect(computeShares({ own: "a", demand: new Map([[X, 100]]), rows: later, liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 - 2 * floor, 6);
  });

  test("a router that joins holds nothing until the others make room; a router gone stops counting, and its share is free", () => {
    const rows = [row("b", {}, { [X]: 1, [FALLBACK]: 1 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), rows, liveWithinMs: LIVE })).toEqual({ shares: new Map([[X, 0]]), fallback: 0 });
    const gone = [row("b", { [X]: 50 }, { [X]: 0.9, [FALLBACK]: 0.9 }, LIVE + 1)];
    expect(computeShares({ own: "a", demand: new Map([[X, 1]]), rows: gone, liveWithinMs: LIVE })).toEqual({ shares: new Map([[X, 1]]), fallback: 1 });
  });

  test("a few requests do not move the shares: each router's demand counts as at least the window's allowance divided among them", () => {
    const third = (r: string) => row(r, { [X]: 0 }, { [X]: 1 / 3 });
    // rpm 240: 20 over the 5 s window, so each of three counts as asking at least 20 / 3.
    const quiet = new Map([[X, quietFloor(240)]]);
    expect(quietFloor(240)).toBe(20);
    expect(computeShares({ own: "a", demand: new Map([[X, 5]]), quiet, rows: [third("b"), third("c")], liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 3, 6);
    expect(computeShares({ own: "a", demand: new Map([[X, 1]]), quiet, rows: [third("b"), third("c")], liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 3, 6);
    // A flood here moves them nearly all the way.
    const flood = computeShares({ own: "a", demand: new Map([[X, 500]]), quiet, rows: [row("b", { [X]: 0 }, { [X]: 0 }), row("c", { [X]: 0 }, { [X]: 0 })], liveWithinMs: LIVE }).shares.get(X)!;
    expect(flood).toBeCloseTo(1 / 24 + (7 / 8) * (500 / (500 + 2 * (20 / 3))), 6);
  });

  test("a share a little above its target stays as it was: routers hit alike keep even shares through the noise of their demand", () => {
    const rows = (own: number) => [row("a", { [X]: 300 }, { [X]: own }), row("b", { [X]: 400 }, { [X]: 1 / 3 }), row("c", { [X]: 350 }, { [X]: 1 / 3 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 300]]), rows: rows(1 / 3), liveWithinMs: LIVE }).shares.get(X)).toBe(0.333333333);
    // A little below it, it grows (as far as the others leave room); a router not asked any more goes to its target.
    expect(computeShares({ own: "a", demand: new Map([[X, 300]]), rows: rows(0.25), liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 24 + (7 / 8) * (300 / 1050), 6);
    const quiet = new Map([[X, 30]]);
    const idle = [row("a", { [X]: 0 }, { [X]: 0.37 }), row("b", { [X]: 0 }, { [X]: 0.3 }), row("c", { [X]: 0 }, { [X]: 0.3 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), quiet, rows: idle, liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 3, 6);
    // Far above it (a flood elsewhere), it shrinks.
    const flooded = [row("a", { [X]: 10 }, { [X]: 1 / 3 }), row("b", { [X]: 400 }, { [X]: 1 / 3 }), row("c", { [X]: 350 }, { [X]: 1 / 3 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 10]]), rows: flooded, liveWithinMs: LIVE }).shares.get(X)!).toBeCloseTo(1 / 24 + (7 / 8) * (10 / 760), 6);
  });

  test("a share does not shrink below twice what its router uses: a router still serving a burst from its bucket while another refuses keeps what it holds", () => {
    // rpm 120 refills 10 over the 5 s window; a admitted 30 (from its bucket), b refuses a flood.
    const quiet = new Map([[X, quietFloor(120)]]);
    const rows = [row("a", { [X]: 30 }, { [X]: 1 / 3 }), row("b", { [X]: 900 }, { [X]: 1 / 3 }), row("c", { [X]: 30 }, { [X]: 1 / 3 })];
    const a = (used: number) => computeShares({ own: "a", demand: new Map([[X, 30]]), quiet, used: new Map([[X, used]]), rows, liveWithinMs: LIVE }).shares.get(X)!;
    expect(a(30)).toBe(0.333333333);
    // Admitting 1 (a tenth of the refill): it keeps twice that; admitting nothing, it gives way to the flood.
    expect(a(1)).toBeCloseTo(0.2, 6);
    expect(a(0)).toBeCloseTo(1 / 24 + (7 / 8) * (30 / 960), 6);
  });

  test("an item another router does not list counts at its fallback; a row that says neither counts as holding it all", () => {
    const rows = [row("b", {}, { [FALLBACK]: 0.25 })];
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), rows, liveWithinMs: LIVE }).shares.get(X)).toBe(0.5);
    expect(computeShares({ own: "a", demand: new Map([[X, 0]]), rows: [row("b", {}, {})], liveWithinMs: LIVE }).shares.get(X)).toBe(0);
  });

  test("serialised read-decide-writes of three routers in any order: the stored shares never sum past 1, and they settle on the demand", () => {
    const names = ["a", "b", "c"];
    let seed = 7;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const stored = new Map<string, ShareRow>();
    let worst = 0;
    for (let step = 0; step < 3000; step++) {
      // Demand moves every 300 steps; each step one router (at random) reads, decides and writes.
      const phase = Math.floor(step / 300) % 3;
      const demandOf = (n: string) => (phase === 0 ? 10 : n === names[phase] ? 100 : phase === 2 && n === "a" ? 20 : 0);
      const own = names[Math.floor(rand() * 3)]!;
      const demand = new Map([[X, demandOf(own)]]);
      const s = computeShares({ own, demand, rows: [...stored.values()], liveWithinMs: LIVE });
      stored.set(own, row(own, { [X]: demandOf(own) }, { [X]: s.shares.get(X)!, [FALLBACK]: s.fallback }));
      const sum = [...stored.values()].reduce((t, r) => t + r.shares[X]!, 0);
      worst = Math.max(worst, sum);
      if (step % 300 === 299) {
        // Settled: near the demand's split, and (almost) all of the limit in use.
        const floor = RESERVE / 3;
        const total = names.reduce((t, n) => t + demandOf(n), 0);
        for (const n of names) expect(stored.get(n)!.shares[X]!).toBeCloseTo(floor + (1 - 3 * floor) * (demandOf(n) / total), 3);
        expect(sum).toBeGreaterThan(0.999);
      }
    }
    expect(worst).toBeLessThanOrEqual(1);
  });
});

describe("computeSlots", () => {
  const C = itemOf("key", "con", "alice");
  const slots = (own: string, demand: number, inflight: number, limit: number, rows: ShareRow[]) =>
    computeSlots({ own, con: new Map([[C, { demand, inflight, limit }]]), rows, liveWithinMs: LIVE }).get(C);

  test("alone: the whole limit; three quiet routers: the limit apportioned, every slot somewhere, ties by name", () => {
    expect(slots("a", 0, 0, 4, [])).toBe(4);
    const quiet = (r: string) => row(r, { [C]: 0 }, { [FALLBACK]: 1 / 3, [C]: 0 });
    // 4 / 3 each: one each, the last slot to the first name.
    expect(slots("a", 0, 0, 4, [quiet("b"), quiet("c")])).toBe(2);
    expect(slots("b", 0, 0, 4, [quiet("a"), quiet("c")])).toBe(1);
  });

  test("by demand, capped by what the others hold or still have in flight, whichever is more", () => {
    // b holds 3 of 4 and asks nothing: a's target is 3 (4 × (1/24 + 7/8) = 3.67, and the remainder), but only 1 is free.
    const b = row("b", { [C]: 0, [C + INFLIGHT]: 0 }, { [C]: 3 });
    const c = row("c", { [C]: 0, [C + INFLIGHT]: 0 }, { [C]: 0 });
    expect(slots("a", 50, 0, 4, [b, c])).toBe(1);
    // b gave its slots up (1 left) but still has 3 in flight: they count until they end.
    expect(slots("a", 50, 0, 4, [row("b", { [C]: 0, [C + INFLIGHT]: 3 }, { [C]: 1 }), c])).toBe(1);
    expect(slots("a", 50, 0, 4, [row("b", { [C]: 0, [C + INFLIGHT]: 0 }, { [C]: 0 }), c])).toBe(4);
  });

  test("serialised read-decide-writes in any order: the slots held and in flight never pass the limit", () => {
    const names = ["a", "b", "c"];
    const stored = new Map<string, ShareRow>();
    const inflight = new Map(names.map((n) => [n, 0]));
    let seed = 11;
    const rand = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let step = 0; step < 3000; step++) {
      const own = names[Math.floor(rand() * 3)]!;
      const demand = Math.floor(step / 250) % 3 === names.indexOf(own) ? 100 : Math.floor(rand() * 5);
      const mine = stored.get(own)?.shares[C] ?? 0;
      // Requests come and go within the slots the router holds.
      inflight.set(own, Math.min(Math.max(mine, inflight.get(own)!), Math.floor(rand() * (mine + 2))));
      const s = slots(own, demand, inflight.get(own)!, 5, [...stored.values()])!;
      stored.set(own, row(own, { [C]: demand, [C + INFLIGHT]: inflight.get(own)! }, { [C]: s }));
      const held = names.reduce((t, n) => t + Math.max(stored.get(n)?.shares[C] ?? 0, inflight.get(n)!), 0);
      expect(held).toBeLessThanOrEqual(5);
    }
  });
});

describe("DemandWindow", () => {
  test("the count now less the oldest within the window (a limit seen first counted from 0); a count that went down starts again; a limit gone is forgotten", () => {
    const w = new DemandWindow(5_000);
    const use = (askedRequests: number, askedTokens: number) => [{ of: "key" as const, name: "alice", rpm: 0, tpm: 0, askedRequests, askedTokens }];
    expect(w.add(0, use(10, 100))).toEqual(new Map([[X, 10], [itemOf("key", "tpm", "alice"), 100]]));
    expect(w.add(1_000, use(30, 500)).get(X)).toBe(30);
    expect(w.add(5_000, use(40, 600)).get(X)).toBe(40);
    // The samples at 0 are past the window: counted from the one at 1 s.
    expect(w.add(6_000, use(50, 700)).get(X)).toBe(20);
    // The router thread replaced: its counts start again from 0.
    expect(w.add(7_000, use(3, 10)).get(X)).toBe(3);
    expect(w.add(8_000, use(9, 10)).get(X)).toBe(9);
    // No tick for longer than the window: counted from the last sample, not from the start.
    expect(w.add(20_000, use(12, 10)).get(X)).toBe(3);
    // Only the limits a key has count: without its rpm, no rpm item.
    expect([...w.add(9_000, [{ of: "team", name: "t", tpm: 5, askedRequests: 1, askedTokens: 2 }]).keys()]).toEqual([itemOf("team", "tpm", "t")]);
  });
});
