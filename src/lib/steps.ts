// Work written as a generator of steps: each `yield` marks a point between two steps where a
// caller may pause. A pure computation stays one function; whether it runs in one go (a test, a
// dry run) or paced (a busy event loop letting waiting I/O in between its steps) is the caller's.

/** Runs the steps in one go and returns the result. */
export function runSteps<T>(steps: Generator<void, T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** Runs the steps with `pause` awaited between each two; the result is the one runSteps gives. */
export async function runPaced<T>(steps: Generator<void, T>, pause: () => Promise<void>): Promise<T> {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await pause();
  }
}
