// Issue #3 end to end with the compiled binary: `serve` plus two simulated agents, each its own
// process, running the built-in fake engine. A model with min 2 becomes two ready replicas on
// the right GPUs; a killed engine is replaced; an engine that always exits parks its model with
// its stderr as the reason; a drain never leaves fewer ready than before; an agent that stops
// heartbeating has its replicas replaced elsewhere, and stops them itself when it comes back.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { deriveEngineKey } from "../../src/control/engine-keys";
import type { ModelView, NodeView, ReplicaView, Summary } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";
import { enginePidsIn } from "../helpers/agent-state";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let serveArgs: string[];
const agents: Record<string, Bun.Subprocess> = {};


function startAgent(name: string) {
  agents[name] = Bun.spawn(
    [bin, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", name, "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
      "--fabric", "f1", "--simulate", "H100-80GB:2", "--logs-listen", "127.0.0.1:0", "--state-dir", join(dir, `agent-${name}`), "--stop-grace", "1s", "--health-interval", "100ms", "--log-level", "warn"],
    { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "ignore", stderr: "pipe" },
  );
}

const api = async <T>(path: string, init: RequestInit = {}): Promise<T> => {
  const r = await fetch(`${serve.adminUrl}${path}`, { ...init, headers: { authorization: `Bearer ${serve.adminToken}`, "content-type": "application/json" } });
  return (await r.json()) as T;
};
const replicas = () => api<ReplicaView[]>("/api/v1/replicas");
const readyOf = async (model: string) => (await replicas()).filter((r) => r.model === model && r.state === "ready");

/** Engine pids the agent recorded for its replicas. */
const enginePids = (name: string) => enginePidsIn(join(dir, `agent-${name}`));
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  // Fixed ports, so a restarted server is where agents and clients left it.
  serveArgs = [
    "--heartbeat-interval", "300ms", "--node-timeout", "2s", "--replace-after", "1s", "--restart-backoff", "100ms",
    "--reconcile-interval", "200ms", "--engine-base-port", String(freePort(900)), "--log-level", "warn",
    "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`,
  ];
  serve = await startServe(bin, dir, serveArgs);
  startAgent("a");
  startAgent("b");
  await until("both agents registered", async () => (await api<NodeView[]>("/api/v1/nodes")).filter((n) => n.state === "ready").length === 2);
}, 30_000);

afterAll(async () => {
  const pids = [...enginePids("a").values(), ...enginePids("b").values()];
  for (const p of Object.values(agents)) {
    p.kill("SIGCONT");
    p.kill("SIGTERM");
  }
  await Promise.all(Object.values(agents).map((p) => p.exited));
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  // Whatever an agent could not stop (it was killed) must not outlive the test.
  for (const pid of pids) if (alive(pid)) process.kill(pid, "SIGKILL");
});

describe("a simulated cluster run by the compiled binary", () => {
  test("min 2 becomes two ready replicas on H100 GPUs of the two nodes, each answering as the model", async () => {
    writeFileSync(join(dir, "catalog.yaml"), `models:
  - name: chat
    aliases: [chat-alias]
    replicas: {min: 2}
    placement: spread
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}
`);
    expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir }).stdout).toBe("model/chat created\n");
    const ready = await until("2 ready replicas", async () => {
      const r = await readyOf("chat");
      return r.length === 2 ? r : undefined;
    });
    expect(ready.map((r) => r.shards[0]!.node).sort()).toEqual(["a", "b"]);
    const nodes = await api<NodeView[]>("/api/v1/nodes");
    for (const r of ready) {
      const node = nodes.find((n) => n.name === r.shards[0]!.node)!;
      const gpu = node.gpus.find((g) => g.index === r.shards[0]!.gpus[0])!;
      expect(gpu.class).toBe("H100-80GB");
      expect(gpu.in_use_by).toBe(r.id);
      // The engine answers only with its replica's key, derived from the head node's secret.
      expect((await fetch(`${r.endpoint}/v1/models`)).status).toBe(401);
      const key = deriveEngineKey(readFileSync(join(dir, "llmgw-data", "engine.secret"), "utf8").trim(), r.id);
      const models = (await (await fetch(`${r.endpoint}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).toEqual(["chat", "chat-alias"]);
    }
  });

  test("killing a fake engine leads to a replacement", async () => {
    const [victim] = await readyOf("chat");
    const pid = await until("the engine's pid", () => enginePids(victim!.shards[0]!.node).get(victim!.id));
    process.kill(pid, "SIGKILL");
    const after = await until("a replacement ready", async () => {
      const r = await readyOf("chat");
      return r.length === 2 && !r.some((x) => x.id === victim!.id) ? r : undefined;
    });
    expect(after.length).toBe(2);
    const events = run(bin, ["events", "-n", "200"], { cwd: dir }).stdout;
    expect(events).toContain(`replica ${victim!.id} of chat failed`);
  });

  test("a model whose engine always exits is parked with its stderr as the reason", async () => {
    const body = { replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, env: { LLMGW_FAKE_FAIL: "RuntimeError: CUDA error: no kernel image is available" } }] };
    await api("/api/v1/models/broken", { method: "PUT", body: JSON.stringify(body) });
    const m = await until("the model parked", async () => (await api<ModelView[]>("/api/v1/models")).find((x) => x.name === "broken" && x.parked), 30_000);
    expect(m.failures).toBe(5);
    expect(m.reason).toContain("RuntimeError: CUDA error: no kernel image is available");
    const s = await api<Summary>("/api/v1/summary");
    expect(s.parked[0]).toMatchObject({ model: "broken", failures: 5 });
    // -o wide: the reason whole (piped, the default view fits 80 columns and cuts it).
    expect(run(bin, ["status", "-o", "wide"], { cwd: dir }).stdout).toMatch(/Parked[\s\S]*broken\s+5\s+.*no kernel image/);
    // Parked: nothing is retried, its GPU is free again.
    expect((await replicas()).filter((r) => r.model === "broken" && r.state === "starting")).toEqual([]);
    await api("/api/v1/models/broken", { method: "DELETE" });
  }, 40_000);

  test("draining a node moves its replicas without ever having fewer ready than before", async () => {
    const before = (await readyOf("chat")).length;
    expect(before).toBe(2);
    expect(run(bin, ["drain", "a"], { cwd: dir }).stdout).toBe("node/a draining\n");
    let minReady = before;
    const drained = await until(
      "node a drained",
      async () => {
        minReady = Math.min(minReady, (await readyOf("chat")).length);
        const a = await api<NodeView>("/api/v1/nodes/a");
        const onA = (await replicas()).filter((r) => r.shards.some((s) => s.node === "a"));
        return a.state === "cordoned" && onA.length === 0 ? a : undefined;
      },
      30_000,
    );
    expect(drained.state).toBe("cordoned");
    expect(minReady).toBeGreaterThanOrEqual(before);
    const now = await readyOf("chat");
    expect(now.length).toBe(2);
    expect(now.every((r) => r.shards[0]!.node === "b")).toBe(true);
    expect(run(bin, ["events", "-n", "500"], { cwd: dir }).stdout).toContain("node a drained: cordoned and empty");
  }, 40_000);

  test("an agent that stops heartbeating has its replicas replaced elsewhere; back, it stops what it no longer runs", async () => {
    run(bin, ["uncordon", "a"], { cwd: dir });
    const onB = (await readyOf("chat")).map((r) => r.id);
    const pidsOnB = enginePids("b");
    agents.b!.kill("SIGSTOP"); // frozen: no heartbeats, its engines keep running
    const moved = await until(
      "replicas replaced on a",
      async () => {
        const r = await readyOf("chat");
        return r.length === 2 && r.every((x) => x.shards[0]!.node === "a") ? r : undefined;
      },
      30_000,
    );
    expect(moved.some((r) => onB.includes(r.id))).toBe(false);
    expect((await api<NodeView>("/api/v1/nodes/b")).state).toBe("unreachable");
    agents.b!.kill("SIGCONT");
    // Back: its old replicas are no longer assigned to it, so it stops them; nothing runs twice.
    await until("b's old engines stopped", () => [...pidsOnB.values()].every((p) => !alive(p)), 20_000);
    await until("b ready again", async () => (await api<NodeView>("/api/v1/nodes/b")).state === "ready");
    expect((await readyOf("chat")).length).toBe(2);
  }, 60_000);

  test("after a server restart, replicas are re-adopted from heartbeats and their idleness is unknown again", async () => {
    const before = await readyOf("chat");
    expect(before.length).toBe(2);
    // Traffic through the router stamps a replica.
    const res = await fetch(`${serve.routerUrl}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "chat", messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    const used = await until("a stamped replica", async () => (await replicas()).find((r) => r.idle_seconds >= 0));
    expect(before.map((r) => r.id)).toContain(used.id);

    serve.proc.kill("SIGTERM");
    await serve.proc.exited;
    serve = await startServe(bin, dir, serveArgs);
    const after = await until("both replicas ready again", async () => {
      const r = await readyOf("chat");
      return r.length === 2 ? r : undefined;
    });
    // Same replicas, not new ones: the agents kept running them and said so.
    expect(after.map((r) => r.id).sort()).toEqual(before.map((r) => r.id).sort());
    expect(after.every((r) => r.idle_seconds === -1)).toBe(true);
    expect(run(bin, ["replicas"], { cwd: dir }).stdout).toMatch(new RegExp(`${used.id}\\s+chat\\s+h100\\s+ready\\s+\\S+\\s+-\\s`));
    const s = JSON.parse(run(bin, ["status", "-o", "json"], { cwd: dir }).stdout) as Summary;
    expect(s.idle_replicas).toEqual([]);
    // And the router serves again.
    const again = await fetch(`${serve.routerUrl}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "chat-alias", messages: [{ role: "user", content: "hi" }] }) });
    expect(again.status).toBe(200);
  }, 40_000);

  test("drain --wait follows the replicas until the node is empty; apply --wait until ready or parked", async () => {
    run(bin, ["uncordon", "a"], { cwd: dir });
    await until("a ready", async () => (await api<NodeView>("/api/v1/nodes/a")).state === "ready");
    const onB = (await readyOf("chat")).filter((r) => r.shards[0]!.node === "b").length;
    const d = run(bin, ["drain", "b", "--wait", "--timeout", "30s"], { cwd: dir });
    expect(d.code).toBe(0);
    expect(d.stdout.startsWith("node/b draining\n")).toBe(true);
    expect(d.stdout.trim().endsWith("node/b drained")).toBe(true);
    // Replicas that were on b are placed elsewhere as it drains, and the wait reports each one;
    // with none on b, there is nothing to report.
    expect(d.stdout.includes("placed replica")).toBe(onB > 0);
    expect((await api<NodeView>("/api/v1/nodes/b")).state).toBe("cordoned");
    run(bin, ["uncordon", "b"], { cwd: dir });

    writeFileSync(join(dir, "more.yaml"), `models:
  - name: extra
    replicas: {min: 1}
    profiles: [{name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}]
`);
    const ok = run(bin, ["apply", "-f", "more.yaml", "--wait", "--timeout", "30s"], { cwd: dir });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("model/extra created");
    expect(ok.stdout).toContain("model/extra ready 1/1");
    expect(ok.stdout.trim().endsWith("all models ready")).toBe(true);

    writeFileSync(join(dir, "bad.yaml"), `models:
  - name: doomed
    replicas: {min: 1}
    profiles: [{name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1, env: {LLMGW_FAKE_FAIL: "ImportError: libcudart.so.12 not found"}}]
`);
    const bad = run(bin, ["apply", "-f", "bad.yaml", "--wait", "--timeout", "30s"], { cwd: dir });
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain("model/doomed parked: exited with code 1: ImportError: libcudart.so.12 not found");
    expect(bad.stderr).toBe("error: doomed parked: see `llmgw models` for why\n");
  }, 60_000);
});
