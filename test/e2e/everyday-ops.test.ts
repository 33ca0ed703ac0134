// Issue #16 §3 through the compiled binary: `llmgw logs --previous` shows the log of a replica
// whose fake engine exited (and that is gone from the control plane), and for its replacement
// the run before; `join-command` prints an address the admin listener accepts and a --fabric
// placeholder; engine ports stay inside --engine-base-port … +--engine-port-range-1, and a
// replica beyond the range is not placed, its model saying why.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ModelView, NodeView, ReplicaView } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";
import { enginePidsIn } from "../helpers/agent-state";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let agent: Bun.Subprocess | undefined;
const RANGE = 4;
let base = 0;

const api = async <T>(path: string): Promise<T> => (await (await fetch(`${serve.adminUrl}${path}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).json()) as T;
const replicas = () => api<ReplicaView[]>("/api/v1/replicas");
const cli = (...args: string[]) => run(bin, args, { cwd: dir });

const enginePids = () => enginePidsIn(join(dir, "agent-n1"));

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  base = freePort(2 * RANGE);
  serve = await startServe(bin, dir, [
    "--heartbeat-interval", "300ms", "--reconcile-interval", "200ms", "--restart-backoff", "100ms",
    "--engine-base-port", String(base), "--engine-port-range", String(RANGE), "--log-level", "warn",
  ]);
  agent = Bun.spawn(
    [bin, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", "n1", "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
      "--simulate", "H100-80GB:6", "--logs-listen", "127.0.0.1:0", "--state-dir", join(dir, "agent-n1"), "--stop-grace", "1s", "--health-interval", "100ms", "--log-level", "warn"],
    { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "ignore", stderr: "pipe" },
  );
  await until("the agent registered", async () => (await api<NodeView[]>("/api/v1/nodes")).some((n) => n.name === "n1" && n.state === "ready"));
}, 30_000);

afterAll(async () => {
  const pids = [...enginePids().values()];
  agent?.kill("SIGTERM");
  await agent?.exited;
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone, as it should be
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("llmgw logs --previous", () => {
  test("a replica whose engine exited shows its old log with --previous, also once it is gone; its replacement's --previous is that run", async () => {
    writeFileSync(join(dir, "one.yaml"), "models:\n  - name: chat\n    replicas: {min: 1}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}\n");
    expect(cli("apply", "-f", "one.yaml").code).toBe(0);
    const first = await until("a ready replica", async () => (await replicas()).find((r) => r.model === "chat" && r.state === "ready"));

    // Its first run: nothing before it.
    const none = cli("logs", first.id, "--previous");
    expect(none.code).not.toBe(0);
    expect(none.stderr).toContain(`replica ${first.id} has no previous run on n1`);
    const both = cli("logs", first.id, "--previous", "-f");
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--previous and -f/--follow do not go together");
    expect(cli("logs", "--help").stdout).toContain("--previous");

    // The engine exits; the replica is failed and replaced, and its record goes.
    const pid = await until("the engine's pid", () => enginePids().get(first.id));
    process.kill(pid, "SIGKILL");
    const next = await until("a replacement ready and the failed one gone", async () => {
      const list = await replicas();
      const ready = list.find((r) => r.model === "chat" && r.state === "ready" && r.id !== first.id);
      return ready && !list.some((r) => r.id === first.id) ? ready : undefined;
    });

    const old = cli("logs", first.id, "--previous");
    expect(old.stderr).toBe("");
    expect(old.code).toBe(0);
    expect(old.stdout).toContain(`=== llmgw: starting replica ${first.id}`);
    expect(old.stdout).toContain("llmgw fake-engine listening on");
    expect(old.stdout).not.toContain(next.id);
    // Without --previous, a gone replica says where it ran and how to see it.
    const plain = cli("logs", first.id);
    expect(plain.code).not.toBe(0);
    expect(plain.stderr).toContain(`is no longer running (it ran on n1): \`llmgw logs ${first.id} --previous\``);

    // The replacement runs its first run: its previous run is the failed replica's, named.
    const prev = cli("logs", next.id, "--previous");
    expect(prev.code).toBe(0);
    expect(prev.stderr).toContain(`its previous run is that of ${first.id} on n1, the failed replica it replaced`);
    expect(prev.stdout).toContain(`=== llmgw: starting replica ${first.id}`);
    // Its own log is its own run.
    const own = cli("logs", next.id);
    expect(own.stdout).toContain(`=== llmgw: starting replica ${next.id}`);
    expect(own.stdout).not.toContain(first.id);
    expect(cli("logs", "r-never-was", "--previous").stderr).toContain('replica "r-never-was" not found');
    expect(cli("models", "delete", "chat").code).toBe(0);
  }, 60_000);
});

describe("engine ports", () => {
  test(`every engine port is within --engine-base-port … +${RANGE - 1}; a replica beyond the range is not placed, and its model says why`, async () => {
    await until("chat's replicas gone", async () => !(await replicas()).some((r) => r.model === "chat"));
    writeFileSync(join(dir, "many.yaml"), "models:\n  - name: many\n    replicas: {min: 6}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}\n");
    expect(cli("apply", "-f", "many.yaml").code).toBe(0);
    const ready = await until(`${RANGE} ready`, async () => {
      const r = (await replicas()).filter((x) => x.model === "many" && x.state === "ready");
      return r.length === RANGE ? r : undefined;
    });
    const portOf = (r: ReplicaView) => Number(new URL(r.endpoint!).port);
    const ports = ready.map(portOf).sort((a, b) => a - b);
    expect(ports).toEqual(Array.from({ length: RANGE }, (_, i) => base + i));
    const model = await until("the reason", async () => (await api<ModelView[]>("/api/v1/models")).find((m) => m.name === "many" && m.reason));
    expect(model.reason).toContain(`no free engine port on 127.0.0.1: all ${RANGE} of ${base}…${base + RANGE - 1} are in use`);
    // No more replicas appear after a few ticks, and none outside the range.
    await Bun.sleep(1000);
    const all = (await replicas()).filter((x) => x.model === "many");
    expect(all.length).toBe(RANGE);
    for (const r of all) expect(portOf(r) >= base && portOf(r) < base + RANGE).toBe(true);
    expect(cli("serve", "--help").stdout).toContain("--engine-port-range");
  }, 60_000);

  test("a base and range past 65535 are refused naming the flag", () => {
    const r = cli("serve", "--engine-base-port", "65000", "--engine-port-range", "900", "--data-dir", join(dir, "never"));
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("engine_port_range");
    expect(r.stderr).toContain("past 65535");
  });
});

describe("join-command", () => {
  test("with serve on 127.0.0.1 only: that address, which the listener accepts, said so; --fabric FABRIC explained", async () => {
    const r = cli("join-command");
    expect(r.code).toBe(0);
    const server = /llmgw agent --server (\S+) --token-file \S+ --fabric FABRIC\n/.exec(r.stdout)?.[1];
    expect(server).toBe(serve.adminUrl);
    expect(r.stdout).toContain("# FABRIC: replace it");
    expect(r.stdout).toContain("only: an agent on this machine can join");
    expect((await fetch(`${server}/healthz`)).status).toBeLessThan(500);
    const lan = cli("join-command", "--address", "10.255.0.1");
    expect(lan.code).not.toBe(0);
    expect(lan.stderr).toContain("accepts connections on 127.0.0.1");
    expect(cli("join-command", "--fabric", "ib-a").stdout).toContain("--fabric ib-a\n");
  });

  test("with serve on 0.0.0.0: an address of an interface that exists, named, and the listener accepts it", async () => {
    const d2 = join(dir, "wild");
    const port = freePort();
    const p = Bun.spawn([bin, "serve", "--admin-listen", `0.0.0.0:${port}`, "--listen", "127.0.0.1:0", "--data-dir", d2, "--log-level", "warn"], { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "ignore", stderr: "ignore" });
    try {
      await until("server.json", () => existsSync(join(d2, "server.json")) || undefined);
      const r = cli("join-command", "--data-dir", d2);
      expect(r.code).toBe(0);
      const server = /llmgw agent --server (\S+) /.exec(r.stdout)?.[1]!;
      const { networkInterfaces } = await import("node:os");
      const mine = Object.values(networkInterfaces()).flatMap((l) => (l ?? []).map((a) => a.address));
      const host = new URL(server).hostname.replace(/^\[|\]$/g, "");
      expect(mine).toContain(host);
      expect(new URL(server).port).toBe(String(port));
      expect(r.stdout).toMatch(/# server: (the address of interface \S+ \(serve listens on all addresses|this machine has no network interface but loopback)/);
      const res = await fetch(`${server}/healthz`);
      expect(res.status).toBeLessThan(500);
    } finally {
      p.kill("SIGTERM");
      await p.exited;
    }
  }, 30_000);
});
