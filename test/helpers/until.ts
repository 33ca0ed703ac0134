// The one poll-until helper. Use it only for what no injected clock can hurry (a real child
// process, a real socket's peer, a compiled binary); code that takes a Scheduler is driven by
// a ManualScheduler instead.

export interface UntilOptions {
  /** Give up after this long (real milliseconds). */
  timeoutMs?: number;
  /** Time between checks (real milliseconds). */
  everyMs?: number;
}

/**
 * Resolves with check()'s first value that is neither undefined nor false; rejects, naming
 * `what` (a string, or a function for a message built at the moment of failure), after the timeout.
 */
export async function until<T>(what: string | (() => string), check: () => T | undefined | false | Promise<T | undefined | false>, opts: UntilOptions | number = {}): Promise<T> {
  const { timeoutMs = 15_000, everyMs = 10 } = typeof opts === "number" ? { timeoutMs: opts } : opts;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v as T;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === "function" ? what() : what}`);
    await Bun.sleep(everyMs);
  }
}
