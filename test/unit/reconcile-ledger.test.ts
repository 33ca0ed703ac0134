// The ledger checked against the engines' own counters (src/router/reconcile-ledger.ts,
// engine-tokens.ts) and the ledger as Prometheus counters (usage-counters.ts): the counters of
// real vLLM, SGLang and llama-server expositions read; drift measured only at quiet moments; an
// engine restart taking a new baseline; an engine without counters unknown, not 0; the poller
// handing each answer's counters over; the usage counters equal to the rows, taken or not;
// `llmgw usage --check`'s table and exit code.

import { describe, expect, test } from "bun:test";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { UsageRow } from "../../src/protocol/routing";
import { EngineMetricsPoller, type MetricsEndpoint } from "../../src/router/engine-metrics";
import { EngineTokenReader } from "../../src/router/engine-tokens";
import { Ledger } from "../../src/router/ledger";
import { LedgerReconciler } from "../../src/router/reconcile-ledger";
import { UsageCounters } from "../../src/router/usage-counters";
import type { Client } from "../../src/cli/client";
import { usageCheck } from "../../src/cli/usage-check";
import type { ReplicaDrift } from "../../src/protocol/ledger-check";
import { FromRouter, ToRouter } from "../../src/protocol/router-link";
import { readFixture } from "../fixtures/read";

function read(text: string, engine?: string) {
  const r = new EngineTokenReader();
  let start = 0;
  for (;;) {
    const end = text.indexOf("\n", start);
    r.line(text, start, end < 0 ? text.length : end);
    if (end < 0) break;
    start = end + 1;
  }
  return r.tokens(engine);
}

describe("engine token counters", () => {
  test("real expositions: vLLM, SGLang, llama-server", () => {
    expect(read(readFixture("metrics/vllm/datadog-vllm_metrics.prom"), "vllm")).toEqual({ prompt: 5, completion: 7 });
    expect(read(readFixture("metrics/sglang/datadog-sglang_metrics.prom"), "sglang")).toEqual({ prompt: 5, completion: 32 });
    expect(read(readFixture("metrics/llamacpp/llama-server-metrics-legacy-with-kvcache.prom"), "llama.cpp")).toEqual({ prompt: 6886, completion: 3469 });
  });

  test("series add up; labels holding braces and quotes are passed over; none at all is unknown", () => {
    const text = ['vllm:prompt_tokens_total{model_name="a}\\"b",engine="0"} 10', 'vllm:prompt_tokens_total{model_name="a}\\"b",engine="1"} 5.0', "vllm:generation_tokens_total 7", "# vllm:generation_tokens_total 100"].join("\n");
    expect(read(text)).toEqual({ prompt: 15, completion: 7 });
    expect(read("vllm:num_requests_running 1\n")).toBeUndefined();
    // Half a pair is no pair.
    expect(read("vllm:prompt_tokens_total 3\n")).toBeUndefined();
    expect(read("llamacpp:prompt_tokens_total 3\nllamacpp:tokens_predicted_total 4\nvllm:prompt_tokens_total 1\nvllm:generation_tokens_total 1\n", "llama.cpp")).toEqual({ prompt: 3, completion: 4 });
  });
});

const ep = (inflight = 0, id = "r1") => ({ id, info: { models: ["chat"] }, inflight });

describe("ledger reconciliation", () => {
  test("drift is the engine's growth less the ledger's since the first quiet sample", () => {
    const s = new ManualScheduler(1_000);
    const r = new LedgerReconciler(s);
    // Traffic before the baseline does not count.
    r.ended("r1", "chat", 100, 100);
    r.observed(ep(), r.begin("r1"), { prompt: 500, completion: 900 });
    expect(r.view()[0]).toMatchObject({ state: "checked", engine_prompt_tokens: 0, drift_prompt_tokens: 0, since: 1_000 });
    r.ended("r1", "chat", 10, 20);
    r.ended("r1", "chat", 5, 7);
    s.advance(1_000);
    r.observed(ep(), r.begin("r1"), { prompt: 515, completion: 927 });
    expect(r.view()).toEqual([
      { replica: "r1", model: "chat", state: "checked", engine_prompt_tokens: 15, engine_completion_tokens: 27, ledger_prompt_tokens: 15, ledger_completion_tokens: 27, drift_prompt_tokens: 0, drift_completion_tokens: 0, since: 1_000, checked_at: 2_000, engine_restarts: 0 },
    ]);
    // The engine made 3 tokens the ledger never heard of.
    r.observed(ep(), r.begin("r1"), { prompt: 515, completion: 930 });
    expect(r.view()[0]).toMatchObject({ drift_prompt_tokens: 0, drift_completion_tokens: 3 });
    expect(r.render()).toContain('llmgw_ledger_drift_tokens{replica="r1",model="chat",kind="completion"} 3');
  });

  test("a sample with a request in flight, or one that ended during the poll, is not compared", () => {
    const r = new LedgerReconciler(new ManualScheduler(0));
    r.observed(ep(), r.begin("r1"), { prompt: 0, completion: 0 });
    // A request running: the engine has counted tokens the ledger will count at its end.
    r.observed(ep(1), r.begin("r1"), { prompt: 0, completion: 4 });
    expect(r.view()[0]).toMatchObject({ drift_completion_tokens: 0, engine_completion_tokens: 0 });
    // One ended between the poll's start and its answer: the answer may be from before its end.
    const begun = r.begin("r1");
    r.ended("r1", "chat", 3, 8);
    r.observed(ep(), begun, { prompt: 0, completion: 5 });
    expect(r.view()[0]).toMatchObject({ drift_completion_tokens: 0, ledger_completion_tokens: 0 });
    r.observed(ep(), r.begin("r1"), { prompt: 3, completion: 8 });
    expect(r.view()[0]).toMatchObject({ engine_completion_tokens: 8, ledger_completion_tokens: 8, drift_completion_tokens: 0 });
  });

  test("counters that go down are a restarted engine: a new baseline, counted", () => {
    const r = new LedgerReconciler(new ManualScheduler(0));
    r.observed(ep(), r.begin("r1"), { prompt: 50, completion: 50 });
    r.ended("r1", "chat", 1, 1);
    r.observed(ep(), r.begin("r1"), { prompt: 51, completion: 52 });
    expect(r.view()[0]).toMatchObject({ drift_completion_tokens: 1 });
    r.observed(ep(), r.begin("r1"), { prompt: 0, completion: 0 });
    expect(r.view()[0]).toMatchObject({ state: "checked", engine_restarts: 1, engine_completion_tokens: 0, drift_completion_tokens: 0 });
    r.ended("r1", "chat", 2, 2);
    r.observed(ep(), r.begin("r1"), { prompt: 2, completion: 2 });
    expect(r.view()[0]).toMatchObject({ engine_prompt_tokens: 2, ledger_prompt_tokens: 2, drift_prompt_tokens: 0 });
  });

  test("an engine without counters is unknown (no drift series), one not yet quiet is waiting, one gone is forgotten", () => {
    const r = new LedgerReconciler(new ManualScheduler(0));
    r.observed(ep(0, "a"), r.begin("a"), undefined);
    r.observed(ep(2, "b"), r.begin("b"), { prompt: 1, completion: 1 });
    expect(r.view().map((v) => [v.replica, v.state])).toEqual([
      ["a", "no_counters"],
      ["b", "waiting"],
    ]);
    expect(r.render()).not.toContain("llmgw_ledger_drift_tokens{");
    r.retain(new Set(["b"]));
    expect(r.view().map((v) => v.replica)).toEqual(["b"]);
  });

  test("the poller hands each answer's counters over, begun before its request and ended after it", async () => {
    const r = new LedgerReconciler(new ManualScheduler(0));
    let body = "vllm:prompt_tokens_total 4\nvllm:generation_tokens_total 9\nvllm:num_requests_running 0\n";
    const endpoint: MetricsEndpoint & { inflight: number; info: { models: string[]; engine: string } } = { id: "r1", url: "http://e", info: { engine: "vllm", models: ["chat"] }, inflight: 0 };
    const poller = new EngineMetricsPoller({
      endpoints: () => [endpoint],
      apply: () => {},
      fetch: (async () => new Response(body)) as unknown as typeof fetch,
      tokens: { begin: (e) => r.begin(e.id), end: (e, begun, t) => r.observed(e as typeof endpoint, begun, t) },
    });
    await poller.pollOnce();
    r.ended("r1", "chat", 1, 3);
    body = "vllm:prompt_tokens_total 5\nvllm:generation_tokens_total 12\n";
    await poller.pollOnce();
    expect(r.view()[0]).toMatchObject({ state: "checked", engine_prompt_tokens: 1, engine_completion_tokens: 3, drift_prompt_tokens: 0, drift_completion_tokens: 0 });
    body = "no_tokens_here 1\n";
    await poller.pollOnce();
    expect(r.view()[0]!.state).toBe("no_counters");
  });
});

describe("usage counters", () => {
  const row = (over: Partial<UsageRow>): UsageRow => ({ team: "t", key: "k", model: "m", hour: 0, requests: 0, prompt_tokens: 0, completion_tokens: 0, cached_tokens: 0, errors: 0, errors_4xx: 0, errors_5xx: 0, refused: 0, aborted: 0, gpu_seconds: 0, ...over });

  test("the ledger's rows, handed over or not, as counters per team, key name and model", () => {
    const s = new ManualScheduler(0);
    const ledger = new Ledger(s);
    ledger.setKeys([{ name: "svc", sha256: "ab".repeat(32), pool: null, team: "search" }]);
    const c = new UsageCounters(() => ledger.pending());
    ledger.answered("ab".repeat(32), "chat", 200, 10, 20, 4, false);
    ledger.answered("ab".repeat(32), "chat", 499, 0, 3, 0, true);
    ledger.refused("ab".repeat(32), "chat");
    c.taken(ledger.take());
    ledger.answered("ab".repeat(32), "chat", 503, 0, 0, 0, false);
    const text = c.render();
    const v = (series: string) => Number(text.split("\n").find((l) => l.startsWith(`${series} `))?.split(" ")[1]);
    const labels = 'team="search",key="svc",model="chat"';
    expect(v(`llmgw_usage_requests_total{${labels}}`)).toBe(4);
    expect(v(`llmgw_usage_tokens_total{${labels},kind="prompt"}`)).toBe(10);
    expect(v(`llmgw_usage_tokens_total{${labels},kind="completion"}`)).toBe(23);
    expect(v(`llmgw_usage_tokens_total{${labels},kind="cached"}`)).toBe(4);
    expect(v(`llmgw_usage_errors_total{${labels},kind="refused"}`)).toBe(1);
    expect(v(`llmgw_usage_errors_total{${labels},kind="5xx"}`)).toBe(1);
    expect(v(`llmgw_usage_aborted_total{${labels}}`)).toBe(1);
    expect(v(`llmgw_usage_gpu_seconds_total{${labels}}`)).toBe(0);
    expect(text).not.toContain("abab");
    // A scrape changes nothing: the same figures again, and the rows still there to take.
    expect(c.render()).toBe(text);
    expect(ledger.take().map((r) => r.requests)).toEqual([1]);
  });

  test("rows of several keys and hours add up under one series each", () => {
    const c = new UsageCounters(() => [row({ key: "b", requests: 1 })]);
    c.taken([row({ requests: 2, hour: 0 }), row({ requests: 3, hour: 3_600_000 })]);
    const text = c.render();
    expect(text).toContain('llmgw_usage_requests_total{team="t",key="k",model="m"} 5');
    expect(text).toContain('llmgw_usage_requests_total{team="t",key="b",model="m"} 1');
  });
});

describe("llmgw usage --check", () => {
  const drift = (over: Partial<ReplicaDrift>): ReplicaDrift => ({
    replica: "r-1",
    model: "chat",
    state: "checked",
    engine_prompt_tokens: 10,
    engine_completion_tokens: 20,
    ledger_prompt_tokens: 10,
    ledger_completion_tokens: 20,
    drift_prompt_tokens: 0,
    drift_completion_tokens: 0,
    since: 1,
    checked_at: 2,
    engine_restarts: 0,
    ...over,
  });
  async function shown(rows: ReplicaDrift[], format = "table"): Promise<{ code: number; out: string }> {
    const client = { get: async (path: string) => (path === "/api/v1/usage/check" ? rows : undefined) } as unknown as Client;
    let out = "";
    const write = process.stdout.write;
    process.stdout.write = ((s: string) => {
      out += s;
      return true;
    }) as typeof process.stdout.write;
    try {
      return { code: await usageCheck(client, format), out };
    } finally {
      process.stdout.write = write;
    }
  }

  test("no drift: exit 0; a drift on any replica: exit 1, shown; an engine without counters neither", async () => {
    const ok = await shown([drift({}), drift({ replica: "r-2", state: "no_counters" })]);
    expect(ok.code).toBe(0);
    expect(ok.out.split("\n")[0]!.split(/\s+/)).toEqual(["REPLICA", "MODEL", "STATE", "ENGINE", "LEDGER", "DRIFT"]);
    expect(ok.out).toContain("10/20");
    expect(ok.out).toMatch(/r-2\s+chat\s+no counters\s+-\s+-\s+-/);
    expect(ok.out).toContain("No drift");
    const bad = await shown([drift({}), drift({ replica: "r-2", engine_completion_tokens: 23, drift_completion_tokens: 3 })]);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain("0/3");
    expect(bad.out).toContain("Drift on 1 replica(s)");
    const json = await shown([drift({ drift_prompt_tokens: -2 })], "json");
    expect(json.code).toBe(1);
    expect(JSON.parse(json.out)[0].drift_prompt_tokens).toBe(-2);
  });

  test("the router thread's answer carries the check, validated by its schema", () => {
    const m = { type: "ledger_check", id: 3, replicas: [drift({})] };
    expect(FromRouter.safeParse(m).success).toBe(true);
    expect(FromRouter.safeParse({ ...m, replicas: [{ ...drift({}), state: "fine" }] }).success).toBe(false);
    expect(ToRouter.safeParse({ type: "ledger_check_request", id: 3 }).success).toBe(true);
  });
});
