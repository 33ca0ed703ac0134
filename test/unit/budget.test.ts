// Budgets reserved on admission and settled at the request's end (router/budget.ts): tokens and
// GPU-seconds per UTC day, week or month, of a key and of its team; the store's figure and what
// the router counted since, never counted twice; the bound under 200 requests at once.

import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import { periodEnd, periodStart, periodStarts } from "../../src/protocol/budget-periods";
import type { ApiKeyEntry, BudgetSpent } from "../../src/protocol/routing";
import { Budget, DEFAULT_MAX_OUTPUT, Reservation, tokenReservation, withBudgetUse } from "../../src/router/budget";
import { readBody } from "../../src/router/request-body";
import type { Reply } from "../../src/router/errors";

const enc = new TextEncoder();
// Wednesday 2026-01-14 10:30 UTC.
const T0 = Date.UTC(2026, 0, 14, 10, 30);

function key(name: string, over: Partial<ApiKeyEntry> = {}): ApiKeyEntry {
  return { name, sha256: `sha-${name}`, pool: null, ...over };
}

function setup(keys: ApiKeyEntry[]) {
  const clock = new ManualScheduler(T0);
  const b = new Budget(clock);
  b.setKeys(keys);
  b.setSpent({ through: 0, starts: periodStarts(T0), keys: [], teams: [] });
  const reserve = (name: string, tokens: number) => b.reserve(b.of(`sha-${name}`)!, tokens);
  return { clock, b, reserve };
}

function refused(r: Reservation | Reply): Reply {
  expect(r).not.toBeInstanceOf(Reservation);
  return r as Reply;
}

function spent(b: Budget, name: string) {
  return b.use().find((u) => u.name === name)!;
}

describe("periods", () => {
  test("a UTC day, a week from Monday, a calendar month", () => {
    expect(new Date(periodStart(T0, "day")).toISOString()).toBe("2026-01-14T00:00:00.000Z");
    expect(new Date(periodStart(T0, "week")).toISOString()).toBe("2026-01-12T00:00:00.000Z");
    expect(new Date(periodStart(T0, "month")).toISOString()).toBe("2026-01-01T00:00:00.000Z");
    expect(new Date(periodEnd(T0, "week")).toISOString()).toBe("2026-01-19T00:00:00.000Z");
    expect(new Date(periodEnd(Date.UTC(2026, 11, 31, 23), "month")).toISOString()).toBe("2027-01-01T00:00:00.000Z");
    // A Sunday belongs to the week that began the Monday before.
    expect(new Date(periodStart(Date.UTC(2026, 0, 18, 23), "week")).toISOString()).toBe("2026-01-12T00:00:00.000Z");
    expect(periodStarts(T0)).toEqual([periodStart(T0, "day"), periodStart(T0, "week"), periodStart(T0, "month")]);
  });
});

describe("tokenReservation", () => {
  test("the prompt's estimate and the most output the body names, or the default", () => {
    const body = (o: object) => enc.encode(JSON.stringify(o));
    // As dispatch calls it: the body's size and the most output its parse found.
    const reservation = (path: string, b: Uint8Array) => tokenReservation(path, b.byteLength, readBody(b, { maxDepth: 64, maxValues: 100_000 }).facts!.maxOutput);
    const b1 = body({ model: "m", max_tokens: 100, messages: [] });
    expect(reservation("/v1/chat/completions", b1)).toBe(Math.ceil(b1.byteLength / 4) + 100);
    const b2 = body({ model: "m", max_completion_tokens: 7 });
    expect(reservation("/v1/chat/completions", b2)).toBe(Math.ceil(b2.byteLength / 4) + 7);
    const b3 = body({ model: "m", input: "x", max_output_tokens: 50 });
    expect(reservation("/v1/responses", b3)).toBe(Math.ceil(b3.byteLength / 4) + 50);
    const b4 = body({ model: "m", prompt: "x" });
    expect(reservation("/v1/completions", b4)).toBe(Math.ceil(b4.byteLength / 4) + DEFAULT_MAX_OUTPUT);
    // Embeddings generate nothing: their prompt alone.
    expect(reservation("/v1/embeddings", b4)).toBe(Math.ceil(b4.byteLength / 4));
  });
});

describe("Budget", () => {
  test("a token budget: reserved on admission, settled with what was used, refused with insufficient_quota once it cannot hold a request", () => {
    const { b, reserve } = setup([key("svc", { limits: { budgetTokens: 1000, budgetPeriod: "day" } })]);
    const r1 = reserve("svc", 600) as Reservation;
    expect(r1).toBeInstanceOf(Reservation);
    expect(spent(b, "svc").tokens).toEqual({ budget: 1000, spent: 0, reserved: 600 });
    // 600 reserved + 500 > 1000.
    const no = refused(reserve("svc", 500));
    expect(no.status).toBe(429);
    expect(no.headers["x-should-retry"]).toBe("false");
    const err = JSON.parse(no.body).error;
    expect(err.type).toBe("insufficient_quota");
    expect(err.code).toBe("insufficient_quota");
    expect(err.message).toContain("key 'svc'");
    expect(err.message).toContain("1000 tokens per day");
    expect(err.message).toContain("resets at 2026-01-15T00:00:00.000Z");
    // It used 250 of its 600: the rest goes back.
    r1.settle(250, 0);
    expect(spent(b, "svc").tokens).toEqual({ budget: 1000, spent: 250, reserved: 0 });
    const r2 = reserve("svc", 500) as Reservation;
    expect(r2).toBeInstanceOf(Reservation);
    // Released without settling (no engine answered): nothing used.
    r2.release();
    r2.settle(400, 0); // once only
    expect(spent(b, "svc").tokens).toEqual({ budget: 1000, spent: 250, reserved: 0 });
  });

  test("a team's budget is shared by its keys; a key is held to its own and its team's", () => {
    const team = { team: "search", teamLimits: { budgetTokens: 1000 } };
    const { b, reserve } = setup([key("a", team), key("b", { ...team, limits: { budgetTokens: 300 } }), key("free")]);
    expect(b.of("sha-free")).toBeUndefined();
    (reserve("a", 600) as Reservation).settle(600, 0);
    const no = JSON.parse(refused(reserve("a", 500)).body).error.message;
    expect(no).toContain("team 'search' (shared by its keys)");
    expect(no).toContain("per month");
    const nb = JSON.parse(refused(reserve("b", 350)).body).error.message;
    expect(nb).toContain("key 'b'");
    (reserve("b", 300) as Reservation).settle(300, 0);
    // The team has 100 left: b's own budget has room no more either way.
    expect(JSON.parse(refused(reserve("a", 101)).body).error.message).toContain("team 'search'");
    expect(spent(b, "search").tokens!.spent).toBe(900);
    expect(spent(b, "b").tokens!.spent).toBe(300);
  });

  test("200 requests at once on a nearly spent key: the admitted ones reserve no more than is left, so the spend stays within the budget", () => {
    const { b, reserve } = setup([key("svc", { limits: { budgetTokens: 10_000 } })]);
    (reserve("svc", 9_000) as Reservation).settle(9_000, 0);
    const admitted: Reservation[] = [];
    let no = 0;
    for (let i = 0; i < 200; i++) {
      const r = reserve("svc", 60);
      if (r instanceof Reservation) admitted.push(r);
      else no++;
    }
    expect(admitted.length).toBe(16); // 16 × 60 = 960 ≤ 1,000 < 17 × 60
    expect(no).toBe(184);
    for (const r of admitted) r.settle(60, 0);
    expect(spent(b, "svc").tokens!.spent).toBeLessThanOrEqual(10_000);
  });

  test("the store's figure and what this router counted since: a take's counts stay until the figure holds them, never twice", () => {
    const { clock, b, reserve } = setup([key("svc", { team: "t", limits: { budgetTokens: 10_000, budgetPeriod: "week" }, teamLimits: { budgetTokens: 50_000 } })]);
    const figure = (through: number, tokens: number, team = tokens): BudgetSpent => {
      const starts = periodStarts(clock.now());
      return { through, starts, keys: [{ name: "svc", tokens: [0, tokens, 0], gpu_seconds: [0, 0, 0] }], teams: [{ name: "t", tokens: [0, 0, team], gpu_seconds: [0, 0, 0] }] };
    };
    // Another router's 2,000 of this week, already in the store.
    b.setSpent(figure(0, 2_000, 2_000));
    expect(spent(b, "svc").tokens!.spent).toBe(2_000);
    (reserve("svc", 100) as Reservation).settle(100, 0);
    expect(spent(b, "svc").tokens!.spent).toBe(2_100);
    // The rows taken (take 1), not yet in the store: still counted here.
    const take1 = b.taken();
    // Numbered from the router's start time: a restarted router thread's takes come after the last one's.
    expect(take1).toBe(T0 + 1);
    b.setSpent(figure(0, 2_000));
    expect(spent(b, "svc").tokens!.spent).toBe(2_100);
    (reserve("svc", 50) as Reservation).settle(50, 0);
    // The store now holds take 1: its 100 counted once, from the store; the 50 since, here.
    b.setSpent(figure(take1, 2_100));
    expect(spent(b, "svc").tokens!.spent).toBe(2_150);
    expect(spent(b, "t").tokens!.spent).toBe(2_150);
    expect(b.taken()).toBe(take1 + 1);
    b.setSpent(figure(take1 + 1, 2_150));
    expect(spent(b, "svc").tokens!.spent).toBe(2_150);
  });

  test("a new period starts whole: the last one's figure and counts go", () => {
    const { clock, b, reserve } = setup([key("svc", { limits: { budgetTokens: 1_000, budgetPeriod: "day" } })]);
    (reserve("svc", 900) as Reservation).settle(900, 0);
    refused(reserve("svc", 200));
    clock.advance(periodEnd(T0, "day") - T0);
    expect(reserve("svc", 200)).toBeInstanceOf(Reservation);
    // A figure for the day that ended does not count in the new one.
    b.setSpent({ through: 0, starts: periodStarts(T0), keys: [{ name: "svc", tokens: [900, 900, 900], gpu_seconds: [0, 0, 0] }], teams: [] });
    expect(spent(b, "svc").tokens!.spent).toBe(0);
  });

  test("a GPU-hour budget: a request reserves its key's mean GPU-seconds (1 before any), and is refused once the spend holds no more", () => {
    const { b, reserve } = setup([key("gpu", { limits: { budgetGpuHours: 10 / 3600 } })]);
    const r1 = reserve("gpu", 10) as Reservation;
    expect(spent(b, "gpu").gpuHours!.reserved).toBeCloseTo(1 / 3600, 12);
    r1.settle(10, 4);
    const r2 = reserve("gpu", 10) as Reservation;
    expect(r2.gpu).toBeCloseTo(4, 9);
    r2.settle(10, 4);
    // 8 spent + a mean of 4 > 10.
    const err = JSON.parse(refused(reserve("gpu", 10)).body).error;
    expect(err.code).toBe("insufficient_quota");
    expect(err.message).toContain("GPU-hours per month");
    expect(spent(b, "gpu").tokens).toBeUndefined();
  });

  test("before the control plane's first figures, a budgeted key's request is asked to come back (503), not admitted against an unknown spend", () => {
    const b = new Budget(new ManualScheduler(T0));
    b.setKeys([key("svc", { limits: { budgetTokens: 1_000 } })]);
    const no = refused(b.reserve(b.of("sha-svc")!, 10));
    expect(no.status).toBe(503);
    expect(no.headers["retry-after"]).toBe("1");
    expect(JSON.parse(no.body).error.code).toBe("budget_unknown");
    b.setSpent({ through: 0, starts: periodStarts(T0), keys: [], teams: [] });
    expect(b.reserve(b.of("sha-svc")!, 10)).toBeInstanceOf(Reservation);
  });

  test("the limits' use carries each budget's spent and reserved, for keys list and teams list", () => {
    const { b, reserve } = setup([key("svc", { team: "t", limits: { budgetTokens: 1_000, rpm: 5 }, teamLimits: { budgetGpuHours: 1 } })]);
    (reserve("svc", 100) as Reservation).settle(40, 1.8);
    reserve("svc", 100);
    const use = withBudgetUse([{ of: "key", name: "svc", rpm: 2, concurrent: 1 }], b.use());
    expect(use).toEqual([
      { of: "key", name: "svc", rpm: 2, concurrent: 1, budget_tokens: 140 },
      { of: "team", name: "t", concurrent: 0, budget_gpu_hours: 0.001 },
    ]);
  });

  test("publications keep the counts of the keys and teams that stay", () => {
    const { b, reserve } = setup([key("svc", { limits: { budgetTokens: 1_000 } })]);
    (reserve("svc", 900) as Reservation).settle(900, 0);
    b.setKeys([key("svc", { limits: { budgetTokens: 2_000 } })]);
    expect(spent(b, "svc").tokens).toEqual({ budget: 2_000, spent: 900, reserved: 0 });
    b.setKeys([key("svc")]);
    expect(b.of("sha-svc")).toBeUndefined();
  });
});
