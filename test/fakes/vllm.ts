// Contract fake of `vllm`: answers `vllm --version` and `vllm serve` the way the release named
// by its fixture does (flag list from that tag's source), with vLLM's lifecycle (no listener
// while loading, then /health 200) and its real failures: the int() ValueError on UUIDs in
// CUDA_VISIBLE_DEVICES, and the "See root cause above" log shape of an engine core that died.
// Usage (from a bin/vllm wrapper): bun vllm.ts FIXTURE [vllm's own arguments…]

import { chatCompletion, die, failMode, json, loadFixture, loadMs, modelList, one, parseArgparse, record, serveUntilSignalled } from "./lib/contract";

const [fixtureName, ...argv] = process.argv.slice(2);
const fx = loadFixture(fixtureName!);
const stamp = () => {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, "0");
  return `${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
};
const info = (where: string, msg: string, who = `APIServer pid=${process.pid}`) => process.stdout.write(`(${who}) INFO ${stamp()} [${where}] ${msg}\n`);

// vllm/entrypoints/cli/main.py: `-v/--version` is argparse's version action on the top parser.
if (argv[0] === "--version" || argv[0] === "-v") {
  process.stdout.write(`${fx.version}\n`);
  process.exit(0);
}
if (argv[0] !== "serve") die(`usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\nvllm: error: argument subparser: invalid choice: '${argv[0] ?? ""}'`, 2);

const parsed = parseArgparse(fx, argv.slice(1), 1);
if ("unknown" in parsed) die(`usage: ${fx.usage}\n${fx.prog}: error: unrecognized arguments: ${parsed.unknown.join(" ")}`, 2);
const args = parsed.ok;
record("vllm", fx.version, argv);

const model = args.positionals[0] ?? one(args, "--model") ?? "facebook/opt-125m";
const host = one(args, "--host") ?? "0.0.0.0";
const port = Number(one(args, "--port") ?? "8000");
const names = args.values.get("--served-model-name") ?? [model];
const headless = args.values.has("--headless");
const key = one(args, "--api-key") ?? process.env.VLLM_API_KEY ?? null;

info("api_server.py:1885", `vLLM API server version ${fx.version}`);
info("utils.py:328", `non-default args: {'model_tag': '${model}', 'host': '${host}', 'port': ${port}}`);

const traceback = (who: string, frames: number, last: string[]): string[] => {
  const out = [`(${who}) Traceback (most recent call last):`];
  const files = ["vllm/v1/engine/core.py", "vllm/v1/engine/core.py", "vllm/v1/executor/abstract.py", "vllm/v1/worker/gpu_worker.py", "vllm/v1/worker/gpu_model_runner.py", "torch/utils/_contextlib.py"];
  for (let i = 0; i < frames; i++) {
    const f = files[i % files.length]!;
    out.push(`(${who})   File "/usr/local/lib/python3.12/dist-packages/${f}", line ${200 + i * 17}, in frame_${i}`);
    out.push(`(${who})     result = self.step_${i}(*args, **kwargs)`);
  }
  return [...out, ...last.map((l) => `(${who}) ${l}`)];
};

// vllm/platforms/interface.py device_id_to_physical_device_id: `return int(physical_device_id)`
// on each CUDA_VISIBLE_DEVICES entry (vLLM #13815, #20939, #41848), for GPU- and MIG- UUIDs alike.
const visible = process.env.CUDA_VISIBLE_DEVICES;
const bad = visible?.split(",").find((d) => !/^\d+$/.test(d.trim()));
if (visible !== undefined && bad !== undefined) {
  const lines = traceback(`APIServer pid=${process.pid}`, 4, [`ValueError: invalid literal for int() with base 10: '${bad}'`]);
  die(lines.join("\n"), 1);
}

// Each node runs tp × pp / nnodes workers, one per visible GPU: fewer GPUs than that and the
// worker that has none fails to set its device.
const world = Number(one(args, "--tensor-parallel-size") ?? "1") * Number(one(args, "--pipeline-parallel-size") ?? "1");
const perNode = Math.max(1, Math.floor(world / Math.max(1, Number(one(args, "--nnodes") ?? "1"))));
const count = visible?.split(",").filter((d) => d !== "").length;
if (count !== undefined && count < perNode)
  die(traceback(`EngineCore_0 pid=${process.pid + 1}`, 6, ["torch.AcceleratorError: CUDA error: invalid device ordinal"]).join("\n"), 1);

const mode = failMode();
const rootCause: Record<string, string[]> = {
  // vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory
  kvcache: ["ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."],
  maxlen: [
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.47 GiB). Based on the available memory, the estimated maximum model length is 62048. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
  ],
  // torch's allocator message, as vLLM's engine core passes it on
  oom: [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.16 GiB memory in use. Of the allocated memory 76.55 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
  ],
};

function engineCoreDied(cause: string[]): never {
  const core = `EngineCore_0 pid=${process.pid + 1}`;
  const api = `APIServer pid=${process.pid}`;
  const out: string[] = [];
  for (let i = 0; i < 12; i++) out.push(`(${core}) INFO ${stamp()} [gpu_model_runner.py:${1900 + i}] Loading weights shard ${i + 1}/12 took 1.2 seconds`);
  out.push(`(${core}) ERROR ${stamp()} [core.py:712] EngineCore failed to start.`);
  out.push(...traceback(core, 8, cause));
  out.push(`(${core}) Process EngineCore_0:`);
  out.push(...traceback(core, 8, cause));
  // What the API server prints last: the line every "last 30 lines" tail ends on.
  out.push(
    ...traceback(api, 22, [
      "  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py\", line 727, in wait_for_engine_startup",
      "    raise RuntimeError(\"Engine core initialization failed. \"",
      "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]),
  );
  die(out.join("\n"), 1);
}

setTimeout(() => {
  if (mode === "notfound")
    die(
      traceback(`APIServer pid=${process.pid}`, 5, [`huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': '${model}'. Use \`repo_type\` argument if needed.`]).join("\n"),
      1,
    );
  const cause = mode !== undefined ? rootCause[mode] : undefined;
  if (cause) engineCoreDied(cause);
  if (headless) {
    // --headless: engine processes only, no API server (vllm/entrypoints/cli/serve.py run_headless).
    info("serve.py:200", "Launching vLLM (headless) with data parallel / multi-node engines only", `APIServer pid=${process.pid}`);
    serveUntilSignalled();
    return;
  }
  Bun.serve({
    hostname: host,
    port,
    fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/health") return new Response(null, { status: 200 });
      if (path === "/metrics") return new Response("# HELP vllm:num_requests_running Number of requests in model execution batches.\nvllm:num_requests_running 0\n");
      // vllm/entrypoints/openai/api_server.py AuthenticationMiddleware: /v1 paths need the key.
      if (key !== null && path.startsWith("/v1") && req.headers.get("authorization") !== `Bearer ${key}`) return json({ error: "Unauthorized" }, 401);
      if (path === "/v1/models") return json(modelList(names, "vllm"));
      if (path === "/v1/chat/completions" && req.method === "POST")
        return req.json().then((b) => {
          const m = (b as { model?: string }).model;
          return m !== undefined && names.includes(m)
            ? json(chatCompletion(m))
            : json({ object: "error", message: `The model \`${m}\` does not exist.`, type: "NotFoundError", param: null, code: 404 }, 404);
        });
      return json({ detail: "Not Found" }, 404);
    },
  });
  info("launcher.py:36", `Starting vLLM API server 0 on http://${host}:${port}`);
  serveUntilSignalled();
}, loadMs());
