// Lists cross between the control plane's thread and the router's as changes (app/list-delta.ts):
// what the receiver reads after each message is exactly the list the sender had, while a message
// in which nothing moved carries keys only. The traffic figures (keyed by model) and the endpoint
// list (keyed by id, a duplicate id keeping its first entry, as the balancer does).

import { describe, expect, test } from "bun:test";
import { ListReceived, ListSent } from "../../src/app/list-delta";
import { type EndpointInfo, type ModelTraffic, TTFT_BUCKETS_MS } from "../../src/protocol/routing";

const byModel = (t: ModelTraffic) => t.model;

const zeros = (model: string): ModelTraffic => ({ model, requests: 0, errors: 0, output_tokens: 0, ttft_counts: new Array<number>(TTFT_BUCKETS_MS.length + 1).fill(0), inflight: 0, queued: 0 });

describe("lists as changes", () => {
  test("the first answer carries every model; one where nothing moved carries none; a change carries that model alone", () => {
    const sent = new ListSent(byModel);
    const got = new ListReceived(byModel);
    const all = ["a", "b", "c"].map(zeros);
    const first = sent.delta(all);
    expect(first.changed.map((t) => t.model)).toEqual(["a", "b", "c"]);
    expect(got.take(first)).toEqual(all);
    const quiet = sent.delta(all.map((t) => ({ ...t, ttft_counts: [...t.ttft_counts] })));
    expect(quiet).toEqual({ keys: ["a", "b", "c"], changed: [] });
    expect(got.take(quiet)).toEqual(all);
    const busier = all.map((t) => (t.model === "b" ? { ...t, requests: 3, output_tokens: 12, ttft_counts: t.ttft_counts.map((n, i) => (i === 2 ? 3 : n)) } : t));
    const one = sent.delta(busier);
    expect(one.changed.map((t) => t.model)).toEqual(["b"]);
    expect(got.take(one)).toEqual(busier);
  });

  test("a model that leaves is dropped, and one that comes back is sent whole again", () => {
    const sent = new ListSent(byModel);
    const got = new ListReceived(byModel);
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
    const sent = new ListSent(byModel);
    const got = new ListReceived(byModel);
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

  test("endpoints by id: a duplicate id keeps its first entry; after reset() the next message carries everything", () => {
    const ep = (id: string, url: string): EndpointInfo => ({ id, url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0 });
    const sent = new ListSent<EndpointInfo>((e) => e.id);
    const got = new ListReceived<EndpointInfo>((e) => e.id);
    const d = sent.delta([ep("r1", "http://a"), ep("r2", "http://b"), ep("r1", "http://c")]);
    expect(d.keys).toEqual(["r1", "r2"]);
    expect(got.take(d)).toEqual([ep("r1", "http://a"), ep("r2", "http://b")]);
    expect(got.missing).toBe(0);
    expect(sent.delta([ep("r2", "http://b"), ep("r1", "http://a")]).changed).toEqual([]);
    // A new receiver: it has nothing, and is sent everything.
    sent.reset();
    const fresh = new ListReceived<EndpointInfo>((e) => e.id);
    const again = sent.delta([ep("r2", "http://b"), ep("r1", "http://a")]);
    expect(again.changed).toHaveLength(2);
    expect(fresh.take(again)).toEqual([ep("r2", "http://b"), ep("r1", "http://a")]);
  });

  test("a receiver out of step leaves out what it never received, and counts it", () => {
    const got = new ListReceived(byModel);
    expect(got.take({ keys: ["a", "b"], changed: [zeros("b")] })).toEqual([zeros("b")]);
    expect(got.missing).toBe(1);
  });
});
