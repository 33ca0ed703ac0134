// The usage ledger against the engines' own counters, through the compiled binary: 1,000 mixed
// requests of two teams' keys (streamed to their end, whole, completions, embeddings, streams
// the client cuts at a random point, on engines that refuse every 9th request so the router
// retries on the other replica) leave a ledger equal, token for token, to the sum of the two
// fake engines' vllm:prompt_tokens_total and vllm:generation_tokens_total; `llmgw usage --check`
// shows no drift on either replica and exits 0; the router's llmgw_usage_tokens_total says the
// same, and its llmgw_ledger_drift_tokens is 0. Seeded: LEDGER_SEED=n replays a run.

import { describe, expect, test } from "bun:test";
import type { ReplicaDrift } from "../../src/protocol/ledger-check";
import type { UsageRowView } from "../../src/protocol/views";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";

const REQUESTS = 1_000;
const CONCURRENCY = 40;
const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, env: { LLMGW_FAKE_TOKEN_DELAY_MS: "20", LLMGW_FAKE_FAIL_EVERY: "9" } };

/** mulberry32: a small seeded generator, so a failing mix can be replayed. */
function random(seed: number): () => number {
  let s = seed | 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A counter's value in a Prometheus exposition, summed over the series whose line matches. */
function counter(text: string, name: string, having = ""): number {
  let n = 0;
  for (const line of text.split("\n")) if ((line.startsWith(`${name}{`) || line.startsWith(`${name} `)) && line.includes(having)) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  return n;
}

describe("the ledger reconciled with the engines", () => {
  const cluster = withCluster(["--require-api-key", "--endpoint-cooldown", "100ms"]);

  test("1,000 mixed requests leave a ledger equal, token for token, to the fake engines' own counters", async () => {
    const c = cluster();
    const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir });
    const keys: string[] = [];
    for (const [team, key] of [["search", "svc"], ["batch", "nightly"]]) {
      expect(cli("teams", "create", team!).code).toBe(0);
      const made = cli("keys", "create", key!, "--team", team!);
      expect(made.code).toBe(0);
      keys.push(made.stdout.trim());
    }
    expect(await c.putModel("chat", { replicas: { min: 2, max: 2 }, profiles: [PROFILE] })).toBe(201);
    const replicas = await until("two ready replicas", async () => {
      const r = await c.readyOf("chat");
      return r.length === 2 ? r : undefined;
    }, 40_000);
    const check = () => {
      const out = cli("usage", "--check", "-o", "json");
      if (out.stderr !== "") throw new Error(out.stderr);
      return { code: out.code, rows: JSON.parse(out.stdout) as ReplicaDrift[] };
    };
    // The baseline before any request: from here on every token either side counts is compared.
    await until("both replicas checked, nothing sent yet", () => {
      const { rows } = check();
      return rows.length === 2 && rows.every((r) => r.state === "checked") ? rows : undefined;
    });

    const seed = Number(process.env.LEDGER_SEED ?? Date.now() % 100_000);
    const rnd = random(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
    const kinds = { streamed: 0, whole: 0, completions: 0, embeddings: 0, cut: 0 };
    const statuses = new Map<number, number>();

    /** One request of the mix, made up front from the seed so the order of answers does not change it. */
    const plan = Array.from({ length: REQUESTS }, (_, i) => {
      const r = rnd();
      const kind = r < 0.3 ? "streamed" : r < 0.5 ? "whole" : r < 0.6 ? "completions" : r < 0.67 ? "embeddings" : "cut";
      const max = int(2, 14);
      return { i, kind, key: pick(keys), max, cutAt: kind === "cut" ? int(1, max - 1) : 0, usage: rnd() < 0.5, text: `request ${i} ${"lorem ipsum ".repeat(int(0, 30))}` } as const;
    });

    const send = async (p: (typeof plan)[number]): Promise<void> => {
      kinds[p.kind as keyof typeof kinds]++;
      const path = p.kind === "completions" ? "/v1/completions" : p.kind === "embeddings" ? "/v1/embeddings" : "/v1/chat/completions";
      const body =
        p.kind === "completions"
          ? { model: "chat", prompt: p.text, max_tokens: p.max, stream: true }
          : p.kind === "embeddings"
            ? { model: "chat", input: p.text }
            : { model: "chat", max_tokens: p.max, messages: [{ role: "user", content: p.text }], stream: p.kind !== "whole", ...(p.usage && p.kind !== "whole" ? { stream_options: { include_usage: true } } : {}) };
      const ac = new AbortController();
      try {
        const res = await fetch(`${c.serve.routerUrl}${path}`, { method: "POST", headers: { authorization: `Bearer ${p.key}`, "content-type": "application/json" }, body: JSON.stringify(body), signal: ac.signal });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (p.kind !== "cut" || res.status !== 200) {
          await res.arrayBuffer();
          return;
        }
        // The client leaves once it has seen cutAt tokens: the rest is never generated.
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let seen = 0;
        while (seen < p.cutAt) {
          const { value, done } = await reader.read();
          if (done) break;
          seen += (value.match(/"content":"[^"]/g) ?? []).length;
        }
        ac.abort();
      } catch (e) {
        if (!ac.signal.aborted) throw e;
      }
    };

    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < plan.length) await send(plan[next++]!);
      }),
    );
    const tookMs = performance.now() - started;
    console.log(`seed ${seed}: ${REQUESTS} requests in ${(tookMs / 1000).toFixed(1)} s; ${JSON.stringify(kinds)}; statuses ${JSON.stringify([...statuses])}`);
    expect(statuses.get(200)).toBeGreaterThan(REQUESTS * 0.9);

    // The engines' own counters, once nothing runs on them.
    const engines = async () => {
      let prompt = 0;
      let generated = 0;
      let running = 0;
      for (const r of replicas) {
        const text = await (await fetch(`${r.endpoint}/metrics`)).text();
        prompt += counter(text, "vllm:prompt_tokens_total");
        generated += counter(text, "vllm:generation_tokens_total");
        running += counter(text, "vllm:num_requests_running");
      }
      return { prompt, generated, running };
    };
    const engine = await until("both engines idle", async () => {
      const e = await engines();
      return e.running === 0 ? e : undefined;
    });
    expect(engine.generated).toBeGreaterThan(REQUESTS);

    // The ledger as the control plane wrote it, once every request is in it.
    const rows = await until("the ledger to hold every request", () => {
      const out = cli("usage", "-o", "json");
      if (out.code !== 0) throw new Error(out.stderr);
      const r = (JSON.parse(out.stdout) as UsageRowView[]).filter((x) => x.model === "chat");
      return r.reduce((n, x) => n + x.requests, 0) >= REQUESTS ? r : undefined;
    });
    const sum = (f: "requests" | "prompt_tokens" | "completion_tokens" | "aborted") => rows.reduce((n, r) => n + r[f], 0);
    expect(sum("requests")).toBe(REQUESTS);
    expect({ prompt: sum("prompt_tokens"), completion: sum("completion_tokens") }).toEqual({ prompt: engine.prompt, completion: engine.generated });
    expect(sum("aborted")).toBeGreaterThanOrEqual(kinds.cut * 0.9);
    expect(new Set(rows.map((r) => `${r.team}/${r.key}`))).toEqual(new Set(["search/svc", "batch/nightly"]));

    // Per replica, from a moment after the last request: no drift, and the engines' whole counts compared.
    const after = Date.now();
    const checked = await until("a check of both replicas after the traffic", () => {
      const { rows: r } = check();
      return r.length === 2 && r.every((x) => x.state === "checked" && x.checked_at >= after) ? r : undefined;
    });
    expect(checked.map((r) => [r.drift_prompt_tokens, r.drift_completion_tokens])).toEqual([
      [0, 0],
      [0, 0],
    ]);
    expect(checked.reduce((n, r) => n + r.engine_prompt_tokens, 0)).toBe(engine.prompt);
    expect(checked.reduce((n, r) => n + r.engine_completion_tokens, 0)).toBe(engine.generated);
    const table = cli("usage", "--check");
    expect(table.code).toBe(0);
    expect(table.stdout).toContain("No drift");

    const metrics = await (await fetch(`${c.serve.routerUrl}/metrics`, { headers: { authorization: `Bearer ${c.serve.adminToken}` } })).text();
    expect(counter(metrics, "llmgw_usage_tokens_total", 'kind="prompt"')).toBe(engine.prompt);
    expect(counter(metrics, "llmgw_usage_tokens_total", 'kind="completion"')).toBe(engine.generated);
    expect(counter(metrics, "llmgw_usage_requests_total", 'key="svc"') + counter(metrics, "llmgw_usage_requests_total", 'key="nightly"')).toBe(REQUESTS);
    expect(metrics).toMatch(/^llmgw_ledger_drift_tokens\{replica="[^"]+",model="chat",kind="completion"\} 0$/m);
    expect(counter(metrics, "llmgw_ledger_drift_tokens")).toBe(0);
    // The engines' refusals were retried on the other replica (and each such request counted once).
    expect(counter(metrics, "llmgw_router_retries_total")).toBeGreaterThan(REQUESTS / 20);
    expect(metrics).not.toContain(keys[0]!);
  }, 90_000);
});
