// The built-in fake engine as the command `llmgw fake-engine` runs it, a process of its own (as
// the agent starts it): its exit codes and messages for a failed start and bad flags, its URL on
// one line, serving, the key from LLMGW_FAKE_ENGINE_API_KEY, and a clean stop on SIGTERM. Its wire
// format, slots, cache and flags in-process are tested in test/unit/fake-engine.test.ts.

import { describe, expect, test } from "bun:test";
import { join } from "node:path";

const ENGINE_MODULE = join(import.meta.dir, "../../src/sim/fake-engine.ts");

type Json = Record<string, any>;

function post(base: string, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal,
  });
}

describe("llmgw fake-engine command", () => {
  const run = (args: string[], env: Record<string, string> = {}) =>
    Bun.spawn(
      [process.execPath, "-e", `import { fakeEngineMain } from ${JSON.stringify(ENGINE_MODULE)}; process.exit(await fakeEngineMain(${JSON.stringify(args)}));`],
      { env: { ...process.env, LLMGW_FAKE_FAIL: "", ...env }, stdout: "pipe", stderr: "pipe" },
    );

  test("LLMGW_FAKE_FAIL makes every start fail with exit 1 and the message on stderr", async () => {
    const p = run(["--model", "m", "--port", "0"], { LLMGW_FAKE_FAIL: "CUDA out of memory (simulated)" });
    expect(await p.exited).toBe(1);
    expect(await new Response(p.stderr).text()).toContain("CUDA out of memory (simulated)");
  });

  test("a bad flag value exits 2 with an error naming the flag", async () => {
    for (const [args, flag] of [
      [["--model", "m", "--slots", "zero"], "--slots"],
      [["--model", "m", "--port", "70000"], "--port"],
      [["--model", "m", "--ttft-ms", "-1"], "--ttft-ms"],
      [["--model", "m", "--bogus", "1"], "--bogus"],
      [["--port", "0"], "--model"],
    ] as [string[], string][]) {
      const p = run(args);
      expect(await p.exited).toBe(2);
      expect(await new Response(p.stderr).text()).toContain(flag);
    }
  });

  test("it serves, logs its URL on one line and stops cleanly on SIGTERM", async () => {
    const p = run(["--port", "0", "--model", "a", "--model=b", "--ttft-ms", "0", "--token-delay-ms", "0", "--tokens", "2", "--slots", "3", "--cache-blocks", "10"]);
    const reader = p.stdout.getReader();
    let out = "";
    while (!out.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      out += new TextDecoder().decode(value);
    }
    const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
    expect(url).toBeDefined();
    const models = (await (await fetch(`${url}/v1/models`)).json()) as Json;
    expect(models.data.map((m: Json) => m.id)).toEqual(["a", "b"]);
    const res = (await (await post(url!, "/v1/chat/completions", { model: "b", messages: [{ role: "user", content: "x" }] })).json()) as Json;
    expect(res.usage.completion_tokens).toBe(2);
    p.kill("SIGTERM");
    expect(await p.exited).toBe(0);
  });

  test("started with LLMGW_FAKE_ENGINE_API_KEY, as the agent starts it, /v1/* needs the key", async () => {
    const key = "env-given-key-0123456789";
    const p = run(["--port", "0", "--model", "a"], { LLMGW_FAKE_ENGINE_API_KEY: key });
    const reader = p.stdout.getReader();
    let out = "";
    while (!out.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      out += new TextDecoder().decode(value);
    }
    const url = /(http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
    expect(url).toBeDefined();
    expect(out).not.toContain(key);
    expect((await fetch(`${url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200);
    expect((await fetch(`${url}/health`)).status).toBe(200);
    p.kill("SIGTERM");
    expect(await p.exited).toBe(0);
  });
});
