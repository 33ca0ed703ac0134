// The node's inventory, as the heartbeat carries it: GPUs (nvidia-smi through gpus.ts, or the
// simulated ones behind --simulate) and the weights under --models-dir (weights.ts). Taking it
// is the agent's fingerprinting, apart from running engines: the loops ask for a fresh one every
// inventory interval and send it when it changed. A condition that lasts (a broken driver, a
// skipped weights directory) is logged once, not at every look.

import type { AgentConfig } from "../config";
import type { Scheduler } from "../lib/scheduler";
import { Name } from "../protocol/common";
import { type GpuReport, HEARTBEAT_LIMITS } from "../protocol/heartbeat";
import { AgentError } from "./errors";
import { type Discovery, type DiscoverOptions, simulatedGpus } from "./gpus";
import type { AgentLogger } from "./log";
import { scanModels } from "./weights";

export interface Inventory {
  gpus: GpuReport[];
  models: string[];
  /** Hugging Face revisions per model in the hub cache layout, newest first; the head node picks one per replica. */
  model_revisions?: Record<string, string[]>;
  /** Sent in the heartbeat so the head node can say why this node reports no (or fewer) GPUs. */
  discovery_error?: string;
}

export interface InventoryOptions {
  config: AgentConfig;
  /** The node's name (simulated GPU uuids are derived from it). */
  node: string;
  log: AgentLogger;
  discover: (opts: DiscoverOptions) => Promise<Discovery>;
  classOverrides: Record<string, string>;
  scheduler: Scheduler;
}

export class InventoryTaker {
  private readonly o: InventoryOptions;
  // What has been logged already, so a condition that lasts is said once, not every 30 s.
  private lastDiscoveryError: string | undefined;
  private lastWarnings = new Set<string>();
  private readonly skippedWeights = new Set<string>();

  constructor(o: InventoryOptions) {
    this.o = o;
  }

  /** Looks at the node; `first` logs what it found (and, simulated, which names it left out). */
  async take(first: boolean): Promise<Inventory> {
    const { config: cfg, log } = this.o;
    if (cfg.simulate !== undefined) return this.simulated(cfg.simulate, first);
    const [found, { models, revisions }] = await Promise.all([
      this.o.discover({ nvidiaSmi: cfg.nvidia_smi, classOverrides: this.o.classOverrides, scheduler: this.o.scheduler }),
      scanModels(cfg.models_dir, (path, reason) => {
        if (this.skippedWeights.has(path)) return;
        this.skippedWeights.add(path);
        log.warn({ path }, `weights left out of the report: ${reason}`);
      }),
    ]);
    if (found.error !== this.lastDiscoveryError) {
      if (found.error !== undefined) log.error({ nvidia_smi: cfg.nvidia_smi }, found.error);
      else log.info({ gpus: found.gpus.length }, "GPU discovery works again");
      this.lastDiscoveryError = found.error;
    }
    const warnings = new Set(found.warnings);
    for (const w of warnings) if (!this.lastWarnings.has(w)) log.warn({}, w);
    this.lastWarnings = warnings;
    if (first && found.error === undefined) log.info({ gpus: found.gpus.length, models: models.length, models_dir: cfg.models_dir }, "inventory taken");
    const kept = clipModels(models);
    // hasOwn: a model may be named "constructor", which every object answers to.
    const model_revisions = Object.fromEntries(kept.filter((m) => Object.hasOwn(revisions, m)).map((m) => [m, revisions[m]!]));
    return { gpus: found.gpus, models: kept, model_revisions, ...(found.error !== undefined ? { discovery_error: found.error } : {}) };
  }

  private simulated(spec: string, first: boolean): Inventory {
    const cfg = this.o.config;
    let gpus: GpuReport[];
    try {
      gpus = simulatedGpus(spec, cfg.simulate_unhealthy, this.o.node);
    } catch (e) {
      throw new AgentError(`--simulate: ${(e as Error).message}`);
    }
    const models: string[] = [];
    for (const m of cfg.simulate_models) {
      if (Name.safeParse(m).success) models.push(m);
      else if (first) this.o.log.warn({ model: m }, `--simulate-models: "${m}" is not a valid model name; left out`);
    }
    return { gpus, models: clipModels([...new Set(models)].sort()) };
  }
}

function clipModels(models: string[]): string[] {
  return models.length > HEARTBEAT_LIMITS.models ? models.slice(0, HEARTBEAT_LIMITS.models) : models;
}
