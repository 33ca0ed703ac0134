// Heartbeats through the controller: one with news waits for the next group, and the heartbeats
// that arrive while a group is being written go together in one transaction; a heartbeat the
// store refuses fails alone; a node's heartbeats end in the store in the order they came (its
// last one wins), and an unchanged one is answered without waiting for the lock.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { StoreImage } from "../../src/control/image";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import type { EndpointInfo } from "../../src/protocol/routing";
import { testControl } from "../helpers/control";
import { T0, heartbeat, model } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const silent = pino({ level: "silent" });

/** A store whose group writes can be held at the door: each call is recorded as it arrives. */
class GatedStore extends Store {
  readonly calls: string[][] = [];
  private gate: Promise<void> | undefined;
  private open: (() => void) | undefined;
  private arrived: (() => void) | undefined;
  hold(): Promise<void> {
    this.gate = new Promise((r) => (this.open = r));
    return new Promise((r) => (this.arrived = r));
  }
  release(): void {
    this.gate = undefined;
    this.open?.();
  }
  override async applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    this.calls.push(hbs.map((h) => h.node));
    const gate = this.gate;
    this.arrived?.();
    this.arrived = undefined;
    if (gate) await gate;
    return super.applyHeartbeats(hbs, now);
  }
}

async function setup(o: { model: boolean }) {
  const inner = new GatedStore({ path: ":memory:", ...SQLITE_DEFAULTS });
  const scheduler = new ManualScheduler(T0);
  const store = o.model ? new StoreImage(inner, scheduler) : inner;
  const ctl = testControl({ store, scheduler, log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  for (const n of ["n1", "n2", "n3", "n4"]) await ctl.intake.heartbeat(heartbeat({ name: n, gpus: [H], models: ["a"] }));
  inner.calls.length = 0;
  return { inner, store, ctl };
}

const weightsOf = async (s: Store, node: string) => (await s.snapshot()).weights.filter((w) => w.node === node).map((w) => w.model);

describe("heartbeats in groups", () => {
  test("the heartbeats that arrive while a group is written go together in the next one", async () => {
    const { inner, ctl } = await setup({ model: false });
    const held = inner.hold();
    const first = ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H], models: ["b"] }));
    await held;
    const rest = ["n2", "n3", "n4"].map((n) => ctl.intake.heartbeat(heartbeat({ name: n, gpus: [H], models: ["b"] })));
    inner.release();
    for (const a of await Promise.all([first, ...rest])) expect(a.heartbeat_interval_ms).toBe(1_000);
    expect(inner.calls).toEqual([["n1"], ["n2", "n3", "n4"]]);
    for (const n of ["n1", "n2", "n3", "n4"]) expect(await weightsOf(inner, n)).toEqual(["b"]);
  });

  test("a group of heartbeats that report replicas ready publishes the endpoint list once, naming them all", async () => {
    const { inner, ctl } = await setup({ model: true });
    const published: EndpointInfo[][] = ctl.router.published;
    await ctl.catalog.putModels([model({ name: "a", replicas: { min: 4, max: 4 }, placement: "spread" })]);
    await ctl.loop.tick();
    const on = (n: string) => ctl.projector.response(n).assignments.map((a) => ({ id: a.id, state: "ready" as const, port: a.port, error: null }));
    expect(["n1", "n2", "n3", "n4"].map((n) => on(n).length)).toEqual([1, 1, 1, 1]);
    published.length = 0;
    // n1's report opens a group; the other three arrive while it is written and go together
    // (each also reports new weights on disk, so that the store is written, and can be held).
    const held = inner.hold();
    const first = ctl.intake.heartbeat({ ...heartbeat({ name: "n1", gpus: [H], models: ["a", "b"] }), replicas: on("n1") });
    await held;
    const rest = ["n2", "n3", "n4"].map((n) => ctl.intake.heartbeat({ ...heartbeat({ name: n, gpus: [H], models: ["a", "b"] }), replicas: on(n) }));
    inner.release();
    await Promise.all([first, ...rest]);
    expect(inner.calls.slice(-2)).toEqual([["n1"], ["n2", "n3", "n4"]]);
    // Once for n1's group, once for the group of three: not once per heartbeat.
    expect(published.map((list) => list.length)).toEqual([1, 4]);
  });

  test("a heartbeat the store refuses fails alone: the group is written again one by one and the others are answered", async () => {
    const { inner, ctl } = await setup({ model: true });
    const held = inner.hold();
    const first = ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H], models: ["b"] }));
    await held;
    const two = heartbeat({ name: "n3", gpus: [H, H] });
    // Two GPUs with one index: the store's key refuses the second row.
    const bad = { ...two, gpus: two.gpus.map((g) => ({ ...g, index: 0 })) };
    const answers = [ctl.intake.heartbeat(heartbeat({ name: "n2", gpus: [H], models: ["c"] })), ctl.intake.heartbeat(bad), ctl.intake.heartbeat(heartbeat({ name: "n4", gpus: [H], models: ["d"] }))];
    inner.release();
    await first;
    const settled = await Promise.allSettled(answers);
    expect(settled.map((s) => s.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect(inner.calls).toEqual([["n1"], ["n2", "n3", "n4"], ["n2"], ["n3"], ["n4"]]);
    expect(await weightsOf(inner, "n2")).toEqual(["c"]);
    expect(await weightsOf(inner, "n4")).toEqual(["d"]);
    // The refused one wrote nothing: n3 is as its last good heartbeat left it.
    expect(await weightsOf(inner, "n3")).toEqual(["a"]);
    expect((await inner.snapshot()).gpus.filter((g) => g.node === "n3")).toHaveLength(1);
    // Its next good heartbeat is taken.
    await ctl.intake.heartbeat(heartbeat({ name: "n3", gpus: [H], models: ["e"] }));
    expect(await weightsOf(inner, "n3")).toEqual(["e"]);
  });

  test("a node's heartbeats end in the store in the order they came: one that repeats what is stored waits behind its news", async () => {
    const { inner, store, ctl } = await setup({ model: true });
    const held = inner.hold();
    const first = ctl.intake.heartbeat(heartbeat({ name: "n2", gpus: [H], models: ["b"] }));
    await held;
    // n1 reports new weights, then (before those are written) the ones stored: the later one wins.
    const news = ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H], models: ["b"] }));
    const back = ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H], models: ["a"] }));
    inner.release();
    await Promise.all([first, news, back]);
    expect(inner.calls).toEqual([["n2"], ["n1", "n1"]]);
    expect(await weightsOf(inner, "n1")).toEqual(["a"]);
    expect((await store.snapshot()).weights.filter((w) => w.node === "n1").map((w) => w.model)).toEqual(["a"]);
  });

  test("an unchanged heartbeat is answered while a group holds the lock, and writes nothing", async () => {
    const { inner, ctl } = await setup({ model: true });
    const held = inner.hold();
    const first = ctl.intake.heartbeat(heartbeat({ name: "n2", gpus: [H], models: ["b"] }));
    await held;
    const same = await ctl.intake.heartbeat(heartbeat({ name: "n1", gpus: [H], models: ["a"] }));
    expect(same.epoch).toBe(0);
    expect(same.heartbeat_interval_ms).toBe(1_000);
    expect(inner.calls).toEqual([["n2"]]);
    inner.release();
    await first;
    expect(await weightsOf(inner, "n2")).toEqual(["b"]);
  });
});

/** A store whose joins are recorded as they arrive, as groups; a join can be held at the door like a group of heartbeats. */
class JoinCountingStore extends GatedStore {
  readonly joinCalls: string[][] = [];
  override async applyJoins(joins: Parameters<Store["applyJoins"]>[0], now: number): ReturnType<Store["applyJoins"]> {
    this.joinCalls.push(joins.map((j) => j.hb.node));
    return super.applyJoins(joins, now);
  }
}

describe("joins in groups", () => {
  test("the joins that arrive together are written in one transaction, each answered with its credential, their events written; a join for a taken name fails alone", async () => {
    const inner = new JoinCountingStore({ path: ":memory:", ...SQLITE_DEFAULTS });
    const scheduler = new ManualScheduler(T0);
    const store = new StoreImage(inner, scheduler);
    const ctl = testControl({ store, scheduler, log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
    const first = ctl.intake.join({ ...heartbeat({ name: "j0", gpus: [H] }), join_credential: "llmgw-node-cred-j0-0123456789abcdef0123" });
    const names = Array.from({ length: 20 }, (_, i) => `j${i + 1}`);
    const rest = names.map((n) => ctl.intake.join({ ...heartbeat({ name: n, gpus: [H, H] }), join_credential: `llmgw-node-cred-${n}-0123456789abcdef0123` }));
    // The same name again with another credential: refused, the others are not.
    const intruder = ctl.intake.join({ ...heartbeat({ name: "j0" }), join_credential: "llmgw-node-cred-other-0123456789abcdef01" });
    const answers = await Promise.allSettled([first, ...rest, intruder]);
    expect(answers.slice(0, 21).map((a) => a.status)).toEqual(Array(21).fill("fulfilled"));
    expect(answers[21]!.status).toBe("rejected");
    expect(String((answers[21] as PromiseRejectedResult).reason.message)).toContain("node j0 has already joined");
    for (const [i, a] of answers.slice(1, 21).entries()) expect((a as PromiseFulfilledResult<{ credential?: string }>).value.credential).toBe(`llmgw-node-cred-${names[i]}-0123456789abcdef0123`);
    // All twenty-one in one group; the intruder (j0 named again, so in the next group) refused by
    // the in-memory image without a write.
    expect(inner.joinCalls).toEqual([["j0", ...names]]);
    const snap = await inner.snapshot();
    expect(snap.nodes).toHaveLength(21);
    expect(snap.gpus).toHaveLength(41);
    for (const n of ["j0", ...names]) expect(await inner.nodeByCredentialHash(new Bun.CryptoHasher("sha256").update(`llmgw-node-cred-${n}-0123456789abcdef0123`).digest("hex"))).toBe(n);
    const events = (await inner.listEvents({ limit: 100 })).filter((e) => e.kind === "node.registered");
    expect(events.map((e) => e.subject).sort()).toEqual(["j0", ...names].map((n) => `node/${n}`).sort());
  });
});
