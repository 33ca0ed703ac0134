// Per node, the assignment set it should run and a generation number bumped whenever that set
// changes; and the long polls waiting for a bump. The agent sends the generation it holds and is
// answered at once when it is out of date, else when it changes or the wait runs out.

import type { Assignment } from "../protocol/heartbeat";
import type { Scheduler } from "../lib/scheduler";

/**
 * A long poll that nothing wakes is answered up to this share of its wait early, at random (as
 * Consul and Nomad spread their blocking queries, though never later than asked): agents that
 * started their polls together, after a head node restart or a cold start of the cluster, would
 * otherwise all be answered, and all ask again, in the same instant every wait, a burst that
 * holds up the heartbeats behind it.
 */
export const WAIT_JITTER = 1 / 16;

export class AssignmentBroker {
  private readonly sets = new Map<string, { generation: number; fingerprint: string; assignments: Assignment[] }>();
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Nodes nudged while no long poll of theirs waited: the next one is answered at once. */
  private readonly nudged = new Set<string>();
  /** Every node of the loaded state was offered its set once (offerAll): a node never offered since has nothing to run. */
  private complete = false;

  /**
   * @param base where every node's generation starts: the boot time, so an agent that kept its
   * number across a server restart never mistakes the new server's set for the one it has.
   */
  constructor(
    readonly base: number,
    private readonly scheduler: Scheduler,
    /** In [0, 1): how early within WAIT_JITTER each wait ends. */
    private readonly random: () => number = Math.random,
  ) {}

  current(node: string): { generation: number; assignments: Assignment[] } {
    const s = this.sets.get(node);
    return { generation: s?.generation ?? this.base, assignments: s?.assignments ?? [] };
  }

  /**
   * Whether current(node) says what the loaded state assigns the node. Until then it says
   * "nothing" at the base generation, which an agent would obey by stopping every engine it runs:
   * a head node that just started (or took over) must project before it answers.
   */
  projected(node: string): boolean {
    return this.complete || this.sets.has(node);
  }

  /** Offers every node of the loaded state its set: from now on a node never offered runs nothing. */
  offerAll(sets: Iterable<readonly [string, Assignment[]]>): void {
    for (const [node, assignments] of sets) this.offer(node, assignments);
    this.complete = true;
  }

  /** Sets a node's assignments; bumps its generation and wakes its waiters when they changed. */
  offer(node: string, assignments: Assignment[]): void {
    const fingerprint = JSON.stringify(assignments);
    const prev = this.sets.get(node);
    if (prev && prev.fingerprint === fingerprint) return;
    this.sets.set(node, { generation: (prev?.generation ?? this.base) + 1, fingerprint, assignments });
    this.wake(node);
  }

  /** Answers the node's long polls now with its set unchanged: something else in the answer changed (its weight orders). */
  nudge(node: string): void {
    if ((this.waiters.get(node)?.size ?? 0) > 0) this.wake(node);
    else this.nudged.add(node);
  }

  /** Forgets a node (deleted): its waiters are answered now. */
  forget(node: string): void {
    this.sets.delete(node);
    this.nudged.delete(node);
    this.wake(node);
  }

  /**
   * Resolves when the node's generation differs from `generation`, on abort, or after waitMs
   * less a random share of it up to WAIT_JITTER.
   */
  async wait(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.current(node).generation !== generation || waitMs <= 0) return;
    if (this.nudged.delete(node)) return;
    await new Promise<void>((resolve) => {
      let set = this.waiters.get(node);
      if (!set) this.waiters.set(node, (set = new Set()));
      const timer = this.scheduler.after(Math.round(waitMs * (1 - WAIT_JITTER * this.random())), () => done());
      const done = () => {
        timer.cancel();
        set!.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      signal?.addEventListener("abort", done);
      set.add(done);
    });
  }

  private wake(node: string): void {
    const set = this.waiters.get(node);
    if (set) for (const w of [...set]) w();
  }
}
