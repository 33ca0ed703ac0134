// The order in which requests waiting for a saturated model get the slots that free up
// (src/router/fair-queue.ts): interactive before batch, fair across teams however many requests
// one of them sends, fair across the keys of a team; bounded, timed, and a leaving client gone at once.

import { describe, expect, test } from "bun:test";
import { FairQueue } from "../../src/router/fair-queue";
import { ManualScheduler } from "../../src/lib/scheduler";

interface Req {
  team: string;
  key: string;
  n: number;
}

function queue(max = 10_000, timeoutMs = 60_000) {
  const scheduler = new ManualScheduler();
  const timedOut: Req[] = [];
  const q = new FairQueue<Req>({ scheduler, max, timeoutMs }, (r) => timedOut.push(r));
  return { q, scheduler, timedOut };
}

function drain(q: FairQueue<Req>, n = Infinity): Req[] {
  const out: Req[] = [];
  while (out.length < n) {
    const r = q.shift();
    if (r === undefined) break;
    out.push(r);
  }
  return out;
}

describe("FairQueue", () => {
  test("interactive waiters are served before batch ones, whenever they arrived", () => {
    const { q } = queue();
    for (let i = 0; i < 5; i++) q.push({ team: "b", key: "kb", n: i }, "batch", "b", "kb");
    q.push({ team: "i", key: "ki", n: 0 }, "interactive", "i", "ki");
    expect(q.shift()!.team).toBe("i");
    q.push({ team: "i", key: "ki", n: 1 }, "interactive", "i", "ki");
    expect(q.shift()!.team).toBe("i");
    expect(drain(q).map((r) => r.team)).toEqual(["b", "b", "b", "b", "b"]);
  });

  test("a team flooding with 100 times the requests does not get 100 times the slots: the light team is served in the first slots", () => {
    const { q } = queue();
    for (let i = 0; i < 1000; i++) q.push({ team: "A", key: "ka", n: i }, "interactive", "A", "ka");
    // The flood has been served for a while before the light team shows up.
    expect(drain(q, 50).every((r) => r.team === "A")).toBe(true);
    for (let i = 0; i < 10; i++) q.push({ team: "B", key: "kb", n: i }, "interactive", "B", "kb");
    const next = drain(q, 20);
    // Alternating: B's ten are among the next twenty slots, not after A's 950 still waiting.
    expect(next.filter((r) => r.team === "B").length).toBe(10);
    expect(next.filter((r) => r.team === "A").length).toBe(10);
    expect(next[0]!.team === "B" || next[1]!.team === "B").toBe(true);
    expect(q.size).toBe(950 - 10);
  });

  test("an idle team banks no credit: back after a pause, it shares, it does not take a run of slots", () => {
    const { q } = queue();
    for (let i = 0; i < 100; i++) q.push({ team: "A", key: "ka", n: i }, "interactive", "A", "ka");
    q.push({ team: "B", key: "kb", n: 0 }, "interactive", "B", "kb");
    drain(q, 40);
    for (let i = 0; i < 10; i++) q.push({ team: "B", key: "kb", n: i + 1 }, "interactive", "B", "kb");
    const teams = drain(q, 10).map((r) => r.team);
    expect(teams.filter((t) => t === "B").length).toBe(5);
  });

  test("weights: a team of weight 2 gets twice the slots of one of weight 1 while both wait", () => {
    const { q } = queue();
    for (let i = 0; i < 300; i++) {
      q.push({ team: "A", key: "ka", n: i }, "interactive", "A", "ka", 1);
      q.push({ team: "H", key: "kh", n: i }, "interactive", "H", "kh", 2);
    }
    const got = drain(q, 300);
    expect(got.filter((r) => r.team === "H").length).toBe(200);
  });

  test("keys within a team share the team's slots fairly; the team's share does not grow with its keys", () => {
    const { q } = queue();
    for (let i = 0; i < 100; i++) q.push({ team: "A", key: "a1", n: i }, "interactive", "A", "a1");
    for (let i = 0; i < 10; i++) q.push({ team: "A", key: "a2", n: i }, "interactive", "A", "a2");
    for (let i = 0; i < 10; i++) q.push({ team: "A", key: "a3", n: i }, "interactive", "A", "a3");
    for (let i = 0; i < 100; i++) q.push({ team: "B", key: "b1", n: i }, "interactive", "B", "b1");
    const got = drain(q, 60);
    const of = (k: string) => got.filter((r) => r.key === k).length;
    expect(of("b1")).toBe(30);
    expect(of("a1")).toBe(10);
    expect(of("a2")).toBe(10);
    expect(of("a3")).toBe(10);
  });

  test("bounded: a push past max is refused", () => {
    const { q } = queue(3);
    for (let i = 0; i < 3; i++) expect(q.push({ team: "A", key: "k", n: i }, "interactive", "A", "k")).toBeDefined();
    expect(q.push({ team: "A", key: "k", n: 3 }, "interactive", "A", "k")).toBeUndefined();
    q.shift();
    expect(q.push({ team: "A", key: "k", n: 4 }, "interactive", "A", "k")).toBeDefined();
  });

  test("a waiter not served in time is taken out and handed to onTimeout; one served is not", () => {
    const { q, scheduler, timedOut } = queue(100, 1000);
    q.push({ team: "A", key: "k", n: 0 }, "interactive", "A", "k");
    scheduler.advance(500);
    q.push({ team: "A", key: "k", n: 1 }, "interactive", "A", "k");
    expect(q.shift()!.n).toBe(0);
    scheduler.advance(600);
    expect(timedOut).toEqual([]);
    scheduler.advance(400);
    expect(timedOut.map((r) => r.n)).toEqual([1]);
    expect(q.size).toBe(0);
    expect(q.shift()).toBeUndefined();
    expect(scheduler.pending).toBe(0);
  });

  test("a leaving client is removed at once, from the middle of its key's line, and its timer with it", () => {
    const { q, scheduler, timedOut } = queue(100, 1000);
    const ws = [0, 1, 2].map((n) => q.push({ team: "A", key: "k", n }, "interactive", "A", "k")!);
    const other = q.push({ team: "B", key: "kb", n: 9 }, "batch", "B", "kb")!;
    expect(q.remove(ws[1]!)).toBe(true);
    expect(q.remove(ws[1]!)).toBe(false);
    expect(q.remove(other)).toBe(true);
    expect(q.size).toBe(2);
    expect(drain(q).map((r) => r.n)).toEqual([0, 2]);
    scheduler.advance(2000);
    expect(timedOut).toEqual([]);
    // Removing every waiter of a team forgets it: the queue is empty and serves new arrivals.
    q.push({ team: "C", key: "kc", n: 5 }, "batch", "C", "kc");
    expect(q.peek()!.item.n).toBe(5);
  });
});
