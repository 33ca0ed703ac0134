// What the agent checks of a head node's answer before it obeys it, beyond the wire schema: an
// empty assignment set that comes with a new count (a server that restarted, another control
// plane, a new leader) waits for a second answer before engines are stopped for it. Pure
// decisions: agent.ts keeps the state, logs and acts.

/**
 * How far one server's generation may move between two answers and still be the same count, when
 * the server does not say where its count started (older servers): a count starts at its boot
 * time in ms × 1000, so a restart even a millisecond later lands a thousand above, while one
 * count moves by one per change of the node's set.
 */
export const GENERATION_RESET_JUMP = 1000;

/** One answer as far as telling counts apart goes. */
export interface AnswerCount {
  server: string;
  generation: number;
  /** Where the server's generations started (absent from older servers). */
  base: number | undefined;
  epoch: number;
}

/**
 * Why an empty set arriving as `next` must wait for a second answer before it stops what runs,
 * or undefined when it may be obeyed: it comes from another count than the set applied before
 * (`prev`), where a head node that has not yet projected what it loaded would answer "nothing".
 * The first answer after the agent starts (no `prev`) is obeyed as ever.
 */
export function emptySetHold(prev: AnswerCount | null, next: AnswerCount): string | undefined {
  if (prev === null) return undefined;
  if (next.epoch !== prev.epoch) return `the leader epoch changed from ${prev.epoch} to ${next.epoch}`;
  if (next.server !== prev.server) return `another server answers (${next.server}; the set applied came from ${prev.server})`;
  if (next.base !== undefined || prev.base !== undefined)
    return next.base === prev.base ? undefined : `the server restarted (its generations start at ${next.base ?? "an unknown number"}, before at ${prev.base ?? "an unknown number"})`;
  const moved = next.generation - prev.generation;
  return moved < 0 || moved >= GENERATION_RESET_JUMP ? `the generation jumped from ${prev.generation} to ${next.generation}: the server restarted` : undefined;
}
