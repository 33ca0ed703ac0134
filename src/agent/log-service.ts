// This node's engine logs as the head node reaches them for `llmgw logs`: the listener
// (logs.ts), over HTTPS with a certificate of its own when the agent API is HTTPS (the heartbeat
// carries its port and certificate), and the sweep that keeps past runs' logs within
// PREVIOUS_LOGS (previous-logs.ts) for `llmgw logs --previous`. The same listener serves the
// weights this node holds to the peers of its fabric (weights-serve.ts).

import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import { credentialDigest, logsToken } from "../protocol/heartbeat";
import { logCertificate } from "./credential";
import { startLogServer } from "./logs";
import type { Pace } from "./pace";
import { PastLogKeeper, previousPathOf } from "./previous-logs";
import { fileSafe, type ProcessSet } from "./runner";
import { byteRate, type ByteRate } from "./weights-rate";
import type { GrowingFiles } from "./weights-growing";
import { WEIGHTS_PEER_PREFIX, WeightsServer } from "./weights-serve";

export interface LogServiceOptions {
  config: AgentConfig;
  log: Logger;
  /** The node's name and the address the head node reaches it at (the certificate's names). */
  node: string;
  address: string;
  /** The head node's first URL: HTTPS there means HTTPS here. */
  server: string;
  /** This node's own credential once it has one: the listener's token is derived from it. */
  credential: () => string | undefined;
  processes: Pick<ProcessSet, "get" | "runningIds">;
  pastLogSweepMs: number;
  scheduler: Scheduler;
  pace: Pace;
  /** The node's weight-transfer rate limit, shared with its fetches; one of its own from --weights-max-rate when not given. */
  weightsRate?: ByteRate;
  /** The files the node is fetching, whose bytes so far peers may copy. */
  growing?: GrowingFiles;
}

export class LogService {
  private readonly opts: LogServiceOptions;
  private readonly logDir: string;
  private server: { port: number; stop(): void } | undefined;
  private tls: { cert: string; key: string } | undefined;
  /** Weights served to peers (what is being served is in use: eviction asks it). */
  readonly weights: WeightsServer;

  constructor(opts: LogServiceOptions) {
    this.opts = opts;
    this.logDir = join(opts.config.state_dir, "logs");
    const credential = opts.credential;
    this.weights = new WeightsServer({
      modelsDir: opts.config.models_dir,
      credentialSha256: () => {
        const c = credential();
        return c ? credentialDigest(c) : undefined;
      },
      scheduler: opts.scheduler,
      maxServes: opts.config.weights_max_transfers,
      rate: opts.weightsRate ?? byteRate(opts.config.weights_max_rate, opts.scheduler),
      log: opts.log.child({ component: "weights-serve" }),
      ...(opts.growing ? { growing: opts.growing } : {}),
    });
  }

  /** The listener's port, when it runs (the heartbeat's logs_port). */
  get port(): number | null {
    return this.server?.port ?? null;
  }

  /** The listener's certificate, when it runs over HTTPS (the heartbeat's logs_tls_cert). */
  get tlsCert(): string | null {
    return this.server && this.tls ? this.tls.cert : null;
  }

  /**
   * The engine-log listener for `llmgw logs`. Optional: a port that cannot be had is logged
   * and the agent goes on without it (the head node then says logs are unavailable).
   */
  start(): void {
    const { config, log, scheduler } = this.opts;
    const listen = config.logs_listen;
    if (!listen) return;
    const logDir = this.logDir;
    try {
      // HTTPS when the head node's agent API is: the log listener then carries engine output
      // as privately as the heartbeats do. Its certificate goes to the head node in heartbeats.
      if (/^https:/i.test(this.opts.server)) {
        const host = listen.host === "0.0.0.0" || listen.host === "::" ? this.opts.address : listen.host;
        this.tls = logCertificate(config.state_dir, [...new Set([this.opts.address, host])], scheduler.now(), log);
      }
      this.server = startLogServer({
        host: listen.host,
        port: listen.port,
        token: () => {
          const credential = this.opts.credential();
          return credential ? logsToken(credentialDigest(credential)) : undefined;
        },
        ...(this.tls ? { tls: this.tls } : {}),
        fileFor: (id) => join(logDir, `${fileSafe(id)}.log`),
        // The run before the one going on now; for a replica whose engine is not running (it
        // exited, failed or was stopped) its last run.
        previousFor: (id) => {
          const current = join(logDir, `${fileSafe(id)}.log`);
          return this.opts.processes.get(id)?.engineRunning ? previousPathOf(current) : current;
        },
        node: this.opts.node,
        log: log.child({ component: "logs" }),
        scheduler,
        also: { prefix: WEIGHTS_PEER_PREFIX, handle: (req) => this.weights.handle(req) },
      });
      log.info({ port: this.server.port }, "engine logs served for `llmgw logs`");
    } catch (e) {
      log.warn({ listen: `${listen.host}:${listen.port}`, err: errorText(e) }, "cannot serve engine logs: `llmgw logs` will not reach this node");
    }
  }

  /** Keeps past runs' engine logs within PREVIOUS_LOGS (time, count, size). */
  async sweepLoop(): Promise<void> {
    const { log, pace, processes, scheduler } = this.opts;
    const dir = this.logDir;
    const keeper = new PastLogKeeper(dir, () => new Set(processes.runningIds().map(fileSafe)), () => scheduler.now());
    while (!pace.stopping) {
      try {
        const dropped = keeper.sweep();
        if (dropped.length > 0) log.debug({ files: dropped }, "past engine logs deleted (kept for `llmgw logs --previous` up to their time and count)");
      } catch (e) {
        log.warn({ dir, err: errorText(e) }, "looking over past engine logs failed");
      }
      await pace.sleep(this.opts.pastLogSweepMs, false);
    }
  }

  stop(): void {
    this.server?.stop();
  }
}
