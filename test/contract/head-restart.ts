// A head node that starts over a store already holding replicas (a restart, a control plane that
// takes over) answers a node's first heartbeat and first long poll with the node's whole set, at
// once, never with the empty set at its new base generation that an agent would obey by stopping
// every engine. Run against each store (the SQLite one in test/unit, PostgreSQL in
// test/integration): the controller code is the same, the store's answers are what differ.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { StoreImage } from "../../src/control/image";
import type { StorePort } from "../../src/control/store-port";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatRequest, HeartbeatResponse, ReplicaReport } from "../../src/protocol/heartbeat";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model } from "../helpers/fleet";

const H = "H100-80GB";
const silent = pino({ level: "silent" });
const N1 = { name: "n1", fabrics: ["f"], gpus: [H, H] };
const N2 = { name: "n2", fabrics: ["f"], gpus: [H, H] };

/** A store for one case, and what closes it. */
export type OpenStore = () => Promise<{ store: StorePort; close(): Promise<void> }>;

function controller(store: StorePort, at: number): TestControl {
  // As a head node builds it (app/head.ts): the in-memory image over the store, a fresh one per process.
  const scheduler = new ManualScheduler(at);
  return testControl({ store: new StoreImage(store, scheduler), scheduler, log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
}

const ready = (r: HeartbeatResponse): ReplicaReport[] => r.assignments.map((a) => ({ id: a.id, state: "ready", port: a.port, error: null }));
const ids = (r: HeartbeatResponse) => r.assignments.map((a) => a.id).sort();

/**
 * The first life: n1 runs both replicas of a model (ready, as its heartbeat says), n2 runs
 * nothing. Returns n1's last answer and the heartbeat it keeps sending.
 */
async function firstLife(store: StorePort): Promise<{ answer: HeartbeatResponse; hb: HeartbeatRequest }> {
  const ctl = controller(store, T0);
  await ctl.intake.heartbeat(heartbeat(N1));
  await ctl.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
  await ctl.loop.tick();
  const placed = ctl.projector.response("n1");
  expect(placed.assignments).toHaveLength(2);
  const hb = { ...heartbeat(N1), replicas: ready(placed) };
  await ctl.intake.heartbeat(hb);
  await ctl.intake.heartbeat(heartbeat(N2));
  await ctl.loop.tick();
  return { answer: ctl.projector.response("n1"), hb };
}

export function headRestartContract(name: string, open: OpenStore): void {
  describe(`a head node started over a store holding replicas (${name})`, () => {
    const restarted = async (at: number, lead?: { leading: boolean; epoch: number; name: string }) => {
      const { store, close } = await open();
      const before = await firstLife(store);
      const ctl = controller(store, at);
      if (lead) ctl.leadership.set(lead);
      return { ...before, ctl, close };
    };

    test("a first heartbeat before any tick is answered with the node's whole set, under a new generation", async () => {
      const { answer, hb, ctl, close } = await restarted(T0 + 60_000);
      try {
        const first = await ctl.intake.heartbeat(hb);
        expect(ids(first)).toEqual(ids(answer));
        expect(first.generation).not.toBe(answer.generation);
        expect(first.generation_base).not.toBe(answer.generation_base);
        // A node with nothing assigned is told so: nothing to hold back there.
        expect((await ctl.intake.heartbeat(heartbeat(N2))).assignments).toEqual([]);
      } finally {
        await close();
      }
    });

    test("a first long poll before any tick or heartbeat returns at once with the whole set", async () => {
      const { answer, ctl, close } = await restarted(T0 + 60_000);
      try {
        const first = await ctl.intake.waitForAssignments("n1", answer.generation, 25_000);
        expect(ids(first)).toEqual(ids(answer));
      } finally {
        await close();
      }
    });

    test("a control plane that takes the lease before its first tick answers with the whole set under its epoch", async () => {
      const { answer, hb, ctl, close } = await restarted(T0 + 60_000, { leading: true, epoch: 7, name: "cp-a" });
      try {
        const polled = await ctl.intake.waitForAssignments("n1", answer.generation, 25_000);
        expect(ids(polled)).toEqual(ids(answer));
        const beat = await ctl.intake.heartbeat(hb);
        expect(ids(beat)).toEqual(ids(answer));
        expect(beat.epoch).toBe(7);
      } finally {
        await close();
      }
    });

    test("standing by, as before: the whole set, under the leader's epoch", async () => {
      const { answer, hb, ctl, close } = await restarted(T0 + 60_000, { leading: false, epoch: 3, name: "cp-b" });
      try {
        const beat = await ctl.intake.heartbeat(hb);
        expect(ids(beat)).toEqual(ids(answer));
        expect(beat.epoch).toBe(3);
      } finally {
        await close();
      }
    });

    test("a burst of heartbeats and long polls arriving together, before the first tick: every answer holds the whole set", async () => {
      const { answer, hb, ctl, close } = await restarted(T0 + 60_000);
      try {
        const answers = await Promise.all([
          ...Array.from({ length: 5 }, () => ctl.intake.waitForAssignments("n1", answer.generation, 25_000)),
          ...Array.from({ length: 5 }, () => ctl.intake.heartbeat(hb)),
        ]);
        for (const a of answers) expect(ids(a)).toEqual(ids(answer));
        // And the first tick leaves it so.
        await ctl.loop.tick();
        expect(ids(await ctl.intake.heartbeat(hb))).toEqual(ids(answer));
      } finally {
        await close();
      }
    });
  });
}
