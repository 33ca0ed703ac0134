// The node agent against a real head node (registration, heartbeats, unreachable once stopped,
// refused token, a server that comes up late) and against a small stand-in head node that hands
// out assignments on cue: real fake-engine children started, reported, stopped and adopted.

import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { AgentError, modelPathFor, NodeAgent, type AgentTiming, type NodeAgentOptions } from "../../src/agent/agent";
import { LaunchError } from "../../src/agent/engines";
import type { Discovery } from "../../src/agent/gpus";
import { isAlive, ReplicaProcess } from "../../src/agent/runner";
import { AgentConfig, loadConfig } from "../../src/config";
import {
  Assignment,
  AssignmentsQuery,
  type GpuReport,
  HeartbeatRequest,
  type HeartbeatResponse,
  type ReplicaReport,
} from "../../src/protocol/heartbeat";
import type { NodeView } from "../../src/protocol/views";
import { until } from "../helpers/until";
import { replicaStarts as starts } from "../helpers/agent-state";
import { type TestServer, testServer } from "../helpers/server";
// Engine ports from below the ephemeral range (see ports.ts): one from it can be taken by any outgoing connection.
import { freePort } from "../helpers/ports";

const FAKE_ENGINE = join(import.meta.dir, "../../src/sim/fake-engine.ts");
/** renderLaunch appends "fake-engine" and its flags; fake-engine.ts run directly skips that word. */
const SELF_EXE = [process.execPath, FAKE_ENGINE];
const FAST: Partial<AgentTiming> = { backoffInitialMs: 50, backoffMaxMs: 200, longPollWaitMs: 5_000 };

// ---- fixtures -------------------------------------------------------------------------------

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Log lines as objects, for asserting on what an operator would read. */
function captureLog(): { log: pino.Logger; lines: Array<{ level: number; msg: string; [k: string]: unknown }> } {
  const lines: Array<{ level: number; msg: string }> = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { log, lines };
}

function makeAgent(config: Record<string, unknown>, extra: Partial<NodeAgentOptions> = {}): NodeAgent {
  const cfg = AgentConfig.parse({
    name: "sim-01",
    address: "10.9.0.1",
    engine_host: "127.0.0.1",
    state_dir: tempDir("llmgw-agent-"),
    health_interval: "50ms",
    stop_grace: "5s",
    logs_listen: "127.0.0.1:0",
    ...config,
  });
  const agent = new NodeAgent({ config: cfg, log: pino({ level: "silent" }), selfExe: SELF_EXE, timing: FAST, ...extra });
  // Before the state dir's removal (cleanups run in reverse), so no engine outlives its test.
  cleanup.push(() => agent.stop());
  return agent;
}

function assignment(id: string, port: number, extra: Partial<Assignment> = {}): Assignment {
  return Assignment.parse({
    id,
    model: "llama-3.1-8b",
    served_names: ["llama-3.1-8b", "llama3-8b"],
    profile: "h100",
    engine: "vllm",
    port,
    gpus: [0],
    gpu_uuids: ["GPU-0"],
    // Real vLLM flags: a simulated node must not hand them to the fake engine.
    args: ["--max-model-len", "8192"],
    shard: { rank: 0, size: 1, leader_address: "10.9.0.1", leader_port: port + 10_000 },
    ...extra,
  });
}

/** The replica's recorded pid (the runner's state file), while it runs. */
function pidOf(stateDir: string, id: string): number | undefined {
  try {
    return (JSON.parse(readFileSync(ReplicaProcess.statePath(join(stateDir, "replicas"), id), "utf8")) as { pid: number }).pid;
  } catch {
    return undefined;
  }
}

async function health(port: number): Promise<number | string> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1_000) });
    return res.status;
  } catch (e) {
    return (e as Error).name;
  }
}

/**
 * A stand-in head node implementing the two agent routes, with assignments set by the test.
 * It can be stopped and started again on the same port, as a restarting server would be.
 */
class StubHead {
  readonly token = "stub-join-token-0123456789";
  assignments: Assignment[] = [];
  generation = 0;
  intervalMs = 60_000;
  /** When set, heartbeats are refused with this message, as the real API refuses bad fields. */
  reject: string | null = null;
  readonly heartbeats: HeartbeatRequest[] = [];
  private readonly waiters = new Set<() => void>();
  private server: ReturnType<typeof Bun.serve> | null = null;
  port = 0;

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

  set(assignments: Assignment[]): void {
    this.assignments = assignments;
    this.generation++;
    for (const w of [...this.waiters]) w();
  }

  /** Every report of replica `id`, in the order the heartbeats carried them. */
  reportsOf(id: string): ReplicaReport[] {
    return this.heartbeats.flatMap((h) => h.replicas.filter((r) => r.id === id));
  }

  latest(): HeartbeatRequest | undefined {
    return this.heartbeats.at(-1);
  }

  private answer(): HeartbeatResponse {
    return { assignments: this.assignments, heartbeat_interval_ms: this.intervalMs, generation: this.generation };
  }

  private async fetch(req: Request): Promise<Response> {
    if (req.headers.get("authorization") !== `Bearer ${this.token}`)
      return Response.json({ error: { code: "unauthorized", message: "missing or wrong bearer token" } }, { status: 401 });
    const url = new URL(req.url);
    if (req.method === "POST" && url.pathname === "/agent/v1/heartbeat") {
      const hb = HeartbeatRequest.parse(await req.json());
      if (this.reject) return Response.json({ error: { code: "invalid_request", message: this.reject } }, { status: 400 });
      this.heartbeats.push(hb);
      return Response.json(this.answer());
    }
    if (req.method === "GET" && url.pathname === "/agent/v1/assignments") {
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
      return Response.json(this.answer());
    }
    return Response.json({ error: { code: "not_found", message: "no such route" } }, { status: 404 });
  }
}

function stubHead(): StubHead {
  const stub = new StubHead();
  stub.start();
  cleanup.push(() => stub.stop());
  return stub;
}

// ---- against the real head node -------------------------------------------------------------

describe("against the real head node", () => {
  let s: TestServer;
  const startServer = async (overrides: Record<string, unknown> = {}) => {
    s = await testServer({ heartbeat_interval: "200ms", ...overrides });
    cleanup.push(() => s.stop());
    return s;
  };
  const node = async (name: string) => {
    const res = await s.admin(`/api/v1/nodes/${name}`);
    return res.status === 200 ? ((await res.json()) as NodeView) : undefined;
  };

  test("registers with its simulated GPUs, weights, labels and fabric, heartbeats on, and goes unreachable once stopped", async () => {
    await startServer();
    // It reports a data-plane address other than the 127.0.0.1 it heartbeats from: allowed, as an operator would.
    await s.seed.allowAddress("sim-01", "10.9.0.1");
    const agent = makeAgent({
      server: s.adminUrl,
      token: s.joinToken,
      simulate: "H100-80GB:4",
      simulate_unhealthy: [3],
      simulate_models: ["qwen/qwen3-8b", "llama-3.1-8b"],
      label: ["rack=r12", "zone=a"],
      fabric: ["ib-a"],
    });
    await agent.start();
    expect(agent.generation).not.toBeNull();

    const n = (await node("sim-01"))!;
    expect(n.state).toBe("ready");
    expect(n.address).toBe("10.9.0.1");
    expect(n.gpus.map((g) => g.class)).toEqual(["H100-80GB", "H100-80GB", "H100-80GB", "H100-80GB"]);
    expect(n.gpu_total).toBe(4);
    expect(n.gpu_unhealthy).toBe(1);
    expect(n.models).toEqual(["llama-3.1-8b", "qwen/qwen3-8b"]);
    expect(n.labels).toEqual({ rack: "r12", zone: "a" });
    expect(n.fabrics).toEqual(["ib-a"]);

    // The server's clock is manual: a heartbeat stamped with the advanced time is a new one.
    s.clock.advance(10_000);
    const stamp = new Date(s.clock.now()).toISOString();
    await until("a later heartbeat", async () => (await node("sim-01"))?.last_heartbeat === stamp);
    expect((await node("sim-01"))!.state).toBe("ready");

    await agent.stop();
    s.clock.advance(16_000); // past the default 15 s node timeout
    expect((await node("sim-01"))!.state).toBe("unreachable");
  });

  test("a wrong join token rejects start() saying the server refused it", async () => {
    await startServer();
    const agent = makeAgent({ server: s.adminUrl, token: "not-the-join-token-0123", simulate: "H100-80GB:1" });
    const err = await agent.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AgentError);
    expect((err as Error).message).toContain("the server refused the join token");
    expect(await node("sim-01")).toBeUndefined();
  });

  test("a server that is not up yet is retried, with a warning naming its URL; start() resolves once it answers", async () => {
    const port = await freePort();
    const { log, lines } = captureLog();
    const joinToken = "late-join-token-0123456789";
    const agent = makeAgent({ server: `http://127.0.0.1:${port}`, token: joinToken, simulate: "L40S:2", address: "127.0.0.1" }, { log });
    let started = false;
    const starting = agent.start().then(() => {
      started = true;
    });
    await until("a warning about the unreachable server", () =>
      lines.some((l) => l.level === 40 && l.msg.includes(`cannot reach http://127.0.0.1:${port}/agent/v1/heartbeat`)),
    );
    expect(started).toBe(false);
    await startServer({ admin_listen: `127.0.0.1:${port}`, join_token: joinToken });
    await starting;
    expect((await node("sim-01"))!.gpus.map((g) => g.class)).toEqual(["L40S", "L40S"]);
    expect(lines.some((l) => l.msg === "heartbeats reach the server again")).toBe(true);
  });

  test("a model in the catalog becomes a ready replica on the agent's fake engine, and goes away with the model", async () => {
    // Engine ports from a free block below the ephemeral range, not 8100, which another llmgw here may hold.
    const base = freePort(16);
    await startServer({ engine_base_port: base });
    const agent = makeAgent({ server: s.adminUrl, token: s.joinToken, simulate: "H100-80GB:2", address: "127.0.0.1" });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    await agent.start();
    const put = await s.admin("/api/v1/models/llama-3.1-8b", {
      method: "PUT",
      body: JSON.stringify({ aliases: ["llama3-8b"], replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }),
    });
    expect(put.status).toBeLessThan(300);
    await s.tick();
    type Rep = { id: string; state: string; endpoint: string | null };
    const ready = await until("the replica ready on the server", async () => {
      await s.tick();
      const reps = (await (await s.admin("/api/v1/replicas")).json()) as Rep[];
      return reps.find((r) => r.state === "ready");
    });
    expect(agent.reports()).toEqual([{ id: ready.id, state: "ready", port: Number(new URL(ready.endpoint!).port), error: null }]);
    // The engine answers only with the replica's key, which the head node gave the agent.
    expect((await fetch(`${ready.endpoint}/v1/models`)).status).toBe(401);
    const key = s.peek.engineKey(ready.id)!;
    const models = (await (await fetch(`${ready.endpoint}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(["llama-3.1-8b", "llama3-8b"]);
    const pid = pidOf(stateDir, ready.id)!;

    expect((await s.admin("/api/v1/models/llama-3.1-8b", { method: "DELETE" })).status).toBeLessThan(300);
    await until("the engine stopped", async () => {
      await s.tick();
      return agent.reports().length === 0 && !isAlive(pid);
    });
    expect(starts(stateDir, ready.id)).toBe(1);
  });

  test("an agent with --engine-auth off starts its engines without a key", async () => {
    const base = freePort(16);
    await startServer({ engine_base_port: base });
    const agent = makeAgent({ server: s.adminUrl, token: s.joinToken, simulate: "H100-80GB:1", address: "127.0.0.1", engine_auth: "off" });
    await agent.start();
    const put = await s.admin("/api/v1/models/m", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }) });
    expect(put.status).toBeLessThan(300);
    type Rep = { id: string; state: string; endpoint: string | null };
    const ready = await until("the replica ready on the server", async () => {
      await s.tick();
      const reps = (await (await s.admin("/api/v1/replicas")).json()) as Rep[];
      return reps.find((r) => r.state === "ready");
    });
    expect((await fetch(`${ready.endpoint}/v1/models`)).status).toBe(200);
  });
});

// ---- assignments, against a stand-in head node ----------------------------------------------

describe("assignments", () => {
  test("an assigned replica runs as the fake engine, goes starting → ready in early heartbeats, and stops when unassigned; nothing starts twice", async () => {
    const stub = stubHead();
    // Health polled every 300 ms: the engine cannot be ready before the heartbeat that says it started.
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:4", health_interval: "300ms" });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    await agent.start();
    expect(stub.heartbeats.length).toBe(1);

    const port = await freePort();
    stub.set([assignment("r1", port)]);
    // The stub's interval is a minute: only the agent's early heartbeats can bring these.
    await until("r1 reported ready", () => stub.reportsOf("r1").some((r) => r.state === "ready"));
    // "starting" goes out in the early heartbeat after the reconcile, unless the engine was
    // healthy before that heartbeat left (a loaded machine can order it either way); it
    // never comes after "ready", and nothing else is reported.
    const states = stub.reportsOf("r1").map((r) => r.state);
    expect(states.every((x) => x === "starting" || x === "ready")).toBe(true);
    expect(states.lastIndexOf("starting")).toBeLessThan(states.indexOf("ready"));
    expect(stub.reportsOf("r1").at(-1)).toEqual({ id: "r1", state: "ready", port, error: null });
    expect(await health(port)).toBe(200);
    const models = (await (await fetch(`http://127.0.0.1:${port}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(["llama-3.1-8b", "llama3-8b"]);
    const pid = pidOf(stateDir, "r1")!;
    expect(isAlive(pid)).toBe(true);

    // The same set under a new generation changes nothing.
    stub.set([assignment("r1", port)]);
    await until("the new generation applied", () => agent.generation === stub.generation);
    expect(pidOf(stateDir, "r1")).toBe(pid);

    stub.set([]);
    await until("r1 gone from the heartbeats", () => stub.latest()!.replicas.length === 0 && !isAlive(pid));
    expect(await health(port)).not.toBe(200);
    expect(starts(stateDir, "r1")).toBe(1);
    expect(agent.reports()).toEqual([]);
  });

  test("stop() stops every engine and ends the long poll at once", async () => {
    const stub = stubHead();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:4" }, { timing: { ...FAST, longPollWaitMs: 25_000 } });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    const [p1, p2] = [await freePort(), await freePort()];
    stub.set([assignment("r1", p1), assignment("r2", p2, { gpus: [1], gpu_uuids: ["GPU-1"] })]);
    await agent.start();
    await until("both ready", () => agent.reports().filter((r) => r.state === "ready").length === 2);
    const pids = [pidOf(stateDir, "r1")!, pidOf(stateDir, "r2")!];
    expect(pids.every(isAlive)).toBe(true);

    const t0 = performance.now();
    await agent.stop();
    expect(performance.now() - t0).toBeLessThan(3_000);
    expect(pids.some(isAlive)).toBe(false);
    expect(agent.reports()).toEqual([]);
  });

  test("an engine that fails at start is reported failed with its output, and is not restarted", async () => {
    const stub = stubHead();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1" });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    await agent.start();
    stub.set([assignment("bad", await freePort(), { env: { LLMGW_FAKE_FAIL: "RuntimeError: CUDA out of memory (simulated)" } })]);
    const failed = await until("bad reported failed", () => stub.reportsOf("bad").find((r) => r.state === "failed"));
    expect(failed.error).toContain("exited with code 1");
    expect(failed.error).toContain("CUDA out of memory (simulated)");
    // Still assigned: the next generation keeps the failure as it is for the control plane to act on.
    stub.set([...stub.assignments]);
    await until("the new generation applied", () => agent.generation === stub.generation);
    expect(starts(stateDir, "bad")).toBe(1);
  });

  test("a forged assignment (an env that loads code, a name that reads as a flag) is reported failed with the reason and never started; a good one beside it runs", async () => {
    const stub = stubHead();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:2" });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    await agent.start();
    stub.set([
      assignment("preload", await freePort(), { env: { HF_TOKEN: "hf_secret", LD_PRELOAD: "/tmp/evil.so" } }),
      assignment("flag", await freePort(), { served_names: ["llama-3.1-8b", "--trust-remote-code"] }),
      assignment("ok", await freePort()),
    ]);
    const preload = await until("preload reported failed", () => stub.reportsOf("preload").find((r) => r.state === "failed"));
    expect(preload.error).toStartWith("could not start: replica preload not started: env.LD_PRELOAD: LD_PRELOAD is refused: the dynamic loader reads it");
    expect(preload.error).not.toContain("hf_secret");
    const flag = await until("flag reported failed", () => stub.reportsOf("flag").find((r) => r.state === "failed"));
    expect(flag.error).toContain('served_names[1] "--trust-remote-code": may contain only letters');
    await until("ok ready", () => stub.reportsOf("ok").find((r) => r.state === "ready"));
    expect([starts(stateDir, "preload"), starts(stateDir, "flag"), starts(stateDir, "ok")]).toEqual([0, 0, 1]);
    expect(stub.reportsOf("preload").some((r) => r.state === "ready")).toBe(false);
  });

  test("a port something else already listens on fails the replica with a reason instead of passing its health check", async () => {
    const squatter = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok") });
    cleanup.push(() => squatter.stop(true));
    const stub = stubHead();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1" });
    await agent.start();
    stub.set([assignment("r1", squatter.port!)]);
    const failed = await until("r1 reported failed", () => stub.reportsOf("r1").find((r) => r.state === "failed"));
    expect(failed.error).toContain(`port ${squatter.port} on 127.0.0.1 is already in use on this node`);
    expect(stub.reportsOf("r1").some((r) => r.state === "ready")).toBe(false);
  });

  test("with keep_replicas, engines outlive the agent and the next one adopts them without a restart; without it, strays are stopped", async () => {
    const stub = stubHead();
    const stateDir = tempDir("llmgw-agent-keep-");
    const port = await freePort();
    stub.set([assignment("r1", port)]);
    const first = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1", state_dir: stateDir, keep_replicas: true });
    await first.start();
    await until("r1 ready", () => first.reports().some((r) => r.id === "r1" && r.state === "ready"));
    const pid = pidOf(stateDir, "r1")!;
    await first.stop();
    expect(isAlive(pid)).toBe(true);
    cleanup.push(() => {
      if (isAlive(pid)) process.kill(-pid, "SIGKILL");
    });

    const second = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1", state_dir: stateDir, keep_replicas: true });
    const before = stub.heartbeats.length;
    await second.start();
    // Its very first heartbeat already tells the server about the adopted engine.
    expect(stub.heartbeats[before]!.replicas.map((r) => r.id)).toEqual(["r1"]);
    await until("adopted r1 ready", () => second.reports().some((r) => r.id === "r1" && r.state === "ready"));
    expect(pidOf(stateDir, "r1")).toBe(pid);
    expect(starts(stateDir, "r1")).toBe(1);
    await second.stop();
    expect(isAlive(pid)).toBe(true);

    stub.set([]);
    const third = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1", state_dir: stateDir });
    await third.start();
    expect(isAlive(pid)).toBe(false);
  });

  test("assignment sets arriving quickly end with the newest applied, each replica started once", async () => {
    const stub = stubHead();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:4" });
    const stateDir = (agent as unknown as { config: AgentConfig }).config.state_dir;
    await agent.start();
    const ports = [await freePort(), await freePort(), await freePort()];
    stub.set([assignment("a", ports[0]!)]);
    stub.set([assignment("a", ports[0]!), assignment("b", ports[1]!, { gpus: [1], gpu_uuids: ["GPU-1"] })]);
    stub.set([assignment("b", ports[1]!, { gpus: [1], gpu_uuids: ["GPU-1"] }), assignment("c", ports[2]!, { gpus: [2], gpu_uuids: ["GPU-2"] })]);
    await until("b and c ready", () => {
      const r = agent.reports();
      return r.length === 2 && r.every((x) => x.state === "ready" && (x.id === "b" || x.id === "c"));
    });
    expect(agent.generation).toBe(stub.generation);
    expect(starts(stateDir, "a")).toBeLessThanOrEqual(1);
    expect(starts(stateDir, "b")).toBe(1);
    expect(starts(stateDir, "c")).toBe(1);
    expect(await health(ports[0]!)).not.toBe(200);
  });

  test("while the server is down, replicas keep running and the agent backs off; it reconnects when the server is back", async () => {
    const stub = stubHead();
    stub.intervalMs = 100;
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1" }, { log });
    const port = await freePort();
    stub.set([assignment("r1", port)]);
    await agent.start();
    await until("r1 ready", () => agent.reports().some((r) => r.state === "ready"));

    await stub.stop();
    await until("a warning naming the server", () => lines.some((l) => l.level === 40 && l.msg.includes(`cannot reach ${stub.url}/agent/v1/heartbeat`)));
    const failures = lines.filter((l) => l.msg.includes("cannot reach")).length;
    expect(await health(port)).toBe(200);
    expect(agent.reports()).toEqual([{ id: "r1", state: "ready", port, error: null }]);

    const seen = stub.heartbeats.length;
    stub.start(); // same port
    await until("heartbeats again", () => stub.heartbeats.length > seen + 1);
    expect(stub.latest()!.replicas).toEqual([{ id: "r1", state: "ready", port, error: null }]);
    expect(lines.some((l) => l.msg === "heartbeats reach the server again")).toBe(true);
    // Backing off (50 ms doubling to 200 ms here), not hammering: a handful of attempts at most.
    expect(failures).toBeLessThan(20);
  });

  test("a heartbeat the server rejects is logged with the server's message", async () => {
    const stub = stubHead();
    stub.intervalMs = 50;
    const { log, lines } = captureLog();
    const agent = makeAgent({ server: stub.url, token: stub.token, simulate: "H100-80GB:1" }, { log });
    await agent.start();
    stub.reject = "gpus.0.class: must not be empty";
    await until("the rejection logged", () => lines.find((l) => l.level === 50 && l.msg.includes("gpus.0.class: must not be empty")));
    const line = lines.find((l) => l.msg.includes("gpus.0.class"))!;
    expect(line.msg).toContain("heartbeat: the server rejected it: 400");
    expect(line.url).toBe(`${stub.url}/agent/v1/heartbeat`);
    stub.reject = null;
    await until("accepted again", () => lines.some((l) => l.msg === "heartbeats reach the server again"));
  });
});

// ---- inventory --------------------------------------------------------------------------------

describe("inventory", () => {
  test("without --simulate: GPUs from discovery, weights from the models dir; a discovery error is logged once; changes reach the server", async () => {
    const stub = stubHead();
    const modelsDir = tempDir("llmgw-models-");
    mkdirSync(join(modelsDir, "llama-3.1-8b"));
    writeFileSync(join(modelsDir, "llama-3.1-8b", "model.safetensors"), "");
    const { log, lines } = captureLog();
    const gpu = (healthy: boolean): GpuReport => ({ index: 0, uuid: "GPU-a", name: "NVIDIA L40S", class: "L40S", memory_mib: 46068, healthy, parent: null });
    let result: Discovery = { gpus: [], error: "nvidia-smi not found on PATH: this node reports no GPUs", warnings: [] };
    const classOverrides: Record<string, string>[] = [];
    const agent = makeAgent(
      { server: stub.url, token: stub.token, models_dir: modelsDir, gpu_class: ["NVIDIA L40S=L40S-48GB"] },
      {
        log,
        timing: { ...FAST, inventoryIntervalMs: 20 },
        discover: async (opts) => {
          classOverrides.push(opts.classOverrides ?? {});
          return result;
        },
      },
    );
    await agent.start();
    expect(stub.heartbeats[0]!.gpus).toEqual([]);
    expect(stub.heartbeats[0]!.models).toEqual(["llama-3.1-8b"]);
    expect(classOverrides[0]).toEqual({ "NVIDIA L40S": "L40S-48GB" });
    await until("several rediscoveries", () => classOverrides.length >= 5);
    expect(lines.filter((l) => l.msg.includes("nvidia-smi not found")).map((l) => l.level)).toEqual([50]);

    result = { gpus: [gpu(true)], warnings: [] };
    await until("the GPU reported", () => stub.latest()!.gpus.length === 1);
    result = { gpus: [gpu(false)], warnings: ["GPU 0 NVIDIA L40S is unhealthy: temperature.gpu reads [GPU requires reset]"] };
    // The stub's interval is a minute: the change has to go out by itself.
    await until("the GPU reported unhealthy", () => stub.latest()!.gpus[0]?.healthy === false);
    await until("a few more rediscoveries", () => classOverrides.length >= 15);
    expect(lines.filter((l) => l.msg.includes("requires reset")).length).toBe(1);
    expect(lines.some((l) => l.msg === "GPU discovery works again")).toBe(true);
  });

  test("engines by version: the heartbeat carries each engine's version or why it has none; vLLM 0.10 refuses multi-node naming its version and runs single-node on GPU indices", async () => {
    const stub = stubHead();
    const modelsDir = tempDir("llmgw-models-");
    mkdirSync(join(modelsDir, "llama-3.1-8b"));
    writeFileSync(join(modelsDir, "llama-3.1-8b", "model.safetensors"), "");
    // Stand-ins on a PATH of their own: `vllm --version` prints what vLLM 0.10.1.1 prints, and
    // `vllm serve` records its GPUs and arguments, then stays up; python3 lacks SGLang.
    const bin = tempDir("llmgw-bin-");
    const seen = join(bin, "serve.txt");
    writeFileSync(
      join(bin, "vllm"),
      `#!/bin/sh\nif [ "$1" = "--version" ]; then echo "INFO 08-20 10:12:01 [__init__.py:241] Automatically detected platform cuda." >&2; echo 0.10.1.1; exit 0; fi\necho "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER=$CUDA_DEVICE_ORDER $*" > ${seen}\nexec sleep 30\n`,
      { mode: 0o755 },
    );
    writeFileSync(join(bin, "python3"), "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'sglang'\" >&2\nexit 1\n", { mode: 0o755 });
    const pathBefore = process.env.PATH;
    process.env.PATH = `${bin}:${pathBefore}`;
    cleanup.push(() => {
      process.env.PATH = pathBefore;
    });
    const gpus: GpuReport[] = [
      { index: 0, uuid: "GPU-a", name: "NVIDIA H100 80GB HBM3", class: "H100-80GB", memory_mib: 81559, healthy: true, parent: null, smi_index: 3, pci_bus_id: "00000000:9B:00.0" },
    ];
    const agent = makeAgent(
      { server: stub.url, token: stub.token, models_dir: modelsDir, llama_server: join(bin, "no-llama-server") },
      { discover: async () => ({ gpus, warnings: [] }) },
    );
    await agent.start();
    expect(stub.heartbeats[0]!.engines).toEqual([
      { engine: "vllm", version: "0.10.1.1", error: null },
      { engine: "sglang", version: null, error: "`python3 -c import sglang; print(sglang.__version__)` exited 1: ModuleNotFoundError: No module named 'sglang'" },
      { engine: "llama.cpp", version: null, error: `not installed: ${join(bin, "no-llama-server")} not found` },
    ]);

    const port = await freePort();
    const two = { rank: 0, size: 2, leader_address: "10.9.0.1", leader_port: port + 10_000 };
    stub.set([
      assignment("multi", port, { gpu_uuids: ["GPU-a"], args: [], shard: two }),
      assignment("single", await freePort(), { gpu_uuids: ["GPU-a"], args: [] }),
    ]);
    await until("the multi-node replica refused", () => stub.latest()!.replicas.some((r) => r.id === "multi" && r.state === "failed"));
    expect(stub.latest()!.replicas.find((r) => r.id === "multi")!.error).toContain(
      "vLLM 0.10.1.1 needs Ray for multi-node; llmgw supports multi-node vLLM from 0.12.0 on",
    );
    await until("the single-node vLLM started", () => {
      try {
        return readFileSync(seen, "utf8").length > 0;
      } catch {
        return false;
      }
    });
    expect(readFileSync(seen, "utf8")).toStartWith(`CUDA_VISIBLE_DEVICES=3 CUDA_DEVICE_ORDER=PCI_BUS_ID serve ${join(modelsDir, "llama-3.1-8b")} --host 127.0.0.1 --port `);
  });

  test("settings the server would refuse fail start() naming the setting", async () => {
    const server = "http://127.0.0.1:9"; // never contacted
    const token = "some-join-token-0123456789";
    // A fabric the protocol would refuse is refused by the config schema already.
    const cfgErr = await loadConfig(AgentConfig, { flags: { server, token, fabric: ["ib a"] }, env: {} }).catch((e: Error) => e);
    expect((cfgErr as Error).message).toContain("fabric.0 (from flag --fabric)");
    const bad = [
      [{ simulate: "H100-80GB:x" }, /--simulate: bad --simulate part "H100-80GB:x"/],
      [{ simulate: "H100-80GB:2", simulate_unhealthy: [5] }, /--simulate: unhealthy GPU index 5/],
    ] as const;
    for (const [cfg, message] of bad) {
      const agent = makeAgent({ server, token, ...cfg });
      const err = await agent.start().then(
        () => undefined,
        (e: unknown) => e as Error,
      );
      expect(err).toBeInstanceOf(AgentError);
      expect(err!.message).toMatch(message);
    }
  });
});

// ---- model paths ------------------------------------------------------------------------------

describe("modelPathFor", () => {
  test("a model's directory; for llama.cpp the first .gguf in it (none: refused); a Hugging Face cache's newest snapshot; nothing outside", () => {
    const root = tempDir("llmgw-models-");
    mkdirSync(join(root, "org", "m"), { recursive: true });
    mkdirSync(join(root, "tiny"));
    for (const f of ["tiny-00002-of-00002.gguf", "tiny-00001-of-00002.gguf", "README.md"]) writeFileSync(join(root, "tiny", f), "");
    const snaps = join(root, "models--meta-llama--Llama-3.1-8B", "snapshots");
    mkdirSync(join(snaps, "old"), { recursive: true });
    mkdirSync(join(snaps, "new"));
    utimesSync(join(snaps, "old"), new Date(2020, 0, 1), new Date(2020, 0, 1));

    expect(modelPathFor(root, "org/m", "vllm")).toBe(join(root, "org", "m"));
    expect(modelPathFor(root, "tiny", "llama.cpp")).toBe(join(root, "tiny", "tiny-00001-of-00002.gguf"));
    expect(modelPathFor(root, "tiny", "vllm")).toBe(join(root, "tiny"));
    expect(() => modelPathFor(root, "org/m", "llama.cpp")).toThrow(`no GGUF model in ${join(root, "org", "m")}`);
    expect(modelPathFor(root, "meta-llama/Llama-3.1-8B", "sglang")).toBe(join(snaps, "new"));
    expect(modelPathFor(root, "absent", "vllm")).toBe(join(root, "absent"));
    expect(() => modelPathFor(root, "a/../../etc", "vllm")).toThrow(LaunchError);
    expect(() => modelPathFor(root, ".", "vllm")).toThrow(LaunchError);
  });
});

// ---- weights: revisions reported, the assigned one launched, offline -------------------------

describe("weights", () => {
  test("the heartbeat carries the hub cache's revisions; the engine gets the assigned revision's snapshot and runs offline; a revision not here fails naming the ones that are", async () => {
    const [revA, revB, revC] = ["a", "b", "c"].map((c) => c.repeat(40)) as [string, string, string];
    const modelsDir = tempDir("llmgw-models-");
    const entry = join(modelsDir, "models--org--m");
    for (const rev of [revA, revB]) {
      mkdirSync(join(entry, "snapshots", rev), { recursive: true });
      writeFileSync(join(entry, "snapshots", rev, "model.safetensors"), "");
    }
    // The assigned revision is the older one: each node's own newest is not what a replica loads.
    utimesSync(join(entry, "snapshots", revB), new Date(2025, 0, 1), new Date(2025, 0, 1));
    // A stand-in vllm on PATH that writes down its argv and environment, then exits.
    const bin = tempDir("llmgw-bin-");
    const out = join(bin, "seen");
    writeFileSync(join(bin, "vllm"), `#!/bin/sh\nprintf '%s\\n' "$@" > "${out}.args"\nenv > "${out}.env"\necho "vllm stand-in exits"\nexit 3\n`, { mode: 0o755 });
    const stub = stubHead();
    const agent = makeAgent(
      // The stand-in answers no --version: the version is given, as an operator can.
      { server: stub.url, token: stub.token, models_dir: modelsDir, vllm: join(bin, "vllm"), vllm_version: "0.11.0" },
      { discover: async () => ({ gpus: [{ index: 0, uuid: "GPU-0", name: "NVIDIA H100", class: "H100-80GB", memory_mib: 81559, healthy: true, parent: null, smi_index: 0 }], warnings: [] }) },
    );
    await agent.start();
    expect(stub.heartbeats[0]!.models).toEqual(["org/m"]);
    expect(stub.heartbeats[0]!.model_revisions).toEqual({ "org/m": [revA, revB] });

    stub.set([assignment("pinned", await freePort(), { model: "org/m", revision: revB }), assignment("absent", await freePort(), { model: "org/m", revision: revC })]);
    await until("pinned failed", () => stub.reportsOf("pinned").find((r) => r.state === "failed"));
    const args = readFileSync(`${out}.args`, "utf8").split("\n");
    expect(args.slice(0, 2)).toEqual(["serve", join(entry, "snapshots", revB)]);
    const seenEnv = readFileSync(`${out}.env`, "utf8").split("\n");
    expect(seenEnv).toContain("HF_HUB_OFFLINE=1");
    expect(seenEnv).toContain("TRANSFORMERS_OFFLINE=1");
    const absent = await until("absent failed", () => stub.reportsOf("absent").find((r) => r.state === "failed"));
    expect(absent.error).toContain(`revision ${revC.slice(0, 12)}… of org/m is not on this node: have ${revA.slice(0, 12)}…, ${revB.slice(0, 12)}…`);
  });
});
