// One scratch cluster of the compiled binary for fault-injection tests: `serve` and simulated
// agents as real processes running the built-in fake engine, in a scratch directory, with what
// a test needs to break them and to look at what is left (engines by replica, strays, logs).
// withCluster() is the fixture: a describe states its flags, and gets a registered cluster.

import { afterAll, beforeAll } from "bun:test";
import { chmodSync, copyFileSync, existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { EventView, ModelView, NodeView, ReplicaView } from "../../src/protocol/views";
import { fakeEnginesOf, scratchWithBinary } from "./binary";
import { freePort } from "./ports";
import { until } from "./until";

/** Process state letter from /proc (R, S, Z, …), or null when there is no such process. */
export function procState(pid: number): string | null {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, "utf8");
    return s.slice(s.lastIndexOf(")") + 2).split(" ")[0] ?? null;
  } catch {
    return null;
  }
}
/** Alive and not a zombie (a killed engine stays a zombie until its agent reaps it). */
export const running = (pid: number) => {
  const s = procState(pid);
  return s !== null && s !== "Z";
};

/**
 * One scratch cluster: `serve` on fixed ports (so a restarted server is where agents and
 * clients left it) and simulated agents with two H100s each. Remembers every process it
 * started and every engine it saw, and kills them all in cleanup().
 */
export class Cluster {
  readonly dir: string;
  readonly bin: string;
  readonly serveArgs: string[];
  serve!: { proc: Bun.Subprocess; adminUrl: string; routerUrl: string; pid: number; adminToken: string; joinToken: string };
  readonly agents = new Map<string, Bun.Subprocess>();
  private readonly spawned: Bun.Subprocess[] = [];
  private readonly servePids = new Set<number>();
  private readonly enginePidsSeen = new Set<number>();
  private serveStarts = 0;
  private agentStarts = 0;
  /** Other binaries copied in (another release's), whose processes cleanup() kills too. */
  private readonly others = new Set<string>();

  constructor(flags: string[]) {
    ({ dir: this.dir, bin: this.bin } = scratchWithBinary());
    this.serveArgs = [
      "--heartbeat-interval", "300ms", "--restart-backoff", "100ms", "--reconcile-interval", "200ms",
      "--engine-base-port", String(freePort(900)), "--log-level", "info",
      "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`,
      ...flags,
    ];
  }

  /** Like helpers/binary.ts startServe, with the logs in files (pipes nobody reads would fill up). `bin`: another binary (an upgrade test's previous release). */
  async startServe(bin = this.bin): Promise<void> {
    const n = ++this.serveStarts;
    const spawnedAt = Date.now() - 1000;
    const proc = Bun.spawn([bin, "serve", ...this.serveArgs], {
      cwd: this.dir,
      env: { PATH: process.env.PATH ?? "" },
      stdout: Bun.file(join(this.dir, `serve-${n}.log`)),
      stderr: Bun.file(join(this.dir, `serve-${n}.stderr`)),
    });
    this.spawned.push(proc);
    const data = join(this.dir, "llmgw-data");
    const info = await until("server.json of this start", () => {
      if (proc.exitCode !== null) throw new Error(`serve exited with ${proc.exitCode}; see ${this.dir}/serve-${n}.log`);
      try {
        const i = JSON.parse(readFileSync(join(data, "server.json"), "utf8")) as { admin_url: string; router_url: string; pid: number; started_at: string };
        // Not the file an earlier start (perhaps killed a moment ago) left behind.
        return Date.parse(i.started_at) >= spawnedAt && !this.servePids.has(i.pid) ? i : undefined;
      } catch {
        return undefined;
      }
    });
    this.servePids.add(proc.pid);
    this.servePids.add(info.pid);
    this.serve = {
      proc,
      adminUrl: info.admin_url,
      routerUrl: info.router_url,
      pid: info.pid,
      adminToken: readFileSync(join(data, "admin.token"), "utf8").trim(),
      joinToken: readFileSync(join(data, "join.token"), "utf8").trim(),
    };
  }

  /** Each agent's engine-log listener on a port of its own: two on the default 8002 would clash, and `llmgw logs` would not reach one of them. */
  startAgent(name: string, extra: string[] = [], bin = this.bin): Bun.Subprocess {
    const n = ++this.agentStarts;
    const p = Bun.spawn(
      [bin, "agent", "--server", this.serve.adminUrl, "--token", this.serve.joinToken, "--name", name, "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
        "--fabric", "f1", "--simulate", "H100-80GB:2", "--logs-listen", "127.0.0.1:0", "--state-dir", this.stateDir(name), "--stop-grace", "1s", "--health-interval", "100ms", "--log-level", "info", ...extra],
      { cwd: this.dir, env: { PATH: process.env.PATH ?? "" }, stdout: Bun.file(join(this.dir, `agent-${name}-${n}.log`)), stderr: Bun.file(join(this.dir, `agent-${name}-${n}.stderr`)) },
    );
    this.agents.set(name, p);
    this.spawned.push(p);
    return p;
  }

  /** A copy of another binary (a previous release's) in this cluster's directory, as `name`: its processes are this cluster's too. */
  addBinary(path: string, name: string): string {
    const bin = join(this.dir, name);
    copyFileSync(path, bin);
    chmodSync(bin, 0o755);
    this.others.add(bin);
    return bin;
  }

  stateDir(name: string): string {
    return join(this.dir, `agent-${name}`);
  }

  /** Every agent log of this node, all starts, as parsed pino lines. */
  agentLog(name: string): { msg?: string; replica?: string; engine_pid?: number }[] {
    const out: { msg?: string; replica?: string; engine_pid?: number }[] = [];
    for (const f of readdirSync(this.dir).filter((x) => x.startsWith(`agent-${name}-`) && x.endsWith(".log")))
      for (const line of readFileSync(join(this.dir, f), "utf8").split("\n")) {
        try {
          out.push(JSON.parse(line));
        } catch {
          // not a log line
        }
      }
    return out;
  }

  // ---- admin API --------------------------------------------------------------------------

  async api<T>(path: string, init: RequestInit = {}): Promise<T> {
    const r = await fetch(`${this.serve.adminUrl}${path}`, { ...init, headers: { authorization: `Bearer ${this.serve.adminToken}`, "content-type": "application/json" } });
    return (await r.json()) as T;
  }
  async putModel(name: string, body: object): Promise<number> {
    const r = await fetch(`${this.serve.adminUrl}/api/v1/models/${name}`, { method: "PUT", body: JSON.stringify(body), headers: { authorization: `Bearer ${this.serve.adminToken}`, "content-type": "application/json" } });
    await r.arrayBuffer();
    return r.status;
  }
  replicas = () => this.api<ReplicaView[]>("/api/v1/replicas");
  readyOf = async (model: string) => (await this.replicas()).filter((r) => r.model === model && r.state === "ready");
  nodes = () => this.api<NodeView[]>("/api/v1/nodes");
  model = async (name: string) => (await this.api<ModelView[]>("/api/v1/models")).find((m) => m.name === name);
  events = async (kind?: string) => (await this.api<(EventView & { kind: string })[]>("/api/v1/events?limit=1000")).filter((e) => kind === undefined || e.kind === kind);

  // ---- engines ----------------------------------------------------------------------------

  /** Replica id → {pid, port} from one agent's state files. */
  stateFiles(name: string): Map<string, { pid: number; port: number }> {
    const d = join(this.stateDir(name), "replicas");
    const out = new Map<string, { pid: number; port: number }>();
    if (!existsSync(d)) return out;
    for (const f of readdirSync(d).filter((x) => x.endsWith(".json"))) {
      try {
        const s = JSON.parse(readFileSync(join(d, f), "utf8")) as { pid: number; port: number; assignment: { id: string } };
        out.set(s.assignment.id, { pid: s.pid, port: s.port });
        this.enginePidsSeen.add(s.pid);
      } catch {
        // being rewritten; the next poll reads it
      }
    }
    return out;
  }

  /** Fake engines of this cluster's binary that are alive (not zombies), from `ps`, with their port. */
  engines(): { pid: number; port: number }[] {
    const out = fakeEnginesOf(this.bin);
    for (const e of out) this.enginePidsSeen.add(e.pid);
    return out;
  }

  /** `ps` lines of this cluster's binary running `cmd` (serve, agent). */
  processesOf(cmd: string, bin = this.bin): number[] {
    const ps = Bun.spawnSync(["ps", "-eo", "pid=,stat=,args="], { stdout: "pipe" }).stdout.toString();
    return ps
      .split("\n")
      .map((l) => /^\s*(\d+)\s+(\S+)\s+(.*)$/.exec(l))
      .filter((m): m is RegExpExecArray => m !== null && !m[2]!.startsWith("Z") && m[3]!.startsWith(`${bin} ${cmd} `))
      .map((m) => Number(m[1]));
  }

  /**
   * Replica id → engine pids alive for it, across `ps` and every agent's state files: an engine
   * runs a replica's port, and ports are unique per address (all agents share 127.0.0.1 here).
   * Also the engines that belong to no replica the server knows.
   */
  async enginesByReplica(): Promise<{ byId: Map<string, number[]>; strays: { pid: number; port: number }[]; list: ReplicaView[] }> {
    const list = await this.replicas();
    const idByPort = new Map(list.filter((r) => r.endpoint).map((r) => [Number(new URL(r.endpoint!).port), r.id]));
    const byId = new Map<string, number[]>(list.map((r) => [r.id, []]));
    const strays: { pid: number; port: number }[] = [];
    for (const e of this.engines()) {
      const id = idByPort.get(e.port);
      if (id === undefined) strays.push(e);
      else byId.get(id)!.push(e.pid);
    }
    return { byId, strays, list };
  }

  /** Kills everything this cluster started: agents, both serve processes, and every engine. */
  async cleanup(): Promise<void> {
    for (const p of this.agents.values()) {
      p.kill("SIGCONT");
      p.kill("SIGTERM");
    }
    for (const pid of this.servePids) if (running(pid)) process.kill(pid, "SIGTERM");
    await Promise.race([Promise.all(this.spawned.map((p) => p.exited)), Bun.sleep(5_000)]);
    for (const p of this.spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    for (const pid of this.servePids) if (running(pid)) process.kill(pid, "SIGKILL");
    // Engines of agents killed with SIGKILL have nobody to stop them.
    for (const name of this.agents.keys()) this.stateFiles(name);
    this.engines();
    for (const pid of [...this.enginePidsSeen, ...[this.bin, ...this.others].flatMap((b) => ["fake-engine", "agent", "serve"].flatMap((cmd) => this.processesOf(cmd, b)))]) {
      if (!running(pid)) continue;
      // Only our own: a pid seen earlier may have been reused by now.
      const args = (() => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        } catch {
          return [];
        }
      })();
      if (args[0] === this.bin || this.others.has(args[0] ?? "")) process.kill(pid, "SIGKILL");
    }
    // The binary copy is 100+ MB; the logs stay for a look after a failure.
    for (const b of [this.bin, ...this.others]) rmSync(b, { force: true });
  }
}

/**
 * The fixture: call it in a describe. Before the describe's first test, a cluster with `flags`
 * on top of the defaults, its server started and agents a and b (two H100s each) registered;
 * after its last, everything it started killed. Returns the cluster, for the tests to call.
 */
export function withCluster(flags: string[]): () => Cluster {
  let c: Cluster | undefined;
  beforeAll(async () => {
    c = new Cluster(flags);
    await c.startServe();
    c.startAgent("a");
    c.startAgent("b");
    await until("both agents registered", async () => (await c!.nodes()).filter((n) => n.state === "ready").length === 2);
  }, 30_000);
  afterAll(() => c?.cleanup(), 30_000);
  return () => {
    if (!c) throw new Error("withCluster: the cluster is made in beforeAll; call the accessor inside a test");
    return c;
  };
}
