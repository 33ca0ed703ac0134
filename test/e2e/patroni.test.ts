// The store replicated by Patroni, through the compiled binary and real components: etcd 3.4,
// three Patroni 3.0.2 members running PostgreSQL 15 (test/helpers/patroni.ts), and `serve
// --store <multi-host URL> --patroni <REST URLs>`.
//   a. The summary's `store` lists the three members as Patroni reports them (leader lag 0,
//      replicas with a byte lag), in `llmgw status -o json` and in the human view; a Patroni
//      nobody answers for gives `store_error` naming what was tried.
//   b. A failover (kill -9 of the primary's postmaster) and then a planned switchover (POST
//      /switchover), each under load: simulated agents heartbeating, new nodes registering,
//      `llmgw apply` in a loop. serve reconnects to the new primary by itself; every heartbeat
//      and every apply it acknowledged is in the store afterwards (nothing acknowledged lost);
//      `store` shows the new leader and lag; no store_error once it is over. The times from
//      the kill to the new primary and to serve writing again are printed. A second control
//      plane (cp2) on the same store takes half the agents; afterwards one of the two leads,
//      the other stands by, and both show the same nodes.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ModelView, NodeView, Summary } from "../../src/protocol/views";
import { STORE_LAG_WARN } from "../../src/cli/status";
import { heartbeat } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { type PatroniCluster, SUPERUSER_PASSWORD, startPatroni } from "../helpers/patroni";
import { freePort } from "../helpers/ports";
import postgres from "postgres";

let pg: PatroniCluster;
let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
/** A second control plane on the same store (its own data dir holding the first's tokens and engine secret). */
let serve2: Awaited<ReturnType<typeof startServe>>;
let dir2: string;

async function runAsync(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const p = Bun.spawn([bin, ...args], { cwd: dir, env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, stdout, stderr };
}

async function summary(): Promise<Summary | undefined> {
  const t0 = performance.now();
  const r = await runAsync(["status", "-o", "json"]);
  // A slow answer is what stretches the polling waits below past their bounds: said when it happens.
  const took = performance.now() - t0;
  if (took > 5_000) console.log(`patroni: status took ${Math.round(took)} ms (exit ${r.code}${r.code === 0 ? "" : `: ${r.stderr.trim().slice(0, 200)}`})`);
  return r.code === 0 ? (JSON.parse(r.stdout) as Summary) : undefined;
}

beforeAll(async () => {
  pg = await startPatroni({ log: (l) => console.log(l) });
  ({ dir, bin } = scratchWithBinary());
  const flags = ["--store", pg.url, "--patroni", pg.members.map((m) => m.restUrl).join(","), "--heartbeat-interval", "1s", "--reconcile-interval", "1s", "--node-timeout", "60s"];
  serve = await startServe(bin, dir, [...flags, "--name", "cp1"]);
  const second = scratchWithBinary();
  dir2 = second.dir;
  mkdirSync(join(dir2, "llmgw-data"), { mode: 0o700 });
  for (const f of ["admin.token", "join.token", "engine.secret"]) copyFileSync(join(dir, "llmgw-data", f), join(dir2, "llmgw-data", f));
  serve2 = await startServe(second.bin, dir2, [...flags, "--name", "cp2"]);
}, 240_000);

afterAll(async () => {
  for (const s of [serve2, serve]) {
    s?.proc.kill("SIGTERM");
    await Promise.race([s?.proc.exited, Bun.sleep(10_000)]);
    if (s && s.proc.exitCode === null) s.proc.kill("SIGKILL");
  }
  if (dir2) rmSync(dir2, { recursive: true, force: true });
  await pg?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe("the summary's store, from Patroni", () => {
  test("status -o json lists the three members: the leader with lag 0, the replicas with a byte lag; the human view says it", async () => {
    const leader = (await pg.leader())!.name;
    const s = await until("status to list three store members", async () => {
      const s = await summary();
      // Right after start a replica can still be replaying the base backup (MiB behind), which the
      // human view rightly calls out; wait for the steady state this test describes.
      return s && s.store.length === 3 && s.store.every((m) => m.state === "running" && m.lag >= 0 && m.lag <= STORE_LAG_WARN) ? s : undefined;
    }, 30_000);
    expect(s.store_error).toBeUndefined();
    expect(s.store.map((m) => m.name)).toEqual(["pg1", "pg2", "pg3"]);
    const l = s.store.find((m) => m.name === leader)!;
    expect(l).toEqual({ name: leader, host: `127.0.0.1:${pg.members.find((m) => m.name === leader)!.pgPort}`, role: "leader", state: "running", lag: 0 });
    for (const m of s.store.filter((x) => x.name !== leader)) {
      expect(["replica", "sync_standby"]).toContain(m.role);
      expect(m.lag).toBeGreaterThanOrEqual(0);
    }
    expect(s.store.some((m) => m.role === "sync_standby")).toBe(true);
    const human = run(bin, ["status"], { cwd: dir });
    expect(human.code).toBe(0);
    // Piped: 80 columns, the Store line's continuations under its text.
    expect(human.stdout.replace(/\n {16}/g, " ")).toMatch(new RegExp(`^Store {11}${leader} leads · pg\\d (replica|sync standby) running, [\\d.]+ (B|KiB|MiB) behind · pg\\d (replica|sync standby) running`, "m"));
    expect(human.stdout).not.toContain("Attention");
    // The store URL's password appears nowhere a user sees.
    expect(JSON.stringify(s)).not.toContain(SUPERUSER_PASSWORD);
  }, 60_000);

  test("a Patroni nobody answers for: store_error names the URL, the human view puts it under Attention", async () => {
    const scratch = scratchWithBinary();
    const dead = `http://127.0.0.1:${freePort()}`;
    const other = await startServe(scratch.bin, scratch.dir, ["--patroni", dead]);
    try {
      const s = await until("store_error", () => {
        const r = run(scratch.bin, ["status", "-o", "json"], { cwd: scratch.dir });
        const s = JSON.parse(r.stdout) as Summary;
        return s.store_error?.startsWith("no Patroni member answered") ? s : undefined;
      }, 20_000);
      expect(s.store_error).toContain(dead);
      expect(s.store).toEqual([]);
      // Piped: 80 columns, the Store line's continuations under its text.
      const human = run(scratch.bin, ["status"], { cwd: scratch.dir }).stdout.replace(/\n {16}/g, " ");
      expect(human).toContain(`Store           no Patroni member answered GET /cluster: ${dead} (`);
      expect(human).toContain("Attention\n  cannot read the store's members: ");
    } finally {
      other.proc.kill("SIGTERM");
      await other.proc.exited;
      rmSync(scratch.dir, { recursive: true, force: true });
    }
  }, 60_000);
});

// ---- load: heartbeats, registrations, catalog writes ------------------------------------------

interface Load {
  /** Nodes whose registration serve acknowledged (200). */
  registered: Set<string>;
  /** Models whose `llmgw apply` exited 0. */
  applied: Set<string>;
  /** Wall times (ms) of each acknowledged write, by kind. */
  acks: { at: number; kind: "heartbeat" | "register" | "apply" }[];
  failures: { at: number; what: string }[];
  stop(): Promise<void>;
}

function startLoad(tag: string): Load {
  // Agents spread over both control planes: the third steady one and every other new node talk to the second.
  const senders = [heartbeatSender(serve), heartbeatSender(serve2)];
  const senderOf = (name: string) => senders[/-steady-3$|-late-\d*[13579]$/.test(name) ? 1 : 0]!;
  const load: Load = { registered: new Set(), applied: new Set(), acks: [], failures: [], stop: async () => {} };
  let on = true;
  const loops: Promise<void>[] = [];
  const beat = async (name: string, kind: "heartbeat" | "register") => {
    try {
      const r = await senderOf(name)({ ...heartbeat({ name, gpus: ["H100-80GB"] }), address: "127.0.0.1" } as never);
      if (r.status === 200) {
        load.acks.push({ at: Date.now(), kind });
        if (kind === "register") load.registered.add(name);
        return true;
      }
      load.failures.push({ at: Date.now(), what: `${name} ${r.status} ${(await r.text()).slice(0, 160)}` });
    } catch (e) {
      load.failures.push({ at: Date.now(), what: `${name} ${(e as Error).message}` });
    }
    return false;
  };
  // Three steady agents, every 300 ms.
  for (const n of [`${tag}-steady-1`, `${tag}-steady-2`, `${tag}-steady-3`])
    loops.push((async () => {
      while (on) {
        await beat(n, load.registered.has(n) ? "heartbeat" : "register");
        await Bun.sleep(300);
      }
    })());
  // A new node every 250 ms until acknowledged, then the next.
  loops.push((async () => {
    let k = 0;
    while (on) {
      const name = `${tag}-late-${k}`;
      if (await beat(name, "register")) k++;
      await Bun.sleep(250);
    }
  })());
  // The catalog: `llmgw apply` of one more model each round.
  loops.push((async () => {
    let k = 0;
    const models: string[] = [];
    while (on) {
      const name = `${tag}-model-${k}`;
      const file = join(dir, `catalog-${tag}.yaml`);
      writeFileSync(file, `models:\n${[...models, name].map((m) => `  - name: ${m}\n    replicas: {min: 0}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n`).join("")}`);
      const r = await runAsync(["apply", "-f", file]);
      if (r.code === 0) {
        load.acks.push({ at: Date.now(), kind: "apply" });
        load.applied.add(name);
        models.push(name);
        k++;
      } else load.failures.push({ at: Date.now(), what: `apply ${name}: ${r.stderr.trim().slice(0, 160)}` });
      await Bun.sleep(200);
    }
  })());
  load.stop = async () => {
    on = false;
    await Promise.all(loops);
  };
  return load;
}

/**
 * Everything serve acknowledged is in the store: each registered node and each applied model,
 * both as serve answers and as rows in PostgreSQL itself (the new primary, through the same
 * multi-host URL), so a serve that kept them elsewhere fails this.
 */
async function assertNothingLost(load: Load) {
  const nodes = JSON.parse((await runAsync(["nodes", "-o", "json"])).stdout) as NodeView[];
  const models = JSON.parse((await runAsync(["models", "-o", "json"])).stdout) as ModelView[];
  const nodeNames = new Set(nodes.map((n) => n.name));
  const modelNames = new Set(models.map((m) => m.name));
  expect([...load.registered].filter((n) => !nodeNames.has(n))).toEqual([]);
  expect([...load.applied].filter((m) => !modelNames.has(m))).toEqual([]);
  const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
  try {
    const rowNodes = new Set((await sql<{ name: string }[]>`select name from nodes`).map((r) => r.name));
    const rowModels = new Set((await sql<{ name: string }[]>`select name from models`).map((r) => r.name));
    expect([...load.registered].filter((n) => !rowNodes.has(n))).toEqual([]);
    expect([...load.applied].filter((m) => !rowModels.has(m))).toEqual([]);
    expect(load.registered.size).toBeGreaterThan(3);
  } finally {
    await sql.end();
  }
}

/** Both control planes answer after the fault, one leads, and the standby reads the same nodes from the store. */
async function assertControlPlanes() {
  const view = await until("both control planes to answer, one leading", async () => {
    const s = await summary();
    const m = s?.control_planes.members ?? [];
    return m.length === 2 && m.filter((x) => x.state === "leading").length === 1 && m.filter((x) => x.state === "standing by").length === 1 ? s!.control_planes : undefined;
  }, 30_000);
  expect(view.members!.map((m) => m.name).sort()).toEqual(["cp1", "cp2"]);
  const auth = (s: typeof serve) => ({ headers: { authorization: `Bearer ${s.adminToken}` } });
  const names = async (s: typeof serve) => ((await (await fetch(`${s.adminUrl}/api/v1/nodes`, auth(s))).json()) as NodeView[]).map((n) => n.name).sort();
  await until("the standby to show the same nodes as the leader", async () => JSON.stringify(await names(serve)) === JSON.stringify(await names(serve2)), 30_000);
}

async function storeSettled(notLeader: string) {
  return until(() => `status to show a new store leader other than ${notLeader}, no store_error`, async () => {
    const s = await summary();
    const l = s?.store.find((m) => m.role === "leader" && m.state === "running");
    return s && !s.store_error && l && l.name !== notLeader && s.store.length === 3 && s.store.filter((m) => m !== l).every((m) => m.lag >= 0) ? s : undefined;
  }, { timeoutMs: 60_000, everyMs: 250 });
}

/** Runs `fault` under load; returns the times from the fault to the new primary and to serve acknowledging writes again. */
async function underLoad(tag: string, fault: () => Promise<void>) {
  // The previous fault's old primary rejoins as a replica in the background (pg_rewind, catching
  // up); a fault is measured from a whole cluster, so wait for all three members to stream first.
  await until("all three store members running and streaming before the fault", async () => {
    const s = await summary();
    return s && !s.store_error && s.store.length === 3 && s.store.every((m) => m.state === "running" || m.state === "streaming") && s.store.every((m) => m.lag >= 0) ? s : undefined;
  }, { timeoutMs: 90_000, everyMs: 500 });
  const load = startLoad(tag);
  await until(() => `load to get going (last refusals: ${load.failures.slice(-4).map((f) => f.what).join(" | ")})`, () => load.acks.filter((a) => a.kind === "apply").length >= 2 && load.registered.size >= 4, 90_000);
  const old = (await pg.leader())!.name;
  const storeErrors = new Set<string>();
  let watching = true;
  const watcher = (async () => {
    while (watching) {
      const s = await summary();
      if (s?.store_error) storeErrors.add(s.store_error);
      await Bun.sleep(250);
    }
  })();
  try {
    return await measure(tag, load, old, storeErrors, fault);
  } finally {
    watching = false;
    await load.stop();
    await watcher;
  }
}

async function measure(tag: string, load: Load, old: string, storeErrors: Set<string>, fault: () => Promise<void>) {
  const t0 = Date.now();
  await fault();
  const newLeader = await pg.waitForLeader({ not: old, timeoutMs: 90_000, replicas: false });
  const primaryMs = Date.now() - t0;
  // Writing again: a registration and an apply acknowledged after the new primary took over
  // (a write acknowledged between the fault and then went to the old primary before it stopped).
  const tPrimary = Date.now();
  await until(() => `serve to acknowledge a registration and an apply on the new primary (last refusals: ${load.failures.slice(-4).map((f) => f.what).join(" | ")})`, () => load.acks.some((a) => a.at > tPrimary && a.kind === "register") && load.acks.some((a) => a.at > tPrimary && a.kind === "apply"), 60_000);
  const firstAfter = Math.min(...load.acks.filter((a) => a.at > tPrimary).map((a) => a.at));
  // The longest stretch with no acknowledged write of any kind, around the fault.
  const times = load.acks.map((a) => a.at).filter((t) => t >= t0 - 2000).sort((a, b) => a - b);
  const gap = times.reduce((g, t, i) => (i === 0 ? g : Math.max(g, t - times[i - 1]!)), 0);
  await Bun.sleep(1500);
  await load.stop();
  const s = await storeSettled(old);
  await assertNothingLost(load);
  await assertControlPlanes();
  const figures = { from: old, to: newLeader, primaryMs, writingAgainMs: firstAfter - t0, longestNoAckMs: gap, acked: load.acks.length, refused: load.failures.length, storeErrors: [...storeErrors].length };
  console.log(`${tag}: ${JSON.stringify(figures)}`);
  if (load.failures.length > 0) console.log(`${tag}: first refusals: ${load.failures.slice(0, 3).map((f) => f.what).join(" | ")}`);
  return { s, figures, load };
}

describe("failover and switchover under load", () => {
  test("kill -9 of the primary's postgres: serve reconnects to the new primary, nothing it acknowledged is lost", async () => {
    const { s, figures } = await underLoad("failover", async () => {
      await pg.killPostgres();
    });
    expect(s.store.find((m) => m.role === "leader")!.name).toBe(figures.to);
    expect(s.store.find((m) => m.role === "leader")!.lag).toBe(0);
    expect(figures.writingAgainMs).toBeLessThan(60_000);
  }, 240_000);

  test("a planned switchover: the same", async () => {
    const { s, figures } = await underLoad("switchover", async () => {
      await pg.switchover();
    });
    expect(s.store.find((m) => m.role === "leader")!.name).toBe(figures.to);
    const human = run(bin, ["status"], { cwd: dir }).stdout.replace(/\n {16}/g, " ");
    expect(human).toContain(`Store           ${figures.to} leads · `);
    expect(human).toMatch(/^Control planes  cp[12]( \(this one\))? leads · 1 standing by \(cp[12]( \(this one\))?\)$/m);
    expect(human).not.toContain("Attention");
  }, 240_000);
});
