// A control plane's side of shared rate limits (control/limit-share-exchange.ts): its router is
// told to wait for its shares before any key arrives, then gets each tick's shares as the store's
// transaction decided them from the router's demand; a store that does not answer leaves the
// last shares for a while, then takes them away (refusing beats admitting twice).

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { LimitShareExchange } from "../../src/control/limit-share-exchange";
import type { ShareRow, Shares } from "../../src/control/limit-shares";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { LimitShares, LimitUseEntry } from "../../src/protocol/routing";

const X = "key:rpm:alice";

function setup() {
  const clock = new ManualScheduler(0);
  const rows = new Map<string, ShareRow>();
  let down = false;
  const store = {
    shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares> {
      if (down) return Promise.reject(new Error("store down"));
      const out = decide([...rows.values()]);
      rows.set(router, { router, demand: Object.fromEntries(demand), shares: { ...Object.fromEntries(out.shares), ...Object.fromEntries(out.slots ?? []), "*": out.fallback }, reportedAgoMs: 0 });
      return Promise.resolve(out);
    },
  };
  const sent: LimitShares[] = [];
  let use: LimitUseEntry[] = [];
  const x = new LimitShareExchange({
    name: "a",
    liveWithinMs: 4_000,
    source: { limitUse: () => use },
    sink: { setLimitShares: (s) => sent.push(s) },
    store,
    scheduler: clock,
    log: pino({ level: "silent" }),
  });
  return { clock, rows, sent, x, setUse: (u: LimitUseEntry[]) => (use = u), setDown: (d: boolean) => (down = d) };
}

describe("LimitShareExchange", () => {
  test("the router waits for its shares; each tick its demand goes to the store and its shares come back", async () => {
    const { clock, rows, sent, x, setUse } = setup();
    expect(sent).toEqual([{ shares: [], fallback: 0, awaiting: true }]);
    setUse([{ of: "key", name: "alice", rpm: 3, concurrent: 0, askedRequests: 10, askedTokens: 0 }]);
    // Alone: the whole limit.
    await x.exchange();
    expect(sent[1]).toEqual({ shares: [[X, 1]], fallback: 1, slots: [] });
    // Another router asks three times as much and holds little: this one keeps a floor plus a quarter of the rest.
    rows.set("b", { router: "b", demand: { [X]: 30 }, shares: { [X]: 0.05, "*": 0.5 }, reportedAgoMs: 0 });
    clock.advance(1_000);
    setUse([{ of: "key", name: "alice", rpm: 3, concurrent: 0, askedRequests: 20, askedTokens: 0 }]);
    await x.exchange();
    // Its demand: the 20 asked since it first saw the key (within the window).
    expect(sent[2]!.shares[0]![1]).toBeCloseTo(1 / 16 + (7 / 8) * (20 / 50), 6);
    expect(sent[2]!.fallback).toBe(0.5);
    expect(rows.get("a")!.demand).toEqual({ [X]: 20 });
    // The same shares again are not sent again.
    rows.set("b", { router: "b", demand: { [X]: 30 }, shares: { [X]: 0.05, "*": 0.5 }, reportedAgoMs: 0 });
    await x.exchange();
    expect(sent.length).toBe(3);
  });

  test("a max-concurrent: its demand and what is in flight go in the row, and the router gets whole slots", async () => {
    const { clock, rows, sent, x, setUse } = setup();
    const C = "key:con:alice";
    rows.set("b", { router: "b", demand: { [C]: 0, [C + "#inflight"]: 1 }, shares: { [C]: 1, "*": 0.5 }, reportedAgoMs: 0 });
    setUse([{ of: "key", name: "alice", concurrent: 2, maxConcurrent: 8, askedRequests: 5, askedTokens: 0 }]);
    await x.exchange();
    clock.advance(1_000);
    setUse([{ of: "key", name: "alice", concurrent: 3, maxConcurrent: 8, askedRequests: 25, askedTokens: 0 }]);
    await x.exchange();
    expect(rows.get("a")!.demand).toEqual({ [C]: 25, [C + "#inflight"]: 3 });
    // Nearly all the demand is a's (b's counts as 1): 8 × (1/16 + 7/8 × 25/26) = 7.23 → 7, b's 0.77 → 1 by largest remainder; and b holds 1.
    expect(sent.at(-1)!.slots).toEqual([[C, 7]]);
    expect(rows.get("a")!.shares[C]).toBe(7);
  });

  test("the store silent: the last shares kept for half the time a row stays live, then none", async () => {
    const { clock, sent, x, setDown } = setup();
    await x.exchange();
    setDown(true);
    clock.advance(1_000);
    expect(await x.exchange()).toBeUndefined();
    expect(sent.length).toBe(2);
    clock.advance(1_000);
    await x.exchange();
    expect(sent[2]).toEqual({ shares: [], fallback: 0 });
    clock.advance(1_000);
    await x.exchange();
    expect(sent.length).toBe(3);
    setDown(false);
    await x.exchange();
    expect(sent[3]).toEqual({ shares: [], fallback: 1, slots: [] });
  });
});
