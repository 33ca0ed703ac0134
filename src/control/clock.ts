// The old names of time, kept for the callers outside src/control that still use them: time is
// the Scheduler's now (src/lib/scheduler.ts), and the manual clock tests set and advance is the
// ManualScheduler. New code imports those directly.

import type { Scheduler } from "../lib/scheduler";

/** Something that tells the wall-clock time: every Scheduler does. */
export type Clock = Pick<Scheduler, "now">;

export { ManualScheduler as ManualClock, realScheduler as systemClock } from "../lib/scheduler";
