// Time, for every role. Router, HTTP listeners, the upstream pool, the metrics poller, the long
// poll, the control loop and the agent take one injected Scheduler instead of calling
// setTimeout, setInterval, Date.now() or performance.now() themselves, so a test moves time by
// hand (ManualScheduler) instead of sleeping. This file is a leaf: it imports nothing.
//
// src/lib is the leaf every folder may use: the scheduler, formatting, addresses, hashing, the
// terminal-safe text sanitiser. Nothing in it imports anything else of src.

/** A pending timer; cancel() is idempotent, and a no-op once the timer has fired. */
export interface Timer {
  cancel(): void;
  /** Do not keep the process alive for this timer alone (a no-op on the manual scheduler). */
  unref(): Timer;
}

export interface Scheduler {
  /** Wall-clock milliseconds since the epoch (stored timestamps, deadlines shown to people). */
  now(): number;
  /** Monotonic milliseconds, fractional, from an arbitrary origin (latencies, idle deadlines). */
  mono(): number;
  /** Runs fn once, ms from now. */
  after(ms: number, fn: () => void): Timer;
  /** Runs fn every ms, the first time ms from now. */
  every(ms: number, fn: () => void): Timer;
  /**
   * Runs fn once the I/O callbacks already due have run (setImmediate), so that fn sees what
   * arrived together. Optional: without it (the manual scheduler) callers run fn at once.
   */
  soon?(fn: () => void): void;
}

/**
 * Resolves once the I/O callbacks already due have run (scheduler.soon), so long synchronous
 * work done in steps lets heartbeats and requests in between them. Without `soon` (the manual
 * scheduler) only a promise turn.
 */
export function letIoIn(scheduler: Pick<Scheduler, "soon"> | undefined): Promise<void> {
  const soon = scheduler?.soon;
  return soon ? new Promise((resolve) => soon(resolve)) : Promise.resolve();
}

function realTimer(h: ReturnType<typeof setTimeout>, clear: (h: ReturnType<typeof setTimeout>) => void): Timer {
  const t: Timer = {
    cancel: () => clear(h),
    unref: () => {
      (h as { unref?: () => void }).unref?.();
      return t;
    },
  };
  return t;
}

/** The machine's clocks and timers. */
export const realScheduler: Scheduler = {
  now: () => Date.now(),
  mono: () => performance.now(),
  after: (ms, fn) => realTimer(setTimeout(fn, Math.max(0, ms)), clearTimeout),
  every: (ms, fn) => realTimer(setInterval(fn, Math.max(1, ms)), clearInterval),
  soon: (fn) => void setImmediate(fn),
};

interface Pending {
  id: number;
  due: number;
  period: number | undefined;
  fn: () => void;
  live: boolean;
}

/**
 * A scheduler tests drive: time stands still until advance() (synchronous: runs what falls due,
 * in due order, each at its own time) or run() (the same, letting promise callbacks and I/O
 * callbacks settle between timers, for code that awaits between steps).
 */
export class ManualScheduler implements Scheduler {
  /** Monotonic time since construction: what timers are due on. */
  private m = 0;
  /** Wall clock = wall + m; set() moves only this. */
  private wall: number;
  private seq = 0;
  private timers: Pending[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.wall = start;
  }

  now(): number {
    return this.wall + this.m;
  }
  mono(): number {
    return this.m;
  }
  /** Sets the wall clock (a clock jump, either way); monotonic time and timers do not move. */
  set(ms: number): void {
    this.wall = ms - this.m;
  }

  after(ms: number, fn: () => void): Timer {
    return this.add(Math.max(0, ms), undefined, fn);
  }
  every(ms: number, fn: () => void): Timer {
    return this.add(Math.max(1, ms), Math.max(1, ms), fn);
  }

  /** Timers not yet fired or cancelled. */
  get pending(): number {
    return this.timers.filter((p) => p.live).length;
  }

  /** Moves time forward by ms, firing every timer that falls due on the way. */
  advance(ms: number): void {
    const end = this.m + ms;
    for (let p = this.next(end); p; p = this.next(end)) this.fire(p);
    this.m = end;
  }

  /** Like advance(), but settles promise and I/O callbacks after each timer and at the end. */
  async run(ms: number): Promise<void> {
    const end = this.m + ms;
    await settle();
    for (let p = this.next(end); p; p = this.next(end)) {
      this.fire(p);
      await settle();
    }
    this.m = end;
    await settle();
  }

  private add(delay: number, period: number | undefined, fn: () => void): Timer {
    const p: Pending = { id: this.seq++, due: this.m + delay, period, fn, live: true };
    this.timers.push(p);
    const t: Timer = {
      cancel: () => {
        p.live = false;
      },
      unref: () => t,
    };
    return t;
  }

  private next(end: number): Pending | undefined {
    this.timers = this.timers.filter((p) => p.live);
    let best: Pending | undefined;
    for (const p of this.timers) if (p.due <= end && (!best || p.due < best.due || (p.due === best.due && p.id < best.id))) best = p;
    return best;
  }

  private fire(p: Pending): void {
    if (p.due > this.m) this.m = p.due;
    if (p.period === undefined) p.live = false;
    else p.due += p.period;
    p.fn();
  }
}

/** Lets queued promise callbacks and ready I/O callbacks run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
}
