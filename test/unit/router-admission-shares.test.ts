// A router's share of its keys' and teams' rate limits (router/admission.ts setShares), on a
// manual clock: a bucket holds and refills limit × share; a smaller share caps the level at once,
// a larger one only refills faster; buckets made while the shares are awaited start empty and are
// filled to their first share; the headers still say the limit; the demand each router reports.

import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import { type ApiKeyEntry, limitItem } from "../../src/protocol/routing";
import { Admission, type KeyState } from "../../src/router/admission";

const key = (name: string, extra: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name, sha256: `sha-${name}`, pool: null, ...extra });

function burst(a: Admission, s: KeyState, n: number, prompt = 0): number {
  let ok = 0;
  for (let i = 0; i < n; i++) if (a.admit(s, prompt) === undefined) ok++;
  return ok;
}

describe("Admission with shares", () => {
  test("a third of rpm 60: 20 at once, then one every 3 s; the headers say the limit, the refusal this router's share", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setKeys([key("k", { limits: { rpm: 60 } })]);
    a.setShares({ shares: [[limitItem("key", "rpm", "k"), 1 / 3]], fallback: 1 / 3 });
    const s = a.of("sha-k")!;
    expect(burst(a, s, 100)).toBe(20);
    const no = a.admit(s, 0)!;
    expect(no.retryAfterMs).toBe(3_000);
    expect(no.message).toContain("limit 60 (shared by the routers; this one's share is 20), 0 left");
    expect(a.headers(s)).toContain("x-ratelimit-limit-requests: 60\r\n");
    clock.advance(3_000);
    expect(burst(a, s, 5)).toBe(1);
  });

  test("a smaller share caps what is left at once; a larger one refills faster, handing nothing out", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setKeys([key("k", { limits: { rpm: 60, tpm: 6000 } })]);
    const s = a.of("sha-k")!;
    const rpm = limitItem("key", "rpm", "k");
    a.setShares({ shares: [[rpm, 0.1]], fallback: 0.5 });
    // 6 requests left of rpm (60 × 0.1), 3000 tokens of tpm (the fallback).
    expect(a.use()[0]).toMatchObject({ requestsLeft: 6, tokensLeft: 3000 });
    expect(burst(a, s, 10)).toBe(6);
    a.setShares({ shares: [[rpm, 0.9]], fallback: 0.5 });
    expect(burst(a, s, 10)).toBe(0);
    // Refill at 54 a minute now: 9 in 10 s.
    clock.advance(10_000);
    expect(burst(a, s, 20)).toBe(9);
  });

  test("no share at all refuses, retrying after a second (the next share may come by then)", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setKeys([key("k", { limits: { rpm: 60, tpm: 1000 } })]);
    a.setShares({ shares: [], fallback: 0 });
    const s = a.of("sha-k")!;
    const no = a.admit(s, 10)!;
    expect(no.retryAfterMs).toBe(1_000);
    clock.advance(60_000);
    expect(a.admit(s, 10)).toBeDefined();
  });

  test("keys published while shares are awaited start empty, and full at their first share; keys made later start full at theirs", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setShares({ shares: [], fallback: 0, awaiting: true });
    a.setKeys([key("k", { team: "t", limits: { rpm: 30 }, teamLimits: { rpm: 90 } })]);
    const s = a.of("sha-k")!;
    expect(a.admit(s, 0)).toBeDefined();
    a.setShares({ shares: [[limitItem("team", "rpm", "t"), 0.5]], fallback: 0.2 });
    // The key's 30 × 0.2 = 6, within the team's 45.
    expect(burst(a, s, 50)).toBe(6);
    a.setKeys([key("k", { team: "t", limits: { rpm: 30 }, teamLimits: { rpm: 90 } }), key("new", { limits: { rpm: 100 } })]);
    expect(burst(a, a.of("sha-new")!, 50)).toBe(20);
  });

  test("max-concurrent in whole slots: its listed slots, else the limit × the fallback rounded down; the refusal says whose share", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setKeys([key("k", { team: "t", limits: { maxConcurrent: 4 }, teamLimits: { maxConcurrent: 10 } })]);
    const s = a.of("sha-k")!;
    a.setShares({ shares: [], fallback: 0.5, slots: [[limitItem("key", "con", "k"), 1]] });
    expect(burst(a, s, 3)).toBe(1);
    expect(a.admit(s, 0)!.message).toBe("Rate limit reached for key 'k' on 1 requests in flight on this router, its share of the 4 it may have at once across the routers; try again when one of them has ended.");
    a.setShares({ shares: [], fallback: 0.5, slots: [[limitItem("key", "con", "k"), 4]] });
    // The key's 4 now, and the team's 10 × 0.5 = 5.
    expect(burst(a, s, 9)).toBe(3);
    a.setShares({ shares: [], fallback: 0.25 });
    // The key's 4 × 0.25 = 1 and 4 in flight: none until three end.
    for (let i = 0; i < 3; i++) s.release();
    expect(a.admit(s, 0)!.limit).toBe("concurrent");
    s.release();
    expect(a.admit(s, 0)).toBeUndefined();
    expect(a.limitUse()).toEqual([
      { of: "key", name: "k", concurrent: 1, askedRequests: 15, askedTokens: 0, usedRequests: 5, usedTokens: 0, maxConcurrent: 4 },
      { of: "team", name: "t", concurrent: 1, askedRequests: 15, askedTokens: 0, usedRequests: 5, usedTokens: 0, maxConcurrent: 10 },
    ]);
  });

  test("the demand reported: every request asked, admitted or refused, and its tokens, of the key and of its team", () => {
    const clock = new ManualScheduler(0);
    const a = new Admission(clock);
    a.setKeys([key("k", { team: "t", limits: { rpm: 2 }, teamLimits: { tpm: 10_000 } })]);
    const s = a.of("sha-k")!;
    expect(burst(a, s, 5, 100)).toBe(2);
    a.tokens(s, 40);
    a.tokens(s, -30);
    const use = a.limitUse();
    expect(use.find((u) => u.of === "key")).toMatchObject({ askedRequests: 5, askedTokens: 540, usedRequests: 2, usedTokens: 240 });
    expect(use.find((u) => u.of === "team")).toMatchObject({ askedRequests: 5, askedTokens: 540 });
  });
});
