// What the agent makes of the head node's answers before its assignments are applied: which
// leader it follows (the highest epoch seen, kept in <state_dir>/leader.epoch), which answers it
// refuses (an older leader's, or an epoch that jumped too far on one server's word), which it
// drops as possibly older than the set applied (the heartbeat and the long poll race), which
// empty set it holds back until a second answer confirms it, and the generation the long poll
// waits on. answer-guard.ts makes the pure decisions; this keeps the state, logs and hands the
// accepted set to the replicas.

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import { type Assignment, EPOCH_MAX, type HeartbeatResponse } from "../protocol/heartbeat";
import { type AnswerCount, EPOCH_JUMP_MAX, EpochJumps, emptySetHold } from "./answer-guard";
import { loadEpoch, saveEpoch } from "./credential";

export interface AnswersOptions {
  log: Logger;
  /** The agent's --server list: with more than one, a jump can be confirmed and log lines name the server. */
  servers: readonly string[];
  /** <state_dir>/leader.epoch (EPOCH_FILE). */
  epochPath: string;
  /** The replicas running here now, which an empty set would stop. */
  running: () => string[];
  /** Applies an accepted set (one reconcile at a time; see Replicas.apply). */
  apply: (set: Assignment[]) => void;
  /** An accepted answer's weights and transfer orders (weights-fetch.ts); absent: none are run. */
  weights?: (res: Pick<HeartbeatResponse, "weights" | "fetches" | "remove" | "local_sources">) => void;
}

export class Answers {
  private readonly log: Logger;
  private readonly servers: readonly string[];
  private readonly epochPath: string;
  private readonly running: () => string[];
  private readonly apply: (set: Assignment[]) => void;
  private readonly weights: AnswersOptions["weights"];

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
  /** Stale epochs already warned about: one warning each, not one per answer. */
  private readonly warnedStale = new Set<number>();
  /** Epochs that jumped too far, until another server confirms one; and those warned about. */
  private readonly jumps = new EpochJumps();
  private readonly warnedJump = new Set<string>();
  /** The replica ids of the set last applied, to tell a move to another server from a change. */
  private appliedIds = "";

  constructor(opts: AnswersOptions) {
    this.log = opts.log;
    this.servers = opts.servers;
    this.epochPath = opts.epochPath;
    this.running = opts.running;
    this.apply = opts.apply;
    this.weights = opts.weights;
  }

  /** The last assignment generation applied (null before the first answer). */
  get generation(): number | null {
    return this.gen;
  }

  /** The server that generation came from (null before the first answer). */
  get generationFrom(): string | null {
    return this.genFrom;
  }

  /** The highest leader epoch seen (0 from a single head node). */
  get highestEpoch(): number {
    return this.leaderEpoch;
  }

  /** Taken when a request goes out; accept() drops an answer if another was applied meanwhile. */
  get seq(): number {
    return this.answerSeq;
  }

  /** The leader epoch a previous run kept, unless it is past any leader's (a forged answer's). */
  restoreEpoch(): void {
    const stored = loadEpoch(this.epochPath);
    if (stored && stored.epoch > EPOCH_MAX)
      // What an older agent kept from a forged answer: kept, it would refuse every honest one.
      this.log.warn({ epoch: stored.epoch, max: EPOCH_MAX, path: this.epochPath }, `ignoring leader epoch ${stored.epoch} kept in ${this.epochPath}: no leader gets past ${EPOCH_MAX}; following whichever leader answers`);
    else if (stored) {
      this.leaderEpoch = stored.epoch;
      this.leaderEpochFrom = stored.server;
      this.log.info({ epoch: stored.epoch, server: stored.server, path: this.epochPath }, `leader epoch ${stored.epoch} kept from before: assignments from an older leader are refused`);
    }
  }

  /**
   * Whether a heartbeat's answer may change anything. The same generation from the same server
   * at the same epoch means the same set: applying it again would only cost a reconcile. Unless
   * a set is held back: this answer may confirm it.
   */
  mayChange(res: HeartbeatResponse, server: string): boolean {
    return res.generation !== this.gen || server !== this.genFrom || (res.epoch ?? 0) > this.leaderEpoch || this.holding !== null;
  }

  /**
   * An answer whose assignments change nothing (mayChange false) may still carry new transfer
   * orders or progress: they are followed when it comes from the server and leader followed now.
   */
  acceptWeights(res: HeartbeatResponse, server: string): void {
    if ((res.epoch ?? 0) >= this.leaderEpoch && server === this.genFrom) this.weights?.(res);
  }

  /**
   * Why an answer's assignments are not applied (what runs here keeps running), for the move to
   * another server; undefined when they may be. Its leader is older than one seen already, or
   * its epoch jumped further than EPOCH_JUMP_MAX and no other server confirms it.
   */
  refusal(res: HeartbeatResponse, server: string, source: string): string | undefined {
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

  /** An answer not refused: followed if its leader is newer, dropped if it may be older than the set applied, else applied or held back. */
  accept(res: HeartbeatResponse, sentSeq: number, source: string, server: string): void {
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
    // Transfers stop nothing that runs: they follow every accepted answer, an empty set held back or not.
    this.weights?.(res);
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
    const running = this.running();
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
}

function staleReason(res: HeartbeatResponse, highest: number): string {
  return `answers for ${res.epoch === undefined ? "no leader epoch" : `leader epoch ${res.epoch}`}, older than epoch ${highest}`;
}
