// Issue #16 end to end with the compiled binary: `serve` and one simulated agent (node h100-2).
// A streamed request for a cold on-demand model gets 200 and SSE comment lines while its replica
// starts (`: starting llama-3.1-8b on h100-2, 0 s`), before the first data chunk, and then a
// normal completion that the official SDK reads like any other stream. The agent polls a
// starting engine's health every 2 s, so the replica is starting for a while, on a known node.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import type { NodeView, ReplicaView } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";
import { enginePidsIn } from "../helpers/agent-state";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let agent: Bun.Subprocess | undefined;

const api = async <T>(path: string): Promise<T> => (await (await fetch(`${serve.adminUrl}${path}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).json()) as T;

/** Engine pids the agent recorded, so none outlives the test. */
const enginePids = () => [...enginePidsIn(join(dir, "agent")).values()];

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir, [
    "--heartbeat-interval", "300ms", "--reconcile-interval", "200ms", "--engine-base-port", String(freePort(900)), "--log-level", "warn",
    "--cold-start-progress-interval", "300ms", "--max-held-per-model", "2",
  ]);
  agent = Bun.spawn(
    [bin, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", "h100-2", "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
      "--simulate", "H100-80GB:1", "--logs-listen", "127.0.0.1:0", "--state-dir", join(dir, "agent"), "--stop-grace", "1s", "--health-interval", "2s", "--log-level", "warn"],
    { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "ignore", stderr: "pipe" },
  );
  await until("the agent registered", async () => (await api<NodeView[]>("/api/v1/nodes")).some((n) => n.name === "h100-2" && n.state === "ready"));
  writeFileSync(join(dir, "catalog.yaml"), `models:
  - name: llama-3.1-8b
    on_demand: true
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}
`);
  expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir }).code).toBe(0);
}, 60_000);

afterAll(async () => {
  const pids = dir ? enginePids() : [];
  agent?.kill("SIGTERM");
  await agent?.exited;
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("a streamed request for a cold on-demand model", () => {
  test("gets `: starting …` comments before its first data chunk, then a normal completion", async () => {
    expect((await api<ReplicaView[]>("/api/v1/replicas")).filter((r) => r.model === "llama-3.1-8b")).toEqual([]);
    const res = await fetch(`${serve.routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "llama-3.1-8b", stream: true, messages: [{ role: "user", content: "wake up" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const text = await res.text();
    const head = text.slice(0, text.indexOf("data: "));
    const comments = head.split("\n").filter(Boolean);
    expect(comments.length).toBeGreaterThan(0);
    expect(comments.every((l) => /^: starting llama-3\.1-8b( on h100-2)?, \d+ s$/.test(l))).toBe(true);
    // Once placed, the comments name the node its replica is starting on.
    expect(comments.some((l) => l.startsWith(": starting llama-3.1-8b on h100-2, "))).toBe(true);
    const events = text.split("\n").filter((l) => l.startsWith("data: "));
    expect(events.at(-1)).toBe("data: [DONE]");
    const chunks = events.slice(0, -1).map((l) => JSON.parse(l.slice(6)) as { object: string; choices: { delta: { content?: string }; finish_reason: string | null }[] });
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("").length).toBeGreaterThan(0);
    expect(chunks.some((c) => c.choices[0]?.finish_reason === "stop" || c.choices[0]?.finish_reason === "length")).toBe(true);
    // The replica is warm now: the SDK streams from it straight away, as from any other.
    const client = new OpenAI({ baseURL: `${serve.routerUrl}/v1`, apiKey: "x", maxRetries: 0 });
    let content = "";
    for await (const c of await client.chat.completions.create({ model: "llama-3.1-8b", stream: true, messages: [{ role: "user", content: "again" }] })) content += c.choices[0]?.delta.content ?? "";
    expect(content.length).toBeGreaterThan(0);
  }, 60_000);

  test("past --max-held-per-model the next request for a model waiting for GPUs is refused 503 with Retry-After", async () => {
    // The node's one GPU serves llama-3.1-8b, just used: a second on-demand model waits for it.
    writeFileSync(join(dir, "more.yaml"), `models:
  - name: qwen2.5-7b
    on_demand: true
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}
`);
    expect(run(bin, ["apply", "-f", "more.yaml"], { cwd: dir }).code).toBe(0);
    // The router learns the catalog after the control plane's next tick: until then the model is unknown (404).
    await until("the router to list qwen2.5-7b", async () => {
      const r = await fetch(`${serve.routerUrl}/v1/models`);
      return ((await r.json()) as { data: { id: string }[] }).data.some((m) => m.id === "qwen2.5-7b");
    });
    const body = JSON.stringify({ model: "qwen2.5-7b", stream: true, messages: [{ role: "user", content: "hi" }] });
    const post = (signal?: AbortSignal) => fetch(`${serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body, ...(signal ? { signal } : {}) });
    const ac = new AbortController();
    try {
      const held = await Promise.all([post(ac.signal), post(ac.signal)]);
      for (const h of held) {
        expect(h.status).toBe(200);
        const first = new TextDecoder().decode((await h.body!.getReader().read()).value);
        expect(first).toStartWith(": starting qwen2.5-7b");
      }
      const over = await post();
      expect(over.status).toBe(503);
      expect(over.headers.get("retry-after")).toBe("10");
      const e = ((await over.json()) as { error: { message: string; code: string } }).error;
      expect(e.code).toBe("too_many_waiting");
      expect(e.message).toContain("'qwen2.5-7b'");
      expect(e.message).toContain("--max-held-per-model 2");
    } finally {
      ac.abort();
    }
  }, 60_000);
});
