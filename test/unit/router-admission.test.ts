// The router's rate and concurrency limits per key and per team (router/admission.ts), on a
// manual clock: token buckets refilled per ms, a team's limits shared by its keys, refusals
// naming the limit, counters kept across publications of the keys, OpenAI's header values.

import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry } from "../../src/protocol/routing";
import { Admission, type KeyState, duration, promptEstimate, refusalReply } from "../../src/router/admission";

const key = (name: string, extra: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name, sha256: `sha-${name}`, pool: null, ...extra });

function setup(keys: ApiKeyEntry[]) {
  const clock = new ManualScheduler();
  const a = new Admission(clock);
  a.setKeys(keys);
  const of = (name: string): KeyState => a.of(`sha-${name}`)!;
  return { clock, a, of };
}

/** Admits n requests of `prompt` tokens; returns how many were admitted. */
function burst(a: Admission, s: KeyState, n: number, prompt = 0): number {
  let ok = 0;
  for (let i = 0; i < n; i++) if (a.admit(s, prompt) === undefined) ok++;
  return ok;
}

describe("Admission", () => {
  test("requests per minute: a minute's allowance at once, then one request every 60/rpm s; the refusal names the key and when to retry", () => {
    const { clock, a, of } = setup([key("k", { limits: { rpm: 6 } })]);
    const s = of("k");
    expect(burst(a, s, 6)).toBe(6);
    const no = a.admit(s, 0)!;
    expect(no.limit).toBe("requests");
    expect(no.retryAfterMs).toBe(10_000);
    expect(no.message).toBe("Rate limit reached for key 'k' on requests per minute (RPM): limit 6, 0 left; try again in 10s.");
    clock.advance(9_000);
    expect(a.admit(s, 0)).toBeDefined();
    clock.advance(1_001);
    expect(burst(a, s, 2)).toBe(1);
    // An idle minute fills the bucket, never past the limit.
    clock.advance(10 * 60_000);
    expect(burst(a, s, 10)).toBe(6);
  });

  test("tokens per minute: the prompt estimate on admission, streamed and settled tokens after, debt repaid by refill", () => {
    const { clock, a, of } = setup([key("k", { limits: { tpm: 600 } })]);
    const s = of("k");
    expect(a.admit(s, 400)).toBeUndefined();
    expect(a.use()[0]!.tokensLeft).toBe(200);
    // The engine said 100 prompt tokens and 50 of completion: 250 given back.
    a.tokens(s, 100 - 400 + 50);
    expect(a.use()[0]!.tokensLeft).toBe(450);
    expect(a.admit(s, 500)!.limit).toBe("tokens");
    // Streamed past the allowance: a debt, nothing admitted until refill pays it.
    a.tokens(s, 1000);
    expect(a.admit(s, 1)!.retryAfterMs).toBe(56_000);
    clock.advance(55_000);
    expect(a.admit(s, 1)).toBeDefined();
    clock.advance(1_000);
    expect(a.admit(s, 1)).toBeUndefined();
    // A prompt larger than the whole limit waits for a full bucket rather than forever.
    clock.advance(60_000);
    expect(a.admit(s, 5_000)).toBeUndefined();
  });

  test("a team's limits are shared by its keys, each key also held to its own; the refusal names the team", () => {
    const team = { team: "t", teamLimits: { rpm: 4 } };
    const { a, of } = setup([key("k1", { ...team, limits: { rpm: 3 } }), key("k2", team), key("other", { limits: { rpm: 100 } })]);
    expect(burst(a, of("k1"), 5)).toBe(3);
    // k1's own limit refused the rest: the team counted only what was admitted.
    expect(a.admit(of("k2"), 0)).toBeUndefined();
    const no = a.admit(of("k2"), 0)!;
    expect(no.of.kind).toBe("team");
    expect(no.message).toStartWith("Rate limit reached for team 't' (shared by its keys) on requests per minute (RPM): limit 4");
    expect(burst(a, of("other"), 5)).toBe(5);
  });

  test("requests in flight: held until released, per key and per team", () => {
    const team = { team: "t", teamLimits: { maxConcurrent: 3 } };
    const { a, of } = setup([key("k1", { ...team, limits: { maxConcurrent: 2 } }), key("k2", team)]);
    const k1 = of("k1");
    const k2 = of("k2");
    expect(burst(a, k1, 3)).toBe(2);
    const no = a.admit(k1, 0)!;
    expect(no.limit).toBe("concurrent");
    expect(no.message).toBe("Rate limit reached for key 'k1' on 2 requests in flight, the most it may have at once; try again when one of them has ended.");
    expect(burst(a, k2, 2)).toBe(1);
    expect(a.admit(k2, 0)!.of.kind).toBe("team");
    k1.release();
    expect(a.admit(k2, 0)).toBeUndefined();
    for (const s of [k1, k2, k2]) s.release();
    expect(a.use().map((u) => [u.key, u.inflight, u.teamInflight])).toEqual([
      ["k1", 0, 0],
      ["k2", 0, 0],
    ]);
  });

  test("a new publication keeps the counters of keys and teams that stay (a changed limit caps them), drops removed keys, and starts new ones full", () => {
    const { clock, a, of } = setup([key("k", { team: "t", limits: { rpm: 10, maxConcurrent: 5 }, teamLimits: { tpm: 1000 } }), key("gone", { limits: { rpm: 1 } })]);
    const before = of("k");
    expect(burst(a, before, 4, 100)).toBe(4);
    clock.advance(1);
    a.setKeys([key("k", { team: "t", limits: { rpm: 20, maxConcurrent: 5 }, teamLimits: { tpm: 500 } }), key("new", { limits: { rpm: 2 } }), key("free")]);
    const after = of("k");
    expect(after.key).toBe(before.key);
    expect(after.team).toBe(before.team!);
    const u = a.use();
    expect(u.find((x) => x.key === "k")).toMatchObject({ inflight: 4, teamInflight: 4, requestsLeft: 6, tokensLeft: 500 });
    expect(a.of("sha-gone")).toBeUndefined();
    // A key without limits of its own or of a team has no state at all: its requests skip admission.
    expect(a.of("sha-free")).toBeUndefined();
    expect(burst(a, of("new"), 3)).toBe(2);
    // Requests admitted before the publication release what they took.
    for (let i = 0; i < 4; i++) before.release();
    expect(a.use().find((x) => x.key === "k")!.inflight).toBe(0);
  });

  test("a key moved to another team: its requests in flight release the team they were admitted under", () => {
    const { a, of } = setup([key("k", { team: "a", teamLimits: { maxConcurrent: 1 } }), key("x", { team: "b", teamLimits: { maxConcurrent: 1 } })]);
    const old = of("k");
    expect(a.admit(old, 0)).toBeUndefined();
    a.setKeys([key("k", { team: "b", teamLimits: { maxConcurrent: 1 } }), key("y", { team: "a", teamLimits: { maxConcurrent: 1 } })]);
    expect(a.admit(of("y"), 0)!.of.name).toBe("a");
    old.release();
    expect(a.admit(of("y"), 0)).toBeUndefined();
    expect(a.admit(of("k"), 0)).toBeUndefined();
    expect(a.admit(of("k"), 0)!.of.name).toBe("b");
  });

  test("the admitted path is O(1) and returns no object: 100,000 keys cost each check what one key does", () => {
    const many = Array.from({ length: 100_000 }, (_, i) => key(`k${i}`, { team: `t${i % 100}`, limits: { rpm: 1e9, tpm: 1e12, maxConcurrent: 1e9 }, teamLimits: { rpm: 1e9 } }));
    const { a } = setup(many);
    const s = a.of("sha-k99999")!;
    expect(s).toBe(a.of("sha-k99999")!);
    for (let i = 0; i < 1000; i++) expect(a.admit(s, 10)).toBeUndefined();
    expect(a.use().find((u) => u.key === "k99999")!.inflight).toBe(1000);
  });

  test("OpenAI's header values: the tighter of key and team, durations as OpenAI writes them", () => {
    const { clock, a, of } = setup([key("k", { team: "t", limits: { rpm: 60, tpm: 100_000 }, teamLimits: { rpm: 10 } })]);
    const s = of("k");
    expect(a.admit(s, 1000)).toBeUndefined();
    clock.advance(0);
    expect(a.headers(s)).toBe(
      "x-ratelimit-limit-requests: 10\r\nx-ratelimit-remaining-requests: 9\r\nx-ratelimit-reset-requests: 6s\r\n" +
        "x-ratelimit-limit-tokens: 100000\r\nx-ratelimit-remaining-tokens: 99000\r\nx-ratelimit-reset-tokens: 600ms\r\n",
    );
    expect([0, 17.2, 999, 1000, 1500, 59_999, 60_000, 360_000, 3_723_000].map(duration)).toEqual(["0s", "17ms", "999ms", "1s", "1.5s", "60s", "1m0s", "6m0s", "1h2m3s"]);
    expect(promptEstimate(401)).toBe(101);
  });

  test("the refusal's reply: 429, OpenAI's error shape, Retry-After in seconds, x-should-retry, the x-ratelimit-* headers", () => {
    const { a, of } = setup([key("k", { limits: { rpm: 1 } })]);
    const s = of("k");
    a.admit(s, 0);
    const r = refusalReply(a.admit(s, 0)!, a.headers(s));
    expect(r.status).toBe(429);
    expect(r.headers).toMatchObject({ "retry-after": "60", "x-should-retry": "true", "x-ratelimit-limit-requests": "1", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s" });
    expect(JSON.parse(r.body).error).toMatchObject({ type: "rate_limit_exceeded", code: "rate_limit_exceeded", param: null });
  });
});

describe("limitUse: what each key and team has spent, for keys list and teams list", () => {
  test("a key's own and its team's counts apart; past a token limit the debt shows; keys without limits absent", () => {
    const s = new ManualScheduler(0);
    const a = new Admission(s);
    a.setKeys([
      { name: "k1", sha256: "h1", pool: null, team: "t", limits: { rpm: 10, tpm: 100 }, teamLimits: { rpm: 50 } },
      { name: "k2", sha256: "h2", pool: null, team: "t", teamLimits: { rpm: 50 } },
      { name: "free", sha256: "h3", pool: null },
    ]);
    const k1 = a.of("h1")!;
    const k2 = a.of("h2")!;
    expect(a.admit(k1, 40)).toBeUndefined();
    expect(a.admit(k1, 40)).toBeUndefined();
    expect(a.admit(k2, 10)).toBeUndefined();
    a.tokens(k1, 50); // streamed past the 100 tokens: a debt of 30
    k2.release();
    const use = a.limitUse();
    expect(use).toEqual([
      { of: "key", name: "k1", rpm: 2, tpm: 130, concurrent: 2, askedRequests: 2, askedTokens: 130, usedRequests: 2, usedTokens: 130, rpmLimit: 10, tpmLimit: 100 },
      { of: "key", name: "k2", concurrent: 0, askedRequests: 1, askedTokens: 10, usedRequests: 1, usedTokens: 10 },
      { of: "team", name: "t", rpm: 3, concurrent: 2, askedRequests: 3, askedTokens: 140, usedRequests: 3, usedTokens: 140, rpmLimit: 50 },
    ]);
    // A minute later the requests have refilled; the tokens' refill paid the debt first, so 30 of
    // this minute's 100 are spent; the requests still in flight are still counted.
    s.advance(60_000);
    expect(a.limitUse()[0]).toEqual({ of: "key", name: "k1", rpm: 0, tpm: 30, concurrent: 2, askedRequests: 2, askedTokens: 130, usedRequests: 2, usedTokens: 130, rpmLimit: 10, tpmLimit: 100 });
  });
});
