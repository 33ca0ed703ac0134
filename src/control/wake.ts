// The control loop's wake-ups: whoever changed something that deserves a reconcile before the
// next tick (a heartbeat's news, a catalog or node change, demand for a model, a leader taking
// over) asks here, and the loop that listens (app/head.ts) ticks. Requests are coalesced: the
// first after a quiet spell runs at once (a microtask); a burst after it (a heartbeat flood with
// news) causes one more tick WAKE_GAP_MS after the last, not one each. Urgent requests (what an
// operator or a client asked for, which what they read next must already reflect) run at once.

import type { Scheduler } from "../lib/scheduler";

/** The least time between two ticks a non-urgent request asks for. */
export const WAKE_GAP_MS = 150;

/** What a part needs to ask for a reconcile soon. */
export interface Waker {
  wake(urgent?: boolean): void;
}

export class Wakeups implements Waker {
  private readonly listeners = new Set<() => void>();
  private scheduled = false;
  private last = Number.NEGATIVE_INFINITY;

  constructor(private readonly scheduler: Scheduler) {}

  /** Ticks on every wake from now on (the control loop's runner); returns how to stop. Without a listener a wake does nothing. */
  listen(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  wake(urgent = false): void {
    if (this.listeners.size === 0) return;
    if (urgent) {
      queueMicrotask(() => this.fire());
      return;
    }
    if (this.scheduled) return;
    this.scheduled = true;
    const fire = () => {
      this.scheduled = false;
      this.fire();
    };
    const wait = this.last + WAKE_GAP_MS - this.scheduler.mono();
    if (wait <= 0) queueMicrotask(fire);
    else this.scheduler.after(wait, fire).unref();
  }

  private fire(): void {
    this.last = this.scheduler.mono();
    for (const fn of [...this.listeners]) fn();
  }
}
