// Every inference endpoint is counted and limited, through the compiled binary: a key with a
// requests-per-minute limit calls chat, completions, embeddings, responses, rerank (both paths)
// and score (one against many, and pairwise) once each on a fake vLLM engine; each answer carries the key's
// x-ratelimit-* headers and spends one request of its allowance, so the next one is refused;
// the ledger holds each request once with the prompt tokens the engine itself counted (its
// vllm:prompt_tokens_total), the refusal among them; and the rows survive `kill -9` of serve.

import { describe, expect, test } from "bun:test";
import type { UsageRowView } from "../../src/protocol/views";
import { run, until } from "../helpers/binary";
import { running, withCluster } from "../helpers/cluster";
import { counterSum as counter } from "../helpers/prom-text";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };

const CALLS: [string, object][] = [
  ["/v1/chat/completions", { messages: [{ role: "user", content: "count me" }], max_tokens: 3 }],
  ["/v1/completions", { prompt: "count me too", max_tokens: 2 }],
  ["/v1/embeddings", { input: ["one text", "and another"] }],
  ["/v1/responses", { input: "a response", max_output_tokens: 4 }],
  // vLLM's rerank answer gives its usage before the results, each with its document's text: far
  // from the answer's end when the documents are long.
  ["/v1/rerank", { query: "which one", documents: Array.from({ length: 40 }, (_, i) => `document ${i}: ${"a long passage of text ".repeat(20)}`) }],
  ["/rerank", { query: "again", documents: ["alpha", "beta"] }],
  ["/v1/score", { text_1: "a query", text_2: ["one", "two", "three"] }],
  ["/v1/score", { text_1: ["left", "right"], text_2: ["up", "down"] }],
];

describe("every inference endpoint", () => {
  const cluster = withCluster(["--require-api-key"]);

  test("is counted in the ledger from the engine's usage and limited by the key's rpm; the rows survive kill -9 of serve", async () => {
    const c = cluster();
    const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir });
    expect(cli("teams", "create", "search").code).toBe(0);
    const make = (...args: string[]) => {
      const r = cli("keys", "create", ...args);
      expect(r.code).toBe(0);
      return r.stdout.trim();
    };
    const limited = make("paths", "--team", "search", "--rpm", String(CALLS.length));
    const warm = make("warm");
    expect(await c.putModel("m", { replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const [replica] = await until("a ready replica", async () => {
      const r = await c.readyOf("m");
      return r.length === 1 ? r : undefined;
    });
    const post = (key: string, path: string, body: object) =>
      fetch(`${c.serve.routerUrl}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify({ model: "m", ...body }) });
    await until("the router routing m", async () => {
      const res = await post(warm, "/v1/embeddings", { input: "warm up" });
      await res.arrayBuffer();
      return res.status === 200;
    });

    const remaining: number[] = [];
    for (const [path, body] of CALLS) {
      const res = await post(limited, path, body);
      const text = await res.text();
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(text).toContain('"usage"');
      remaining.push(Number(res.headers.get("x-ratelimit-remaining-requests")));
    }
    // Each path spent one request of the allowance (a minute's refill of 8 is one per 7.5 s).
    expect(remaining[0]).toBe(CALLS.length - 1);
    expect(remaining.at(-1)!).toBeLessThanOrEqual(1);
    const refused = await post(limited, "/v1/score", { text_1: "q", text_2: "d" });
    expect(refused.status).toBe(429);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("rate_limit_exceeded");

    const metrics = await (await fetch(`${replica!.endpoint}/metrics`)).text();
    const prompt = counter(metrics, "vllm:prompt_tokens_total");
    const generated = counter(metrics, "vllm:generation_tokens_total");
    const ledger = () => {
      const out = cli("usage", "-o", "json");
      if (out.code !== 0) throw new Error(out.stderr);
      return JSON.parse(out.stdout) as UsageRowView[];
    };
    const sum = (rows: UsageRowView[], f: "prompt_tokens" | "completion_tokens" | "requests" | "refused" | "errors") => rows.reduce((n, r) => n + r[f], 0);
    const rows = await until("the ledger to hold every request", () => {
      const r = ledger();
      return sum(r, "prompt_tokens") === prompt && sum(r, "requests") >= CALLS.length + 2 ? r : undefined;
    });
    const mine = rows.filter((r) => r.key === "paths");
    expect(mine.every((r) => r.team === "search" && r.model === "m")).toBe(true);
    expect(sum(mine, "requests")).toBe(CALLS.length + 1);
    expect(sum(mine, "refused")).toBe(1);
    expect(sum(mine, "errors")).toBe(1);
    expect(sum(rows, "completion_tokens")).toBe(generated);
    // The rerank and score calls counted their prompts too: without them the key's prompt tokens
    // would be those of the four generative calls alone.
    expect(sum(mine, "prompt_tokens")).toBe(prompt - sum(rows.filter((r) => r.key === "warm"), "prompt_tokens"));

    // kill -9: what the store holds is what a tick wrote; nothing was sent since it was read.
    const pid = c.serve.pid;
    process.kill(pid, "SIGKILL");
    c.serve.proc.kill("SIGKILL");
    await until("serve gone", () => !running(pid));
    await c.startServe();
    const after = ledger();
    for (const f of ["requests", "prompt_tokens", "completion_tokens", "refused"] as const) expect({ f, n: sum(after, f) }).toEqual({ f, n: sum(rows, f) });
  }, 90_000);
});
