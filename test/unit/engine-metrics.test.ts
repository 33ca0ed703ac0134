// Tests of the router's engine-metrics reader: the Prometheus parser on its edge cases, load
// figures read off real vLLM / SGLang / llama.cpp expositions (numbers checked by eye against the
// fixtures), the fake engine under load, and the poller against real servers on 127.0.0.1.
// The poller's rounds and timeouts run on a ManualScheduler; what is still waited for in real
// time (with until()) is a real server's answer on a real socket.

import { afterAll, describe, expect, test } from "bun:test";
import type { Server } from "bun";
import type { Logger } from "pino";
import {
  type EngineLoad,
  type EngineMetricsLog,
  EngineMetricsPoller,
  type MetricsEndpoint,
  PrometheusParseError,
  parsePrometheus,
  readEngineLoad,
  UNKNOWN_LOAD,
} from "../../src/router/engine-metrics";
import { createLogger } from "../../src/log";
import { ManualScheduler } from "../../src/lib/scheduler";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { readFixture } from "../fixtures/read";
import { until } from "../helpers/until";

const VLLM = readFixture("metrics/vllm/datadog-vllm_metrics.prom");
const SGLANG = readFixture("metrics/sglang/datadog-sglang_metrics.prom");
const SGLANG_DP_TP = readFixture("metrics/sglang/sglang-all-schedulers-dp2-tp2__constructed.prom");
const SGLANG_DPA_TP_ONLY = readFixture("metrics/sglang/sglang-dp-attention-dp2-tp4-tp-rank-only__constructed.prom");
const SGLANG_DP_NO_RANKS = readFixture("metrics/sglang/sglang-dp2-tp2-no-rank-labels__constructed.prom");
const LLAMA_LEGACY = readFixture("metrics/llamacpp/llama-server-metrics-legacy-with-kvcache.prom");
const LLAMA_BEFORE = readFixture("metrics/llamacpp/llama-server-metrics-pr11512-before.prom");
const LLAMA_AFTER = readFixture("metrics/llamacpp/llama-server-metrics-pr11512-after.prom");

// A pino logger must fit where the poller wants a log (checked by tsc, not at run time).
const _pinoFits = (l: Logger): EngineMetricsLog => l;
void _pinoFits;

describe("parsePrometheus", () => {
  test("labels with escaped quotes, backslashes, newlines, commas, braces and hashes", () => {
    const text = String.raw`m{a="x\"y",b="c,d",c="back\\slash",d="line\nbreak",e="}{#",f=""} 1`;
    const [s] = parsePrometheus(text);
    expect(s!.name).toBe("m");
    expect({ ...s!.labels }).toEqual({ a: 'x"y', b: "c,d", c: "back\\slash", d: "line\nbreak", e: "}{#", f: "" });
    expect(s!.value).toBe(1);
    expect(s!.timestamp).toBeUndefined();
  });

  test("an unknown escape is kept as written", () => {
    const [s] = parsePrometheus(String.raw`m{path="C:\temp"} 1`);
    expect(s!.labels.path).toBe(String.raw`C:\temp`);
  });

  test("NaN, infinities, exponents and timestamps", () => {
    const samples = parsePrometheus(
      ["a NaN", "b +Inf", "c -Inf", "d 6.634254336e+09", "e 1.5 1712345678901", "f -0.5 -12", "g .5", 'h{le="+Inf"} 3'].join("\n"),
    );
    const v = Object.fromEntries(samples.map((s) => [s.name, s.value]));
    expect(v.a).toBeNaN();
    expect(v.b).toBe(Infinity);
    expect(v.c).toBe(-Infinity);
    expect(v.d).toBe(6634254336);
    expect(v.e).toBe(1.5);
    expect(v.f).toBe(-0.5);
    expect(v.g).toBe(0.5);
    expect(samples[4]!.timestamp).toBe(1712345678901);
    expect(samples[5]!.timestamp).toBe(-12);
    expect(samples[7]!.labels.le).toBe("+Inf");
  });

  test("comments, HELP/TYPE with odd text, blank lines, CRLF, tabs, no trailing newline", () => {
    const text =
      '# HELP m A {weird} "help" text, with \\ backslash\r\n# TYPE m gauge\r\n\r\n   \r\n# just a comment\r\n' +
      'm{a="1"}\t2\r\n\tn 3\r\n# EOF\r\no{b="x"} 4';
    const samples = parsePrometheus(text);
    expect(samples.map((s) => [s.name, s.value])).toEqual([
      ["m", 2],
      ["n", 3],
      ["o", 4],
    ]);
    expect(samples[2]!.labels.b).toBe("x");
  });

  test("empty and trailing-comma label sets, spaces inside braces, exemplars", () => {
    const samples = parsePrometheus('a{} 1\nb{x="1",} 2\nc{ x = "1" , y="2" } 3\nd_bucket{le="1"} 4 # {trace_id="abc"} 0.5 1.0\ne 5 100 # {t="z"} 1');
    expect(samples.map((s) => s.value)).toEqual([1, 2, 3, 4, 5]);
    expect({ ...samples[2]!.labels }).toEqual({ x: "1", y: "2" });
    expect(samples[3]!.timestamp).toBeUndefined();
    expect(samples[4]!.timestamp).toBe(100);
  });

  test("label names cannot reach Object.prototype", () => {
    const [s] = parsePrometheus('m{__proto__="x",constructor="y"} 1');
    const labels: Record<string, string> = s!.labels;
    expect(labels["__proto__"]).toBe("x");
    expect(labels["constructor"]).toBe("y");
    expect(Object.keys(labels)).toEqual(["__proto__", "constructor"]);
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  test.each([
    ['m{a="unterminated} 1', "unterminated value of label a"],
    ["m notanumber", "bad value"],
    ["m{a=1} 2", "quoted value expected"],
    ['m{a="1" b="2"} 3', '"," or "}" expected'],
    ["m 1 2 3", "unexpected text after the timestamp"],
    ["m 1 1.5", "bad timestamp"],
    ["9metric 1", "metric name expected"],
    ['m{a="1",a="2"} 3', "label a repeated"],
    ["m", "value expected"],
    ['m{a="1"', "unterminated label set"],
    ["<html><body>nope</body></html>", "metric name expected"],
  ])("rejects %p", (line, reason) => {
    let err: unknown;
    try {
      parsePrometheus(`# HELP m x\nok 1\n${line}\n`);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PrometheusParseError);
    expect((err as PrometheusParseError).line).toBe(3);
    expect((err as PrometheusParseError).message).toContain(reason);
  });

  test("`only` skips other metrics before parsing them, malformed ones included", () => {
    const samples = parsePrometheus('junk{{{ 1\nwanted{a="b"} 2\nother x y z\n', (n) => n === "wanted");
    expect(samples).toHaveLength(1);
    expect(samples[0]!.value).toBe(2);
  });

  test("parses every real fixture whole, sample counts matching their non-comment lines", () => {
    expect(parsePrometheus(VLLM)).toHaveLength(185);
    expect(parsePrometheus(SGLANG)).toHaveLength(43);
    expect(parsePrometheus(LLAMA_LEGACY)).toHaveLength(10);
    expect(parsePrometheus(LLAMA_BEFORE)).toHaveLength(2);
    expect(parsePrometheus(LLAMA_AFTER)).toHaveLength(2);
  });

  test("values and labels read off the vLLM fixture by eye", () => {
    const samples = parsePrometheus(VLLM);
    const find = (name: string) => samples.find((s) => s.name === name)!;
    expect(find("process_virtual_memory_bytes").value).toBe(6634254336);
    expect(find("process_max_fds").value).toBe(1048576);
    expect(find("process_cpu_seconds_total").value).toBe(10.950000000000001);
    expect({ ...find("python_info").labels }).toEqual({
      implementation: "CPython",
      major: "3",
      minor: "10",
      patchlevel: "12",
      version: "3.10.12",
    });
    expect(find("vllm:cache_config_info").labels.num_gpu_blocks).toBe("7281");
    const ttftInf = samples.find((s) => s.name === "vllm:time_to_first_token_seconds_bucket" && s.labels.le === "+Inf")!;
    expect(ttftInf.value).toBe(1);
    expect(ttftInf.labels.model_name).toBe("facebook/opt-125m");
    expect(samples.filter((s) => s.name === "vllm:engine_sleep_state").map((s) => [s.labels.sleep_state, s.value])).toEqual([
      ["awake", 1],
      ["weights_offloaded", 0],
      ["discard_all", 0],
    ]);
  });
});

describe("readEngineLoad on real expositions", () => {
  test("vLLM (DataDog fixture, v0 and v1 names mixed): idle, KV 0", () => {
    // vllm:num_requests_running 0.0, vllm:num_requests_waiting 0.0, kv_cache_usage_perc 0.0 (gpu_cache_usage_perc 0.0).
    expect(readEngineLoad(VLLM, "vllm")).toEqual({ running: 0, waiting: 0, kvUsage: 0 });
    expect(readEngineLoad(VLLM)).toEqual({ running: 0, waiting: 0, kvUsage: 0 });
  });

  test("SGLang v0.5.10 (DataDog fixture): idle, token_usage 0.25", () => {
    // sglang:num_running_reqs 0, sglang:num_queue_reqs 0, sglang:token_usage 0.25.
    expect(readEngineLoad(SGLANG, "sglang")).toEqual({ running: 0, waiting: 0, kvUsage: 0.25 });
  });

  test("llama.cpp before #13660: kv_cache_usage_ratio 0.491063", () => {
    expect(readEngineLoad(LLAMA_LEGACY, "llama.cpp")).toEqual({ running: 0, waiting: 0, kvUsage: 0.491063 });
  });

  test("llama.cpp around #11512 (HELP text changed, names did not): no KV figure", () => {
    expect(readEngineLoad(LLAMA_BEFORE, "llama.cpp")).toEqual({ running: 0, waiting: 0, kvUsage: -1 });
    expect(readEngineLoad(LLAMA_AFTER, "llama.cpp")).toEqual({ running: 0, waiting: 0, kvUsage: -1 });
  });

  test("the engine is recognised by metric names, whatever the hint says", () => {
    expect(readEngineLoad(SGLANG, "vllm")).toEqual({ running: 0, waiting: 0, kvUsage: 0.25 });
    expect(readEngineLoad(LLAMA_LEGACY, "sglang").kvUsage).toBe(0.491063);
    expect(readEngineLoad(LLAMA_LEGACY, "something-else").kvUsage).toBe(0.491063);
    expect(readEngineLoad(SGLANG).kvUsage).toBe(0.25);
  });

  test("busy vLLM: the fixture with its gauges set, and a second model_name label set", () => {
    const busy = VLLM.replace('vllm:num_requests_running{model_name="facebook/opt-125m"} 0.0', 'vllm:num_requests_running{model_name="facebook/opt-125m"} 3.0\nvllm:num_requests_running{model_name="other"} 2.0')
      .replace('vllm:num_requests_waiting{model_name="facebook/opt-125m"} 0.0', 'vllm:num_requests_waiting{model_name="facebook/opt-125m"} 7.0\nvllm:num_requests_waiting{model_name="other"} 1.0')
      .replace('vllm:kv_cache_usage_perc{model_name="facebook/opt-125m"} 0.0', 'vllm:kv_cache_usage_perc{model_name="facebook/opt-125m"} 0.625\nvllm:kv_cache_usage_perc{model_name="other"} 0.25')
      .replace('vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.0', 'vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.9');
    expect(busy).not.toBe(VLLM);
    // Counts add up; KV is the fullest pool; the v1 kv_cache_usage_perc wins over v0's gpu_cache_usage_perc.
    expect(readEngineLoad(busy, "vllm")).toEqual({ running: 5, waiting: 8, kvUsage: 0.625 });
  });

  test("busy SGLang with data-parallel ranks", () => {
    const busy = SGLANG.replace('sglang:num_running_reqs{model_name="facebook/opt-125m",tp_rank="0"} 0', 'sglang:num_running_reqs{model_name="facebook/opt-125m",tp_rank="0",dp_rank="0"} 12\nsglang:num_running_reqs{model_name="facebook/opt-125m",tp_rank="4",dp_rank="1"} 9')
      .replace('sglang:num_queue_reqs{model_name="facebook/opt-125m",tp_rank="0"} 0', 'sglang:num_queue_reqs{model_name="facebook/opt-125m",tp_rank="0"} 4\nsglang:num_grammar_queue_reqs{model_name="facebook/opt-125m",tp_rank="0"} 1');
    expect(readEngineLoad(busy, "sglang")).toEqual({ running: 21, waiting: 5, kvUsage: 0.25 });
  });
});

describe("SGLang with --enable-metrics-for-all-schedulers", () => {
  test("TP ranks of one data-parallel group count once; data-parallel groups add up", () => {
    // Summed over every line it would read 14 running and 8 waiting: the load doubled.
    expect(readEngineLoad(SGLANG_DP_TP, "sglang")).toEqual({ running: 7, waiting: 4, kvUsage: 0.5 });
  });

  test("tensor parallel only: four ranks saying the same queue are one queue", () => {
    const ranks = [0, 1, 2, 3].map((r) => `sglang:num_queue_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="${r}"} 6`);
    const running = [0, 1, 2, 3].map((r) => `sglang:num_running_reqs{engine_type="unified",model_name="m",moe_ep_rank="${r}",pp_rank="0",tp_rank="${r}"} 9`);
    expect(readEngineLoad([...ranks, ...running].join("\n"), "sglang")).toMatchObject({ running: 9, waiting: 6 });
  });

  test("one rank lagging: the group takes its fullest rank, not the sum", () => {
    const text = 'sglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="0"} 4\nsglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="1"} 3\nsglang:num_queue_reqs{dp_rank="1",model_name="m",tp_rank="0"} 2';
    expect(readEngineLoad(text, "sglang").waiting).toBe(6);
  });
});

describe("SGLang with data parallelism, the replica's layout known (engine-layout.ts)", () => {
  const dpAttention = { dp: 2, tp: 4, dp_attention: true };
  const plainDp = { dp: 2, tp: 2, dp_attention: false };

  test("DP attention, series told apart by tp_rank alone: one rank per DP group (tp_rank ÷ tp/dp), the groups added up", () => {
    // tp_rank 0 and 1 are group 0 (5 running, 3 + 1 waiting), 2 and 3 group 1 (2 running, 1 waiting).
    expect(readEngineLoad(SGLANG_DPA_TP_ONLY, "sglang", dpAttention)).toEqual({ running: 7, waiting: 5, kvUsage: 0.5 });
    // Unknown layout: the ranks read as mirrors of one group, so half the load.
    expect(readEngineLoad(SGLANG_DPA_TP_ONLY, "sglang")).toEqual({ running: 5, waiting: 4, kvUsage: 0.5 });
  });

  test("DP attention by default: only each group's attention-TP rank 0 reports (tp_rank 0 and 2)", () => {
    const leaders = SGLANG_DPA_TP_ONLY.split("\n").filter((l) => !/tp_rank="[13]"/.test(l)).join("\n");
    expect(readEngineLoad(leaders, "sglang", dpAttention)).toEqual({ running: 7, waiting: 5, kvUsage: 0.5 });
    // Four groups of one rank each (tp 4, dp 4): every tp_rank is its own group.
    expect(readEngineLoad(SGLANG_DPA_TP_ONLY, "sglang", { dp: 4, tp: 4, dp_attention: true })).toMatchObject({ running: 14, waiting: 10 });
  });

  test("with dp_rank labels the layout changes nothing: the labels already tell the groups apart", () => {
    expect(readEngineLoad(SGLANG_DP_TP, "sglang", plainDp)).toEqual({ running: 7, waiting: 4, kvUsage: 0.5 });
    expect(readEngineLoad(SGLANG_DP_TP, "sglang", { dp: 2, tp: 2, dp_attention: true })).toEqual({ running: 7, waiting: 4, kvUsage: 0.5 });
  });

  test("no rank labels (before SGLang PR #7597): the groups' series collapse into one, which stands for each of them", () => {
    expect(readEngineLoad(SGLANG_DP_NO_RANKS, "sglang", plainDp)).toEqual({ running: 8, waiting: 4, kvUsage: 0.01 });
    expect(readEngineLoad(SGLANG_DP_NO_RANKS, "sglang")).toEqual({ running: 4, waiting: 2, kvUsage: 0.01 });
  });

  test("plain DP, series told apart by tp_rank alone (the real capture's label set): the groups collapse, so tp_rank 0 stands for each", () => {
    expect(readEngineLoad(SGLANG, "sglang", { dp: 2, tp: 1, dp_attention: false })).toEqual({ running: 0, waiting: 0, kvUsage: 0.25 });
    const busy = SGLANG.replace('sglang:num_running_reqs{model_name="facebook/opt-125m",tp_rank="0"} 0', 'sglang:num_running_reqs{model_name="facebook/opt-125m",tp_rank="0"} 3')
      .replace('sglang:num_queue_reqs{model_name="facebook/opt-125m",tp_rank="0"} 0', 'sglang:num_queue_reqs{model_name="facebook/opt-125m",tp_rank="0"} 2\nsglang:num_queue_reqs{model_name="facebook/opt-125m",tp_rank="1"} 2');
    expect(readEngineLoad(busy, "sglang", { dp: 3, tp: 2, dp_attention: false })).toEqual({ running: 9, waiting: 6, kvUsage: 0.25 });
  });

  test("a multi-node leader reports its own node's groups only: those seen stand for the rest", () => {
    const text = 'sglang:num_queue_reqs{dp_rank="0",model_name="m",tp_rank="0"} 4\nsglang:num_queue_reqs{dp_rank="1",model_name="m",tp_rank="4"} 2';
    expect(readEngineLoad(text, "sglang", { dp: 4, tp: 16, dp_attention: true }).waiting).toBe(12);
    // As many groups as the replica has: a plain sum.
    expect(readEngineLoad(text, "sglang", { dp: 2, tp: 8, dp_attention: true }).waiting).toBe(6);
  });

  test("a tp_rank that names no group (not a number, or tp not a multiple of dp) is read as one group of unknown rank", () => {
    const text = 'sglang:num_running_reqs{model_name="m",tp_rank="x"} 3\nsglang:num_running_reqs{model_name="m",tp_rank="1"} 2';
    expect(readEngineLoad(text, "sglang", { dp: 2, tp: 4, dp_attention: true }).running).toBe(5);
    expect(readEngineLoad(text, "sglang", { dp: 3, tp: 4, dp_attention: true }).running).toBe(9);
  });

  test("the layout is SGLang's: another engine's exposition reads as without it", () => {
    expect(readEngineLoad(VLLM, "vllm", plainDp)).toEqual(readEngineLoad(VLLM, "vllm"));
  });
});

describe("readEngineLoad on synthetic cases", () => {
  test("old vLLM: gpu_cache_usage_perc stands in for kv_cache_usage_perc", () => {
    const text = "vllm:num_requests_running{model_name=\"m\"} 4.0\nvllm:num_requests_waiting{model_name=\"m\"} 2.0\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n";
    expect(readEngineLoad(text)).toEqual({ running: 4, waiting: 2, kvUsage: 0.75 });
  });

  test("data-parallel vLLM: engine labels summed, KV the fullest", () => {
    const text = [
      'vllm:num_requests_running{engine="0",model_name="m"} 3',
      'vllm:num_requests_running{engine="1",model_name="m"} 4',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 0',
      'vllm:num_requests_waiting{engine="1",model_name="m"} 6',
      'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
      'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.95',
    ].join("\n");
    expect(readEngineLoad(text, "vllm")).toEqual({ running: 7, waiting: 6, kvUsage: 0.95 });
  });

  test("metrics missing one by one are -1, not 0", () => {
    expect(readEngineLoad("vllm:num_requests_running 2\n")).toEqual({ running: 2, waiting: -1, kvUsage: -1 });
    expect(readEngineLoad("sglang:token_usage 0.5")).toEqual({ running: -1, waiting: -1, kvUsage: 0.5 });
  });

  test("NaN, negative and infinite values count as absent", () => {
    const text = "vllm:num_requests_running NaN\nvllm:num_requests_waiting -1\nvllm:kv_cache_usage_perc +Inf\n";
    expect(readEngineLoad(text)).toEqual({ running: -1, waiting: -1, kvUsage: -1 });
    // A new-name KV gauge with no usable sample lets the old name answer.
    expect(readEngineLoad("vllm:num_requests_running 1\nvllm:kv_cache_usage_perc NaN\nvllm:gpu_cache_usage_perc 0.4")).toEqual({ running: 1, waiting: -1, kvUsage: 0.4 });
  });

  test("nothing recognisable is unknown", () => {
    expect(readEngineLoad("")).toEqual({ ...UNKNOWN_LOAD });
    expect(readEngineLoad("<html><body>502 Bad Gateway</body></html>")).toEqual({ ...UNKNOWN_LOAD });
    expect(readEngineLoad('{"error":"not found"}', "vllm")).toEqual({ ...UNKNOWN_LOAD });
    expect(readEngineLoad("process_open_fds 49.0\n# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n")).toEqual({ ...UNKNOWN_LOAD });
  });

  test("names are matched whole, and malformed lines of wanted metrics are ignored", () => {
    const text = [
      "vllm:num_requests_running_total 99",
      "vllm:num_requests_runningx 99",
      'vllm:num_requests_running{model_name="broken} 50',
      'vllm:num_requests_running{model_name="ok"} 2 1712345678901',
      "vllm:num_requests_waiting garbage",
      "  vllm:num_requests_waiting 3",
      "total junk {{{",
    ].join("\r\n");
    expect(readEngineLoad(text)).toEqual({ running: 2, waiting: 3, kvUsage: -1 });
  });

  test("several engines in one text: the hint breaks the tie, else vLLM, SGLang, llama.cpp in that order", () => {
    const text = "llamacpp:requests_processing 1\nsglang:num_running_reqs 2\nvllm:num_requests_running 3\n";
    expect(readEngineLoad(text, "llama.cpp").running).toBe(1);
    expect(readEngineLoad(text, "sglang").running).toBe(2);
    expect(readEngineLoad(text, "vllm").running).toBe(3);
    expect(readEngineLoad(text).running).toBe(3);
    expect(readEngineLoad("llamacpp:requests_processing 1\nsglang:num_running_reqs 2\n").running).toBe(2);
  });
});

describe("the fake engine's /metrics", () => {
  let engine: FakeEngine | undefined;
  afterAll(async () => {
    await engine?.stop();
  });

  test("reads as running / waiting / KV under load, directly and through the poller", async () => {
    engine = await startFakeEngine({ models: ["fake-model"], slots: 2, ttftMs: 60_000 });
    const idle = readEngineLoad(await (await fetch(`${engine.url}/metrics`)).text(), "fake");
    expect(idle).toEqual({ running: 0, waiting: 0, kvUsage: 0 });

    const abort = new AbortController();
    const pending = Array.from({ length: 5 }, () =>
      fetch(`${engine!.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "fake-model", stream: true, messages: [{ role: "user", content: "hi" }] }),
        signal: abort.signal,
      }).catch(() => undefined),
    );
    // Real requests to a real engine: their arrival is waited for.
    await until("2 running and 3 waiting", () => engine!.stats().running === 2 && engine!.stats().waiting === 3);

    const load = readEngineLoad(await (await fetch(`${engine.url}/metrics`)).text(), "fake");
    expect(load).toEqual({ running: 2, waiting: 3, kvUsage: 1 });

    const applied: [string, EngineLoad][] = [];
    const poller = new EngineMetricsPoller({
      endpoints: () => [{ id: "r1", url: engine!.url, info: { engine: "fake" } }],
      apply: (id, l) => applied.push([id, l]),
    });
    await poller.pollOnce();
    expect(applied).toEqual([["r1", { running: 2, waiting: 3, kvUsage: 1 }]]);

    abort.abort();
    await Promise.all(pending);
    await until("the engine to drain", () => engine!.stats().running === 0 && engine!.stats().waiting === 0);
    await poller.pollOnce();
    expect(applied[1]).toEqual(["r1", { running: 0, waiting: 0, kvUsage: 0 }]);
  });
});

describe("EngineMetricsPoller against real servers", () => {
  const servers: Server<undefined>[] = [];
  const hanging: (() => void)[] = [];
  afterAll(async () => {
    for (const release of hanging) release();
    await Promise.all(servers.map((s) => s.stop(true)));
  });

  /** A real server; `hits` holds when each request arrived, read off `at` (a test's scheduler). */
  function serve(fetchFn: (req: Request) => Response | Promise<Response>, at: () => number = () => 0): { url: string; hits: number[] } {
    const hits: number[] = [];
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      fetch: (req) => {
        hits.push(at());
        return fetchFn(req);
      },
    });
    servers.push(server);
    return { url: `http://127.0.0.1:${server.port}`, hits };
  }

  /** A handler that never answers (until the test ends). */
  const hang = (): Promise<Response> =>
    new Promise<Response>((resolve) => hanging.push(() => resolve(new Response("late"))));

  async function closedPortUrl(): Promise<string> {
    const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const url = `http://127.0.0.1:${s.port}`;
    await s.stop(true);
    return url;
  }

  interface LogLine {
    level: "debug" | "warn" | "info";
    fields: Record<string, unknown>;
    msg: string;
  }
  function recordingLog(): { log: EngineMetricsLog; lines: LogLine[] } {
    const lines: LogLine[] = [];
    const at = (level: LogLine["level"]) => (fields: object, msg: string) => lines.push({ level, fields: fields as Record<string, unknown>, msg });
    return { log: { debug: at("debug"), warn: at("warn"), info: at("info") }, lines };
  }

  test("healthy, 500, hanging, slow body, garbled and unreachable endpoints, one outage warning each", async () => {
    let failing = true;
    const healthy = serve(() => new Response(SGLANG, { headers: { "content-type": "text/plain; version=0.0.4" } }));
    const flaky = serve(() => (failing ? new Response("Internal Server Error", { status: 500 }) : new Response(LLAMA_LEGACY)));
    const hung = serve(hang);
    const slowBody = serve(
      () =>
        new Response(
          new ReadableStream<string>({
            // Headers and the first lines arrive at once, then the body stalls: the timeout must cover the body too.
            start: (c) => c.enqueue("vllm:num_requests_running 1\n"),
          }),
        ),
    );
    const garbled = serve(() => new Response("<html><body>hello</body></html>", { headers: { "content-type": "text/html" } }));
    const unreachable = await closedPortUrl();

    const endpoints: MetricsEndpoint[] = [
      { id: "healthy", url: `${healthy.url}/`, info: { engine: "sglang" } },
      { id: "flaky", url: flaky.url, info: { engine: "llama.cpp" } },
      { id: "hung", url: hung.url, info: { engine: "vllm" } },
      { id: "slow-body", url: slowBody.url, info: { engine: "vllm" } },
      { id: "garbled", url: garbled.url, info: { engine: "vllm" } },
      { id: "unreachable", url: unreachable, info: { engine: "vllm" } },
    ];
    const applied = new Map<string, EngineLoad>();
    let applies = 0;
    const { log, lines } = recordingLog();
    const s = new ManualScheduler();
    // Counts the slow body's heads, so a round's timeout is let fire only once its body is stalling.
    let slowHeads = 0;
    const fetchFn = (async (url: string, init?: RequestInit) => {
      const res = await fetch(url, init);
      if (url.startsWith(slowBody.url)) slowHeads++;
      return res;
    }) as typeof fetch;
    const timeoutMs = 150;
    const poller = new EngineMetricsPoller({
      endpoints: () => endpoints,
      apply: (id, l) => {
        applied.set(id, l);
        applies++;
      },
      timeoutMs,
      log,
      scheduler: s,
      fetch: fetchFn,
    });
    /**
     * One round: the four endpoints that answer at once do so over real sockets (waited for),
     * then the scheduler moves to the timeout, which ends the hanging and the stalled one.
     */
    const round = async (n: number) => {
      let done = false;
      const p = poller.pollOnce().then(() => (done = true));
      await until(`round ${n}'s prompt answers`, () => applies === 6 * (n - 1) + 4 && slowHeads === n);
      await s.run(timeoutMs - 1);
      expect(done).toBe(false);
      s.advance(1);
      // Concurrent: one timeout's worth ends the round, not one per slow endpoint.
      await p;
    };

    await round(1);

    expect(Object.fromEntries(applied)).toEqual({
      healthy: { running: 0, waiting: 0, kvUsage: 0.25 },
      flaky: { ...UNKNOWN_LOAD },
      hung: { ...UNKNOWN_LOAD },
      "slow-body": { ...UNKNOWN_LOAD },
      garbled: { ...UNKNOWN_LOAD },
      unreachable: { ...UNKNOWN_LOAD },
    });
    const warned = () => lines.filter((l) => l.level === "warn").map((l) => [l.fields.endpoint, l.fields.err]);
    expect(warned()).toHaveLength(5);
    const why = Object.fromEntries(warned());
    expect(why.flaky).toBe("HTTP 500");
    expect(why.hung).toBe("timed out");
    expect(why["slow-body"]).toBe("timed out");
    expect(why.garbled).toContain("no vLLM, SGLang or llama.cpp load metrics");
    expect(String(why.unreachable)).not.toBe("");
    expect(lines.filter((l) => l.level === "debug")).toHaveLength(5);
    expect(healthy.hits).toHaveLength(1);

    // Same outage: debug again, no second warning.
    await round(2);
    expect(warned()).toHaveLength(5);
    expect(lines.filter((l) => l.level === "debug")).toHaveLength(10);

    // Recovery is reported, and the next outage warns again.
    failing = false;
    await round(3);
    expect(applied.get("flaky")).toEqual({ running: 0, waiting: 0, kvUsage: 0.491063 });
    expect(lines.filter((l) => l.level === "info").map((l) => l.fields.endpoint)).toEqual(["flaky"]);
    failing = true;
    await round(4);
    expect(applied.get("flaky")).toEqual({ ...UNKNOWN_LOAD });
    expect(warned().filter(([id]) => id === "flaky")).toHaveLength(2);
    expect(warned()).toHaveLength(6);
  });

  test("rounds never overlap: a hanging endpoint gets one request per timeout, skipped ticks in between", async () => {
    const s = new ManualScheduler();
    const hung = serve(hang, () => s.mono());
    const healthy = serve(() => new Response("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n"));
    const applied: [string, EngineLoad][] = [];
    const count = (id: string) => applied.filter(([i]) => i === id).length;
    const timeoutMs = 120;
    const intervalMs = 10;
    const poller = new EngineMetricsPoller({
      endpoints: () => [
        { id: "hung", url: hung.url, info: { engine: "vllm" } },
        { id: "ok", url: healthy.url, info: { engine: "vllm" } },
      ],
      apply: (id, l) => applied.push([id, l]),
      intervalMs,
      timeoutMs,
      scheduler: s,
    });
    poller.start();
    poller.start(); // a second start must not add a second timer
    // The interval, and the first round's two request timeouts.
    expect(s.pending).toBe(3);
    for (let round = 1; round <= 3; round++) {
      // The requests travel over real sockets: their arrival and the healthy answer are waited for.
      await until(`round ${round}'s requests`, () => hung.hits.length === round && count("ok") === round);
      // Every tick up to the timeout finds the round still running and skips.
      s.advance(timeoutMs);
      await until(`round ${round}'s timeout`, () => count("hung") === round);
      if (round < 3) s.advance(intervalMs);
    }
    poller.stop();

    // One request per round, each a timeout (plus the tick that started it) after the last.
    expect(hung.hits).toEqual([0, 130, 260]);
    expect(healthy.hits).toHaveLength(3);
    expect(poller.skippedRounds).toBe(3 * (timeoutMs / intervalMs));
    for (const [id, l] of applied) expect(l).toEqual(id === "hung" ? { ...UNKNOWN_LOAD } : { running: 1, waiting: 0, kvUsage: -1 });
    expect(s.pending).toBe(0);
  });

  test("spread: a round's requests go out evenly over spreadMs, not in one burst; stop() cancels the steps not begun", async () => {
    const s = new ManualScheduler();
    const sent: number[] = [];
    const fetchFn = (async () => {
      sent.push(s.mono());
      return new Response("vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n");
    }) as unknown as typeof fetch;
    const endpoints = Array.from({ length: 100 }, (_, i) => ({ id: `e${i}`, url: `http://127.0.0.1:9/${i}`, info: { engine: "vllm" as const } }));
    const applied = new Set<string>();
    const poller = new EngineMetricsPoller({ endpoints: () => endpoints, apply: (id) => applied.add(id), intervalMs: 1000, spreadMs: 500, fetch: fetchFn, scheduler: s });
    const round = poller.pollOnce();
    // 50 steps of 10 ms, two endpoints each: the first step at once.
    expect(sent).toEqual([0, 0]);
    for (let t = 10; t <= 490; t += 10) s.advance(10);
    await round;
    expect(sent).toHaveLength(100);
    expect(applied.size).toBe(100);
    // No instant carries more than two; the last ones go out within the spread.
    const perInstant = new Map<number, number>();
    for (const t of sent) perInstant.set(t, (perInstant.get(t) ?? 0) + 1);
    expect(Math.max(...perInstant.values())).toBe(2);
    expect(Math.max(...sent)).toBe(490);
    // Stopped in the middle of a round: nothing more is sent, no timer is left.
    sent.length = 0;
    void poller.pollOnce();
    s.advance(100);
    expect(sent).toHaveLength(22);
    poller.stop();
    s.advance(1000);
    expect(sent).toHaveLength(22);
    expect(s.pending).toBe(0);
  });

  test("maxPerSecond: a round over more endpoints than the cap takes longer than the interval, and the ticks due meanwhile skip", async () => {
    const s = new ManualScheduler();
    const sent: number[] = [];
    const fetchFn = (async () => {
      sent.push(s.mono());
      return new Response("vllm:num_requests_running 0\n");
    }) as unknown as typeof fetch;
    const endpoints = Array.from({ length: 100 }, (_, i) => ({ id: `e${i}`, url: `http://127.0.0.1:9/${i}`, info: { engine: "vllm" as const } }));
    const poller = new EngineMetricsPoller({ endpoints: () => endpoints, apply: () => {}, intervalMs: 1000, maxPerSecond: 50, fetch: fetchFn, scheduler: s });
    poller.start();
    for (let t = 0; t < 2000; t += 10) {
      s.advance(10);
      await Promise.resolve();
    }
    poller.stop();
    // 100 endpoints at 50 a second: one round in 2 s, never more than 50 sent in any second.
    expect(sent.length).toBeGreaterThanOrEqual(99);
    expect(sent.filter((t) => t < 1000).length).toBeLessThanOrEqual(50);
    expect(poller.skippedRounds).toBeGreaterThanOrEqual(1);
  });

  test("pollOnce during a round joins it instead of starting another", async () => {
    const hung = serve(hang);
    const s = new ManualScheduler();
    const poller = new EngineMetricsPoller({
      endpoints: () => [{ id: "hung", url: hung.url, info: { engine: "vllm" } }],
      apply: () => {},
      timeoutMs: 80,
      scheduler: s,
    });
    const a = poller.pollOnce();
    const b = poller.pollOnce();
    expect(b).toBe(a);
    // Waited for: the request's arrival at a real server.
    await until("the first request", () => hung.hits.length === 1);
    s.advance(80);
    await a;
    expect(hung.hits).toHaveLength(1);
    // Once it is over, the next call is a new round.
    const c = poller.pollOnce();
    expect(c).not.toBe(a);
    await until("the second request", () => hung.hits.length === 2);
    s.advance(80);
    await c;
    expect(hung.hits).toHaveLength(2);
  });

  test("an endpoint with an engine key is polled with it as a bearer token; one without, with none", async () => {
    const seen = new Map<string, string | null>();
    const guarded = serve((req) => {
      const auth = req.headers.get("authorization");
      seen.set(new URL(req.url).searchParams.get("x") ?? "guarded", auth);
      // An engine started with --api-key may guard /metrics too.
      if (auth !== "Bearer replica-key-0123456789") return new Response("unauthorized", { status: 401 });
      return new Response("sglang:num_running_reqs 2\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n");
    });
    const open = serve((req) => {
      seen.set("open", req.headers.get("authorization"));
      return new Response("sglang:num_running_reqs 1\n");
    });
    const applied = new Map<string, EngineLoad>();
    const poller = new EngineMetricsPoller({
      endpoints: () => [
        { id: "guarded", url: guarded.url, info: { engine: "sglang", key: "replica-key-0123456789" } },
        { id: "open", url: open.url, info: { engine: "sglang" } },
      ],
      apply: (id, l) => applied.set(id, l),
    });
    await poller.pollOnce();
    expect(seen.get("guarded")).toBe("Bearer replica-key-0123456789");
    expect(seen.get("open")).toBeNull();
    expect(applied.get("guarded")).toEqual({ running: 2, waiting: 1, kvUsage: 0.5 });
  });

  test("stop() stops the timer and drops the round in flight", async () => {
    const healthy = serve(() => new Response("sglang:num_running_reqs 2\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n"));
    let applies = 0;
    const s = new ManualScheduler();
    const poller = new EngineMetricsPoller({
      endpoints: () => [{ id: "ok", url: healthy.url, info: { engine: "sglang" } }],
      apply: (_id, l) => {
        expect(l).toEqual({ running: 2, waiting: 1, kvUsage: 0.5 });
        applies++;
      },
      intervalMs: 15,
      scheduler: s,
    });
    poller.start();
    for (let round = 1; round <= 3; round++) {
      // Each round's answer comes over a real socket.
      await until(`round ${round}`, () => applies === round);
      if (round < 3) s.advance(15);
    }
    poller.stop();
    // Nothing in flight, no timer left: however long time runs on, nothing is asked or applied.
    expect(s.pending).toBe(0);
    s.advance(60_000);
    expect(healthy.hits).toHaveLength(3);
    expect(applies).toBe(3);

    // A round cut short by stop() resolves at once and applies nothing: its timeout never fires
    // here (the scheduler does not move), so only stop() can end it.
    const hung = serve(hang);
    const applied: string[] = [];
    const s2 = new ManualScheduler();
    const p2 = new EngineMetricsPoller({
      endpoints: () => [{ id: "hung", url: hung.url, info: { engine: "vllm" } }],
      apply: (id) => applied.push(id),
      timeoutMs: 10_000,
      scheduler: s2,
    });
    const round = p2.pollOnce();
    await until("the request to arrive", () => hung.hits.length === 1);
    p2.stop();
    await round;
    expect(applied).toEqual([]);
    expect(s2.pending).toBe(0);
  });

  test("works with the process's pino logger", async () => {
    let failing = true;
    const flaky = serve(() => (failing ? new Response("no", { status: 503 }) : new Response("vllm:num_requests_running 1\n")));
    const out: Record<string, unknown>[] = [];
    const logger = createLogger({ level: "debug", role: "test", destination: { write: (s: string) => void out.push(JSON.parse(s)) } });
    const poller = new EngineMetricsPoller({ endpoints: () => [{ id: "r", url: flaky.url, info: { engine: "vllm" } }], apply: () => {}, log: logger });
    await poller.pollOnce();
    failing = false;
    await poller.pollOnce();
    expect(out.map((l) => [l.level, l.endpoint, l.msg])).toEqual([
      [20, "r", "engine metrics unavailable; load unknown"],
      [40, "r", "engine metrics unavailable; routing this replica without load figures until they return"],
      [30, "r", "engine metrics readable again"],
    ]);
    expect(out[0]!.err).toBe("HTTP 503");
  });

  test("a throwing apply or endpoint list is logged, not thrown", async () => {
    const healthy = serve(() => new Response("vllm:num_requests_running 1\n"));
    const { log, lines } = recordingLog();
    const bad = new EngineMetricsPoller({
      endpoints: () => [{ id: "ok", url: healthy.url, info: { engine: "vllm" } }],
      apply: () => {
        throw new Error("table gone");
      },
      log,
    });
    await bad.pollOnce();
    const noList = new EngineMetricsPoller({
      endpoints: () => {
        throw new Error("no table yet");
      },
      apply: () => {},
      log,
    });
    await noList.pollOnce();
    expect(lines.filter((l) => l.level === "warn").map((l) => l.fields.err)).toEqual(["Error: table gone", "Error: no table yet"]);
  });

  test("rejects a non-positive interval or timeout", () => {
    const base = { endpoints: () => [], apply: () => {} };
    expect(() => new EngineMetricsPoller({ ...base, intervalMs: 0 })).toThrow("intervalMs must be a positive number");
    expect(() => new EngineMetricsPoller({ ...base, timeoutMs: -1 })).toThrow("timeoutMs must be a positive number");
  });
});
