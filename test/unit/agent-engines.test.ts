// Pins the exact command line and environment each engine gets for an assignment, single- and
// multi-node, so a change to a launch template is a visible diff here.

import { describe, expect, test } from "bun:test";
import { engineAuthWarning, HEALTH_TIMEOUT_MS, LaunchError, renderLaunch, type LaunchOptions } from "../../src/agent/engines";
import { Assignment } from "../../src/protocol/heartbeat";

// nvidia-smi numbers the cards in PCI bus order, which need not be the placement's order.
const smiIndex = { "GPU-aaaa": 2, "GPU-bbbb": 0, "GPU-cccc": 5 };
const opts: LaunchOptions = { host: "0.0.0.0", modelPath: "/models/llama-3-8b", selfExe: "/usr/local/bin/llmgw", smiIndex };
const VLLM_GPUS = { CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: "2,0" };

function assignment(over: Partial<Omit<Assignment, "shard">> & { shard?: Partial<Assignment["shard"]> } = {}): Assignment {
  const { shard, ...rest } = over;
  return Assignment.parse({
    id: "r-1",
    model: "llama-3-8b",
    served_names: ["llama-3-8b", "llama3"],
    profile: "default",
    engine: "vllm",
    port: 8100,
    gpus: [0, 1],
    gpu_uuids: ["GPU-aaaa", "GPU-bbbb"],
    ...rest,
    shard: { rank: 0, size: 1, leader_address: "", leader_port: 29500, ...shard },
  });
}

describe("vllm", () => {
  test("single node: tensor parallel over the shard's GPUs, every served name", () => {
    const l = renderLaunch(assignment(), opts);
    expect(l.cmd).toEqual([
      "vllm", "serve", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b", "llama3",
      "--tensor-parallel-size", "2",
    ]);
    expect(l.env).toEqual(VLLM_GPUS);
    expect(l.servesHttp).toBe(true);
  });

  test("multi-node leader: pipeline parallel across nodes with the mp backend", () => {
    const l = renderLaunch(assignment({ shard: { rank: 0, size: 2, leader_address: "10.0.0.5", leader_port: 29600 } }), opts);
    expect(l.cmd).toEqual([
      "vllm", "serve", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b", "llama3",
      "--tensor-parallel-size", "2",
      "--pipeline-parallel-size", "2",
      "--distributed-executor-backend", "mp",
      "--nnodes", "2", "--node-rank", "0",
      "--master-addr", "10.0.0.5", "--master-port", "29600",
    ]);
    expect(l.servesHttp).toBe(true);
  });

  test("multi-node worker runs headless and serves no HTTP", () => {
    const l = renderLaunch(assignment({ shard: { rank: 2, size: 3, leader_address: "10.0.0.5", leader_port: 29600 } }), opts);
    expect(l.cmd).toEqual([
      "vllm", "serve", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b", "llama3",
      "--tensor-parallel-size", "2",
      "--pipeline-parallel-size", "3",
      "--distributed-executor-backend", "mp",
      "--nnodes", "3", "--node-rank", "2",
      "--master-addr", "10.0.0.5", "--master-port", "29600",
      "--headless",
    ]);
    expect(l.servesHttp).toBe(false);
  });

  test("catalog args come last and catalog env is added", () => {
    const l = renderLaunch(
      assignment({ args: ["--max-model-len", "8192", "--enforce-eager"], env: { VLLM_LOGGING_LEVEL: "DEBUG", HF_HUB_OFFLINE: "1" } }),
      opts,
    );
    expect(l.cmd.slice(-3)).toEqual(["--max-model-len", "8192", "--enforce-eager"]);
    expect(l.cmd.indexOf("--tensor-parallel-size")).toBeLessThan(l.cmd.indexOf("--max-model-len"));
    expect(l.env).toEqual({ VLLM_LOGGING_LEVEL: "DEBUG", HF_HUB_OFFLINE: "1", ...VLLM_GPUS });
  });

  test("multi-node catalog args still come after the rank flags", () => {
    const l = renderLaunch(
      assignment({ args: ["--dtype", "bfloat16"], shard: { rank: 1, size: 2, leader_address: "10.0.0.5", leader_port: 29600 } }),
      opts,
    );
    expect(l.cmd.slice(-3)).toEqual(["--headless", "--dtype", "bfloat16"]);
  });

  test("a custom vllm executable (e.g. in a virtualenv)", () => {
    const l = renderLaunch(assignment(), { ...opts, bin: { vllm: "/opt/venv/bin/vllm" } });
    expect(l.cmd[0]).toBe("/opt/venv/bin/vllm");
  });
});

describe("sglang", () => {
  test("single node: one served name, tp over the shard's GPUs, metrics on", () => {
    const l = renderLaunch(assignment({ engine: "sglang" }), opts);
    expect(l.cmd).toEqual([
      "python3", "-m", "sglang.launch_server",
      "--model-path", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b",
      "--tp-size", "2", "--enable-metrics",
    ]);
    expect(l.env).toEqual({ CUDA_VISIBLE_DEVICES: "GPU-aaaa,GPU-bbbb" });
    expect(l.servesHttp).toBe(true);
  });

  test("multi-node: tp is the total across nodes, rank and init address of the leader", () => {
    const a = assignment({ engine: "sglang", gpus: [0, 1, 2, 3], gpu_uuids: ["G0", "G1", "G2", "G3"] });
    const lead = renderLaunch({ ...a, shard: { rank: 0, size: 2, leader_address: "10.0.0.5", leader_port: 20000 } }, opts);
    expect(lead.cmd).toEqual([
      "python3", "-m", "sglang.launch_server",
      "--model-path", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b",
      "--tp-size", "8", "--enable-metrics",
      "--nnodes", "2", "--node-rank", "0",
      "--dist-init-addr", "10.0.0.5:20000",
    ]);
    expect(lead.servesHttp).toBe(true);
    const worker = renderLaunch({ ...a, shard: { rank: 1, size: 2, leader_address: "10.0.0.5", leader_port: 20000 } }, opts);
    expect(worker.cmd.slice(-6)).toEqual(["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.5:20000"]);
    // Rank >= 1 serves /health on its --port once ready (newest template: no version given).
    expect(worker.servesHttp).toBe(true);
  });

  test("an IPv6 leader address is bracketed", () => {
    const l = renderLaunch(assignment({ engine: "sglang", shard: { rank: 1, size: 2, leader_address: "fd00::5", leader_port: 20000 } }), opts);
    expect(l.cmd).toContain("[fd00::5]:20000");
  });

  test("DP attention on one node: its dist-init address is the replica's rendezvous block on loopback, not --port + 233", () => {
    const l = renderLaunch(assignment({ engine: "sglang", args: ["--enable-dp-attention", "--dp-size", "2"], shard: { leader_port: 9016 } }), opts);
    expect(l.cmd).toEqual([
      "python3", "-m", "sglang.launch_server", "--model-path", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100", "--served-model-name", "llama-3-8b",
      "--tp-size", "2", "--enable-metrics",
      "--dist-init-addr", "127.0.0.1:9016",
      "--enable-dp-attention", "--dp-size", "2",
    ]);
    // Without DP attention a single-node SGLang binds nothing there: no address given.
    expect(renderLaunch(assignment({ engine: "sglang", args: ["--dp-size", "2"] }), opts).cmd).not.toContain("--dist-init-addr");
  });

  test("args and env appended", () => {
    const l = renderLaunch(assignment({ engine: "sglang", args: ["--mem-fraction-static", "0.8"], env: { NCCL_DEBUG: "INFO" } }), opts);
    expect(l.cmd.slice(-2)).toEqual(["--mem-fraction-static", "0.8"]);
    expect(l.env).toEqual({ NCCL_DEBUG: "INFO", CUDA_VISIBLE_DEVICES: "GPU-aaaa,GPU-bbbb" });
  });
});

describe("llama.cpp", () => {
  test("gguf file, all names as one comma-separated alias, layers left to llama.cpp's fitting, metrics on", () => {
    const l = renderLaunch(
      assignment({ engine: "llama.cpp", gpus: [3], gpu_uuids: ["GPU-cccc"], args: ["-c", "8192"] }),
      { ...opts, modelPath: "/models/qwen.Q4_K_M.gguf" },
    );
    expect(l.cmd).toEqual([
      "llama-server", "-m", "/models/qwen.Q4_K_M.gguf",
      "--host", "0.0.0.0", "--port", "8100",
      "--alias", "llama-3-8b,llama3",
      "--metrics",
      "-c", "8192",
    ]);
    expect(l.env).toEqual({ CUDA_VISIBLE_DEVICES: "GPU-cccc" });
  });

  test("multi-node is rejected with a clear error", () => {
    const a = assignment({ engine: "llama.cpp", shard: { rank: 0, size: 2, leader_address: "10.0.0.5" } });
    expect(() => renderLaunch(a, opts)).toThrow(LaunchError);
    expect(() => renderLaunch(a, opts)).toThrow(/llama\.cpp cannot run one replica across 2 nodes/);
  });

  test("a served name containing a comma is rejected rather than split (no catalog name has one)", () => {
    const a = assignment({ engine: "llama.cpp", served_names: ["a,b"] });
    expect(() => renderLaunch(a, opts)).toThrow(/served_names\[0\] "a,b": may contain only letters/);
  });
});

describe("fake", () => {
  test("runs this binary's fake-engine with every name", () => {
    const l = renderLaunch(assignment({ engine: "fake", gpus: [], gpu_uuids: [] }), opts);
    expect(l.cmd).toEqual([
      "/usr/local/bin/llmgw", "fake-engine", "--port", "8100", "--host", "0.0.0.0",
      "--model", "llama-3-8b", "--model", "llama3",
    ]);
    expect(l.env).toEqual({ CUDA_VISIBLE_DEVICES: "" });
  });

  test("selfExe may be several words (bun plus the entry file)", () => {
    const l = renderLaunch(assignment({ engine: "fake", args: ["--latency", "5ms"] }), { ...opts, selfExe: ["bun", "src/main.ts"] });
    expect(l.cmd).toEqual([
      "bun", "src/main.ts", "fake-engine", "--port", "8100", "--host", "0.0.0.0",
      "--model", "llama-3-8b", "--model", "llama3", "--latency", "5ms",
    ]);
  });

  test("an empty selfExe is an error", () => {
    expect(() => renderLaunch(assignment({ engine: "fake" }), { ...opts, selfExe: [] })).toThrow(LaunchError);
  });
});

describe("environment and validation", () => {
  test("a MIG instance is passed by its UUID to the engines that take one", () => {
    const mig = "MIG-4b6f3c1e-7a2d-5e8f-9c0b-1d2e3f4a5b6c";
    for (const engine of ["sglang", "llama.cpp"] as const) {
      const l = renderLaunch(assignment({ engine, gpus: [4], gpu_uuids: [mig] }), opts);
      expect(l.env).toEqual({ CUDA_VISIBLE_DEVICES: mig });
    }
  });

  test("the catalog cannot override the GPUs placement chose: an env that tries starts nothing", () => {
    expect(() => renderLaunch(assignment({ env: { CUDA_VISIBLE_DEVICES: "0,1,2,3,4,5,6,7" } }), opts)).toThrow(/env\.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is refused/);
    expect(() => renderLaunch(assignment({ engine: "sglang", env: { CUDA_DEVICE_ORDER: "FASTEST_FIRST" } }), opts)).toThrow(/env\.CUDA_DEVICE_ORDER: CUDA_DEVICE_ORDER is refused/);
    expect(renderLaunch(assignment({ env: { NCCL_DEBUG: "INFO" } }), opts).env).toEqual({ NCCL_DEBUG: "INFO", ...VLLM_GPUS });
  });

  test("arguments are never joined into a shell string", () => {
    const l = renderLaunch(assignment({ served_names: ["m"], args: ["--chat-template", "a b; rm -rf /"] }), opts);
    expect(l.cmd).toContain("a b; rm -rf /");
  });

  test("GPU indices and UUIDs must pair up", () => {
    expect(() => renderLaunch(assignment({ gpus: [0, 1], gpu_uuids: ["GPU-aaaa"] }), opts)).toThrow(/one UUID per GPU/);
  });

  test("a rank outside the shard size is rejected", () => {
    expect(() => renderLaunch(assignment({ shard: { rank: 2, size: 2, leader_address: "10.0.0.5" } }), opts)).toThrow(/rank 2/);
  });

  test("a multi-node shard needs the leader's address", () => {
    expect(() => renderLaunch(assignment({ shard: { rank: 1, size: 2, leader_address: "" } }), opts)).toThrow(/leader's address/);
  });

  test("a shard with no GPUs still asks vLLM for tensor parallel size 1", () => {
    const l = renderLaunch(assignment({ gpus: [], gpu_uuids: [] }), opts);
    expect(l.cmd).toContain("--tensor-parallel-size");
    expect(l.cmd[l.cmd.indexOf("--tensor-parallel-size") + 1]).toBe("1");
  });
});

describe("engine keys", () => {
  const KEY = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  const keyed = (over: Parameters<typeof assignment>[0] = {}) => assignment({ engine_key: KEY, ...over });
  const everywhere = (l: { cmd: string[]; env: Record<string, string> }) => [...l.cmd, ...Object.values(l.env)].filter((v) => v.includes(KEY));

  test("vLLM takes the key from VLLM_API_KEY, never from the command line", () => {
    const l = renderLaunch(keyed(), opts);
    expect(l.env.VLLM_API_KEY).toBe(KEY);
    expect(l.cmd.some((c) => c.includes(KEY) || c === "--api-key")).toBe(false);
    expect(l.apiKey).toBe(KEY);
  });

  test("llama-server takes the key from LLAMA_API_KEY, never from the command line", () => {
    const l = renderLaunch(keyed({ engine: "llama.cpp" }), { ...opts, modelPath: "/models/m.gguf" });
    expect(l.env.LLAMA_API_KEY).toBe(KEY);
    expect(l.cmd.some((c) => c.includes(KEY) || c === "--api-key")).toBe(false);
    expect(l.apiKey).toBe(KEY);
  });

  test("SGLang, which reads no environment variable for it, gets --api-key before the profile's args", () => {
    const l = renderLaunch(keyed({ engine: "sglang", args: ["--mem-fraction-static", "0.8"] }), opts);
    expect(l.cmd.slice(-4)).toEqual(["--api-key", KEY, "--mem-fraction-static", "0.8"]);
    expect(Object.values(l.env)).not.toContain(KEY);
    expect(l.apiKey).toBe(KEY);
  });

  test("the fake engine takes it from LLMGW_FAKE_ENGINE_API_KEY", () => {
    const l = renderLaunch(keyed({ engine: "fake", gpus: [], gpu_uuids: [] }), opts);
    expect(l.env).toEqual({ CUDA_VISIBLE_DEVICES: "", LLMGW_FAKE_ENGINE_API_KEY: KEY });
    expect(l.cmd.some((c) => c.includes(KEY))).toBe(false);
  });

  test("shards that take no requests are not given the key", () => {
    const worker = { rank: 1, size: 2, leader_address: "10.0.0.5", leader_port: 29600 };
    for (const engine of ["vllm", "sglang", "fake"] as const) {
      const l = renderLaunch(keyed({ engine, shard: worker }), opts);
      // SGLang's rank 1 serves only /health, which its auth leaves open: probed without a key.
      expect(l.servesHttp).toBe(engine === "sglang");
      expect(everywhere(l)).toEqual([]);
      expect(l.apiKey).toBeNull();
    }
  });

  test("the profile's env cannot replace the replica's key: such an assignment starts nothing", () => {
    expect(() => renderLaunch(keyed({ env: { VLLM_API_KEY: "operator-chosen-key-0000", HF_TOKEN: "hf_x" } }), opts)).toThrow(/env\.VLLM_API_KEY: VLLM_API_KEY is refused: llmgw sets it/);
    expect(renderLaunch(keyed({ env: { HF_TOKEN: "hf_x" } }), opts).env).toMatchObject({ VLLM_API_KEY: KEY, HF_TOKEN: "hf_x" });
  });

  test("a profile that sets --api-key itself is refused while engine auth is on", () => {
    expect(() => renderLaunch(keyed({ args: ["--api-key", "mine"] }), opts)).toThrow(/--api-key.*remove it from the profile/);
    expect(() => renderLaunch(keyed({ engine: "sglang", args: ["--api-key=mine"] }), opts)).toThrow(LaunchError);
    // Off, the profile's args are the operator's business.
    expect(renderLaunch(keyed({ args: ["--api-key", "mine"] }), { ...opts, engineAuth: false }).cmd.slice(-2)).toEqual(["--api-key", "mine"]);
  });

  test("--engine-auth off: no engine gets a key", () => {
    for (const engine of ["vllm", "sglang", "llama.cpp", "fake"] as const) {
      const l = renderLaunch(keyed({ engine, gpus: [], gpu_uuids: [] }), { ...opts, engineAuth: false });
      expect(everywhere(l)).toEqual([]);
      expect(l.cmd).not.toContain("--api-key");
      expect(l.apiKey).toBeNull();
    }
  });

  test("an assignment without a key (a head node that sends none) starts engines without one", () => {
    const l = renderLaunch(assignment(), opts);
    expect(l.env.VLLM_API_KEY).toBeUndefined();
    expect(l.apiKey).toBeNull();
  });

  test("engine auth off is warned about with a reason; on says nothing", () => {
    expect(engineAuthWarning(true)).toBeUndefined();
    const w = engineAuthWarning(false)!;
    expect(w.fields.engine_auth).toBe("off");
    expect(w.fields.reason).toMatch(/without a key/);
    expect(w.message).toMatch(/private network|benchmarks/);
  });
});

describe("templates by engine version", () => {
  const multi = (rank: number) => ({ shard: { rank, size: 2, leader_address: "10.0.0.5", leader_port: 29600 } });
  const MIG1 = "MIG-4b6f3c1e-7a2d-5e8f-9c0b-1d2e3f4a5b6c";
  const MIG2 = "MIG-5c7a4d2f-8b3e-6f9a-0d1c-2e3f4a5b6c7d";

  test("vLLM 0.10.1.1 single node: nvidia-smi indices in PCI bus order, never UUIDs", () => {
    const l = renderLaunch(assignment(), { ...opts, version: "0.10.1.1" });
    expect(l.cmd).toEqual([
      "vllm", "serve", "/models/llama-3-8b", "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b", "llama3", "--tensor-parallel-size", "2",
    ]);
    expect(l.env).toEqual({ CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: "2,0" });
  });

  test("vLLM before 0.12.0 refuses multi-node, naming its version and the one needed, before anything starts", () => {
    for (const version of ["0.10.1.1", "0.11.0", "0.11.2", "0.12.0rc1"])
      for (const rank of [0, 1])
        expect(() => renderLaunch(assignment(multi(rank)), { ...opts, version })).toThrow(
          `replica r-1: vLLM ${version} needs Ray for multi-node; llmgw supports multi-node vLLM from 0.12.0 on (the mp backend's --nnodes/--node-rank/--master-addr/--headless, vLLM PR #23691); upgrade vLLM on every node of the replica, or give the profile nodes: 1`,
        );
  });

  test("vLLM 0.12.0 multi-node: the mp flags, rank > 0 headless", () => {
    const lead = renderLaunch(assignment(multi(0)), { ...opts, version: "0.12.0" });
    expect(lead.cmd).toEqual([
      "vllm", "serve", "/models/llama-3-8b", "--host", "0.0.0.0", "--port", "8100",
      "--served-model-name", "llama-3-8b", "llama3", "--tensor-parallel-size", "2",
      "--pipeline-parallel-size", "2", "--distributed-executor-backend", "mp",
      "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.5", "--master-port", "29600",
    ]);
    expect(lead.env).toEqual({ CUDA_DEVICE_ORDER: "PCI_BUS_ID", CUDA_VISIBLE_DEVICES: "2,0" });
    const worker = renderLaunch(assignment(multi(1)), { ...opts, version: "0.12.0" });
    expect(worker.cmd.slice(-1)).toEqual(["--headless"]);
    expect(worker.servesHttp).toBe(false);
  });

  test("vLLM on a MIG device is refused with the reason, on every version", () => {
    for (const version of ["0.10.1.1", "0.12.0", undefined])
      expect(() => renderLaunch(assignment({ gpus: [4], gpu_uuids: [MIG1] }), { ...opts, version })).toThrow(
        /vLLM( [\d.]+)? cannot run on a MIG device: it reads CUDA_VISIBLE_DEVICES as integers \(vLLM #41848\)/,
      );
  });

  test("a placed GPU without an nvidia-smi index is refused for vLLM rather than passed as a UUID", () => {
    expect(() => renderLaunch(assignment({ gpus: [0], gpu_uuids: ["GPU-zzzz"] }), { ...opts, version: "0.10.1.1" })).toThrow(
      /GPU GPU-zzzz has no nvidia-smi index in this node's inventory, and vLLM takes GPUs by index only/,
    );
  });

  test("a version older than every template, an unreadable one and an unknown one are refused, naming it", () => {
    expect(() => renderLaunch(assignment(), { ...opts, version: "0.5.4" })).toThrow(
      "replica r-1: vLLM 0.5.4 is older than any launch template llmgw has (it supports vLLM 0.6.0 and newer); upgrade it on this node",
    );
    expect(() => renderLaunch(assignment({ engine: "sglang" }), { ...opts, version: "0.3.6" })).toThrow(/SGLang 0\.3\.6 is older than any launch template llmgw has \(it supports SGLang 0\.4\.0 and newer\)/);
    expect(() => renderLaunch(assignment({ engine: "llama.cpp" }), { ...opts, version: "b3000" })).toThrow(/llama\.cpp b3000 is older than any launch template llmgw has \(it supports llama\.cpp b4000 and newer\)/);
    expect(() => renderLaunch(assignment(), { ...opts, version: "nightly" })).toThrow(/vLLM version "nightly" is not one llmgw can read; state it with --vllm-version/);
    expect(() => renderLaunch(assignment({ engine: "sglang" }), { ...opts, version: null, versionError: "not installed: python3 not found" })).toThrow(
      "replica r-1: SGLang's version on this node is unknown: not installed: python3 not found; llmgw picks the command line by version, so it starts no engine it cannot place in a range (install it, point --sglang-python at it, or state it with --sglang-version)",
    );
  });

  test("SGLang rank >= 1 is health-checked on its port from 0.4.3.post4, only watched before", () => {
    const worker = { ...assignment({ engine: "sglang", engine_key: "k".repeat(32) }), ...multi(1) };
    const cmd = [
      "python3", "-m", "sglang.launch_server", "--model-path", "/models/llama-3-8b",
      "--host", "0.0.0.0", "--port", "8100", "--served-model-name", "llama-3-8b",
      "--tp-size", "4", "--enable-metrics",
      "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.5:29600",
    ];
    const newer = renderLaunch(worker, { ...opts, version: "0.4.3.post4" });
    expect(newer).toEqual({ cmd, env: { CUDA_VISIBLE_DEVICES: "GPU-aaaa,GPU-bbbb" }, servesHttp: true, apiKey: null });
    const older = renderLaunch(worker, { ...opts, version: "0.4.3" });
    expect(older).toEqual({ cmd, env: { CUDA_VISIBLE_DEVICES: "GPU-aaaa,GPU-bbbb" }, servesHttp: false, apiKey: null });
    const lead = renderLaunch({ ...worker, ...multi(0) }, { ...opts, version: "0.4.3" });
    expect(lead.cmd.slice(-2)).toEqual(["--api-key", "k".repeat(32)]);
    expect(lead.servesHttp).toBe(true);
  });

  test("llama-server before b8173: the first name only and -ngl 999; from b8173 every name and its own fitting", () => {
    const a = assignment({ engine: "llama.cpp", gpus: [3], gpu_uuids: ["GPU-cccc"] });
    const o = { ...opts, modelPath: "/models/m.gguf" };
    const base = ["llama-server", "-m", "/models/m.gguf", "--host", "0.0.0.0", "--port", "8100"];
    for (const version of ["b6869", "b8172"]) expect(renderLaunch(a, { ...o, version }).cmd).toEqual([...base, "--alias", "llama-3-8b", "-ngl", "999", "--metrics"]);
    for (const version of ["b8173", "b10991"]) expect(renderLaunch(a, { ...o, version }).cmd).toEqual([...base, "--alias", "llama-3-8b,llama3", "--metrics"]);
    expect(renderLaunch(a, { ...o, version: "b6869" }).env).toEqual({ CUDA_VISIBLE_DEVICES: "GPU-cccc" });
    // No catalog name holds the comma a newer build's list splits on: refused on every build.
    for (const version of ["b6869", "b8173"]) expect(() => renderLaunch(assignment({ engine: "llama.cpp", served_names: ["a,b"] }), { ...o, version })).toThrow(/served_names\[0\] "a,b"/);
  });

  test("more than one MIG device for one engine is refused on every engine", () => {
    for (const engine of ["vllm", "sglang", "llama.cpp"] as const)
      expect(() => renderLaunch(assignment({ engine, gpus: [4, 5], gpu_uuids: [MIG1, MIG2] }), opts)).toThrow(
        "replica r-1: 2 MIG devices for one engine, but a CUDA process can use only one MIG device; give the profile gpus: 1 for a MIG class, or use whole GPUs",
      );
  });

  test("health probe timeouts: at least 5 s for SGLang, whose /health generates a token", () => {
    expect(HEALTH_TIMEOUT_MS.sglang).toBeGreaterThanOrEqual(5_000);
    expect([HEALTH_TIMEOUT_MS.vllm, HEALTH_TIMEOUT_MS["llama.cpp"], HEALTH_TIMEOUT_MS.fake]).toEqual([2_000, 2_000, 2_000]);
  });
});

describe("what a head node sends is checked as the head node checks a catalog, before anything starts", () => {
  const engines = ["vllm", "sglang", "llama.cpp", "fake"] as const;
  const refusal = (a: Assignment): string => {
    try {
      renderLaunch(a, { ...opts, modelPath: "/models/m.gguf" });
    } catch (e) {
      expect(e).toBeInstanceOf(LaunchError);
      return (e as Error).message;
    }
    throw new Error(`rendered: ${JSON.stringify(a)}`);
  };

  test("an env variable that loads code into the engine, or one llmgw sets, is refused by name on every engine, its value never quoted", () => {
    for (const engine of engines)
      for (const name of ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "PYTHONPATH", "PYTHONSTARTUP", "NODE_OPTIONS", "GCONV_PATH", "CUDA_VISIBLE_DEVICES", "LLAMA_API_KEY"]) {
        const m = refusal(assignment({ engine, env: { HF_TOKEN: "hf_secret", [name]: "/tmp/evil-value" } }));
        expect(m).toStartWith(`replica r-1 not started: env.${name}: ${name} is refused: `);
        expect(m).not.toContain("/tmp/evil-value");
        expect(m).not.toContain("hf_secret");
      }
  });

  test("a served name, alias or profile that would read as a flag (--trust-remote-code was injected this way) is refused, quoted", () => {
    for (const engine of engines) {
      expect(refusal(assignment({ engine, served_names: ["--trust-remote-code"] }))).toStartWith('replica r-1 not started: served_names[0] "--trust-remote-code": may contain only letters');
      expect(refusal(assignment({ engine, served_names: ["llama-3-8b", "-x"] }))).toStartWith('replica r-1 not started: served_names[1] "-x": ');
      expect(refusal(assignment({ engine, profile: "--enforce-eager" }))).toContain('profile "--enforce-eager": ');
    }
    // Names the catalog accepts are not refused: dots, colons, slashes inside.
    expect(renderLaunch(assignment({ served_names: ["org/llama-3.1:8b", "l3"] }), opts).cmd).toContain("org/llama-3.1:8b");
  });

  test("a leader address that would read as a flag, and a GPU uuid that would name two devices, are refused", () => {
    const shard = { rank: 1, size: 2, leader_port: 29600 };
    expect(refusal(assignment({ shard: { ...shard, leader_address: "--trust-remote-code" } }))).toContain('shard.leader_address "--trust-remote-code": must be an IP address or a host name');
    expect(refusal(assignment({ engine: "sglang", shard: { ...shard, leader_address: "-h" } }))).toContain("shard.leader_address");
    expect(refusal(assignment({ engine: "sglang", gpu_uuids: ["GPU-aaaa,GPU-cccc", "GPU-bbbb"] }))).toContain(`gpu_uuids[0] "GPU-aaaa,GPU-cccc": must not contain ','`);
    for (const leader of ["10.0.0.5", "fd00::5", "gpu-01.example", "[fd00::5]"]) expect(() => renderLaunch(assignment({ engine: "sglang", shard: { ...shard, leader_address: leader } }), opts)).not.toThrow();
  });

  test("args stay the catalog's to choose (flags are what they are for), within its limits", () => {
    expect(renderLaunch(assignment({ args: ["--trust-remote-code"] }), opts).cmd.at(-1)).toBe("--trust-remote-code");
    expect(refusal(assignment({ args: ["x".repeat(4097)] }))).toContain("args[0]: ");
    expect(refusal(assignment({ args: ["x".repeat(4097)] }))).not.toContain("xxxx");
  });
});
