// What this node has, as last looked, for the heartbeat: its GPUs and weights (inventory.ts)
// and its engines' versions (engine-versions.ts), each looked at again on its own interval so a
// failing card or an engine upgraded in place reaches the head node without a restart; a change
// goes out in an early heartbeat. A simulated node's engines are all the built-in fake: it
// reports no versions.

import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { EngineReport } from "../protocol/heartbeat";
import { probeEngines, type ProbeRunner, type RealEngine } from "./engine-versions";
import { type Discovery, type DiscoverOptions } from "./gpus";
import { type Inventory, InventoryTaker } from "./inventory";
import type { Pace } from "./pace";

/** The engines' binaries as the settings name them (engines.ts LaunchOptions.bin). */
export function engineBins(config: AgentConfig) {
  return { vllm: config.vllm, python: config.sglang_python, llamaServer: config.llama_server };
}

export interface NodeStockOptions {
  config: AgentConfig;
  /** The node's name (simulated GPU uuids are derived from it). */
  node: string;
  log: Logger;
  discover: (opts: DiscoverOptions) => Promise<Discovery>;
  classOverrides: Record<string, string>;
  /** Runs the engines' version commands; tests stand in for the engines here. */
  probeRun: ProbeRunner | undefined;
  timing: { inventoryIntervalMs: number; engineProbeTimeoutMs: number; engineProbeIntervalMs: number };
  scheduler: Scheduler;
  pace: Pace;
}

export class NodeStock {
  private readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly taker: InventoryTaker;
  private readonly probeRun: ProbeRunner | undefined;
  private readonly timing: NodeStockOptions["timing"];
  private readonly scheduler: Scheduler;
  private readonly pace: Pace;
  private current: Inventory = { gpus: [], models: [] };
  /** The engines' versions as last found; undefined on a simulated node (its engines are all the fake). */
  private found: EngineReport[] | undefined;
  private probingEngines: Promise<void> | null = null;

  constructor(opts: NodeStockOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.probeRun = opts.probeRun;
    this.timing = opts.timing;
    this.scheduler = opts.scheduler;
    this.pace = opts.pace;
    this.taker = new InventoryTaker({
      config: opts.config,
      node: opts.node,
      log: opts.log,
      discover: opts.discover,
      classOverrides: opts.classOverrides,
      scheduler: opts.scheduler,
    });
  }

  /** GPUs and weights as last looked. */
  get inventory(): Inventory {
    return this.current;
  }

  /** The engines' versions as last found; undefined on a simulated node. */
  get engines(): EngineReport[] | undefined {
    return this.found;
  }

  /** The first look, before the node registers: inventory and engine versions together. */
  async takeFirst(): Promise<void> {
    [this.current] = await Promise.all([this.taker.take(true), this.probeEngineVersions()]);
  }

  /** Asks every engine for its version (one look at a time); a change goes out in the next heartbeat. */
  probeEngineVersions(): Promise<void> {
    if (this.config.simulate !== undefined) return Promise.resolve();
    this.probingEngines ??= (async () => {
      const overrides: Partial<Record<RealEngine, string>> = {};
      if (this.config.vllm_version) overrides.vllm = this.config.vllm_version;
      if (this.config.sglang_version) overrides.sglang = this.config.sglang_version;
      if (this.config.llama_server_version) overrides["llama.cpp"] = this.config.llama_server_version;
      const found = await probeEngines({
        bin: engineBins(this.config),
        overrides,
        timeoutMs: this.timing.engineProbeTimeoutMs,
        scheduler: this.scheduler,
        ...(this.probeRun ? { run: this.probeRun } : {}),
      });
      if (JSON.stringify(found) === JSON.stringify(this.found)) return;
      const first = this.found === undefined;
      this.found = found;
      this.log.info(
        Object.fromEntries(found.map((e) => [e.engine, e.version ?? `none (${e.error})`])),
        first ? "engines found" : "engines changed",
      );
      if (!first) this.pace.heartbeatNow();
    })().finally(() => {
      this.probingEngines = null;
    });
    return this.probingEngines;
  }

  async engineLoop(): Promise<void> {
    if (this.config.simulate !== undefined) return;
    while (!this.pace.stopping) {
      await this.pace.sleep(this.timing.engineProbeIntervalMs, false);
      if (this.pace.stopping) return;
      await this.probeEngineVersions();
    }
  }

  async inventoryLoop(): Promise<void> {
    while (!this.pace.stopping) {
      await this.pace.sleep(this.timing.inventoryIntervalMs, false);
      if (this.pace.stopping) return;
      try {
        const next = await this.taker.take(false);
        if (this.pace.stopping) return;
        if (JSON.stringify(next) !== JSON.stringify(this.current)) {
          this.log.info({ gpus: next.gpus.length, unhealthy: next.gpus.filter((g) => !g.healthy).length, models: next.models }, "inventory changed");
          this.current = next;
          this.pace.heartbeatNow();
        }
      } catch (e) {
        this.log.warn({ err: errorText(e) }, "taking inventory failed; reporting the previous one");
      }
    }
  }
}
