// The fatal lines each engine prints when it cannot start, so a failed replica's reason leads with
// the cause rather than whatever the engine printed last: vLLM ends with "Engine core
// initialization failed. See root cause above", the cause several screens up in another process's
// lines. Each pattern quotes the engine's own message and says where it comes from; log-line
// prefixes (process tags, logger timestamps) are stripped before matching and quoting.

import type { Assignment } from "../protocol/heartbeat";

export type EngineName = Assignment["engine"];

export type FailureKind =
  | "out of memory"
  | "cache memory"
  | "max model length"
  | "model not found"
  | "cuda"
  | "arguments"
  | "gpu ids"
  | "port";

export type FatalPattern = { kind: FailureKind; re: RegExp };

// ---- shared by the Python engines (vLLM, SGLang): PyTorch, CUDA, NCCL, Hugging Face, argparse --------------------

const PYTHON: readonly FatalPattern[] = [
  // PyTorch c10/cuda/CUDACachingAllocator.cpp: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00
  // MiB. GPU 0 has a total capacity of 79.19 GiB of which 512.06 MiB is free. ..." (torch.cuda.OutOfMemoryError in older
  // releases). Also inside other messages, e.g. SGLang's "Capture cuda graph failed: CUDA out of memory. ..."
  { kind: "out of memory", re: /\bCUDA out of memory\b|\bOutOfMemoryError\b/ },
  // PyTorch's CUDA_CHECK (c10/cuda/CUDAException.cpp): "RuntimeError: CUDA error: out of memory", "RuntimeError: CUDA
  // error: no kernel image is available for execution on the device", "CUDA error: an illegal memory access was
  // encountered". torch/cuda/__init__.py _lazy_init: "RuntimeError: CUDA driver initialization failed, you might not
  // have a CUDA gpu.", "RuntimeError: No CUDA GPUs are available", "RuntimeError: Found no NVIDIA driver on your
  // system."; the CUDA runtime's "no CUDA-capable device is detected".
  {
    kind: "cuda",
    re: /\bCUDA error: |\bCUDA driver initialization failed\b|\bno CUDA-capable device is detected\b|\bNo CUDA GPUs are available\b|\bFound no NVIDIA driver\b/,
  },
  // NCCL through torch (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): "torch.distributed.DistBackendError: NCCL
  // error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, unhandled system error ..." (vLLM #10523);
  // vLLM's pynccl_wrapper.py NCCL_CHECK: "RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for
  // details)" (vLLM #6732, #7896); "RuntimeError: NCCL Error 2: unhandled system error" (vLLM #5828).
  { kind: "cuda", re: /\bNCCL error\b/i },
  // huggingface_hub/utils/_http.py hf_raise_for_status: "huggingface_hub.errors.RepositoryNotFoundError: 401 Client
  // Error. (Request ID: ...)" (vast-ai/base-image #128), GatedRepoError, RevisionNotFoundError, EntryNotFoundError.
  { kind: "model not found", re: /\b(?:RepositoryNotFound|GatedRepo|RevisionNotFound|EntryNotFound)Error\b/ },
  // transformers/utils/hub.py cached_file: "OSError: X does not appear to have a file named config.json. Checkout
  // 'https://huggingface.co/X/tree/None' for available files." and "OSError: X is not a local folder and is not a valid
  // model identifier listed on 'https://huggingface.co/models'".
  { kind: "model not found", re: /^OSError: .*(?:does not appear to have a file named|is not a local folder and is not a valid model identifier)/ },
  // Python's Lib/argparse.py: "%(prog)s: error: unrecognized arguments: %s", "error: argument --x: invalid int value",
  // "error: the following arguments are required: ..." (vLLM #13150).
  { kind: "arguments", re: /^\S+(?: \S+)?: error: (?:unrecognized arguments: |argument \S+: |the following arguments are required: |ambiguous option: )/ },
];

// ---- vLLM ---------------------------------------------------------------------------------------------------------

const VLLM: readonly FatalPattern[] = [
  // vllm/platforms/interface.py (cuda.py before 0.9) device_id_to_physical_device_id, int() over CUDA_VISIBLE_DEVICES:
  // "ValueError: invalid literal for int() with base 10: 'GPU-52a3a85d-3c55-ca3a-a955-82c69ed360fc'" (vLLM #13815,
  // #20939; 'MIG-…' in #41848).
  { kind: "gpu ids", re: /invalid literal for int\(\) with base 10: '(?:GPU|MIG)-/ },
  // vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory (vllm/worker/worker.py raise_if_cache_size_invalid in
  // v0): "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the
  // engine."
  { kind: "cache memory", re: /\bNo available memory for the cache blocks\b/ },
  // vllm/v1/worker/gpu_worker.py init_device: "ValueError: Free memory on device (3.22/4.0 GiB) on startup is less than
  // desired GPU memory utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or reduce GPU memory used by other
  // processes." (vLLM #25837)
  { kind: "out of memory", re: /\bFree memory on device .* on startup is less than desired GPU memory utilization\b/ },
  // vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory: "To serve at least one request with the models's max
  // seq len (40960), (5.62 GiB KV cache is needed, which is larger than the available KV cache memory (4.50 GiB). ..."
  { kind: "max model length", re: /\bKV cache is needed, which is larger than the available KV cache memory\b/ },
  // vllm/worker/worker.py raise_if_cache_size_invalid (v0; v1 kv_cache_utils.py before 0.9): "The model's max seq len
  // (131072) is larger than the maximum number of tokens that can be stored in KV cache (42736). Try increasing
  // `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
  { kind: "max model length", re: /\bmax seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache\b/ },
  // vllm/config/model.py (vllm/config.py before 0.10) _get_and_verify_max_len: "User-specified max_model_len (65536) is
  // greater than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's
  // config.json). ..." Raised as "ValueError: …" or, through pydantic, "  Value error, …"; the same words are only a
  // warning when VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, hence the "Error" in front.
  { kind: "max model length", re: /(?:Error: |Value error, )User-specified max_model_len \(\d+\) is greater than the derived max_model_len\b/ },
  // vllm/transformers_utils/config.py get_config (PR #13724): "ValueError: Invalid repository ID or local directory
  // specified: 'neuralmagic/Meta-Llama-3-8B-Instruct-FP8-dynamic'." (vLLM #13510); before it: "ValueError: No supported
  // config format found in X" (vLLM #13150).
  { kind: "model not found", re: /\bInvalid repository ID or local directory specified\b|\bNo supported config format found in\b/ },
  ...PYTHON,
];

// ---- SGLang -------------------------------------------------------------------------------------------------------

const SGLANG: readonly FatalPattern[] = [
  // python/sglang/srt/model_executor/model_runner.py init_memory_pool: "RuntimeError: Not enough memory. Please try to
  // increase --mem-fraction-static." (sgl-project/sglang #322, #4330)
  { kind: "cache memory", re: /\bNot enough memory\. Please try to increase --mem-fraction-static\b/ },
  // python/sglang/srt/configs/model_config.py _derive_context_length: "ValueError: Warning: User-specified
  // context_length (65536) is greater than the derived context_length (32768). ... To allow overriding this maximum,
  // set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1". Logged (not raised) with that variable set, so only
  // the raised form counts.
  { kind: "max model length", re: /Error: (?:Warning: )?User-specified context_length \(\d+\) is greater than the derived context_length\b/ },
  ...PYTHON,
];

// ---- llama.cpp (llama-server) -------------------------------------------------------------------------------------

const LLAMA_CPP: readonly FatalPattern[] = [
  // ggml/src/ggml-cuda/ggml-cuda.cu ggml_backend_cuda_buffer_type_alloc_buffer: "allocating 144817.04 MiB on device 0:
  // cudaMalloc failed: out of memory" (llama.cpp #20431, ik_llama.cpp #749).
  { kind: "out of memory", re: /\bcudaMalloc failed: out of memory\b/ },
  // src/llama-context.cpp / llama-kv-cache.cpp: "llama_init_from_model: failed to initialize the context: failed to
  // allocate buffer for kv cache", "llama_kv_cache_unified: failed to allocate buffer for kv cache"; graph reserve:
  // "failed to allocate compute buffers" (ollama #6860).
  { kind: "cache memory", re: /\bfailed to allocate buffer for kv cache\b|\bfailed to allocate compute buffers\b/ },
  // llama.cpp does not refuse a context longer than the model was trained for (src/llama-context.cpp only warns
  // "n_ctx_per_seq (%u) > n_ctx_train (%u) -- possible training context overflow"); a context too large for memory
  // fails when it is created: common/common.cpp common_init_from_params "failed to create context with model '%s'"
  // (quoted in ik_llama.cpp PR #235).
  { kind: "max model length", re: /\bfailed to create context with model\b/ },
  // ggml/src/gguf.cpp gguf_init_from_file: "gguf_init_from_file: failed to open GGUF file '/models/x.gguf'" (the
  // wording after "failed to open" differs between releases); src/llama.cpp llama_model_load: "llama_model_load: error loading
  // model: %s" (llama.cpp #7978, #7366); the older "error loading model: failed to open x: No such file or directory"
  // (llama.cpp #2867); common/common.cpp "failed to load model '%s'"; tools/server/server.cpp "failed to load model, '%s'".
  { kind: "model not found", re: /^gguf_init_from_file: failed to open\b|\berror loading model: |\bfailed to load model\b/ },
  // ggml/src/ggml-cuda/ggml-cuda.cu ggml_cuda_init: "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device
  // is detected" (llama-cpp-python #1890); CUDA_CHECK's "CUDA error: out of memory" (llama.cpp #4680), "CUDA error: %s
  // current device: %d, in function %s at %s:%d".
  { kind: "cuda", re: /\bfailed to initialize CUDA\b|\bCUDA error: |\bno CUDA-capable device is detected\b/ },
  // common/arg.cpp common_params_parse_ex: throw std::invalid_argument("error: invalid argument: " + arg), printed as
  // "error: invalid argument: --mmap" (tscibilia/home-ops PR #3804, llama.vim #36); older builds: "error: unknown
  // argument: -hf" (llama.vscode #37); a bad value: "error: invalid parameter for argument: -l" (llamafile #695).
  { kind: "arguments", re: /^error: (?:invalid argument|unknown argument|invalid parameter for argument): / },
];

// ---- the fake engine (tests and `llmgw demo`) ---------------------------------------------------------------------

const FAKE: readonly FatalPattern[] = [
  // src/sim/fake-engine.ts fakeEngineMain: "llmgw fake-engine: cannot listen on HOST:PORT: MESSAGE" and
  // "llmgw fake-engine: <argument error>" before its usage.
  { kind: "arguments", re: /^llmgw fake-engine: (?!cannot listen on )/ },
  { kind: "port", re: /^llmgw fake-engine: cannot listen on / },
  // It stands in for vLLM in tests (LLMGW_FAKE_FAIL prints a real engine's line), so it knows vLLM's causes too.
  ...VLLM,
];

export const FATAL_PATTERNS: Readonly<Record<EngineName, readonly FatalPattern[]>> = {
  vllm: VLLM,
  sglang: SGLANG,
  "llama.cpp": LLAMA_CPP,
  fake: FAKE,
};

// ---- prefixes -----------------------------------------------------------------------------------------------------

const PREFIXES: readonly RegExp[] = [
  // vLLM's per-process tag: "(EngineCore_0 pid=1234) ", "(APIServer pid=53) ", "(VllmWorker rank=1 pid=2445156) ",
  // "(RayWorkerWrapper pid=11305, ip=10.1.0.7) ".
  /^\((?:[A-Za-z][\w-]*)(?: [\w.:=, -]+)?\)(?: |$)/,
  // vLLM's logger (vllm/logger.py): "ERROR 12-01 10:00:00 [core.py:700] " (0.8+), "ERROR 12-01 10:00:00 engine.py:400] "
  // (older).
  /^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:\[[^\]\s]+\]|[\w.-]+:\d+\])(?: |$)/,
  // torch.distributed per-rank output: "[rank0]: ".
  /^\[rank\d+\]: ?/,
  // SGLang's logger (python/sglang/srt/utils.py configure_logger): "[2025-03-17 17:15:55 TP1] ", "[2025-03-12
  // 10:00:02] ", "[12-16 14:27:08] ".
  /^\[(?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?: [^\]]*)?\](?: |$)/,
  // llama.cpp's common/log.cpp with timestamps and levels: "0.01.401.902 E ".
  /^\d+\.\d\d\.\d{3}\.\d{3} [DIWE] /,
];

/** A log line without the engine's process tag, logger timestamp and level (repeatedly: vLLM stacks two). */
export function stripLogPrefix(line: string): string {
  return unprefixed(line).trimStart();
}

/** The same, keeping the indentation after the prefixes: it tells a traceback's source lines apart. */
function unprefixed(line: string): string {
  let s = line;
  for (let round = 0; round < 4; round++) {
    const before = s;
    for (const p of PREFIXES) s = s.replace(p, "");
    if (s === before) break;
  }
  return s;
}

/** ANSI colour and cursor sequences an engine may print around its error lines. */
// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;?]*[A-Za-z]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)/g;

/**
 * The first line of `text` that matches one of the engine's fatal patterns, its prefix stripped,
 * or null. The first, not the last: Python prints the deepest cause first ("The above exception
 * was the direct cause of the following exception"), and vLLM repeats it in later processes' lines.
 */
export function rootCause(engine: EngineName, text: string): string | null {
  const patterns = FATAL_PATTERNS[engine];
  for (const raw of text.split(/\r?\n|\r/)) {
    if (raw.length === 0) continue;
    const body = unprefixed(raw.replace(ANSI, ""));
    // A traceback quotes the source that raised ("    raise ValueError(\"No available memory for
    // the cache blocks. \""), indented by four; the exception line itself is not.
    if (/^ {4}|^\s*raise\s/.test(body)) continue;
    const line = body.trim();
    if (line !== "" && patterns.some((p) => p.re.test(line))) return line;
  }
  return null;
}

/**
 * Words that mark a line as an error report rather than progress or a warning: the line an
 * engine's output says most in when no fatal pattern knows its failure.
 */
const ERRORISH = /(?:error|exception)\b|\b(?:fatal|fail(?:ed|ure|s)?|abort(?:ed)?|panic|fault|killed|cannot|unable|denied|refused|not found|no such)\b/i;

/**
 * The one line of an engine's output that tells most about its end when no fatal pattern
 * matched: the last line that reads as an error (a traceback's exception line, "Segmentation
 * fault"), not the shutdown chatter or a leaked-semaphore warning printed after it; else the
 * last line. Log prefixes and colours stripped; traceback source lines skipped.
 */
export function tellingLine(text: string): string | null {
  let last: string | null = null;
  let errorish: string | null = null;
  for (const raw of text.split(/\r?\n|\r/)) {
    const body = unprefixed(raw.replace(ANSI, ""));
    const line = body.trim();
    if (line === "") continue;
    last = line;
    // A traceback's header and the source it quotes are not the error, though they may name one.
    if (/^Traceback \(most recent call last\)|^File "/.test(line) || /^ {4}|^\s*raise\s/.test(body)) continue;
    if (ERRORISH.test(line)) errorish = line;
  }
  return errorish ?? last;
}
