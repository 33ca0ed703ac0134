// The agent's waits, shared by its loops: every sleep is on the injected Scheduler, stop() ends
// them all at once, and a change the head node should hear about now (a replica's state, the
// inventory, the engines' versions) cuts the heartbeat's sleep short. A burst of replica
// changes goes out as one early heartbeat (the debounce).

import type { Scheduler, Timer } from "../lib/scheduler";

export class Pace {
  /** Set once by stop(): every loop ends at its next look. */
  stopping = false;
  /** Something changed since the heartbeat on the wire was built: the next one goes out without waiting. */
  heartbeatDue = false;
  private readonly sleepers = new Set<() => void>();
  private wakeHeartbeat: (() => void) | null = null;
  private debounce: Timer | null = null;

  constructor(
    private readonly scheduler: Scheduler,
    /** Replica state changes closer together than this go out in one early heartbeat. */
    private readonly debounceMs: number,
  ) {}

  /** Waits ms, or until stop(); a wakeable sleep (the heartbeat's) also ends early for an early heartbeat. */
  sleep(ms: number, wakeable: boolean): Promise<void> {
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

  /** The next heartbeat goes out now (or as soon as the one on the wire is answered). */
  heartbeatNow(): void {
    this.heartbeatDue = true;
    this.wakeHeartbeat?.();
  }

  /** A replica changed: an early heartbeat after the debounce, one for the whole burst. */
  heartbeatSoon(): void {
    if (this.stopping || this.debounce) return;
    this.debounce = this.scheduler.after(this.debounceMs, () => {
      this.debounce = null;
      this.heartbeatNow();
    });
  }

  /** Marks the agent stopping; with wakeAll() after it, ends every sleep. */
  stop(): void {
    this.stopping = true;
  }

  /** Cancels the debounce and ends every sleep under way (the agent stopping). */
  wakeAll(): void {
    this.debounce?.cancel();
    for (const wake of [...this.sleepers]) wake();
  }
}
