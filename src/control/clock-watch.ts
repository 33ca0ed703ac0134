// The time the control plane has watched without a gap: since it started, or since its clock
// last jumped (backwards, or forwards further than any plausible pause). Silence, start times and
// idleness are only counted from then: a node cannot have missed heartbeats while nobody was
// listening, and a day the clock skipped is not a day a replica sat idle. Every reading of the
// clock that decides something (a tick, a heartbeat's verdicts) goes through observe().

import type { Scheduler } from "../lib/scheduler";

export interface Watched {
  /** Since when the clock has run without a jump. */
  watchedSince: number;
  /** When it last jumped (-Infinity: never). */
  jumpedAt: number;
}

export class ClockWatch {
  private lastSeen: number | undefined;
  private jumped = Number.NEGATIVE_INFINITY;
  private since: number;
  /** A forward step past this is a jump, not a pause. */
  private readonly jumpMs: number;

  constructor(scheduler: Pick<Scheduler, "now">, o: { nodeTimeoutMs: number; replaceAfterMs: number }) {
    this.since = scheduler.now();
    this.jumpMs = Math.max(60_000, 2 * (o.nodeTimeoutMs + o.replaceAfterMs));
  }

  /** Notes a reading of the clock; a jump since the last one restarts the watch from now. */
  observe(now: number): Watched {
    if (this.lastSeen !== undefined && (now < this.lastSeen || now - this.lastSeen > this.jumpMs)) this.jumped = this.since = now;
    this.lastSeen = now;
    return { watchedSince: this.since, jumpedAt: this.jumped };
  }

  /** The watch as it stands, without a reading (views, explain). */
  get watchedSince(): number {
    return this.since;
  }
  get jumpedAt(): number {
    return this.jumped;
  }
}
