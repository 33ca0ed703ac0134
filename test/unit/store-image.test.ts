// The store's in-memory image (src/control/image/): it reads like the store, writes through it, and
// never holds what the store refused.

import { describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { StoreImage } from "../../src/control/image";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import type { Snapshot } from "../../src/control/types";
import { T0, heartbeat, model } from "../helpers/fleet";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

function setup() {
  const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
  const clock = new ManualScheduler(T0);
  const m = new StoreImage(store, clock);
  // Rows the statements wrote, without what the change triggers add (the counter and one journal row per row).
  const journal = () => (store.sqlite.query("SELECT seq FROM change_counter").get() as { seq: number }).seq;
  const changes = () => (store.sqlite.query("SELECT total_changes() AS n").get() as { n: number }).n - 2 * journal();
  return { store, clock, m, changes };
}

const hb = (name: string, gpus = ["H100-80GB", "H100-80GB"]) => heartbeat({ name, gpus, models: ["m1"] });
/** A snapshot's rows, without the version only the in-memory image stamps on it. */
const rows = ({ version: _v, ...rest }: Snapshot) => rest;

describe("in-memory image", () => {
  test("writes go through: memory and a fresh load of the store agree", async () => {
    const { store, m } = setup();
    await m.applyHeartbeat(hb("n1"), T0, { credentialHash: "h1", pending: false });
    await m.applyHeartbeat(hb("n2"), T0, { credentialHash: "h2", pending: true });
    await m.saveModels([{ spec: model({ name: "m1", aliases: ["one"] }), revision: 1, created: true }], T0);
    await m.applyPlan({ create: [{ id: "r1", model: "m1", profile: "p", shards: [{ node: "n1", gpus: [0] }], port: 9000, endpoint: "10.0.0.1:9000" }], update: [], remove: [], modelState: new Map([["m1", { failures: 2 }]]), nodeAdmin: [{ node: "n2", state: "cordoned" }], events: [] }, T0);
    await m.applyPlan({ create: [], update: [{ id: "r1", patch: { state: "ready", readyAt: T0 + 5 } }], remove: [], modelState: new Map(), nodeAdmin: [], events: [] }, T0 + 5);
    const mem = await m.snapshot();
    expect(rows(mem)).toEqual(await store.snapshot());
    expect(mem.replicas[0]!.state).toBe("ready");
    expect(await m.nodeTrust("n2")).toEqual(await store.nodeTrust("n2"));
    expect(await m.nodeByCredentialHash("h2")).toBe("n2");
    expect((await m.modelByAlias("one"))?.name).toBe("m1");
    const fresh = new StoreImage(store);
    expect(rows(await fresh.snapshot())).toEqual(rows(mem));
    await m.rebuild();
    expect(rows(await m.snapshot())).toEqual(rows(mem));
    expect((await m.replicaSnapshot("n1")).replicas.map((r) => r.id)).toEqual(["r1"]);
    expect((await m.replicaSnapshot("n2")).replicas).toEqual([]);
  });

  test("a failed write leaves memory as the store has it", async () => {
    const { store, m } = setup();
    await m.applyHeartbeat(hb("n1"), T0);
    const before = await m.snapshot();
    // A replica id taken twice: the store refuses the plan, all of it.
    const plan = (id: string) => ({ create: [{ id, model: "m1", profile: "p", shards: [{ node: "n1", gpus: [0] }], port: 1, endpoint: "10.0.0.1:1" }], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [] });
    await m.applyPlan(plan("r1"), T0);
    const withR1 = await m.snapshot();
    await expect(m.applyPlan({ ...plan("r1"), nodeAdmin: [{ node: "n1", state: "draining" as const }] }, T0)).rejects.toThrow();
    const after = await m.snapshot();
    expect(rows(after)).toEqual(await store.snapshot());
    expect(after.nodes[0]!.adminState).toBe("none");
    expect(after.replicas.length).toBe(1);
    expect(before.replicas.length).toBe(0);
    expect(withR1.replicas.length).toBe(1);
  });

  test("memory forgotten while a snapshot is being built: that snapshot is not kept for the next read", async () => {
    const { store, m } = setup();
    await m.applyHeartbeat(hb("n1"), T0);
    await m.snapshot();
    // A write past the image (as a test's back door, or a doubt after a failed write) and the
    // forgetting that goes with it land while a snapshot waits for its load.
    const pending = m.snapshot();
    store.insertReplica({ id: "r9", model: "m1", profile: "p", state: "ready", shards: [{ node: "n1", gpus: [0] }], createdAt: T0, updatedAt: T0 });
    m.invalidate();
    await pending;
    expect((await m.snapshot()).replicas.map((r) => r.id)).toEqual(["r9"]);
  });

  test("snapshots handed out never change under their holder", async () => {
    const { m, clock } = setup();
    await m.applyHeartbeat(hb("n1"), T0);
    const s1 = await m.snapshot();
    clock.advance(2000);
    await m.applyHeartbeat(hb("n1"), T0 + 2000);
    await m.applyHeartbeat(hb("n2"), T0 + 2000);
    expect(s1.nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([["n1", T0]]);
    const s2 = await m.snapshot();
    expect(s2.nodes.map((n) => [n.name, n.lastHeartbeat])).toEqual([
      ["n1", T0 + 2000],
      ["n2", T0 + 2000],
    ]);
    // Nothing changed: the same arrays, not rebuilt ones, and the same version (the tick skips
    // projecting unchanged state); a last-seen touch alone leaves the version too.
    const s3 = await m.snapshot();
    expect(s3.gpus).toBe(s2.gpus);
    expect(s3.version).toBe(s2.version);
    clock.advance(1000);
    await m.applyHeartbeat(hb("n1"), T0 + 3000);
    expect((await m.snapshot()).version).toBe(s2.version);
    await m.applyHeartbeat({ ...hb("n1"), address: "10.0.0.99" }, T0 + 3000);
    expect((await m.snapshot()).version).toBeGreaterThan(s2.version!);
  });

  test("a plan of events alone (a heartbeat's news) is written and changes no snapshot: the same arrays, the same versions", async () => {
    const { store, m } = setup();
    await m.applyHeartbeat(hb("n1"), T0);
    const before = await m.snapshot();
    const replicasAt = m.replicaVersion();
    await m.applyPlan({ create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [{ kind: "node.reachable", subject: "node/n1", message: "node n1 is heartbeating again" }] }, T0);
    const after = await m.snapshot();
    expect(after.version).toBe(before.version!);
    expect(after.replicas).toBe(before.replicas);
    expect(m.replicaVersion()).toBe(replicasAt);
    expect((await store.listEvents({ limit: 5 })).map((e) => e.kind)).toEqual(["node.reachable"]);
    // A plan that does change something moves both.
    await m.applyPlan({ create: [], update: [], remove: [], modelState: new Map([["m1", { failures: 1 }]]), nodeAdmin: [], events: [] }, T0);
    expect((await m.snapshot()).version).toBeGreaterThan(before.version!);
    expect(m.replicaVersion()).toBeGreaterThan(replicasAt);
  });

  test("an unchanged heartbeat writes nothing until the flush, which writes last-seen in one transaction", async () => {
    const { store, m, clock, changes } = setup();
    await m.applyHeartbeat(hb("n1"), T0);
    await m.applyHeartbeat(hb("n2"), T0);
    // The first touch after a quiet second is written at once; the ones after it wait.
    clock.advance(50);
    await m.applyHeartbeat(hb("n1"), T0 + 50);
    expect((await store.snapshot()).nodes.map((n) => n.lastHeartbeat)).toEqual([T0 + 50, T0]);
    const c0 = changes();
    const w0 = m.writes;
    clock.advance(50);
    await m.applyHeartbeat(hb("n1"), T0 + 100);
    await m.applyHeartbeat(hb("n2"), T0 + 100);
    expect(changes()).toBe(c0);
    expect(m.writes).toBe(w0);
    expect((await m.nodeTrust("n1")).exists).toBe(true);
    expect((await m.snapshot()).nodes.map((n) => n.lastHeartbeat)).toEqual([T0 + 100, T0 + 100]);
    expect((await store.snapshot()).nodes.map((n) => n.lastHeartbeat)).toEqual([T0 + 50, T0]);
    // The timer a second on writes both rows, in one transaction.
    clock.advance(1000);
    expect(m.writes).toBe(w0 + 1);
    expect((await store.snapshot()).nodes.map((n) => n.lastHeartbeat)).toEqual([T0 + 100, T0 + 100]);
  });

  test("a changed heartbeat writes only that node", async () => {
    const { store, m, changes } = setup();
    for (const n of ["n1", "n2", "n3"]) await m.applyHeartbeat(hb(n), T0);
    const c0 = changes();
    await m.applyHeartbeat(hb("n2", ["H100-80GB"]), T0 + 10);
    // 1 node row updated, 2 GPUs deleted + 1 inserted, 1 weight deleted + 1 inserted.
    expect(changes() - c0).toBe(6);
    const mem = await m.snapshot();
    expect(rows(mem)).toEqual(await store.snapshot());
    expect(mem.gpus.filter((g) => g.node === "n2").length).toBe(1);
  });
});

describe("in-memory image: the background reload", () => {
  /** A store whose full read waits at a gate the test opens. */
  function gated() {
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    let open: () => void = () => {};
    let gate: Promise<void> | undefined;
    const slow = new Proxy(store, {
      get(target, prop, receiver) {
        if (prop === "snapshot")
          return async () => {
            const snap = await target.snapshot();
            if (gate) await gate;
            return snap;
          };
        const v = Reflect.get(target, prop, receiver);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const close = () => {
      gate = new Promise<void>((r) => (open = r));
    };
    const m = new StoreImage(slow, new ManualScheduler(T0));
    return { store, m, close, open: () => (open(), (gate = undefined)) };
  }

  test("reads go on from memory while it reads; then the store's state replaces memory", async () => {
    const { store, m, close, open } = gated();
    await m.applyHeartbeat(hb("n1"), T0, { credentialHash: "h1", pending: false });
    await m.snapshot();
    const loads = m.loads;
    // Behind the model's back (a missed notice): the store alone holds n1 cordoned.
    await store.setAdminState("n1", "cordoned");
    close();
    const done = m.reload();
    // Reads during the reload: answered at once, from memory as it was.
    const during = await m.snapshot();
    expect(during.nodes[0]!.adminState).toBe("none");
    expect((await m.nodeTrust("n1")).exists).toBe(true);
    open();
    expect(await done).toBe(true);
    expect(m.loads).toBe(loads + 1);
    const after = await m.snapshot();
    expect(after.nodes[0]!.adminState).toBe("cordoned");
    expect(after.version).toBeGreaterThan(during.version!);
    expect(rows(after)).toEqual(await store.snapshot());
  });

  test("a reload that finds in the store what memory holds changes nothing: the same snapshot, the same version", async () => {
    const { m } = gated();
    await m.applyHeartbeat(hb("n1"), T0, { credentialHash: "h1", pending: false });
    await m.applyHeartbeat(hb("n2", ["H100-80GB"]), T0 + 10);
    await m.applyPlan({ create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [{ node: "n2", state: "cordoned" }], events: [] }, T0 + 20);
    const before = await m.snapshot();
    const loads = m.loads;
    expect(await m.reload()).toBe(true);
    expect(m.loads).toBe(loads + 1);
    const after = await m.snapshot();
    expect(after.version).toBe(before.version!);
    // The very arrays: nothing was rebuilt, so nothing downstream projects again.
    expect(after.nodes).toBe(before.nodes);
    expect(after.nodes.find((n) => n.name === "n2")!.adminState).toBe("cordoned");
  });

  test("a write of its own during the read keeps memory (what the read saw may be older)", async () => {
    const { store, m, close, open } = gated();
    await m.applyHeartbeat(hb("n1"), T0);
    await m.snapshot();
    close();
    const done = m.reload();
    await Promise.resolve();
    // Written through the model while the reload's read waits: the read's rows predate it.
    const write = m.applyPlan({ create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [{ node: "n1", state: "draining" }], events: [] }, T0);
    open();
    await write;
    expect(await done).toBe(false);
    const mem = await m.snapshot();
    expect(mem.nodes[0]!.adminState).toBe("draining");
    expect(rows(mem)).toEqual(await store.snapshot());
  });

  test("a node's last-seen time never goes back: memory's newer touch outlives the store's older row", async () => {
    const { store, m, close, open } = gated();
    await m.applyHeartbeat(hb("n1"), T0);
    await m.snapshot();
    close();
    const done = m.reload();
    // Touched while the read waits, its rows already read: the touch is flushed at once (the first
    // in a second), which does not void the reload, and the read's older row does not win.
    await m.applyHeartbeat(hb("n1"), T0 + 500);
    open();
    expect(await done).toBe(true);
    expect((await m.snapshot()).nodes[0]!.lastHeartbeat).toBe(T0 + 500);
    expect((await store.snapshot()).nodes[0]!.lastHeartbeat).toBe(T0 + 500);
  });
});

describe("in-memory image: another writer's commits", () => {
  function pair() {
    const dir = scratchDir("llmgw-model-");
    const path = join(dir, "store.db");
    const store = new Store({ path, ...SQLITE_DEFAULTS });
    const other = new Store({ path, ...SQLITE_DEFAULTS });
    const m = new StoreImage(store, new ManualScheduler(T0));
    return { store, other, m, close: () => (store.close(), other.close(), rmSync(dir, { recursive: true, force: true })) };
  }
  const empty = { update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [] };

  test("are read alone (only the rows they name) and give the model a full load gives", async () => {
    const { store, other, m, close } = pair();
    try {
      for (const n of ["n1", "n2", "n3"]) await m.applyHeartbeat(hb(n), T0, { credentialHash: `h-${n}`, pending: false });
      await m.saveModels([{ spec: model({ name: "m1", aliases: ["one"] }), revision: 1, created: true }], T0);
      await m.applyPlan({ ...empty, create: [{ id: "r1", model: "m1", profile: "p", shards: [{ node: "n1", gpus: [0] }], port: 9000, endpoint: "e1" }] }, T0);
      await m.snapshot();
      const loads = m.loads;
      // Another control plane: a catalog change (alias moved), a replica, a node changed, one deleted, an address, a key.
      await other.saveModels(
        [
          { spec: model({ name: "m1", aliases: [] }), revision: 2, created: false },
          { spec: model({ name: "m2", aliases: ["one"] }), revision: 1, created: true },
        ],
        T0 + 1,
      );
      await other.applyPlan({ ...empty, create: [{ id: "r2", model: "m2", profile: "p", shards: [{ node: "n2", gpus: [0, 1] }], port: 9001, endpoint: "e2" }], update: [{ id: "r1", patch: { state: "ready", readyAt: T0 + 1 } }], modelState: new Map([["m1", { failures: 1 }]]) }, T0 + 1);
      await other.applyHeartbeat(hb("n2", ["H100-80GB"]), T0 + 2);
      await other.deleteNode("n3", [], [], T0 + 2);
      await other.applyHeartbeat(hb("n4"), T0 + 2, { credentialHash: "h-n4", pending: false });
      await other.setAllowedAddress("n4", "10.4.4.4", T0 + 2);
      await other.createApiKey({ name: "k1", hash: "kh1", pool: null, createdAt: T0 + 2 });
      m.otherWriter();
      const mem = await m.snapshot();
      expect(m.loads).toBe(loads);
      expect(m.changeReads).toBe(1);
      const fresh = new StoreImage(store);
      expect(rows(mem)).toEqual(rows(await fresh.snapshot()));
      expect(mem.nodes.map((n) => n.name)).toEqual(["n1", "n2", "n4"]);
      expect((await m.modelByAlias("one"))?.name).toBe("m2");
      expect(await m.nodeByCredentialHash("h-n4")).toBe("n4");
      expect(await m.nodeByCredentialHash("h-n3")).toBeUndefined();
      expect(await m.nodeTrust("n4")).toEqual(await fresh.nodeTrust("n4"));
      expect(await m.listApiKeys()).toEqual(await fresh.listApiKeys());
      expect((await m.replicaSnapshot("n2")).replicas.map((r) => r.id)).toEqual(["r2"]);
      // Nothing new: a change read that finds nothing keeps memory (and its version) as it is.
      m.otherWriter();
      const again = await m.snapshot();
      expect(again.version).toBe(mem.version);
      expect(m.loads).toBe(loads);
    } finally {
      close();
    }
  });

  test("a gap in the changes, or a kind this version does not know, loads everything", async () => {
    const { store, other, m, close } = pair();
    try {
      await m.applyHeartbeat(hb("n1"), T0, { credentialHash: "h1", pending: false });
      await m.snapshot();
      const loads = m.loads;
      // Pruned (or never seen) changes: the first one after the cursor is missing.
      await other.saveModels([{ spec: model({ name: "m1" }), revision: 1, created: true }], T0);
      await other.applyHeartbeat(hb("n2"), T0, { credentialHash: "h2", pending: false });
      const first = (other.sqlite.query("SELECT min(seq) AS s FROM changes WHERE kind = 'model'").get() as { s: number }).s;
      other.sqlite.run("DELETE FROM changes WHERE seq = ?", [first]);
      m.otherWriter();
      let mem = await m.snapshot();
      expect(m.loads).toBe(loads + 1);
      expect(rows(mem)).toEqual(rows(await new StoreImage(store).snapshot()));
      expect(mem.models.map((x) => x.name)).toEqual(["m1"]);
      // A kind from a later version: not guessed at.
      other.sqlite.run("UPDATE change_counter SET seq = seq + 1");
      other.sqlite.run("INSERT INTO changes (seq, kind, key) SELECT seq, 'router', 'x' FROM change_counter");
      await other.applyHeartbeat(hb("n3"), T0, { credentialHash: "h3", pending: false });
      m.otherWriter();
      mem = await m.snapshot();
      expect(m.loads).toBe(loads + 2);
      expect(mem.nodes.map((n) => n.name)).toEqual(["n1", "n2", "n3"]);
      // And after the reload, reading changes resumes from where it read.
      await other.setAdminState("n3", "cordoned");
      m.otherWriter();
      mem = await m.snapshot();
      expect(m.loads).toBe(loads + 2);
      expect(mem.nodes.find((n) => n.name === "n3")?.adminState).toBe("cordoned");
    } finally {
      close();
    }
  });
});
