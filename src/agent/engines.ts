// Engine launch templates: turn one Assignment (one shard of a replica) into the argv and
// environment of the engine process the agent runs, chosen by the engine version found on the
// node (each template names the range it is for and where that comes from), including how the
// replica's engine key reaches the engine. Pure: no I/O, so every engine's command line is
// pinned by unit tests.

import { hostPort } from "../lib/net";
import { ENGINE_NAMES, MULTI_NODE_SINCE } from "../protocol/engine-features";
import { sglangDpAttention } from "../protocol/engine-ports";
import { type Assignment, launchInputProblem } from "../protocol/heartbeat";
import { compareVersions, llamaBuild, type RealEngine } from "./engine-versions";

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
  /** Why the version is unknown (the probe's error), quoted when a launch is refused for it. */
  versionError?: string | null;
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
   * False for shards that run no HTTP server (vLLM --headless workers, SGLang ranks > 0 before
   * 0.4.3.post4): the
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

/**
 * The version ranges the templates below are written for, with where each bound comes from.
 * Versions are compared as PEP 440 (vLLM, SGLang) or as llama.cpp build numbers.
 */
export const ENGINE_RANGES = {
  vllm: {
    /**
     * Oldest release the template is written for: `vllm serve MODEL` taking several
     * --served-model-name values and VLLM_API_KEY (vllm/entrypoints/openai/cli_args.py, v0.6).
     */
    min: "0.6.0",
    /** Multi-node without Ray (--nnodes … --headless); where the bound comes from: protocol/engine-features.ts. */
    multiNode: MULTI_NODE_SINCE.vllm!,
    /**
     * First release that takes UUIDs in CUDA_VISIBLE_DEVICES, or null: every release so far
     * parses the entries with int() (platforms/interface.py device_id_to_physical_device_id:
     * `ValueError: invalid literal for int() with base 10: 'GPU-…'`, vLLM #13815, #20939, and
     * for MIG UUIDs #41848); the fixes #46132 and #32644 were not merged and #51677 (NVML
     * resolution on main) is in no known release. Until one is named here, vLLM gets
     * nvidia-smi indices under CUDA_DEVICE_ORDER=PCI_BUS_ID, and cannot be given a MIG device.
     */
    uuids: null as string | null,
  },
  sglang: {
    /** Oldest release written for: launch_server with --served-model-name, --enable-metrics, --api-key, --nnodes/--dist-init-addr (sglang/srt/server_args.py, v0.4). */
    min: "0.4.0",
    /**
     * Ranks >= 1 serve /health on --host/--port once their schedulers are ready
     * (launch_dummy_health_check_server in Engine._launch_subprocesses, present in 0.4.3.post4);
     * older ranks >= 1 serve nothing and are only watched for staying alive.
     */
    rankHealth: "0.4.3.post4",
  },
  "llama.cpp": {
    /** Oldest build written for: common/arg.cpp with an environment variable per server flag (LLAMA_API_KEY), --alias, -ngl and --metrics. */
    min: 4000,
    /**
     * `--alias a,b` is a list from llama.cpp PR #19926 (commit 2e7e638, 27 Feb 2026, release
     * b8173); older builds take "a,b" as one literal name, so they get the first name only (the
     * router maps the aliases). From the same build on, -ngl is left out: PR #16653 (Dec 2025)
     * fits layers and context to free device memory by default (--fit on, -ngl defaults to
     * "auto"), and an explicit -ngl 999 would turn the fitting off. Older builds get -ngl 999,
     * which every build reads as "all layers".
     */
    aliasList: 8173,
  },
} as const;

/** How long one /health probe may take, per engine. */
export const HEALTH_TIMEOUT_MS = {
  // SGLang's /health runs a one-token generation (http_server.py health_generate, at least 1 s
  // of waiting) which queues behind a full batch; 2 s would call a busy engine dead.
  sglang: 10_000,
  vllm: 2_000,
  "llama.cpp": 2_000,
  fake: 2_000,
} as const satisfies Record<Assignment["engine"], number>;

const ENGINE_NAME = ENGINE_NAMES;
const VERSION_FLAG = { vllm: "--vllm-version", sglang: "--sglang-version", "llama.cpp": "--llama-server-version" } as const;
const BIN_FLAG = { vllm: "--vllm", sglang: "--sglang-python", "llama.cpp": "--llama-server" } as const;

/** The version to choose templates by: undefined when the caller did not look (use the newest). */
function knownVersion(a: Assignment, opts: LaunchOptions): string | undefined {
  if (a.engine === "fake" || opts.version === undefined) return undefined;
  if (opts.version === null) {
    const why = opts.versionError ? `: ${opts.versionError}` : "";
    throw new LaunchError(
      `replica ${a.id}: ${ENGINE_NAME[a.engine]}'s version on this node is unknown${why}; llmgw picks the command line by version, so it starts no engine it cannot place in a range (install it, point ${BIN_FLAG[a.engine]} at it, or state it with ${VERSION_FLAG[a.engine]})`,
    );
  }
  return opts.version;
}

/** Whether `version` is at least `min`; throws a LaunchError when the version cannot be read. */
function atLeast(a: Assignment, version: string, min: string | number): boolean {
  let c: number | null;
  if (typeof min === "number") {
    const build = llamaBuild(version);
    c = build === null ? null : build - min;
  } else c = compareVersions(version, min);
  if (c === null)
    throw new LaunchError(`replica ${a.id}: ${ENGINE_NAME[a.engine]} version "${version}" is not one llmgw can read; state it with ${VERSION_FLAG[a.engine as RealEngine]}`);
  return c >= 0;
}

function fmt(engine: Assignment["engine"], v: string | number): string {
  return engine === "llama.cpp" && typeof v === "number" ? `b${v}` : String(v);
}

export function renderLaunch(a: Assignment, opts: LaunchOptions): Launch {
  checkInputs(a);
  checkShape(a);
  const version = knownVersion(a, opts);
  if (version !== undefined && a.engine !== "fake") {
    const min = ENGINE_RANGES[a.engine].min;
    if (!atLeast(a, version, min))
      throw new LaunchError(
        `replica ${a.id}: ${ENGINE_NAME[a.engine]} ${version} is older than any launch template llmgw has (it supports ${ENGINE_NAME[a.engine]} ${fmt(a.engine, min)} and newer); upgrade it on this node`,
      );
  }

  // Only an engine that checks requests gets a key: headless workers and SGLang's other ranks
  // never see a request, so they are not given it.
  const key = opts.engineAuth !== false && a.engine_key !== null ? a.engine_key : null;
  if (key !== null) {
    const clash = a.args.find((x) => x === "--api-key" || x.startsWith("--api-key="));
    if (clash !== undefined)
      throw new LaunchError(
        `replica ${a.id}: the profile's args set --api-key, which would replace the replica's own engine key and lock the router out; remove it from the profile (the agent gives every engine its key)`,
      );
  }
  const t: Template = {
    a,
    opts,
    version,
    newer: (min) => version === undefined || atLeast(a, version, min),
    key,
    port: String(a.port),
    // Placement's GPU choice wins over anything in the catalog env: a profile that set its own
    // CUDA_VISIBLE_DEVICES would land on cards another replica holds. UUIDs where the engine
    // takes them: MIG instances can only be named by UUID, and indices depend on CUDA_DEVICE_ORDER.
    gpuEnv: { CUDA_VISIBLE_DEVICES: a.gpu_uuids.join(",") },
  };
  const { cmd, servesHttp = true, checksKey = true } = TEMPLATES[a.engine](t);

  cmd.push(...a.args);
  const env: Record<string, string> = { ...a.env, ...t.gpuEnv };
  const apiKey = key !== null && servesHttp && checksKey ? key : null;
  // After the catalog env, so a profile's own VLLM_API_KEY cannot replace the replica's key.
  if (apiKey !== null && a.engine !== "sglang") env[ENGINE_KEY_ENV[a.engine]] = apiKey;
  return { cmd, env, servesHttp, apiKey };
}

/** What every template works from: the assignment, the node's options, and what was decided before. */
type Template = {
  a: Assignment;
  opts: LaunchOptions;
  /** The engine's version to choose by; undefined: the newest template. */
  version: string | undefined;
  /** Whether the version is at least min (always, when the version was not looked at). */
  newer: (min: string | number) => boolean;
  /** The replica's key, when the engine is to check one. */
  key: string | null;
  port: string;
  /** The GPU environment; a template may rewrite it (vLLM takes indices). */
  gpuEnv: Record<string, string>;
};

/**
 * One engine's command line. servesHttp false: a shard that runs no HTTP server (vLLM
 * --headless workers, SGLang ranks > 0 before 0.4.3.post4); checksKey false: a shard that serves
 * /health without a key (SGLang's other ranks).
 */
type Rendered = { cmd: string[]; servesHttp?: boolean; checksKey?: boolean };

/**
 * What the head node sends is checked here as the head node checks the catalog and the nodes it
 * comes from: a name that would read as a flag, or an env variable that loads code, starts
 * nothing, whichever head node sent it.
 */
function checkInputs(a: Assignment): void {
  const problem = launchInputProblem(a);
  if (problem !== undefined)
    throw new LaunchError(
      `replica ${a.id} not started: ${problem}. A head node refuses this in a catalog too: the model's entry was stored before that check (change it and apply it again), or this assignment came from no catalog a head node accepted (check which head node this agent follows)`,
    );
}

/** Refusals that do not depend on the engine's version: rank, leader, one UUID per GPU, MIG. */
function checkShape(a: Assignment): void {
  const { rank, size } = a.shard;
  if (rank >= size) throw new LaunchError(`replica ${a.id}: shard rank ${rank} is not below shard size ${size}`);
  if (size > 1 && a.shard.leader_address === "")
    throw new LaunchError(`replica ${a.id}: a ${size}-node shard needs the leader's address, and none was given`);
  if (a.engine !== "fake" && a.gpus.length !== a.gpu_uuids.length)
    throw new LaunchError(
      `replica ${a.id}: ${a.gpus.length} GPU indices but ${a.gpu_uuids.length} GPU UUIDs; the control plane must send one UUID per GPU`,
    );
  // NVIDIA's MIG user guide (CUDA device enumeration): a CUDA process sees at most one MIG
  // device, whatever CUDA_VISIBLE_DEVICES lists. The fake engine is no CUDA process.
  if (a.gpu_uuids.some(isMigUuid) && a.engine !== "fake" && a.gpu_uuids.length > 1)
    throw new LaunchError(
      `replica ${a.id}: ${a.gpu_uuids.length} MIG devices for one engine, but a CUDA process can use only one MIG device; give the profile gpus: 1 for a MIG class, or use whole GPUs`,
    );
}

const TEMPLATES: Record<Assignment["engine"], (t: Template) => Rendered> = {
  vllm: vllmCommand,
  sglang: sglangCommand,
  "llama.cpp": llamaCommand,
  fake: fakeCommand,
};

function vllmCommand({ a, opts, version, newer, port, gpuEnv }: Template): Rendered {
  const { rank, size } = a.shard;
  const uuidsFrom = ENGINE_RANGES.vllm.uuids;
  const takesUuids = uuidsFrom !== null && newer(uuidsFrom);
  if (!takesUuids) {
    if (a.gpu_uuids.some(isMigUuid))
      throw new LaunchError(
        `replica ${a.id}: vLLM${version ? ` ${version}` : ""} cannot run on a MIG device: it reads CUDA_VISIBLE_DEVICES as integers (vLLM #41848) and a MIG instance can only be named by its UUID; run this profile on whole GPUs, or on SGLang or llama.cpp`,
      );
    // CUDA numbers devices fastest-first unless told PCI_BUS_ID, which is nvidia-smi's order.
    gpuEnv.CUDA_DEVICE_ORDER = "PCI_BUS_ID";
    gpuEnv.CUDA_VISIBLE_DEVICES = a.gpu_uuids.map((u) => smiIndexOf(a, opts, u)).join(",");
  }
  const cmd = [opts.bin?.vllm ?? "vllm", "serve", opts.modelPath, "--host", opts.host, "--port", port];
  cmd.push("--served-model-name", ...a.served_names);
  cmd.push("--tensor-parallel-size", String(gpusPerShard(a)));
  if (size <= 1) return { cmd };
  const need = ENGINE_RANGES.vllm.multiNode;
  if (!newer(need))
    throw new LaunchError(
      `replica ${a.id}: vLLM ${version} needs Ray for multi-node; llmgw supports multi-node vLLM from ${need} on (the mp backend's --nnodes/--node-rank/--master-addr/--headless, vLLM PR #23691); upgrade vLLM on every node of the replica, or give the profile nodes: 1`,
    );
  // "Running vLLM with MultiProcessing" (docs/serving/parallelism_scaling.md): tensor
  // parallel within a node, pipeline parallel across nodes, every node runs `vllm serve`
  // with --nnodes/--node-rank/--master-addr, the others with --headless (no API server).
  // --master-port defaults to 29501, so ours is passed.
  cmd.push("--pipeline-parallel-size", String(size));
  cmd.push("--distributed-executor-backend", "mp");
  cmd.push("--nnodes", String(size), "--node-rank", String(rank));
  cmd.push("--master-addr", a.shard.leader_address, "--master-port", String(a.shard.leader_port));
  if (rank === 0) return { cmd };
  cmd.push("--headless");
  return { cmd, servesHttp: false };
}

function sglangCommand({ a, opts, newer, key, port }: Template): Rendered {
  const { rank, size } = a.shard;
  let servesHttp = true;
  let checksKey = true;
  // SGLang's server arguments (docs/advanced_features/server_arguments.md): --tp-size is the
  // tensor-parallel size across all nodes; --served-model-name takes a single string, so the
  // aliases are left to the router. --enable-metrics turns on /metrics, which is off by default.
  const cmd = [opts.bin?.python ?? "python3", "-m", "sglang.launch_server", "--model-path", opts.modelPath];
  cmd.push("--host", opts.host, "--port", port, "--served-model-name", a.served_names[0]!);
  cmd.push("--tp-size", String(gpusPerShard(a) * size), "--enable-metrics");
  if (size > 1) {
    // Multi-node tensor parallelism per SGLang's multi-node deployment docs: every node runs
    // launch_server with the same --tp, --nnodes, its --node-rank, and the leader's
    // --dist-init-addr host:port. SGLang takes the ports after it too (PortArgs.init_new:
    // dist_init_port+1 … +6), which the control plane keeps free as one block per replica.
    cmd.push("--nnodes", String(size), "--node-rank", String(rank));
    cmd.push("--dist-init-addr", hostPort(a.shard.leader_address, a.shard.leader_port));
    if (rank > 0) {
      // Its /health (without a key: SGLang's auth exempts /health) answers once the rank's
      // schedulers are up, where the version serves one; otherwise it is watched for life.
      checksKey = false;
      servesHttp = newer(ENGINE_RANGES.sglang.rankHealth);
    }
  } else if (sglangDpAttention(a)) {
    // Alone, SGLang with DP attention would bind 127.0.0.1:--port+233 and the ports after it,
    // outside anything kept free for it (protocol/engine-ports.ts): it gets its block instead.
    cmd.push("--dist-init-addr", hostPort("127.0.0.1", a.shard.leader_port));
  }
  if (key !== null && checksKey) cmd.push("--api-key", key);
  return { cmd, servesHttp, checksKey };
}

function llamaCommand({ a, opts, newer, port }: Template): Rendered {
  const size = a.shard.size;
  if (size > 1)
    throw new LaunchError(`replica ${a.id}: llama.cpp cannot run one replica across ${size} nodes; give the model's llama.cpp profile nodes: 1`);
  const names = a.served_names;
  const cmd = [opts.bin?.llamaServer ?? "llama-server", "-m", opts.modelPath, "--host", opts.host, "--port", port];
  if (newer(ENGINE_RANGES["llama.cpp"].aliasList)) {
    // The list splits on ",", so a name with a comma in it would silently become two.
    const bad = names.find((n) => n.includes(","));
    if (bad !== undefined) throw new LaunchError(`replica ${a.id}: llama.cpp cannot serve the name "${bad}" because --alias splits names on ","`);
    cmd.push("--alias", names.join(","), "--metrics");
  } else cmd.push("--alias", names[0]!, "-ngl", "999", "--metrics");
  return { cmd };
}

function fakeCommand({ a, opts, port }: Template): Rendered {
  const rank = a.shard.rank;
  const self = typeof opts.selfExe === "string" ? [opts.selfExe] : [...opts.selfExe];
  if (self.length === 0) throw new LaunchError("selfExe is empty: cannot run the built-in fake engine");
  // Only rank 0 serves the replica's port: further shards of a simulated multi-node replica
  // share an address with it on one machine, so they take any free port and are watched
  // for liveness, like vLLM's headless workers.
  const cmd = [...self, "fake-engine", "--port", rank === 0 ? port : "0", "--host", opts.host];
  for (const n of a.served_names) cmd.push("--model", n);
  return { cmd, servesHttp: rank === 0 };
}

function gpusPerShard(a: Assignment): number {
  return Math.max(1, a.gpus.length);
}

/** MIG instance UUIDs: "MIG-<uuid>", or "MIG-GPU-<card uuid>/<gi>/<ci>" from drivers before R470. */
function isMigUuid(uuid: string): boolean {
  return /^MIG-/i.test(uuid);
}

function smiIndexOf(a: Assignment, opts: LaunchOptions, uuid: string): number {
  const i = opts.smiIndex?.[uuid];
  if (i === undefined)
    throw new LaunchError(
      `replica ${a.id}: GPU ${uuid} has no nvidia-smi index in this node's inventory, and vLLM takes GPUs by index only (it rejects UUIDs in CUDA_VISIBLE_DEVICES); the agent rediscovers its GPUs every 30 s`,
    );
  return i;
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
