// Engine launch templates: turn one Assignment (one shard of a replica) into the argv and
// environment of the engine process the agent runs, including how the replica's engine key
// reaches the engine. Pure: no I/O, so every engine's command line is pinned by unit tests.

import type { Assignment } from "../protocol/heartbeat";

export type LaunchOptions = {
  /** Address the engine's HTTP server binds to. */
  host: string;
  /** Weights directory (vLLM, SGLang) or .gguf file (llama.cpp) on this node. */
  modelPath: string;
  /** How to run this binary's built-in fake engine: a compiled binary, or e.g. ["bun", "src/main.ts"]. */
  selfExe: string | readonly string[];
  /** Executables to use instead of the ones looked up on PATH (e.g. inside a virtualenv). */
  bin?: { vllm?: string; python?: string; llamaServer?: string };
  /**
   * Whether engines get the replica's key (`llmgw agent --engine-auth`, default on). Off, they
   * answer anyone who reaches their port: for private networks and benchmarks only.
   */
  engineAuth?: boolean;
  /**
   * The engine's version on this node, as the agent found it (null: not found). Templates are
   * chosen by it; undefined means the caller did not look (older callers, the fake engine).
   */
  version?: string | null;
  /** nvidia-smi's index of each placed GPU, by GPU uuid, from this node's inventory. */
  smiIndex?: Readonly<Record<string, number>>;
};

/**
 * Where each engine takes its API key from. An environment variable where the engine reads one
 * (a process's environment is readable only by its owner, its command line by every user on the
 * node through `ps`); the command line only for SGLang, whose server reads the key from
 * `--api-key` alone (ServerArgs.api_key; no environment variable for it).
 * - vLLM: `--api-key` or VLLM_API_KEY; it guards /v1/* (and /v2, /inference, /cohere), /health stays open.
 * - SGLang: `--api-key`; its middleware leaves /health* and /metrics* open.
 * - llama-server: `--api-key` or LLAMA_API_KEY (common/arg.cpp set_env); /health, /v1/health,
 *   /models, /v1/models and its web UI stay open, /metrics needs the key.
 * - the fake engine: `--api-key` or LLMGW_FAKE_ENGINE_API_KEY; /health and /metrics stay open.
 */
export const ENGINE_KEY_ENV = { vllm: "VLLM_API_KEY", "llama.cpp": "LLAMA_API_KEY", fake: "LLMGW_FAKE_ENGINE_API_KEY" } as const;

export type Launch = {
  cmd: string[];
  env: Record<string, string>;
  /**
   * False for shards that run no HTTP server (vLLM --headless workers, SGLang ranks > 0): the
   * runner can only watch that they stay alive, not poll /health.
   */
  servesHttp: boolean;
  /**
   * The key the engine checks (null when it checks none): the runner sends it with its health
   * probe, and masks it wherever it writes the command line.
   */
  apiKey: string | null;
};

/** The assignment cannot be turned into a command line; the message says why and what to change. */
export class LaunchError extends Error {
  override name = "LaunchError";
}

export function renderLaunch(a: Assignment, opts: LaunchOptions): Launch {
  const { rank, size } = a.shard;
  if (rank >= size) throw new LaunchError(`replica ${a.id}: shard rank ${rank} is not below shard size ${size}`);
  if (size > 1 && a.shard.leader_address === "")
    throw new LaunchError(`replica ${a.id}: a ${size}-node shard needs the leader's address, and none was given`);
  if (a.engine !== "fake" && a.gpus.length !== a.gpu_uuids.length)
    throw new LaunchError(
      `replica ${a.id}: ${a.gpus.length} GPU indices but ${a.gpu_uuids.length} GPU UUIDs; the control plane must send one UUID per GPU`,
    );

  // Only an engine that serves HTTP checks a key: headless workers and SGLang's other ranks
  // never see a request, so they are not given it.
  const key = opts.engineAuth !== false && a.engine_key !== null ? a.engine_key : null;
  if (key !== null) {
    const clash = a.args.find((x) => x === "--api-key" || x.startsWith("--api-key="));
    if (clash !== undefined)
      throw new LaunchError(
        `replica ${a.id}: the profile's args set --api-key, which would replace the replica's own engine key and lock the router out; remove it from the profile (the agent gives every engine its key)`,
      );
  }
  const port = String(a.port);
  const names = a.served_names;
  const first = names[0]!; // the schema requires at least one served name
  const gpusPerShard = Math.max(1, a.gpus.length);
  let cmd: string[];
  let servesHttp = true;

  switch (a.engine) {
    case "vllm": {
      cmd = [opts.bin?.vllm ?? "vllm", "serve", opts.modelPath, "--host", opts.host, "--port", port];
      cmd.push("--served-model-name", ...names);
      cmd.push("--tensor-parallel-size", String(gpusPerShard));
      if (size > 1) {
        // vLLM's documented multi-node layout without Ray ("Running vLLM with MultiProcessing",
        // docs/serving/parallelism_scaling.md): tensor parallel within a node, pipeline parallel
        // across nodes, every node runs `vllm serve` with --nnodes/--node-rank/--master-addr, and
        // the non-leaders add --headless (no API server). --master-port and the mp backend are the
        // ParallelConfig fields documented "for multi-node distributed inference when
        // distributed_executor_backend is mp"; the port defaults to 29501, so pass ours.
        cmd.push("--pipeline-parallel-size", String(size));
        cmd.push("--distributed-executor-backend", "mp");
        cmd.push("--nnodes", String(size), "--node-rank", String(rank));
        cmd.push("--master-addr", a.shard.leader_address, "--master-port", String(a.shard.leader_port));
        if (rank > 0) {
          cmd.push("--headless");
          servesHttp = false;
        }
      }
      break;
    }
    case "sglang": {
      // SGLang's server arguments (docs/advanced_features/server_arguments.md): --tp-size is the
      // tensor-parallel size across all nodes; --served-model-name takes a single string, so the
      // aliases are left to the router. --enable-metrics turns on /metrics, which is off by default.
      cmd = [opts.bin?.python ?? "python3", "-m", "sglang.launch_server", "--model-path", opts.modelPath];
      cmd.push("--host", opts.host, "--port", port, "--served-model-name", first);
      cmd.push("--tp-size", String(gpusPerShard * size), "--enable-metrics");
      if (size > 1) {
        // Multi-node tensor parallelism per SGLang's multi-node deployment docs: every node runs
        // launch_server with the same --tp, --nnodes, its --node-rank, and the leader's
        // --dist-init-addr host:port. Only rank 0 serves HTTP.
        cmd.push("--nnodes", String(size), "--node-rank", String(rank));
        cmd.push("--dist-init-addr", hostPort(a.shard.leader_address, a.shard.leader_port));
        if (rank > 0) servesHttp = false;
      }
      if (key !== null && servesHttp) cmd.push("--api-key", key);
      break;
    }
    case "llama.cpp": {
      if (size > 1)
        throw new LaunchError(
          `replica ${a.id}: llama.cpp cannot run one replica across ${size} nodes; give the model's llama.cpp profile nodes: 1`,
        );
      // llama-server's --alias takes comma-separated names (tools/server/README.md), so a name
      // with a comma in it would silently become two.
      const bad = names.find((n) => n.includes(","));
      if (bad !== undefined)
        throw new LaunchError(`replica ${a.id}: llama.cpp cannot serve the name "${bad}" because --alias splits names on ","`);
      cmd = [opts.bin?.llamaServer ?? "llama-server", "-m", opts.modelPath, "--host", opts.host, "--port", port];
      // -ngl 999 rather than "all": every llama-server version accepts a number, newer ones also a word.
      cmd.push("--alias", names.join(","), "-ngl", "999", "--metrics");
      break;
    }
    case "fake": {
      const self = typeof opts.selfExe === "string" ? [opts.selfExe] : [...opts.selfExe];
      if (self.length === 0) throw new LaunchError("selfExe is empty: cannot run the built-in fake engine");
      // Only rank 0 serves the replica's port: further shards of a simulated multi-node replica
      // share an address with it on one machine, so they take any free port and are watched
      // for liveness, like vLLM's headless workers.
      cmd = [...self, "fake-engine", "--port", rank === 0 ? port : "0", "--host", opts.host];
      for (const n of names) cmd.push("--model", n);
      if (rank > 0) servesHttp = false;
      break;
    }
  }

  cmd.push(...a.args);
  // Placement's GPU choice wins over anything in the catalog env: a profile that set its own
  // CUDA_VISIBLE_DEVICES would land on cards another replica holds. UUIDs rather than indices
  // because MIG instances can only be named by UUID and indices depend on CUDA_DEVICE_ORDER.
  const env: Record<string, string> = { ...a.env, CUDA_VISIBLE_DEVICES: a.gpu_uuids.join(",") };
  const apiKey = key !== null && servesHttp ? key : null;
  // After the catalog env, so a profile's own VLLM_API_KEY cannot replace the replica's key.
  if (apiKey !== null && a.engine !== "sglang") env[ENGINE_KEY_ENV[a.engine]] = apiKey;
  return { cmd, env, servesHttp, apiKey };
}

/**
 * The warning `llmgw agent --engine-auth off` logs at start, or undefined when engine auth is on.
 * A pure function so its fields are pinned by a test.
 */
export function engineAuthWarning(engineAuth: boolean): { fields: { engine_auth: "off"; reason: string }; message: string } | undefined {
  if (engineAuth) return undefined;
  return {
    fields: {
      engine_auth: "off",
      reason: "--engine-auth off: engines are started without a key, so anyone who can reach an engine's port can use it directly, bypassing the router's API keys and limits",
    },
    message: "engine auth is off: this node's engines answer every client that reaches them; use it only on a private network or for benchmarks",
  };
}

/** host:port for a torch-distributed init address; IPv6 literals need brackets. */
function hostPort(host: string, port: number): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}
