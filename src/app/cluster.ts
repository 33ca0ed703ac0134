// A whole simulated cluster in one process: a head node (head.ts) plus simulated node agents
// whose replicas run as the built-in fake engine. `llmgw demo` runs it; tests and benchmarks use
// it to exercise placement, reconciliation, health checks and routing without GPUs.

import { existsSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { NodeAgent } from "../agent/agent";
import { AgentConfig, ServeConfig } from "../config";
import type { Scheduler } from "../lib/scheduler";
import type { ModelSpec } from "../protocol/catalog";
import { type SimNode, selfExe } from "../sim/demo";
import { Store } from "../store";
import { type RunningServer, startHead } from "./head";
import { storeSettings } from "./settings";

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
  /** The head node's time (default the real one). */
  scheduler?: Scheduler;
  /**
   * A demo: once the agents run, the store is marked as a demo's (so the next demo may wipe it,
   * see holdsServerData) and this catalog is loaded.
   */
  demo?: { catalog: ModelSpec[] };
}

export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  const config = ServeConfig.parse(o.serve);
  const { server, parts } = await startHead({ config, log: o.log, ...(o.scheduler ? { scheduler: o.scheduler } : {}) });
  const agents: NodeAgent[] = [];
  const stop = async () => {
    await Promise.all(agents.map((a) => a.stop()));
    await server.stop();
  };
  try {
    for (const n of o.nodes) {
      const agent = new NodeAgent({ config: agentConfig(o, n, server), log: (o.agentLog ?? o.log).child({ node: n.name }), selfExe: selfExe() });
      await agent.start();
      agents.push(agent);
    }
    if (o.demo) {
      parts.store?.setMeta("mode", "demo");
      await parts.control.catalog.putModels(o.demo.catalog);
    }
  } catch (e) {
    await stop();
    throw e;
  }
  return { server, agents, stop };
}

function agentConfig(o: ClusterOptions, n: SimNode, server: RunningServer): AgentConfig {
  return AgentConfig.parse({
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
    // Each simulated node its own disk for weights it fetches (hf:// sources), never the host's.
    models_dir: join(server.dataDir, "agents", n.name, "models"),
    stop_grace: "2s",
    health_interval: "250ms",
    logs_listen: "127.0.0.1:0",
    ...o.agent,
  });
}

/**
 * Whether dataDir holds a real server's state: a database that a demo did not write and that
 * has nodes or models in it. The demo wipes a previous demo's database, never that.
 */
export function holdsServerData(dataDir: string): boolean {
  const dbPath = join(dataDir, "llmgw.db");
  if (!existsSync(dbPath)) return false;
  // The demo's own serve would open it with the defaults too.
  const s = new Store({ path: dbPath, busyTimeoutMs: storeSettings(ServeConfig.parse({})).busyTimeoutMs });
  try {
    const counts = s.counts();
    return s.getMeta("mode") !== "demo" && !(counts.nodes === 0 && counts.models === 0);
  } finally {
    s.close();
  }
}
