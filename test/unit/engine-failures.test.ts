// The root cause of an engine's failure: each fixture under test/fixtures/engine-logs (real log shapes, sources in
// their headers) names its engine and the line that must lead the parked reason; the reason is that line after the
// "how", on one line: the cause said once (the last lines are the log's, for `llmgw logs --previous`).

import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { FATAL_PATTERNS, rootCause, stripLogPrefix, tellingLine, type FailureKind } from "../../src/agent/engine-failures";
import { failureReason } from "../../src/agent/runner";
import { stripFixtureHeader } from "../fixtures/read";
import { ReplicaReport, type Assignment } from "../../src/protocol/heartbeat";

type Engine = Assignment["engine"];
const DIR = join(import.meta.dir, "../fixtures/engine-logs");

type Fixture = { name: string; engine: Engine; expect: string | null; body: string };

function fixtures(): Fixture[] {
  const out: Fixture[] = [];
  for (const sub of readdirSync(DIR).sort()) {
    for (const file of readdirSync(join(DIR, sub)).sort()) {
      const path = join(DIR, sub, file);
      const text = readFileSync(path, "utf8");
      const header = text.slice(0, text.indexOf("\n# ---"));
      const engine = /^# ENGINE: (.+)$/m.exec(header)?.[1] as Engine | undefined;
      const expectLine = /^# EXPECT-CAUSE:(.*)$/m.exec(header)?.[1];
      if (!engine || expectLine === undefined) throw new Error(`${sub}/${file}: header lacks ENGINE or EXPECT-CAUSE`);
      expect(sub).toBe(engine);
      out.push({ name: `${sub}/${file}`, engine, expect: expectLine.trim() === "" ? null : expectLine.trim(), body: stripFixtureHeader(text, path) });
    }
  }
  return out;
}

const ALL = fixtures();

/** What today's reason quoted: the last 30 non-empty lines. */
function last30(body: string): string {
  return body
    .split("\n")
    .filter((l) => l.trim() !== "")
    .slice(-30)
    .join("\n");
}

describe("fixtures", () => {
  test("there is one for each engine's failures, each with its source named", () => {
    const engines = new Set(ALL.map((f) => f.engine));
    expect([...engines].sort()).toEqual(["fake", "llama.cpp", "sglang", "vllm"]);
    for (const f of ALL) expect([f.name, readFileSync(join(DIR, f.name), "utf8")]).toEqual([f.name, expect.stringMatching(/^# CONSTRUCTED .*(issue|PR|\.py|\.cpp|\.cu|\.ts)/s)]);
  });

  test("the vLLM 'root cause above' tail is over 8 KiB with its cause more than 30 lines from the end", () => {
    const f = ALL.find((x) => x.name === "vllm/root-cause-above-oom.log")!;
    expect(Buffer.byteLength(f.body)).toBeGreaterThan(8 * 1024);
    const lines = f.body.trimEnd().split("\n");
    expect(lines.at(-1)).toContain("Engine core initialization failed. See root cause above.");
    const lastCause = lines.findLastIndex((l) => l.includes("torch.OutOfMemoryError"));
    expect(lines.length - lastCause).toBeGreaterThan(30);
    // Which is why the last lines alone miss it.
    expect(last30(f.body)).not.toContain("OutOfMemoryError");
  });
});

describe("rootCause", () => {
  for (const f of ALL) {
    test(`${f.name}: ${f.expect === null ? "no known cause" : f.expect.slice(0, 60)}`, () => {
      expect(rootCause(f.engine, f.body)).toBe(f.expect);
    });
  }

  test("the fake engine knows vLLM's causes as well as its own", () => {
    const uuid = ALL.find((x) => x.name === "vllm/uuid-cuda-visible-devices.log")!;
    expect(rootCause("fake", uuid.body)).toBe(uuid.expect);
    expect(rootCause("fake", "RuntimeError: CUDA error: no kernel image is available for execution on the device")).toBe(
      "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    );
  });

  test("warnings that name a limit or 'CUDA errors' are not causes", () => {
    const warning =
      "(APIServer pid=1) WARNING 10-08 20:33:01 [config.py:1012] User-specified max_model_len (40960) is greater than the derived max_model_len (max_position_embeddings=32768 or model_max_length=None in model's config.json). This may lead to incorrect model outputs or CUDA errors.";
    expect(rootCause("vllm", warning)).toBeNull();
    expect(rootCause("sglang", "[2026-02-14 02:07:50] Warning: Target model's context_length (8192) is greater than the derived context_length (2048). This may lead to incorrect model outputs or CUDA errors.")).toBeNull();
    expect(rootCause("llama.cpp", "llama_context: n_ctx_per_seq (4096) < n_ctx_train (131072) -- the full capacity of the model will not be utilized")).toBeNull();
  });

  test("every engine has a pattern for each kind of failure", () => {
    const kinds: FailureKind[] = ["out of memory", "cache memory", "max model length", "model not found", "cuda", "arguments"];
    for (const engine of ["vllm", "sglang", "llama.cpp", "fake"] as const) {
      const have = new Set(FATAL_PATTERNS[engine].map((p) => p.kind));
      for (const k of kinds) expect([engine, k, have.has(k)]).toEqual([engine, k, true]);
    }
    expect(FATAL_PATTERNS.vllm.some((p) => p.kind === "gpu ids")).toBe(true);
  });

  test("the first matching line wins, through CRLF and colour codes", () => {
    const text = "\u001b[31mERROR 12-01 10:00:00 [core.py:700] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.\u001b[0m\r\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\r\n";
    expect(rootCause("vllm", text)).toBe("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.");
  });
});

describe("stripLogPrefix", () => {
  test.each([
    ["(EngineCore_0 pid=1234) ERROR 12-01 10:00:00 [core.py:700] ValueError: x", "ValueError: x"],
    ["(EngineCore_DP0 pid=18799) ERROR 10-08 20:33:48 [core.py:708] ValueError: x", "ValueError: x"],
    ["(APIServer pid=53)   Value error, User-specified max_model_len", "Value error, User-specified max_model_len"],
    ["(RayWorkerWrapper pid=11305, ip=10.1.0.7) ERROR 08-27 05:12:18 worker_base.py:382] RuntimeError: NCCL error: x", "RuntimeError: NCCL error: x"],
    ["(VllmWorker rank=1 pid=2445156) torch.distributed.DistBackendError: NCCL error in: x", "torch.distributed.DistBackendError: NCCL error in: x"],
    ["ERROR 12-01 10:03:40 engine.py:400] The model's max seq len", "The model's max seq len"],
    ["INFO 12-01 10:00:01 [__init__.py:244] Automatically detected platform cuda.", "Automatically detected platform cuda."],
    ["[rank0]: torch.OutOfMemoryError: CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory."],
    ["[2025-03-17 17:15:55 TP1] Scheduler hit an exception: Traceback", "Scheduler hit an exception: Traceback"],
    ["[2025-03-12 10:00:02] Rank 0 scheduler is dead.", "Rank 0 scheduler is dead."],
    ["[12-16 14:27:08] Rank 0 scheduler is dead.", "Rank 0 scheduler is dead."],
    ["0.01.401.902 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating", "ggml_backend_cuda_buffer_type_alloc_buffer: allocating"],
    ["srv    load_model: failed to load model, '/m.gguf'", "srv    load_model: failed to load model, '/m.gguf'"],
    ["ValueError: (EngineCore_0 pid=1) stays", "ValueError: (EngineCore_0 pid=1) stays"],
  ])("%s", (line, want) => {
    expect(stripLogPrefix(line)).toBe(want);
  });
});

describe("failureReason", () => {
  /** What holds for every reason: printable, one line, within the protocol's limit, the cause in it once. */
  function expectOnce(reason: string, cause: string) {
    expect(ReplicaReport.shape.error.safeParse(reason).success).toBe(true);
    expect(reason.length).toBeLessThanOrEqual(8192);
    expect(reason).not.toContain("\n");
    expect(reason).not.toContain("last lines");
    expect(reason.split(cause).length - 1).toBe(1);
  }
  const withCause = ALL.filter((f) => f.expect !== null);
  const withoutCause = ALL.filter((f) => f.expect === null);

  test("the fixtures include logs with a known cause and logs without one", () => {
    expect(withCause.length).toBeGreaterThan(0);
    expect(withoutCause.length).toBeGreaterThan(0);
  });

  for (const f of withCause) {
    test(`${f.name}: how it ended and the cause, once, on one line`, () => {
      const reason = failureReason("exited with code 1", f.engine, f.body);
      expect(reason).toBe(`exited with code 1: ${f.expect}`);
      expectOnce(reason, f.expect!);
    });
  }

  for (const f of withoutCause) {
    test(`${f.name}: no known cause, so how it ended and the line that tells most`, () => {
      const reason = failureReason("exited with code 1", f.engine, f.body);
      expect(reason).toBe(`exited with code 1: ${tellingLine(f.body)}`);
      expectOnce(reason, tellingLine(f.body)!);
    });
  }

  test("the fake engine's LLMGW_FAKE_FAIL line, which is also its last: said once (it read 'X last lines: X')", () => {
    const line = "RuntimeError: CUDA error: no kernel image is available for execution on the device";
    expect(failureReason("exited with code 1", "fake", `${line}\n`)).toBe(`exited with code 1: ${line}`);
  });

  test("a huge cause line still fits, its start kept", () => {
    const cause = `torch.OutOfMemoryError: CUDA out of memory. ${"x".repeat(20_000)}`;
    const tail = `${cause}\n${Array.from({ length: 40 }, (_, i) => `line ${i} ${"y".repeat(400)}`).join("\n")}\nthe end`;
    const reason = failureReason("exited with code 1", "vllm", tail);
    expect(reason.length).toBeLessThanOrEqual(2100);
    expect(reason).toStartWith("exited with code 1: torch.OutOfMemoryError: CUDA out of memory. xxx");
    expect(reason).toEndWith("x…");
  });

  test("no output: the how alone", () => {
    expect(failureReason("killed by signal SIGKILL", "vllm", "")).toBe("killed by signal SIGKILL");
  });
});

describe("tellingLine", () => {
  test("a Python exception no pattern knows: its exception line, not the warning or the shutdown chatter after it", () => {
    const log = [
      "INFO 12-01 10:00:01 [__init__.py:244] Automatically detected platform cuda.",
      "Traceback (most recent call last):",
      '  File "/usr/lib/python3/dist-packages/vllm/entrypoints/openai/api_server.py", line 1, in <module>',
      "    raise ValueError(\"the error text\")",
      "ValueError: tokenizer_config.json has an unknown chat template",
      "INFO 12-01 10:00:05 [launcher.py:80] Shutting down.",
      "/usr/lib/python3.12/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown",
    ].join("\n");
    expect(tellingLine(log)).toBe("ValueError: tokenizer_config.json has an unknown chat template");
  });
  test("nothing that reads as an error: the last line; colours and log prefixes stripped", () => {
    expect(tellingLine("loading 10%\n\u001b[32mINFO 12-01 10:00:01 [x.py:1] loading 90%\u001b[0m\n\n")).toBe("loading 90%");
    expect(tellingLine("llmgw fake-engine listening on http://127.0.0.1:8101\nSegmentation fault (core dumped)\n")).toBe("Segmentation fault (core dumped)");
    expect(tellingLine("")).toBeNull();
  });
});
