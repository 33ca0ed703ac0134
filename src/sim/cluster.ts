// A whole simulated cluster in one process: the head node plus simulated node agents whose
// replicas run as the built-in fake engine. `llmgw demo` runs it; tests and benchmarks use it
// to exercise placement, reconciliation, health checks and routing without GPUs.

import { join, resolve } from "node:path";
import type { Logger } from "pino";
import { NodeAgent } from "../agent/agent";
import { startServer, type RunningServer } from "../api/server";
import { AgentConfig, ServeConfig } from "../config";
import type { ModelSpecInput } from "../protocol/catalog";

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

/** The demo catalog: a small model with min 2, an on-demand one, a two-node one, one that cannot fit, one that always fails. */
export function demoCatalog(): ModelSpecInput[] {
  return [
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

/** How to run this program's fake engine: the compiled binary itself, or bun with src/main.ts. */
export function selfExe(): string[] {
  // A compiled binary runs its entry point from its embedded file system.
  const compiled = Bun.main.startsWith("/$bunfs/") || Bun.main.startsWith("B:/~BUN/");
  return compiled ? [process.execPath] : [process.execPath, resolve(import.meta.dir, "../main.ts")];
}

export interface Cluster {
  server: RunningServer;
  agents: NodeAgent[];
  stop(): Promise<void>;
}

export interface ClusterOptions {
  serve: Partial<Record<keyof ServeConfig, unknown>>;
  nodes: SimNode[];
  log: Logger;
  agentLog?: Logger;
  /** Extra agent settings (e.g. short intervals in tests). */
  agent?: Partial<Record<keyof AgentConfig, unknown>>;
}

export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  const config = ServeConfig.parse(o.serve);
  const server = await startServer({ config, log: o.log });
  const agents: NodeAgent[] = [];
  try {
    for (const n of o.nodes) {
      const cfg = AgentConfig.parse({
        server: server.adminUrl,
        token: server.joinToken,
        name: n.name,
        address: "127.0.0.1",
        engine_host: "127.0.0.1",
        fabric: [n.fabric],
        simulate: n.gpus,
        simulate_unhealthy: n.unhealthy ?? [],
        simulate_models: n.models ?? [],
        state_dir: join(server.dataDir, "agents", n.name),
        stop_grace: "2s",
        health_interval: "250ms",
        logs_listen: "127.0.0.1:0",
        ...o.agent,
      });
      const agent = new NodeAgent({ config: cfg, log: (o.agentLog ?? o.log).child({ node: n.name }), selfExe: selfExe() });
      await agent.start();
      agents.push(agent);
    }
  } catch (e) {
    await Promise.all(agents.map((a) => a.stop()));
    await server.stop();
    throw e;
  }
  return {
    server,
    agents,
    async stop() {
      await Promise.all(agents.map((a) => a.stop()));
      await server.stop();
    },
  };
}
