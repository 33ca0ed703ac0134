// Writes that read before they write (a tick, a group of heartbeats, a catalog or node change)
// run one at a time, so none decides on what another is about to change. One lock for the whole
// control plane: the parts that write take their turns here.

import type { Scheduler } from "../lib/scheduler";

export class WriteLock {
  private serial: Promise<unknown> = Promise.resolve();

  constructor(private readonly scheduler: Pick<Scheduler, "mono">) {}

  /** Runs fn once every earlier turn has ended (however it ended); `queued` hears how long it waited. */
  exclusive<T>(fn: () => Promise<T>, queued?: (waitedMs: number) => void): Promise<T> {
    const t0 = queued ? this.scheduler.mono() : 0;
    const go = queued ? () => (queued(this.scheduler.mono() - t0), fn()) : fn;
    const run = this.serial.then(go, go);
    this.serial = run.catch(() => undefined);
    return run;
  }
}
