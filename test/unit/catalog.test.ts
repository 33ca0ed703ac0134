// The catalog schema: defaults, every field checked with its path, names and aliases one
// namespace across the file.

import { describe, expect, test } from "bun:test";
import { CatalogFile, ModelSpec } from "../../src/protocol/catalog";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ENGINE_ENV_REFUSED, refusedEngineEnvNames } from "../../src/protocol/engine-env";

const paths = (r: { success: boolean; error?: { issues: { path: PropertyKey[] }[] } }) => r.error?.issues.map((i) => i.path.join(".")) ?? [];

describe("model spec", () => {
  test("the issue's example parses, with defaults filled", () => {
    const yaml = `
models:
  - name: llama-3.1-8b
    aliases: [llama3-8b]
    replicas: {min: 1, max: 2}
    on_demand: false
    idle_timeout: 30m
    pool: default
    weight: 1
    placement: binpack
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1, nodes: 1, priority: 0,
         args: ["--max-model-len", "8192"], env: {}}
`;
    const c = CatalogFile.parse(Bun.YAML.parse(yaml));
    expect(c.models[0]!.idle_timeout).toBe(30 * 60_000);
    expect(c.models[0]!.replicas).toEqual({ min: 1, max: 2 });
    expect(c.models[0]!.profiles[0]!.args).toEqual(["--max-model-len", "8192"]);
  });

  test("max defaults to min, and to 1 for an on-demand model with min 0", () => {
    expect(ModelSpec.parse({ name: "a", replicas: { min: 3 }, profiles: [{ name: "p", engine: "fake", gpu_class: "X" }] }).replicas).toEqual({ min: 3, max: 3 });
    expect(ModelSpec.parse({ name: "a", on_demand: true, replicas: { min: 0 }, profiles: [{ name: "p", engine: "fake", gpu_class: "X" }] }).replicas).toEqual({ min: 0, max: 1 });
  });

  test("each problem has its path", () => {
    const r = ModelSpec.safeParse({
      name: "",
      replicas: { min: 3, max: 1 },
      idle_timeout: "later",
      weight: -1,
      surprise: true,
      profiles: [
        { name: "p", engine: "tgi", gpu_class: "X", gpus: 0 },
        { name: "p", engine: "llama.cpp", gpu_class: "X", nodes: 2, env: { "bad name": "x" } },
      ],
    });
    expect(r.success).toBe(false);
    expect(paths(r)).toEqual(
      expect.arrayContaining(["name", "idle_timeout", "weight", "profiles.0.engine", "profiles.0.gpus", "profiles.1.env.bad name", ""]),
    );
    const r2 = ModelSpec.safeParse({ name: "a", replicas: { min: 3, max: 1 }, aliases: ["a"], profiles: [{ name: "p", engine: "fake", gpu_class: "X" }, { name: "p", engine: "llama.cpp", gpu_class: "X", nodes: 2 }] });
    expect(paths(r2)).toEqual(expect.arrayContaining(["replicas.max", "aliases.0", "profiles.1.name", "profiles.1.nodes"]));
  });

  test("a profile's start_timeout is a duration, optional (absent: the server's --start-timeout)", () => {
    const m = ModelSpec.parse({ name: "a", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", start_timeout: "45m" }, { name: "q", engine: "vllm", gpu_class: "X" }] });
    expect(m.profiles[0]!.start_timeout).toBe(45 * 60_000);
    expect(m.profiles[1]!.start_timeout).toBeUndefined();
    expect(paths(ModelSpec.safeParse({ name: "a", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", start_timeout: "soon" }] }))).toEqual(["profiles.0.start_timeout"]);
    // The agent is told it in milliseconds and needs a positive number.
    expect(paths(ModelSpec.safeParse({ name: "a", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", start_timeout: "0s" }] }))).toEqual(["profiles.0.start_timeout"]);
  });

  test("gpus > 1 of a MIG class is refused: one CUDA process can use only one MIG device", () => {
    const mig = (gpus: number, cls = "A100-80GB/3g.40gb") => ModelSpec.safeParse({ name: "a", profiles: [{ name: "whole", engine: "vllm", gpu_class: "H100-80GB", gpus: 4 }, { name: "mig", engine: "vllm", gpu_class: cls, gpus }] });
    const r = mig(2);
    expect(r.success).toBe(false);
    expect(r.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`)).toEqual([
      "profiles.1.gpus: one CUDA process can use only one MIG device (NVIDIA MIG user guide): gpus must be 1 for a MIG class",
    ]);
    // A compute instance's class is a MIG class too.
    expect(paths(mig(3, "H200-141GB/1c.3g.71gb"))).toEqual(["profiles.1.gpus"]);
    expect(mig(1).success).toBe(true);
    // And in a catalog file, under the model's own path.
    const f = CatalogFile.safeParse({ models: [{ name: "a", profiles: [{ name: "mig", engine: "sglang", gpu_class: "A100-80GB/1g.10gb", gpus: 2, nodes: 2 }] }] });
    expect(paths(f)).toEqual(["models.0.profiles.0.gpus"]);
  });

  test("SGLang with DP attention: a --dp-size its rendezvous block cannot hold, or a --dist-init-addr of its own, is refused saying why", () => {
    const sglang = (args: string[], nodes = 1, engine = "sglang") => ModelSpec.safeParse({ name: "a", profiles: [{ name: "p", engine, gpu_class: "H100-80GB", gpus: 8, nodes, args }] });
    const r = sglang(["--enable-dp-attention", "--dp-size", "16"]);
    expect(r.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`)).toEqual([
      "profiles.0.args: SGLang with --enable-dp-attention and --dp-size 16 binds its dist-init port, the 5 after it and one port per DP rank after those (PortArgs.init_new); llmgw keeps 16 ports per replica for them, so --dp-size may be at most 10",
    ]);
    // Every spelling of the option, and its = form.
    for (const dp of [["--dp", "11"], ["--data-parallel-size=12"], ["--dp-size=11"]]) expect(paths(sglang(["--enable-dp-attention", ...dp]))).toEqual(["profiles.0.args"]);
    for (const dp of [["--dp-size", "8"], ["--dp", "10"], []]) expect(sglang(["--enable-dp-attention", ...dp]).success).toBe(true);
    // Without DP attention --dp-size binds nothing of the kind (separate engines per rank).
    expect(sglang(["--dp-size", "16"]).success).toBe(true);
    const own = sglang(["--enable-dp-attention", "--dist-init-addr", "127.0.0.1:5000"]);
    expect(own.error!.issues[0]!.message).toStartWith("llmgw gives SGLang its --dist-init-addr itself");
    expect(paths(sglang(["--nccl-init-addr=10.0.0.1:5000"], 2))).toEqual(["profiles.0.args"]);
    // Where llmgw gives none (one node, no DP attention), or for another engine, args are the profile's business.
    expect(sglang(["--dist-init-addr", "127.0.0.1:5000"]).success).toBe(true);
    expect(sglang(["--enable-dp-attention", "--dp-size", "16"], 1, "vllm").success).toBe(true);
  });

  test("revision pins a Hugging Face commit: a full 40-character lowercase hash, nothing shorter or named", () => {
    const base = { name: "org/m", profiles: [{ name: "p", engine: "vllm", gpu_class: "X" }] };
    const rev = "0123456789abcdef0123456789abcdef01234567";
    expect(ModelSpec.parse({ ...base, revision: rev }).revision).toBe(rev);
    expect(ModelSpec.parse(base).revision).toBeUndefined();
    for (const bad of ["main", "0123456", rev.toUpperCase(), `${rev}0`, 12345]) {
      const r = ModelSpec.safeParse({ ...base, revision: bad });
      expect(paths(r)).toEqual(["revision"]);
      expect(r.error!.issues[0]!.message).toContain("40-character");
    }
  });

  test("a profile's env may not set what loads code into the engine, nor what llmgw sets itself: each refused at its path, saying why", () => {
    const refused = [...ENGINE_ENV_REFUSED.flatMap((r) => r.names), "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_"];
    for (const name of refused) {
      const r = ModelSpec.safeParse({ name: "m", profiles: [{ name: "h100", engine: "vllm", gpu_class: "X", env: { HF_TOKEN: "hf_x", [name]: "/tmp/x" } }] });
      expect({ name, ok: r.success }).toEqual({ name, ok: false });
      expect(r.error!.issues.map((i) => i.path.join("."))).toEqual([`profiles.0.env.${name}`]);
      expect(r.error!.issues[0]!.message).toStartWith(`${name} is refused: `);
    }
    expect(ModelSpec.safeParse({ name: "m", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", env: { LD_PRELOAD: "/tmp/evil.so" } }] }).error!.issues[0]!.message).toBe(
      "LD_PRELOAD is refused: the dynamic loader reads it (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT…) and would load libraries of the catalog's choosing into the engine; remove it from the profile; a node whose engines need it sets it in its agent's own environment (engines inherit that)",
    );
    expect(ModelSpec.safeParse({ name: "m", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", env: { CUDA_VISIBLE_DEVICES: "0" } }] }).error!.issues[0]!.message).toStartWith(
      "CUDA_VISIBLE_DEVICES is refused: llmgw sets it to the GPUs placement chose",
    );
    // What engines are tuned with stays allowed: the Hub's token and offline switch, NCCL, vLLM's own, a lower-case name.
    const env = { HF_TOKEN: "hf_x", HF_HUB_OFFLINE: "0", NCCL_DEBUG: "INFO", VLLM_LOGGING_LEVEL: "DEBUG", PYTHONUNBUFFERED: "1", path: "x", TMPDIR: "/scratch" };
    expect(ModelSpec.parse({ name: "m", profiles: [{ name: "p", engine: "vllm", gpu_class: "X", env }] }).profiles[0]!.env).toEqual(env);
  });

  test("the README lists every refused env variable, and no other", () => {
    const readme = readFileSync(join(import.meta.dir, "../../README.md"), "utf8");
    const start = readme.indexOf("A profile's `env` may not set");
    const paragraph = readme.slice(start, readme.indexOf("\n\n", start));
    const listed = [...paragraph.matchAll(/`([A-Z_][A-Z0-9_]*\*?)`/g)].map((m) => m[1]!);
    expect(listed.sort()).toEqual(refusedEngineEnvNames().sort());
  });

  test("a model needs a profile", () => {
    expect(paths(ModelSpec.safeParse({ name: "a", profiles: [] }))).toEqual(["profiles"]);
  });
});

describe("catalog file", () => {
  const p = [{ name: "p", engine: "fake", gpu_class: "X" }];
  test("an alias used by two models, or equal to another model's name, is rejected naming both", () => {
    const r = CatalogFile.safeParse({ models: [{ name: "a", aliases: ["x"], profiles: p }, { name: "b", aliases: ["x"], profiles: p }, { name: "x", profiles: p }] });
    expect(r.success).toBe(false);
    const msgs = r.error!.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
    expect(msgs).toContain('models.1.aliases.0: "x" is already used by model "a"');
    expect(msgs).toContain('models.2.name: "x" is already used by model "a"');
  });
  test("a model twice in one file is rejected", () => {
    const r = CatalogFile.safeParse({ models: [{ name: "a", profiles: p }, { name: "a", profiles: p }] });
    expect(r.error!.issues[0]!.message).toContain("appears twice");
  });
});

describe("replica defaults", () => {
  const profiles = [{ name: "p", engine: "vllm", gpu_class: "H100-80GB" }];
  test("an on-demand model without replicas waits to be asked for: min 0, max 1", () => {
    expect(ModelSpec.parse({ name: "m", on_demand: true, profiles }).replicas).toEqual({ min: 0, max: 1 });
    expect(ModelSpec.parse({ name: "m", on_demand: true, replicas: { max: 3 }, profiles }).replicas).toEqual({ min: 0, max: 3 });
  });
  test("any other model keeps min 1; a min given is kept, and max below it is refused", () => {
    expect(ModelSpec.parse({ name: "m", profiles }).replicas).toEqual({ min: 1, max: 1 });
    expect(ModelSpec.parse({ name: "m", on_demand: true, replicas: { min: 2 }, profiles }).replicas).toEqual({ min: 2, max: 2 });
    const bad = ModelSpec.safeParse({ name: "m", replicas: { max: 0 }, profiles });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.message).toBe("max (0) is below min (1)");
  });
});
