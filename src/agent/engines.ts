// Engine launch templates: turn one Assignment (one shard of a replica) into the argv and
// environment of the engine process the agent runs. Pure: no I/O, so every engine's command
// line is pinned by unit tests.

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
};

export type Launch = {
  cmd: string[];
  env: Record<string, string>;
  /**
   * False for shards that run no HTTP server (vLLM --headless workers, SGLang ranks > 0): the
   * runner can only watch that they stay alive, not poll /health.
   */
  servesHttp: boolean;
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
  return { cmd, env, servesHttp };
}

/** host:port for a torch-distributed init address; IPv6 literals need brackets. */
function hostPort(host: string, port: number): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]:${port}` : `${host}:${port}`;
}
