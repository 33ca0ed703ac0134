// The agent's process runner: one ReplicaProcess per assigned shard (spawn, health-poll, stop,
// report), and a ProcessSet that reconciles the running set against the control plane's
// assignments. Engines run in their own session with their output in a log file, so an agent
// restart can leave them running and adopt them again from a small state file.
//
// Logs and state files are the agent's own (0600 in 0700 directories). A state file holds no
// secret: the catalog env (HF_TOKEN and the like) and the replica's engine key are left out,
// since an adopted engine already has them and the head node's next assignment says them again.

import { chmodSync, closeSync, fchmodSync, fstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmSync, writeFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { timeoutSignal } from "../lib/abort";
import { errorText, exactDuration } from "../lib/format";
import { realScheduler, type Scheduler, type Timer } from "../lib/scheduler";
import { hostPort } from "../lib/net";
import { safeText } from "../lib/text";
import { rootCause, tellingLine, type EngineName } from "./engine-failures";
import { type AgentLogger, silentLogger } from "./log";
import { rotateForNewRun } from "./previous-logs";
import { Assignment, REPLICA_ERROR_MAX, type ReplicaReport, type ReplicaRunState } from "../protocol/heartbeat";

/** The runner logs in the agent's one shape (log.ts); kept under this name for its callers. */
export type Logger = AgentLogger;
const silent = silentLogger;

/** What to run; the shape engines.ts renders. */
export type LaunchSpec = {
  cmd: string[];
  env: Record<string, string>;
  servesHttp?: boolean;
  /** The engine's key: sent with the health probe, and masked wherever the command line is written. */
  apiKey?: string | null;
};

export const RUNNER_DEFAULTS = {
  healthInterval: 2_000,
  /**
   * Large models take minutes to load and compile; 10 minutes before calling a start failed,
   * unless the assignment says its profile's own (start_timeout_ms).
   */
  startTimeout: 600_000,
  healthTimeout: 2_000,
  stopGrace: 30_000,
} as const;

/** Bytes read from the end of this run's log to find the root cause. */
const TAIL_BYTES = 64 * 1024;
/** Longest line quoted as the cause. */
const MAX_CAUSE = 2048;

export type ReplicaProcessOptions = {
  assignment: Assignment;
  /** The command, or a function rendering it: a render error becomes a failed replica, not a crash. */
  launch: LaunchSpec | (() => LaunchSpec);
  logDir: string;
  /** Where to record {pid, port, assignment} so a restarted agent can adopt the process. */
  stateDir?: string;
  healthInterval?: number;
  /** How long a starting engine has to become healthy when its assignment does not say (start_timeout_ms null). */
  startTimeout?: number;
  healthTimeout?: number;
  /** Address /health is polled at: 127.0.0.1 reaches an engine bound to 0.0.0.0; set it when the engine binds one address. */
  healthHost?: string;
  fetch?: (url: string, init?: RequestInit) => Promise<Response>;
  logger?: Logger;
  onChange?: (report: ReplicaReport) => void;
  /** Health polls, the start deadline, stop grace and liveness checks; realScheduler unless a test drives time. */
  scheduler?: Scheduler;
};

/** Contents of `<stateDir>/<id>.json`. */
export type ReplicaStateFile = {
  pid: number;
  port: number;
  assignment: Assignment;
  /** Byte offset in the log where this run's output starts, so a failure quotes this run only. */
  log_offset: number;
  /** Whether the engine serves /health (false: headless shard, watched for liveness only). */
  serves_http: boolean;
  /** Kernel start time of the pid (/proc/<pid>/stat field 22), to tell our process from a reused pid. */
  proc_start: string | null;
};

export class ReplicaProcess {
  readonly id: string;
  readonly port: number;
  readonly assignment: Assignment;
  readonly logPath: string;

  private state: ReplicaRunState = "starting";
  private error: string | null = null;
  private proc: Subprocess | null = null;
  private pidValue: number | null = null;
  private servesHttp = true;
  /** Sent as a bearer token with the health probe; null when the engine was given no key (or it is not known yet). */
  private probeKey: string | null = null;
  private logOffset = 0;
  private started = false;
  private exited = false;
  private exitWaiters: Array<() => void> = [];
  private healthTimer: Timer | null = null;
  private deadlineTimer: Timer | null = null;
  private watchTimer: Timer | null = null;
  private stopping: Promise<void> | null = null;
  private detached = false;

  private readonly opts: ReplicaProcessOptions;
  private readonly log: Logger;
  private readonly healthInterval: number;
  private readonly startTimeout: number;
  private readonly healthTimeout: number;
  private readonly fetchFn: (url: string, init?: RequestInit) => Promise<Response>;
  private readonly scheduler: Scheduler;

  constructor(opts: ReplicaProcessOptions) {
    this.opts = opts;
    this.assignment = opts.assignment;
    this.id = opts.assignment.id;
    this.port = opts.assignment.port;
    this.logPath = join(opts.logDir, `${fileSafe(this.id)}.log`);
    this.log = opts.logger ?? silent;
    this.healthInterval = opts.healthInterval ?? RUNNER_DEFAULTS.healthInterval;
    this.startTimeout = opts.assignment.start_timeout_ms ?? opts.startTimeout ?? RUNNER_DEFAULTS.startTimeout;
    this.healthTimeout = opts.healthTimeout ?? RUNNER_DEFAULTS.healthTimeout;
    this.fetchFn = opts.fetch ?? ((url, init) => fetch(url, init));
    this.scheduler = opts.scheduler ?? realScheduler;
  }

  get pid(): number | null {
    return this.pidValue;
  }

  /** Whether this replica's engine process is alive now (started and not yet exited). */
  get engineRunning(): boolean {
    return this.pidValue !== null && !this.exited;
  }

  get currentState(): ReplicaRunState {
    return this.state;
  }

  report(): ReplicaReport {
    return { id: this.id, state: this.state, port: this.port, error: this.error };
  }

  /** Spawns the engine. A second call does nothing. */
  start(): void {
    if (this.started) return;
    this.started = true;
    let spec: LaunchSpec;
    let fd: number | null = null;
    try {
      spec = typeof this.opts.launch === "function" ? this.opts.launch() : this.opts.launch;
      if (spec.cmd.length === 0) throw new Error("empty command");
      privateDir(this.opts.logDir);
      this.keepPreviousRun();
      // The child writes straight into the log (not through a pipe to us) so it keeps running
      // and logging when the agent restarts: a write to a dead pipe would SIGPIPE a C++ engine.
      // Engines log prompts and their arguments: the owner's alone, even a log an older agent made.
      fd = openSync(this.logPath, "a", 0o600);
      fchmodSync(fd, 0o600);
      const header = `\n=== llmgw: starting replica ${this.id} at ${new Date(this.scheduler.now()).toISOString()}: ${JSON.stringify(masked(spec.cmd, spec.apiKey))}\n`;
      writeFileSync(fd, header);
      this.logOffset = fstatSync(fd).size;
      this.proc = Bun.spawn({
        cmd: spec.cmd,
        env: { ...process.env, ...spec.env },
        stdin: "ignore",
        stdout: fd,
        stderr: fd,
        // Own session and process group: engines fork workers (vLLM, SGLang), and signalling the
        // group reaches them; it also keeps a Ctrl-C at the agent's terminal away from them.
        detached: true,
      });
    } catch (e) {
      if (fd !== null) closeSync(fd);
      this.exited = true;
      // Nothing ran, so there is no output of this run to quote.
      this.setState("failed", clampReason(`could not start: ${errorText(e)}`, null));
      this.log.error({ replica: this.id, err: errorText(e) }, "could not start engine");
      return;
    }
    closeSync(fd);
    this.pidValue = this.proc.pid;
    this.servesHttp = spec.servesHttp ?? true;
    this.probeKey = spec.apiKey ?? null;
    this.log.info({ replica: this.id, engine_pid: this.proc.pid, port: this.port, cmd: masked(spec.cmd, spec.apiKey) }, "engine started");
    this.writeStateFile();
    const proc = this.proc;
    void proc.exited.then((code) => this.onExit(describeExit(code, proc.signalCode)));
    this.beginWatching();
  }

  /** The last run's log becomes <id>.previous.log (`llmgw logs --previous`); a failure to move it only costs that. */
  private keepPreviousRun(): void {
    try {
      rotateForNewRun(this.logPath);
    } catch (e) {
      this.log.warn({ replica: this.id, err: errorText(e) }, "could not keep the previous run's log; this run's log is appended to it");
    }
  }

  /**
   * SIGTERM to the engine's process group, SIGKILL after graceMs if the leader is still alive.
   * Resolves once it has exited; idempotent.
   */
  stop(graceMs: number = RUNNER_DEFAULTS.stopGrace): Promise<void> {
    if (this.stopping) return this.stopping;
    this.stopping = (async () => {
      this.clearTimers();
      this.started = true; // a stop before start means never start
      const pid = this.pidValue;
      if (pid !== null && !this.exited) {
        signalGroup(pid, "SIGTERM");
        const gone = await this.waitExit(graceMs);
        if (!gone) {
          this.log.warn({ replica: this.id, engine_pid: pid, grace_ms: graceMs }, "engine ignored SIGTERM; sending SIGKILL");
          signalGroup(pid, "SIGKILL");
          if (!(await this.waitExit(Math.max(graceMs, 10_000))))
            this.log.error({ replica: this.id, engine_pid: pid }, "engine still alive after SIGKILL (stuck in the kernel?)");
        }
      }
      // Workers the leader left behind would keep holding GPU memory.
      if (pid !== null) signalGroup(pid, "SIGKILL", true);
      this.removeStateFile();
      this.setState("stopped", null);
    })();
    return this.stopping;
  }

  /**
   * The head node's current word on this replica, for one adopted from a state file (which
   * keeps no key): its health probe presents the key from then on.
   */
  learn(a: Assignment): void {
    if (a.id === this.id && this.probeKey === null) this.probeKey = a.engine_key;
  }

  /**
   * Stops watching without touching the process, which keeps running (and stays adoptable from
   * its state file). For an agent shutting down with replicas kept across restarts.
   */
  detach(): void {
    this.detached = true;
    this.clearTimers();
    this.proc?.unref();
  }

  // ---- adoption -------------------------------------------------------------------------

  static statePath(stateDir: string, id: string): string {
    return join(stateDir, `${fileSafe(id)}.json`);
  }

  /** Writes a state file without the assignment's secrets (catalog env, engine key). */
  static writeState(stateDir: string, s: ReplicaStateFile): void {
    privateDir(stateDir);
    const path = ReplicaProcess.statePath(stateDir, s.assignment.id);
    // Write then rename, so a crash mid-write never leaves a half file to trip the next start.
    const tmp = `${path}.tmp`;
    const kept: ReplicaStateFile = { ...s, assignment: { ...s.assignment, env: {}, engine_key: null } };
    writeFileSync(tmp, JSON.stringify(kept), { mode: 0o600 });
    // A tmp file left by a crash keeps its old mode through writeFileSync.
    chmodSync(tmp, 0o600);
    renameSync(tmp, path);
  }

  /** Every readable state file in stateDir; unreadable ones are reported and skipped. */
  static readStates(stateDir: string, logger: Logger = silent): ReplicaStateFile[] {
    let names: string[];
    try {
      names = readdirSync(stateDir).filter((n) => n.endsWith(".json"));
    } catch {
      return [];
    }
    const out: ReplicaStateFile[] = [];
    for (const name of names) {
      const path = join(stateDir, name);
      try {
        const raw = JSON.parse(readFileSync(path, "utf8")) as Partial<ReplicaStateFile>;
        const assignment = Assignment.parse(raw.assignment);
        if (typeof raw.pid !== "number" || !Number.isInteger(raw.pid) || raw.pid <= 1) throw new Error("bad pid");
        out.push({
          pid: raw.pid,
          port: typeof raw.port === "number" ? raw.port : assignment.port,
          assignment,
          log_offset: typeof raw.log_offset === "number" ? raw.log_offset : 0,
          serves_http: raw.serves_http !== false,
          proc_start: typeof raw.proc_start === "string" ? raw.proc_start : null,
        });
      } catch (e) {
        logger.warn({ path, err: errorText(e) }, "ignoring unreadable replica state file");
        rmSync(path, { force: true });
      }
    }
    return out;
  }

  /** Whether the pid in a state file is still the engine we started (alive, and not a reused pid). */
  static isOurs(s: ReplicaStateFile): boolean {
    if (!isAlive(s.pid)) return false;
    const now = procStartTime(s.pid);
    return s.proc_start === null || now === null || now === s.proc_start;
  }

  /**
   * Takes over a still-running engine from a previous agent: polls its health (from starting,
   * as the control plane has not heard about it from us) and watches its pid. Null when the
   * process is gone or the pid now belongs to something else; its state file is then removed.
   */
  static adopt(s: ReplicaStateFile, opts: Omit<ReplicaProcessOptions, "assignment" | "launch">): ReplicaProcess | null {
    if (!ReplicaProcess.isOurs(s)) {
      if (opts.stateDir) rmSync(ReplicaProcess.statePath(opts.stateDir, s.assignment.id), { force: true });
      return null;
    }
    const rp = new ReplicaProcess({ ...opts, assignment: s.assignment, launch: { cmd: [], env: {} } });
    rp.started = true;
    rp.pidValue = s.pid;
    rp.logOffset = s.log_offset;
    rp.servesHttp = s.serves_http;
    rp.log.info({ replica: rp.id, engine_pid: s.pid, port: rp.port }, "adopted running engine");
    rp.beginWatching();
    return rp;
  }

  // ---- internals ------------------------------------------------------------------------

  private beginWatching(): void {
    if (this.proc === null) this.scheduleLivenessCheck();
    if (!this.servesHttp) {
      // Nothing to poll: a headless shard is as ready as it can show while it stays alive.
      this.setState("ready", null);
      return;
    }
    this.deadlineTimer = this.scheduler.after(this.startTimeout, () => {
      if (this.state !== "starting" || this.stopping) return;
      const reason = `not healthy after ${exactDuration(this.startTimeout)}`;
      this.log.warn({ replica: this.id, timeout_ms: this.startTimeout }, "engine did not become healthy; stopping it");
      this.fail(reason);
      void this.kill();
    });
    this.scheduleHealth(0);
  }

  private scheduleHealth(delay: number): void {
    this.healthTimer = this.scheduler.after(delay, () => void this.probe());
  }

  private async probe(): Promise<void> {
    this.healthTimer = null;
    if (this.state !== "starting" || this.stopping || this.detached) return;
    let ok = false;
    const timeout = timeoutSignal(this.scheduler, this.healthTimeout);
    try {
      // Every engine leaves /health open today; the key goes along in case one does not.
      const res = await this.fetchFn(`http://${hostPort(this.opts.healthHost ?? "127.0.0.1", this.port)}/health`, {
        signal: timeout.signal,
        ...(this.probeKey !== null ? { headers: { authorization: `Bearer ${this.probeKey}` } } : {}),
      });
      ok = res.status === 200;
      await res.body?.cancel();
    } catch {
      // Refused or timed out: the engine is still loading.
    } finally {
      timeout.cancel();
    }
    if (this.state !== "starting" || this.stopping || this.detached) return;
    if (ok) {
      this.deadlineTimer?.cancel();
      this.deadlineTimer = null;
      this.log.info({ replica: this.id, port: this.port }, "engine ready");
      this.setState("ready", null);
    } else this.scheduleHealth(this.healthInterval);
  }

  /** An adopted process is not our child, so its exit can only be seen by polling the pid. */
  private scheduleLivenessCheck(): void {
    this.watchTimer = this.scheduler.after(this.healthInterval, () => {
      this.watchTimer = null;
      if (this.stopping || this.detached || this.pidValue === null) return;
      if (isAlive(this.pidValue)) this.scheduleLivenessCheck();
      else this.onExit("exited (adopted process; exit code unknown)");
    });
  }

  private onExit(how: string): void {
    if (this.exited) return;
    this.exited = true;
    const waiters = this.exitWaiters;
    this.exitWaiters = [];
    for (const w of waiters) w();
    if (this.stopping || this.detached) return;
    this.clearTimers();
    if (this.pidValue !== null) signalGroup(this.pidValue, "SIGKILL", true);
    this.removeStateFile();
    // A start timeout already failed it; keep that reason rather than the kill that followed.
    if (this.state === "failed") return;
    this.log.warn({ replica: this.id, engine_pid: this.pidValue, how }, "engine exited");
    this.fail(how);
  }

  private fail(how: string): void {
    this.clearTimers();
    const tail = readTail(this.logPath, this.logOffset);
    this.setState("failed", failureReason(how, this.assignment.engine, tail));
  }

  /** Ends a failed engine without marking the replica stopped (its failure stays reported). */
  private async kill(): Promise<void> {
    const pid = this.pidValue;
    if (pid === null || this.exited) return;
    signalGroup(pid, "SIGTERM");
    if (!(await this.waitExit(RUNNER_DEFAULTS.stopGrace))) signalGroup(pid, "SIGKILL");
  }

  /** True once the leader has exited, false if timeoutMs passed first. */
  private waitExit(timeoutMs: number): Promise<boolean> {
    if (this.exited) return Promise.resolve(true);
    return new Promise((resolve) => {
      let poll: Timer | null = null;
      const done = (v: boolean) => {
        timer.cancel();
        poll?.cancel();
        resolve(v);
      };
      const timer = this.scheduler.after(timeoutMs, () => done(this.exited));
      this.exitWaiters.push(() => done(true));
      if (this.proc === null && this.pidValue !== null) {
        const pid = this.pidValue;
        poll = this.scheduler.every(20, () => {
          if (!isAlive(pid)) this.onExit("exited");
        });
      }
    });
  }

  private setState(state: ReplicaRunState, error: string | null): void {
    if (this.state === state && this.error === error) return;
    this.state = state;
    this.error = error;
    try {
      this.opts.onChange?.(this.report());
    } catch (e) {
      this.log.error({ replica: this.id, err: errorText(e) }, "onChange callback threw");
    }
  }

  private clearTimers(): void {
    for (const t of [this.healthTimer, this.deadlineTimer, this.watchTimer]) t?.cancel();
    this.healthTimer = this.deadlineTimer = this.watchTimer = null;
  }

  private writeStateFile(): void {
    const dir = this.opts.stateDir;
    if (!dir || this.pidValue === null) return;
    try {
      ReplicaProcess.writeState(dir, {
        pid: this.pidValue,
        port: this.port,
        assignment: this.assignment,
        log_offset: this.logOffset,
        serves_http: this.servesHttp,
        proc_start: procStartTime(this.pidValue),
      });
    } catch (e) {
      this.log.warn({ replica: this.id, err: errorText(e) }, "could not write replica state file; it will not be adoptable");
    }
  }

  private removeStateFile(): void {
    if (this.opts.stateDir) rmSync(ReplicaProcess.statePath(this.opts.stateDir, this.id), { force: true });
  }
}

export type ProcessSetOptions = Omit<ReplicaProcessOptions, "assignment" | "launch" | "onChange"> & {
  /** Renders an assignment into a command (engines.ts renderLaunch with this node's paths bound). */
  render: (a: Assignment) => LaunchSpec;
  /** The /health probe timeout for one replica (per engine); healthTimeout when it gives none. */
  healthTimeoutFor?: (a: Assignment) => number | undefined;
  /** Leave engines running when the agent exits and adopt them on the next start. */
  keepAcrossRestarts?: boolean;
  stopGrace?: number;
  onChange?: (report: ReplicaReport) => void;
};

/** All replica processes of one agent, by replica id. */
export class ProcessSet {
  private readonly procs = new Map<string, ReplicaProcess>();
  private readonly leaving = new Set<Promise<void>>();
  private queue: Promise<void> = Promise.resolve();
  private readonly opts: ProcessSetOptions;
  private readonly log: Logger;

  constructor(opts: ProcessSetOptions) {
    this.opts = opts;
    this.log = opts.logger ?? silent;
  }

  get(id: string): ReplicaProcess | undefined {
    return this.procs.get(id);
  }

  ids(): string[] {
    return [...this.procs.keys()];
  }

  reports(): ReplicaReport[] {
    return [...this.procs.values()].map((p) => p.report());
  }

  /** Ids of the replicas whose engine process is alive now. */
  runningIds(): string[] {
    return [...this.procs.values()].filter((p) => p.engineRunning).map((p) => p.id);
  }

  /**
   * Deals with engines a previous agent left behind (per the state directory): adopts the ones
   * still running when keeping replicas across restarts, otherwise stops them, so nothing runs
   * that this agent does not know about. Returns the adopted replica ids.
   */
  recover(): Promise<string[]> {
    return this.serialize(async () => {
      const dir = this.opts.stateDir;
      if (!dir) return [];
      const adopted: string[] = [];
      const strays: Promise<void>[] = [];
      for (const s of ReplicaProcess.readStates(dir, this.log)) {
        if (this.procs.has(s.assignment.id)) continue;
        // A stray about to be stopped is no news for the control plane: no onChange for it.
        const keep = this.opts.keepAcrossRestarts === true;
        const child = { ...this.childOptions(), ...this.perReplica(s.assignment) };
        const rp = ReplicaProcess.adopt(s, keep ? child : { ...child, onChange: undefined });
        if (!rp) continue;
        if (keep) {
          this.procs.set(rp.id, rp);
          adopted.push(rp.id);
        } else {
          this.log.info({ replica: rp.id, engine_pid: rp.pid }, "stopping engine left by a previous agent");
          strays.push(rp.stop(this.stopGrace()));
        }
      }
      await Promise.all(strays);
      return adopted;
    });
  }

  /**
   * Makes the running set match the assignments: starts missing replicas, stops ones no longer
   * assigned, keeps same-id ones as they are (a failed one stays failed until the control plane
   * replaces it). Stops finish before starts, so a new engine never races an old one for the
   * same GPUs or port.
   */
  reconcile(assignments: readonly Assignment[]): Promise<void> {
    return this.serialize(async () => {
      const wanted = new Map(assignments.map((a) => [a.id, a]));
      const stops: Promise<void>[] = [];
      for (const [id, rp] of this.procs) {
        if (wanted.has(id)) continue;
        this.procs.delete(id);
        this.log.info({ replica: id }, "replica no longer assigned; stopping");
        stops.push(this.track(rp.stop(this.stopGrace())));
      }
      await Promise.all(stops);
      for (const [id, a] of wanted) {
        const running = this.procs.get(id);
        if (running) {
          running.learn(a);
          continue;
        }
        const rp = new ReplicaProcess({ ...this.childOptions(), ...this.perReplica(a), assignment: a, launch: () => this.opts.render(a) });
        this.procs.set(id, rp);
        rp.start();
      }
    });
  }

  /** Stops every engine, including ones still shutting down from an earlier reconcile. */
  stopAll(graceMs: number = this.stopGrace()): Promise<void> {
    return this.serialize(async () => {
      const all = [...this.procs.values()].map((rp) => rp.stop(graceMs));
      this.procs.clear();
      await Promise.all([...all, ...this.leaving]);
    });
  }

  /** For an agent exiting with keepAcrossRestarts: stop watching, leave the engines running. */
  detachAll(): void {
    for (const rp of this.procs.values()) rp.detach();
    this.procs.clear();
  }

  private childOptions(): Omit<ReplicaProcessOptions, "assignment" | "launch"> {
    const { render: _r, keepAcrossRestarts: _k, stopGrace: _s, healthTimeoutFor: _h, ...rest } = this.opts;
    return { ...rest, onChange: this.opts.onChange };
  }

  private perReplica(a: Assignment): { healthTimeout?: number } {
    const t = this.opts.healthTimeoutFor?.(a);
    return t === undefined ? {} : { healthTimeout: t };
  }

  private stopGrace(): number {
    return this.opts.stopGrace ?? RUNNER_DEFAULTS.stopGrace;
  }

  private track(p: Promise<void>): Promise<void> {
    this.leaving.add(p);
    void p.finally(() => this.leaving.delete(p));
    return p;
  }

  /** One reconcile at a time: overlapping heartbeats must not start the same replica twice. */
  private serialize<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }
}

// ---- helpers ------------------------------------------------------------------------------

/**
 * A directory only its owner can enter, tightened if an older agent made it wider. A chmod
 * refused (someone else's directory) is left to the open that follows to report.
 */
function privateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  try {
    chmodSync(dir, 0o700);
  } catch {
    // Not ours to change.
  }
}

/** The command line as it may be logged: the engine key (SGLang takes it as an argument) masked. */
function masked(cmd: readonly string[], key: string | null | undefined): string[] {
  if (!key) return [...cmd];
  return cmd.map((c) => (c.includes(key) ? c.split(key).join("<engine key>") : c));
}

/** A replica id as a file name: ids are free text on the wire and must not escape the directory. */
export function fileSafe(id: string): string {
  const s = id.replace(/[^A-Za-z0-9._-]/g, "_");
  return s.startsWith(".") ? `_${s}` : s;
}

/** Alive and not a zombie: kill(pid, 0) succeeds on a zombie nobody has reaped yet. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (e) {
    // EPERM: it exists but belongs to someone else.
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
  const stat = readProcStat(pid);
  return stat === null || stat.state !== "Z";
}

/**
 * Signals the engine's process group. groupOnly is for sweeping up after the leader has exited:
 * its pid may then belong to an unrelated process, while a pgid is not reused while members live.
 */
function signalGroup(pid: number, sig: NodeJS.Signals, groupOnly = false): void {
  try {
    process.kill(-pid, sig);
    return;
  } catch {
    // No such group (not spawned detached, or already gone): fall back to the process itself.
  }
  if (groupOnly) return;
  try {
    process.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

function readProcStat(pid: number): { state: string; start: string } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may contain spaces; fields after it are plain.
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const state = rest[0];
  const start = rest[19]; // field 22, starttime
  return state !== undefined && start !== undefined ? { state, start } : null;
}

function procStartTime(pid: number): string | null {
  return readProcStat(pid)?.start ?? null;
}

/**
 * What this run wrote to path after offset, its last TAIL_BYTES at most; a line cut at the start
 * of that window is dropped, so no half line is mistaken for a whole one.
 */
export function readTail(path: string, offset: number): string {
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch {
    return "";
  }
  try {
    const size = fstatSync(fd).size;
    const from = Math.max(offset, size - TAIL_BYTES, 0);
    if (from >= size) return "";
    const buf = Buffer.alloc(size - from);
    const got = readSync(fd, buf, 0, buf.length, from);
    const text = buf.subarray(0, got).toString("utf8");
    if (from === offset) return text;
    const nl = text.indexOf("\n");
    return nl < 0 ? "" : text.slice(nl + 1);
  } finally {
    closeSync(fd);
  }
}

/** The last n non-empty lines written to path after offset, joined by newlines. */
export function lastLines(path: string, offset: number, n: number): string {
  return readTail(path, offset)
    .split(/\r?\n/)
    .map((l) => l.trimEnd())
    .filter((l) => l !== "")
    .slice(-n)
    .join("\n");
}

/**
 * A failed replica's reason, on one line: how it ended, then the first line of its output that
 * matches the engine's known fatal patterns (the root cause, often screens above the end), or
 * else the line that tells most: "exited with code 1: torch.OutOfMemoryError: …". Said once:
 * the rest of the output is the engine's log, which `llmgw logs --previous` shows.
 */
export function failureReason(how: string, engine: EngineName, tail: string): string {
  return clampReason(how, rootCause(engine, tail) ?? tellingLine(tail));
}

/**
 * "how: cause" within the protocol's limit, the cause cut to MAX_CAUSE. An engine's colours and
 * control characters are made printable here, so the head node gets text it can show as it is.
 */
function clampReason(rawHow: string, rawCause: string | null): string {
  const how = safeText(rawHow);
  const head = how.length > REPLICA_ERROR_MAX / 2 ? `${how.slice(0, REPLICA_ERROR_MAX / 2 - 1)}…` : how;
  const cause = rawCause === null ? "" : safeText(rawCause);
  return cause === "" ? head : `${head}: ${cause.length > MAX_CAUSE ? `${cause.slice(0, MAX_CAUSE - 1)}…` : cause}`;
}

function describeExit(code: number, signal: NodeJS.Signals | number | null): string {
  return signal !== null ? `killed by signal ${signal}` : `exited with code ${code}`;
}

