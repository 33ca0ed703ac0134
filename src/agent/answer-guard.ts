// What the agent checks of a head node's answer before it obeys it, beyond the wire schema: an
// epoch that jumps too far above the highest one seen is not followed on one server's word (a
// forged answer would otherwise make every honest one look stale, for good), and an empty
// assignment set that comes with a new count (a server that restarted, another control plane, a
// new leader) waits for a second answer before engines are stopped for it. Pure decisions:
// answers.ts keeps the state, logs and acts.

/**
 * How far an answer's leader epoch may rise above the highest this agent has seen and still be
 * followed on that answer alone. Each lease acquisition raises the epoch by one, and an agent
 * hears the leader every heartbeat (seconds apart), so between two answers it sees a rise of one,
 * now and then a few (a store that flaps, both control planes restarted). A rise of more than a
 * thousand is a thousand takeovers this agent never heard of, years of weekly upgrades while it
 * was stopped, or a day of takeovers every minute; far likelier is one forged answer (plain HTTP),
 * which, followed, would make every honest answer look stale until someone removes leader.epoch.
 * Beyond the bound another of the agent's servers must report an epoch at least as high.
 */
export const EPOCH_JUMP_MAX = 1000;

/**
 * How far one server's generation may move between two answers and still be the same count, when
 * the server does not say where its count started (older servers): a count starts at its boot
 * time in ms × 1000, so a restart even a millisecond later lands a thousand above, while one
 * count moves by one per change of the node's set.
 */
export const GENERATION_RESET_JUMP = 1000;

export type JumpVerdict =
  /** Not above the highest by more than EPOCH_JUMP_MAX (or not above at all): judged as before. */
  | { kind: "within" }
  /** Too far above, and another server reported an epoch at least as high: follow it. */
  | { kind: "confirmed"; by: string }
  /** Too far above, and no other server said as much: neither followed nor kept. */
  | { kind: "unconfirmed" };

/**
 * Epochs that jumped too far, per server, until another server confirms one. Only the agent's
 * own --server URLs are keys, so it stays as small as that list.
 */
export class EpochJumps {
  private readonly claims = new Map<string, number>();

  judge(server: string, epoch: number, highest: number): JumpVerdict {
    if (epoch - highest <= EPOCH_JUMP_MAX) return { kind: "within" };
    for (const [other, claimed] of this.claims) if (other !== server && claimed >= epoch) return { kind: "confirmed", by: other };
    this.claims.set(server, epoch);
    return { kind: "unconfirmed" };
  }

  /** An epoch was followed: earlier claims say nothing about the next jump. */
  followed(): void {
    this.claims.clear();
  }
}

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
