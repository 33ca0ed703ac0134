// The fake engine's token counters, which the ledger is reconciled against: like vLLM's, the
// generation counter moves with each token generated (so a stream the client leaves has counted
// exactly the tokens sent before it left, n choices each), the prompt counter with the usage an
// answer reports, and a request refused on purpose (failEvery) counts nothing.

import { afterAll, describe, expect, test } from "bun:test";
import { type FakeEngine, type FakeEngineOptions, parseFakeEngineFlags, startFakeEngine } from "../../src/sim/fake-engine";
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

async function counters(e: FakeEngine): Promise<{ prompt: number; generation: number }> {
  const text = await (await fetch(`${e.url}/metrics`)).text();
  const value = (name: string) => Number(text.split("\n").find((l) => l.startsWith(`${name}{`))!.split(" ").pop());
  return { prompt: value("vllm:prompt_tokens_total"), generation: value("vllm:generation_tokens_total") };
}

function post(e: FakeEngine, body: object, signal?: AbortSignal): Promise<Response> {
  return fetch(`${e.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", ...body }), signal });
}

/** Reads a stream until `chunks` content chunks came, then leaves; returns how many it saw. */
async function readThenLeave(res: Response, chunks: number, ac: AbortController): Promise<number> {
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let seen = 0;
  while (seen < chunks) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += (value.match(/"content":"[^"]/g) ?? []).length;
  }
  ac.abort();
  return seen;
}

describe("fake engine token counters", () => {
  test("a stream the client leaves has counted exactly the tokens it was sent, every choice's, and no prompt", async () => {
    const e = await engine({ tokenDelayMs: 40, ttftMs: 1, tokens: 20 });
    const ac = new AbortController();
    const res = await post(e, { stream: true, n: 2, messages: [{ role: "user", content: "count me" }] }, ac.signal);
    const seen = await readThenLeave(res, 6, ac);
    await until("the abort to reach the engine", () => e.stats().aborted === 1, { everyMs: 1 });
    expect(seen).toBe(6);
    expect(await counters(e)).toEqual({ prompt: 0, generation: 6 });
  });

  test("whole and streamed answers count what their usage says", async () => {
    const e = await engine({ tokenDelayMs: 0, ttftMs: 0 });
    const whole = (await (await post(e, { max_tokens: 7, n: 3, messages: [{ role: "user", content: "abcdefgh" }] })).json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    const streamed = await (await post(e, { stream: true, stream_options: { include_usage: true }, max_tokens: 5, messages: [{ role: "user", content: "abcd" }] })).text();
    const usage = JSON.parse(streamed.split("\n\n").find((f) => f.includes('"usage":{'))!.slice(6)).usage as { prompt_tokens: number; completion_tokens: number };
    expect(whole.usage.completion_tokens).toBe(21);
    expect(await counters(e)).toEqual({ prompt: whole.usage.prompt_tokens + usage.prompt_tokens, generation: 21 + usage.completion_tokens });
  });

  test("failEvery answers every Nth inference request 503 before any work, and counts none of it", async () => {
    const e = await engine({ tokenDelayMs: 0, ttftMs: 0, failEvery: 3 });
    const statuses: number[] = [];
    let generated = 0;
    for (let i = 0; i < 6; i++) {
      const res = await post(e, { max_tokens: 4, messages: [{ role: "user", content: "x" }] });
      statuses.push(res.status);
      const body = (await res.json()) as { usage?: { completion_tokens: number }; error?: { code: string } };
      if (res.status === 503) expect(body.error!.code).toBe("unavailable");
      generated += body.usage?.completion_tokens ?? 0;
    }
    expect(statuses).toEqual([200, 200, 503, 200, 200, 503]);
    expect(e.stats().failed).toBe(2);
    expect((await counters(e)).generation).toBe(generated);
    expect(generated).toBe(16);
  });

  test("--fail-every and LLMGW_FAKE_FAIL_EVERY set it; a bad value is a usage error naming it", () => {
    expect(parseFakeEngineFlags(["--model", "m", "--fail-every", "5"]).failEvery).toBe(5);
    expect(parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_FAIL_EVERY: "7" }).failEvery).toBe(7);
    expect(parseFakeEngineFlags(["--model", "m", "--fail-every", "2"], { LLMGW_FAKE_FAIL_EVERY: "7" }).failEvery).toBe(2);
    expect(() => parseFakeEngineFlags(["--model", "m"], { LLMGW_FAKE_FAIL_EVERY: "often" })).toThrow("LLMGW_FAKE_FAIL_EVERY");
  });
});
