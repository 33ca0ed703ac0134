// How an engine's failure reads on the head node: the agent's one line (how the engine ended and
// the line of its output that says why), said once, with where the rest is: the replica's log,
// which `llmgw logs --previous` fetches from its node. The replica keeps the line whole; a
// model's reason and the events get it within ENGINE_ERROR_MAX and the pointer after it.

import { ENGINE_ERROR_MAX, oneLine } from "../../lib/format";

/** Where an agent before this release put the engine's last lines after the cause. */
const LAST_LINES = "\nlast lines:\n";

/**
 * The agent's report as one line. An older agent sent "how: cause\nlast lines:\n…" (the cause,
 * then 30 lines that end with it again) or "how: 30 lines": the cause alone, or the lines
 * flattened.
 */
export function causeOf(error: string): string {
  const at = error.indexOf(LAST_LINES);
  return oneLine(at >= 0 ? error.slice(0, at) : error, Number.POSITIVE_INFINITY);
}

/** "(log: llmgw logs --previous r-1a2b3c4d)": the command that shows the rest of a failed run. */
export function logPointer(replica: string): string {
  return `(log: llmgw logs --previous ${replica})`;
}

/** A failed run as a model's reason and the events say it: its cause, then where its log is. */
export function failureText(error: string, replica: string): string {
  return `${oneLine(causeOf(error), ENGINE_ERROR_MAX)} ${logPointer(replica)}`;
}

/** The longest failureText: the cause's bound and the pointer's words (ids are the head node's own, short). */
export const FAILURE_TEXT_MAX = ENGINE_ERROR_MAX + 80;
