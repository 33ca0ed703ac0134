// Real client libraries, each with its default retries, against the compiled binary: the
// official `openai` SDK, the Vercel AI SDK (`ai` + `@ai-sdk/openai`, generateText) and LangChain
// (`@langchain/openai`, ChatOpenAI.invoke). A model that can never run on the fleet and a model
// parked after failing every start are asked for once per client; the router's own request
// counter (/metrics) must go up by exactly one per call, and the router's reason must reach the
// caller's error. What waiting changes (a held queue full, a model with nothing ready yet) still
// answers 503 with Retry-After, which clients retry.

import { describe, expect, test } from "bun:test";
import { createOpenAI } from "@ai-sdk/openai";
import { ChatOpenAI } from "@langchain/openai";
import { APICallError, generateText } from "ai";
import OpenAI from "openai";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";

const H100 = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
/** Each client call gives up after this, so a client that retries fails the test rather than hanging it. */
const CALL_MS = 15_000;

describe("clients with their default retries", () => {
  // --max-held-per-model 1: a second request for a cold model is turned away at once.
  const c = withCluster(["--max-held-per-model", "1"]);

  /** Requests the router counted for a model, all statuses together. */
  async function seen(model: string): Promise<number> {
    const text = await (await fetch(`${c().serve.routerUrl}/metrics`, { headers: { authorization: `Bearer ${c().serve.adminToken}` } })).text();
    let n = 0;
    for (const m of text.matchAll(/^llmgw_router_requests_total\{model="([^"]+)",status="\d+"\} (\d+)$/gm)) if (m[1] === model) n += Number(m[2]);
    return n;
  }
  const chat = (model: string, signal?: AbortSignal) =>
    fetch(`${c().serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }), signal });

  const clients: [string, (base: string, model: string) => Promise<unknown>][] = [
    ["openai", (base, model) => new OpenAI({ baseURL: base, apiKey: "x", timeout: CALL_MS }).chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] })],
    ["ai + @ai-sdk/openai", (base, model) => generateText({ model: createOpenAI({ baseURL: base, apiKey: "x" })(model), prompt: "hi", abortSignal: AbortSignal.timeout(CALL_MS) })],
    ["@langchain/openai", (base, model) => new ChatOpenAI({ model, apiKey: "x", configuration: { baseURL: base } }).invoke("hi", { signal: AbortSignal.timeout(CALL_MS) })],
  ];

  test("a model that can never run and a parked one: one request per call for each client, the reason in its error", async () => {
    expect(await c().putModel("big", { replicas: { min: 1 }, profiles: [{ ...H100, gpu_class: "H200-141GB", gpus: 8 }] })).toBe(201);
    const broken = { replicas: { min: 1 }, profiles: [{ ...H100, env: { LLMGW_FAKE_FAIL: "torch.OutOfMemoryError: CUDA out of memory" } }] };
    expect(await c().putModel("broken", broken)).toBe(201);
    await until("broken parked", async () => (await c().model("broken"))?.parked, 40_000);
    // The router's own word for each, once its catalog says so: what every client must pass on.
    const reasons = new Map<string, string>();
    const answers: unknown[] = [];
    for (const [model, word] of [["big", "can never"], ["broken", "is parked"]] as const) {
      const res = await until(`the router answering that ${model} ${word}`, async () => {
        const r = await chat(model);
        const body = (await r.json()) as { error: { message: string; type: string; param: string | null; code: string } };
        return body.error.message.includes(word) ? { r, body } : undefined;
      });
      const { type, param, code } = res.body.error;
      answers.push([model, res.r.status, res.r.headers.get("x-should-retry"), res.r.headers.get("retry-after"), type, param, code]);
      reasons.set(model, res.body.error.message);
    }
    const base = `${c().serve.routerUrl}/v1`;
    const rows: string[] = [];
    for (const [name, call] of clients)
      for (const model of ["big", "broken"]) {
        const before = await seen(model);
        const t0 = performance.now();
        const err = await call(base, model).then(
          () => new Error("answered"),
          (e: unknown) => e as Error,
        );
        const told = err.message.includes(reasons.get(model)!) ? "the reason told" : `the reason lost (${err.name}: ${err.message.slice(0, 100)})`;
        rows.push(`${name} ${model}: ${(await seen(model)) - before} request(s), ${told}; ${Math.round(performance.now() - t0)} ms`);
      }
    // All at once, so a failure shows every client's count and message.
    const want = (name: string, model: string) => `${name} ${model}: 1 request(s), the reason told`;
    expect(rows.map((r) => r.replace(/; \d+ ms$/, ""))).toEqual(clients.flatMap(([name]) => [want(name, "big"), want(name, "broken")]));
    expect(answers).toEqual([
      ["big", 400, "false", null, "invalid_request_error", "model", "model_cannot_run"],
      ["broken", 400, "false", null, "invalid_request_error", "model", "model_parked"],
    ]);
  }, 120_000);

  test("what waiting changes stays 503 with Retry-After: nothing ready yet, and the held queue of a cold model full", async () => {
    // No node takes new replicas now, but they could again: not "never".
    for (const node of ["a", "b"]) expect(run(c().bin, ["cordon", node], { cwd: c().dir }).code).toBe(0);
    expect(await c().putModel("later", { replicas: { min: 1 }, profiles: [H100] })).toBe(201);
    expect(await c().putModel("cold", { on_demand: true, replicas: { min: 0, max: 1 }, profiles: [H100] })).toBe(201);
    await until("the router to know both", async () => {
      const ids = ((await (await fetch(`${c().serve.routerUrl}/v1/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id);
      return ids.includes("later") && ids.includes("cold");
    });
    const notReady = await chat("later");
    expect([notReady.status, notReady.headers.get("retry-after"), notReady.headers.get("x-should-retry")]).toEqual([503, "10", null]);
    expect(((await notReady.json()) as { error: { code: string } }).error.code).toBe("model_not_ready");

    const held = new AbortController();
    const first = chat("cold", held.signal).catch(() => undefined);
    await until("the first request held", async () => /^llmgw_router_held_requests\{model="cold"\} 1$/m.test(await (await fetch(`${c().serve.routerUrl}/metrics`, { headers: { authorization: `Bearer ${c().serve.adminToken}` } })).text()));
    const full = await chat("cold");
    expect([full.status, full.headers.get("retry-after"), full.headers.get("x-should-retry")]).toEqual([503, "10", null]);
    expect(((await full.json()) as { error: { code: string } }).error.code).toBe("too_many_waiting");
    // The AI SDK takes it as worth retrying (shown without waiting out the Retry-After).
    const err = await generateText({ model: createOpenAI({ baseURL: `${c().serve.routerUrl}/v1`, apiKey: "x" })("cold"), prompt: "hi", maxRetries: 0 }).catch((e: unknown) => e);
    expect(APICallError.isInstance(err) && err.statusCode === 503 && err.isRetryable).toBe(true);
    held.abort();
    await first;
  }, 60_000);
});
