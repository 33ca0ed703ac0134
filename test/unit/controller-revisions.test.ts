// Which Hugging Face revision the head node hands every shard of a replica: the catalog's pin,
// else the newest one all of the replica's nodes report (in the leader's order), never each
// node's own newest; and it stays what it was for a replica already handed out.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { ManualScheduler } from "../../src/lib/scheduler";
import { commonRevision } from "../../src/control/revisions";
import { Assignment, type HeartbeatRequest, type ReplicaReport } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const [A, B, C, D] = ["a", "b", "c", "d"].map((c) => c.repeat(40)) as [string, string, string, string];
const H = "H100-80GB";
const silent = pino({ level: "silent" });
const defs: NodeDef[] = [
  { name: "x1", fabrics: ["ib"], gpus: [H, H], models: ["org/m", "plain"] },
  { name: "x2", fabrics: ["ib"], gpus: [H, H], models: ["org/m", "plain"] },
];

const reports = (r: Record<string, Record<string, string[]>>) => new Map(Object.entries(r).map(([n, m]) => [n, new Map(Object.entries(m))]));

describe("commonRevision", () => {
  test("the newest revision on every node, in the leader's order, not any node's own newest", () => {
    const r = reports({ x1: { "org/m": [A, C, B] }, x2: { "org/m": [D, B, C] } });
    expect(commonRevision("org/m", ["x1", "x2"], r)).toEqual({ revision: C, settled: true });
    expect(commonRevision("org/m", ["x2", "x1"], r)).toEqual({ revision: B, settled: true });
    expect(commonRevision("org/m", ["x2"], r)).toEqual({ revision: D, settled: true });
  });

  test("none in common: the leader's newest, so the nodes without it fail saying so rather than load another", () => {
    const r = reports({ x1: { "org/m": [A] }, x2: { "org/m": [B] }, x3: {} });
    expect(commonRevision("org/m", ["x1", "x2"], r)).toEqual({ revision: A, settled: true });
    // A node with the model only as a plain folder reports no revisions of it.
    expect(commonRevision("org/m", ["x3", "x1"], r)).toEqual({ revision: A, settled: true });
  });

  test("not in the hub layout anywhere: null; a node not heard from is left out and the answer is not final", () => {
    const r = reports({ x1: { "org/m": [A, B] }, x2: { other: [C] } });
    expect(commonRevision("plain", ["x1", "x2"], r)).toEqual({ revision: null, settled: true });
    expect(commonRevision("org/m", ["x1", "x9"], r)).toEqual({ revision: A, settled: false });
    expect(commonRevision("org/m", ["x9"], r)).toEqual({ revision: null, settled: false });
  });
});

function setup() {
  const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  const ctl = testControl({ store, scheduler: new ManualScheduler(T0), log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  return ctl;
}

function hb(name: string, revisions: Record<string, string[]>, replicas: ReplicaReport[] = []): HeartbeatRequest {
  return { ...heartbeat(defs.find((d) => d.name === name)!), model_revisions: revisions, replicas };
}

const twoNodes = { replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm" as const, gpu_class: H, gpus: 2, nodes: 2 }] };

function assignments(ctl: TestControl): Assignment[] {
  return defs.flatMap((d) => ctl.projector.response(d.name).assignments.map((a) => Assignment.parse(a)));
}

describe("assignments from the controller", () => {
  test("both shards of a two-node replica get the revision both nodes have, though their newest differ", async () => {
    const ctl = setup();
    await ctl.intake.heartbeat(hb("x1", { "org/m": [A, B] }));
    await ctl.intake.heartbeat(hb("x2", { "org/m": [D, B] }));
    await ctl.catalog.putModels([model({ name: "org/m", ...twoNodes })]);
    await ctl.loop.tick();
    const got = await assignments(ctl);
    expect(got).toHaveLength(2);
    expect(got.map((a) => a.revision)).toEqual([B, B]);
  });

  test("a catalog revision pins every shard, even one no node has yet; a model in no hub layout gets null", async () => {
    const ctl = setup();
    await ctl.intake.heartbeat(hb("x1", { "org/m": [A, B] }));
    await ctl.intake.heartbeat(hb("x2", { "org/m": [D, B] }));
    await ctl.catalog.putModels([model({ name: "org/m", revision: C, ...twoNodes })]);
    await ctl.loop.tick();
    expect((await assignments(ctl)).map((a) => a.revision)).toEqual([C, C]);

    const plain = setup();
    await plain.intake.heartbeat(hb("x1", {}));
    await plain.intake.heartbeat(hb("x2", {}));
    await plain.catalog.putModels([model({ name: "plain", ...twoNodes })]);
    await plain.loop.tick();
    expect((await assignments(plain)).map((a) => a.revision)).toEqual([null, null]);
  });

  test("a replica keeps the revision it was handed when the nodes later download a newer one", async () => {
    const ctl = setup();
    await ctl.intake.heartbeat(hb("x1", { "org/m": [A, B] }));
    await ctl.intake.heartbeat(hb("x2", { "org/m": [D, B] }));
    await ctl.catalog.putModels([model({ name: "org/m", ...twoNodes })]);
    await ctl.loop.tick();
    const [first] = await assignments(ctl);
    const ready: ReplicaReport[] = [{ id: first!.id, state: "ready", port: first!.port, error: null }];
    await ctl.intake.heartbeat(hb("x1", { "org/m": [A, B] }, ready));
    await ctl.intake.heartbeat(hb("x2", { "org/m": [A, D, B] }, ready));
    await ctl.loop.tick();
    expect((await assignments(ctl)).map((a) => [a.id, a.revision])).toEqual([
      [first!.id, B],
      [first!.id, B],
    ]);
  });
});
