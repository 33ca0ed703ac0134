// The node agent daemon behind `llmgw agent`: tells the head node what this node has (GPUs,
// weights, replicas) and runs exactly the engine processes the head node assigns to it.

import { X509Certificate } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { hostname, networkInterfaces } from "node:os";
import { type PeerCertificate, connect as tlsConnect, rootCertificates } from "node:tls";
import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { Name } from "../protocol/common";
import {
  type Assignment,
  type EngineReport,
  type GpuReport,
  HEARTBEAT_LIMITS,
  HeartbeatRequest,
  HeartbeatResponse,
  type ReplicaReport,
} from "../protocol/heartbeat";
import { VERSION } from "../version";
import { probeEngines, type RealEngine, type ProbeRunner } from "./engine-versions";
import { HEALTH_TIMEOUT_MS, type Launch, LaunchError, renderLaunch } from "./engines";
import { type Discovery, type DiscoverOptions, discoverGpus, simulatedGpus } from "./gpus";
import { credentialDigest, logsToken } from "../protocol/heartbeat";
import { startLogServer } from "./logs";
import { selfSignedCertificate } from "./selfsigned";
import { ProcessSet, fileSafe, type LaunchSpec } from "./runner";
import { localWeightsEnv, modelPathFor, scanModels } from "./weights";

// modelPathFor lives in weights.ts; re-exported for callers that import it from here.
export { modelPathFor } from "./weights";

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
};
export type AgentTiming = typeof AGENT_TIMING;

/** The node's own credential, in its state dir; the head node names this file when it refuses a re-join. */
export const CREDENTIAL_FILE = "node.credential";

/** Writes a file only its owner can read, atomically: a crash never leaves half a credential. */
function writePrivate(path: string, content: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, content, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

export type FetchLike = (input: string | URL | Request, init?: BunFetchRequestInit) => Promise<Response>;

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
}

/** A problem the operator has to fix (bad setting, refused token); main prints its message alone. */
export class AgentError extends Error {
  readonly userFacing = true;
  constructor(
    message: string,
    /** True when start() gave up because stop() was called, not because something failed. */
    readonly stopped = false,
  ) {
    super(message);
  }
}

interface Inventory {
  gpus: GpuReport[];
  models: string[];
  /** Hugging Face revisions per model in the hub cache layout, newest first; the head node picks one per replica. */
  model_revisions?: Record<string, string[]>;
  /** Sent in the heartbeat so the head node can say why this node reports no (or fewer) GPUs. */
  discovery_error?: string;
}

type Failure = {
  ok: false;
  kind: "aborted" | "unreachable" | "unauthorized" | "forbidden" | "untrusted" | "rejected" | "not_found" | "taken" | "limited" | "http" | "bad_answer";
  message: string;
};

/** The code of the error the pin check hands to fetch (which rejects with that very error). */
const PIN_MISMATCH = "LLMGW_PIN_MISMATCH";
/** Certificate verification failures, as Bun's fetch reports them in `code`. */
const CERT_ERROR = /CERT|SELF_SIGNED|LEAF_SIGNATURE|ISSUER|ALTNAME|HOSTNAME_MISMATCH/;
type Outcome<T> = { ok: true; value: T } | Failure;

export class NodeAgent {
  readonly name: string;
  readonly address: string;
  private readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly selfExe: string[];
  private readonly fetchFn: FetchLike;
  private readonly timing: AgentTiming;
  private readonly discoverFn: (opts: DiscoverOptions) => Promise<Discovery>;
  private readonly server: string;
  private readonly labels: Record<string, string>;
  private readonly classOverrides: Record<string, string>;
  private readonly processSet: ProcessSet;
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
   * Bumps whenever an answer's assignments are applied. An answer whose request went out before
   * the latest applied answer arrived may describe an older state (the heartbeat and the long
   * poll race), so it is dropped; one sent after it cannot be older.
   */
  private epoch = 0;
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
  private debounce: ReturnType<typeof setTimeout> | null = null;
  private loops: Promise<void>[] = [];

  // An https server: the connections to it (one pool, one certificate check per connection).
  private session: Bun.FetchSession | undefined;
  /** Pinned without --server-ca: the server's certificate must be fetched and checked first. */
  private needsProbe = false;
  private probing: Promise<Failure | undefined> | null = null;

  // What has been logged already, so a condition that lasts is said once, not every 30 s.
  private lastDiscoveryError: string | undefined;
  private lastWarnings = new Set<string>();
  private readonly skippedWeights = new Set<string>();

  constructor(opts: NodeAgentOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.selfExe = opts.selfExe;
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
    this.timing = { ...AGENT_TIMING, ...opts.timing };
    this.discoverFn = opts.discover ?? discoverGpus;
    this.probeRun = opts.probeRun;
    this.intervalMs = this.timing.heartbeatIntervalMs;
    this.server = opts.config.server.replace(/\/+$/, "");
    this.name = opts.config.name ?? hostname();
    this.address = opts.config.address ?? defaultAddress();
    this.labels = Object.fromEntries(opts.config.label.map(splitPair));
    this.classOverrides = Object.fromEntries(opts.config.gpu_class.map(splitPair));
    this.credentialPath = join(opts.config.state_dir, CREDENTIAL_FILE);

    const engineHost = opts.config.engine_host;
    this.processSet = new ProcessSet({
      render: (a) => this.render(a),
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
    });
  }

  /** The last assignment generation applied (null before the first answer). */
  get generation(): number | null {
    return this.gen;
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
      if (/^https:/i.test(this.server)) {
        const host = listen.host === "0.0.0.0" || listen.host === "::" ? this.address : listen.host;
        this.logsTls = this.logCertificate([...new Set([this.address, host])]);
      }
      this.logServer = startLogServer({
        host: listen.host,
        port: listen.port,
        token: () => (this.credential ? logsToken(credentialDigest(this.credential)) : undefined),
        ...(this.logsTls ? { tls: this.logsTls } : {}),
        fileFor: (id) => join(logDir, `${fileSafe(id)}.log`),
        log: this.log,
      });
      this.log.info({ port: this.logServer.port }, "engine logs served for `llmgw logs`");
    } catch (e) {
      this.log.warn({ listen: `${listen.host}:${listen.port}`, err: (e as Error).message }, "cannot serve engine logs: `llmgw logs` will not reach this node");
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
      this.prepareStateDir();
      this.loadCredential();
      this.setUpTls();
      [this.inventory] = await Promise.all([this.takeInventory(true), this.probeEngineVersions()]);
      const adopted = await this.processSet.recover();
      if (adopted.length > 0) this.log.info({ replicas: adopted }, `adopted ${adopted.length} running engine(s) from the previous agent`);
      if (this.stopping) throw new AgentError("the agent was stopped before it registered", true);
      this.log.info(
        { node: this.name, address: this.address, server: this.server, gpus: this.inventory.gpus.length, models: this.inventory.models.length },
        "registering with the server",
      );
      this.startLogs();
      this.loops.push(this.heartbeatLoop(), this.inventoryLoop(), this.engineLoop());
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
      if (this.debounce) clearTimeout(this.debounce);
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
      this.session?.close();
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

  private async heartbeatOnce(): Promise<"ok" | "fatal" | Failure> {
    const path = "/agent/v1/heartbeat";
    const body: HeartbeatRequest = {
      ...this.identity(),
      ...this.inventory,
      ...(this.engines !== undefined ? { engines: this.engines } : {}),
      replicas: this.processSet.reports(),
      logs_port: this.logServer?.port ?? null,
      logs_tls_cert: this.logServer && this.logsTls ? this.logsTls.cert : null,
    };
    const sentEpoch = this.epoch;
    const joining = this.credential === undefined;
    const r = await this.request(path, { method: "POST", body: JSON.stringify(body) }, this.timing.requestTimeoutMs);
    if (this.stopping) return "fatal";
    if (!r.ok && r.kind === "forbidden" && !this.registered) {
      // A wrong address, the node limit, another node's name: retrying changes nothing.
      this.log.error({ url: this.url(path) }, `the server refused this node: ${r.message}`);
      this.registration?.reject(new AgentError(`the server refused node ${this.name} (${this.url(path)}): ${r.message}`));
      return "fatal";
    }
    if (!r.ok && r.kind === "taken" && !this.registered) {
      this.log.error({ url: this.url(path) }, r.message);
      this.registration?.reject(new AgentError(`the server refused to let the join token speak for node ${this.name}: ${r.message}`));
      return "fatal";
    }
    if (!r.ok && r.kind === "unauthorized" && !joining && !this.registered) {
      const message = `the server does not accept this node's credential (${r.message}); if the node was deleted on the head node, remove ${this.credentialPath} and start the agent again with the join token to re-join`;
      this.log.error({ url: this.url(path) }, message);
      this.registration?.reject(new AgentError(message));
      return "fatal";
    }
    if (r.ok && joining && r.value.credential) {
      try {
        this.saveCredential(r.value.credential);
      } catch (e) {
        // Without it the node could not heartbeat after a restart; say so now, loudly.
        this.log.error({ path: this.credentialPath, err: (e as Error).message }, "cannot store this node's credential: after a restart the node must be deleted on the head node to join again");
      }
      this.credential = r.value.credential;
      this.log.info({ path: this.credentialPath }, "joined: this node's own credential is stored and used from now on");
    }
    if (!r.ok) {
      if (r.kind === "untrusted" && !this.registered) {
        // Retrying cannot make a certificate trusted: the operator has to give a CA or the pin.
        this.log.error({ url: this.url(path) }, r.message);
        this.registration?.reject(new AgentError(`${r.message} (server ${this.server})`));
        return "fatal";
      }
      if (r.kind === "unauthorized" && !this.registered) {
        this.log.error({ url: this.url(path) }, `the server refused the join token: ${r.message}`);
        this.registration?.reject(
          new AgentError(
            `the server refused the join token (${this.url(path)}: ${r.message}); use the token in <data-dir>/join.token on the head node`,
          ),
        );
        return "fatal";
      }
      return r;
    }
    this.intervalMs = r.value.heartbeat_interval_ms;
    // The same generation means the same set: applying it again would only cost a reconcile.
    if (r.value.generation !== this.gen) this.accept(r.value, sentEpoch, "heartbeat");
    if (!this.registered) {
      this.registered = true;
      this.log.info({ node: this.name, server: this.server, interval_ms: this.intervalMs }, "registered with the server");
      this.registration?.resolve();
    }
    return "ok";
  }

  private replicaChanged(): void {
    if (this.stopping || this.debounce) return;
    this.debounce = setTimeout(() => {
      this.debounce = null;
      this.heartbeatDue = true;
      this.wakeHeartbeat?.();
    }, this.timing.changeDebounceMs);
  }

  // ---- assignments ------------------------------------------------------------------------

  private async longPollLoop(): Promise<void> {
    const path = "/agent/v1/assignments";
    let backoff = this.timing.backoffInitialMs;
    let failing = false;
    while (!this.stopping) {
      const asked = this.gen ?? 0;
      const wait = this.timing.longPollWaitMs;
      const query = `?node=${encodeURIComponent(this.name)}&generation=${asked}&wait_ms=${wait}`;
      const sentEpoch = this.epoch;
      const began = performance.now();
      const r = await this.request(path + query, { method: "GET" }, wait + this.timing.requestTimeoutMs);
      if (this.stopping) return;
      if (r.ok) {
        if (failing) this.log.info({ url: this.url(path) }, "the assignments long poll works again");
        failing = false;
        backoff = this.timing.backoffInitialMs;
        this.intervalMs = r.value.heartbeat_interval_ms;
        this.accept(r.value, sentEpoch, "long poll");
        // An unchanged answer long before wait_ms means something in between does not hold
        // requests open; without a pause this loop would spin.
        if (r.value.generation === asked && performance.now() - began < Math.min(1_000, wait / 2)) await this.sleep(backoff, false);
        continue;
      }
      failing = true;
      this.logFailure("assignments long poll", path, r, backoff);
      await this.sleep(backoff, false);
      backoff = Math.min(backoff * 2, this.timing.backoffMaxMs);
    }
  }

  private accept(res: HeartbeatResponse, sentEpoch: number, source: string): void {
    if (sentEpoch !== this.epoch) {
      // The long poll asks again with the generation now applied, so nothing newer is lost.
      this.log.debug({ generation: res.generation, source }, "dropping an answer that may be older than the one applied");
      return;
    }
    this.epoch++;
    if (res.generation !== this.gen)
      this.log.info({ generation: res.generation, replicas: res.assignments.map((a) => a.id), source }, "assignments changed");
    this.gen = res.generation;
    this.apply(res.assignments);
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
          this.log.error({ err: e }, "applying assignments failed");
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

  private render(a: Assignment): LaunchSpec {
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
    // Otherwise the health check would find whatever else listens there and call the replica ready.
    // SGLang's ranks >= 1 serve /health on the replica's port too.
    if (launch.servesHttp) assertPortFree(host, a.port, a.id);
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
      const found = await probeEngines({ bin: this.engineBins(), overrides, timeoutMs: this.timing.engineProbeTimeoutMs, ...(this.probeRun ? { run: this.probeRun } : {}) });
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

  // ---- inventory ----------------------------------------------------------------------------

  private async inventoryLoop(): Promise<void> {
    while (!this.stopping) {
      await this.sleep(this.timing.inventoryIntervalMs, false);
      if (this.stopping) return;
      try {
        const next = await this.takeInventory(false);
        if (this.stopping) return;
        if (JSON.stringify(next) !== JSON.stringify(this.inventory)) {
          this.log.info({ gpus: next.gpus.length, unhealthy: next.gpus.filter((g) => !g.healthy).length, models: next.models }, "inventory changed");
          this.inventory = next;
          this.heartbeatDue = true;
          this.wakeHeartbeat?.();
        }
      } catch (e) {
        this.log.warn({ err: e }, "taking inventory failed; reporting the previous one");
      }
    }
  }

  private async takeInventory(first: boolean): Promise<Inventory> {
    const cfg = this.config;
    if (cfg.simulate !== undefined) {
      let gpus: GpuReport[];
      try {
        gpus = simulatedGpus(cfg.simulate, cfg.simulate_unhealthy, this.name);
      } catch (e) {
        throw new AgentError(`--simulate: ${(e as Error).message}`);
      }
      const models: string[] = [];
      for (const m of cfg.simulate_models) {
        if (Name.safeParse(m).success) models.push(m);
        else if (first) this.log.warn({ model: m }, `--simulate-models: "${m}" is not a valid model name; left out`);
      }
      return { gpus, models: clipModels([...new Set(models)].sort()) };
    }
    const [found, { models, revisions }] = await Promise.all([
      this.discoverFn({ nvidiaSmi: cfg.nvidia_smi, classOverrides: this.classOverrides }),
      scanModels(cfg.models_dir, (path, reason) => {
        if (this.skippedWeights.has(path)) return;
        this.skippedWeights.add(path);
        this.log.warn({ path }, `weights left out of the report: ${reason}`);
      }),
    ]);
    if (found.error !== this.lastDiscoveryError) {
      if (found.error !== undefined) this.log.error({ nvidia_smi: cfg.nvidia_smi }, found.error);
      else this.log.info({ gpus: found.gpus.length }, "GPU discovery works again");
      this.lastDiscoveryError = found.error;
    }
    const warnings = new Set(found.warnings);
    for (const w of warnings) if (!this.lastWarnings.has(w)) this.log.warn(w);
    this.lastWarnings = warnings;
    if (first && found.error === undefined) this.log.info({ gpus: found.gpus.length, models: models.length, models_dir: cfg.models_dir }, "inventory taken");
    const kept = clipModels(models);
    // hasOwn: a model may be named "constructor", which every object answers to.
    const model_revisions = Object.fromEntries(kept.filter((m) => Object.hasOwn(revisions, m)).map((m) => [m, revisions[m]!]));
    return { gpus: found.gpus, models: kept, model_revisions, ...(found.error !== undefined ? { discovery_error: found.error } : {}) };
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

  private url(path: string): string {
    return this.server + path;
  }

  // ---- credential and state dir -------------------------------------------------------------

  /** The state dir holds the credential and engine logs: its owner's alone. */
  private prepareStateDir(): void {
    const dir = this.config.state_dir;
    try {
      if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
      chmodSync(dir, 0o700);
    } catch (e) {
      throw new AgentError(`--state-dir ${dir}: cannot create or restrict it (${(e as Error).message})`);
    }
  }

  private loadCredential(): void {
    let text: string;
    try {
      text = readFileSync(this.credentialPath, "utf8");
    } catch {
      // Read once, here: a token file that goes away later cannot fail a heartbeat in flight.
      this.joinTokenValue = this.readJoinToken();
      if (this.joinTokenValue === undefined)
        throw new AgentError(`no join token: give --token-file FILE (or env LLMGW_TOKEN) with the head node's <data-dir>/join.token; the node has no credential yet (${this.credentialPath})`);
      return;
    }
    let stored: { node?: unknown; credential?: unknown };
    try {
      stored = JSON.parse(text) as typeof stored;
    } catch {
      throw new AgentError(`${this.credentialPath} is not a credential file this agent wrote; remove it to join again`);
    }
    if (typeof stored.credential !== "string" || typeof stored.node !== "string") throw new AgentError(`${this.credentialPath} is not a credential file this agent wrote; remove it to join again`);
    if (stored.node !== this.name)
      throw new AgentError(`${this.credentialPath} is node ${stored.node}'s credential, and this agent is node ${this.name}: use --name ${stored.node}, or another --state-dir for a new node`);
    chmodSync(this.credentialPath, 0o600);
    this.credential = stored.credential;
    this.log.info({ path: this.credentialPath }, "using this node's stored credential");
  }

  private saveCredential(credential: string): void {
    writePrivate(this.credentialPath, `${JSON.stringify({ node: this.name, server: this.server, credential })}\n`);
  }

  private joinTokenValue: string | undefined;

  /** What a request presents until the node has its credential. */
  private joinToken(): string {
    return this.joinTokenValue ?? "";
  }

  /** --token, else the first line of --token-file. */
  private readJoinToken(): string | undefined {
    if (this.config.token) return this.config.token;
    const file = this.config.token_file;
    if (!file) return undefined;
    try {
      const t = readFileSync(file, "utf8").trim();
      return t === "" ? undefined : t;
    } catch (e) {
      throw new AgentError(`--token-file ${file}: cannot read it (${(e as Error).message})`);
    }
  }

  /** The log listener's certificate: made once, kept beside the credential (key 0600). */
  private logCertificate(names: string[]): { cert: string; key: string } {
    const certPath = join(this.config.state_dir, "logs-tls.crt");
    const keyPath = join(this.config.state_dir, "logs-tls.key");
    try {
      const cert = readFileSync(certPath, "utf8");
      const key = readFileSync(keyPath, "utf8");
      const x = new X509Certificate(cert);
      if (names.every((n) => x.checkIP(n) !== undefined || x.checkHost(n) !== undefined)) return { cert, key };
    } catch {
      // None yet, or unreadable: make one.
    }
    const made = selfSignedCertificate(names);
    writePrivate(keyPath, made.key);
    writePrivate(certPath, made.cert);
    this.log.info({ cert: certPath, fingerprint256: made.fingerprint256 }, "engine logs served over HTTPS with a self-signed certificate the head node pins");
    return { cert: made.cert, key: made.key };
  }

  private async request(path: string, init: RequestInit, timeoutMs: number): Promise<Outcome<HeartbeatResponse>> {
    if (this.needsProbe) {
      const failed = await this.probe(timeoutMs);
      if (failed) return failed;
    }
    let res: Response;
    try {
      res = await this.fetchFn(this.url(path), {
        ...init,
        headers: { authorization: `Bearer ${this.credential ?? this.joinToken()}`, "content-type": "application/json" },
        signal: AbortSignal.any([this.abort.signal, AbortSignal.timeout(timeoutMs)]),
        ...(this.session ? { session: this.session } : {}),
      });
    } catch (e) {
      if (this.abort.signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
      const untrusted = this.certificateFailure(e);
      if (untrusted) {
        // Pinned without a CA, the certificate may have changed since the probe: probing
        // again names the fingerprint the server has now.
        const changed = this.needsProbe ? await this.probe(timeoutMs) : undefined;
        return changed?.kind === "untrusted" ? changed : untrusted;
      }
      const err = e as Error;
      const why = err.name === "TimeoutError" ? `no answer within ${Math.round(timeoutMs / 1000)}s` : err.message;
      return { ok: false, kind: "unreachable", message: why };
    }
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      if (this.abort.signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
      return { ok: false, kind: "unreachable", message: `connection lost while reading the answer: ${(e as Error).message}` };
    }
    if (!res.ok) {
      const message = `${res.status} ${serverMessage(text) ?? res.statusText}`;
      const kind =
        res.status === 401
          ? "unauthorized"
          : res.status === 403
            ? "forbidden"
          : res.status === 409
            ? "taken"
            : res.status === 429
              ? "limited"
              : res.status === 400
                ? "rejected"
                : res.status === 404
                  ? "not_found"
                  : "http";
      return { ok: false, kind, message };
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return { ok: false, kind: "bad_answer", message: `the answer is not JSON: ${text.slice(0, 200)}` };
    }
    const parsed = HeartbeatResponse.safeParse(json);
    if (!parsed.success) {
      const first = parsed.error.issues[0];
      return { ok: false, kind: "bad_answer", message: `the answer is not a heartbeat response: ${first?.path.join(".") || "(body)"}: ${first?.message}` };
    }
    return { ok: true, value: parsed.data };
  }

  // ---- TLS --------------------------------------------------------------------------------

  /**
   * How the server's certificate is trusted: --server-ca replaces the system's CAs;
   * --server-fingerprint is checked on every new connection by the session's
   * checkServerIdentity, which Bun's fetch calls only once the chain has verified. A pin
   * without a CA therefore needs the certificate itself as the trust anchor: probe() gets it
   * over node:tls, compares the fingerprint, and trusts that certificate from then on.
   */
  private setUpTls(): void {
    if (!/^https:/i.test(this.server)) return;
    const { server_ca: caPath, server_fingerprint: pin } = this.config;
    let ca: string | undefined;
    if (caPath !== undefined) {
      try {
        ca = readFileSync(caPath, "utf8");
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        const why = err.code === "ENOENT" ? "no such file" : err.code === "EACCES" ? "permission denied" : err.message;
        throw new AgentError(`--server-ca ${caPath}: cannot read it (${why})`);
      }
      try {
        new X509Certificate(ca);
      } catch (e) {
        throw new AgentError(`--server-ca ${caPath}: not a PEM certificate (${(e as Error).message})`);
      }
    }
    if (pin !== undefined && ca === undefined) {
      this.needsProbe = true;
      return;
    }
    if (ca !== undefined || pin !== undefined) this.useTls(ca);
  }

  private useTls(ca: string | string[] | undefined): void {
    const pin = this.config.server_fingerprint;
    this.session?.close();
    this.session = new Bun.FetchSession({
      tls: {
        ...(ca !== undefined ? { ca } : {}),
        // The pin replaces the host name check: it names the one certificate to accept, and
        // agents often reach the head node by an address its certificate does not list.
        ...(pin !== undefined ? { checkServerIdentity: (_host: string, cert: PeerCertificate) => pinCheck(pin, cert) } : {}),
      },
    });
  }

  /** One probe at a time; the heartbeat and the long poll share its outcome. */
  private probe(timeoutMs: number): Promise<Failure | undefined> {
    this.probing ??= (async (): Promise<Failure | undefined> => {
      const pin = this.config.server_fingerprint!;
      const u = new URL(this.server);
      const host = u.hostname.replace(/^\[|\]$/g, "");
      let cert: PeerCertificate;
      try {
        cert = await peerCertificate(host, Number(u.port || 443), timeoutMs, this.abort.signal);
      } catch (e) {
        if (this.abort.signal.aborted) return { ok: false, kind: "aborted", message: "stopped" };
        return { ok: false, kind: "unreachable", message: (e as Error).message };
      }
      const mismatch = pinCheck(pin, cert);
      if (mismatch) return { ok: false, kind: "untrusted", message: mismatch.message };
      // Beside the system's CAs, so a pinned certificate a public CA signed verifies as well.
      this.useTls([...rootCertificates, derToPem(cert.raw)]);
      this.needsProbe = false;
      return undefined;
    })().finally(() => {
      this.probing = null;
    });
    return this.probing;
  }

  /** A fetch error that says the server's certificate was not accepted, as the operator's to-do. */
  private certificateFailure(e: unknown): Failure | undefined {
    const err = e as Error & { code?: string };
    const code = typeof err.code === "string" ? err.code : "";
    if (code !== PIN_MISMATCH && !CERT_ERROR.test(code)) return undefined;
    const { server_ca: caPath, server_fingerprint: pin } = this.config;
    const pinOnly = pin !== undefined && caPath === undefined;
    if (pinOnly) this.needsProbe = true;
    let message: string;
    if (code === PIN_MISMATCH) message = err.message;
    else if (pinOnly)
      message = `the server's certificate matches --server-fingerprint but does not verify (${err.message}, ${code}): a pin alone trusts a self-signed certificate; for one a private CA signed, give that CA with --server-ca as well`;
    else if (/ALTNAME|HOSTNAME/.test(code))
      message = `the server's TLS certificate is not valid for ${new URL(this.server).hostname} (${err.message}); use a --server name or address its certificate lists, or pin the certificate with --server-fingerprint`;
    else if (caPath !== undefined)
      message = `the server's TLS certificate is not trusted by --server-ca ${caPath} (${err.message}, ${code}); give the head node's --tls-cert, or the CA that signed it`;
    else
      message = `the server's TLS certificate is not trusted (${err.message}, ${code}); give --server-ca FILE (the head node's --tls-cert, or the CA that signed it) or pin it with --server-fingerprint SHA256 (llmgw serve prints it)`;
    return { ok: false, kind: "untrusted", message };
  }

  private logFailure(what: string, path: string, r: Failure, retryMs: number): void {
    const url = this.url(path.split("?")[0]!);
    const retry = `retrying in ${retryMs >= 1000 ? `${retryMs / 1000}s` : `${retryMs}ms`}; running replicas are left as they are`;
    switch (r.kind) {
      case "aborted":
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
        clearTimeout(timer);
        this.sleepers.delete(done);
        if (this.wakeHeartbeat === done) this.wakeHeartbeat = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
      if (wakeable) this.wakeHeartbeat = done;
    });
  }
}

// ---- helpers ------------------------------------------------------------------------------

function splitPair(kv: string): [string, string] {
  const eq = kv.indexOf("=");
  return [kv.slice(0, eq).trim(), kv.slice(eq + 1).trim()];
}

/** The pin check: undefined when the certificate is the pinned one, else the error to fail with. */
function pinCheck(pin: string, cert: PeerCertificate): Error | undefined {
  const got = (cert.fingerprint256 ?? "").toUpperCase();
  if (got === pin) return undefined;
  const err = new Error(`the server's certificate does not match --server-fingerprint: expected ${pin}, got ${got || "(none)"}`);
  return Object.assign(err, { code: PIN_MISMATCH });
}

/** The server's leaf certificate, without judging it (the pin does that). */
function peerCertificate(host: string, port: number, timeoutMs: number, signal: AbortSignal): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const socket = tlsConnect({ host, port, rejectUnauthorized: false, ...(isIP(host) ? {} : { servername: host }) });
    const done = (e: Error | undefined, cert?: PeerCertificate) => {
      clearTimeout(timer);
      signal.removeEventListener("abort", onAbort);
      socket.destroy();
      if (e) reject(e);
      else resolve(cert!);
    };
    const onAbort = () => done(new Error("stopped"));
    const timer = setTimeout(() => done(new Error(`no TLS handshake within ${Math.round(timeoutMs / 1000)}s`)), timeoutMs);
    signal.addEventListener("abort", onAbort, { once: true });
    socket.once("secureConnect", () => {
      const cert = socket.getPeerCertificate();
      if (!cert?.raw) done(new Error(`the TLS handshake with ${host}:${port} gave no certificate`));
      else done(undefined, cert);
    });
    socket.once("error", (e) => done(new Error(`TLS handshake with ${host}:${port} failed: ${e.message}`)));
  });
}

function derToPem(der: Buffer): string {
  return `-----BEGIN CERTIFICATE-----\n${der.toString("base64").match(/.{1,64}/g)!.join("\n")}\n-----END CERTIFICATE-----\n`;
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

function clipModels(models: string[]): string[] {
  return models.length > HEARTBEAT_LIMITS.models ? models.slice(0, HEARTBEAT_LIMITS.models) : models;
}

/** The admin/agent API's error message from an error body, if it is one. */
function serverMessage(text: string): string | undefined {
  try {
    const body = JSON.parse(text) as { error?: { message?: unknown } };
    if (typeof body.error?.message === "string") return body.error.message;
  } catch {
    // Not JSON: a proxy's page, say.
  }
  const t = text.trim();
  return t === "" ? undefined : t.slice(0, 300);
}

/** Throws LaunchError when something already listens on host:port. */
function assertPortFree(host: string, port: number, replica: string): void {
  let probe: ReturnType<typeof Bun.serve>;
  try {
    probe = Bun.serve({ hostname: host.replace(/^\[|\]$/g, "") || "0.0.0.0", port, fetch: () => new Response(null, { status: 503 }) });
  } catch (e) {
    throw new LaunchError(`replica ${replica}: port ${port} on ${host} is already in use on this node (${(e as Error).message}); the engine could not listen there`);
  }
  void probe.stop(true);
}
