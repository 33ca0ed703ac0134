// The reconciler's settings and the time limits derived from them. A leaf of reconcile/.

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
}

export const DEFAULT_RECONCILE: ReconcileConfig = {
  nodeTimeoutMs: 15_000,
  // 30 minutes: a 70B model on TP=8 takes ~3.5 min with a warm page cache (vLLM #19824), over
  // 10 min from a cold disk (#10702), and a first torch.compile has been seen to take 37 min
  // (#34399); a profile that needs more, or wants a failure noticed sooner, sets start_timeout.
  startTimeoutMs: 1_800_000,
  // The Controller replaces this with 2 heartbeat intervals + 1 min.
  startMarginMs: 70_000,
  maxFailures: 5,
  backoffMs: 2_000,
  backoffMaxMs: 300_000,
  // Kubernetes forgets a container's restart backoff after it has run for 10 minutes.
  crashWindowMs: 600_000,
  replaceAfterMs: 30_000,
  reportGraceMs: 15_000,
  basePort: 8100,
  portCount: 900,
};

/** How long the agent gives a replica of this profile to become healthy (Assignment.start_timeout_ms). */
export function agentStartTimeout(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs">): number {
  return profile?.start_timeout ?? cfg.startTimeoutMs;
}

/** How long after placement the head node fails a replica still starting: always after the agent's deadline. */
export function serverStartDeadline(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs" | "startMarginMs">): number {
  return agentStartTimeout(profile, cfg) + cfg.startMarginMs;
}
