// Contract fake of SGLang behind `python3`: answers the agent's version one-liner
// (`python3 -c "import sglang; print(sglang.__version__)"`) and `python3 -m sglang.launch_server …`
// with the flag list of the release named by its fixture (python/sglang/srt/server_args.py),
// SGLang's lifecycle (no listener while the scheduler loads, 503 while warming up, a /health
// that generates a token and so takes at least a second) and its failures.
// Usage (from a bin/python3 wrapper): bun sglang.ts FIXTURE [python's arguments…]

import { bearer, chatCompletion, die, failMode, json, loadFixture, loadMs, modelList, one, parseArgparse, record, serveUntilSignalled } from "./lib/contract";

const [fixtureName, ...argv] = process.argv.slice(2);
const fx = loadFixture(fixtureName!);

if (argv[0] === "-c") {
  const code = argv[1] ?? "";
  if (/^\s*import sglang\s*;\s*print\(sglang\.__version__\)\s*$/.test(code)) {
    process.stdout.write(`${fx.version}\n`);
    process.exit(0);
  }
  die(`Traceback (most recent call last):\n  File "<string>", line 1, in <module>\nNotImplementedError: the SGLang contract fake runs only the version one-liner, not: ${code}`, 1);
}
if (argv[0] !== "-m" || argv[1] !== "sglang.launch_server") die(`/usr/bin/python3: the SGLang contract fake runs only -m sglang.launch_server, not: ${argv.join(" ")}`, 2);

const parsed = parseArgparse(fx, argv.slice(2), 0);
if ("unknown" in parsed) die(`usage: ${fx.usage}\n${fx.prog}: error: unrecognized arguments: ${parsed.unknown.join(" ")}`, 2);
const args = parsed.ok;
if (!args.values.has("--model-path")) die(`usage: ${fx.usage}\n${fx.prog}: error: the following arguments are required: --model-path/--model`, 2);
record("sglang", fx.version, argv);

const model = one(args, "--model-path")!;
const host = one(args, "--host") ?? "127.0.0.1";
const port = Number(one(args, "--port") ?? "30000");
const name = one(args, "--served-model-name") ?? model;
const key = one(args, "--api-key") ?? null;
const nnodes = Number(one(args, "--nnodes") ?? "1");
const rank = Number(one(args, "--node-rank") ?? "0");
const tp = Number(one(args, "--tp-size") ?? "1");
const stamp = () => new Date().toISOString().replace("T", " ").slice(0, 19);
const log = (msg: string) => process.stdout.write(`[${stamp()}] ${msg}\n`);

if (nnodes > 1 && !args.values.has("--dist-init-addr"))
  die("Traceback (most recent call last):\nAssertionError: --dist-init-addr is required when --nnodes > 1", 1);
// Each node runs tp/nnodes ranks, one per visible GPU; fewer GPUs than that is a CUDA error.
const perNode = Math.max(1, Math.floor(tp / Math.max(1, nnodes)));
const visible = process.env.CUDA_VISIBLE_DEVICES?.split(",").filter((d) => d !== "") ?? [];
if (process.env.CUDA_VISIBLE_DEVICES !== undefined && visible.length < perNode)
  die(`[${stamp()} TP${visible.length}] Scheduler hit an exception: Traceback (most recent call last):\ntorch.AcceleratorError: CUDA error: invalid device ordinal\n[${stamp()}] Received sigquit from a child process. It usually means the child failed.`, 1);

// With --nnodes > 1 the leader takes the rendezvous port of --dist-init-addr and the six after it
// (PortArgs.init_new: port_base = dist_init_port + 1 for its ZMQ sockets); one taken already is
// torch's TCPStore error. Held for the life of the process, as the real ones are. With
// --enable-dp-attention on one node the same, from --dist-init-addr when given, else from
// 127.0.0.1:--port + 233 (ZMQ_TCP_PORT_DELTA).
const dpAttention = args.values.has("--enable-dp-attention");
if ((nnodes > 1 && rank === 0) || (nnodes === 1 && dpAttention)) {
  const given = one(args, "--dist-init-addr");
  const dist = given !== undefined ? Number(/:(\d+)$/.exec(given)?.[1]) : port + 233;
  for (let p = dist; p <= dist + 6; p++) {
    try {
      Bun.listen({ hostname: "0.0.0.0", port: p, socket: { data() {} } });
    } catch {
      die(
        `[${stamp()}] Traceback (most recent call last):\ntorch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: ${p}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use`,
        1,
      );
    }
  }
}

log(`server_args=ServerArgs(model_path='${model}', host='${host}', port=${port}, served_model_name='${name}', tp_size=${tp}, nnodes=${nnodes}, node_rank=${rank})`);

const mode = failMode();
const failures: Record<string, string> = {
  // python/sglang/srt/model_executor/model_runner.py init_memory_pool
  oom: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
  torchoom: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.10 GiB is free.",
  notfound: `OSError: Can't load the configuration of '${model}'. If you were trying to load it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, make sure '${model}' is the correct path to a directory containing a config.json file`,
};

setTimeout(() => {
  const cause = mode !== undefined ? failures[mode] : undefined;
  if (cause)
    die(
      [
        `[${stamp()} TP0] Scheduler hit an exception: Traceback (most recent call last):`,
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2670, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
        cause,
        "",
        `[${stamp()}] Received sigquit from a child process. It usually means the child failed.`,
      ].join("\n"),
      1,
    );
  if (rank >= 1) {
    // Ranks ≥ 1 serve only a health endpoint on --host/--port once their scheduler is up
    // (entrypoints/engine.py launch_dummy_health_check_server).
    Bun.serve({ hostname: host, port, fetch: (req) => (new URL(req.url).pathname.startsWith("/health") ? new Response(null, { status: 200 }) : json({ detail: "Not Found" }, 404)) });
    log(`Dummy health check server started in background on ${host}:${port}`);
    serveUntilSignalled();
    return;
  }
  let up = false;
  Bun.serve({
    hostname: host,
    port,
    async fetch(req) {
      const path = new URL(req.url).pathname;
      // add_api_key_middleware: /health* and /metrics* stay open.
      if (key !== null && !path.startsWith("/health") && !path.startsWith("/metrics") && bearer(req) !== key) return json({ error: "Unauthorized" }, 401);
      if (path === "/health" || path === "/health_generate") {
        if (!up) return new Response(null, { status: 503 });
        // health_generate sends a one-token request and polls every second for its result.
        await Bun.sleep(1000);
        return new Response(null, { status: 200 });
      }
      if (path === "/metrics") return new Response("# HELP sglang:num_running_reqs The number of running requests.\nsglang:num_running_reqs 0\n");
      if (path === "/v1/models") return json(modelList([name], "sglang"));
      if (path === "/v1/chat/completions" && req.method === "POST") {
        const b = (await req.json()) as { model?: string };
        return json(chatCompletion(b.model ?? name));
      }
      return json({ detail: "Not Found" }, 404);
    },
  });
  log(`Uvicorn running on http://${host}:${port} (Press CTRL+C to quit)`);
  // The warmup request: /health answers 503 until it is done.
  setTimeout(() => {
    up = true;
    log("The server is fired up and ready to roll!");
  }, Math.max(200, loadMs() / 2));
  serveUntilSignalled();
}, loadMs());
