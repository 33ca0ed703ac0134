// The tick projects again only the nodes a change touched (projections.ts touchedNodes, over
// the in-memory image's snapshots): every node's assignment set must still be what projecting
// the whole snapshot gives, after placements, catalog changes, multi-node replicas, another
// writer's commits and a node's new hardware.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { StoreImage } from "../../src/control/image";
import * as project from "../../src/control/projections";
import type { Snapshot } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const defs: NodeDef[] = ["n1", "n2", "n3", "n4", "n5", "n6"].map((name) => ({ name, fabrics: ["ib"], gpus: [H, H], models: ["m"] }));
const twoNodes = [{ name: "p", engine: "vllm" as const, gpu_class: H, gpus: 2, nodes: 2 }];

function setup() {
  const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  const m = new StoreImage(store);
  const ctl = testControl({ store: m, scheduler: new ManualScheduler(T0), log: pino({ level: "silent" }), nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  return { store, m, ctl };
}

/** What projecting the whole snapshot gives each node. */
async function full(ctl: TestControl, m: StoreImage) {
  const { byNode } = project.assignments(await ctl.memory.snapshot(), ctl.settings.reconcile, (id) => ctl.projector.engineKey(id), new Map());
  const snap = await m.snapshot();
  return Object.fromEntries(snap.nodes.map((n) => [n.name, byNode.get(n.name) ?? []]));
}
const handed = (ctl: TestControl, nodes: string[]) => Object.fromEntries(nodes.map((n) => [n, ctl.projector.response(n).assignments]));

describe("incremental projections", () => {
  test("every node's set after each change is the full projection's", async () => {
    const { store, m, ctl } = setup();
    for (const d of defs) await ctl.intake.heartbeat(heartbeat(d));
    await ctl.catalog.putModels([model({ name: "a", replicas: { min: 2 } }), model({ name: "big", replicas: { min: 1 }, profiles: twoNodes })]);
    const names = defs.map((d) => d.name);
    const check = async () => {
      await ctl.loop.tick();
      expect(handed(ctl, names)).toEqual(await full(ctl, m));
    };
    await check();
    expect(Object.values(handed(ctl, names)).flat().length).toBe(4);
    // More of the multi-node model: its shards share nodes with the others.
    await ctl.catalog.putModels([model({ name: "big", replicas: { min: 2 }, profiles: twoNodes })]);
    await check();
    // A spec change reaches every node of the model's replicas (the args they are handed).
    await ctl.catalog.putModels([model({ name: "a", replicas: { min: 2 }, profiles: [{ name: "default", engine: "vllm", gpu_class: H, gpus: 1, args: ["--x"] }] })]);
    await check();
    expect(Object.values(handed(ctl, names)).flat().filter((x) => x.model === "a").every((x) => x.args.includes("--x"))).toBe(true);
    // Another writer: a replica's state and a model's spec changed behind this model's back.
    const snap = await store.snapshot();
    const r = snap.replicas.find((x) => x.model === "big")!;
    await store.applyPlan({ create: [], update: [{ id: r.id, patch: { state: "failed", error: "x" } }], remove: [], modelState: new Map(), nodeAdmin: [], events: [] }, T0);
    m.otherWriter();
    await check();
    // New hardware on a node: its GPU uuids are what it is handed.
    await ctl.intake.heartbeat({ ...heartbeat(defs[0]!), gpus: heartbeat(defs[0]!).gpus.map((g) => ({ ...g, uuid: `${g.uuid}-new` })) });
    await check();
    // A leader's new address reaches its peers (their rendezvous address).
    const big = (await m.snapshot()).replicas.find((x) => x.model === "big" && x.state !== "failed" && x.shards.length === 2)!;
    const leader = defs.find((d) => d.name === big.shards[0]!.node)!;
    await ctl.intake.heartbeat({ ...heartbeat(leader), address: "10.7.7.7" });
    await check();
    expect(ctl.projector.response(big.shards[1]!.node).assignments.find((x) => x.id === big.id)?.shard.leader_address).toBe("10.7.7.7");
    // A model gone: its replicas' nodes are handed nothing of it.
    await ctl.catalog.deleteModel("a");
    await check();
  });
});

describe("touchedNodes", () => {
  const base = (): Snapshot => ({
    nodes: Array.from({ length: 20 }, (_, i) => `n${i + 1}`).map((name) => ({ name, address: `10.0.0.${name.slice(1)}`, labels: {}, fabrics: [], adminState: "none", lastHeartbeat: T0, agentVersion: "1", registeredAt: T0 })),
    gpus: ["n1", "n2", "n3"].map((node) => ({ node, index: 0, uuid: `u-${node}`, name: H, class: H, memoryMib: 1, healthy: true, parent: null })),
    weights: [],
    models: [{ name: "a", spec: model({ name: "a" }), revision: 1, createdAt: T0, updatedAt: T0 }],
    replicas: [
      { id: "r1", model: "a", profile: "default", state: "ready", shards: [{ node: "n1", gpus: [0] }], port: 1, endpoint: "e", failures: 0, error: null, createdAt: T0, updatedAt: T0, readyAt: T0 },
      { id: "r2", model: "a", profile: "default", state: "ready", shards: [{ node: "n2", gpus: [0] }, { node: "n3", gpus: [0] }], port: 2, endpoint: "e", failures: 0, error: null, createdAt: T0, updatedAt: T0, readyAt: T0 },
    ],
    modelState: [],
    version: 1,
  });

  test("the same rows touch nothing; a replica, a model, a node's address or GPUs touch their nodes", () => {
    const s = base();
    expect(project.touchedNodes(s, { ...s, version: 2 })).toEqual(new Set());
    // Last-seen times are no change of the assignments.
    expect(project.touchedNodes(s, { ...s, nodes: s.nodes.map((n) => ({ ...n, lastHeartbeat: T0 + 1 })), version: 2 })).toEqual(new Set());
    expect(project.touchedNodes(s, { ...s, replicas: [s.replicas[0]!, { ...s.replicas[1]!, state: "draining" }] })).toEqual(new Set(["n2", "n3"]));
    expect(project.touchedNodes(s, { ...s, replicas: [s.replicas[1]!] })).toEqual(new Set(["n1"]));
    expect(project.touchedNodes(s, { ...s, models: [{ ...s.models[0]! }] })).toEqual(new Set(["n1", "n2", "n3"]));
    expect(project.touchedNodes(s, { ...s, nodes: s.nodes.filter((n) => n.name !== "n3") })).toEqual(new Set(["n2", "n3"]));
    // A node's address is its replicas' leader address on every node of theirs.
    expect(project.touchedNodes(s, { ...s, nodes: s.nodes.map((n) => (n.name === "n2" ? { ...n, address: "10.9.9.9" } : n)) })).toEqual(new Set(["n2", "n3"]));
    expect(project.touchedNodes(s, { ...s, nodes: s.nodes.map((n) => (n.name === "n9" ? { ...n, address: "10.9.9.9" } : n)) })).toEqual(new Set(["n9"]));
    expect(project.touchedNodes(s, { ...s, gpus: s.gpus.map((g) => (g.node === "n3" ? { ...g, uuid: "new" } : g)) })).toEqual(new Set(["n3"]));
    // Most of the fleet touched (a full reload: every row a new object): everything.
    expect(project.touchedNodes(s, { ...s, nodes: s.nodes.map((n) => ({ ...n, address: "x" })) })).toBeUndefined();
    // A plain store's snapshots (no version): everything.
    expect(project.touchedNodes({ ...s, version: undefined }, s)).toBeUndefined();
  });
});
