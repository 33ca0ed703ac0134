// A deadline as an AbortSignal, on a Scheduler's time. AbortSignal.timeout() runs on the
// machine's timers, which a test cannot move; this aborts the same way (a TimeoutError
// DOMException as the reason) when the scheduler says so. A leaf: imports only the scheduler.

import type { Scheduler } from "./scheduler";

/** A signal that aborts ms from now with a TimeoutError; cancel() once the work is done. */
export function timeoutSignal(scheduler: Scheduler, ms: number): { signal: AbortSignal; cancel(): void } {
  const c = new AbortController();
  const timer = scheduler.after(ms, () => c.abort(new DOMException("The operation timed out.", "TimeoutError")));
  return { signal: c.signal, cancel: () => timer.cancel() };
}
