// The router end to end with the compiled binary in demo mode and the official `openai` npm
// SDK as the client: chat (streamed and not), completions, embeddings, the models list, an
// unknown model raising NotFoundError, a replica killed mid-stream giving an error (not a
// hang), a client abort reaching the engine, a cold on-demand model answering once its replica
// is ready, and idleness shown as unknown until traffic.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { appendFileSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import type { ReplicaView, Summary } from "../../src/protocol/views";
import { run, scratchWithBinary, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";

let dir: string;
let bin: string;
let demo: Bun.Subprocess;
let client: OpenAI;
let adminUrl: string;
let adminToken: string;
const dataDir = () => join(dir, "llmgw-data");


const api = async <T>(path: string): Promise<T> => (await (await fetch(`${adminUrl}${path}`, { headers: { authorization: `Bearer ${adminToken}` } })).json()) as T;
const replicas = () => api<ReplicaView[]>("/api/v1/replicas");

/** The pid of the engine running a replica, from the simulated agent's state file. */
function enginePid(replicaId: string): number | undefined {
  const agents = join(dataDir(), "agents");
  for (const node of readdirSync(agents)) {
    try {
      const s = JSON.parse(readFileSync(join(agents, node, "replicas", `${replicaId}.json`), "utf8")) as { pid: number };
      return s.pid;
    } catch {
      // not on this node
    }
  }
  return undefined;
}

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  const base = freePort(900);
  demo = Bun.spawn([bin, "demo", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`, "--engine-base-port", String(base)], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  const info = await until("the demo's server.json", () => {
    try {
      return JSON.parse(readFileSync(join(dataDir(), "server.json"), "utf8")) as { admin_url: string; router_url: string };
    } catch {
      return undefined;
    }
  });
  adminUrl = info.admin_url;
  adminToken = readFileSync(join(dataDir(), "admin.token"), "utf8").trim();
  client = new OpenAI({ baseURL: `${info.router_url}/v1`, apiKey: "not-needed", maxRetries: 0, timeout: 30_000 });
  await until("llama-3.1-8b ready twice", async () => (await replicas()).filter((r) => r.model === "llama-3.1-8b" && r.state === "ready").length === 2, 30_000);
}, 60_000);

afterAll(async () => {
  demo?.kill("SIGTERM");
  await demo?.exited;
});

describe("the OpenAI SDK against llmgw demo", () => {
  test("before any traffic every replica's idleness is unknown, and status lists none idle", async () => {
    expect((await replicas()).filter((r) => r.state === "ready").every((r) => r.idle_seconds < 0)).toBe(true);
    expect(run(bin, ["replicas"], { cwd: dir }).stdout).toMatch(/llama-3\.1-8b\s+l40s\s+ready\s+l40s-1:\d\s+-\s/);
    const s = JSON.parse(run(bin, ["status", "-o", "json"], { cwd: dir }).stdout) as Summary;
    expect(s.idle_replicas).toEqual([]);
  });

  test("chat, not streamed, by name and alias", async () => {
    for (const model of ["llama-3.1-8b", "llama3-8b"]) {
      const r = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Say hello" }] });
      expect(r.object).toBe("chat.completion");
      expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
      expect(r.usage!.completion_tokens).toBeGreaterThan(0);
    }
  });

  test("chat, streamed, with usage", async () => {
    const stream = await client.chat.completions.create({
      model: "llama-3.1-8b",
      messages: [{ role: "user", content: "Count to five" }],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 8,
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.split(" ").length).toBeGreaterThanOrEqual(8);
    expect(usage?.completion_tokens).toBe(8);
  });

  test("chat with n = 2 and a max_tokens that cuts the answer: two choices, each finished by length", async () => {
    const r = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "Two ways to say hi" }], n: 2, max_tokens: 3 });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(r.choices.map((c) => c.finish_reason)).toEqual(["length", "length"]);
    expect(r.usage!.completion_tokens).toBe(6);
  });

  test("the Responses API through the router: client.responses.create, not streamed and streamed", async () => {
    const r = await client.responses.create({ model: "llama-3.1-8b", input: "Say hello", instructions: "Be brief" });
    expect(r.object).toBe("response");
    expect(r.status).toBe("completed");
    expect(r.output_text.length).toBeGreaterThan(0);
    expect(r.usage!.output_tokens).toBeGreaterThan(0);
    const cut = await client.responses.create({ model: "llama3-8b", input: [{ role: "user", content: "A long story" }], max_output_tokens: 3 });
    expect(cut.status).toBe("incomplete");
    expect(cut.incomplete_details?.reason).toBe("max_output_tokens");
    const stream = await client.responses.create({ model: "llama-3.1-8b", input: "Count to five", stream: true, max_output_tokens: 5 });
    const types: string[] = [];
    let text = "";
    let final: OpenAI.Responses.Response | undefined;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.incomplete" || ev.type === "response.completed") final = ev.response;
    }
    expect(types[0]).toBe("response.created");
    expect(types).toContain("response.output_text.done");
    expect(text.split(" ")).toHaveLength(5);
    expect(final?.output_text ?? final?.output.flatMap((o) => (o.type === "message" ? o.content.map((c) => (c.type === "output_text" ? c.text : "")) : [])).join("")).toBe(text);
  });

  test("previous_response_id goes back to the replica that made the response, turn after turn", async () => {
    let { data: r, response } = await client.responses.create({ model: "llama-3.1-8b", input: "Where shall we start?" }).withResponse();
    const home = response.headers.get("x-llmgw-replica");
    expect(home).toBeTruthy();
    for (let t = 0; t < 4; t++) {
      ({ data: r, response } = await client.responses.create({ model: "llama-3.1-8b", previous_response_id: r.id, input: [{ role: "user", content: `turn ${t}: ${"more ".repeat(t * 7)}` }] }).withResponse());
      expect(response.headers.get("x-llmgw-replica")).toBe(home);
    }
  });

  test("a large body is read on the router's body worker; one nested too deep is refused naming the flag", async () => {
    const workers = () => readdirSync(`/proc/${demo.pid}/task`).filter((t) => readFileSync(`/proc/${demo.pid}/task/${t}/comm`, "utf8").trim() === "Worker").length;
    const before = workers();
    const image = `data:image/png;base64,${"iVBORw0K".repeat(128 * 1024)}`;
    const r = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: image } }] }], max_tokens: 2 });
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    // The body worker is a thread of its own, started by the first body it reads.
    expect(workers()).toBe(before + 1);
    const deep = JSON.parse(`${"[".repeat(100)}${"]".repeat(100)}`) as string;
    const err = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: deep }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("json_too_deep");
    expect((err as Error).message).toContain("--max-json-depth 64");
  });

  test("completions, embeddings and the models list", async () => {
    const c = await client.completions.create({ model: "llama-3.1-8b", prompt: "Once upon a time", max_tokens: 4 });
    expect(c.choices[0]!.text.length).toBeGreaterThan(0);
    const e = await client.embeddings.create({ model: "llama-3.1-8b", input: ["a", "b", "c"] });
    expect(e.data.length).toBe(3);
    expect(e.data[0]!.embedding.length).toBeGreaterThan(0);
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual(expect.arrayContaining(["llama-3.1-8b", "llama3-8b", "qwen2.5-7b", "llama-3.1-405b"]));
    // No node has H200s: not offered, since no client could ever use it.
    expect(ids).not.toContain("deepseek-v3");
  });

  test("a model that can never fit fails at once with its reason, even with the SDK's default retries", async () => {
    const patient = new OpenAI({ baseURL: client.baseURL, apiKey: "not-needed", timeout: 30_000 });
    const started = Date.now();
    const err = await patient.chat.completions.create({ model: "deepseek-v3", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).code).toBe("model_cannot_run");
    expect((err as Error).message).toContain("can never fit on this fleet: no node has H200-141GB GPUs");
    // Retried, it would have waited out the SDK's backoff twice.
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  test("an unknown model raises the SDK's NotFoundError", async () => {
    const err = await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] }).catch((e) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");
  });

  test("after traffic, used replicas show how long they have been idle; the others stay unknown", async () => {
    await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "ping" }] });
    const used = await until("a stamped replica", async () => (await replicas()).find((r) => r.model === "llama-3.1-8b" && r.idle_seconds >= 0), 5_000);
    expect(used.idle_seconds).toBeLessThan(60);
    expect((await replicas()).find((r) => r.model === "llama-3.1-405b")!.idle_seconds).toBe(-1);
    const table = run(bin, ["replicas"], { cwd: dir }).stdout;
    expect(table).toMatch(new RegExp(`${used.id}\\s+llama-3\\.1-8b\\s+l40s\\s+ready\\s+\\S+\\s+\\d+s\\s`));
    expect(table).toMatch(/llama-3\.1-405b\s+2xh100\s+ready\s+.*\s-\s+0/);
  });

  test("a client abort reaches the engine: its running request ends at once", async () => {
    const ac = new AbortController();
    const stream = await client.chat.completions.create(
      { model: "llama-3.1-405b", messages: [{ role: "user", content: "a long story" }], stream: true, max_tokens: 4000 },
      { signal: ac.signal },
    );
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    const r = (await replicas()).find((x) => x.model === "llama-3.1-405b")!;
    const running = async () => {
      const text = await (await fetch(`${r.endpoint}/metrics`)).text();
      return Number(/^vllm:num_requests_running\{[^}]*\} (\d+)/m.exec(text)?.[1] ?? -1);
    };
    expect(await running()).toBe(1);
    ac.abort();
    await until("the engine stopped generating", async () => (await running()) === 0, 3_000);
  });

  test("a replica killed mid-stream gives the client an error, not a hang", async () => {
    const stream = await client.chat.completions.create({ model: "llama-3.1-8b", messages: [{ role: "user", content: "tell me everything" }], stream: true, max_tokens: 4000 });
    const it = stream[Symbol.asyncIterator]();
    await it.next();
    const ready = (await replicas()).filter((x) => x.model === "llama-3.1-8b" && x.state === "ready");
    // Kill the engine this stream is on: the one with a request running.
    let victim: ReplicaView | undefined;
    for (const r of ready) {
      const text = await (await fetch(`${r.endpoint}/metrics`)).text();
      if (/^vllm:num_requests_running\{[^}]*\} 1/m.test(text)) victim = r;
    }
    expect(victim).toBeDefined();
    process.kill(enginePid(victim!.id)!, "SIGKILL");
    const t = performance.now();
    const err = await (async () => {
      for (;;) {
        const n = await it.next();
        if (n.done) return undefined;
      }
    })().catch((e) => e);
    expect(performance.now() - t).toBeLessThan(2_000);
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(String((err as Error).message)).toContain("failed mid-stream");
  });

  test("a request for a cold on-demand model succeeds once its replica is ready", async () => {
    expect((await replicas()).filter((r) => r.model === "qwen2.5-7b")).toEqual([]);
    const r = await client.chat.completions.create({ model: "qwen2.5-7b", messages: [{ role: "user", content: "wake up" }] });
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect((await replicas()).filter((x) => x.model === "qwen2.5-7b" && x.state === "ready").length).toBe(1);
  }, 30_000);

  test("llmgw logs shows a replica's engine log through the control plane, and -f follows it", async () => {
    const r = (await replicas()).find((x) => x.model === "llama-3.1-8b" && x.state === "ready")!;
    const once = run(bin, ["logs", r.id], { cwd: dir });
    expect(once.code).toBe(0);
    expect(once.stdout).toContain("llmgw fake-engine listening on");
    expect(run(bin, ["logs", "r-nope"], { cwd: dir }).stderr).toBe('error: replica "r-nope" not found (not in the control plane, and no event says where it ran)\n');
    const follow = Bun.spawn([bin, "logs", r.id, "-f", "--tail", "1"], { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe" });
    try {
      const reader = follow.stdout.getReader();
      let seen = new TextDecoder().decode((await reader.read()).value);
      // The engine writes a line; the follower sees it.
      const node = r.shards[0]!.node;
      appendFileSync(join(dataDir(), "agents", node, "logs", `${r.id}.log`), "INFO 12-01 engine says hello\n");
      while (!seen.includes("engine says hello")) seen += new TextDecoder().decode((await reader.read()).value);
      expect(seen).toContain("engine says hello");
    } finally {
      follow.kill();
    }
  });
});
