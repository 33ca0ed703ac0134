// The StorePort contract (src/control/store-port.ts) as tests, for every dialect: each
// dialect's test file calls storeContract() with a factory that opens a fresh, empty store (and
// can open a second instance on the same database, as another control plane would). Both the
// SQLite store and the PostgreSQL store must pass all of it unchanged.
//
// Lease tests wait on the database's clock (a TTL of a few hundred milliseconds): that clock is
// the database's own and cannot be driven by a ManualScheduler.

import { afterEach, beforeEach, describe, expect, test as bunTest } from "bun:test";
import { FencedError } from "../../src/control/errors";
import type { ShareRow } from "../../src/control/limit-shares";
import type { StorePort } from "../../src/control/store-port";
import type { PlanWrite, StoreChange } from "../../src/control/types";
import type { UsageRow } from "../../src/protocol/routing";
import { heartbeat, model } from "../helpers/fleet";
import { usageRow } from "../helpers/usage-row";
import { until } from "../helpers/until";

export interface ContractStore {
  store: StorePort;
  /** A second instance on the same database (another control plane); closed by close(). */
  other(): Promise<StorePort>;
  close(): Promise<void>;
}

const NOW = 1_800_000_000_000;

function plan(p: Partial<PlanWrite>): PlanWrite {
  return { create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [], ...p };
}

const replica = (id: string, m = "m1", node = "n1") => ({ id, model: m, profile: "default", shards: [{ node, gpus: [0] }], port: 20000, endpoint: `http://10.0.0.1:20000` });

/** Every contract test may take this long (lease tests wait on the database's clock, on a busy machine). */
const T = 30_000;
const test = (name: string, fn: () => Promise<void>) => bunTest(name, fn, T);

export function storeContract(dialect: string, open: () => Promise<ContractStore>): void {
  describe(`StorePort contract: ${dialect}`, () => {
    let h: ContractStore;
    let s: StorePort;
    // Generous: a fresh PostgreSQL database per test on a busy machine.
    beforeEach(async () => {
      h = await open();
      s = h.store;
    }, 30_000);
    afterEach(async () => {
      await h.close();
    }, 30_000);

    describe("nodes", () => {
      test("a heartbeat creates a node with its GPUs and weights, then updates it and replaces them", async () => {
        expect(await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB", "H100-80GB"], models: ["a", "b", "a"] }), NOW, { credentialHash: "h1", pending: false })).toEqual({ created: true, taken: false });
        let snap = await s.snapshot();
        expect(snap.nodes).toEqual([{ name: "n1", address: heartbeat({ name: "n1" }).address, labels: {}, fabrics: [], adminState: "none", lastHeartbeat: NOW, agentVersion: "0.1.0", agentProtocol: null, registeredAt: NOW }]);
        expect(snap.gpus.map((g) => [g.node, g.index, g.uuid, g.healthy, g.parent, g.memoryMib])).toEqual([
          ["n1", 0, "GPU-n1-0", true, null, 81559],
          ["n1", 1, "GPU-n1-1", true, null, 81559],
        ]);
        expect(snap.weights).toEqual([{ node: "n1", model: "a" }, { node: "n1", model: "b" }]);
        const hb = { ...heartbeat({ name: "n1", gpus: ["A100/3g"], unhealthy: [0], models: ["c"] }), address: "10.9.9.9", labels: { rack: "r1" }, fabrics: ["ib0"], agent_version: "0.2.0", protocol: 2 };
        expect(await s.applyHeartbeat(hb, NOW + 5)).toEqual({ created: false, taken: false });
        snap = await s.snapshot();
        expect(snap.nodes[0]).toEqual({ name: "n1", address: "10.9.9.9", labels: { rack: "r1" }, fabrics: ["ib0"], adminState: "none", lastHeartbeat: NOW + 5, agentVersion: "0.2.0", agentProtocol: 2, registeredAt: NOW });
        expect(snap.gpus).toEqual([{ node: "n1", index: 0, uuid: "MIG-n1-0", name: "A100/3g", class: "A100/3g", memoryMib: 81559, healthy: false, parent: "GPU-n1-card" }]);
        expect(snap.weights).toEqual([{ node: "n1", model: "c" }]);
        expect(await s.countNodes()).toBe(1);
      });

      test("nodeGpus: the named nodes' GPUs as the snapshot has them, by node and index; none for an unknown node or no names", async () => {
        await s.applyHeartbeats([heartbeat({ name: "n2", gpus: ["L40S"], unhealthy: [0] }), heartbeat({ name: "n1", gpus: ["H100-80GB", "H100-80GB"] }), heartbeat({ name: "n3", gpus: ["L4"] })], NOW);
        const snap = await s.snapshot();
        expect(await s.nodeGpus(["n2", "n1", "nope"])).toEqual(snap.gpus.filter((g) => g.node !== "n3"));
        expect((await s.nodeGpus(["n2"])).map((g) => [g.node, g.index, g.healthy])).toEqual([["n2", 0, false]]);
        expect(await s.nodeGpus([])).toEqual([]);
      });

      test("a group of heartbeats is written in one go, in order: a node named twice ends as its last one says, created once", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"], models: ["a"] }), NOW, { credentialHash: "h1", pending: false });
        const group = [
          heartbeat({ name: "n2", gpus: ["H100-80GB", "H100-80GB"], models: ["x"] }),
          { ...heartbeat({ name: "n1", gpus: ["A100-80GB"], models: ["b", "b"] }), address: "10.9.9.9" },
          heartbeat({ name: "n2", gpus: ["L40S"], models: ["y", "z"] }),
          heartbeat({ name: "n3", models: [] }),
        ];
        expect(await s.applyHeartbeats(group, NOW + 5)).toEqual([{ created: true }, { created: false }, { created: false }, { created: true }]);
        const snap = await s.snapshot();
        expect(snap.nodes.map((n) => [n.name, n.address === "10.9.9.9", n.lastHeartbeat, n.registeredAt, n.adminState])).toEqual([
          ["n1", true, NOW + 5, NOW, "none"],
          ["n2", false, NOW + 5, NOW + 5, "none"],
          ["n3", false, NOW + 5, NOW + 5, "none"],
        ]);
        expect(snap.gpus.map((g) => [g.node, g.index, g.class])).toEqual([
          ["n1", 0, "A100-80GB"],
          ["n2", 0, "L40S"],
        ]);
        expect(snap.weights).toEqual([
          { node: "n1", model: "b" },
          { node: "n2", model: "y" },
          { node: "n2", model: "z" },
        ]);
        // The heartbeats carry no credential: the one stored stays.
        expect(await s.credentialHashOf("n1")).toBe("h1");
        expect(await s.credentialHashOf("n2")).toBeUndefined();
        expect(await s.applyHeartbeats([], NOW)).toEqual([]);
      });

      test("a group is all or none: one heartbeat the store refuses leaves every node of the group as it was", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"], models: ["a"] }), NOW);
        const good = heartbeat({ name: "n1", gpus: ["L40S"], models: ["b"] });
        const dup = heartbeat({ name: "bad", gpus: ["H100-80GB", "H100-80GB"] });
        // Two GPUs with one index: the second row breaks the key.
        const bad = { ...dup, gpus: dup.gpus.map((g) => ({ ...g, index: 0 })) };
        await expect(s.applyHeartbeats([good, bad], NOW + 5)).rejects.toThrow();
        const snap = await s.snapshot();
        expect(snap.nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([["n1", NOW]]);
        expect(snap.gpus.map((g) => g.class)).toEqual(["H100-80GB"]);
        expect(snap.weights).toEqual([{ node: "n1", model: "a" }]);
        expect(await s.applyHeartbeats([good], NOW + 6)).toEqual([{ created: false }]);
        expect((await s.snapshot()).gpus.map((g) => g.class)).toEqual(["L40S"]);
      });

      test("a join for a name whose node holds a credential is taken and writes nothing; a node without one claims it", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), NOW, { credentialHash: "h1", pending: false });
        // Its credential has spoken: from now on the join token cannot speak for it.
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), NOW + 1);
        const intruder = { ...heartbeat({ name: "n1" }), address: "10.6.6.6" };
        expect(await s.applyHeartbeat(intruder, NOW + 2, { credentialHash: "h2", pending: false })).toEqual({ created: false, taken: true });
        const snap = await s.snapshot();
        expect(snap.nodes[0]!.address).not.toBe("10.6.6.6");
        expect(snap.gpus).toHaveLength(1);
        expect(await s.credentialHashOf("n1")).toBe("h1");
        // A node that joined before credentials existed claims one with its next join.
        await s.applyHeartbeat(heartbeat({ name: "old" }), NOW);
        expect(await s.credentialHashOf("old")).toBeUndefined();
        expect(await s.applyHeartbeat(heartbeat({ name: "old" }), NOW + 1, { credentialHash: "h3", pending: false })).toEqual({ created: false, taken: false });
        expect(await s.credentialHashOf("old")).toBe("h3");
        expect(await s.nodeByCredentialHash("h3")).toBe("old");
        expect(await s.nodeByCredentialHash("nope")).toBeUndefined();
        expect(await s.nodeCredentials()).toEqual(expect.arrayContaining([{ node: "n1", hash: "h1" }, { node: "old", hash: "h3" }]));
        expect(await s.nodeCredentials()).toHaveLength(2);
      });

      test("a join sent again with the same credential (its answer was lost) is the same join; with another, taken, even before the credential spoke", async () => {
        await s.applyHeartbeat(heartbeat({ name: "lost" }), NOW, { credentialHash: "first", pending: false });
        expect(await s.applyHeartbeat(heartbeat({ name: "lost", gpus: ["H100-80GB"] }), NOW + 5, { credentialHash: "first", pending: false })).toEqual({ created: false, taken: false });
        expect(await s.credentialHashOf("lost")).toBe("first");
        expect((await s.snapshot()).gpus.filter((g) => g.node === "lost")).toHaveLength(1);
        expect((await s.snapshot()).nodes.find((n) => n.name === "lost")!.registeredAt).toBe(NOW);
        expect(await s.applyHeartbeat(heartbeat({ name: "lost" }), NOW + 10, { credentialHash: "second", pending: false })).toEqual({ created: false, taken: true });
        expect(await s.credentialHashOf("lost")).toBe("first");
        expect(await s.nodeByCredentialHash("second")).toBeUndefined();
        await s.applyHeartbeat(heartbeat({ name: "lost" }), NOW + 15);
        expect(await s.applyHeartbeat(heartbeat({ name: "lost" }), NOW + 20, { credentialHash: "first", pending: false })).toEqual({ created: false, taken: false });
      });

      test("applyJoins writes a group of joins in order, each as applyHeartbeat would: new, pending, the same join again, taken", async () => {
        await s.applyHeartbeat(heartbeat({ name: "old" }), NOW, { credentialHash: "h-old", pending: false });
        const out = await s.applyJoins(
          [
            { hb: heartbeat({ name: "b", gpus: ["H100-80GB", "H100-80GB"], models: ["x"] }), join: { credentialHash: "hb", pending: false } },
            { hb: heartbeat({ name: "a", gpus: ["A100/3g"] }), join: { credentialHash: "ha", pending: true } },
            { hb: heartbeat({ name: "old", gpus: ["H100-80GB"] }), join: { credentialHash: "h-old", pending: true } },
            { hb: heartbeat({ name: "old", models: ["y"] }), join: { credentialHash: "h-intruder", pending: false } },
          ],
          NOW + 10,
        );
        expect(out).toEqual([
          { created: true, taken: false },
          { created: true, taken: false },
          { created: false, taken: false },
          { created: false, taken: true },
        ]);
        const snap = await s.snapshot();
        expect(snap.nodes.map((n) => [n.name, n.adminState, n.registeredAt, n.lastHeartbeat])).toEqual([
          ["a", "pending", NOW + 10, NOW + 10],
          ["b", "none", NOW + 10, NOW + 10],
          // The same join again: not made pending, registered when it first joined.
          ["old", "none", NOW, NOW + 10],
        ]);
        expect(snap.gpus.map((g) => [g.node, g.index])).toEqual([
          ["a", 0],
          ["b", 0],
          ["b", 1],
          ["old", 0],
        ]);
        // The refused join wrote nothing: "old" keeps its weights (none) and its credential.
        expect(snap.weights).toEqual([{ node: "b", model: "x" }]);
        expect(await s.nodeByCredentialHash("ha")).toBe("a");
        expect(await s.nodeByCredentialHash("hb")).toBe("b");
        expect(await s.credentialHashOf("old")).toBe("h-old");
        expect(await s.nodeByCredentialHash("h-intruder")).toBeUndefined();
        expect(await s.applyJoins([], NOW)).toEqual([]);
      });

      test("applyJoins with a node named twice writes them one after the other: the second with another credential is taken", async () => {
        const out = await s.applyJoins(
          [
            { hb: heartbeat({ name: "d" }), join: { credentialHash: "d1", pending: false } },
            { hb: heartbeat({ name: "d", gpus: ["H100-80GB"] }), join: { credentialHash: "d2", pending: false } },
            { hb: heartbeat({ name: "d", gpus: ["H100-80GB", "H100-80GB"] }), join: { credentialHash: "d1", pending: false } },
          ],
          NOW,
        );
        expect(out).toEqual([
          { created: true, taken: false },
          { created: false, taken: true },
          { created: false, taken: false },
        ]);
        expect(await s.credentialHashOf("d")).toBe("d1");
        expect((await s.snapshot()).gpus).toHaveLength(2);
      });

      test("a pending join waits for approval; trust says what the agent API checks", async () => {
        await s.applyHeartbeat(heartbeat({ name: "p1" }), NOW, { credentialHash: "hp", pending: true });
        expect(await s.nodeTrust("p1")).toEqual({ exists: true, hasCredential: true, adminState: "pending", allowedAddress: undefined });
        expect(await s.nodeTrust("ghost")).toEqual({ exists: false, hasCredential: false, adminState: undefined, allowedAddress: undefined });
        await s.setAllowedAddress("ghost", "10.1.1.1", NOW);
        expect(await s.nodeTrust("ghost")).toEqual({ exists: false, hasCredential: false, adminState: undefined, allowedAddress: "10.1.1.1" });
      });

      test("touchNodes sets last heartbeats in one go and ignores unknown names", async () => {
        await s.touchNodes([]);
        for (const n of ["a", "b", "c"]) await s.applyHeartbeat(heartbeat({ name: n }), NOW);
        await s.touchNodes([
          { name: "a", at: NOW + 10 },
          { name: "c", at: NOW + 30 },
          { name: "zz", at: NOW + 99 },
        ]);
        expect((await s.snapshot()).nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([
          ["a", NOW + 10],
          ["b", NOW],
          ["c", NOW + 30],
        ]);
        expect(await s.countNodes()).toBe(3);
      });

      test("deleteNode forgets the node, its GPUs, weights, address allowance and the given replicas, and writes the events", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"], models: ["x"] }), NOW, { credentialHash: "h1", pending: false });
        await s.applyHeartbeat(heartbeat({ name: "n2", gpus: ["H100-80GB"] }), NOW);
        await s.setAllowedAddress("n1", "10.2.2.2", NOW);
        await s.saveModels([{ spec: model({ name: "m1" }), revision: 1, created: true }], NOW);
        await s.applyPlan(plan({ create: [replica("r1"), replica("r2", "m1", "n2")] }), NOW);
        expect(await s.deleteNode("n1", ["r1"], [{ kind: "node.deleted", subject: "n1", message: "deleted" }], NOW + 1)).toBe(true);
        const snap = await s.snapshot();
        expect(snap.nodes.map((n) => n.name)).toEqual(["n2"]);
        expect(snap.gpus.map((g) => g.node)).toEqual(["n2"]);
        expect(snap.weights).toEqual([]);
        expect(snap.replicas.map((r) => r.id)).toEqual(["r2"]);
        expect(await s.listAllowedAddresses()).toEqual([]);
        expect(await s.nodeByCredentialHash("h1")).toBeUndefined();
        expect((await s.listEvents({ limit: 10 })).map((e) => [e.kind, e.subject, e.at])).toEqual([["node.deleted", "n1", NOW + 1]]);
        expect(await s.deleteNode("n1", [], [{ kind: "k", subject: "s", message: "m" }], NOW)).toBe(false);
        expect(await s.listEvents({ limit: 10 })).toHaveLength(1);
      });

      test("allowed addresses: set, replace, clear, listed by name", async () => {
        expect(await s.setAllowedAddress("b", "10.0.0.2", NOW)).toEqual({ previous: undefined });
        expect(await s.setAllowedAddress("a", "10.0.0.1", NOW)).toEqual({ previous: undefined });
        expect(await s.setAllowedAddress("b", "10.0.0.3", NOW)).toEqual({ previous: "10.0.0.2" });
        expect(await s.listAllowedAddresses()).toEqual([
          { node: "a", address: "10.0.0.1" },
          { node: "b", address: "10.0.0.3" },
        ]);
        expect(await s.setAllowedAddress("b", null, NOW)).toEqual({ previous: "10.0.0.3" });
        expect(await s.setAllowedAddress("b", null, NOW)).toEqual({ previous: undefined });
        expect(await s.listAllowedAddresses()).toEqual([{ node: "a", address: "10.0.0.1" }]);
      });

      test("admin state: the previous one, and nothing for an unknown node", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1" }), NOW);
        expect(await s.setAdminState("n1", "cordoned")).toEqual({ previous: "none" });
        expect(await s.setAdminState("n1", "draining")).toEqual({ previous: "cordoned" });
        expect(await s.setAdminState("ghost", "cordoned")).toEqual({ previous: undefined });
        expect((await s.snapshot()).nodes.map((n) => [n.name, n.adminState])).toEqual([["n1", "draining"]]);
        expect(await s.countNodes()).toBe(1);
      });
    });

    describe("catalog", () => {
      test("models and aliases: written, found by name or alias, listed by name; an update replaces spec, revision and aliases", async () => {
        const b = model({ name: "b", aliases: ["bee", "bb"] });
        await s.saveModels([{ spec: b, revision: 1, created: true }, { spec: model({ name: "a" }), revision: 1, created: true }], NOW);
        expect((await s.models()).map((m) => m.name)).toEqual(["a", "b"]);
        expect(await s.modelByName("b")).toEqual({ name: "b", spec: b, revision: 1, createdAt: NOW, updatedAt: NOW });
        expect((await s.modelByAlias("bee"))?.name).toBe("b");
        expect(await s.modelByAlias("b")).toBeUndefined();
        expect(await s.modelByName("bee")).toBeUndefined();
        const b2 = model({ name: "b", aliases: ["bx"], weight: 3 });
        await s.saveModels([{ spec: b2, revision: 2, created: false }], NOW + 5);
        expect(await s.modelByName("b")).toEqual({ name: "b", spec: b2, revision: 2, createdAt: NOW, updatedAt: NOW + 5 });
        expect(await s.modelByAlias("bee")).toBeUndefined();
        expect((await s.modelByAlias("bx"))?.name).toBe("b");
      });

      test("saveModels is all or nothing: an alias owned twice writes none of them", async () => {
        await s.saveModels([{ spec: model({ name: "a", aliases: ["x"] }), revision: 1, created: true }], NOW);
        await expect(s.saveModels([{ spec: model({ name: "c" }), revision: 1, created: true }, { spec: model({ name: "d", aliases: ["x"] }), revision: 1, created: true }], NOW)).rejects.toThrow();
        expect((await s.models()).map((m) => m.name)).toEqual(["a"]);
        expect((await s.snapshot()).modelState.map((m) => m.model)).toEqual(["a"]);
      });

      test("model state: defaults on first write, patches, parking and unparking; saveModels clears failures and parking", async () => {
        await s.saveModels([{ spec: model({ name: "m1" }), revision: 1, created: true }], NOW);
        expect((await s.snapshot()).modelState).toEqual([{ model: "m1", failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: null, scaleTarget: null, unplaceableReason: null }]);
        await s.updateModelState("m1", { failures: 3, crashes: 4, parked: true, reason: "crashed", lastFailureAt: NOW });
        await s.updateModelState("m2", { lastRequestedAt: NOW, scaleTarget: 2 });
        expect(await s.parkedModels()).toEqual(["m1"]);
        const st = (await s.replicaSnapshot()).modelState.sort((x, y) => (x.model < y.model ? -1 : 1));
        expect(st).toEqual([
          { model: "m1", failures: 3, crashes: 4, parked: true, reason: "crashed", lastFailureAt: NOW, lastRequestedAt: null, scaleTarget: null, unplaceableReason: null },
          { model: "m2", failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: NOW, scaleTarget: 2, unplaceableReason: null },
        ]);
        expect(await s.unpark("m2")).toBe(false);
        expect(await s.unpark("m1")).toBe(true);
        expect(await s.unpark("m1")).toBe(false);
        expect((await s.snapshot()).modelState.find((m) => m.model === "m1")).toMatchObject({ failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null });
        await s.updateModelState("m1", { failures: 2, crashes: 5, parked: true, reason: "r", unplaceableReason: "no GPUs" });
        await s.saveModels([{ spec: model({ name: "m1" }), revision: 2, created: false }], NOW);
        expect((await s.snapshot()).modelState.find((m) => m.model === "m1")).toMatchObject({ failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null });
      });

      test("deleteModel forgets the model, its aliases and its state; false when there was none", async () => {
        await s.saveModels([{ spec: model({ name: "m1", aliases: ["one"] }), revision: 1, created: true }], NOW);
        expect(await s.deleteModel("m1")).toBe(true);
        expect(await s.deleteModel("m1")).toBe(false);
        expect(await s.models()).toEqual([]);
        expect(await s.modelByAlias("one")).toBeUndefined();
        expect((await s.snapshot()).modelState).toEqual([]);
        // The alias is free again.
        await s.saveModels([{ spec: model({ name: "m2", aliases: ["one"] }), revision: 1, created: true }], NOW);
        expect((await s.modelByAlias("one"))?.name).toBe("m2");
      });
    });

    describe("plans", () => {
      test("applyPlan creates, updates and removes replicas, patches model state and nodes, writes events", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), NOW);
        await s.applyPlan(plan({ create: [replica("r2"), replica("r1")], events: [{ kind: "replica.created", subject: "r1", message: "created", data: { n: 1 } }] }), NOW);
        let snap = await s.snapshot();
        expect(snap.replicas).toEqual([
          { id: "r1", model: "m1", profile: "default", state: "starting", shards: [{ node: "n1", gpus: [0] }], port: 20000, endpoint: "http://10.0.0.1:20000", failures: 0, error: null, createdAt: NOW, updatedAt: NOW, readyAt: null, launch: null, drainUntil: null },
          { id: "r2", model: "m1", profile: "default", state: "starting", shards: [{ node: "n1", gpus: [0] }], port: 20000, endpoint: "http://10.0.0.1:20000", failures: 0, error: null, createdAt: NOW, updatedAt: NOW, readyAt: null, launch: null, drainUntil: null },
        ]);
        await s.applyPlan(
          plan({
            update: [{ id: "r1", patch: { state: "ready", readyAt: NOW + 1, failures: 1, error: "e", shards: [{ node: "n1", gpus: [0, 1] }] } }],
            remove: ["r2"],
            modelState: new Map([["m1", { scaleTarget: 3 }], ["m9", {}]]),
            nodeAdmin: [{ node: "n1", state: "draining" }],
          }),
          NOW + 2,
        );
        snap = await s.snapshot();
        expect(snap.replicas).toEqual([
          { id: "r1", model: "m1", profile: "default", state: "ready", shards: [{ node: "n1", gpus: [0, 1] }], port: 20000, endpoint: "http://10.0.0.1:20000", failures: 1, error: "e", createdAt: NOW, updatedAt: NOW + 2, readyAt: NOW + 1, launch: null, drainUntil: null },
        ]);
        expect(snap.modelState.map((m) => [m.model, m.scaleTarget])).toEqual([["m1", 3]]);
        expect(snap.nodes[0]!.adminState).toBe("draining");
        expect((await s.listEvents({ limit: 5 })).map((e) => ({ kind: e.kind, data: e.data }))).toEqual([{ kind: "replica.created", data: { n: 1 } }]);
        expect((await s.replicaSnapshot("n1")).replicas.map((r) => r.id)).toEqual(["r1"]);
      });

      test("a replica's launch fingerprint and drain deadline (rolls): written at creation and by patches, cleared by null", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), NOW);
        await s.applyPlan(plan({ create: [{ ...replica("r1"), launch: "abc123" }, replica("r2")] }), NOW);
        let rows = (await s.snapshot()).replicas;
        expect(rows.map((r) => [r.id, r.launch, r.drainUntil])).toEqual([["r1", "abc123", null], ["r2", null, null]]);
        await s.applyPlan(plan({ update: [{ id: "r1", patch: { state: "draining", drainUntil: NOW + 30_000 } }, { id: "r2", patch: { launch: "restart" } }] }), NOW + 1);
        rows = (await s.replicaSnapshot()).replicas;
        expect(rows.map((r) => [r.id, r.state, r.launch, r.drainUntil])).toEqual([["r1", "draining", "abc123", NOW + 30_000], ["r2", "starting", "restart", null]]);
        await s.applyPlan(plan({ update: [{ id: "r1", patch: { drainUntil: null } }] }), NOW + 2);
        expect((await s.snapshot()).replicas.find((r) => r.id === "r1")?.drainUntil).toBeNull();
      });

      test("applyPlan with many rows: a replica updated twice ends as both patches in order say; model state by several field sets; events in order, data kept or null", async () => {
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), NOW);
        const ids = Array.from({ length: 300 }, (_, i) => `r${String(i).padStart(3, "0")}`);
        await s.applyPlan(plan({ create: ids.map((id) => replica(id, `m${Number(id.slice(1)) % 7}`)) }), NOW);
        await s.applyPlan(
          plan({
            update: [
              ...ids.map((id) => ({ id, patch: { state: "ready" as const, readyAt: NOW + 1 } })),
              { id: "r001", patch: { state: "failed" as const, error: "boom", failures: 2 } },
              { id: "r002", patch: { error: null, readyAt: undefined } },
            ],
            modelState: new Map<string, object>([
              ["m0", { scaleTarget: 2 }],
              ["m1", { failures: 3, parked: true, reason: "it kept failing" }],
              ["m2", { scaleTarget: 5 }],
              ["m3", {}],
            ]) as PlanWrite["modelState"],
            events: Array.from({ length: 50 }, (_, i) => ({ kind: "k", subject: `s${i}`, message: `m${i}`, ...(i % 2 ? { data: { i } } : {}) })),
          }),
          NOW + 2,
        );
        const snap = await s.snapshot();
        expect(snap.replicas).toHaveLength(300);
        expect(snap.replicas.filter((r) => r.state === "ready" && r.readyAt === NOW + 1 && r.updatedAt === NOW + 2)).toHaveLength(299);
        expect(snap.replicas.find((r) => r.id === "r001")).toMatchObject({ state: "failed", error: "boom", failures: 2, readyAt: NOW + 1 });
        expect(snap.replicas.find((r) => r.id === "r002")).toMatchObject({ state: "ready", error: null, readyAt: NOW + 1 });
        const st = new Map(snap.modelState.map((m) => [m.model, m]));
        expect([...st.keys()].sort()).toEqual(["m0", "m1", "m2"]);
        expect(st.get("m0")).toMatchObject({ scaleTarget: 2, failures: 0, parked: false });
        expect(st.get("m1")).toMatchObject({ failures: 3, parked: true, reason: "it kept failing", scaleTarget: null });
        expect(st.get("m2")!.scaleTarget).toBe(5);
        const events = await s.listEvents({ limit: 100 });
        expect(events.map((e) => e.subject)).toEqual(Array.from({ length: 50 }, (_, i) => `s${i}`));
        expect(events.map((e) => e.data)).toEqual(Array.from({ length: 50 }, (_, i) => (i % 2 ? { i } : null)));
        // A patch on a row that exists already.
        await s.applyPlan(plan({ modelState: new Map([["m0", { scaleTarget: 4 }]]) }), NOW + 3);
        expect((await s.snapshot()).modelState.find((m) => m.model === "m0")!.scaleTarget).toBe(4);
      });

      test("applyPlan is all or nothing: a plan that fails part-way writes nothing", async () => {
        await s.applyPlan(plan({ create: [replica("r1")] }), NOW);
        const bad = plan({
          create: [replica("r2"), replica("r1")], // r1 exists
          remove: ["r1"],
          modelState: new Map([["m1", { failures: 5 }]]),
          events: [{ kind: "k", subject: "s", message: "m" }],
        });
        await expect(s.applyPlan(bad, NOW + 1)).rejects.toThrow();
        const snap = await s.snapshot();
        expect(snap.replicas.map((r) => [r.id, r.updatedAt])).toEqual([["r1", NOW]]);
        expect(snap.modelState).toEqual([]);
        expect(await s.listEvents({ limit: 5 })).toEqual([]);
      });
    });

    describe("events", () => {
      test("ids rise; newest `limit` oldest first without a cursor, after the cursor with one; filters by subject, kind, since", async () => {
        const ids: number[] = [];
        for (let i = 0; i < 6; i++) ids.push(await s.appendEvent({ kind: i % 2 ? "odd" : "even", subject: i < 3 ? "x" : "y", message: `e${i}`, at: NOW + i, data: i === 0 ? { deep: [1, "a"] } : undefined }));
        expect([...ids].sort((a, b) => a - b)).toEqual(ids);
        expect(new Set(ids).size).toBe(6);
        expect((await s.listEvents({ limit: 2 })).map((e) => e.message)).toEqual(["e4", "e5"]);
        expect((await s.listEvents({ limit: 2, afterId: ids[1] })).map((e) => e.message)).toEqual(["e2", "e3"]);
        expect((await s.listEvents({ limit: 10, afterId: ids[5] })).map((e) => e.message)).toEqual([]);
        expect((await s.listEvents({ limit: 10, subject: "x", kind: "even" })).map((e) => e.message)).toEqual(["e0", "e2"]);
        expect((await s.listEvents({ limit: 10, since: NOW + 4 })).map((e) => e.message)).toEqual(["e4", "e5"]);
        const first = (await s.listEvents({ limit: 10, afterId: 0 }))[0]!;
        expect(first).toEqual({ id: ids[0]!, at: NOW, kind: "even", subject: "x", message: "e0", data: { deep: [1, "a"] } });
        expect((await s.listEvents({ limit: 10, afterId: 0 }))[1]!.data).toBeNull();
      });
    });

    describe("API keys", () => {
      test("created once per name, listed by name, revoked", async () => {
        expect(await s.createApiKey({ name: "b", hash: "hb", pool: null, createdAt: NOW })).toBe(true);
        expect(await s.createApiKey({ name: "a", hash: "ha", pool: "p1", createdAt: NOW + 1 })).toBe(true);
        expect(await s.createApiKey({ name: "b", hash: "hb2", pool: null, createdAt: NOW })).toBe(false);
        expect(await s.listApiKeys()).toEqual([
          { name: "a", hash: "ha", pool: "p1", createdAt: NOW + 1 },
          { name: "b", hash: "hb", pool: null, createdAt: NOW },
        ]);
        expect(await s.revokeApiKey("b")).toBe(true);
        expect(await s.revokeApiKey("b")).toBe(false);
        expect((await s.listApiKeys()).map((k) => k.name)).toEqual(["a"]);
      });

      test("a key's team, models, expiry, tier and limits are kept; an update changes what it names and null clears", async () => {
        const k = { name: "k", hash: "hk", pool: "p", createdAt: NOW, team: "t", models: ["m1", "one"], expiresAt: NOW + 1000, tier: "batch" as const, limits: { rpm: 10, tpm: 1000, maxConcurrent: 2, budgetTokens: 5_000_000, budgetGpuHours: 1.5, budgetPeriod: "week" as const } };
        expect(await s.createApiKey(k)).toBe(true);
        expect(await s.listApiKeys()).toEqual([k]);
        const u = await s.updateApiKey("k", { models: null, expiresAt: null, limits: { rpm: null, tpm: 2000 }, tier: "interactive" }, NOW + 5);
        const want = { name: "k", hash: "hk", pool: "p", createdAt: NOW, team: "t", tier: "interactive", limits: { tpm: 2000, maxConcurrent: 2, budgetTokens: 5_000_000, budgetGpuHours: 1.5, budgetPeriod: "week" }, updatedAt: NOW + 5 };
        expect(u).toEqual(want as never);
        expect(await s.listApiKeys()).toEqual([want as never]);
        expect(await s.updateApiKey("nope", { pool: null }, NOW)).toBeUndefined();
      });
    });

    describe("teams", () => {
      test("created once per name, listed by name, updated (null clears a limit)", async () => {
        expect(await s.createTeam({ name: "b", createdAt: NOW, updatedAt: NOW })).toBe(true);
        expect(await s.createTeam({ name: "a", limits: { rpm: 5, budgetGpuHours: 0.5 }, tier: "batch", createdAt: NOW, updatedAt: NOW })).toBe(true);
        expect(await s.createTeam({ name: "b", createdAt: NOW, updatedAt: NOW })).toBe(false);
        expect(await s.listTeams()).toEqual([
          { name: "a", limits: { rpm: 5, budgetGpuHours: 0.5 }, tier: "batch", createdAt: NOW, updatedAt: NOW },
          { name: "b", createdAt: NOW, updatedAt: NOW },
        ]);
        expect(await s.updateTeam("a", { limits: { rpm: null, tpm: 7 }, tier: null }, NOW + 1)).toEqual({ name: "a", limits: { tpm: 7, budgetGpuHours: 0.5 }, createdAt: NOW, updatedAt: NOW + 1 });
        expect(await s.updateTeam("nope", {}, NOW)).toBeUndefined();
      });

      test("a team with keys is not deleted unless forced, which revokes its keys with it", async () => {
        await s.createTeam({ name: "t", createdAt: NOW, updatedAt: NOW });
        await s.createApiKey({ name: "k2", hash: "h2", pool: null, createdAt: NOW, team: "t" });
        await s.createApiKey({ name: "k1", hash: "h1", pool: null, createdAt: NOW, team: "t" });
        await s.createApiKey({ name: "other", hash: "h3", pool: null, createdAt: NOW });
        expect(await s.deleteTeam("t", false)).toEqual({ deleted: false, keys: ["k1", "k2"] });
        expect((await s.listTeams()).map((t) => t.name)).toEqual(["t"]);
        expect(await s.deleteTeam("t", true)).toEqual({ deleted: true, keys: ["k1", "k2"] });
        expect(await s.listTeams()).toEqual([]);
        expect((await s.listApiKeys()).map((k) => k.name)).toEqual(["other"]);
        expect(await s.deleteTeam("t", false)).toBeUndefined();
        await s.createTeam({ name: "empty", createdAt: NOW, updatedAt: NOW });
        expect(await s.deleteTeam("empty", false)).toEqual({ deleted: true, keys: [] });
      });
    });

    describe("lease and fencing", () => {
      test("taken at epoch 1, renewed at the same epoch, refused while held, taken after it lapses at epoch + 1, released", async () => {
        expect(await s.readLease()).toBeUndefined();
        const a1 = await s.acquireLease("a", 60_000);
        expect(a1).toMatchObject({ holder: "a", epoch: 1 });
        expect(a1.expiresInMs).toBeGreaterThan(59_000);
        expect(a1.expiresInMs).toBeLessThanOrEqual(60_000);
        expect(await s.acquireLease("a", 60_000)).toMatchObject({ holder: "a", epoch: 1 });
        const refused = await s.acquireLease("b", 60_000);
        expect(refused).toMatchObject({ holder: "a", epoch: 1 });
        // A short lease, then let it lapse by the database's clock.
        expect(await s.acquireLease("a", 300)).toMatchObject({ holder: "a", epoch: 1 });
        await until("the lease to lapse", async () => ((await s.readLease())!.expiresInMs <= 0 ? true : undefined), { timeoutMs: 5000, everyMs: 50 });
        expect(await s.acquireLease("b", 60_000)).toMatchObject({ holder: "b", epoch: 2 });
        expect(await s.acquireLease("a", 60_000)).toMatchObject({ holder: "b", epoch: 2 });
        await s.releaseLease("a"); // not the holder: nothing changes
        expect(await s.readLease()).toMatchObject({ holder: "b", epoch: 2 });
        await s.releaseLease("b");
        expect((await s.readLease())!.expiresInMs).toBeLessThanOrEqual(0);
        expect(await s.acquireLease("a", 60_000)).toMatchObject({ holder: "a", epoch: 3 });
        // A second instance on the same database sees the same lease.
        const o = await h.other();
        expect(await o.readLease()).toMatchObject({ holder: "a", epoch: 3 });
        expect(await o.acquireLease("c", 60_000)).toMatchObject({ holder: "a", epoch: 3 });
      });

      test("every taking raises the epoch, also by the holder it names (a new term); only renewing keeps it; two processes of one name are two holders", async () => {
        expect(await s.acquireLease("a@1", 60_000, true)).toMatchObject({ holder: "a@1", epoch: 1 });
        expect(await s.acquireLease("a@1", 60_000)).toMatchObject({ holder: "a@1", epoch: 1 });
        // It stepped down (a slow renewal) and takes the lease again: a new term, though it held it.
        expect(await s.acquireLease("a@1", 60_000, true)).toMatchObject({ holder: "a@1", epoch: 2 });
        expect(await s.acquireLease("a@1", 60_000)).toMatchObject({ holder: "a@1", epoch: 2 });
        // Another process under the same name, or this one restarted: refused while the lease runs.
        const o = await h.other();
        expect(await o.acquireLease("a@2", 60_000, true)).toMatchObject({ holder: "a@1", epoch: 2 });
        expect(await o.acquireLease("a@2", 60_000)).toMatchObject({ holder: "a@1", epoch: 2 });
        await expect(o.applyPlan(plan({ create: [replica("r1")] }), NOW, { holder: "a@2", epoch: 2 })).rejects.toBeInstanceOf(FencedError);
        await s.releaseLease("a@2"); // not the holder: nothing changes
        expect(await s.readLease()).toMatchObject({ holder: "a@1", epoch: 2 });
        await s.releaseLease("a@1");
        expect(await o.acquireLease("a@2", 60_000, true)).toMatchObject({ holder: "a@2", epoch: 3 });
        // The old term's writes are fenced by the new one.
        await expect(s.applyPlan(plan({ create: [replica("r2")] }), NOW, { holder: "a@1", epoch: 2 })).rejects.toBeInstanceOf(FencedError);
        expect((await s.snapshot()).replicas).toEqual([]);
      });

      test("a plan under the lease it holds is written; under an old epoch, a lapsed lease, or none, nothing is written (FencedError)", async () => {
        await expect(s.applyPlan(plan({ create: [replica("r0")] }), NOW, { holder: "a", epoch: 1 })).rejects.toBeInstanceOf(FencedError);
        await s.acquireLease("a", 300);
        await s.applyPlan(plan({ create: [replica("r1")] }), NOW, { holder: "a", epoch: 1 });
        await until("the lease to lapse", async () => ((await s.readLease())!.expiresInMs <= 0 ? true : undefined), { timeoutMs: 5000, everyMs: 50 });
        // Lapsed: still the holder on paper, but not by the database's clock.
        await expect(s.applyPlan(plan({ create: [replica("r2")] }), NOW, { holder: "a", epoch: 1 })).rejects.toBeInstanceOf(FencedError);
        const o = await h.other();
        expect(await o.acquireLease("b", 60_000)).toMatchObject({ holder: "b", epoch: 2 });
        const old = plan({ create: [replica("r3")], remove: ["r1"], modelState: new Map([["m1", { failures: 1 }]]), events: [{ kind: "k", subject: "s", message: "m" }] });
        const err = await s.applyPlan(old, NOW, { holder: "a", epoch: 1 }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(FencedError);
        expect((err as FencedError).epoch).toBe(1);
        // Same holder name, wrong epoch: refused too.
        await expect(s.applyPlan(old, NOW, { holder: "b", epoch: 1 })).rejects.toBeInstanceOf(FencedError);
        const snap = await s.snapshot();
        expect(snap.replicas.map((r) => r.id)).toEqual(["r1"]);
        expect(snap.modelState).toEqual([]);
        expect(await s.listEvents({ limit: 5 })).toEqual([]);
        await o.applyPlan(plan({ remove: ["r1"] }), NOW, { holder: "b", epoch: 2 });
        expect((await s.snapshot()).replicas).toEqual([]);
        // Unfenced writes (reports' verdicts) pass regardless of the lease.
        await s.applyPlan(plan({ create: [replica("r4")] }), NOW);
        expect((await s.snapshot()).replicas.map((r) => r.id)).toEqual(["r4"]);
      });
    });

    describe("shared token digests", () => {
      const hex = (c: string | number) => (typeof c === "number" ? c.toString(16).padStart(64, "0") : c.repeat(64));
      test("claimed once (the first stays, on any instance), replaced with the old one retired, read back alike by every instance", async () => {
        expect(await s.tokenDigests()).toEqual({});
        expect(await s.putTokenDigest("join", hex("a"), "claim")).toEqual({ join: { sha256: hex("a"), retired: [] } });
        const o = await h.other();
        expect(await o.putTokenDigest("join", hex("b"), "claim")).toEqual({ join: { sha256: hex("a"), retired: [] } });
        expect(await o.putTokenDigest("admin", hex("c"), "claim")).toEqual({ admin: { sha256: hex("c"), retired: [] }, join: { sha256: hex("a"), retired: [] } });
        expect((await o.putTokenDigest("join", hex("b"), "replace")).join).toEqual({ sha256: hex("b"), retired: [hex("a")] });
        // The digest already stored: nothing changes (a rotation sent twice).
        expect((await s.putTokenDigest("join", hex("b"), "replace")).join).toEqual({ sha256: hex("b"), retired: [hex("a")] });
        expect(await s.tokenDigests()).toEqual({ admin: { sha256: hex("c"), retired: [] }, join: { sha256: hex("b"), retired: [hex("a")] } });
        // A retired digest put back leaves the retired list; the list keeps the newest 32.
        expect((await s.putTokenDigest("join", hex("a"), "replace")).join).toEqual({ sha256: hex("a"), retired: [hex("b")] });
        for (let i = 1; i <= 40; i++) await s.putTokenDigest("join", hex(i), "replace");
        const join = (await o.tokenDigests()).join!;
        expect(join.sha256).toBe(hex(40));
        expect(join.retired.length).toBe(32);
        expect(join.retired.at(-1)).toBe(hex(39));
        expect((await s.tokenDigests()).admin).toEqual({ sha256: hex("c"), retired: [] });
      });
    });

    describe("control planes, router usage, node reports", () => {
      test("control planes register, refresh and are forgotten with their router's report", async () => {
        await s.upsertControlPlane({ name: "b", adminUrl: "http://b:1", routerUrl: "http://b:2", startedAt: NOW });
        await s.upsertControlPlane({ name: "a", adminUrl: "http://a:1", routerUrl: "http://a:2", startedAt: NOW });
        await s.upsertControlPlane({ name: "b", adminUrl: "http://b:9", routerUrl: "http://b:8", startedAt: NOW + 7 });
        const rows = await s.controlPlanes();
        expect(rows.map(({ seenAgoMs: _, ...r }) => r)).toEqual([
          { name: "a", adminUrl: "http://a:1", routerUrl: "http://a:2", startedAt: NOW },
          { name: "b", adminUrl: "http://b:9", routerUrl: "http://b:8", startedAt: NOW + 7 },
        ]);
        for (const r of rows) {
          expect(r.seenAgoMs).toBeGreaterThanOrEqual(0);
          expect(r.seenAgoMs).toBeLessThan(10_000);
        }
        await s.reportUsage("b", NOW, new Map([["r1", NOW]]));
        await s.reportUsage("a", NOW, new Map());
        await s.removeControlPlane("b");
        expect((await s.controlPlanes()).map((r) => r.name)).toEqual(["a"]);
        expect((await s.routerUsage()).map((r) => r.router)).toEqual(["a"]);
      });

      test("router usage: each router's last report replaces its previous one", async () => {
        await s.reportUsage("r-b", NOW - 100, new Map([["x", NOW - 5], ["y", NOW - 1]]));
        await s.reportUsage("r-a", NOW - 50, new Map([["x", NOW - 2]]));
        await s.reportUsage("r-b", NOW - 10, new Map([["z", NOW]]));
        const u = await s.routerUsage();
        expect(u.map(({ reportedAgoMs: _, ...r }) => ({ ...r, lastUsed: [...r.lastUsed] }))).toEqual([
          { router: "r-a", watchingSince: NOW - 50, lastUsed: [["x", NOW - 2]] },
          { router: "r-b", watchingSince: NOW - 10, lastUsed: [["z", NOW]] },
        ]);
        for (const r of u) expect(r.reportedAgoMs).toBeGreaterThanOrEqual(0);
      });

      test("limit shares: each router's row read, decided on and rewritten in one go, concurrent ones one after another; forgotten with its control plane", async () => {
        const x = "key:rpm:alice";
        // What each decide saw: serialised, the second of two concurrent calls sees the first's row.
        const seen: string[][] = [];
        const decide = (share: number) => (rows: ShareRow[]) => {
          seen.push(rows.map((r) => `${r.router}:${r.shares[x] ?? "-"}:${r.demand[x] ?? "-"}`));
          return { shares: new Map([[x, share]]), fallback: share / 2 };
        };
        await Promise.all([s.shareLimits("b", new Map([[x, 5]]), decide(0.25)), s.shareLimits("a", new Map([[x, 7]]), decide(0.5))]);
        expect(seen[0]).toEqual([]);
        expect(seen[1]!.length).toBe(1);
        const out = await s.shareLimits("a", new Map([[x, 9]]), decide(0.75));
        expect(out).toEqual({ shares: new Map([[x, 0.75]]), fallback: 0.375 });
        expect(seen[2]).toEqual(["a:0.5:7", "b:0.25:5"]);
        await s.upsertControlPlane({ name: "b", adminUrl: "http://b:1", routerUrl: "http://b:2", startedAt: NOW });
        await s.removeControlPlane("b");
        let last: ShareRow[] = [];
        await s.shareLimits("c", new Map(), (rows) => {
          last = rows;
          return { shares: new Map(), fallback: 1 };
        });
        expect(last.map((r) => [r.router, r.shares, r.demand])).toEqual([["a", { [x]: 0.75, "*": 0.375 }, { [x]: 9 }]]);
        expect(last[0]!.reportedAgoMs).toBeGreaterThanOrEqual(0);
        expect(last[0]!.reportedAgoMs).toBeLessThan(10_000);
      });

      test("node reports: saved, replaced, listed by node", async () => {
        await s.saveNodeReport("n2", '{"engines":[]}', NOW);
        await s.saveNodeReport("n1", '{"a":1}', NOW);
        await s.saveNodeReport("n2", '{"engines":["vllm"]}', NOW + 1);
        expect(await s.nodeReports()).toEqual([
          { node: "n1", report: '{"a":1}', at: NOW },
          { node: "n2", report: '{"engines":["vllm"]}', at: NOW + 1 },
        ]);
      });
    });

    describe("weights orders", () => {
      const R = "a".repeat(40);
      test("pulls and removals kept until deleted, one per node and revision, read by another control plane; a delete of the other kind leaves a newer order", async () => {
        expect(await s.weightsOrders()).toEqual([]);
        await s.putWeightsOrders([
          { node: "n2", repo: "org/m", revision: R, kind: "pull", at: NOW },
          { node: "n1", repo: "org/m", revision: R, kind: "pull", at: NOW },
          { node: "n1", repo: "org/x", revision: R, kind: "remove", at: NOW + 1 },
        ]);
        const other = await h.other();
        expect(await other.weightsOrders()).toEqual([
          { node: "n1", repo: "org/m", revision: R, kind: "pull", at: NOW },
          { node: "n1", repo: "org/x", revision: R, kind: "remove", at: NOW + 1 },
          { node: "n2", repo: "org/m", revision: R, kind: "pull", at: NOW },
        ]);
        // A removal of what was pulled replaces the pull; deleting "the pull" then leaves the removal.
        await other.putWeightsOrders([{ node: "n2", repo: "org/m", revision: R, kind: "remove", at: NOW + 2 }]);
        await s.deleteWeightsOrders([{ node: "n2", repo: "org/m", revision: R, kind: "pull" }, { node: "n1", repo: "org/m", revision: R, kind: "pull" }]);
        expect(await s.weightsOrders()).toEqual([
          { node: "n1", repo: "org/x", revision: R, kind: "remove", at: NOW + 1 },
          { node: "n2", repo: "org/m", revision: R, kind: "remove", at: NOW + 2 },
        ]);
        await other.deleteWeightsOrders([{ node: "n1", repo: "org/x", revision: R, kind: "remove" }, { node: "n2", repo: "org/m", revision: R, kind: "remove" }]);
        expect(await s.weightsOrders()).toEqual([]);
        await s.putWeightsOrders([]);
        await s.deleteWeightsOrders([]);
      });
    });

    describe("usage ledger", () => {
      const HOUR = 3_600_000;
      const H0 = NOW - (NOW % HOUR);
      const row = (over: Partial<UsageRow>): UsageRow => usageRow({ team: "search", key: "svc", model: "m1", hour: H0, prompt_tokens: 10, completion_tokens: 5, cached_tokens: 2, ...over });

      test("rows are added to the stored ones per team, key, model and hour, within a batch and across batches and control planes", async () => {
        await s.addUsage([row({}), row({ requests: 2, prompt_tokens: 7, errors: 1, errors_5xx: 1 }), row({ key: "", team: "", model: "m2", aborted: 1 })]);
        const other = await h.other();
        await other.addUsage([row({ prompt_tokens: 100, completion_tokens: 1, cached_tokens: 0, refused: 1, errors: 1 }), row({ hour: H0 + HOUR })]);
        await s.addUsage([]);
        expect(await s.usageSince(0)).toEqual([
          row({ team: "", key: "", model: "m2", aborted: 1 }),
          row({ requests: 4, prompt_tokens: 117, completion_tokens: 11, cached_tokens: 4, errors: 2, errors_5xx: 1, refused: 1 }),
          row({ hour: H0 + HOUR }),
        ]);
        expect(await other.usageSince(H0 + HOUR)).toEqual([row({ hour: H0 + HOUR })]);
      });

      test("pruning deletes the hours before the given time and keeps the rest", async () => {
        await s.addUsage([row({ hour: H0 - 2 * HOUR }), row({ hour: H0 - HOUR }), row({})]);
        await s.pruneUsage(H0 - HOUR);
        expect((await s.usageSince(0)).map((r) => r.hour)).toEqual([H0 - HOUR, H0]);
      });

      test("the budgets' totals: per team and key, tokens and GPU-seconds of the hours from each start", async () => {
        await s.addUsage([
          row({ hour: H0 - 2 * HOUR, gpu_seconds: 1.5 }),
          row({ hour: H0, model: "m2", gpu_seconds: 2.25 }),
          row({ hour: H0 + HOUR, team: "", key: "solo" }),
          row({ hour: H0 - 5 * HOUR, key: "old" }),
        ]);
        const totals = (await s.usageTotalsSince([H0, H0 - 2 * HOUR])).sort((a, b) => (a.key < b.key ? -1 : 1));
        expect(totals).toEqual([
          { team: "", key: "solo", tokens: [15, 15], gpu_seconds: [0, 0] },
          { team: "search", key: "svc", tokens: [15, 30], gpu_seconds: [2.25, 3.75] },
        ]);
        expect(await s.usageTotalsSince([])).toEqual([]);
      });

      test("a large batch is written in one go", async () => {
        const rows = Array.from({ length: 1200 }, (_, i) => row({ key: `k${String(i).padStart(4, "0")}` }));
        await s.addUsage(rows);
        const read = await s.usageSince(H0);
        expect(read).toHaveLength(1200);
        expect(read.reduce((n, r) => n + r.prompt_tokens, 0)).toBe(12_000);
      });
    });

    describe("watch", () => {
      test("another instance's commit is heard; this instance's own is not; stopping stops it", async () => {
        const o = await h.other();
        const heard: StoreChange[] = [];
        const stop = s.watch((c) => heard.push(c));
        // The watcher needs a moment to stand (a LISTEN, a first data_version): keep writing until heard.
        await until("the first change of another instance", async () => {
          if (heard.length > 0) return true;
          await o.upsertControlPlane({ name: "o", adminUrl: "http://o:1", routerUrl: "http://o:2", startedAt: NOW });
          return undefined;
        }, { timeoutMs: 10_000, everyMs: 100 });
        // A control-plane row is nothing the in-memory image holds: "meta" where the store can tell (PostgreSQL), "any" where it cannot (SQLite).
        // (A store that cannot tell last-seen times apart also says "seen" with each "any": SQLite.)
        for (const c of heard) expect(["any", "meta", "seen"]).toContain(c);
        heard.length = 0;
        // Own writes first, then one of the other's: when the other's is heard, an own one
        // (had it been passed on) would have come before it.
        await s.saveNodeReport("mine", "{}", NOW);
        await s.acquireLease("mine", 60_000);
        await o.saveModels([{ spec: model({ name: "theirs" }), revision: 1, created: true }], NOW);
        await until("the other instance's catalog write", () => heard.length > 0, { timeoutMs: 10_000 });
        expect(heard.filter((c) => c !== "seen")).toEqual(["any"]);
        heard.length = 0;
        await o.applyHeartbeat(heartbeat({ name: "n1" }), NOW);
        await until("the other's heartbeat", () => heard.length > 0, { timeoutMs: 10_000 });
        expect(heard.filter((c) => c !== "seen").at(-1)).toBe("any");
        heard.length = 0;
        await o.touchNodes([{ name: "n1", at: NOW + 1 }]);
        await until("the other's last-seen touch", () => heard.length > 0, { timeoutMs: 10_000 });
        expect(["seen", "any"]).toContain(heard[0]!);
        stop();
        heard.length = 0;
        await o.saveNodeReport("after", "{}", NOW);
        await Bun.sleep(600); // longer than SQLite's poll and a notification's trip
        expect(heard).toEqual([]);
      });
    });

    describe("changes", () => {
      test("every write of what the model holds is a change, in order, without gaps; the rows named come with them", async () => {
        const c0 = await s.changeCursor();
        const o = await h.other();
        await s.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"], models: ["w"] }), NOW, { credentialHash: "h1", pending: false });
        await o.saveModels([{ spec: model({ name: "m1", aliases: ["one"] }), revision: 1, created: true }], NOW);
        await s.applyPlan(plan({ create: [replica("r1")] }), NOW);
        await o.createApiKey({ name: "k1", hash: "kh1", pool: null, createdAt: NOW, team: "t1", limits: { rpm: 3 } });
        await o.createTeam({ name: "t1", limits: { tpm: 9 }, createdAt: NOW, updatedAt: NOW });
        await s.setAllowedAddress("n2", "10.0.0.2", NOW);
        const c1 = await o.changeCursor();
        expect(c1).toBeGreaterThan(c0);
        const read = await o.changesSince(c0, 1000);
        expect(read.changes.map((c) => c.seq)).toEqual(Array.from({ length: c1 - c0 }, (_, i) => c0 + 1 + i));
        expect(new Set(read.changes.map((c) => `${c.kind}:${c.key}`))).toEqual(new Set(["node:n1", "model:m1", "replica:r1", "key:k1", "team:t1", "node:n2"]));
        const snap = await s.snapshot();
        expect(read.nodes).toEqual(snap.nodes);
        expect(read.gpus).toEqual(snap.gpus);
        expect(read.weights).toEqual(snap.weights);
        expect(read.credentials).toEqual([{ node: "n1", hash: "h1" }]);
        expect(read.addresses).toEqual([{ node: "n2", address: "10.0.0.2" }]);
        expect(read.models).toEqual(snap.models);
        expect(read.modelState).toEqual(snap.modelState);
        expect(read.replicas).toEqual(snap.replicas);
        expect(read.apiKeys).toEqual(await s.listApiKeys());
        expect(read.teams).toEqual(await s.listTeams());
        // Paged: the limit holds, the next page starts where the first ended.
        const page = await s.changesSince(c0, 2);
        expect(page.changes.map((c) => c.seq)).toEqual([c0 + 1, c0 + 2]);
        // A last-seen touch is no change; a deletion is, and names what is gone.
        await o.touchNodes([{ name: "n1", at: NOW + 5 }]);
        expect(await s.changeCursor()).toBe(c1);
        await s.deleteModel("m1");
        const gone = await s.changesSince(c1, 1000);
        expect(gone.changes.every((c) => c.kind === "model" && c.key === "m1")).toBe(true);
        expect(gone.changes.length).toBeGreaterThan(0);
        expect(gone.models).toEqual([]);
        expect(gone.modelState).toEqual([]);
        expect((await s.changesSince(await s.changeCursor(), 1000)).changes).toEqual([]);
      });
    });
  });
}
