// The version-skew contract between agents and control planes: a control plane speaking
// protocol N accepts agents of N and N−1 and refuses anything else at join (and on every
// heartbeat), with a reason naming both numbers and which side to upgrade. Pure, so the agent
// API, the CLI and tests read one rule.

import { PROTOCOL_VERSION } from "./version";

/** What a peer that does not say its protocol speaks: every release before the number existed. */
export const UNSTATED_PROTOCOL = 1;

/** The oldest agent protocol a control plane of `own` accepts: its own and the one before. */
export function oldestAccepted(own: number = PROTOCOL_VERSION): number {
  return Math.max(1, own - 1);
}

/** The range as an operator reads it ("1–2", or "2" when it is one number). */
export function acceptedRange(own: number = PROTOCOL_VERSION): string {
  const low = oldestAccepted(own);
  return low === own ? String(own) : `${low}–${own}`;
}

/**
 * Why a control plane of protocol `own` refuses an agent speaking `agent` (undefined: it
 * accepts it). The operator upgrades whichever side is behind: the control plane when the agent
 * is newer (control planes go first), the agent when it is older than the one before.
 */
export function agentProtocolProblem(agent: number, own: number = PROTOCOL_VERSION): string | undefined {
  if (agent >= oldestAccepted(own) && agent <= own) return undefined;
  const what = agent > own ? "upgrade the control plane first (control planes before agents; see Upgrading in the README)" : "upgrade the agent to this control plane's release";
  return `protocol: this agent speaks protocol ${agent}, this control plane speaks ${own} (accepts ${acceptedRange(own)}): ${what}`;
}

/** The protocol a heartbeat's raw body states, before its schema is applied: a number, else unstated (1). */
export function statedProtocol(body: unknown): number {
  const p = body !== null && typeof body === "object" ? (body as Record<string, unknown>).protocol : undefined;
  return typeof p === "number" && Number.isInteger(p) ? p : UNSTATED_PROTOCOL;
}
