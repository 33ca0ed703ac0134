// Fair admission through the compiled binary: a model whose profile bounds each replica
// (max_inflight) and whose engine is slow (the fake engine's token delay, set by the profile's
// env), two teams made with `llmgw teams` and `llmgw keys`, one flooding: the other team's few
// requests are let in as slots free up, not after the flood, and the router counts the waiting
// on its /metrics.

import { describe, expect, test } from "bun:test";
import { run, until } from "../helpers/binary";
import { withCluster } from "../helpers/cluster";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe("two teams, one flooding a bounded replica", () => {
  const c = withCluster([]);
  const cli = (...args: string[]) => run(c().bin, args, { cwd: c().dir });
  const chat = async (key: string): Promise<number> => {
    const t0 = performance.now();
    const r = await fetch(`${c().serve.routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 8 }),
    });
    await r.arrayBuffer();
    expect(r.status).toBe(200);
    return performance.now() - t0;
  };
  const waiting = async () => {
    const text = await (await fetch(`${c().serve.routerUrl}/metrics`, { headers: { authorization: `Bearer ${c().serve.adminToken}` } })).text();
    return Number(/^llmgw_router_waiting_requests\{model="m"\} (\d+)$/m.exec(text)?.[1] ?? 0);
  };

  test("the light team's requests are served in the first slots that free up; the waiting are counted", async () => {
    const profile = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, max_inflight: 2, env: { LLMGW_FAKE_TOKEN_DELAY_MS: "25" } };
    expect(await c().putModel("m", { replicas: { min: 1, max: 1 }, profiles: [profile] })).toBe(201);
    for (const t of ["flood", "light"]) expect(cli("teams", "create", t).code).toBe(0);
    const keyOf = (name: string, team: string) => {
      const r = cli("keys", "create", name, "--team", team);
      expect(r.code).toBe(0);
      return r.stdout.trim();
    };
    const a = keyOf("a", "flood");
    const b = keyOf("b", "light");
    await until("a replica of m ready", async () => (await c().readyOf("m")).length === 1, 40_000);
    await until("the router to know the bound", async () => (await chat(a)) > 0);

    // 30 from the flooding team at once (8 tokens at 25 ms: ~200 ms each, two at a time: ~3 s in
    // all), then the light team's 4 once the flood waits.
    const flood = Array.from({ length: 30 }, () => chat(a));
    let seen = 0;
    await until("the flood to wait in the router", async () => (seen = await waiting()) > 0);
    const light = await Promise.all(Array.from({ length: 4 }, () => chat(b)));
    const flooded = await Promise.all(flood);
    console.log(`flood of 30: median ${median(flooded).toFixed(0)} ms; light team's 4: median ${median(light).toFixed(0)} ms, slowest ${Math.max(...light).toFixed(0)} ms; ${seen} waiting at the peak seen`);
    // First come, first served, the light team would wait out the flood: ~3 s.
    expect(median(light)).toBeLessThan(median(flooded));
    expect(Math.max(...light)).toBeLessThan(1500);
    expect(seen).toBeGreaterThan(10);
    await until("no one waiting once all are answered", async () => (await waiting()) === 0);
  }, 90_000);
});
