import { describe, expect, test } from "bun:test";
import pino from "pino";
import { RELOAD_MS, WeightsRequests, donePulls } from "../../src/control/weights-requests";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { WeightsHeld } from "../../src/protocol/weights";
import { MemoryWeightsOrders } from "../helpers/weights-orders";

const REV = "c".repeat(40);
const FILES = ["config.json", "model.safetensors"];
const held = (files: string[]): WeightsHeld => ({ repo: "org/m", revision: REV, files, bytes: 1, fetched: true, last_used: null });
const pull = (node: string, at = 1) => ({ node, repo: "org/m", revision: REV, kind: "pull" as const, at });
const files = (repo: string, revision: string) => (repo === "org/m" && revision === REV ? FILES : undefined);

function make(store = new MemoryWeightsOrders(), scheduler = new ManualScheduler()) {
  let changed = 0;
  const r = new WeightsRequests({ store, scheduler, log: pino({ level: "silent" }), changed: () => void changed++ });
  return { r, store, scheduler, changed: () => changed };
}

describe("donePulls", () => {
  test("done only when every node of the revision's pulls holds all of its files, and only with its manifest known", () => {
    const pulls = [{ node: "n2", repo: "org/m", revision: REV }, { node: "n1", repo: "org/m", revision: REV }];
    const by: Record<string, WeightsHeld[]> = { n1: [held(FILES)], n2: [held(["config.json"])] };
    expect(donePulls(pulls, (n) => by[n], files)).toEqual([]);
    by.n2 = [held(FILES)];
    expect(donePulls(pulls, (n) => by[n], files)).toEqual([{ repo: "org/m", revision: REV, nodes: ["n1", "n2"] }]);
    expect(donePulls(pulls, (n) => by[n], () => undefined)).toEqual([]);
    expect(donePulls(pulls, (n) => (n === "n1" ? by[n] : undefined), files)).toEqual([]);
  });
});

describe("WeightsRequests", () => {
  test("pulls and removals written through to the store: a head node started afresh on it has them again", async () => {
    const a = make();
    await a.r.put([pull("n1"), pull("n2"), { node: "n3", repo: "org/m", revision: REV, kind: "remove", at: 2 }]);
    const b = make(a.store);
    expect(b.r.allSeeds()).toEqual([]);
    await b.r.reload();
    expect(b.r.allSeeds()).toEqual([{ node: "n1", repo: "org/m", revision: REV }, { node: "n2", repo: "org/m", revision: REV }]);
    expect(b.r.seedsOf("n2")).toEqual([{ node: "n2", repo: "org/m", revision: REV }]);
    expect(b.r.removalsOf("n3")).toEqual([{ repo: "org/m", revision: REV }]);
    expect(b.r.seededKeys()).toEqual(new Set([`n1\u0000org/m@${REV}`, `n2\u0000org/m@${REV}`]));
    expect(b.changed()).toBe(1);
  });

  test("another control plane's pull is seen once RELOAD_MS passed, and the plan told", async () => {
    const a = make();
    const b = make(a.store);
    await b.r.reload();
    await a.r.put([pull("n1")]);
    expect(b.r.seedsOf("n1")).toEqual([]);
    b.scheduler.advance(RELOAD_MS);
    b.r.seedsOf("n1");
    await b.r.reload();
    expect(b.r.seedsOf("n1")).toEqual([{ node: "n1", repo: "org/m", revision: REV }]);
    expect(b.changed()).toBe(1);
  });

  test("a pull is cleared, here and in the store, once every node it named holds the whole revision", async () => {
    const { r, store } = make();
    await r.put([pull("n1"), pull("n2")]);
    const by: Record<string, WeightsHeld[]> = { n1: [held(FILES)], n2: [held(["config.json"])] };
    expect(r.clearDone((n) => by[n], files)).toEqual([]);
    expect(store.rows.size).toBe(2);
    by.n2 = [held(FILES)];
    expect(r.clearDone((n) => by[n], files)).toEqual([{ repo: "org/m", revision: REV, nodes: ["n1", "n2"] }]);
    expect(r.allSeeds()).toEqual([]);
    await Bun.sleep(0);
    expect(store.rows.size).toBe(0);
  });

  test("a removal answered is cleared even when another control plane wrote it; a pull after it replaces it; a deleted node's go", async () => {
    const a = make();
    await a.r.put([{ node: "n1", repo: "org/m", revision: REV, kind: "remove", at: 1 }]);
    const b = make(a.store);
    expect(b.r.answered("n1", "org/m", REV)).toBe(false);
    await Bun.sleep(0);
    expect(a.store.rows.size).toBe(0);
    await a.r.put([{ node: "n2", repo: "org/m", revision: REV, kind: "remove", at: 1 }]);
    await a.r.put([pull("n2", 2)]);
    expect(a.r.removalsOf("n2")).toEqual([]);
    expect(a.r.answered("n2", "org/m", REV)).toBe(false);
    await Bun.sleep(0);
    expect([...a.store.rows.values()]).toEqual([pull("n2", 2)]);
    a.r.forget("n2");
    await Bun.sleep(0);
    expect(a.store.rows.size).toBe(0);
  });
});
