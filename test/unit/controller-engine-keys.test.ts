// Each replica's engine key as the controller hands it out: the same in every shard's
// assignment and in the published endpoint, different per replica, derived from the head
// node's secret in its data dir, and so the same after a restart with that data dir.

import { afterEach, describe, expect, test } from "bun:test";
import { rmSync, statSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { ensureDataDir, resolveEngineSecret } from "../../src/config/datadir";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { EndpointInfo } from "../../src/control/interfaces";
import { Assignment, type ReplicaReport } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model, type NodeDef } from "../helpers/fleet";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const silent = pino({ level: "silent" });
const defs: NodeDef[] = [
  { name: "x1", fabrics: ["ib"], gpus: [H, H] },
  { name: "x2", fabrics: ["ib"], gpus: [H, H] },
  { name: "y1", fabrics: ["ib"], gpus: [H, H] },
  { name: "y2", fabrics: ["ib"], gpus: [H, H] },
];

function controller(store: Store, engineSecret: string | undefined, scheduler = new ManualScheduler(T0)) {
  const ctl = testControl({ store, scheduler, log: silent, nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000, ...(engineSecret !== undefined ? { engineSecret } : {}) });
  const published: EndpointInfo[][] = ctl.router.published;
  return { ctl, published };
}

/** Every node heartbeats reporting all it is assigned as ready; returns every assignment seen. */
async function allReady(ctl: TestControl): Promise<Assignment[]> {
  const seen: Assignment[] = [];
  for (const d of defs) {
    const mine = ctl.projector.response(d.name).assignments;
    seen.push(...mine);
    const reports: ReplicaReport[] = mine.map((a) => ({ id: a.id, state: "ready", port: a.port, error: null }));
    await ctl.intake.heartbeat({ ...heartbeat(d), replicas: reports });
  }
  return seen;
}

describe("engine keys from the controller", () => {
  test("all shards of a replica share its key, the endpoint carries it, and replicas differ", async () => {
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const { ctl, published } = controller(store, "test-secret-0123456789abcdef");
    for (const d of defs) await ctl.intake.heartbeat(heartbeat(d));
    await ctl.catalog.putModels([model({ name: "two", replicas: { min: 2 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2, nodes: 2 }] })]);
    await ctl.loop.tick();
    const assignments = await allReady(ctl);
    await ctl.loop.tick();
    const ids = [...new Set(assignments.map((a) => a.id))];
    expect(ids).toHaveLength(2);
    expect(assignments).toHaveLength(4);
    // What the agent parses: every key passes the wire schema.
    for (const a of assignments) expect(Assignment.parse(a).engine_key).toMatch(/^[0-9a-f]{64}$/);
    // Two shards per replica, and both carry the replica's one key.
    const keysOf = new Map<string, (string | null)[]>();
    for (const a of assignments) keysOf.set(a.id, [...(keysOf.get(a.id) ?? []), a.engine_key]);
    for (const id of ids) {
      expect(keysOf.get(id)).toHaveLength(2);
      expect(new Set(keysOf.get(id)).size).toBe(1);
    }
    const keyOf = new Map([...keysOf].map(([id, keys]) => [id, keys[0]!]));
    expect(keyOf.get(ids[0]!)).not.toBe(keyOf.get(ids[1]!));
    const eps = published.at(-1)!;
    expect(eps.map((e) => e.id).sort()).toEqual([...ids].sort());
    for (const e of eps) expect(e.key).toBe(keyOf.get(e.id)!);
    expect(ctl.projector.engineKey(ids[0]!)).toBe(keyOf.get(ids[0]!)!);
  });

  test("the key depends on the secret: another head node's secret gives another key", () => {
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    expect(controller(store, "secret-one-0123456789abcdef").ctl.projector.engineKey("r-1")).not.toBe(controller(store, "secret-two-0123456789abcdef").ctl.projector.engineKey("r-1"));
  });

  test("without a secret, assignments and endpoints carry no key", async () => {
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const { ctl, published } = controller(store, undefined);
    for (const d of defs) await ctl.intake.heartbeat(heartbeat(d));
    await ctl.catalog.putModels([model({ name: "m" })]);
    await ctl.loop.tick();
    const a = await allReady(ctl);
    await ctl.loop.tick();
    expect(a.map((x) => x.engine_key)).toEqual([null]);
    expect(published.at(-1)!.map((e) => "key" in e)).toEqual([false]);
  });
});

describe("the head node's engine secret", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  /** A head node's start as far as keys go: the secret from the data dir, the store in it. */
  function boot(dataDir: string) {
    const secret = resolveEngineSecret(dataDir);
    const store = new Store({ path: join(dataDir, "llmgw.db"), ...SQLITE_DEFAULTS });
    return { secret, store, ...controller(store, secret.token) };
  }

  test("is generated once, kept 0600 in the data dir, and gives the same keys after a restart", async () => {
    const dataDir = ensureDataDir(scratchDir("llmgw-engine-secret-"));
    dirs.push(dataDir);
    const first = boot(dataDir);
    expect(first.secret.source).toBe("generated");
    const c1 = first.ctl;
    for (const d of defs) await c1.intake.heartbeat(heartbeat(d));
    await c1.catalog.putModels([model({ name: "m", replicas: { min: 2 } })]);
    await c1.loop.tick();
    const c1Assigned = new Map(defs.map((d) => [d.name, c1.projector.response(d.name).assignments]));
    const before = await allReady(c1);
    expect(before).toHaveLength(2);
    expect(before.every((a) => a.engine_key !== null)).toBe(true);
    expect((statSync(join(dataDir, "engine.secret")).mode & 0o777).toString(8)).toBe("600");
    first.store.close();

    const second = boot(dataDir);
    expect(second.secret.source).toBe("stored");
    const c2 = second.ctl;
    // The agents come back reporting the engines they kept running.
    for (const d of defs) {
      const kept = c1Assigned.get(d.name) ?? [];
      await c2.intake.heartbeat({ ...heartbeat(d), replicas: kept.map((a) => ({ id: a.id, state: "ready", port: a.port, error: null })) });
    }
    await c2.loop.tick();
    const after = defs.flatMap((d) => c2.projector.response(d.name).assignments);
    expect(after).toHaveLength(2);
    const keys = (list: Assignment[]) => Object.fromEntries(list.map((a) => [a.id, a.engine_key]));
    expect(keys(after)).toEqual(keys(before));
    second.store.close();

    // A different data dir is a different head node: different keys for the same ids.
    const otherDir = ensureDataDir(scratchDir("llmgw-engine-secret-"));
    dirs.push(otherDir);
    const other = boot(otherDir);
    expect(other.ctl.projector.engineKey(before[0]!.id)).not.toBe(before[0]!.engine_key);
    other.store.close();
  });
});
