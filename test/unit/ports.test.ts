// Engine ports and rendezvous blocks on a node address: every multi-node replica gets a block of
// ports for its engines' own rendezvous (SGLang binds --dist-init-addr's port and the six after
// it), which nothing else on that address is ever handed, and engine ports stay in the
// --engine-base-port range. Through the controller (what agents are told), and as a property over
// random fleets and ticks of the pure reconcile step.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { ManualScheduler } from "../../src/lib/scheduler";
import { type ReconcileConfig, reconcile, rendezvousPort } from "../../src/control/reconciler";
import type { Assignment } from "../../src/protocol/heartbeat";
import { Store, type ReplicaRow } from "../../src/store";
import { testControl } from "../helpers/control";
import { T0, heartbeat, model, snapshot, type NodeDef } from "../helpers/fleet";
import { RECONCILE_DEFAULTS, SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
/** SGLang's multi-node ports: dist_init_port + 0 … + 6; a block must hold at least these. */
const SGLANG_PORTS = 7;

/** The allocator's first candidate for a replica id (FNV-1a of the id), as reconcile/ports.ts computes it. */
function startOf(id: string, count: number): number {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619) >>> 0;
  return h % count;
}

describe("rendezvous blocks through the controller", () => {
  test("two multi-node SGLang replicas whose leaders share a node address get non-overlapping blocks, outside every engine port", async () => {
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const clock = new ManualScheduler(T0);
    // Two ids the allocator starts at the same candidate port: the second replica's engine port
    // is the first's + 1, which is where consecutive rendezvous ports used to collide.
    const first = "r-aaaa0000";
    let second = "";
    for (let i = 0; second === ""; i++) if (startOf(`r-${i}`, 900) === startOf(first, 900) && `r-${i}` !== first) second = `r-${i}`;
    const ids = [first, second];
    const ctl = testControl({ store, scheduler: clock, log: pino({ level: "silent" }), nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000, newId: () => ids.shift()! });
    const defs: NodeDef[] = ["n1", "n2", "n3", "n4"].map((name) => ({ name, fabrics: ["ib"], gpus: [H, H] }));
    // One address for all four: simulated nodes, or nodes behind one NAT.
    const beat = async (d: NodeDef) => await ctl.intake.heartbeat({ ...heartbeat(d), address: "10.9.9.9" });
    for (const d of defs) await beat(d);
    await ctl.catalog.putModels([model({ name: "sg", replicas: { min: 2 }, profiles: [{ name: "p", engine: "sglang", gpu_class: H, gpus: 2, nodes: 2 }] })]);
    await ctl.loop.tick();
    const all: Assignment[] = [];
    for (const d of defs) all.push(...(await beat(d)).assignments);
    expect(all.length).toBe(4);
    const leaders = all.filter((a) => a.shard.rank === 0);
    expect(new Set(leaders.map((a) => a.id))).toEqual(new Set([first, second]));
    const [a, b] = leaders.map((l) => l.shard.leader_port);
    expect(Math.abs(a! - b!)).toBeGreaterThanOrEqual(8);
    for (const x of all) {
      expect(x.port).toBeGreaterThanOrEqual(8100);
      expect(x.port).toBeLessThan(9000);
      for (const lp of [a!, b!]) expect(x.port >= lp && x.port < lp + SGLANG_PORTS).toBe(false);
    }
    // Every shard of a replica is told the same rendezvous port.
    for (const l of leaders) expect(all.filter((x) => x.id === l.id).map((x) => x.shard.leader_port)).toEqual([l.shard.leader_port, l.shard.leader_port]);
    store.close();
  });
});

/** A small deterministic PRNG (mulberry32), so a failing seed can be replayed. */
function rng(seed: number) {
  let t = seed >>> 0;
  return () => {
    t = (t + 0x6d2b79f5) >>> 0;
    let x = Math.imul(t ^ (t >>> 15), 1 | t);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

describe("property: random fleets and placements", () => {
  test("on every address: engine ports distinct and in range, blocks of multi-node replicas disjoint and free of engine ports", () => {
    for (let seed = 1; seed <= 60; seed++) {
      const rand = rng(seed);
      const pick = <T>(xs: T[]) => xs[Math.floor(rand() * xs.length)]!;
      const portCount = pick([40, 64, 100, 900]);
      const cfg: ReconcileConfig = { ...RECONCILE_DEFAULTS, basePort: pick([8100, 20000, 63000]), portCount };
      // Nodes share a few addresses, so leaders meet on one.
      const addresses = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].slice(0, 1 + Math.floor(rand() * 3));
      const defs: NodeDef[] = Array.from({ length: 6 + Math.floor(rand() * 14) }, (_, i) => ({ name: `n${String(i).padStart(2, "0")}`, fabrics: ["ib"], gpus: [H, H, H, H] }));
      const models = Array.from({ length: 2 + Math.floor(rand() * 4) }, (_, i) => {
        const nodes = pick([1, 1, 2, 3]);
        return model({ name: `m${i}`, replicas: { min: 1 + Math.floor(rand() * 4) }, placement: pick(["binpack", "spread"] as const), profiles: [{ name: "default", engine: pick(["sglang", "vllm"] as const), gpu_class: H, gpus: pick([1, 2, 4]), nodes }] });
      });
      const snap = snapshot({ nodes: defs, models });
      snap.nodes.forEach((n, i) => (n.address = addresses[i % addresses.length]!));
      let replicas: ReplicaRow[] = [];
      let n = 0;
      for (let tick = 0; tick < 6; tick++) {
        const plan = reconcile({ snapshot: { ...snap, replicas }, now: T0, lastUsed: new Map(), config: cfg, newId: () => `r-${seed}-${n++}` });
        const created: ReplicaRow[] = plan.create.map((c) => ({ id: c.id, model: c.model, profile: c.profile, state: "ready", shards: c.shards, port: c.port, endpoint: c.endpoint, failures: 0, error: null, createdAt: T0, updatedAt: T0, readyAt: T0 }));
        // Some replicas go away between ticks, so ports and blocks are handed out again.
        replicas = [...replicas.filter(() => rand() > 0.3), ...created];
        check(replicas, snap.nodes, cfg, seed);
      }
    }
  });
});

function check(replicas: ReplicaRow[], nodes: { name: string; address: string }[], cfg: ReconcileConfig, seed: number) {
  const addr = new Map(nodes.map((x) => [x.name, x.address]));
  const ports = new Map<string, number[]>();
  const blocks = new Map<string, number[]>();
  for (const r of replicas) {
    const port = r.port!;
    expect({ seed, port, inRange: port >= cfg.basePort && port < cfg.basePort + cfg.portCount }).toEqual({ seed, port, inRange: true });
    for (const a of new Set(r.shards.map((s) => addr.get(s.node)!))) {
      ports.set(a, [...(ports.get(a) ?? []), port]);
      if (r.shards.length > 1) blocks.set(a, [...(blocks.get(a) ?? []), rendezvousPort(port, cfg)]);
    }
  }
  for (const [a, list] of ports) {
    expect({ seed, a, distinct: new Set(list).size === list.length }).toEqual({ seed, a, distinct: true });
    const bs = [...(blocks.get(a) ?? [])].sort((x, y) => x - y);
    for (let i = 1; i < bs.length; i++) expect({ seed, a, gap: bs[i]! - bs[i - 1]! >= 8 }).toEqual({ seed, a, gap: true });
    for (const b of bs) {
      expect(b + 8).toBeLessThanOrEqual(65536);
      for (const p of list) expect({ seed, a, p, b, inside: p >= b && p < b + SGLANG_PORTS }).toEqual({ seed, a, p, b, inside: false });
    }
  }
}
