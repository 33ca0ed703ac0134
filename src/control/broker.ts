// Per node, the assignment set it should run and a generation number bumped whenever that set
// changes; and the long polls waiting for a bump. The agent sends the generation it holds and is
// answered at once when it is out of date, else when it changes or the wait runs out.

import type { Assignment } from "../protocol/heartbeat";
import type { Scheduler } from "../lib/scheduler";

export class AssignmentBroker {
  private readonly sets = new Map<string, { generation: number; fingerprint: string; assignments: Assignment[] }>();
  private readonly waiters = new Map<string, Set<() => void>>();

  /**
   * @param base where every node's generation starts: the boot time, so an agent that kept its
   * number across a server restart never mistakes the new server's set for the one it has.
   */
  constructor(
    private readonly base: number,
    private readonly scheduler: Scheduler,
  ) {}

  current(node: string): { generation: number; assignments: Assignment[] } {
    const s = this.sets.get(node);
    return { generation: s?.generation ?? this.base, assignments: s?.assignments ?? [] };
  }

  /** Sets a node's assignments; bumps its generation and wakes its waiters when they changed. */
  offer(node: string, assignments: Assignment[]): void {
    const fingerprint = JSON.stringify(assignments);
    const prev = this.sets.get(node);
    if (prev && prev.fingerprint === fingerprint) return;
    this.sets.set(node, { generation: (prev?.generation ?? this.base) + 1, fingerprint, assignments });
    this.wake(node);
  }

  /** Forgets a node (deleted): its waiters are answered now. */
  forget(node: string): void {
    this.sets.delete(node);
    this.wake(node);
  }

  /** Resolves when the node's generation differs from `generation`, after waitMs, or on abort. */
  async wait(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    if (this.current(node).generation !== generation || waitMs <= 0) return;
    await new Promise<void>((resolve) => {
      let set = this.waiters.get(node);
      if (!set) this.waiters.set(node, (set = new Set()));
      const timer = this.scheduler.after(waitMs, () => done());
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
