// The reconciler's settings and the time limits derived from them (their values come from the
// head node's configuration, ServeConfig, where every default is written once). A leaf of reconcile/.

import type { Profile } from "../../protocol/catalog";

export interface ReconcileConfig {
  nodeTimeoutMs: number;
  /** How long an engine has to become healthy when its profile sets no start_timeout (`serve --start-timeout`). */
  startTimeoutMs: number;
  /**
   * What the head node waits beyond a replica's start timeout before it fails it: its clock starts
   * at placement, the agent's only once the assignment arrives and the engine is launched, and the
   * agent's verdict needs a heartbeat to come back. The agent must always be the one that decides.
   */
  startMarginMs: number;
  /** Failed starts in a row, or crashes soon after ready in a row, after which a model is parked. */
  maxFailures: number;
  backoffMs: number;
  backoffMaxMs: number;
  /**
   * A replica that crashes within this long of becoming ready counts towards its model's crash
   * loop (reconcile/crashes.ts); one that stays ready this long ends the loop (`serve --crash-window`).
   */
  crashWindowMs: number;
  /** How long a node stays unreachable before its replicas are replaced elsewhere. */
  replaceAfterMs: number;
  /** A replica the agent has not reported this long after placement is taken as lost. */
  reportGraceMs: number;
  /**
   * Engines get ports basePort … basePort + portCount - 1 on each node address; the portCount
   * after them are rendezvous blocks of RENDEZVOUS_STRIDE ports, one per multi-node replica (see
   * rendezvousPort). The two ranges never meet, so no engine port is ever inside a block.
   */
  basePort: number;
  portCount: number;
  /**
   * How long a replica replaced by a roll (reconcile/rollout.ts) may go on finishing the
   * requests it was sent before it is stopped anyway (`serve --drain-timeout`).
   */
  drainTimeoutMs: number;
}

/**
 * What the head node waits beyond a replica's start timeout before it fails it (startMarginMs):
 * an assignment that waits for the next heartbeat and a verdict that waits for the one after,
 * plus a minute for the agent's own work before it launches the engine.
 */
export function startMargin(heartbeatIntervalMs: number): number {
  return 2 * heartbeatIntervalMs + 60_000;
}

/** How long the agent gives a replica of this profile to become healthy (Assignment.start_timeout_ms). */
export function agentStartTimeout(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs">): number {
  return profile?.start_timeout ?? cfg.startTimeoutMs;
}

/** How long after placement the head node fails a replica still starting: always after the agent's deadline. */
export function serverStartDeadline(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs" | "startMarginMs">): number {
  return agentStartTimeout(profile, cfg) + cfg.startMarginMs;
}
