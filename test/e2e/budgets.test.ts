// Budgets and GPU-seconds through the compiled binary. A key with a token budget, mostly spent by a
// few requests already in the store's ledger, meets 200 requests at once: the ones its budget
// cannot hold are answered 429 insufficient_quota, and the ledger's total for the key stays within
// the budget (every request names max_tokens, so none uses more than it reserved: the stated
// bound is 0). Two keys' requests at once on one replica of 1 GPU each get half of the time they
// shared; a GPU-hour budget refuses once its requests have spent it. A restarted `serve` still
// refuses: the period's spend is the store's.

import { describe, expect, test } from "bun:test";
import type { UsageRowView } from "../../src/protocol/views";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";

const SLOW = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, env: { LLMGW_FAKE_TOKEN_DELAY_MS: "20" } };

describe("budgets held by the router", () => {
  const cluster = withCluster(["--require-api-key"]);
  const cli = (...args: string[]) => run(cluster().bin, args, { cwd: cluster().dir });
  const key = (...args: string[]) => {
    const r = cli("keys", "create", ...args);
    expect(r.code).toBe(0);
    return r.stdout.trim();
  };
  const body = (model: string, maxTokens: number, text = "hello there") => JSON.stringify({ model, max_tokens: maxTokens, messages: [{ role: "user", content: text }] });
  const post = (k: string, b: string) =>
    fetch(`${cluster().serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${k}`, "content-type": "application/json" }, body: b });
  const usage = async () => (await cluster().api<UsageRowView[]>("/api/v1/usage?by=key")).filter((r) => r.key !== "");

  test("200 requests at once on a nearly spent token budget: refused with insufficient_quota past it, the ledger within it; still refused after a restart", async () => {
    const c = cluster();
    expect(await c.putModel("m", { replicas: { min: 1, max: 1 }, profiles: [{ ...SLOW, env: { LLMGW_FAKE_TOKEN_DELAY_MS: "5" } }] })).toBe(201);
    await until("a replica of m ready", async () => (await c.readyOf("m")).length === 1, 40_000);
    const warm = key("warm");
    await until("the router routing m", async () => {
      const r = await post(warm, body("m", 1));
      await r.arrayBuffer();
      return r.status === 200;
    });

    // What one request reserves: its size / 4 and its max_tokens.
    const b = body("m", 20);
    const reserves = Math.ceil(new TextEncoder().encode(b).byteLength / 4) + 20;
    const BUDGET = 14 * reserves;
    const svc = key("svc", "--budget-tokens", String(BUDGET), "--budget-period", "day");
    await until("the router to hold the key", async () => {
      const r = await post(svc, b);
      await r.arrayBuffer();
      return r.status === 200;
    });
    for (let i = 0; i < 2; i++) {
      const r = await post(svc, b);
      expect(r.status).toBe(200);
      const u = ((await r.json()) as { usage: { total_tokens: number } }).usage;
      expect(u.total_tokens).toBeLessThanOrEqual(reserves);
    }
    // The three in the store's ledger: the router's figure comes from there from now on.
    const before = await until("the spend in the store", async () => {
      const r = (await usage()).find((x) => x.key === "svc");
      return r !== undefined && r.requests >= 3 ? r.prompt_tokens + r.completion_tokens : undefined;
    });

    const answers = await Promise.all(Array.from({ length: 200 }, () => post(svc, b).then(async (r) => ({ status: r.status, text: await r.text(), retry: r.headers.get("x-should-retry") }))));
    const ok = answers.filter((a) => a.status === 200).length;
    const refused = answers.filter((a) => a.status === 429);
    expect(ok + refused.length).toBe(200);
    // What was left held at least (BUDGET − spent) / reserves of them, and no more than 14 in all.
    expect(ok).toBeGreaterThanOrEqual(Math.floor((BUDGET - before) / reserves));
    expect(ok).toBeLessThanOrEqual(14);
    const err = JSON.parse(refused[0]!.text).error as { type: string; code: string; message: string };
    expect(err).toMatchObject({ type: "insufficient_quota", code: "insufficient_quota" });
    expect(err.message).toContain("key 'svc'");
    expect(err.message).toContain(`${BUDGET} tokens per day`);
    expect(err.message).toMatch(/resets at \d{4}-\d\d-\d\dT00:00:00\.000Z/);
    expect(refused[0]!.retry).toBe("false");

    // The ledger's total for the key, once every answer is in it: within the budget, and the
    // refusals counted as refused.
    const rows = await until("the ledger to hold all 203 requests of svc", async () => {
      const r = (await usage()).find((x) => x.key === "svc");
      return r !== undefined && r.requests >= 203 ? r : undefined;
    });
    expect(rows.prompt_tokens + rows.completion_tokens).toBeLessThanOrEqual(BUDGET);
    expect(rows.refused).toBe(refused.length);

    // Each used less than it reserved: what they gave back may hold a last few, one at a time.
    let last = 0;
    for (; last < 40; last++) {
      const r = await post(svc, b);
      await r.arrayBuffer();
      if (r.status === 429) break;
      expect(r.status).toBe(200);
    }
    expect(last).toBeLessThan(40);
    await until("the ledger to hold the last ones", async () => ((await usage()).find((x) => x.key === "svc")?.requests ?? 0) >= 203 + last + 1);

    // keys list shows the budget with what is spent of it.
    const listed = await until("keys list to show the budget's use", () => {
      const k = (JSON.parse(cli("keys", "list", "-o", "json").stdout) as { name: string; use?: { budget_tokens?: number } }[]).find((x) => x.name === "svc");
      return k?.use?.budget_tokens !== undefined && k.use.budget_tokens > 0 ? k.use.budget_tokens : undefined;
    });
    expect(listed).toBeLessThanOrEqual(BUDGET);
    expect(cli("keys", "list").stdout).toMatch(new RegExp(`svc .* \\d+/${BUDGET} tok/day`));

    // A restart forgets what the router counted; the store does not.
    const proc = c.serve.proc;
    proc.kill("SIGTERM");
    await proc.exited;
    await c.startServe();
    const again = await until("the restarted router to answer svc", async () => {
      const r = await post(svc, b);
      const text = await r.text();
      // Before its key list reached the router: 401; before the store's figure: 503, to retry.
      if (r.status === 401 || r.status === 503) return undefined;
      return { status: r.status, text };
    }, 30_000);
    expect(again.status).toBe(429);
    expect(JSON.parse(again.text).error.code).toBe("insufficient_quota");
    const after = (await usage()).find((x) => x.key === "svc")!;
    expect(after.prompt_tokens + after.completion_tokens).toBeLessThanOrEqual(BUDGET);
  }, 90_000);

  test("two requests at once on one replica of 1 GPU share it; a GPU-hour budget refuses once spent", async () => {
    const c = cluster();
    expect(await c.putModel("g", { replicas: { min: 1, max: 1 }, profiles: [SLOW] })).toBe(201);
    await until("a replica of g ready", async () => (await c.readyOf("g")).length === 1, 40_000);
    const warm = key("warm-g");
    await until("the router routing g", async () => {
      const r = await post(warm, body("g", 1));
      await r.arrayBuffer();
      return r.status === 200;
    });
    const k1 = key("one");
    const k2 = key("two");
    const timed = async (k: string) => {
      const t0 = performance.now();
      const r = await post(k, body("g", 40));
      await r.arrayBuffer();
      expect(r.status).toBe(200);
      return (performance.now() - t0) / 1000;
    };
    const [d1, d2] = await Promise.all([timed(k1), timed(k2)]);
    const gpu = await until("both keys' GPU-seconds in the ledger", () => {
      const out = cli("usage", "--by", "key", "-o", "json");
      const rows = JSON.parse(out.stdout) as UsageRowView[];
      const g1 = rows.find((r) => r.key === "one")?.gpu_seconds ?? 0;
      const g2 = rows.find((r) => r.key === "two")?.gpu_seconds ?? 0;
      return g1 > 0 && g2 > 0 ? [g1, g2] : undefined;
    });
    // 40 tokens at 20 ms: about 0.8 s each, nearly all of it together: about half each.
    for (const [g, d] of [[gpu[0]!, d1], [gpu[1]!, d2]] as const) {
      expect(g).toBeGreaterThan(0.3 * d);
      expect(g).toBeLessThan(0.8 * d);
    }
    // Together no more than the one GPU for the time either was in flight.
    expect(gpu[0]! + gpu[1]!).toBeLessThanOrEqual(Math.max(d1, d2) + 0.05);

    // A budget of 1.8 GPU-seconds: requests of about 0.5 s each spend it in a few.
    const hours = cli("keys", "create", "gpu", "--budget-gpu-hours", "0.0005");
    expect(hours.code).toBe(0);
    const gk = hours.stdout.trim();
    let served = 0;
    const no = await until("the GPU-hour budget to refuse", async () => {
      const r = await post(gk, body("g", 25));
      const text = await r.text();
      if (r.status === 200) served++;
      else if (r.status === 429) return text;
      return undefined;
    }, 30_000);
    expect(served).toBeGreaterThanOrEqual(2);
    expect(served).toBeLessThanOrEqual(5);
    const err = JSON.parse(no).error as { code: string; message: string };
    expect(err.code).toBe("insufficient_quota");
    expect(err.message).toContain("key 'gpu'");
    expect(err.message).toContain("GPU-hours per month");
  }, 90_000);
});
