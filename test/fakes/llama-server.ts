// Contract fake of `llama-server`: answers `--version` the way a build of that number does (on
// stderr), parses its arguments with that build's option table (common/arg.cpp), and follows
// its lifecycle: it listens at once, /health answers 503 "Loading model" until the model is
// loaded, then 200 {"status":"ok"}. --alias is one literal name before PR #19926 and a
// comma-separated set after it (whose alphabetically first member becomes the model's id).
// Usage (from a bin/llama-server wrapper): bun llama-server.ts FIXTURE [llama-server's arguments…]

import { existsSync } from "node:fs";
import { bearer, chatCompletion, die, failMode, json, loadFixture, loadMs, one, parseLlama, record, serveUntilSignalled } from "./lib/contract";

const [fixtureName, ...argv] = process.argv.slice(2);
const fx = loadFixture(fixtureName!);
/** Whether this build has PR #19926 (comma-separated --alias), as the fixture records it. */
const aliasList = fx.alias_list === true;

if (argv[0] === "--version") {
  // common/arg.cpp: printed to stderr, then exit 0.
  process.stderr.write(`version: ${fx.version} (${fx.commit})\nbuilt with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu\n`);
  process.exit(0);
}
const parsed = parseLlama(fx, argv);
if ("error" in parsed) die(parsed.error, 1);
const args = parsed.ok;
record("llama.cpp", fx.version, argv);

const modelPath = one(args, "--model") ?? "models/7B/ggml-model-f16.gguf";
const host = one(args, "--host") ?? "127.0.0.1";
const port = Number(one(args, "--port") ?? "8080");
const alias = one(args, "--alias");
const aliases = alias === undefined ? [] : aliasList ? [...new Set(alias.split(",").map((s) => s.trim()).filter((s) => s !== ""))].sort() : [alias];
const id = aliases[0] ?? modelPath;
const key = one(args, "--api-key") ?? process.env.LLAMA_API_KEY ?? null;
const log = (msg: string) => process.stderr.write(`${msg}\n`);

log(`build: ${fx.version} (${fx.commit}) with cc (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0 for x86_64-linux-gnu`);
log(`main: HTTP server is listening, hostname: ${host}, port: ${port}, http threads: 15`);
log("main: loading model");

const mode = failMode();
let loaded = false;
Bun.serve({
  hostname: host,
  port,
  async fetch(req) {
    const path = new URL(req.url).pathname;
    // tools/server/server.cpp: these answer while loading and without a key.
    if (path === "/health" || path === "/v1/health")
      return loaded ? json({ status: "ok" }) : json({ error: { code: 503, message: "Loading model", type: "unavailable_error" } }, 503);
    if (!loaded) return json({ error: { code: 503, message: "Loading model", type: "unavailable_error" } }, 503);
    const open = path === "/models" || path === "/v1/models";
    if (key !== null && !open && bearer(req) !== key) return json({ error: { code: 401, message: "Invalid API Key", type: "authentication_error" } }, 401);
    if (open)
      return json({ object: "list", data: [{ id, object: "model", created: Math.floor(Date.now() / 1000), owned_by: "llamacpp", ...(aliasList ? { aliases } : {}) }] });
    if (path === "/v1/chat/completions" && req.method === "POST") {
      await req.json();
      // One model per server: the request's model name is not checked.
      return json(chatCompletion(id));
    }
    if (path === "/metrics") return new Response("# HELP llamacpp:requests_processing Number of requests processing.\nllamacpp:requests_processing 0\n");
    return json({ error: { code: 404, message: "File Not Found", type: "not_found_error" } }, 404);
  },
});

setTimeout(() => {
  if (mode === "notfound" || (mode === undefined && process.env.LLMGW_CONTRACT_CHECK_MODEL === "1" && !existsSync(modelPath)))
    die(
      [
        `gguf_init_from_file: failed to open GGUF file '${modelPath}'`,
        `llama_model_load: error loading model: llama_model_loader: failed to load model from ${modelPath}`,
        "llama_model_load_from_file_impl: failed to load model",
        `common_init_from_params: failed to load model '${modelPath}'`,
        `srv    load_model: failed to load model, '${modelPath}'`,
        "main: exiting due to model loading error",
      ].join("\n"),
      1,
    );
  if (mode === "oom")
    die(
      [
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 40960.00 MiB on device 0: cudaMalloc failed: out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 42949672960",
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
        "llama_model_load_from_file_impl: failed to load model",
        `common_init_from_params: failed to load model '${modelPath}'`,
        `srv    load_model: failed to load model, '${modelPath}'`,
        "main: exiting due to model loading error",
      ].join("\n"),
      1,
    );
  loaded = true;
  log("main: model loaded");
  log(`main: server is listening on http://${host}:${port} - starting the main loop`);
}, loadMs());
serveUntilSignalled();
