// The deadlines of the requests in flight (an engine's first byte, its silence mid-stream),
// checked by one sweep for all of them rather than a timer per request and per chunk: moving a
// deadline is a number store on the hot path. They are set from `clock`, a coarse monotonic time
// the sweep refreshes (its reading plus one sweep interval), so they never fire early and the hot
// path reads no clock for them.

/** Something with a deadline: expire() is called once the sweep finds it past. */
export interface Watch {
  deadline: number;
  expire(): void;
  /** Links of the list the watch is on. */
  wPrev: Watch | undefined;
  wNext: Watch | undefined;
  watched: boolean;
}

/**
 * The watches, as an intrusive list: adding and removing one is a few stores, with no hashing
 * and no allocation (a Set costs more per request than the rest of the bookkeeping).
 */
export class Deadlines {
  private head: Watch | undefined;
  size = 0;
  /** scheduler.mono() as of the last sweep, plus one sweep interval. */
  clock: number;

  constructor(now: number) {
    this.clock = now;
  }

  add(w: Watch): void {
    if (w.watched) return;
    w.watched = true;
    w.wPrev = undefined;
    w.wNext = this.head;
    if (this.head !== undefined) this.head.wPrev = w;
    this.head = w;
    this.size++;
  }

  delete(w: Watch): void {
    if (!w.watched) return;
    w.watched = false;
    if (w.wPrev !== undefined) w.wPrev.wNext = w.wNext;
    else this.head = w.wNext;
    if (w.wNext !== undefined) w.wNext.wPrev = w.wPrev;
    w.wPrev = w.wNext = undefined;
    this.size--;
  }

  /**
   * The sweep: the clock is now `now` plus one interval (`tick`), and every watch whose deadline
   * is before `now` is removed and expired; one that throws does not keep the others from expiring.
   */
  sweep(now: number, tick: number, onError: (e: unknown) => void): void {
    this.clock = now + tick;
    const due: Watch[] = [];
    for (let w = this.head; w !== undefined; w = w.wNext) if (now > w.deadline) due.push(w);
    for (const w of due) {
      this.delete(w);
      try {
        w.expire();
      } catch (e) {
        onError(e);
      }
    }
  }
}
