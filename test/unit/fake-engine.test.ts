// Tests of the built-in fake engine against a real server on 127.0.0.1 with real fetch: wire
// shapes (checked against a real OpenAI stream), slots and queueing, prefix cache, aborts, flags.
// The `llmgw fake-engine` command as a process of its own is tested in
// test/integration/fake-engine-command.test.ts.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type FakeEngine, type FakeEngineOptions, parseFakeEngineFlags, startFakeEngine } from "../../src/sim/fake-engine";
import { PrefixCache, ttftWithHits } from "../../src/sim/prefix-cache";
import { UsageError } from "../../src/config/flags";
import { openAIErrorBody } from "../../src/router/errors";
import { readFixture } from "../fixtures/read";
import { until } from "../helpers/until";

const started: FakeEngine[] = [];
async function engine(opts: Partial<FakeEngineOptions> = {}): Promise<FakeEngine> {
  const e = await startFakeEngine({ models: ["m"], ...opts });
  started.push(e);
  return e;
}
afterAll(async () => {
  await Promise.all(started.map((e) => e.stop()));
});

/**
 * Waits for the engine's state to change. Polled, because the engine runs on a real socket with
 * real timers (the client's request crosses the loopback before the engine sees it).
 */
const waitFor = (cond: () => boolean, what: string) => until(what, cond, { everyMs: 1 });

function post(base: string, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

/** Yields each SSE `data:` payload; fails on anything that is not a well-formed data frame. */
async function* ssePayloads(res: Response): AsyncGenerator<string> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!frame.startsWith("data: ")) throw new Error(`not an SSE data frame: ${JSON.stringify(frame)}`);
      yield frame.slice(6);
    }
  }
  if (buf !== "") throw new Error(`stream ended inside a frame: ${JSON.stringify(buf)}`);
}

async function allPayloads(res: Response): Promise<string[]> {
  const out: string[] = [];
  for await (const p of ssePayloads(res)) out.push(p);
  return out;
}

function metricValue(text: string, name: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`));
  if (line === undefined) throw new Error(`metric ${name} missing`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({
  model: "m",
  messages: [{ role: "user", content }],
  ...extra,
});

type Json = Record<string, any>;
const keys = (o: Json) => Object.keys(o).sort();

describe("fake engine wire format", () => {
  let e: FakeEngine;
  beforeAll(async () => {
    e = await engine({ models: ["m", "alias"], ttftMs: 1, tokenDelayMs: 0, tokens: 4 });
  });

  test("GET /health answers 200", async () => {
    const res = await fetch(`${e.url}/health`);
    expect(res.status).toBe(200);
  });

  test("GET /v1/models lists every served name in OpenAI's list shape", async () => {
    const res = await fetch(`${e.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body.object).toBe("list");
    expect(body.data.map((m: Json) => m.id)).toEqual(["m", "alias"]);
    for (const m of body.data) {
      expect(keys(m)).toEqual(["created", "id", "object", "owned_by"]);
      expect(m.object).toBe("model");
      expect(m.owned_by).toBe("llmgw-fake");
      expect(Number.isInteger(m.created)).toBe(true);
    }
  });

  test("non-streamed chat completion has OpenAI's shape, the requested model and usage", async () => {
    const content = "x".repeat(36);
    const res = await post(e.url, "/v1/chat/completions", { ...chat(content), model: "alias", max_tokens: 7 });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("application/json");
    const body = (await res.json()) as Json;
    expect(body.object).toBe("chat.completion");
    expect(body.id).toStartWith("chatcmpl-");
    expect(body.model).toBe("alias");
    expect(Number.isInteger(body.created)).toBe(true);
    expect(body.choices).toHaveLength(1);
    const choice = body.choices[0];
    expect(choice.index).toBe(0);
    // max_tokens cut the answer: a real engine says so with "length".
    expect(choice.finish_reason).toBe("length");
    expect(choice.message.role).toBe("assistant");
    expect(choice.message.content.split(" ")).toHaveLength(7);
    // prompt = "user" + content = 40 characters, about 10 tokens.
    expect(body.usage).toEqual({ prompt_tokens: 10, completion_tokens: 7, total_tokens: 17 });
  });

  test("the text is deterministic and max_completion_tokens is honoured too", async () => {
    const a = (await (await post(e.url, "/v1/chat/completions", chat("a", { max_completion_tokens: 3 }))).json()) as Json;
    const b = (await (await post(e.url, "/v1/chat/completions", chat("b", { max_completion_tokens: 3 }))).json()) as Json;
    expect(a.choices[0].message.content).toBe(b.choices[0].message.content);
    expect(a.usage.completion_tokens).toBe(3);
    expect(a.id).not.toBe(b.id);
  });

  test("non-streamed text completion has the text_completion shape", async () => {
    const res = await post(e.url, "/v1/completions", { model: "m", prompt: "12345678" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body.object).toBe("text_completion");
    expect(body.model).toBe("m");
    expect(keys(body.choices[0])).toEqual(["finish_reason", "index", "logprobs", "text"]);
    expect(body.choices[0].text.split(" ")).toHaveLength(4);
    expect(body.usage).toEqual({ prompt_tokens: 2, completion_tokens: 4, total_tokens: 6 });
  });

  test("streamed chat chunks have the keys of a real gpt-4o include_usage stream and end with [DONE]", async () => {
    const fixture = readFixture("openai/langchain-openai-OPENAI_STREAM_DATA__gpt-4o-include_usage.jsonl")
      .split("\n")
      .filter((l) => l.trim() !== "");
    expect(fixture.at(-1)).toBe("[DONE]");
    const real = fixture.slice(0, -1).map((l) => JSON.parse(l) as Json);

    const res = await post(e.url, "/v1/chat/completions", chat("hello", { stream: true, stream_options: { include_usage: true } }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("text/event-stream");
    const payloads = await allPayloads(res);
    expect(payloads.at(-1)).toBe("[DONE]");
    expect(payloads.filter((p) => p === "[DONE]")).toHaveLength(1);
    const ours = payloads.slice(0, -1).map((p) => JSON.parse(p) as Json);

    // Same sequence of kinds: role chunk, content chunks, stop chunk, usage chunk.
    expect(ours).toHaveLength(1 + 4 + 1 + 1);
    const shape = (c: Json) => ({
      top: keys(c),
      choice: c.choices.length ? keys(c.choices[0]) : [],
      delta: c.choices.length ? keys(c.choices[0].delta) : [],
      usage: c.usage === null ? null : keys(c.usage),
    });
    expect(shape(ours[0]!)).toEqual(shape(real[0]!));
    for (const c of ours.slice(1, -2)) expect(shape(c)).toEqual(shape(real[1]!));
    expect(shape(ours.at(-2)!)).toEqual(shape(real.at(-2)!));
    expect(shape(ours.at(-1)!)).toEqual(shape(real.at(-1)!));

    expect(ours[0]!.choices[0].delta).toEqual({ role: "assistant", content: "" });
    expect(ours.at(-2)!.choices[0]).toMatchObject({ delta: {}, finish_reason: "stop" });
    for (const c of ours) {
      expect(c.object).toBe("chat.completion.chunk");
      expect(c.id).toBe(ours[0]!.id);
      expect(c.model).toBe("m");
    }
    const usage = ours.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });

    // Streamed text equals the non-streamed text for the same request.
    const text = ours.slice(1, -2).map((c) => c.choices[0].delta.content).join("");
    const whole = (await (await post(e.url, "/v1/chat/completions", chat("hello"))).json()) as Json;
    expect(text).toBe(whole.choices[0].message.content);
  });

  test("without include_usage the chunks carry no usage and no usage chunk is sent", async () => {
    const res = await post(e.url, "/v1/chat/completions", chat("hi", { stream: true, max_tokens: 2 }));
    const payloads = await allPayloads(res);
    expect(payloads.at(-1)).toBe("[DONE]");
    const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p) as Json);
    expect(chunks).toHaveLength(1 + 2 + 1);
    for (const c of chunks) {
      expect("usage" in c).toBe(false);
      expect(c.choices).toHaveLength(1);
    }
  });

  test("streamed text completion sends one chunk per token, a stop chunk, usage, [DONE]", async () => {
    const res = await post(e.url, "/v1/completions", {
      model: "m",
      prompt: "abcd",
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const payloads = await allPayloads(res);
    expect(payloads.at(-1)).toBe("[DONE]");
    const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p) as Json);
    expect(chunks).toHaveLength(3 + 1 + 1);
    for (const c of chunks.slice(0, 3)) {
      expect(c.object).toBe("text_completion");
      expect(c.choices[0].finish_reason).toBeNull();
      expect(typeof c.choices[0].text).toBe("string");
    }
    expect(chunks[3]!.choices[0].finish_reason).toBe("length");
    expect(chunks[4]!.choices).toEqual([]);
    expect(chunks[4]!.usage).toEqual({ prompt_tokens: 1, completion_tokens: 3, total_tokens: 4 });
  });

  test("without a limit the answer ends by itself (stop); with one it is cut there (length)", async () => {
    const free = (await (await post(e.url, "/v1/chat/completions", chat("hi"))).json()) as Json;
    expect(free.choices[0].finish_reason).toBe("stop");
    expect(free.usage.completion_tokens).toBe(4);
    const cut = (await (await post(e.url, "/v1/completions", { model: "m", prompt: "hi", max_tokens: 2 })).json()) as Json;
    expect(cut.choices[0].finish_reason).toBe("length");
    expect(cut.usage.completion_tokens).toBe(2);
  });

  test("n > 1 gives n choices, indexed, counted in usage; streamed, each index gets its tokens and its finish", async () => {
    const body = (await (await post(e.url, "/v1/chat/completions", chat("hi", { n: 3, max_tokens: 2 }))).json()) as Json;
    expect(body.choices.map((c: Json) => c.index)).toEqual([0, 1, 2]);
    for (const c of body.choices) expect(c).toMatchObject({ finish_reason: "length", message: { role: "assistant" } });
    expect(body.usage.completion_tokens).toBe(6);
    const res = await post(e.url, "/v1/chat/completions", chat("hi", { n: 2, max_tokens: 3, stream: true, stream_options: { include_usage: true } }));
    const chunks = (await allPayloads(res)).slice(0, -1).map((p) => JSON.parse(p) as Json);
    const text = new Map<number, string>();
    const finish = new Map<number, string>();
    for (const c of chunks)
      for (const ch of c.choices) {
        text.set(ch.index, (text.get(ch.index) ?? "") + (ch.delta.content ?? ""));
        if (ch.finish_reason) finish.set(ch.index, ch.finish_reason);
      }
    expect([...text.keys()].sort()).toEqual([0, 1]);
    expect(text.get(0)).toBe(text.get(1)!);
    expect(text.get(0)!.split(" ")).toHaveLength(3);
    expect(Object.fromEntries(finish)).toEqual({ 0: "length", 1: "length" });
    expect(chunks.at(-1)!.usage.completion_tokens).toBe(6);
    for (const bad of [0, 129, 1.5, "2"]) {
      const r = await post(e.url, "/v1/chat/completions", chat("hi", { n: bad }));
      expect(r.status).toBe(400);
      expect(((await r.json()) as Json).error.param).toBe("n");
    }
  });

  test("Responses API, not streamed: a response object with one output_text message and usage", async () => {
    const r = (await (await post(e.url, "/v1/responses", { model: "m", input: "hello", instructions: "be brief" })).json()) as Json;
    expect(r).toMatchObject({ object: "response", status: "completed", model: "m", incomplete_details: null });
    expect(r.id).toStartWith("resp_");
    expect(r.output).toHaveLength(1);
    expect(r.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed" });
    expect(r.output[0].content[0].type).toBe("output_text");
    expect(r.output[0].content[0].text.split(" ")).toHaveLength(4);
    expect(r.usage).toMatchObject({ output_tokens: 4 });
    expect(r.usage.total_tokens).toBe(r.usage.input_tokens + 4);
    const cut = (await (await post(e.url, "/v1/responses", { model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "x" }] }], max_output_tokens: 2 })).json()) as Json;
    expect(cut).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" } });
    expect(cut.output[0].content[0].text.split(" ")).toHaveLength(2);
    for (const [body, param] of [[{ model: "m" }, "input"], [{ model: "m", input: [] }, "input"], [{ model: "m", input: "x", max_output_tokens: 0 }, "max_output_tokens"], [{ model: "m", input: "x", instructions: 3 }, "instructions"]] as const) {
      const res = await post(e.url, "/v1/responses", body);
      expect(res.status).toBe(400);
      expect(((await res.json()) as Json).error.param).toBe(param);
    }
  });

  test("Responses API, streamed: the event sequence the SDKs parse, deltas adding up to the text", async () => {
    const res = await post(e.url, "/v1/responses", { model: "m", input: "hello", stream: true });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const raw = await res.text();
    const events = raw.trim().split("\n\n").map((block) => {
      const [ev, data] = block.split("\n");
      const parsed = JSON.parse(data!.slice("data: ".length)) as Json;
      expect(ev).toBe(`event: ${parsed.type}`);
      return parsed;
    });
    const types = events.map((x) => x.type);
    expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
    expect(types.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
    const deltas = events.filter((x) => x.type === "response.output_text.delta");
    expect(deltas).toHaveLength(4);
    const done = events.find((x) => x.type === "response.output_text.done")!;
    expect(deltas.map((d) => d.delta).join("")).toBe(done.text);
    expect(events.map((x) => x.sequence_number)).toEqual(events.map((_, i) => i));
    expect(events.at(-1)!.response).toMatchObject({ status: "completed", usage: { output_tokens: 4 } });
    const cut = await (await post(e.url, "/v1/responses", { model: "m", input: "hello", stream: true, max_output_tokens: 1 })).text();
    expect(cut).toContain("event: response.incomplete");
  });

  test("an unknown model is a 404 in OpenAI's error shape with code model_not_found", async () => {
    for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]) {
      const res = await post(e.url, path, { model: "nope", messages: [{ role: "user", content: "x" }], prompt: "x", input: "x" });
      expect(res.status).toBe(404);
      const body = (await res.json()) as Json;
      expect(keys(body)).toEqual(["error"]);
      expect(keys(body.error)).toEqual(["code", "message", "param", "type"]);
      expect(body.error.code).toBe("model_not_found");
      expect(body.error.param).toBe("model");
      expect(body.error.message).toContain("nope");
    }
  });

  test("bad JSON and missing or malformed fields are 400s that name the field", async () => {
    // [path, body, the param named, what the message says]: a field's name, or for a body that
    // is no JSON object, that it must be JSON.
    const cases: [string, unknown, string | null, string][] = [
      ["/v1/chat/completions", '{"model": "m", ', null, "request body is not valid JSON"],
      ["/v1/chat/completions", "[1,2]", null, "request body must be a JSON object"],
      ["/v1/chat/completions", { messages: [{ role: "user", content: "x" }] }, "model", "`model`"],
      ["/v1/chat/completions", { model: "m" }, "messages", "`messages`"],
      ["/v1/chat/completions", { model: "m", messages: [] }, "messages", "`messages`"],
      ["/v1/chat/completions", { model: "m", messages: [{ content: "x" }] }, "messages[0].role", "`messages[0].role`"],
      ["/v1/chat/completions", { ...chat("x"), model: "m", max_tokens: 0 }, "max_tokens", "`max_tokens`"],
      ["/v1/chat/completions", { ...chat("x"), model: "m", max_completion_tokens: "9" }, "max_completion_tokens", "`max_completion_tokens`"],
      ["/v1/chat/completions", { ...chat("x"), model: "m", stream: "yes" }, "stream", "`stream`"],
      ["/v1/completions", { model: "m" }, "prompt", "`prompt`"],
      ["/v1/embeddings", { model: "m" }, "input", "`input`"],
    ];
    for (const [path, body, param, says] of cases) {
      const res = await post(e.url, path, body);
      expect(res.status).toBe(400);
      const err = ((await res.json()) as Json).error;
      expect(err.type).toBe("invalid_request_error");
      expect(err.param).toBe(param);
      expect(err.message).toContain(says);
    }
  });

  test("its errors are the router's: the same OpenAI-shaped body, byte for byte", async () => {
    const res = await post(e.url, "/v1/chat/completions", { model: "m" });
    expect(await res.text()).toBe(openAIErrorBody(400, "`messages` is required and must be a non-empty array", { param: "messages" }));
    const missing = await post(e.url, "/v1/completions", { model: "nope", prompt: "x" });
    expect(await missing.text()).toBe(openAIErrorBody(404, "The model `nope` does not exist. Served here: m, alias", { param: "model", code: "model_not_found" }));
    const route = await fetch(`${e.url}/v2/nothing`);
    expect(await route.text()).toBe(openAIErrorBody(404, "Invalid URL (GET /v2/nothing)", { code: "not_found" }));
  });

  test("unknown routes and methods are 404s in OpenAI's error shape", async () => {
    for (const res of [await fetch(`${e.url}/v2/nothing`), await fetch(`${e.url}/v1/chat/completions`), await post(e.url, "/v1/models", {})]) {
      expect(res.status).toBe(404);
      const body = (await res.json()) as Json;
      expect(keys(body.error)).toEqual(["code", "message", "param", "type"]);
    }
  });

  test("embeddings: one deterministic unit vector of embeddingDim per input, float or base64", async () => {
    const res = await post(e.url, "/v1/embeddings", { model: "m", input: ["alpha", "beta", "alpha"] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body.object).toBe("list");
    expect(body.model).toBe("m");
    expect(body.data).toHaveLength(3);
    body.data.forEach((d: Json, i: number) => {
      expect(d.object).toBe("embedding");
      expect(d.index).toBe(i);
      expect(d.embedding).toHaveLength(16);
      const norm = Math.hypot(...(d.embedding as number[]));
      expect(norm).toBeCloseTo(1, 5);
    });
    expect(body.data[0].embedding).toEqual(body.data[2].embedding);
    expect(body.data[0].embedding).not.toEqual(body.data[1].embedding);
    expect(body.usage).toEqual({ prompt_tokens: 2 + 1 + 2, total_tokens: 5 });

    const one = (await (await post(e.url, "/v1/embeddings", { model: "alias", input: "alpha" })).json()) as Json;
    expect(one.data[0].embedding).toEqual(body.data[0].embedding);
    const b64 = (await (await post(e.url, "/v1/embeddings", { model: "alias", input: "alpha", encoding_format: "base64" })).json()) as Json;
    const bytes = Buffer.from(b64.data[0].embedding as string, "base64");
    const floats = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
    expect(floats).toEqual(body.data[0].embedding);
  });

  test("GET /metrics exposes vLLM's metric names with HELP, TYPE and the primary model_name", async () => {
    const res = await fetch(`${e.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toStartWith("text/plain");
    const text = await res.text();
    // The real names, as a vLLM server exposes them (test/fixtures would hold the sample; the
    // names are the contract the router reads).
    const expected: [string, "gauge" | "counter"][] = [
      ["vllm:num_requests_running", "gauge"],
      ["vllm:num_requests_waiting", "gauge"],
      ["vllm:kv_cache_usage_perc", "gauge"],
      ["vllm:prefix_cache_queries_total", "counter"],
      ["vllm:prefix_cache_hits_total", "counter"],
      ["vllm:request_success_total", "counter"],
    ];
    for (const [name, type] of expected) {
      expect(text).toContain(`# HELP ${name} `);
      expect(text).toContain(`# TYPE ${name} ${type}\n`);
    }
    expect(text).toContain('vllm:num_requests_running{model_name="m"} 0\n');
    expect(metricValue(text, "vllm:request_success_total")).toBeGreaterThan(0);
    // Every sample line is `name{labels} number`.
    for (const line of text.split("\n").filter((l) => l !== "" && !l.startsWith("#"))) {
      expect(line).toMatch(/^vllm:[a-z_]+\{[^}]*model_name="m"[^}]*\} [0-9.e+-]+$/);
    }
  });
});

describe("fake engine slots and queue", () => {
  test("with slots=1 the second request waits: its first token comes after the first's [DONE]", async () => {
    const e = await engine({ slots: 1, ttftMs: 3, tokenDelayMs: 1, tokens: 5 });
    const events: string[] = [];
    const consume = async (name: string) => {
      const res = await post(e.url, "/v1/chat/completions", chat(name, { stream: true }));
      let sawToken = false;
      for await (const p of ssePayloads(res)) {
        if (p === "[DONE]") events.push(`${name}:done`);
        else if (!sawToken && (JSON.parse(p) as Json).choices[0]?.delta?.content) {
          sawToken = true;
          events.push(`${name}:first`);
        }
      }
    };
    const a = consume("A");
    await waitFor(() => e.stats().running === 1, "A running");
    const b = consume("B");
    await waitFor(() => e.stats().waiting === 1, "B waiting");
    await Promise.all([a, b]);
    expect(events).toEqual(["A:first", "A:done", "B:first", "B:done"]);
    expect(e.stats()).toMatchObject({ running: 0, waiting: 0, completed: 2, aborted: 0 });
  });

  test("metrics change under load: running, waiting and KV usage while slots are full", async () => {
    const e = await engine({ slots: 2, ttftMs: 1, tokenDelayMs: 10, tokens: 1000 });
    const ac = new AbortController();
    const inflight = [1, 2, 3].map((i) =>
      // Held unread until the abort below: releasing a body early would free its slot mid-check.
      post(e.url, "/v1/chat/completions", chat(`load ${i}`, { stream: true }), ac.signal).catch(() => undefined),
    );
    await waitFor(() => e.stats().waiting === 1, "one request queued");
    const text = await (await fetch(`${e.url}/metrics`)).text();
    expect(metricValue(text, "vllm:num_requests_running")).toBe(2);
    expect(metricValue(text, "vllm:num_requests_waiting")).toBe(1);
    expect(metricValue(text, "vllm:kv_cache_usage_perc")).toBe(1);
    ac.abort();
    await Promise.all(inflight);
    await waitFor(() => e.stats().running === 0 && e.stats().waiting === 0, "all slots freed");
    const after = await (await fetch(`${e.url}/metrics`)).text();
    expect(metricValue(after, "vllm:num_requests_running")).toBe(0);
    expect(metricValue(after, "vllm:kv_cache_usage_perc")).toBe(0);
    expect(e.stats().aborted).toBe(3);
  });

  test("non-streamed requests queue in arrival order too", async () => {
    const e = await engine({ slots: 1, ttftMs: 1, tokenDelayMs: 20, tokens: 4000 });
    // A long stream holds the only slot, so the queue's state does not depend on timing.
    const holder = new AbortController();
    const held = post(e.url, "/v1/chat/completions", chat("hold", { stream: true }), holder.signal).catch(() => {});
    await waitFor(() => e.stats().running === 1, "holder running");
    const order: string[] = [];
    const run = (name: string) =>
      post(e.url, "/v1/completions", { model: "m", prompt: name, max_tokens: 2 }).then(async (r) => {
        expect(r.status).toBe(200);
        await r.json();
        order.push(name);
      });
    const a = run("A");
    await waitFor(() => e.stats().waiting === 1, "A waiting");
    const b = run("B");
    await waitFor(() => e.stats().waiting === 2, "B waiting");
    const c = run("C");
    await waitFor(() => e.stats().waiting === 3, "C waiting");
    holder.abort();
    await Promise.all([held, a, b, c]);
    expect(order).toEqual(["A", "B", "C"]);
    expect(e.stats()).toMatchObject({ requests: 4, completed: 3, aborted: 1, running: 0, waiting: 0 });
  });
});

describe("fake engine client aborts", () => {
  test("a client that drops a stream mid-generation frees the slot at once and counts as aborted", async () => {
    const e = await engine({ slots: 1, ttftMs: 1, tokenDelayMs: 20, tokens: 4000 });
    const ac = new AbortController();
    const res = await post(e.url, "/v1/chat/completions", chat("long", { stream: true }), ac.signal);
    const reader = res.body!.getReader();
    await reader.read();
    expect(e.stats()).toMatchObject({ running: 1, aborted: 0 });
    ac.abort();
    await waitFor(() => e.stats().aborted === 1 && e.stats().running === 0, "abort to reach the engine");
    // The slot is really free: a new request is admitted straight away and finishes.
    const next = await post(e.url, "/v1/chat/completions", chat("next", { max_tokens: 1 }));
    expect(next.status).toBe(200);
    expect(e.stats()).toMatchObject({ completed: 1, aborted: 1, running: 0, waiting: 0 });
  });

  test("cancelling the response body (not the signal) also stops generation", async () => {
    const e = await engine({ slots: 1, ttftMs: 1, tokenDelayMs: 20, tokens: 4000 });
    const res = await post(e.url, "/v1/chat/completions", chat("long", { stream: true }));
    const reader = res.body!.getReader();
    await reader.read();
    await reader.cancel();
    await waitFor(() => e.stats().aborted === 1 && e.stats().running === 0, "cancel to reach the engine");
  });

  test("a queued request whose client leaves is removed from the queue", async () => {
    const e = await engine({ slots: 1, ttftMs: 1, tokenDelayMs: 20, tokens: 4000 });
    const first = new AbortController();
    const running = post(e.url, "/v1/chat/completions", chat("first", { stream: true }), first.signal).catch(() => {});
    await waitFor(() => e.stats().running === 1, "first running");
    const queued = new AbortController();
    const waiting = post(e.url, "/v1/chat/completions", chat("second"), queued.signal).catch(() => {});
    await waitFor(() => e.stats().waiting === 1, "second queued");
    queued.abort();
    await waiting;
    await waitFor(() => e.stats().aborted === 1 && e.stats().waiting === 0, "queued abort to reach the engine");
    expect(e.stats().running).toBe(1);
    first.abort();
    await running;
    await waitFor(() => e.stats().aborted === 2 && e.stats().running === 0, "running abort");
    expect(e.stats().completed).toBe(0);
  });

  test("a non-streamed request dropped during generation frees its slot", async () => {
    const e = await engine({ slots: 1, ttftMs: 60_000, tokenDelayMs: 0 });
    const ac = new AbortController();
    const p = post(e.url, "/v1/chat/completions", chat("slow"), ac.signal).catch((err: Error) => err.name);
    await waitFor(() => e.stats().running === 1, "request running");
    ac.abort();
    expect(await p).toBe("AbortError");
    await waitFor(() => e.stats().aborted === 1 && e.stats().running === 0, "abort to reach the engine");
  });

  test("stop() ends in-flight streams and resolves", async () => {
    const e = await startFakeEngine({ models: ["m"], ttftMs: 1, tokenDelayMs: 20, tokens: 4000 });
    const res = await post(e.url, "/v1/chat/completions", chat("x", { stream: true }));
    const drained = allPayloads(res).catch(() => "closed");
    await e.stop();
    await drained;
    expect(e.stats()).toMatchObject({ running: 0, waiting: 0, aborted: 1 });
  });
});

describe("fake engine prefix cache", () => {
  test("a repeated prompt hits its leading blocks: stats, metrics and usage say so", async () => {
    const e = await engine({ ttftMs: 1, tokenDelayMs: 0, tokens: 2, prefixCache: { blocks: 64, blockChars: 16, hitSpeedup: 0.5 } });
    const system = { role: "system", content: "You are a helpful assistant. ".repeat(8) };
    const body = { model: "m", messages: [system, { role: "user", content: "what is a GPU?" }] };
    const promptChars = "system".length + system.content.length + "user".length + "what is a GPU?".length;
    const blocks = Math.floor(promptChars / 16);

    const first = (await (await post(e.url, "/v1/chat/completions", body)).json()) as Json;
    expect(first.usage.prompt_tokens_details).toBeUndefined();
    expect(e.stats()).toMatchObject({ prefixQueries: blocks, prefixHits: 0 });

    const second = (await (await post(e.url, "/v1/chat/completions", body)).json()) as Json;
    expect(e.stats()).toMatchObject({ prefixQueries: 2 * blocks, prefixHits: blocks });
    expect(second.usage.prompt_tokens_details.cached_tokens).toBe((blocks * 16) / 4);

    // Same system prompt, different question: only the shared leading blocks hit.
    await post(e.url, "/v1/chat/completions", { ...body, messages: [system, { role: "user", content: "and a TPU?" }] });
    const sharedBlocks = Math.floor(("system".length + system.content.length + "user".length) / 16);
    expect(e.stats().prefixHits).toBe(blocks + sharedBlocks);

    // Same words after a different beginning: block hashes are chained, so nothing hits.
    const before = e.stats().prefixHits;
    await post(e.url, "/v1/chat/completions", { ...body, messages: [{ role: "system", content: "!" + system.content }, body.messages[1]] });
    expect(e.stats().prefixHits).toBe(before);

    const text = await (await fetch(`${e.url}/metrics`)).text();
    expect(metricValue(text, "vllm:prefix_cache_hits_total")).toBeGreaterThan(0);
    expect(metricValue(text, "vllm:prefix_cache_queries_total")).toBeGreaterThan(metricValue(text, "vllm:prefix_cache_hits_total"));
  });

  test("streamed requests report cached tokens in the usage chunk", async () => {
    const e = await engine({ ttftMs: 1, tokenDelayMs: 0, tokens: 1, prefixCache: { blocks: 8, blockChars: 8, hitSpeedup: 1 } });
    const body = chat("0123456789abcdef0123456789abcdef", { stream: true, stream_options: { include_usage: true } });
    await allPayloads(await post(e.url, "/v1/chat/completions", body));
    const payloads = await allPayloads(await post(e.url, "/v1/chat/completions", body));
    const usage = JSON.parse(payloads.at(-2)!) as Json;
    expect(usage.usage.prompt_tokens_details.cached_tokens).toBe(8);
  });

  test("cacheBlocks 0 disables the cache", async () => {
    const e = await engine({ ttftMs: 0, tokenDelayMs: 0, tokens: 1, prefixCache: { blocks: 0 } });
    await post(e.url, "/v1/completions", { model: "m", prompt: "x".repeat(500) });
    await post(e.url, "/v1/completions", { model: "m", prompt: "x".repeat(500) });
    expect(e.stats()).toMatchObject({ prefixHits: 0, prefixQueries: 0, completed: 2 });
  });

  test("PrefixCache counts leading hits only and evicts tails before heads", () => {
    const c = new PrefixCache(3, 2);
    expect(c.lookup("aabbcc")).toEqual({ queried: 3, hit: 0, hitFraction: 0 });
    expect(c.lookup("aabbcc")).toEqual({ queried: 3, hit: 3, hitFraction: 1 });
    expect(c.lookup("zzbbcc").hit).toBe(0);
    // "zz.." pushed out the least recent blocks, which were the tails of "aabbcc".
    expect(c.size).toBe(3);
    expect(c.lookup("aabbc")).toEqual({ queried: 2, hit: 0, hitFraction: 0 });
    expect(c.lookup("aabbx")).toEqual({ queried: 2, hit: 2, hitFraction: 0.8 });
    expect(c.lookup("a")).toEqual({ queried: 0, hit: 0, hitFraction: 0 });
  });

  test("TTFT shrinks in proportion to the share of the prompt that hit", () => {
    expect(ttftWithHits(100, 0.5, 1)).toBe(50);
    expect(ttftWithHits(100, 0.8, 0.5)).toBeCloseTo(60);
    expect(ttftWithHits(100, 0.8, 0)).toBe(100);
    expect(ttftWithHits(100, 2, 1)).toBe(0);
  });
});

describe("fake engine key", () => {
  const KEY = "k-0123456789abcdef0123456789abcdef";
  const chat = { model: "m", messages: [{ role: "user", content: "hi" }] };
  const withAuth = (auth: string | undefined): Record<string, string> => (auth === undefined ? {} : { authorization: auth });

  test("/v1/* without the key is 401 in OpenAI's error shape; with it, 200", async () => {
    const e = await engine({ apiKey: KEY, ttftMs: 0, tokenDelayMs: 0 });
    for (const auth of [undefined, "Bearer wrong-key", `Bearer ${KEY}x`, KEY, `Basic ${KEY}`, "Bearer "]) {
      for (const [method, path] of [["POST", "/v1/chat/completions"], ["POST", "/v1/completions"], ["POST", "/v1/embeddings"], ["GET", "/v1/models"], ["GET", "/v1/no-such"]] as const) {
        const res = await fetch(e.url + path, { method, headers: { "content-type": "application/json", ...withAuth(auth) }, ...(method === "POST" ? { body: JSON.stringify(chat) } : {}) });
        expect(res.status, `${method} ${path} with ${auth}`).toBe(401);
        const body = (await res.json()) as Json;
        expect(body.error).toEqual({ message: expect.stringContaining("API key"), type: "invalid_request_error", param: null, code: "invalid_api_key" });
      }
    }
    const ok = await fetch(`${e.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` }, body: JSON.stringify(chat) });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as Json).object).toBe("chat.completion");
    const models = await fetch(`${e.url}/v1/models`, { headers: { authorization: `Bearer ${KEY}` } });
    expect(models.status).toBe(200);
    // Nothing refused counts as a request.
    expect(e.stats().requests).toBe(1);
  });

  test("/health and /metrics stay open, like vLLM's and SGLang's", async () => {
    const e = await engine({ apiKey: KEY });
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    const m = await fetch(`${e.url}/metrics`);
    expect(m.status).toBe(200);
    expect(await m.text()).toContain("vllm:num_requests_running");
  });

  test("without a key every request is answered, as before", async () => {
    const e = await engine({ ttftMs: 0, tokenDelayMs: 0 });
    expect((await post(e.url, "/v1/chat/completions", chat)).status).toBe(200);
  });

  test("the key comes from --api-key, else from LLMGW_FAKE_ENGINE_API_KEY; a blank or spaced key is refused", () => {
    expect(parseFakeEngineFlags(["--model", "m", "--api-key", "flag-key"], { LLMGW_FAKE_ENGINE_API_KEY: "env-key" }).apiKey).toBe("flag-key");
    expect(parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_ENGINE_API_KEY: "env-key" }).apiKey).toBe("env-key");
    expect(parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_ENGINE_API_KEY: "" }).apiKey).toBeUndefined();
    expect(parseFakeEngineFlags(["--model", "m"]).apiKey).toBeUndefined();
    expect(() => parseFakeEngineFlags(["--model", "m", "--api-key=a b"])).toThrow(/--api-key/);
    expect(() => parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_ENGINE_API_KEY: "a\nb" })).toThrow(/LLMGW_FAKE_ENGINE_API_KEY/);
  });

  test("the token delay comes from --token-delay-ms, else from LLMGW_FAKE_TOKEN_DELAY_MS (a catalog profile's env); a bad one is refused by name", () => {
    expect(parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_TOKEN_DELAY_MS: "25" }).tokenDelayMs).toBe(25);
    expect(parseFakeEngineFlags(["--model", "m", "--token-delay-ms", "5"], { LLMGW_FAKE_TOKEN_DELAY_MS: "25" }).tokenDelayMs).toBe(5);
    expect(parseFakeEngineFlags(["--model", "m"], {}).tokenDelayMs).toBeUndefined();
    expect(() => parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_TOKEN_DELAY_MS: "soon" })).toThrow(/LLMGW_FAKE_TOKEN_DELAY_MS/);
  });
});

describe("fake engine streams at token delay 0", () => {
  /** The raw bytes of a streamed chat answer and the number of socket reads they came in. */
  async function reads(e: FakeEngine): Promise<{ reads: number; text: string }> {
    const body = JSON.stringify(chat("Say hello.", { stream: true, max_tokens: 20 }));
    const done = Promise.withResolvers<void>();
    let n = 0;
    let text = "";
    const s = await Bun.connect({
      hostname: "127.0.0.1",
      port: e.port,
      socket: {
        data(_s, d) {
          n++;
          text += new TextDecoder().decode(d);
          if (text.endsWith("0\r\n\r\n")) done.resolve();
        },
        close: () => done.resolve(),
      },
    });
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    await done.promise;
    s.end();
    // The chunked framing's sizes and CRLFs differ with the writes; the events do not.
    const events = text.slice(text.indexOf("\r\n\r\n") + 4).split("\r\n").filter((l) => l.startsWith("data: ")).join("");
    return { reads: n, text: events.replace(/"id":"[^"]*"|"created":\d+/g, "") };
  }

  test("write the whole answer at once, or with flushEvents each event on its own", async () => {
    const whole = await reads(await engine({ tokenDelayMs: 0, ttftMs: 0 }));
    const flushed = await reads(await engine({ tokenDelayMs: 0, ttftMs: 0, flushEvents: true }));
    expect(whole.reads).toBeLessThanOrEqual(2);
    // 20 tokens: the first with the role event, the last with the finish and [DONE]; a busy
    // loop may still join a few writes into one read.
    expect(flushed.reads).toBeGreaterThan(10);
    expect(flushed.text).toBe(whole.text);
    expect(parseFakeEngineFlags(["--model", "m", "--token-delay-ms", "0", "--flush-events"]).flushEvents).toBe(true);
  });
});

describe("fake engine flags", () => {
  test("parsed by the CLI's parser: --flag value, --flag=value, repeated --model, the leading command word", () => {
    expect(parseFakeEngineFlags(["fake-engine", "--model", "a", "--model=b", "--port=9000", "--host", "::1", "--ttft-ms", "2.5", "--token-delay-ms=0", "--tokens", "7", "--slots", "3", "--cache-blocks", "0"])).toEqual({
      models: ["a", "b"],
      port: 9000,
      host: "::1",
      ttftMs: 2.5,
      tokenDelayMs: 0,
      tokens: 7,
      slots: 3,
      prefixCache: { blocks: 0 },
    });
    expect(parseFakeEngineFlags(["--model", "m"])).toEqual({ models: ["m"], port: 0 });
  });

  test("every mistake is a usage error that names the flag", () => {
    const cases: [string[], string][] = [
      [["--model", "m", "--bogus", "1"], "unknown flag --bogus"],
      [["--model", "m", "stray"], "unknown flag stray"],
      [["--model"], "--model needs a value"],
      [["--model", ""], "--model must not be empty"],
      [["--port", "0"], "--model is required"],
      [["--model", "m", "--port", "70000"], '--port must be an integer from 0 to 65535, got "70000"'],
      [["--model", "m", "--slots", "1.5"], '--slots must be an integer >= 1, got "1.5"'],
      [["--model", "m", "--tokens", "5000"], '--tokens must be an integer from 1 to 4096, got "5000"'],
      [["--model", "m", "--ttft-ms", "soon"], '--ttft-ms must be a number >= 0, got "soon"'],
    ];
    for (const [args, message] of cases) {
      let thrown: unknown;
      try {
        parseFakeEngineFlags(args);
      } catch (err) {
        thrown = err;
      }
      expect(thrown, args.join(" ")).toBeInstanceOf(UsageError);
      expect((thrown as Error).message).toContain(message);
    }
  });
});
