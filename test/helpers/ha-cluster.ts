// Several `serve` of the compiled binary on one store (a SQLite file shared on this machine, or a
// PostgreSQL URL), each with its own data dir and fixed ports (a restarted one is where it was),
// the same admin and join tokens and the same engine secret, plus simulated agents running the
// built-in fake engine. Remembers every process it started and kills them all in cleanup().

import { mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Health, ReplicaView } from "../../src/protocol/views";
import { fakeEnginesOf, scratchWithBinary } from "./binary";
import { running } from "./cluster";
import { freePort } from "./ports";
import { until } from "./until";

export interface HaServe {
  name: string;
  proc: Bun.Subprocess;
  adminUrl: string;
  routerUrl: string;
  /** The serving process (serve starts itself again: not proc.pid). */
  pid: number;
  dataDir: string;
}

export const ADMIN_TOKEN = "llmgw_admin_ha_cluster_test_token_0123456789";
export const JOIN_TOKEN = "llmgw_join_ha_cluster_test_token_0123456789";

export class HaCluster {
  readonly dir: string;
  readonly bin: string;
  readonly serves = new Map<string, HaServe>();
  private readonly ports = new Map<string, { admin: number; router: number }>();
  private readonly spawned: Bun.Subprocess[] = [];
  private readonly pids = new Set<number>();
  private starts = 0;
  readonly enginePort = freePort(900);

  /**
   * `store`: a PostgreSQL URL, per serve if they reach it differently; default one SQLite file in
   * the scratch dir. `joinToken: "file"`: no --join-token, each serve keeps (or follows) its own.
   */
  constructor(
    private readonly flags: string[],
    private readonly store?: (name: string) => string,
    private readonly o: { joinToken?: "flag" | "file" } = {},
  ) {
    ({ dir: this.dir, bin: this.bin } = scratchWithBinary());
  }

  storeOf(name: string): string {
    return this.store?.(name) ?? join(this.dir, "llmgw.db");
  }

  async startServe(name: string, extra: string[] = []): Promise<HaServe> {
    const n = ++this.starts;
    const ports = this.ports.get(name) ?? { admin: freePort(), router: freePort() };
    this.ports.set(name, ports);
    const dataDir = join(this.dir, `data-${name}`);
    mkdirSync(dataDir, { recursive: true });
    // No engine secret is copied: the control planes share one through the store, or routers
    // other than the first one's would present keys the engines were never given.
    const spawnedAt = Date.now() - 1000;
    const args = [
      "serve", "--data-dir", dataDir, "--store", this.storeOf(name), "--ha", "--name", name,
      "--admin-listen", `127.0.0.1:${ports.admin}`, "--listen", `127.0.0.1:${ports.router}`,
      "--admin-token", ADMIN_TOKEN, ...(this.o.joinToken === "file" ? [] : ["--join-token", JOIN_TOKEN]),
      "--heartbeat-interval", "300ms", "--restart-backoff", "100ms", "--reconcile-interval", "200ms", "--node-timeout", "15s",
      "--engine-base-port", String(this.enginePort), "--log-level", "info", ...this.flags, ...extra,
    ];
    const proc = Bun.spawn([this.bin, ...args], {
      cwd: this.dir,
      env: { PATH: process.env.PATH ?? "" },
      stdout: Bun.file(join(this.dir, `serve-${name}-${n}.log`)),
      stderr: Bun.file(join(this.dir, `serve-${name}-${n}.stderr`)),
    });
    this.spawned.push(proc);
    const info = await until(`server.json of serve ${name}`, () => {
      if (proc.exitCode !== null) throw new Error(`serve ${name} exited with ${proc.exitCode}; see ${this.dir}/serve-${name}-${n}.log`);
      try {
        const i = JSON.parse(readFileSync(join(dataDir, "server.json"), "utf8")) as { admin_url: string; router_url: string; pid: number; started_at: string };
        return Date.parse(i.started_at) >= spawnedAt && !this.pids.has(i.pid) ? i : undefined;
      } catch {
        return undefined;
      }
    }, 30_000);
    this.pids.add(proc.pid);
    this.pids.add(info.pid);
    const s: HaServe = { name, proc, adminUrl: info.admin_url, routerUrl: info.router_url, pid: info.pid, dataDir };
    this.serves.set(name, s);
    return s;
  }

  serve(name: string): HaServe {
    const s = this.serves.get(name);
    if (!s) throw new Error(`no serve ${name}`);
    return s;
  }

  /** SIGKILL to the serving process and its parent: nothing is written on the way out. */
  kill9(name: string): void {
    const s = this.serve(name);
    for (const pid of [s.pid, s.proc.pid]) if (running(pid)) process.kill(pid, "SIGKILL");
  }

  /** SIGTERM to the serving process and its parent; resolves once both are gone (a clean stop: the lease is released). */
  async stop(name: string): Promise<void> {
    const s = this.serve(name);
    for (const pid of [s.pid, s.proc.pid]) if (running(pid)) process.kill(pid, "SIGTERM");
    await until(`serve ${name} to stop`, () => ![s.pid, s.proc.pid].some(running), 15_000);
  }

  async health(name: string): Promise<{ status: number; body: Health } | undefined> {
    try {
      const r = await fetch(`${this.serve(name).adminUrl}/healthz?leader=1`, { signal: AbortSignal.timeout(1000) });
      return { status: r.status, body: (await r.json()) as Health };
    } catch {
      return undefined;
    }
  }

  async api<T>(name: string, path: string, init: RequestInit = {}): Promise<T> {
    const r = await fetch(`${this.serve(name).adminUrl}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" } });
    if (!r.ok) throw new Error(`${path} on ${name}: ${r.status} ${await r.text()}`);
    return (await r.json()) as T;
  }
  replicas = (name: string) => this.api<ReplicaView[]>(name, "/api/v1/replicas");

  startAgent(node: string, server: string, extra: string[] = []): Bun.Subprocess {
    const p = Bun.spawn(
      [this.bin, "agent", "--server", server, "--token", JOIN_TOKEN, "--name", node, "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
        "--fabric", "f1", "--simulate", "H100-80GB:2", "--logs-listen", "127.0.0.1:0", "--state-dir", join(this.dir, `agent-${node}`), "--stop-grace", "1s", "--health-interval", "100ms", "--log-level", "info", ...extra],
      { cwd: this.dir, env: { PATH: process.env.PATH ?? "" }, stdout: Bun.file(join(this.dir, `agent-${node}.log`)), stderr: Bun.file(join(this.dir, `agent-${node}.stderr`)) },
    );
    this.spawned.push(p);
    return p;
  }

  /** Pino lines of every log of serve `name`, all starts. */
  serveLog(name: string): Record<string, unknown>[] {
    const out: Record<string, unknown>[] = [];
    for (const f of readdirSync(this.dir).filter((x) => x.startsWith(`serve-${name}-`) && x.endsWith(".log")))
      for (const line of readFileSync(join(this.dir, f), "utf8").split("\n"))
        try {
          out.push(JSON.parse(line) as Record<string, unknown>);
        } catch {
          // not a log line
        }
    return out;
  }

  /** Fake engines of this binary that are alive (not zombies), by port. */
  engines(): { pid: number; port: number }[] {
    return fakeEnginesOf(this.bin);
  }

  async cleanup(): Promise<void> {
    for (const p of this.spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGTERM");
    for (const pid of this.pids) if (running(pid)) process.kill(pid, "SIGTERM");
    await Promise.race([Promise.all(this.spawned.map((p) => p.exited)), Bun.sleep(5_000)]);
    for (const p of this.spawned) if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    for (const pid of this.pids) if (running(pid)) process.kill(pid, "SIGKILL");
    // Engines of processes killed with SIGKILL have nobody to stop them; only this binary's.
    for (const e of this.engines()) if (running(e.pid)) process.kill(e.pid, "SIGKILL");
    rmSync(this.bin, { force: true });
  }
}

// ---- clients of the routers --------------------------------------------------------------------

/** The model both tests stream from: two replicas, one per node. */
export const CHAT = { replicas: { min: 2 }, placement: "spread", profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] };

interface StreamEnd {
  kind: "done" | "eof" | "error";
  text: string;
}

/** A long streaming chat (about 8 s of the fake engine's tokens); resolves once its first content arrived. */
export async function openStream(routerUrl: string, prompt: string): Promise<{ status: number; replica: string | null; end: Promise<StreamEnd> }> {
  const res = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "chat", stream: true, max_tokens: 1600, messages: [{ role: "user", content: prompt }] }),
  });
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let text = "";
  while (!text.includes('"content":"The')) {
    const { done, value } = await reader.read();
    if (done) break;
    text += dec.decode(value, { stream: true });
  }
  const end = (async (): Promise<StreamEnd> => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return { kind: text.includes("data: [DONE]") ? "done" : "eof", text };
        text += dec.decode(value, { stream: true });
      }
    } catch {
      return { kind: "error", text };
    }
  })();
  return { status: res.status, replica: res.headers.get("x-llmgw-replica"), end };
}

export const routes = async (routerUrl: string) =>
  (await fetch(`${routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "chat", max_tokens: 2, messages: [{ role: "user", content: "hi" }] }) })).status === 200;

