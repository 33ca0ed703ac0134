// The node agent with several servers, and the leader epoch it fences assignments with: a real
// head node behind a dead address, and small stand-in control planes on 127.0.0.1 (they speak
// the agent API's two routes with the protocol's own schemas, can stand by with a 503, die,
// come back on the same port, and answer for a given leader epoch). Real fake-engine children
// show that a failover or a refused stale leader leaves the engines as they are.

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { EPOCH_FILE, NodeAgent, type AgentTiming, type NodeAgentOptions } from "../../src/agent/agent";
import { isAlive, ReplicaProcess } from "../../src/agent/runner";
import { AgentConfig } from "../../src/config";
import { Assignment, AssignmentsQuery, HeartbeatRequest, type HeartbeatResponse } from "../../src/protocol/heartbeat";
import type { NodeView } from "../../src/protocol/views";
import { type TestServer, testServer } from "../helpers/server";
import { until } from "../helpers/until";
import { replicaStarts as starts } from "../helpers/agent-state";
// Engine ports from below the ephemeral range (see ports.ts): one from it can be taken by any outgoing connection.
import { freePort } from "../helpers/ports";

const FAKE_ENGINE = join(import.meta.dir, "../../src/sim/fake-engine.ts");
const SELF_EXE = [process.execPath, FAKE_ENGINE];
const FAST: Partial<AgentTiming> = { backoffInitialMs: 50, backoffMaxMs: 200, longPollWaitMs: 5_000, heartbeatIntervalMs: 1_000 };
const JOIN_TOKEN = "stub-join-token-0123456789";

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

type Line = { level: number; msg: string; [k: string]: unknown };
function captureLog(): { log: pino.Logger; lines: Line[] } {
  const lines: Line[] = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}

/** What the agent logged (info and above), for a failure's message: the run that showed it says why. */
function agentSaid(lines: Line[]): string {
  return `the agent said:\n${lines.filter((l) => l.level >= 30).map((l) => JSON.stringify(l)).join("\n")}`;
}

/** Runs `step`; should it fail, the error carries what the agent logged. */
async function saying<T>(lines: Line[], step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (e) {
    throw new Error(`${(e as Error).message}; ${agentSaid(lines)}`);
  }
}

function makeAgent(config: Record<string, unknown>, extra: Partial<NodeAgentOptions> = {}): NodeAgent {
  const cfg = AgentConfig.parse({
    name: "sim-01",
    address: "127.0.0.1",
    engine_host: "127.0.0.1",
    state_dir: tempDir("llmgw-agent-fo-"),
    health_interval: "50ms",
    stop_grace: "5s",
    logs_listen: "off",
    simulate: "H100-80GB:1",
    token: JOIN_TOKEN,
    ...config,
  });
  const agent = new NodeAgent({ config: cfg, log: pino({ level: "silent" }), selfExe: SELF_EXE, timing: FAST, ...extra });
  cleanup.push(() => agent.stop());
  return agent;
}

const stateDirOf = (agent: NodeAgent) => (agent as unknown as { config: AgentConfig }).config.state_dir;

function assignment(id: string, port: number): Assignment {
  return Assignment.parse({
    id,
    model: "llama-3.1-8b",
    served_names: ["llama-3.1-8b"],
    profile: "h100",
    engine: "vllm",
    port,
    gpus: [0],
    gpu_uuids: ["GPU-0"],
    shard: { rank: 0, size: 1, leader_address: "127.0.0.1", leader_port: port + 10_000 > 65_535 ? port - 10_000 : port + 10_000 },
  });
}

function pidOf(stateDir: string, id: string): number | undefined {
  try {
    return (JSON.parse(readFileSync(ReplicaProcess.statePath(join(stateDir, "replicas"), id), "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

/**
 * A stand-in control plane. Several share one set of accepted bearer tokens (one store): the
 * join token, and the credential the first of them hands out. `standby` answers both routes
 * 503 as a control plane that does not serve agents would.
 */
class StubPlane {
  assignments: Assignment[] = [];
  generation: number;
  /** The leader epoch its answers carry; undefined leaves the field out (a single head node). */
  epoch: number | undefined;
  intervalMs = 1_000;
  standby = false;
  /** Hands this credential to a node that heartbeats with the join token. */
  credential: string | undefined;
  readonly heartbeats: HeartbeatRequest[] = [];
  readonly bearers: string[] = [];
  polls = 0;
  private readonly waiters = new Set<() => void>();
  private server: ReturnType<typeof Bun.serve> | null = null;
  port = 0;

  constructor(
    private readonly tokens: Set<string>,
    o: { generation?: number; epoch?: number } = {},
  ) {
    this.generation = o.generation ?? 0;
    this.epoch = o.epoch;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  start(): void {
    this.server = Bun.serve({ hostname: "127.0.0.1", port: this.port, idleTimeout: 60, fetch: (req) => this.fetch(req) });
    this.port = this.server.port!;
  }

  async stop(): Promise<void> {
    for (const w of [...this.waiters]) w();
    await this.server?.stop(true);
    this.server = null;
  }

  /** A new set; `at` changes the epoch answers carry (`{ epoch: undefined }` leaves it out). */
  set(assignments: Assignment[], at?: { epoch: number | undefined }): void {
    this.assignments = assignments;
    if (at) this.epoch = at.epoch;
    this.generation++;
    for (const w of [...this.waiters]) w();
  }

  private answer(extra: Partial<HeartbeatResponse> = {}): Response {
    const body: HeartbeatResponse = { assignments: this.assignments, heartbeat_interval_ms: this.intervalMs, generation: this.generation, ...extra };
    if (this.epoch !== undefined) body.epoch = this.epoch;
    return Response.json(body);
  }

  private async fetch(req: Request): Promise<Response> {
    if (this.standby) return Response.json({ error: { code: "standing_by", message: "standing by: this control plane does not lead" } }, { status: 503 });
    const bearer = (req.headers.get("authorization") ?? "").replace(/^Bearer /, "");
    this.bearers.push(bearer);
    if (!this.tokens.has(bearer)) return Response.json({ error: { code: "unauthorized", message: "missing or wrong bearer token" } }, { status: 401 });
    const url = new URL(req.url);
    if (req.method === "POST" && url.pathname === "/agent/v1/heartbeat") {
      this.heartbeats.push(HeartbeatRequest.parse(await req.json()));
      if (bearer === JOIN_TOKEN && this.credential) {
        this.tokens.add(this.credential);
        return this.answer({ credential: this.credential });
      }
      return this.answer();
    }
    if (req.method === "GET" && url.pathname === "/agent/v1/assignments") {
      this.polls++;
      const q = AssignmentsQuery.parse(Object.fromEntries(url.searchParams));
      if (q.generation === this.generation && q.wait_ms > 0) {
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            this.waiters.delete(done);
            resolve();
          };
          const timer = setTimeout(done, q.wait_ms);
          this.waiters.add(done);
          req.signal.addEventListener("abort", done);
        });
      }
      return this.answer();
    }
    return Response.json({ error: { code: "not_found", message: "no such route" } }, { status: 404 });
  }
}

function planes(n: number, o: Array<{ generation?: number; epoch?: number }> = []): StubPlane[] {
  const tokens = new Set([JOIN_TOKEN]);
  return Array.from({ length: n }, (_, i) => {
    const p = new StubPlane(tokens, o[i]);
    p.start();
    cleanup.push(() => p.stop());
    return p;
  });
}

const switches = (lines: Line[]) => lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith("switching to") && l.level >= 40);
const refusals = (lines: Line[]) => lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith("refusing assignments from"));

// ---- failover -------------------------------------------------------------------------------

describe("failover between servers", () => {
  let s: TestServer;

  test("a dead first server: the agent registers with the real head node behind it, logs one switch, and runs what it assigns", async () => {
    const base = freePort(16);
    s = await testServer({ heartbeat_interval: "200ms", engine_base_port: base });
    cleanup.push(() => s.stop());
    const dead = `http://127.0.0.1:${await freePort()}`;
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: `${dead},${s.adminUrl}`, token: s.joinToken, simulate: "H100-80GB:1" }, { log });
    await agent.start();
    expect(agent.server).toBe(s.adminUrl);
    const node = (await (await s.admin("/api/v1/nodes/sim-01")).json()) as NodeView;
    expect(node.state).toBe("ready");
    // One switch, with the fields an operator filters on; the long poll followed without a switch of its own.
    expect(switches(lines).map((l) => [l.from, l.to])).toEqual([[dead, s.adminUrl]]);
    expect(String(switches(lines)[0]!.reason)).toStartWith("did not answer");
    // The credential came from the head node that answered, and names it.
    expect(JSON.parse(readFileSync(join(stateDirOf(agent), "node.credential"), "utf8")).server).toBe(s.adminUrl);

    const put = await s.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }) });
    expect(put.status).toBeLessThan(300);
    await saying(lines, () =>
      until("the replica ready on the head node", async () => {
        await s.tick();
        const reps = (await (await s.admin("/api/v1/replicas")).json()) as Array<{ state: string }>;
        return reps.some((r) => r.state === "ready");
      }),
    );
    expect(agent.reports().map((r) => r.state)).toEqual(["ready"]);
    expect(switches(lines)).toHaveLength(1);
  });

  test("a 503 standing by sends it to the next; when that one dies it goes back to the first, keeping its credential, generation-independent set and engines", async () => {
    const [a, b] = planes(2, [{ generation: 40 }, { generation: 2 }]);
    a!.standby = true;
    b!.credential = "node-credential-from-the-store-0123456789abcdef";
    const port = await freePort();
    b!.set([assignment("r1", port)]);
    a!.assignments = [assignment("r1", port)];
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: [a!.url, b!.url] }, { log });
    const stateDir = stateDirOf(agent);
    await agent.start();
    expect(agent.server).toBe(b!.url);
    expect(switches(lines).map((l) => [l.from, l.to, l.reason])).toEqual([[a!.url, b!.url, "answered 503 standing by: this control plane does not lead"]]);
    await until("r1 ready", () => agent.reports().some((r) => r.id === "r1" && r.state === "ready"));
    const pid = pidOf(stateDir, "r1")!;
    expect(b!.polls).toBeGreaterThan(0);

    // b dies; a serves agents now (the same set, under its own generation).
    a!.standby = false;
    const aPolls = a!.polls;
    await b!.stop();
    await until("heartbeats at a", () => a!.heartbeats.length >= 2);
    expect(agent.server).toBe(a!.url);
    expect(switches(lines).map((l) => [l.from, l.to])).toEqual([
      [a!.url, b!.url],
      [b!.url, a!.url],
    ]);
    // The node's own credential, not the join token: the state went along.
    expect(a!.bearers.filter((t) => t !== "")).not.toContain(JOIN_TOKEN);
    expect(a!.bearers.at(-1)).toBe(b!.credential!);
    await until("a's generation applied", () => agent.generation === a!.generation);
    expect(pidOf(stateDir, "r1")).toBe(pid);
    expect(isAlive(pid)).toBe(true);
    expect(starts(stateDir, "r1")).toBe(1);
    expect(a!.heartbeats.at(-1)!.replicas.map((r) => [r.id, r.state])).toEqual([["r1", "ready"]]);

    // The long poll followed: a change at a reaches the agent without waiting for a heartbeat.
    expect(a!.polls).toBeGreaterThan(aPolls);
    a!.intervalMs = 60_000;
    a!.set([]);
    await until("r1 stopped after a's change", () => agent.reports().length === 0 && !isAlive(pid));
  });

  test("every server down: one error for the whole list, not one per attempt; the first to come back is used", async () => {
    const [a, b] = planes(2);
    await a!.stop();
    await b!.stop();
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: `${a!.url},${b!.url}` }, { log });
    let registered = false;
    const starting = agent.start().then(() => {
      registered = true;
    });
    await until("several rounds over the list", () => lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith("switching to") && l.level === 20).length >= 4);
    expect(registered).toBe(false);
    expect(switches(lines)).toHaveLength(1);
    expect(lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith("no server answers"))).toHaveLength(1);
    b!.start();
    await starting;
    expect(agent.server).toBe(b!.url);
    expect(b!.heartbeats.length).toBeGreaterThan(0);
    expect(lines.some((l) => l.msg === `${b!.url} answers again`)).toBe(true);
  });
});

// ---- epoch fencing --------------------------------------------------------------------------

describe("leader epochs", () => {
  test("an answer of epoch 3 after epoch 4 is refused: assignments unchanged, the engine untouched, one warning; epoch 5 is adopted at once", async () => {
    const [p] = planes(1, [{ epoch: 4 }]);
    const port = await freePort();
    p!.set([assignment("r1", port)]);
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: p!.url }, { log });
    const stateDir = stateDirOf(agent);
    await agent.start();
    await until("r1 ready", () => agent.reports().some((r) => r.id === "r1" && r.state === "ready"));
    const pid = pidOf(stateDir, "r1")!;
    const gen = agent.generation;
    expect(agent.highestEpoch).toBe(4);
    expect(JSON.parse(readFileSync(join(stateDir, EPOCH_FILE), "utf8"))).toEqual({ epoch: 4, server: p!.url });

    // An old leader's empty set: the long poll has it at once, heartbeats every second.
    const [hb, polls] = [p!.heartbeats.length, p!.polls];
    p!.set([], { epoch: 3 });
    await until("stale answers to both loops", () => p!.heartbeats.length >= hb + 2 && p!.polls >= polls + 2);
    expect(agent.generation).toBe(gen);
    expect(agent.reports().map((r) => [r.id, r.state])).toEqual([["r1", "ready"]]);
    expect(pidOf(stateDir, "r1")).toBe(pid);
    expect(isAlive(pid)).toBe(true);
    expect(starts(stateDir, "r1")).toBe(1);
    expect(agent.highestEpoch).toBe(4);
    const warned = refusals(lines);
    expect(warned).toHaveLength(1);
    expect(warned[0]).toMatchObject({ level: 40, server: p!.url, epoch: 3, highest_epoch: 4 });
    expect(warned[0]!.msg).toContain("leader epoch 3, older than epoch 4");
    expect(warned[0]!.msg).toContain(join(stateDir, EPOCH_FILE));

    p!.set([], { epoch: 5 });
    await until("epoch 5's set applied", () => agent.reports().length === 0 && !isAlive(pid));
    expect(agent.highestEpoch).toBe(5);
    expect(JSON.parse(readFileSync(join(stateDir, EPOCH_FILE), "utf8")).epoch).toBe(5);
    expect(refusals(lines)).toHaveLength(1);
  });

  test("the highest epoch survives a restart: the next agent refuses the old leader from its first answer and keeps the engine it adopted", async () => {
    const [p] = planes(1, [{ epoch: 4 }]);
    const stateDir = tempDir("llmgw-agent-epoch-");
    const port = await freePort();
    p!.set([assignment("r1", port)]);
    const first = makeAgent({ server: p!.url, state_dir: stateDir, keep_replicas: true });
    await first.start();
    await until("r1 ready", () => first.reports().some((r) => r.id === "r1" && r.state === "ready"));
    const pid = pidOf(stateDir, "r1")!;
    await first.stop();
    cleanup.push(() => {
      if (isAlive(pid)) process.kill(-pid, "SIGKILL");
    });

    p!.set([], { epoch: 3 });
    const { log, lines } = captureLog();
    const second = makeAgent({ server: p!.url, state_dir: stateDir, keep_replicas: true }, { log });
    await second.start();
    expect(second.highestEpoch).toBe(4);
    await until("the long poll's stale answer too", () => refusals(lines).length === 1 && p!.polls >= 2);
    expect(second.reports().map((r) => r.id)).toEqual(["r1"]);
    expect(isAlive(pid)).toBe(true);
    expect(refusals(lines)).toHaveLength(1);
  });

  test("an answer without an epoch after epoch 2 counts as epoch 0 and is refused; without the epoch file the same agent follows it", async () => {
    const [p] = planes(1, [{ epoch: 2 }]);
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: p!.url }, { log });
    const stateDir = stateDirOf(agent);
    await agent.start();
    await until("epoch 2 seen", () => agent.highestEpoch === 2);
    const gen = agent.generation;
    p!.set([assignment("r1", await freePort())], { epoch: undefined });
    await until("refused", () => refusals(lines).length === 1);
    expect(refusals(lines)[0]!.msg).toContain("no leader epoch (counted as 0");
    expect(agent.generation).toBe(gen);
    expect(agent.reports()).toEqual([]);
    await agent.stop();

    // Going back to one head node: the operator removes the epoch file.
    rmSync(join(stateDir, EPOCH_FILE));
    const next = makeAgent({ server: p!.url, state_dir: stateDir });
    await next.start();
    await until("the single head node's set applied", () => next.generation === p!.generation && next.reports().length === 1);
    expect(next.highestEpoch).toBe(0);
    expect(existsSync(join(stateDir, EPOCH_FILE))).toBe(false);
  });

  test("with several servers, one answering for an older leader is left for the next", async () => {
    const [old, current] = planes(2, [{ epoch: 3, generation: 9 }, { epoch: 4, generation: 1 }]);
    const stateDir = tempDir("llmgw-agent-epoch-");
    writeFileSync(join(stateDir, EPOCH_FILE), JSON.stringify({ epoch: 4, server: current!.url }));
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: [old!.url, current!.url], state_dir: stateDir }, { log });
    await agent.start();
    await until("the current leader's set", () => agent.generation === current!.generation && agent.server === current!.url);
    expect(switches(lines).map((l) => [l.from, l.to, l.reason])).toEqual([[old!.url, current!.url, "answers for leader epoch 3, older than epoch 4"]]);
    expect(refusals(lines)).toHaveLength(1);
  });

  test("a single head node without epochs writes no epoch file (as before)", async () => {
    const [p] = planes(1);
    const agent = makeAgent({ server: p!.url });
    await agent.start();
    p!.set([]);
    await until("the set applied", () => agent.generation === p!.generation);
    expect(agent.highestEpoch).toBe(0);
    expect(existsSync(join(stateDirOf(agent), EPOCH_FILE))).toBe(false);
  });

  test("an epoch file this agent did not write stops the start, naming it", async () => {
    const stateDir = tempDir("llmgw-agent-epoch-");
    writeFileSync(join(stateDir, EPOCH_FILE), "four");
    const [p] = planes(1);
    const err = await makeAgent({ server: p!.url, state_dir: stateDir }).start().then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toBe(`${join(stateDir, EPOCH_FILE)} is not a leader epoch file this agent wrote; remove it (the agent then follows whichever leader answers) and start again`);
  });
});

// ---- two real control planes ----------------------------------------------------------------

describe("two control planes on one store", () => {
  test("the leader stops: the agent moves to the standby, which leads at epoch 2; the replica and its engine stay", async () => {
    const base = freePort(16);
    const dir = tempDir("llmgw-agent-ha-");
    const common = {
      store: join(dir, "llmgw.db"),
      ha: true,
      lease_ttl: "60s",
      lease_renew: "1s",
      heartbeat_interval: "200ms",
      engine_base_port: base,
      admin_token: "llmgw_admin_shared_token_for_both_heads",
      join_token: "llmgw_join_shared_token_for_both_heads",
    };
    const a = await testServer({ ...common, name: "cp-a" });
    let aStopped = false;
    cleanup.push(() => (aStopped ? undefined : a.stop()));
    const bData = tempDir("llmgw-agent-ha-b-");
    writeFileSync(join(bData, "engine.secret"), readFileSync(join(a.dataDir, "engine.secret")));
    const b = await testServer({ ...common, name: "cp-b", data_dir: bData });
    cleanup.push(() => b.stop());
    expect(a.parts.control.leadership.get().leading).toBe(true);

    const { log, lines } = captureLog();
    const agent = makeAgent({ server: [a.adminUrl, b.adminUrl], token: common.join_token, simulate: "H100-80GB:1" }, { log });
    const stateDir = stateDirOf(agent);
    await agent.start();
    expect(agent.server).toBe(a.adminUrl);
    expect(agent.highestEpoch).toBe(1);
    const put = await a.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }) });
    expect(put.status).toBeLessThan(300);
    const ready = await until("the replica ready", async () => {
      await a.tick();
      return agent.reports().find((r) => r.state === "ready");
    });
    const pid = pidOf(stateDir, ready.id)!;
    // The standby's view of the store, as its own ticks keep it (a standby a tick behind would
    // hand out the older set, at the same epoch: nothing an agent can tell apart).
    await until("the standby sees the replica ready", async () => {
      await b.tick();
      return (await (await b.admin("/api/v1/replicas")).json() as Array<{ id: string; state: string }>).some((r) => r.id === ready.id && r.state === "ready");
    });

    await a.stop();
    aStopped = true;
    await until("the agent at the standby", () => agent.server === b.adminUrl);
    await b.clock.run(1000);
    expect(b.parts.control.leadership.get()).toMatchObject({ leading: true, epoch: 2 });
    await until("epoch 2 from the new leader", async () => {
      await b.tick();
      return agent.highestEpoch === 2;
    });
    expect(JSON.parse(readFileSync(join(stateDir, EPOCH_FILE), "utf8"))).toEqual({ epoch: 2, server: b.adminUrl });
    expect(switches(lines).map((l) => [l.from, l.to])).toEqual([[a.adminUrl, b.adminUrl]]);
    expect(refusals(lines)).toEqual([]);
    // The engine is a real child process: on a loaded machine one health probe can miss its
    // deadline around the switch, so the report may say `starting` for a probe round. What must
    // hold is that it is the same replica, ready again, with the same process (checked below).
    await until("the replica reported ready after the switch", () => JSON.stringify(agent.reports().map((r) => [r.id, r.state])) === JSON.stringify([[ready.id, "ready"]]));
    expect(agent.reports().map((r) => [r.id, r.state])).toEqual([[ready.id, "ready"]]);
    // Should the engine have been started again, the failure carries what the agent logged, so
    // the cause can be read from the run that showed it.
    const after = pidOf(stateDir, ready.id);
    if (after !== pid) throw new Error(`engine ${pid} replaced by ${after}; ${agentSaid(lines)}`);
    expect(isAlive(pid)).toBe(true);
    expect(starts(stateDir, ready.id)).toBe(1);
  });
});
