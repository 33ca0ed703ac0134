// The replicas this node runs: the engine processes (runner.ts ProcessSet), the command line
// each assignment gets on this node (engines.ts with this node's GPUs, engine versions, weights
// and engine host), and the applying of the accepted set, one reconcile at a time with the sets
// that arrive meanwhile collapsed into the newest. A change in the running set or in a
// replica's state asks for an early heartbeat.

import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { Assignment, ReplicaReport } from "../protocol/heartbeat";
import { sourceRepo } from "../protocol/weights";
import { HEALTH_TIMEOUT_MS, type Launch, renderLaunch } from "./engines";
import { engineBins, type NodeStock } from "./node-stock";
import type { Pace } from "./pace";
import { assertPortFree } from "./port";
import { ProcessSet, type LaunchSpec } from "./runner";
import { localWeightsEnv, modelPathFor } from "./weights";
import type { WeightsFetcher } from "./weights-fetch";

export interface ReplicasOptions {
  config: AgentConfig;
  log: Logger;
  /** How to run this binary's built-in fake engine (see engines.ts LaunchOptions.selfExe). */
  selfExe: string[];
  /** The node's GPUs and engine versions, which an assignment's command line depends on. */
  stock: Pick<NodeStock, "inventory" | "engines" | "probeEngineVersions">;
  scheduler: Scheduler;
  pace: Pace;
  /** The weights a replica of an hf:// source waits for (weights-fetch.ts); without it such a replica starts as any other. */
  weights?: Pick<WeightsFetcher, "ready" | "progress">;
  /** A replica starts on a revision from the Hub: its place in the disk's least-recently-used order (weights-disk.ts recordUse). */
  recordUse?: (repo: string, revision: string) => void;
}

/** The repository of an assignment's weights in the cache, when they come from a source (the Hub's, or a file:// one's as found on some node) pinned to a revision. */
function hubRepo(a: Assignment): string | undefined {
  return a.revision !== null ? sourceRepo(a.source) : undefined;
}

export class Replicas {
  /** The engine processes, by replica id. */
  readonly processes: ProcessSet;
  private readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly selfExe: string[];
  private readonly stock: ReplicasOptions["stock"];
  private readonly pace: Pace;
  private pendingSet: Assignment[] | null = null;
  private applying: Promise<void> | null = null;
  /** The last set applied, and of it the replicas waiting for their weights (not started). */
  private lastSet: Assignment[] = [];
  private waiting: Assignment[] = [];
  private readonly weights: ReplicasOptions["weights"];
  private readonly recordUse: ReplicasOptions["recordUse"];

  constructor(opts: ReplicasOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.selfExe = opts.selfExe;
    this.stock = opts.stock;
    this.pace = opts.pace;
    this.weights = opts.weights;
    this.recordUse = opts.recordUse;
    const engineHost = opts.config.engine_host;
    this.processes = new ProcessSet({
      render: (a) => this.launch(a),
      logDir: join(opts.config.state_dir, "logs"),
      stateDir: join(opts.config.state_dir, "replicas"),
      keepAcrossRestarts: opts.config.keep_replicas,
      stopGrace: opts.config.stop_grace,
      startTimeout: opts.config.start_timeout,
      healthInterval: opts.config.health_interval,
      // 127.0.0.1 reaches an engine bound to every address; one bound to a single address only there.
      healthHost: isWildcard(engineHost) ? "127.0.0.1" : engineHost.replace(/^\[|\]$/g, ""),
      healthTimeoutFor: (a) => HEALTH_TIMEOUT_MS[opts.config.simulate !== undefined ? "fake" : a.engine],
      logger: opts.log.child({ component: "runner" }),
      onChange: () => this.pace.heartbeatSoon(),
      scheduler: opts.scheduler,
    });
  }

  reports(): ReplicaReport[] {
    const out = this.processes.reports();
    for (const a of this.waiting) {
      const p = this.weights?.progress(hubRepo(a)!, a.revision!);
      // Weights that cannot be had fail the replica: the head node counts it as a failed start
      // (one of fetching, with how far it got, not of an engine).
      if (p?.failed !== undefined) {
        const { failed, ...fetch } = p;
        out.push({ id: a.id, state: "failed", port: null, error: failed, fetch });
      }
      else out.push({ id: a.id, state: "fetching", port: null, error: null, ...(p !== undefined ? { fetch: p } : {}) });
    }
    return out;
  }

  /** Weights became whole: the replicas waiting for them start. */
  weightsChanged(): void {
    if (this.waiting.length > 0) this.apply(this.lastSet);
  }

  /** The set without the replicas whose weights are not whole yet (kept in `waiting`); one already running stays. */
  private startable(set: Assignment[]): Assignment[] {
    const w = this.weights;
    if (w === undefined) return set;
    const waiting: Assignment[] = [];
    const out = set.filter((a) => {
      const repo = hubRepo(a);
      if (repo === undefined || this.processes.get(a.id) !== undefined) return true;
      if (w.ready(repo, a.revision!)) {
        this.recordUse?.(repo, a.revision!);
        return true;
      }
      waiting.push(a);
      return false;
    });
    this.waiting = waiting;
    return out;
  }

  /** The Hub revisions ("repo@revision") of the replicas on this node, running or waiting: never evicted. */
  revisionsInUse(): Set<string> {
    const out = new Set<string>();
    const add = (a: Assignment) => {
      const repo = hubRepo(a);
      if (repo !== undefined) out.add(`${repo}@${a.revision}`);
    };
    for (const a of this.lastSet) add(a);
    for (const id of this.processes.ids()) {
      const p = this.processes.get(id);
      if (p !== undefined) add(p.assignment);
    }
    return out;
  }

  ids(): string[] {
    return this.processes.ids();
  }

  /** One reconcile at a time; sets that arrive meanwhile collapse into the newest. */
  apply(set: Assignment[]): void {
    this.pendingSet = set;
    if (this.applying) return;
    const run = async () => {
      while (this.pendingSet && !this.pace.stopping) {
        const next = this.pendingSet;
        this.pendingSet = null;
        this.lastSet = next;
        const before = this.processes.ids().join("\n");
        const waitingBefore = this.waiting.length;
        try {
          await this.processes.reconcile(this.startable(next));
        } catch (e) {
          this.log.error({ err: errorText(e) }, "applying assignments failed");
        }
        // A new replica starts out "starting" without a state change to report it, and a stopped
        // one just disappears: either way the server should hear now, not an interval later.
        if (this.processes.ids().join("\n") !== before || this.waiting.length !== waitingBefore) this.pace.heartbeatSoon();
      }
      // Synchronously after the last check, so an apply() arriving now starts a new run.
      this.applying = null;
    };
    this.applying = Promise.resolve().then(run);
  }

  /**
   * For the agent stopping: a reconcile under way finishes first, so nothing it starts outlives
   * the agent; then every engine stops, or is left running for the next agent to adopt when
   * keep_replicas is set.
   */
  async stop(): Promise<void> {
    await this.applying;
    if (this.config.keep_replicas) {
      const kept = this.processes.ids();
      this.processes.detachAll();
      if (kept.length > 0) this.log.info({ replicas: kept }, "leaving engines running for the next agent (keep_replicas)");
    } else await this.processes.stopAll();
  }

  /**
   * What runs for an assignment: its rendered command line, once the port it is to serve is
   * known to be free (otherwise the health check would find whatever else listens there and
   * call the replica ready; SGLang's ranks >= 1 serve /health on the replica's port too).
   */
  private launch(a: Assignment): LaunchSpec {
    const launch = this.render(a);
    if (launch.servesHttp) assertPortFree(this.config.engine_host, a.port, a.id);
    return launch;
  }

  /** The command line for an assignment on this node (engines.ts renderLaunch with this node's facts). */
  private render(a: Assignment): Launch {
    const host = this.config.engine_host;
    let launch: Launch;
    if (this.config.simulate !== undefined) {
      // A simulated node has no real engines: the built-in fake engine stands in whatever the
      // profile says, answering to the same names. The profile's args are for the real engine.
      launch = renderLaunch({ ...a, engine: "fake", args: [] }, { host, modelPath: a.model, selfExe: this.selfExe, engineAuth: this.config.engine_auth });
    } else {
      const found = a.engine === "fake" ? undefined : this.stock.engines?.find((e) => e.engine === a.engine);
      // An engine with no known version may have been installed since the last look: ask again
      // now, so the control plane's next attempt finds it.
      if (found !== undefined && found.version === null) void this.stock.probeEngineVersions();
      const smiIndex: Record<string, number> = {};
      for (const g of this.stock.inventory.gpus) if (typeof g.smi_index === "number") smiIndex[g.uuid] = g.smi_index;
      // Local weights only (see localWeightsEnv): the engine is given a path and never the Hub.
      launch = renderLaunch({ ...a, env: localWeightsEnv(a.env) }, {
        host,
        // Weights from the Hub are the repository's snapshot, whatever the model is called.
        modelPath: modelPathFor(this.config.models_dir, hubRepo(a) ?? a.model, a.engine, a.revision),
        selfExe: this.selfExe,
        engineAuth: this.config.engine_auth,
        bin: engineBins(this.config),
        ...(found !== undefined ? { version: found.version, versionError: found.error } : {}),
        smiIndex,
      });
    }
    return launch;
  }
}

function isWildcard(host: string): boolean {
  return host === "" || host === "0.0.0.0" || host === "::" || host === "[::]";
}
