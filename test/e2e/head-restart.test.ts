// A restart of the head node must be invisible to the engines, end to end with the compiled
// binary and six simulated agents running twelve replicas of the built-in fake engine:
//   1. `serve` on SQLite restarted ten times, by SIGKILL and SIGTERM in turn, each time at once;
//   2. two `serve --ha` on one SQLite file, the leader stopped or killed five times so that the
//      standby takes over, the old one started again as a standby; most agents know both.
// Through all of it every replica keeps its id and its engine process (the same pid), no agent
// stops an engine, and no replica fails.

import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { EventView, ReplicaView } from "../../src/protocol/views";
import { fakeEnginesOf } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { ADMIN_TOKEN, HaCluster } from "../helpers/ha-cluster";
import { until } from "../helpers/until";

const NODES = ["n1", "n2", "n3", "n4", "n5", "n6"];
const REPLICAS = 12;
/** Twelve one-GPU replicas over six nodes of two GPUs each: every GPU busy. */
const CHAT = { replicas: { min: REPLICAS }, placement: "spread", profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] };
const HEARTBEAT_MS = 300;

/** Replica id → the pid of the engine serving its port, for the ready replicas that have one. */
function enginePids(bin: string, replicas: ReplicaView[]): Map<string, number> {
  const pidByPort = new Map(fakeEnginesOf(bin).map((e) => [e.port, e.pid]));
  const out = new Map<string, number>();
  for (const r of replicas) {
    const pid = r.endpoint ? pidByPort.get(Number(new URL(r.endpoint).port)) : undefined;
    if (r.state === "ready" && pid !== undefined) out.set(r.id, pid);
  }
  return out;
}

/** The replicas of `before` whose id is gone or whose engine is another process now. */
function lostSince(before: Map<string, number>, now: Map<string, number>): string[] {
  return [...before].filter(([id, pid]) => now.get(id) !== pid).map(([id]) => id);
}

/** How many times agents' logs (every file whose name starts with `prefix`) say they stopped an engine. */
function engineStops(dir: string, prefix: string): number {
  let n = 0;
  for (const f of readdirSync(dir).filter((x) => x.startsWith(prefix) && x.endsWith(".log")))
    for (const line of readFileSync(join(dir, f), "utf8").split("\n")) if (line.includes('"msg":"replica no longer assigned; stopping"')) n++;
  return n;
}

/** Waits until every node has heartbeated, and been answered, a few times since `since` (ms). */
async function heardFromAll(nodes: () => Promise<{ name: string; last_heartbeat: string }[]>, since: number): Promise<void> {
  await until(`every node heartbeating ${3 * HEARTBEAT_MS} ms after the change`, async () => {
    const list = await nodes().catch(() => []);
    return list.length === NODES.length && list.every((n) => Date.parse(n.last_heartbeat) >= since + 3 * HEARTBEAT_MS);
  }, 20_000);
}

describe("serve restarted 10 times on SQLite (SIGKILL and SIGTERM in turn) under 6 agents running 12 replicas", () => {
  let c: Cluster | undefined;
  afterAll(() => c?.cleanup(), 30_000);

  test("every replica keeps its id and its engine's pid; no engine stopped, no replica.failed", async () => {
    c = new Cluster(["--node-timeout", "15s"]);
    await c.startServe();
    for (const n of NODES) c.startAgent(n);
    await until("6 nodes ready", async () => (await c!.nodes()).filter((n) => n.state === "ready").length === NODES.length, 30_000);
    expect(await c.putModel("chat", CHAT)).toBe(201);
    const before = await until("12 ready replicas with their engines", async () => {
      const m = enginePids(c!.bin, await c!.replicas());
      return m.size === REPLICAS ? m : undefined;
    }, 30_000);

    const lost = new Set<string>();
    for (let i = 0; i < 10; i++) {
      const proc = c.serve.proc;
      proc.kill(i % 2 === 0 ? "SIGKILL" : "SIGTERM");
      await proc.exited;
      // Each restart a little later than the one before (0 to 900 ms after the exit): across them
      // the new server starts listening at every point of the agents' retries (500 ms after the
      // failure, then 1 s more), so some first requests meet it before its first tick.
      await Bun.sleep(i * 100);
      const restartedAt = Date.now();
      await c.startServe();
      await heardFromAll(() => c!.nodes(), restartedAt);
      for (const id of lostSince(before, enginePids(c.bin, await c.replicas()))) lost.add(id);
    }
    const stops = engineStops(c.dir, "agent-");
    console.log(`10 restarts of serve (SQLite): ${lost.size} of ${REPLICAS} replicas lost; agents stopped ${stops} engine(s)`);
    expect([...lost]).toEqual([]);
    expect(stops).toBe(0);
    expect(lostSince(before, enginePids(c.bin, await c.replicas()))).toEqual([]);
    expect((await c.events("replica.failed")).map((e) => e.message)).toEqual([]);
  }, 90_000);
});

describe("5 failovers between two serve --ha on one SQLite file under 6 agents running 12 replicas", () => {
  let c: HaCluster | undefined;
  afterAll(() => c?.cleanup(), 30_000);

  test("every replica keeps its id and its engine's pid; no engine stopped, no replica.failed", async () => {
    c = new HaCluster(["--lease-ttl", "2s", "--lease-renew", "500ms"]);
    const h = c;
    await h.startServe("cp-a");
    await until("cp-a leads", async () => (await h.health("cp-a"))?.status === 200);
    await h.startServe("cp-b");
    const a = h.serve("cp-a").adminUrl;
    const b = h.serve("cp-b").adminUrl;
    // Two agents list cp-a first, two cp-b first, one knows only cp-a and one only cp-b: each
    // failover moves some, others stay on a standby, and two wait for the one they know.
    const servers = [`${a},${b}`, `${b},${a}`, `${a},${b}`, `${b},${a}`, a, b];
    NODES.forEach((n, i) => h.startAgent(n, servers[i]!));
    const nodes = (name: string) => h.api<{ name: string; state: string; last_heartbeat: string }[]>(name, "/api/v1/nodes");
    await until("6 nodes ready", async () => (await nodes("cp-a")).filter((n) => n.state === "ready").length === NODES.length, 30_000);
    const put = await fetch(`${a}/api/v1/models/chat`, { method: "PUT", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(CHAT) });
    expect(put.status).toBe(201);
    const before = await until("12 ready replicas with their engines", async () => {
      const m = enginePids(h.bin, await h.replicas("cp-a"));
      return m.size === REPLICAS ? m : undefined;
    }, 30_000);

    const lost = new Set<string>();
    let leader = "cp-a";
    for (let i = 0; i < 5; i++) {
      const standby = leader === "cp-a" ? "cp-b" : "cp-a";
      const s = h.serve(leader);
      if (i % 2 === 0) h.kill9(leader);
      else s.proc.kill("SIGTERM");
      await s.proc.exited;
      const changedAt = Date.now();
      await until(`${standby} leads`, async () => (await h.health(standby))?.status === 200, 15_000);
      await h.startServe(leader);
      await until(`${leader} answers as a standby`, async () => (await h.health(leader))?.status === 503, 15_000);
      await heardFromAll(() => nodes(standby), changedAt);
      for (const id of lostSince(before, enginePids(h.bin, await h.replicas(standby)))) lost.add(id);
      leader = standby;
    }
    const stops = engineStops(h.dir, "agent-");
    console.log(`5 failovers (SQLite, two control planes): ${lost.size} of ${REPLICAS} replicas lost; agents stopped ${stops} engine(s)`);
    expect([...lost]).toEqual([]);
    expect(stops).toBe(0);
    expect(lostSince(before, enginePids(h.bin, await h.replicas(leader)))).toEqual([]);
    const failed = (await h.api<EventView[]>(leader, "/api/v1/events?limit=1000")).filter((e) => e.kind === "replica.failed");
    expect(failed.map((e) => e.message)).toEqual([]);
  }, 90_000);
});
