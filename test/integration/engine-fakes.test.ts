// The contract fakes themselves (test/fakes): that each answers its version command, refuses an
// unknown flag, starts, serves and fails the way the real engine of its version does. The
// engine-by-version table that runs the agent's rendered commands against them is in
// real-engines.test.ts; this file pins the fakes that table relies on.

import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { discoverGpus } from "../../src/agent/gpus";
import { exitOf, FAKES, fakeBin, probe, readRecords, recordFile, runFake, spawnFake, stop, untilHealthy, type Running } from "../helpers/contract";
import { freePort } from "../helpers/ports";

const running: Running[] = [];
afterAll(async () => {
  for (const r of running) r.proc.kill("SIGKILL");
  await Promise.all(running.map((r) => r.proc.exited));
});
function start(...a: Parameters<typeof spawnFake>): Running {
  const r = spawnFake(...a);
  running.push(r);
  return r;
}
const UUID = "GPU-3c1f6e0a-7b2d-4e59-9a61-0d2f5b8c4e11";

describe("fixtures", () => {
  test("every engine fixture names the repository, ref and files its flag list comes from", () => {
    for (const f of ["vllm-0.10", "vllm-0.11", "vllm-0.12", "sglang-0.5", "llama-b6000", "llama-b8500"]) {
      const fx = JSON.parse(readFileSync(join(FAKES, "..", "fixtures", "engines", `${f}.json`), "utf8"));
      expect(fx.source.repo).toMatch(/^[\w-]+\/[\w.-]+$/);
      expect(fx.source.ref).toMatch(/^(v\d+\.\d+\.\d+|b\d+)$/);
      expect(fx.source.files.length).toBeGreaterThan(0);
      expect(Object.keys(fx.flags).length).toBeGreaterThan(20);
    }
  });
});

describe("version commands", () => {
  test("vllm --version prints the bare release on stdout", () => {
    expect(runFake("vllm-0.10", ["vllm", "--version"])).toEqual({ code: 0, stdout: "0.10.2\n", stderr: "" });
    expect(runFake("vllm-0.11", ["vllm", "--version"]).stdout).toBe("0.11.0\n");
    expect(runFake("vllm-0.12", ["vllm", "--version"]).stdout).toBe("0.12.0\n");
  });
  test("SGLang's __version__ one-liner", () => {
    expect(runFake("sglang-0.5", ["python3", "-c", "import sglang; print(sglang.__version__)"])).toEqual({ code: 0, stdout: "0.5.3\n", stderr: "" });
  });
  test("llama-server --version prints build and compiler on stderr", () => {
    const r = runFake("llama-b6000", ["llama-server", "--version"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^version: 6000 \([0-9a-f]+\)\nbuilt with .+ for x86_64-linux-gnu\n$/);
    expect(runFake("llama-b8500", ["llama-server", "--version"]).stderr).toStartWith("version: 8500 (");
  });
});

describe("argument parsing", () => {
  test("vLLM 0.10 and 0.11 refuse the mp multi-node flags the way argparse does; 0.12 takes them", () => {
    const argv = ["vllm", "serve", "/m", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29501", "--headless"];
    for (const v of ["vllm-0.10", "vllm-0.11"] as const) {
      const r = runFake(v, argv);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(
        "usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 --master-port 29501\n",
      );
    }
    // 0.12 parses them and goes on to load (a wrong CUDA_VISIBLE_DEVICES stops it right after).
    const r = runFake("vllm-0.12", argv, { CUDA_VISIBLE_DEVICES: UUID });
    expect(r.stderr).not.toContain("unrecognized arguments");
    expect(r.stderr).toContain("ValueError: invalid literal for int()");
  });
  test("vLLM takes --served-model-name as a list and BooleanOptionalAction twins", () => {
    const rec = recordFile();
    const r = runFake("vllm-0.10", ["vllm", "serve", "/m", "--served-model-name", "a", "b", "--no-enable-prefix-caching", "--bogus"], { LLMGW_CONTRACT_RECORD: rec });
    expect(r.stderr).toContain("vllm serve: error: unrecognized arguments: --bogus\n");
    expect(readRecords(rec)).toEqual([]);
  });
  test("SGLang refuses an unknown flag with argparse's message and exit 2", () => {
    const r = runFake("sglang-0.5", ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--served-model-name", "a", "--nnodes", "2", "--foo", "1"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toEndWith("launch_server.py: error: unrecognized arguments: --foo 1\n");
  });
  test("llama-server refuses an unknown option with common_params_parse's message and exit 1", () => {
    const r = runFake("llama-b6000", ["llama-server", "-m", "/m.gguf", "--tags", "x"]);
    expect(r).toEqual({ code: 1, stdout: "", stderr: "error: invalid argument: --tags\n" });
  });
});

describe("lifecycle", () => {
  test("vLLM refuses connections while loading, then /health 200, /v1 guarded by VLLM_API_KEY", async () => {
    const port = freePort();
    const rec = recordFile();
    const key = "k".repeat(32);
    const r = start("vllm-0.11", ["vllm", "serve", "/m", "--host", "127.0.0.1", "--port", String(port), "--served-model-name", "m", "m-alias"], { CUDA_VISIBLE_DEVICES: "0,1", VLLM_API_KEY: key }, { LLMGW_CONTRACT_RECORD: rec, LLMGW_CONTRACT_LOAD_MS: "600" });
    const seen = await untilHealthy(r, `http://127.0.0.1:${port}/health`);
    expect(seen[0]!.status).toBe("refused");
    expect(seen.some((p) => p.status === 503)).toBe(false);
    expect((await probe(`http://127.0.0.1:${port}/v1/models`)).status).toBe(401);
    const models = await probe(`http://127.0.0.1:${port}/v1/models`, key);
    expect(JSON.parse(models.body).data.map((d: { id: string }) => d.id)).toEqual(["m", "m-alias"]);
    const chat = await fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: JSON.stringify({ model: "m-alias", messages: [] }) });
    expect(chat.status).toBe(200);
    expect(readRecords(rec)[0]).toMatchObject({ engine: "vllm", version: "0.11.0", env: { CUDA_VISIBLE_DEVICES: "0,1", VLLM_API_KEY: key } });
    await stop(r);
  });
  test("vLLM --headless serves nothing and stays up", async () => {
    const port = freePort();
    const r = start("vllm-0.12", ["vllm", "serve", "/m", "--port", String(port), "--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1", "--headless"], { CUDA_VISIBLE_DEVICES: "0" }, { LLMGW_CONTRACT_LOAD_MS: "100" });
    // Real time: the fake's load (100 ms) is over, so a headless worker that was going to serve or die would have.
    await Bun.sleep(600);
    expect((await probe(`http://127.0.0.1:${port}/health`)).status).toBe("refused");
    expect(r.proc.exitCode).toBeNull();
    await stop(r);
  });
  test("llama-server answers 503 Loading model, then 200 ok", async () => {
    const port = freePort();
    const r = start("llama-b6000", ["llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", String(port), "--alias", "m,m-alias", "-ngl", "999", "--metrics"], {}, { LLMGW_CONTRACT_LOAD_MS: "800" });
    const seen = await untilHealthy(r, `http://127.0.0.1:${port}/health`);
    const loading = seen.find((p) => p.status === 503);
    expect(loading).toBeDefined();
    expect(JSON.parse(loading!.body)).toEqual({ error: { code: 503, message: "Loading model", type: "unavailable_error" } });
    expect(JSON.parse(seen.at(-1)!.body)).toEqual({ status: "ok" });
    // Before PR #19926 the whole --alias string is the one name.
    expect(JSON.parse((await probe(`http://127.0.0.1:${port}/v1/models`)).body).data.map((d: { id: string }) => d.id)).toEqual(["m,m-alias"]);
    await stop(r);
  });
  test("llama-server after PR #19926 splits --alias into a set whose first name is the id; LLAMA_API_KEY guards completions", async () => {
    const port = freePort();
    const key = "q".repeat(32);
    const r = start("llama-b8500", ["llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", String(port), "--alias", "m,a-alias"], { LLAMA_API_KEY: key });
    await untilHealthy(r, `http://127.0.0.1:${port}/health`);
    const m = JSON.parse((await probe(`http://127.0.0.1:${port}/v1/models`)).body).data[0];
    expect(m).toMatchObject({ id: "a-alias", aliases: ["a-alias", "m"] });
    const chat = (k?: string) => fetch(`http://127.0.0.1:${port}/v1/chat/completions`, { method: "POST", headers: k ? { authorization: `Bearer ${k}` } : {}, body: "{}" });
    expect((await chat()).status).toBe(401);
    expect((await chat(key)).status).toBe(200);
    await stop(r);
  });
  test("SGLang: refused while loading, 503 while warming up, a /health of at least a second; rank 1 serves /health", async () => {
    const port = freePort(2);
    const key = "s".repeat(32);
    const base = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--host", "127.0.0.1", "--served-model-name", "m", "--tp-size", "2", "--nnodes", "2", "--dist-init-addr", `127.0.0.1:${freePort(8)}`];
    const r0 = start("sglang-0.5", [...base, "--port", String(port), "--node-rank", "0", "--api-key", key], { CUDA_VISIBLE_DEVICES: UUID }, { LLMGW_CONTRACT_LOAD_MS: "600" });
    const r1 = start("sglang-0.5", [...base, "--port", String(port + 1), "--node-rank", "1"], { CUDA_VISIBLE_DEVICES: UUID });
    const seen = await untilHealthy(r0, `http://127.0.0.1:${port}/health`);
    expect(seen[0]!.status).toBe("refused");
    expect(seen.some((p) => p.status === 503)).toBe(true);
    expect(seen.at(-1)!.ms).toBeGreaterThanOrEqual(1000);
    // The key guards everything but /health and /metrics.
    expect((await probe(`http://127.0.0.1:${port}/v1/models`)).status).toBe(401);
    expect(JSON.parse((await probe(`http://127.0.0.1:${port}/v1/models`, key)).body).data[0].id).toBe("m");
    await untilHealthy(r1, `http://127.0.0.1:${port + 1}/health`);
    await Promise.all([stop(r0), stop(r1)]);
  });
});

describe("failures", () => {
  test("vLLM with UUIDs in CUDA_VISIBLE_DEVICES: the int() ValueError, exit 1", () => {
    for (const uuid of [UUID, "MIG-377e0049-554c-540b-93c6-d0976f8426cb"]) {
      const r = runFake("vllm-0.10", ["vllm", "serve", "/m"], { CUDA_VISIBLE_DEVICES: uuid });
      expect(r.code).toBe(1);
      expect(r.stderr.trimEnd().split("\n").at(-1)).toEndWith(`ValueError: invalid literal for int() with base 10: '${uuid}'`);
    }
  });
  test("vLLM engine core OOM: the cause, then 40+ lines, then 'See root cause above'", () => {
    for (const [mode, cause] of [
      ["oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"],
      ["kvcache", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."],
      ["maxlen", "which is larger than the available KV cache memory"],
    ] as const) {
      const r = runFake("vllm-0.10", ["vllm", "serve", "/m"], { CUDA_VISIBLE_DEVICES: "0", LLMGW_CONTRACT_FAIL: mode, LLMGW_CONTRACT_LOAD_MS: "0" });
      expect(r.code).toBe(1);
      const lines = r.stderr.trimEnd().split("\n");
      expect(lines.at(-1)).toBe(`(APIServer pid=${/APIServer pid=(\d+)/.exec(r.stderr)![1]}) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}`);
      const last = lines.findLastIndex((l) => l.includes(cause));
      expect(last).toBeGreaterThan(-1);
      expect(lines.length - last).toBeGreaterThan(40);
      expect(lines.filter((l) => l.startsWith("(EngineCore_0 pid=")).length).toBeGreaterThan(20);
    }
  });
  test("SGLang and llama-server OOM and model-not-found messages", () => {
    const sg = (mode: string) => runFake("sglang-0.5", ["python3", "-m", "sglang.launch_server", "--model-path", "/m"], { LLMGW_CONTRACT_FAIL: mode, LLMGW_CONTRACT_LOAD_MS: "0" });
    expect(sg("oom").stderr).toContain("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.");
    expect(sg("notfound").stderr).toContain("OSError: Can't load the configuration of '/m'");
    expect(sg("oom").code).toBe(1);
    const ll = (mode: string) => runFake("llama-b6000", ["llama-server", "-m", "/m.gguf"], { LLMGW_CONTRACT_FAIL: mode, LLMGW_CONTRACT_LOAD_MS: "0" });
    expect(ll("oom").stderr).toContain("cudaMalloc failed: out of memory");
    expect(ll("notfound").stderr).toContain("gguf_init_from_file: failed to open GGUF file '/m.gguf'");
    expect(ll("oom").code).toBe(1);
  });
  test("a multi-node SGLang leader holds its rendezvous port and the six after it; one already taken is torch's EADDRINUSE", async () => {
    const dist = freePort(8);
    const taken = Bun.listen({ hostname: "0.0.0.0", port: dist + 6, socket: { data() {} } });
    try {
      const argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--port", String(freePort()), "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", `127.0.0.1:${dist}`];
      const r = start("sglang-0.5", argv, {});
      const { code, output } = await exitOf(r);
      expect(code).toBe(1);
      expect(output).toContain(`port: ${dist + 6}, useIpv6: false, code: -98, name: EADDRINUSE`);
    } finally {
      taken.stop(true);
    }
  });
  test("SGLang with fewer visible GPUs than its share of --tp-size fails with a CUDA error", async () => {
    const r = start("sglang-0.5", ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "2"], { CUDA_VISIBLE_DEVICES: UUID });
    const { code, output } = await exitOf(r);
    expect(code).toBe(1);
    expect(output).toContain("CUDA error: invalid device ordinal");
  });
});

test("the fake nvidia-smi is read by the agent's GPU discovery as two H100s", async () => {
  // discoverGpus spawns it with this process's environment.
  process.env.LLMGW_CONTRACT_BUN = process.execPath;
  const d = await discoverGpus({ nvidiaSmi: join(fakeBin("nvidia-smi-2xh100"), "nvidia-smi") });
  expect(d.error).toBeUndefined();
  expect(d.gpus.map((g) => [g.index, g.class, g.uuid])).toEqual([
    [0, "H100-80GB", "GPU-3c1f6e0a-7b2d-4e59-9a61-0d2f5b8c4e11"],
    [1, "H100-80GB", "GPU-8a5d2b7e-1c94-4f03-b6e8-72a9d0c3f5a2"],
  ]);
});
