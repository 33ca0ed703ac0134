// One node's bound on the bytes per second its weight transfers move, fetches and serves
// together (`agent --weights-max-rate`), so copying weights never takes the whole link from the
// engines' traffic on it. A token bucket over bytes, timed by the injected Scheduler: a take()
// within the bucket returns at once, one past it waits until the bucket has refilled its debt.

import type { Scheduler } from "../lib/scheduler";

/** What a transfer calls after each read or before each write: hub/download.ts's `throttle` takes it as is. */
export interface ByteRate {
  take(n: number): Promise<void> | void;
}

/** No bound: every take() returns at once. */
export const UNLIMITED: ByteRate = { take() {} };

export interface RateLimiterOptions {
  /** Bytes per second, sustained. */
  bytesPerSecond: number;
  /** Bytes that may go at once after a quiet spell (default one second's worth). */
  burst?: number;
  scheduler: Pick<Scheduler, "mono" | "after">;
}

export class RateLimiter implements ByteRate {
  readonly bytesPerSecond: number;
  private readonly burst: number;
  private readonly scheduler: Pick<Scheduler, "mono" | "after">;
  /** Bytes that may go now; negative: owed by takers already waiting, each waits out its share. */
  private tokens: number;
  private at: number;

  constructor(o: RateLimiterOptions) {
    if (!(o.bytesPerSecond > 0) || !Number.isFinite(o.bytesPerSecond)) throw new Error(`bytesPerSecond must be a positive number, not ${o.bytesPerSecond}`);
    this.bytesPerSecond = o.bytesPerSecond;
    this.burst = Math.max(1, o.burst ?? o.bytesPerSecond);
    this.scheduler = o.scheduler;
    this.tokens = this.burst;
    this.at = o.scheduler.mono();
  }

  /**
   * Spends n bytes. Takers are served in the order they came: each one's wait covers the debt of
   * those before it too, so the bytes of all of them together keep to the rate.
   */
  take(n: number): Promise<void> | void {
    if (!(n > 0)) return;
    const now = this.scheduler.mono();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.at) * this.bytesPerSecond) / 1000);
    this.at = now;
    this.tokens -= n;
    if (this.tokens >= 0) return;
    const waitMs = (-this.tokens * 1000) / this.bytesPerSecond;
    return new Promise<void>((resolve) => void this.scheduler.after(waitMs, resolve));
  }
}

/** The node's limiter from `--weights-max-rate` (undefined: no bound). */
export function byteRate(bytesPerSecond: number | undefined, scheduler: Pick<Scheduler, "mono" | "after">): ByteRate {
  return bytesPerSecond === undefined ? UNLIMITED : new RateLimiter({ bytesPerSecond, scheduler });
}
