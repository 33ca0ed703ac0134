// The agent's side of the conversation with the head node: the heartbeat loop (what the node
// reports, at the interval the server sets, with a backoff while it does not answer), the
// assignments long poll, joining (the join token until the server hands this node its own
// credential, which is kept in the state directory), registration (start() waits for the first
// heartbeat taken, and gives up on a refusal no retry can change), the move to another server,
// and the operator's log lines for each failure. What an answer's assignments mean is decided by
// answers.ts; the HTTP, failure kinds and certificates are head-client.ts's.

import { join } from "node:path";
import type { Logger } from "pino";
import type { AgentConfig } from "../config";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { Answers } from "./answers";
import { JOINING_FILE, joined, joiningCredential, loadCredential, saveCredential } from "./credential";
import { AgentError } from "./errors";
import { type Failure, type HeadClient, worthFailover } from "./head-client";
import type { Pace } from "./pace";

export interface ConversationTiming {
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** wait_ms of the assignments long poll. */
  longPollWaitMs: number;
  /** Per request; a long poll gets this on top of its wait. */
  requestTimeoutMs: number;
  /** Until the server has said otherwise. */
  heartbeatIntervalMs: number;
}

export interface ConversationOptions {
  config: AgentConfig;
  log: Logger;
  /** The node's name, as it registers. */
  node: string;
  /** <state_dir>/node.credential (CREDENTIAL_FILE). */
  credentialPath: string;
  head: HeadClient;
  answers: Answers;
  /** What a heartbeat says about the node (all but join_credential, which is the conversation's). */
  report: () => HeartbeatRequest;
  timing: ConversationTiming;
  scheduler: Scheduler;
  pace: Pace;
}

export class HeadConversation {
  private readonly config: AgentConfig;
  private readonly log: Logger;
  private readonly name: string;
  private readonly credentialPath: string;
  private readonly head: HeadClient;
  private readonly answers: Answers;
  private readonly report: () => HeartbeatRequest;
  private readonly timing: ConversationTiming;
  private readonly scheduler: Scheduler;
  private readonly pace: Pace;
  private intervalMs: number;
  /** This node's own credential once the head node gave it one; until then the join token is sent. */
  private credential: string | undefined;
  /** What a request presents until the node has its credential. */
  private joinToken = "";
  /** The credential this node chose for itself while it joins (sent with the join token; see JOINING_FILE). */
  private joinCredential: string | undefined;
  private registered = false;
  private registration: { resolve: () => void; reject: (e: Error) => void } | null = null;

  constructor(opts: ConversationOptions) {
    this.config = opts.config;
    this.log = opts.log;
    this.name = opts.node;
    this.credentialPath = opts.credentialPath;
    this.head = opts.head;
    this.answers = opts.answers;
    this.report = opts.report;
    this.timing = opts.timing;
    this.scheduler = opts.scheduler;
    this.pace = opts.pace;
    this.intervalMs = opts.timing.heartbeatIntervalMs;
  }

  /** What a request presents as its bearer token: the node's credential, or the join token. */
  bearer(): string {
    return this.credential ?? this.joinToken;
  }

  /** This node's own credential, once it has one. */
  nodeCredential(): string | undefined {
    return this.credential;
  }

  /** The heartbeat interval the server asked for, within bounds (boundInterval). */
  get interval(): number {
    return this.intervalMs;
  }

  /**
   * Resolves after the first heartbeat the server accepted; rejects when the server refuses this
   * node in a way no retry changes, or when the agent stops first.
   */
  registering(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.registration = { resolve, reject };
    });
  }

  /** The agent stopped: registration, if still awaited, fails. */
  abandon(): void {
    this.registration?.reject(new AgentError("the agent was stopped before it registered", true));
  }

  /** The node's credential kept from before, or the join token (and the credential it joins with). */
  loadSecret(): void {
    const secret = loadCredential(this.credentialPath, this.name, this.config, this.log);
    if ("credential" in secret) this.credential = secret.credential;
    else {
      this.joinToken = secret.joinToken;
      this.joinCredential = joiningCredential(join(this.config.state_dir, JOINING_FILE), this.name, this.log);
    }
  }

  // ---- heartbeats -------------------------------------------------------------------------

  async heartbeatLoop(): Promise<void> {
    let backoff = this.timing.backoffInitialMs;
    let failing = false;
    while (!this.pace.stopping) {
      this.pace.heartbeatDue = false;
      const result = await this.heartbeatOnce();
      if (this.pace.stopping || result === "fatal") return;
      // Another server to ask at once: the one left gave no usable answer, or a move cut this request short.
      if (result === "again") continue;
      if (result === "ok") {
        if (failing) this.log.info({ url: this.head.url("/agent/v1/heartbeat") }, "heartbeats reach the server again");
        failing = false;
        backoff = this.timing.backoffInitialMs;
        // A change that came in while this heartbeat was on the wire goes out at once.
        if (!this.pace.heartbeatDue) await this.pace.sleep(this.intervalMs, true);
      } else {
        failing = true;
        this.logFailure("heartbeat", "/agent/v1/heartbeat", result, backoff);
        // Not wakeable: replica changes must not defeat the backoff while the server is down.
        await this.pace.sleep(backoff, false);
        backoff = Math.min(backoff * 2, this.timing.backoffMaxMs);
      }
    }
  }

  private async heartbeatOnce(): Promise<"ok" | "again" | "fatal" | (Failure & { server: string })> {
    const path = "/agent/v1/heartbeat";
    const body: HeartbeatRequest = this.report();
    const joining = this.credential === undefined;
    if (joining && this.joinCredential !== undefined) body.join_credential = this.joinCredential;
    const sentSeq = this.answers.seq;
    const r = await this.head.request(path, { method: "POST", body: JSON.stringify(body) }, this.timing.requestTimeoutMs);
    if (this.pace.stopping) return "fatal";
    const url = this.head.url(path, r.server);
    if (!r.ok && r.kind === "switched") return "again";
    if (!r.ok && !this.registered && this.refusedForGood(r, joining, url)) return "fatal";
    if (r.ok && joining && r.value.credential) this.keepCredential(r.value.credential, r.server);
    if (!r.ok) {
      if (worthFailover(r) && this.head.failover(r.server, failureReason(r))) return "again";
      return r;
    }
    // The server took the heartbeat (the node is registered) even when its assignments are refused.
    const refused = this.answers.refusal(r.value, r.server, "heartbeat");
    if (refused !== undefined) {
      this.registeredNow(r.server);
      return this.head.failover(r.server, refused) ? "again" : "ok";
    }
    this.head.answered(r.server);
    this.intervalMs = this.boundInterval(r.value.heartbeat_interval_ms);
    if (this.answers.mayChange(r.value, r.server)) this.answers.accept(r.value, sentSeq, "heartbeat", r.server);
    else this.answers.acceptWeights(r.value, r.server);
    this.registeredNow(r.server);
    return "ok";
  }

  /**
   * Before the node registered, a refusal retrying cannot change (a wrong address, the node
   * limit, another node's name, a credential or join token refused, a certificate not trusted)
   * ends start() with what to do: rejects the registration and says so.
   */
  private refusedForGood(r: Failure & { server: string }, joining: boolean, url: string): boolean {
    if (r.kind === "forbidden") {
      // A wrong address, the node limit, another node's name: retrying changes nothing.
      this.log.error({ url }, `the server refused this node: ${r.message}`);
      this.registration?.reject(new AgentError(`the server refused node ${this.name} (${url}): ${r.message}`));
      return true;
    }
    if (r.kind === "taken") {
      this.log.error({ url }, r.message);
      this.registration?.reject(new AgentError(`the server refused to let the join token speak for node ${this.name}: ${r.message}`));
      return true;
    }
    if (r.kind === "unauthorized" && !joining) {
      const message = `the server does not accept this node's credential (${r.message}); if the node was deleted on the head node, remove ${this.credentialPath} and start the agent again with the join token to re-join`;
      this.log.error({ url }, message);
      this.registration?.reject(new AgentError(message));
      return true;
    }
    if (r.kind === "untrusted") {
      // Retrying cannot make a certificate trusted: the operator has to give a CA or the pin.
      this.log.error({ url }, r.message);
      this.registration?.reject(new AgentError(`${r.message} (server ${r.server})`));
      return true;
    }
    if (r.kind === "unauthorized") {
      this.log.error({ url }, `the server refused the join token: ${r.message}`);
      this.registration?.reject(
        new AgentError(
          `the server refused the join token (${url}: ${r.message}); use the token in <data-dir>/join.token on the head node`,
        ),
      );
      return true;
    }
    return false;
  }

  /** The credential the server handed this node as it joined: kept, and used from now on. */
  private keepCredential(credential: string, server: string): void {
    try {
      saveCredential(this.credentialPath, this.name, server, credential);
      joined(join(this.config.state_dir, JOINING_FILE));
    } catch (e) {
      // Without it the node could not heartbeat after a restart; say so now, loudly.
      this.log.error({ path: this.credentialPath, err: errorText(e) }, "cannot store this node's credential: after a restart the node must be deleted on the head node to join again");
    }
    this.credential = credential;
    this.log.info({ path: this.credentialPath }, "joined: this node's own credential is stored and used from now on");
  }

  private registeredNow(server: string): void {
    if (this.registered) return;
    this.registered = true;
    this.log.info({ node: this.name, server, interval_ms: this.intervalMs }, "registered with the server");
    this.registration?.resolve();
  }

  // ---- assignments ------------------------------------------------------------------------

  /** The long poll, at the server the heartbeats go to (a move aborts it there and asks again at the next). */
  async longPollLoop(): Promise<void> {
    const path = "/agent/v1/assignments";
    let backoff = this.timing.backoffInitialMs;
    let failing = false;
    while (!this.pace.stopping) {
      const asked = this.answers.generation ?? 0;
      // Another server's generation says nothing about this one's set: ask for it at once.
      const from = this.answers.generationFrom;
      const wait = from === null || from === this.head.server ? this.timing.longPollWaitMs : 0;
      const query = `?node=${encodeURIComponent(this.name)}&generation=${asked}&wait_ms=${wait}`;
      const sentSeq = this.answers.seq;
      const began = this.scheduler.mono();
      const r = await this.head.request(path + query, { method: "GET" }, wait + this.timing.requestTimeoutMs);
      if (this.pace.stopping) return;
      if (!r.ok && r.kind === "switched") continue;
      const refused = r.ok ? this.answers.refusal(r.value, r.server, "long poll") : undefined;
      if (r.ok && refused === undefined) {
        if (failing) this.log.info({ url: this.head.url(path, r.server) }, "the assignments long poll works again");
        failing = false;
        backoff = this.timing.backoffInitialMs;
        this.head.answered(r.server);
        this.intervalMs = this.boundInterval(r.value.heartbeat_interval_ms);
        this.answers.accept(r.value, sentSeq, "long poll", r.server);
        // An unchanged answer long before wait_ms means something in between does not hold
        // requests open; without a pause this loop would spin.
        if (wait > 0 && r.value.generation === asked && this.scheduler.mono() - began < Math.min(1_000, wait / 2)) await this.pace.sleep(backoff, false);
        continue;
      }
      if (r.ok ? this.head.failover(r.server, refused!) : worthFailover(r) && this.head.failover(r.server, failureReason(r))) continue;
      if (!r.ok) {
        failing = true;
        this.logFailure("assignments long poll", path, r, backoff);
      }
      // A stale leader answers at once whenever its generation differs: this pause keeps that from spinning too.
      await this.pace.sleep(backoff, false);
      backoff = Math.min(backoff * 2, this.timing.backoffMaxMs);
    }
  }

  // ---- plumbing -----------------------------------------------------------------------------

  /**
   * The interval the server asks for, within sane bounds: a loaded head node asks for up to 4×
   * the configured one (control/load.ts); a broken or hostile answer can neither make this node
   * spin (under 1 s, or its own interval if shorter) nor fall silent (over a minute, or 8× its own).
   */
  private boundInterval(ms: number): number {
    const own = this.timing.heartbeatIntervalMs;
    return Math.min(Math.max(own * 8, 60_000), Math.max(Math.min(own, 1_000), ms));
  }

  private logFailure(what: string, path: string, r: Failure & { server: string }, retryMs: number): void {
    const url = this.head.url(path.split("?")[0]!, r.server);
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
}

/** Why a server is left, for the switch's log line ("switching to B: A …"). */
function failureReason(f: Failure): string {
  return f.kind === "unreachable" ? `did not answer (${f.message})` : `answered ${f.message}`;
}
