// src/agent: the node agent behind `llmgw agent`, the cluster's client in the manner of
// Nomad's: it tells the head node what this node has (GPUs, weights, engine versions, replica
// states) and runs exactly the engine processes the head node assigns to it, nothing more. It
// decides nothing about placement; it reports and obeys.
//
// Its parts: agent.ts (this file) builds the others and starts and stops them; conversation.ts
// the head-node conversation (heartbeats, the assignments long poll, joining, registration) and
// head-client.ts its HTTP (failure kinds, certificate pinning, the move to another server);
// answers.ts which answers' assignments are accepted (leader epochs, held-back empty sets) with
// answer-guard.ts's pure decisions; replicas.ts the replica set (applying assignments, each one's
// command line) over runner.ts's engine processes, with engines.ts (pure) and engine-versions.ts;
// node-stock.ts the inventory reporting (inventory.ts with gpus.ts and weights.ts, the engines'
// versions); log-service.ts the engine logs (logs.ts, previous-logs.ts); pace.ts the loops'
// waits; credential.ts and selfsigned.ts what the node keeps about itself; port.ts the one check
// that listens on a port.
//
// It may import protocol/ (the wire schemas it shares with the head node), lib/ (scheduler,
// formatting, hashing, addresses, text) and config/ (its settings); never control/, store/,
// router/, api/, app/, cli/ or sim/: the agent runs on a GPU node without any of them. Time comes
// only through the injected Scheduler (lib/scheduler.ts), so tests drive it by hand.

import { hostname, networkInterfaces } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { realScheduler, type Scheduler } from "../lib/scheduler";
import { HeartbeatRequest, type ReplicaReport } from "../protocol/heartbeat";
import { PROTOCOL_VERSION } from "../protocol/version";
import { VERSION } from "../version";
import { Answers } from "./answers";
import { HeadConversation } from "./conversation";
import { CREDENTIAL_FILE, EPOCH_FILE, prepareStateDir } from "./credential";
import type { ProbeRunner } from "./engine-versions";
import { AgentError } from "./errors";
import { type Discovery, type DiscoverOptions, discoverGpus } from "./gpus";
import { type FetchLike, HeadClient } from "./head-client";
import { LogService } from "./log-service";
import { NodeStock } from "./node-stock";
import { Pace } from "./pace";
import { PREVIOUS_LOGS } from "./previous-logs";
import { Replicas } from "./replicas";
import { WeightsFetcher } from "./weights-fetch";
import { GrowingFiles } from "./weights-growing";
import { WeightsDisk } from "./weights-disk";
import { blobName } from "../protocol/weights";
import { type ByteRate, byteRate } from "./weights-rate";
import { LocalWeightsFinder } from "./weights-local";
import { WeightsStock } from "./weights-stock";
import { WeightsRemover } from "./weights-remove";
import { errorText } from "../lib/format";

// Re-exported for callers that import them from here (the CLI, sim, tests).
export { modelPathFor } from "./weights";
export { AgentError } from "./errors";
export { CREDENTIAL_FILE, EPOCH_FILE } from "./credential";
export type { FetchLike } from "./head-client";

/** Timings the agent owns; the heartbeat interval is not among them, the server sets it. */
export const AGENT_TIMING = {
  /** How often GPUs and weights are looked at again, so health changes reach the server. */
  inventoryIntervalMs: 30_000,
  /** Replica state changes closer together than this go out in one early heartbeat. */
  changeDebounceMs: 50,
  backoffInitialMs: 500,
  backoffMaxMs: 10_000,
  /** wait_ms of the assignments long poll. */
  longPollWaitMs: 25_000,
  /** Per request; a long poll gets this on top of its wait. */
  requestTimeoutMs: 10_000,
  /** Until the server has said otherwise. */
  heartbeatIntervalMs: 5_000,
  /** Per version command: importing a large Python package from a cold disk takes a while, a broken one may never return. */
  engineProbeTimeoutMs: 60_000,
  /** How often the engines' versions are asked again (an upgrade in place shows without a restart). */
  engineProbeIntervalMs: 600_000,
  /** How often past runs' engine logs are looked over (kept for `llmgw logs --previous`, PREVIOUS_LOGS). */
  pastLogSweepMs: PREVIOUS_LOGS.sweepMs as number,
};
export type AgentTiming = typeof AGENT_TIMING;

export interface NodeAgentOptions {
  config: AgentConfig;
  log: Logger;
  /** How to run this binary's built-in fake engine (see engines.ts LaunchOptions.selfExe). */
  selfExe: string[];
  /** For talking to the head node (engines' health checks use the global fetch). */
  fetch?: FetchLike;
  timing?: Partial<AgentTiming>;
  /** GPU discovery for the non-simulated path; tests stand in for nvidia-smi here. */
  discover?: (opts: DiscoverOptions) => Promise<Discovery>;
  /** Runs the engines' version commands; tests stand in for the engines here. */
  probeRun?: ProbeRunner;
  /** Every wait, timeout and timestamp of the agent and its engine processes; realScheduler unless a test drives time. */
  scheduler?: Scheduler;
}

export class NodeAgent {
  readonly name: string;
  readonly address: string;
  private readonly config: AgentConfig;
  private readonly log: Logger;
  /** The head node's URL, or the control planes' in the order given. */
  private readonly servers: string[];
  private readonly labels: Record<string, string>;
  private readonly pace: Pace;
  private readonly head: HeadClient;
  private readonly answers: Answers;
  private readonly conversation: HeadConversation;
  private readonly replicas: Replicas;
  private readonly fetcher: WeightsFetcher;
  private readonly weightsStock: WeightsStock;
  private readonly local: LocalWeightsFinder;
  private readonly weightsRate: ByteRate;
  private readonly remover: WeightsRemover;
  private readonly stock: NodeStock;
  private readonly logs: LogService;
  private readonly abort = new AbortController();

  private started = false;
  private stopped: Promise<void> | null = null;
  private loops: Promise<void>[] = [];

  constructor(opts: NodeAgentOptions) {
    this.config = opts.config;
    this.log = opts.log;
    const timing = { ...AGENT_TIMING, inventoryIntervalMs: opts.config.inventory_interval, ...opts.timing };
    const scheduler = opts.scheduler ?? realScheduler;
    this.servers = opts.config.server.map((s) => s.replace(/\/+$/, ""));
    this.name = opts.config.name ?? hostname();
    this.address = opts.config.address ?? defaultAddress();
    this.labels = Object.fromEntries(opts.config.label.map(splitPair));
    const pace = (this.pace = new Pace(scheduler, timing.changeDebounceMs));
    this.head = new HeadClient({
      servers: this.servers,
      serverCa: opts.config.server_ca,
      serverFingerprint: opts.config.server_fingerprint,
      fetch: opts.fetch ?? ((input, init) => fetch(input, init)),
      bearer: () => this.conversation.bearer(),
      signal: this.abort.signal,
      scheduler,
      log: this.log,
    });
    this.stock = new NodeStock({
      config: opts.config,
      node: this.name,
      log: this.log,
      discover: opts.discover ?? discoverGpus,
      classOverrides: Object.fromEntries(opts.config.gpu_class.map(splitPair)),
      probeRun: opts.probeRun,
      timing,
      scheduler,
      pace,
    });
    // One bound on the bytes moved for weights, fetched and served alike (--weights-max-rate).
    const rate = byteRate(opts.config.weights_max_rate, scheduler);
    const disk = new WeightsDisk({ modelsDir: opts.config.models_dir, maxBytes: opts.config.models_max_bytes ?? null, scheduler, log: this.log.child({ component: "weights" }) });
    this.weightsStock = new WeightsStock({ disk, log: this.log, pace, intervalMs: timing.inventoryIntervalMs });
    const wlog = this.log.child({ component: "weights" });
    this.local = new LocalWeightsFinder({ modelsDir: opts.config.models_dir, stateDir: opts.config.state_dir, scheduler, log: wlog, intervalMs: timing.inventoryIntervalMs,
      onChange: () => {
        void this.weightsStock.refresh();
        this.replicas.weightsChanged();
        pace.heartbeatSoon();
      },
    });
    this.weightsRate = rate;
    // Partial copies the fetcher writes, which the listener serves to peers meanwhile.
    const growing = new GrowingFiles();
    this.fetcher = new WeightsFetcher({
      growing,
      modelsDir: opts.config.models_dir,
      scheduler,
      log: this.log.child({ component: "weights" }),
      maxTransfers: opts.config.weights_max_transfers,
      throttle: (n) => rate.take(n),
      onFile: (repo, revision, file) => disk.recordBlob(repo, blobName(file)).catch((e) => this.log.warn({ repo, revision, file: file.path, err: errorText(e) }, "the record of fetched weights was not written")),
      onWhole: (repo, revision, bytes, blobs) => {
        // Weights an operator placed (file:// found here, or by hand in the cache layout) are theirs: never marked fetched, so never evicted.
        if (this.local.placedHere(repo, revision)) return;
        disk.recordFetch(repo, revision, bytes, blobs).catch((e) => this.log.warn({ repo, revision, err: errorText(e) }, "the record of fetched weights was not written"));
      },
      // Never evicted: what a replica here runs or waits for, what the head node wants here, what a peer copies now.
      makeRoom: (need) => disk.makeRoom(need, new Set([...this.replicas.revisionsInUse(), ...this.fetcher.wanted(), ...this.logs.weights.servingRevisions()])),
      onChange: () => {
        this.replicas.weightsChanged();
        void this.weightsStock.refresh();
        pace.heartbeatSoon();
      },
    });
    this.remover = new WeightsRemover({ disk, log: wlog,
      removed: (repo, revision) => {
        this.fetcher.forget(repo, revision);
        void this.weightsStock.refresh();
        pace.heartbeatSoon();
      },
    });
    this.replicas = new Replicas({ config: opts.config, log: this.log, selfExe: opts.selfExe, stock: this.stock, scheduler, pace, weights: this.fetcher,
      recordUse: (repo, revision) => {
        disk.recordUse(repo, revision).catch((e) => this.log.warn({ repo, revision, err: errorText(e) }, "the last use of the weights was not recorded"));
      },
    });
    this.answers = new Answers({
      log: this.log,
      servers: this.servers,
      epochPath: join(opts.config.state_dir, EPOCH_FILE),
      running: () => this.replicas.ids(),
      apply: (set) => this.replicas.apply(set),
      // An older head node says nothing of weights: nothing is fetched, nothing stopped.
      weights: (res) => {
        this.local.apply(res.local_sources);
        if (res.weights !== undefined || res.fetches !== undefined) this.fetcher.apply(res.weights ?? [], res.fetches);
        this.remover.apply(res.remove ?? []);
      },
    });
    this.conversation = new HeadConversation({
      config: opts.config,
      log: this.log,
      node: this.name,
      credentialPath: join(opts.config.state_dir, CREDENTIAL_FILE),
      head: this.head,
      answers: this.answers,
      report: () => this.report(),
      timing,
      scheduler,
      pace,
    });
    this.logs = new LogService({
      weightsRate: this.weightsRate,
      growing,
      config: opts.config,
      log: this.log,
      node: this.name,
      address: this.address,
      server: this.servers[0]!,
      credential: () => this.conversation.nodeCredential(),
      processes: this.replicas.processes,
      pastLogSweepMs: timing.pastLogSweepMs,
      scheduler,
      pace,
    });
  }

  /** The last assignment generation applied (null before the first answer). */
  get generation(): number | null {
    return this.answers.generation;
  }

  /** The highest leader epoch seen (0 from a single head node). */
  get highestEpoch(): number {
    return this.answers.highestEpoch;
  }

  /** The server requests go to now (the one given, with one). */
  get server(): string {
    return this.head.server;
  }

  reports(): ReplicaReport[] {
    return this.replicas.reports();
  }

  /**
   * Checks the settings, takes stock of the node, adopts (or stops) engines a previous agent
   * left, and registers. Resolves after the first heartbeat the server accepted; retries an
   * unreachable server for as long as it takes; rejects when the server refuses the token.
   */
  async start(): Promise<void> {
    if (this.started) throw new Error("NodeAgent.start() called twice");
    this.started = true;
    const registered = this.conversation.registering();
    // A stop() during the steps before the await below rejects it with nobody listening yet.
    registered.catch(() => {});
    try {
      this.checkIdentity();
      prepareStateDir(this.config.state_dir);
      this.conversation.loadSecret();
      this.answers.restoreEpoch();
      this.head.setUpTls();
      await this.stock.takeFirst();
      const adopted = await this.replicas.processes.recover();
      if (adopted.length > 0) this.log.info({ replicas: adopted }, `adopted ${adopted.length} running engine(s) from the previous agent`);
      if (this.pace.stopping) throw new AgentError("the agent was stopped before it registered", true);
      const inventory = this.stock.inventory;
      this.log.info(
        { node: this.name, address: this.address, server: this.head.server, ...this.serverList(), gpus: inventory.gpus.length, models: inventory.models.length },
        "registering with the server",
      );
      this.logs.start();
      await this.weightsStock.refresh();
      this.loops.push(this.conversation.heartbeatLoop(), this.stock.inventoryLoop(), this.stock.engineLoop(), this.logs.sweepLoop(), this.weightsStock.loop());
      await registered;
    } catch (e) {
      await this.stop();
      throw e;
    }
    this.loops.push(this.conversation.longPollLoop());
  }

  /**
   * Ends both loops (aborting the long poll in flight), then stops every engine, or leaves them
   * running for the next agent to adopt when keep_replicas is set. Idempotent.
   */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      this.pace.stop();
      this.abort.abort();
      this.pace.wakeAll();
      this.conversation.abandon();
      await Promise.all(this.loops);
      this.fetcher.stop();
      await this.replicas.stop();
      this.logs.stop();
      this.head.close();
      this.log.info("agent stopped");
    })();
    return this.stopped;
  }

  /** What a heartbeat says about this node. */
  private report(): HeartbeatRequest {
    const engines = this.stock.engines;
    return {
      ...this.identity(),
      ...this.stock.inventory,
      ...(engines !== undefined ? { engines } : {}),
      replicas: this.replicas.reports(),
      transfers: this.fetcher.transfers(),
      ...this.weightsStock.report(),
      ...this.remover.report(),
      ...this.local.report(),
      logs_port: this.logs.port,
      logs_tls_cert: this.logs.tlsCert,
    };
  }

  private identity(): Pick<HeartbeatRequest, "node" | "address" | "agent_version" | "protocol" | "labels" | "fabrics"> {
    return { node: this.name, address: this.address, agent_version: VERSION, protocol: PROTOCOL_VERSION, labels: this.labels, fabrics: this.config.fabric };
  }

  /** The parts of a heartbeat that only settings decide are checked here, naming the setting, not on the server. */
  private checkIdentity(): void {
    const parsed = HeartbeatRequest.safeParse(this.identity());
    if (parsed.success) return;
    const setting: Record<string, string> = { node: "--name (defaults to the hostname)", address: "--address", labels: "--label", fabrics: "--fabric" };
    const problems = parsed.error.issues.map((i) => {
      const top = String(i.path[0] ?? "");
      const value = top === "node" ? ` "${this.name}"` : top === "fabrics" && typeof i.path[1] === "number" ? ` "${this.config.fabric[i.path[1]]}"` : "";
      return `${setting[top] ?? top}${value}: ${i.message}`;
    });
    throw new AgentError(`invalid agent settings: ${problems.join("; ")}`);
  }

  /** The whole list for log lines, when there is one. */
  private serverList(): { servers?: string[] } {
    return this.servers.length > 1 ? { servers: this.servers } : {};
  }
}

function splitPair(kv: string): [string, string] {
  const eq = kv.indexOf("=");
  return [kv.slice(0, eq).trim(), kv.slice(eq + 1).trim()];
}

/** The first non-internal IPv4 address: what another machine most likely reaches this one at. */
function defaultAddress(): string {
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  }
  return "127.0.0.1";
}
