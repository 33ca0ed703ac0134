// The demo's simulated fleet and catalog: which nodes with which GPUs and weights, which models
// to ask for, and how to run this program's fake engine. app/cluster.ts starts a head node and
// simulated agents from these; this file knows no head node.
//
// src/sim simulates what this machine lacks: the fake engine and the simulated fleet. It may
// import protocol, config, lib and the router's error shape; never api, app, cli or store.

import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { ModelSpecInput } from "../protocol/catalog";
import { type FakeHub, startFakeHub } from "./fake-hub";

export interface SimNode {
  name: string;
  fabric: string;
  /** e.g. "H100-80GB:8" or "A100-80GB:6,A100-80GB/3g.40gb:2" */
  gpus: string;
  unhealthy?: number[];
  models?: string[];
}

/** The default demo fleet: two fabrics; H100s, an A100 box with a broken card and a card in MIG mode, L40S. */
export function demoNodes(count?: number): SimNode[] {
  const base: SimNode[] = [
    { name: "h100-1", fabric: "ib-a", gpus: "H100-80GB:8", models: ["llama-3.1-405b", "llama-3.1-8b"] },
    { name: "h100-2", fabric: "ib-a", gpus: "H100-80GB:8", models: ["llama-3.1-405b"] },
    { name: "a100-1", fabric: "ib-b", gpus: "A100-80GB:6,A100-80GB/3g.40gb:2", unhealthy: [2], models: ["qwen2.5-7b", "llama-3.1-8b"] },
    { name: "l40s-1", fabric: "ib-b", gpus: "L40S:4", models: ["llama-3.1-8b"] },
  ];
  if (count === undefined || count === base.length) return base;
  // More (or fewer) nodes: cycle through the kinds, numbering each kind on its own.
  const seen = new Map<string, number>();
  return Array.from({ length: count }, (_, i) => {
    const b = base[i % base.length]!;
    const kind = b.name.replace(/-\d+$/, "");
    const k = (seen.get(kind) ?? 0) + 1;
    seen.set(kind, k);
    return { ...b, name: `${kind}-${k}` };
  });
}

/** The demo's model whose weights come from the demo's stand-in Hub. */
export const DEMO_HUB_REPO = "demo/tiny-llm";

/**
 * The demo catalog: a small model with min 2, an on-demand one, a two-node one, one that cannot
 * fit, one that always fails, and one whose weights its node fetches from the Hub first.
 */
export function demoCatalog(): ModelSpecInput[] {
  return [
    {
      name: "tiny-llm",
      source: `hf://${DEMO_HUB_REPO}`,
      replicas: { min: 1, max: 1 },
      profiles: [{ name: "l40s", engine: "vllm", gpu_class: "L40S", gpus: 1 }],
    },
    {
      name: "llama-3.1-8b",
      aliases: ["llama3-8b"],
      replicas: { min: 2, max: 4 },
      profiles: [
        { name: "l40s", engine: "vllm", gpu_class: "L40S", gpus: 1 },
        { name: "a100", engine: "vllm", gpu_class: "A100-80GB", gpus: 1, priority: 1 },
      ],
    },
    {
      name: "qwen2.5-7b",
      on_demand: true,
      replicas: { min: 0, max: 1 },
      idle_timeout: "10m",
      profiles: [{ name: "mig", engine: "vllm", gpu_class: "A100-80GB/3g.40gb", gpus: 1 }],
    },
    {
      name: "llama-3.1-405b",
      replicas: { min: 1 },
      profiles: [{ name: "2xh100", engine: "vllm", gpu_class: "H100-80GB", gpus: 8, nodes: 2 }],
    },
    {
      name: "deepseek-v3",
      replicas: { min: 1 },
      profiles: [{ name: "2xh200", engine: "sglang", gpu_class: "H200-141GB", gpus: 8, nodes: 2 }],
    },
    {
      name: "mistral-7b-broken",
      replicas: { min: 1 },
      profiles: [{ name: "a100", engine: "vllm", gpu_class: "A100-80GB", gpus: 1, env: { LLMGW_FAKE_FAIL: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" } }],
    },
  ];
}

/**
 * The demo's stand-in Hub, in this process: one small generated model (a few MB, the same bytes
 * every run) written under `dir`, served slowly enough that `llmgw replicas` shows its replica
 * fetching for a few seconds before it starts. Under the demo's data dir rather than a temporary
 * one: a demo killed with SIGKILL leaves nothing behind that the next one does not rewrite.
 */
export function startDemoHub(dir: string): FakeHub {
  rmSync(dir, { recursive: true, force: true });
  const model = join(dir, DEMO_HUB_REPO);
  mkdirSync(model, { recursive: true });
  writeFileSync(join(model, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], model_type: "llama", hidden_size: 256, num_hidden_layers: 2 }));
  writeFileSync(join(model, "tokenizer.json"), JSON.stringify({ version: "1.0", model: { type: "BPE", vocab: {} } }));
  writeFileSync(join(model, "model.safetensors"), pseudoRandomBytes(6 * 1024 * 1024, 36));
  return startFakeHub({ repos: [{ repo: DEMO_HUB_REPO, revisions: [{ dir: model, refs: ["main"] }] }], bytesPerSecond: 768 * 1024 });
}

/** Bytes that look like weights (no two blocks alike), the same for the same seed. */
function pseudoRandomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  const words = new Uint32Array(out.buffer, 0, n >>> 2);
  let s = seed >>> 0;
  for (let i = 0; i < words.length; i++) {
    // xorshift32: fast enough for a few MB at start.
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    words[i] = s >>> 0;
  }
  return out;
}

/** How to run this program's fake engine: the compiled binary itself, or bun with src/main.ts. */
export function selfExe(): string[] {
  // A compiled binary runs its entry point from its embedded file system.
  const compiled = Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
  return compiled ? [process.execPath] : [process.execPath, resolve(import.meta.dir, "../main.ts")];
}
