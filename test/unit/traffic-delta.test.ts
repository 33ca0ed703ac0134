// The router thread's traffic figures cross to the control plane as changes (app/traffic-delta.ts):
// what the control plane reads after each answer is exactly what the router thread counted,
// while an answer in which nothing moved carries names only.

import { describe, expect, test } from "bun:test";
import { TrafficReceived, TrafficSent } from "../../src/app/traffic-delta";
import { type ModelTraffic, TTFT_BUCKETS_MS } from "../../src/protocol/routing";

const zeros = (model: string): ModelTraffic => ({ model, requests: 0, errors: 0, output_tokens: 0, ttft_counts: new Array<number>(TTFT_BUCKETS_MS.length + 1).fill(0), inflight: 0, queued: 0 });

describe("traffic figures as changes", () => {
  test("the first answer carries every model; one where nothing moved carries none; a change carries that model alone", () => {
    const sent = new TrafficSent();
    const got = new TrafficReceived();
    const all = ["a", "b", "c"].map(zeros);
    const first = sent.delta(all);
    expect(first.changed.map((t) => t.model)).toEqual(["a", "b", "c"]);
    expect(got.take(first)).toEqual(all);
    const quiet = sent.delta(all.map((t) => ({ ...t, ttft_counts: [...t.ttft_counts] })));
    expect(quiet).toEqual({ models: ["a", "b", "c"], changed: [] });
    expect(got.take(quiet)).toEqual(all);
    const busier = all.map((t) => (t.model === "b" ? { ...t, requests: 3, output_tokens: 12, ttft_counts: t.ttft_counts.map((n, i) => (i === 2 ? 3 : n)) } : t));
    const one = sent.delta(busier);
    expect(one.changed.map((t) => t.model)).toEqual(["b"]);
    expect(got.take(one)).toEqual(busier);
  });

  test("a model that leaves is dropped, and one that comes back is sent whole again", () => {
    const sent = new TrafficSent();
    const got = new TrafficReceived();
    got.take(sent.delta([zeros("a"), { ...zeros("b"), requests: 5 }]));
    expect(got.take(sent.delta([zeros("a")]))).toEqual([zeros("a")]);
    const back = sent.delta([zeros("a"), { ...zeros("b"), requests: 5 }]);
    expect(back.changed.map((t) => t.model)).toEqual(["b"]);
    expect(got.take(back)).toEqual([zeros("a"), { ...zeros("b"), requests: 5 }]);
  });

  test("over a long run of random figures, what is received is always what was counted", () => {
    let seed = 7;
    const rnd = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    const sent = new TrafficSent();
    const got = new TrafficReceived();
    let figures = new Map<string, ModelTraffic>();
    let total = 0;
    for (let round = 0; round < 300; round++) {
      const next = new Map<string, ModelTraffic>();
      for (let i = 0; i < 12; i++) {
        const name = `m${i}`;
        if (rnd(10) === 0) continue; // left the catalog this round
        const prev = figures.get(name) ?? zeros(name);
        next.set(name, rnd(3) === 0 ? { ...prev, requests: prev.requests + 1 + rnd(4), inflight: rnd(3), ttft_counts: prev.ttft_counts.map((n, j) => (j === rnd(prev.ttft_counts.length) ? n + 1 : n)) } : prev);
      }
      figures = next;
      const all = [...figures.values()].sort((a, b) => (a.model < b.model ? -1 : 1));
      const d = sent.delta(all);
      total += d.changed.length;
      expect(got.take(d)).toEqual(all);
    }
    // Far fewer figures sent than 300 whole answers would have carried.
    expect(total).toBeLessThan(300 * 12 * 0.6);
  });
});
