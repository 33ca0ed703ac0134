// The usage ledger through the compiled binary: a key of a team makes streamed requests (that did
// not ask for usage) and whole ones against a fake vLLM engine; the streamed answers reach the
// client without the usage the router asked the engine for, and after the next tick
// `llmgw usage -o json` shows exactly the prompt and completion tokens the engine itself counted
// (its vllm:prompt_tokens_total and vllm:generation_tokens_total), under the key, its team and
// the model.

import { describe, expect, test } from "bun:test";
import type { UsageRowView } from "../../src/protocol/views";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";
import { counterSum as counter } from "../helpers/prom-text";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const STREAMED = 4;
const WHOLE = 3;

describe("llmgw usage", () => {
  const cluster = withCluster(["--require-api-key"]);

  test("streamed and whole requests of a key are counted from the engine's own usage, token for token, and the client never sees the router's stream_options", async () => {
    const c = cluster();
    const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir });
    expect(cli("teams", "create", "search").code).toBe(0);
    const created = cli("keys", "create", "svc", "--team", "search");
    expect(created.code).toBe(0);
    const key = created.stdout.trim();
    expect(await c.putModel("chat", { replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const [replica] = await until("a ready replica", async () => {
      const r = await c.readyOf("chat");
      return r.length === 1 ? r : undefined;
    });
    const post = (body: object) =>
      fetch(`${c.serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "chat", ...body }) });
    await until("the router routing chat for the key", async () => {
      const res = await post({ max_tokens: 1, messages: [{ role: "user", content: "warm up" }] });
      await res.arrayBuffer();
      return res.status === 200;
    });

    for (let i = 0; i < STREAMED; i++) {
      const res = await post({ stream: true, max_tokens: 5 + i, messages: [{ role: "user", content: `stream ${i}: tell me a story about the sea` }] });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toContain('"content":');
      expect(text).toEndWith("data: [DONE]\n\n");
      // The client asked for no usage: none reaches it, not even "usage":null.
      expect(text).not.toContain('"usage"');
    }
    for (let i = 0; i < WHOLE; i++) {
      const res = await post({ max_tokens: 3 + i, messages: [{ role: "user", content: `whole ${i}` }] });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens).toBeGreaterThan(0);
    }

    const metrics = await (await fetch(`${replica!.endpoint}/metrics`)).text();
    const prompt = counter(metrics, "vllm:prompt_tokens_total");
    const generated = counter(metrics, "vllm:generation_tokens_total");
    expect(prompt).toBeGreaterThan(0);
    expect(generated).toBeGreaterThan(0);

    const rows = await until("the ledger to hold every request", () => {
      const out = cli("usage", "-o", "json");
      if (out.code !== 0) throw new Error(out.stderr);
      const r = JSON.parse(out.stdout) as UsageRowView[];
      return r.reduce((n, x) => n + x.completion_tokens, 0) === generated ? r : undefined;
    });
    const mine = rows.filter((r) => r.key === "svc");
    expect(mine.every((r) => r.team === "search" && r.model === "chat")).toBe(true);
    const sum = (f: "prompt_tokens" | "completion_tokens" | "aborted" | "gpu_seconds") => mine.reduce((n, r) => n + r[f], 0);
    expect(sum("prompt_tokens")).toBe(prompt);
    expect(sum("completion_tokens")).toBe(generated);
    expect(sum("aborted")).toBe(0);
    // One replica of 1 GPU: the requests' shares of it while they ran.
    expect(sum("gpu_seconds")).toBeGreaterThan(0);
    expect(mine.reduce((n, r) => n + r.requests, 0)).toBeGreaterThanOrEqual(STREAMED + WHOLE + 1);

    const table = cli("usage", "--by", "key");
    expect(table.code).toBe(0);
    expect(table.stdout.split("\n")[0]!.split(/\s+/)).toEqual(["KEY", "REQUESTS", "PROMPT", "COMPLETION", "CACHED", "ERRORS", "ABORTED"]);
    expect(table.stdout).toContain("svc");
    const csv = cli("usage", "--by", "team", "-o", "csv");
    expect(csv.stdout.split("\n")[0]).toBe("hour,team,key,model,pool,requests,prompt_tokens,completion_tokens,cached_tokens,errors,errors_4xx,errors_5xx,refused,aborted,gpu_seconds");
    expect(csv.stdout).toContain(`,search,,,,`);
    const bad = cli("usage", "--since", "yesterday");
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("since");
  }, 90_000);
});
