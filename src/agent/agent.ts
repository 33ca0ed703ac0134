// src/agent: the node agent behind `llmgw agent`, the cluster's client in the manner of
// Nomad's: it tells the head node what this node has (GPUs, weights, engine versions, replica
// states) and runs exactly the engine processes the head node assigns to it, nothing more. It
// decides nothing about placement; it reports and obeys.
//
// Its parts: agent.ts (this file) the loops only (heartbeat, assignments long poll, inventory,
// engine versions) and the applying of assignments; head-client.ts the head node's agent API
// (HTTP, failure kinds, certificate pinning); inventory.ts with gpus.ts and weights.ts what the
// node has; engines.ts (pure) and engine-versions.ts what command line runs an assignment;
// runner.ts the engine processes; logs.ts the engine-log listener; credential.ts and
// selfsigned.ts what the node keeps about itself; port.ts the one check that listens on a port.
//
// It may import protocol/ (the wire schemas it shares with the head node), lib/ (scheduler,
// formatting, hashing, addresses, text) and config/ (its settings); never control/, store/,
// router/, api/, app/, cli/ or sim/: the agent runs on a GPU node without any of them. Time comes
// only through the injected Scheduler (lib/scheduler.ts), so tests drive it by hand.

import { hostname, networkInterfaces } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { errorText } from "../lib/format";
import { realScheduler, type Scheduler, type Timer } from "../lib/scheduler";
import { type Assignment, EPOCH_MAX, type EngineReport, HeartbeatRequest, HeartbeatResponse, type ReplicaReport } from "../protocol/heartbeat";
import { credentialDigest, logsToken } from "../protocol/heartbeat";
import { VERSION } from "../version";
import { type AnswerCount, EPOCH_JUMP_MAX, EpochJumps, emptySetHold } from "./answer-guard";
import { CREDENTIAL_FILE, EPOCH_FILE, JOINING_FILE, joined, joiningCredential, loadCredential, loadEpoch, logCertificate, prepareStateDir, saveCredential, saveEpoch } from "./credential";
import { probeEngines, type RealEngine, type ProbeRunner } from "./engine-versions";
import { HEALTH_TIMEOUT_MS, type Launch, renderLaunch } from "./engines";
import { AgentError } from "./errors";
import { type Discovery, type DiscoverOptions, discoverGpus } from "./gpus";
import { type Failure, type FetchLike, HeadClient, worthFailover } from "./head-client";
import { type Inventory, InventoryTaker } from "./inventory";
import { startLogServer } from "./logs";
import { PastLogKeeper, PREVIOUS_LOGS, previousPathOf } from "./previous-logs";
import { assertPortFree } from "./port";
import { ProcessSet, fileSafe, type LaunchSpec } from "./runner";
import { localWeightsEnv, modelPathFor } from "./weights";

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
  private readonly selfExe: string[];
  private readonly timing: AgentTiming;
  private readonly scheduler: Scheduler;
  /** The head node's URL, or the control planes' in the order given. */
  private readonly servers: string[];
  private readonly labels: Record<string, string>;
  private readonly processSet: ProcessSet;
  private readonly head: HeadClient;
  private readonly inventoryTaker: InventoryTaker;
  /** This node's own credential once the head node gave it one; until then the join token is sent. */
  private credential: string | undefined;
  private readonly credentialPath: string;
  private logsTls: { cert: string; key: string } | undefined;

  private inventory: Inventory = { gpus: [], models: [] };
  /** The engines' versions as last found; undefined on a simulated node (its engines are all the fake). */
  private engines: EngineReport[] | undefined;
  private probingEngines: Promise<void> | null = null;
  private readonly probeRun: ProbeRunner | undefined;
  private intervalMs: number;
  private gen: number | null = null;
  /**
   * The server whose answer the generation is from: generations are each control plane's own
   * count, so the first answer from another server is applied even when its number is the same.
   */
  private genFrom: string | null = null;
  /** Where that server's generations started, and the epoch of that answer: with the server, they tell one count from another. */
  private genBase: number | undefined;
  private genEpoch = 0;
  /** The engines kept running against an empty set that came with a new count, until a second answer confirms it (answer-guard.ts). */
  private holding: string[] | null = null;
  /**
   * Bumps whenever an answer's assignments are applied. An answer whose request went out before
   * the latest applied answer arrived may describe an older state (the heartbeat and the long
   * poll race), so it is dropped; one sent after it cannot be older.
   */
  private answerSeq = 0;
  /**
   * The highest leader epoch any answer carried (kept in <state_dir>/leader.epoch, so a
   * restarted agent still refuses an old leader), and the server that sent it. Assignments from
   * an older epoch are refused: a leader that lost its lease cannot undo its successor's work.
   */
  private leaderEpoch = 0;
  private leaderEpochFrom: string | undefined;
  private readonly epochPath: string;
  /** Stale epochs already warned about: one warning each, not one per answer. */
  private readonly warnedStale = new Set<number>();
  /** Epochs that jumped too far, until another server confirms one; and those warned about. */
  private readonly jumps = new EpochJumps();
  private readonly warnedJump = new Set<string>();
  /** The replica ids of the set last applied, to tell a move to another server from a change. */
  private appliedIds = "";
  private pendingSet: Assignment[] | null = null;
  private applying: Promise<void> | null = null;

  private started = false;
  private stopping = false;
  private stopped: Promise<void> | null = null;
  private registered = false;
  private registration: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private readonly abort = new AbortController();
  private readonly sleepers = new Set<() => void>();
  private wakeHeartbeat: (() => void) | null = null;
  private heartbeatDue = false;
  private debounce: Timer | null = null;
  private loops: Promise<void>[] = [];
  /** What a request presents until the node has its credential. */
  private joinToken = "";
  /** The credential this node chose for itself while it joins (sent with the join token; see JOINING_FILE). */
  private joinCredential: string | undefined;

  constructor(opts: NodeAgentOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.selfExe = opts.selfExe;
    this.timing = { ...AGENT_TIMING, inventoryIntervalMs: opts.config.inventory_interval, ...opts.timing };
    this.scheduler = opts.scheduler ?? realScheduler;
    this.probeRun = opts.probeRun;
    this.intervalMs = this.timing.heartbeatIntervalMs;
    this.servers = opts.config.server.map((s) => s.replace(/\/+$/, ""));
    this.name = opts.config.name ?? hostname();
    this.address = opts.config.address ?? defaultAddress();
    this.labels = Object.fromEntries(opts.config.label.map(splitPair));
    this.credentialPath = join(opts.config.state_dir, CREDENTIAL_FILE);
    this.epochPath = join(opts.config.state_dir, EPOCH_FILE);
    this.head = new HeadClient({
      servers: this.servers,
      serverCa: opts.config.server_ca,
      serverFingerprint: opts.config.server_fingerprint,
      fetch: opts.fetch ?? ((input, init) => fetch(input, init)),
      bearer: () => this.credential ?? this.joinToken,
      signal: this.abort.signal,
      scheduler: this.scheduler,
      log: this.log,
    });
    this.inventoryTaker = new InventoryTaker({
      config: opts.config,
      node: this.name,
      log: this.log,
      discover: opts.discover ?? discoverGpus,
      classOverrides: Object.fromEntries(opts.config.gpu_class.map(splitPair)),
      scheduler: this.scheduler,
    });

    const engineHost = opts.config.engine_host;
    this.processSet = new ProcessSet({
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
      onChange: () => this.replicaChanged(),
      scheduler: this.scheduler,
    });
  }

  /** The last assignment generation applied (null before the first answer). */
  get generation(): number | null {
    return this.gen;
  }

  /** The highest leader epoch seen (0 from a single head node). */
  get highestEpoch(): number {
    return this.leaderEpoch;
  }

  /** The server requests go to now (the one given, with one). */
  get server(): string {
    return this.head.server;
  }

  reports(): ReplicaReport[] {
    return this.processSet.reports();
  }

  private logServer: { port: number; stop(): void } | undefined;

  /**
   * The engine-log listener for `llmgw logs`. Optional: a port that cannot be had is logged
   * and the agent goes on without it (the head node then says logs are unavailable).
   */
  private startLogs(): void {
    const listen = this.config.logs_listen;
    if (!listen) return;
    const logDir = join(this.config.state_dir, "logs");
    try {
      // HTTPS when the head node's agent API is: the log listener then carries engine output
      // as privately as the heartbeats do. Its certificate goes to the head node in heartbeats.
      if (/^https:/i.test(this.servers[0]!)) {
        const host = listen.host === "0.0.0.0" || listen.host === "::" ? this.address : listen.host;
        this.logsTls = logCertificate(this.config.state_dir, [...new Set([this.address, host])], this.scheduler.now(), this.log);
      }
      this.logServer = startLogServer({
        host: listen.host,
        port: listen.port,
        token: () => (this.credential ? logsToken(credentialDigest(this.credential)) : undefined),
        ...(this.logsTls ? { tls: this.logsTls } : {}),
        fileFor: (id) => join(logDir, `${fileSafe(id)}.log`),
        // The run before the one going on now; for a replica whose engine is not running (it
        // exited, failed or was stopped) its last run.
        previousFor: (id) => {
          const current = join(logDir, `${fileSafe(id)}.log`);
          return this.processSet.get(id)?.engineRunning ? previousPathOf(current) : current;
        },
        node: this.name,
        log: this.log.child({ component: "logs" }),
        scheduler: this.scheduler,
      });
      this.log.info({ port: this.logServer.port }, "engine logs served for `llmgw logs`");
    } catch (e) {
      this.log.warn({ listen: `${listen.host}:${listen.port}`, err: errorText(e) }, "cannot serve engine logs: `llmgw logs` will not reach this node");
    }
  }

  /**
   * Checks the settings, takes stock of the node, adopts (or stops) engines a previous agent
   * left, and registers. Resolves after the first heartbeat the server accepted; retries an
   * unreachable server for as long as it takes; rejects when the server refuses the token.
   */
  async start(): Promise<void> {
    if (this.started) throw new Error("NodeAgent.start() called twice");
    this.started = true;
    const registered = new Promise<void>((resolve, reject) => {
      this.registration = { resolve, reject };
    });
    // A stop() during the steps before the await below rejects it with nobody listening yet.
    registered.catch(() => {});
    try {
      this.checkIdentity();
      prepareStateDir(this.config.state_dir);
      const secret = loadCredential(this.credentialPath, this.name, this.config, this.log);
      if ("credential" in secret) this.credential = secret.credential;
      else {
        this.joinToken = secret.joinToken;
        this.joinCredential = joiningCredential(join(this.config.state_dir, JOINING_FILE), this.name, this.log);
      }
      const stored = loadEpoch(this.epochPath);
      if (stored && stored.epoch > EPOCH_MAX)
        // What an older agent kept from a forged answer: kept, it would refuse every honest one.
        this.log.warn({ epoch: stored.epoch, max: EPOCH_MAX, path: this.epochPath }, `ignoring leader epoch ${stored.epoch} kept in ${this.epochPath}: no leader gets past ${EPOCH_MAX}; following whichever leader answers`);
      else if (stored) {
        this.leaderEpoch = stored.epoch;
        this.leaderEpochFrom = stored.server;
        this.log.info({ epoch: stored.epoch, server: stored.server, path: this.epochPath }, `leader epoch ${stored.epoch} kept from before: assignments from an older leader are refused`);
      }
      this.head.setUpTls();
      [this.inventory] = await Promise.all([this.inventoryTaker.take(true), this.probeEngineVersions()]);
      const adopted = await this.processSet.recover();
      if (adopted.length > 0) this.log.info({ replicas: adopted }, `adopted ${adopted.length} running engine(s) from the previous agent`);
      if (this.stopping) throw new AgentError("the agent was stopped before it registered", true);
      this.log.info(
        { node: this.name, address: this.address, server: this.head.server, ...this.serverList(), gpus: this.inventory.gpus.length, models: this.inventory.models.length },
        "registering with the server",
      );
      this.startLogs();
      this.loops.push(this.heartbeatLoop(), this.inventoryLoop(), this.engineLoop(), this.pastLogsLoop());
      await registered;
    } catch (e) {
      await this.stop();
      throw e;
    }
    this.loops.push(this.longPollLoop());
  }

  /**
   * Ends both loops (aborting the long poll in flight), then stops every engine, or leaves them
   * running for the next agent to adopt when keep_replicas is set. Idempotent.
   */
  stop(): Promise<void> {
    this.stopped ??= (async () => {
      this.stopping = true;
      this.abort.abort();
      this.debounce?.cancel();
      for (const wake of [...this.sleepers]) wake();
      this.registration?.reject(new AgentError("the agent was stopped before it registered", true));
      await Promise.all(this.loops);
      // A reconcile under way finishes first, so nothing it starts outlives the agent.
      await this.applying;
      if (this.config.keep_replicas) {
        const kept = this.processSet.ids();
        this.processSet.detachAll();
        if (kept.length > 0) this.log.info({ replicas: kept }, "leaving engines running for the next agent (keep_replicas)");
      } else await this.processSet.stopAll();
      this.logServer?.stop();
      this.head.close();
      this.log.info("agent stopped");
    })();
    return this.stopped;
  }

  // ---- heartbeats -------------------------------------------------------------------------

  private async heartbeatLoop(): Promise<void> {
    let backoff = this.timing.backoffInitialMs;
    let failing = false;
    while (!this.stopping) {
      this.heartbeatDue = false;
      const result = await this.heartbeatOnce();
      if (this.stopping || result === "fatal") return;
      // Another server to ask at once: the one left gave no usable answer, or a move cut this request short.
      if (result === "again") continue;
      if (result === "ok") {
        if (failing) this.log.info({ url: this.url("/agent/v1/heartbeat") }, "heartbeats reach the server again");
        failing = false;
        backoff = this.timing.backoffInitialMs;
        // A change that came in while this heartbeat was on the wire goes out at once.
        if (!this.heartbeatDue) await this.sleep(this.intervalMs, true);
      } else {
        failing = true;
        this.logFailure("heartbeat", "/agent/v1/heartbeat", result, backoff);
        // Not wakeable: replica changes must not defeat the backoff while the server is down.
        await this.sleep(backoff, false);
        backoff = Math.min(backoff * 2, this.timing.backoffMaxMs);
      }
    }
  }

  private async heartbeatOnce(): Promise<"ok" | "again" | "fatal" | (Failure & { server: string })> {
    const path = "/agent/v1/heartbeat";
    const body: HeartbeatRequest = {
      ...this.identity(),
      ...this.inventory,
      ...(this.engines !== undefined ? { engines: this.engines } : {}),
      replicas: this.processSet.reports(),
      logs_port: this.logServer?.port ?? null,
      logs_tls_cert: this.logServer && this.logsTls ? this.logsTls.cert : null,
    };
    const joining = this.credential === undefined;
    if (joining && this.joinCredential !== undefined) body.join_credential = this.joinCredential;
    const sentSeq = this.answerSeq;
    const r = await this.head.request(path, { method: "POST", body: JSON.stringify(body) }, this.timing.requestTimeoutMs);
    if (this.stopping) return "fatal";
    const url = this.url(path, r.server);
    if (!r.ok && r.kind === "switched") return "again";
    if (!r.ok && r.kind === "forbidden" && !this.registered) {
      // A wrong address, the node limit, another node's name: retrying changes nothing.
      this.log.error({ url }, `the server refused this node: ${r.message}`);
      this.registration?.reject(new AgentError(`the server refused node ${this.name} (${url}): ${r.message}`));
      return "fatal";
    }
    if (!r.ok && r.kind === "taken" && !this.registered) {
      this.log.error({ url }, r.message);
      this.registration?.reject(new AgentError(`the server refused to let the join token speak for node ${this.name}: ${r.message}`));
      return "fatal";
    }
    if (!r.ok && r.kind === "unauthorized" && !joining && !this.registered) {
      const message = `the server does not accept this node's credential (${r.message}); if the node was deleted on the head node, remove ${this.credentialPath} and start the agent again with the join token to re-join`;
      this.log.error({ url }, message);
      this.registration?.reject(new AgentError(message));
      return "fatal";
    }
    if (r.ok && joining && r.value.credential) {
      try {
        saveCredential(this.credentialPath, this.name, r.server, r.value.credential);
        joined(join(this.config.state_dir, JOINING_FILE));
      } catch (e) {
        // Without it the node could not heartbeat after a restart; say so now, loudly.
        this.log.error({ path: this.credentialPath, err: errorText(e) }, "cannot store this node's credential: after a restart the node must be deleted on the head node to join again");
      }
      this.credential = r.value.credential;
      this.log.info({ path: this.credentialPath }, "joined: this node's own credential is stored and used from now on");
    }
    if (!r.ok) {
      if (r.kind === "untrusted" && !this.registered) {
        // Retrying cannot make a certificate trusted: the operator has to give a CA or the pin.
        this.log.error({ url }, r.message);
        this.registration?.reject(new AgentError(`${r.message} (server ${r.server})`));
        return "fatal";
      }
      if (r.kind === "unauthorized" && !this.registered) {
        this.log.error({ url }, `the server refused the join token: ${r.message}`);
        this.registration?.reject(
          new AgentError(
            `the server refused the join token (${url}: ${r.message}); use the token in <data-dir>/join.token on the head node`,
          ),
        );
        return "fatal";
      }
      if (worthFailover(r) && this.head.failover(r.server, failureReason(r))) return "again";
      return r;
    }
    // The server took the heartbeat (the node is registered) even when its assignments are refused.
    const refused = this.refusal(r.value, r.server, "heartbeat");
    if (refused !== undefined) {
      this.registeredNow(r.server);
      return this.head.failover(r.server, refused) ? "again" : "ok";
    }
    this.head.answered(r.server);
    this.intervalMs = this.boundInterval(r.value.heartbeat_interval_ms);
    // The same generation from the same server at the same epoch means the same set: applying it
    // again would only cost a reconcile. Unless a set is held back: this answer may confirm it.
    if (r.value.generation !== this.gen || r.server !== this.genFrom || (r.value.epoch ?? 0) > this.leaderEpoch || this.holding !== null)
      this.accept(r.value, sentSeq, "heartbeat", r.server);
    this.registeredNow(r.server);
    return "ok";
  }

  private registeredNow(server: string): void {
    if (this.registered) return;
    this.registered = true;
    this.log.info({ node: this.name, server, interval_ms: this.intervalMs }, "registered with the server");
    this.registration?.resolve();
  }

  private replicaChanged(): void {
    if (this.stopping || this.debounce) return;
    this.debounce = this.scheduler.after(this.timing.changeDebounceMs, () => {
      this.debounce = null;
      this.heartbeatDue = true;
      this.wakeHeartbeat?.();
    });
  }

  // ---- assignments ------------------------------------------------------------------------

  /** The long poll, at the server the heartbeats go to (a move aborts it there and asks again at the next). */
  private async longPollLoop(): Promise<void> {
    const path = "/agent/v1/assignments";
    let backoff = this.timing.backoffInitialMs;
    let failing = false;
    while (!this.stopping) {
      const asked = this.gen ?? 0;
      // Another server's generation says nothing about this one's set: ask for it at once.
      const wait = this.genFrom === null || this.genFrom === this.head.server ? this.timing.longPollWaitMs : 0;
      const query = `?node=${encodeURIComponent(this.name)}&generation=${asked}&wait_ms=${wait}`;
      const sentSeq = this.answerSeq;
      const began = this.scheduler.mono();
      const r = await this.head.request(path + query, { method: "GET" }, wait + this.timing.requestTimeoutMs);
      if (this.stopping) return;
      if (!r.ok && r.kind === "switched") continue;
      const refused = r.ok ? this.refusal(r.value, r.server, "long poll") : undefined;
      if (r.ok && refused === undefined) {
        if (failing) this.log.info({ url: this.url(path, r.server) }, "the assignments long poll works again");
        failing = false;
        backoff = this.timing.backoffInitialMs;
        this.head.answered(r.server);
        this.intervalMs = this.boundInterval(r.value.heartbeat_interval_ms);
        this.accept(r.value, sentSeq, "long poll", r.server);
        // An unchanged answer long before wait_ms means something in between does not hold
        // requests open; without a pause this loop would spin.
        if (wait > 0 && r.value.generation === asked && this.scheduler.mono() - began < Math.min(1_000, wait / 2)) await this.sleep(backoff, false);
        continue;
      }
      if (r.ok ? this.head.failover(r.server, refused!) : worthFailover(r) && this.head.failover(r.server, failureReason(r))) continue;
      if (!r.ok) {
        failing = true;
        this.logFailure("assignments long poll", path, r, backoff);
      }
      // A stale leader answers at once whenever its generation differs: this pause keeps that from spinning too.
      await this.sleep(backoff, false);
      backoff = Math.min(backoff * 2, this.timing.backoffMaxMs);
    }
  }

  /**
   * Why an answer's assignments are not applied (what runs here keeps running), for the move to
   * another server; undefined when they may be. Its leader is older than one seen already, or
   * its epoch jumped further than EPOCH_JUMP_MAX and no other server confirms it.
   */
  private refusal(res: HeartbeatResponse, server: string, source: string): string | undefined {
    if (this.refuseStale(res, server, source)) return staleReason(res, this.leaderEpoch);
    return this.refuseJump(res.epoch ?? 0, server, source);
  }

  /**
   * An epoch more than EPOCH_JUMP_MAX above the highest seen is neither followed, kept, nor its
   * assignments applied on one server's word; once another server reports one as high, it is.
   */
  private refuseJump(epoch: number, server: string, source: string): string | undefined {
    const verdict = this.jumps.judge(server, epoch, this.leaderEpoch);
    if (verdict.kind === "within") return undefined;
    const fields = { server, epoch, highest_epoch: this.leaderEpoch, highest_from: this.leaderEpochFrom, max_jump: EPOCH_JUMP_MAX, source };
    if (verdict.kind === "confirmed") {
      this.log.warn({ ...fields, confirmed_by: verdict.by }, `leader epoch ${epoch} from ${server} is more than ${EPOCH_JUMP_MAX} above epoch ${this.leaderEpoch} seen before, and ${verdict.by} reports it too: following it`);
      return undefined;
    }
    const key = `${epoch} ${server}`;
    if (!this.warnedJump.has(key)) {
      if (this.warnedJump.size >= 64) this.warnedJump.clear();
      this.warnedJump.add(key);
      const others = this.servers.length > 1 ? "until another of its servers (--server) reports an epoch at least as high" : "for good: no other server (--server) can confirm it";
      this.log.warn(
        fields,
        `refusing assignments from ${server}: they carry leader epoch ${epoch}, more than ${EPOCH_JUMP_MAX} above epoch ${this.leaderEpoch} seen before; the epoch is not followed or kept and the replicas running here are left as they are, ${others}. ` +
          `A forged answer looks like this: serve the agent API over TLS and pin its certificate (--server-fingerprint or --server-ca). ` +
          `If the control planes really changed leader that often while this agent was away, stop the agent, remove ${this.epochPath} and start it again`,
      );
    }
    return `answers for leader epoch ${epoch}, more than ${EPOCH_JUMP_MAX} above epoch ${this.leaderEpoch}, confirmed by no other server`;
  }

  /**
   * Whether an answer comes from a leader older than one already seen; if so, its assignments
   * are not applied (what runs here keeps running) and the operator hears once per stale epoch.
   * An answer without an epoch counts as epoch 0: an agent cannot tell a cluster that went back
   * to one head node from an old leader, and refusing costs less than obeying the wrong one.
   */
  private refuseStale(res: HeartbeatResponse, server: string, source: string): boolean {
    const epoch = res.epoch ?? 0;
    if (epoch >= this.leaderEpoch) return false;
    if (!this.warnedStale.has(epoch)) {
      if (this.warnedStale.size >= 64) this.warnedStale.clear();
      this.warnedStale.add(epoch);
      const what = res.epoch === undefined ? "no leader epoch (counted as 0: a single head node, or an older llmgw)" : `leader epoch ${epoch}`;
      const from = this.leaderEpochFrom ? ` (from ${this.leaderEpochFrom})` : "";
      this.log.warn(
        { server, epoch, highest_epoch: this.leaderEpoch, highest_from: this.leaderEpochFrom, generation: res.generation, source },
        `refusing assignments from ${server}: they carry ${what}, older than epoch ${this.leaderEpoch} seen before${from}; the replicas running here are left as they are. ` +
          `If the cluster went back to one head node on purpose, stop the agent, remove ${this.epochPath} and start it again`,
      );
    }
    return true;
  }

  private accept(res: HeartbeatResponse, sentSeq: number, source: string, server: string): void {
    const epoch = res.epoch ?? 0;
    if (epoch > this.leaderEpoch) {
      // A newer leader: its answer wins at once, whatever was applied meanwhile (that was older).
      this.log.info({ epoch, previous_epoch: this.leaderEpoch, server, source }, `following leader epoch ${epoch} (${server})`);
      this.leaderEpoch = epoch;
      this.leaderEpochFrom = server;
      this.jumps.followed();
      try {
        saveEpoch(this.epochPath, epoch, server);
      } catch (e) {
        this.log.error({ path: this.epochPath, err: errorText(e) }, "cannot store the leader epoch: after a restart this agent would not know to refuse an older leader");
      }
    } else if (sentSeq !== this.answerSeq) {
      // The long poll asks again with the generation now applied, so nothing newer is lost.
      this.log.debug({ generation: res.generation, source }, "dropping an answer that may be older than the one applied");
      return;
    }
    this.answerSeq++;
    const ids = res.assignments.map((a) => a.id);
    const held = this.holdsBack(res, { server, generation: res.generation, base: res.generation_base, epoch }, source);
    if (!held && (res.generation !== this.gen || (server !== this.genFrom && ids.join("\n") !== this.appliedIds)))
      this.log.info({ generation: res.generation, replicas: ids, source, ...(this.servers.length > 1 ? { server } : {}) }, "assignments changed");
    // Held too: the long poll waits on this count, and the next answer from it confirms or replaces the set.
    this.gen = res.generation;
    this.genFrom = server;
    this.genBase = res.generation_base;
    this.genEpoch = epoch;
    if (held) return;
    this.appliedIds = ids.join("\n");
    this.apply(res.assignments);
  }

  /**
   * Whether an empty set is held back: it would stop the engines running here, and it comes with
   * another count than the answer before (a restarted server, another one, a new leader: see
   * emptySetHold). The next answer of the same count obeyed confirms it; any other replaces it.
   */
  private holdsBack(res: HeartbeatResponse, count: AnswerCount, source: string): boolean {
    const was = this.holding;
    this.holding = null;
    const running = this.processSet.ids();
    if (res.assignments.length > 0 || running.length === 0) return false;
    const prev = this.gen === null || this.genFrom === null ? null : { server: this.genFrom, generation: this.gen, base: this.genBase, epoch: this.genEpoch };
    const why = emptySetHold(prev, count);
    const fields = { replicas: running, generation: res.generation, previous_generation: this.gen, epoch: count.epoch, server: count.server, source };
    if (why === undefined) {
      if (was !== null) this.log.warn(fields, `a second answer from ${count.server} confirms the empty assignment set: stopping the ${running.length} engine(s) held back`);
      return false;
    }
    this.holding = running;
    this.log.warn(fields, `holding back an empty assignment set from ${count.server}: ${why}; the ${running.length} engine(s) running here keep running until a second answer says the same`);
    return true;
  }
  /** One reconcile at a time; sets that arrive meanwhile collapse into the newest. */
  private apply(set: Assignment[]): void {
    this.pendingSet = set;
    if (this.applying) return;
    const run = async () => {
      while (this.pendingSet && !this.stopping) {
        const next = this.pendingSet;
        this.pendingSet = null;
        const before = this.processSet.ids().join("\n");
        try {
          await this.processSet.reconcile(next);
        } catch (e) {
          this.log.error({ err: errorText(e) }, "applying assignments failed");
        }
        // A new replica starts out "starting" without a state change to report it, and a stopped
        // one just disappears: either way the server should hear now, not an interval later.
        if (this.processSet.ids().join("\n") !== before) this.replicaChanged();
      }
      // Synchronously after the last check, so an apply() arriving now starts a new run.
      this.applying = null;
    };
    this.applying = Promise.resolve().then(run);
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
      const found = a.engine === "fake" ? undefined : this.engines?.find((e) => e.engine === a.engine);
      // An engine with no known version may have been installed since the last look: ask again
      // now, so the control plane's next attempt finds it.
      if (found !== undefined && found.version === null) void this.probeEngineVersions();
      const smiIndex: Record<string, number> = {};
      for (const g of this.inventory.gpus) if (typeof g.smi_index === "number") smiIndex[g.uuid] = g.smi_index;
      // Local weights only (see localWeightsEnv): the engine is given a path and never the Hub.
      launch = renderLaunch({ ...a, env: localWeightsEnv(a.env) }, {
        host,
        modelPath: modelPathFor(this.config.models_dir, a.model, a.engine, a.revision),
        selfExe: this.selfExe,
        engineAuth: this.config.engine_auth,
        bin: this.engineBins(),
        ...(found !== undefined ? { version: found.version, versionError: found.error } : {}),
        smiIndex,
      });
    }
    return launch;
  }

  // ---- engine versions --------------------------------------------------------------------

  private engineBins() {
    return { vllm: this.config.vllm, python: this.config.sglang_python, llamaServer: this.config.llama_server };
  }

  /** Asks every engine for its version (one look at a time); a change goes out in the next heartbeat. */
  private probeEngineVersions(): Promise<void> {
    if (this.config.simulate !== undefined) return Promise.resolve();
    this.probingEngines ??= (async () => {
      const overrides: Partial<Record<RealEngine, string>> = {};
      if (this.config.vllm_version) overrides.vllm = this.config.vllm_version;
      if (this.config.sglang_version) overrides.sglang = this.config.sglang_version;
      if (this.config.llama_server_version) overrides["llama.cpp"] = this.config.llama_server_version;
      const found = await probeEngines({
        bin: this.engineBins(),
        overrides,
        timeoutMs: this.timing.engineProbeTimeoutMs,
        scheduler: this.scheduler,
        ...(this.probeRun ? { run: this.probeRun } : {}),
      });
      if (JSON.stringify(found) === JSON.stringify(this.engines)) return;
      const first = this.engines === undefined;
      this.engines = found;
      this.log.info(
        Object.fromEntries(found.map((e) => [e.engine, e.version ?? `none (${e.error})`])),
        first ? "engines found" : "engines changed",
      );
      if (!first) {
        this.heartbeatDue = true;
        this.wakeHeartbeat?.();
      }
    })().finally(() => {
      this.probingEngines = null;
    });
    return this.probingEngines;
  }

  private async engineLoop(): Promise<void> {
    if (this.config.simulate !== undefined) return;
    while (!this.stopping) {
      await this.sleep(this.timing.engineProbeIntervalMs, false);
      if (this.stopping) return;
      await this.probeEngineVersions();
    }
  }

  /** Keeps past runs' engine logs within PREVIOUS_LOGS (time, count, size). */
  private async pastLogsLoop(): Promise<void> {
    const dir = join(this.config.state_dir, "logs");
    const keeper = new PastLogKeeper(dir, () => new Set(this.processSet.runningIds().map(fileSafe)), () => this.scheduler.now());
    while (!this.stopping) {
      try {
        const dropped = keeper.sweep();
        if (dropped.length > 0) this.log.debug({ files: dropped }, "past engine logs deleted (kept for `llmgw logs --previous` up to their time and count)");
      } catch (e) {
        this.log.warn({ dir, err: errorText(e) }, "looking over past engine logs failed");
      }
      await this.sleep(this.timing.pastLogSweepMs, false);
    }
  }

  // ---- inventory ----------------------------------------------------------------------------

  private async inventoryLoop(): Promise<void> {
    while (!this.stopping) {
      await this.sleep(this.timing.inventoryIntervalMs, false);
      if (this.stopping) return;
      try {
        const next = await this.inventoryTaker.take(false);
        if (this.stopping) return;
        if (JSON.stringify(next) !== JSON.stringify(this.inventory)) {
          this.log.info({ gpus: next.gpus.length, unhealthy: next.gpus.filter((g) => !g.healthy).length, models: next.models }, "inventory changed");
          this.inventory = next;
          this.heartbeatDue = true;
          this.wakeHeartbeat?.();
        }
      } catch (e) {
        this.log.warn({ err: errorText(e) }, "taking inventory failed; reporting the previous one");
      }
    }
  }

  // ---- plumbing -----------------------------------------------------------------------------

  private identity(): Pick<HeartbeatRequest, "node" | "address" | "agent_version" | "labels" | "fabrics"> {
    return { node: this.name, address: this.address, agent_version: VERSION, labels: this.labels, fabrics: this.config.fabric };
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

  /**
   * The interval the server asks for, within sane bounds: a loaded head node asks for up to 4×
   * the configured one (control/load.ts); a broken or hostile answer can neither make this node
   * spin (under 1 s, or its own interval if shorter) nor fall silent (over a minute, or 8× its own).
   */
  private boundInterval(ms: number): number {
    const own = this.timing.heartbeatIntervalMs;
    return Math.min(Math.max(own * 8, 60_000), Math.max(Math.min(own, 1_000), ms));
  }

  private url(path: string, server?: string): string {
    return this.head.url(path, server);
  }

  /** The whole list for log lines, when there is one. */
  private serverList(): { servers?: string[] } {
    return this.servers.length > 1 ? { servers: this.servers } : {};
  }

  private logFailure(what: string, path: string, r: Failure & { server: string }, retryMs: number): void {
    const url = this.url(path.split("?")[0]!, r.server);
    const retry = `retrying in ${retryMs >= 1000 ? `${retryMs / 1000}s` : `${retryMs}ms`}; running replicas are left as they are`;
    switch (r.kind) {
      case "aborted":
      case "switched":
        return;
      case "untrusted":
        this.log.error({ url }, `${what}: ${r.message}; ${retry}`);
        return;
      case "unauthorized":
        this.log.error(
          { url },
          this.credential
            ? `${what}: the server refused this node's credential (${r.message}); was the node deleted on the head node? Then remove ${this.credentialPath} and restart the agent to re-join. ${retry}`
            : `${what}: the server refused the join token (${r.message}); was it changed on the head node? ${retry}`,
        );
        return;
      case "taken":
      case "forbidden":
      case "limited":
        this.log.error({ url }, `${what}: ${r.message}; ${retry}`);
        return;
      case "rejected":
        this.log.error({ url }, `${what}: the server rejected it: ${r.message}; ${retry}`);
        return;
      case "not_found":
        this.log.warn({ url }, `${what}: ${url} answered ${r.message}; is the server an older llmgw? ${retry}`);
        return;
      default:
        this.log.warn({ url }, `${what}: cannot reach ${url}: ${r.message}; ${retry}`);
    }
  }

  /** Waits ms, or until stop(); a wakeable sleep also ends early for an early heartbeat. */
  private sleep(ms: number, wakeable: boolean): Promise<void> {
    if (this.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        timer.cancel();
        this.sleepers.delete(done);
        if (this.wakeHeartbeat === done) this.wakeHeartbeat = null;
        resolve();
      };
      const timer = this.scheduler.after(ms, done);
      this.sleepers.add(done);
      if (wakeable) this.wakeHeartbeat = done;
    });
  }
}

// ---- helpers ------------------------------------------------------------------------------

/** Why a server is left, for the switch's log line ("switching to B: A …"). */
function failureReason(f: Failure): string {
  return f.kind === "unreachable" ? `did not answer (${f.message})` : `answered ${f.message}`;
}

function staleReason(res: HeartbeatResponse, highest: number): string {
  return `answers for ${res.epoch === undefined ? "no leader epoch" : `leader epoch ${res.epoch}`}, older than epoch ${highest}`;
}

function splitPair(kv: string): [string, string] {
  const eq = kv.indexOf("=");
  return [kv.slice(0, eq).trim(), kv.slice(eq + 1).trim()];
}

function isWildcard(host: string): boolean {
  return host === "" || host === "0.0.0.0" || host === "::" || host === "[::]";
}

/** The first non-internal IPv4 address: what another machine most likely reaches this one at. */
function defaultAddress(): string {
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  }
  return "127.0.0.1";
}
