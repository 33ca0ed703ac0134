// One rule both dialects apply when a join-token heartbeat names a node that exists.

/**
 * Whether a node's credential has spoken since it was issued. One that never has (its join's
 * answer was lost: a connection cut, a failover) may be issued again to the join token, so the
 * agent that never got it can retry; the join token could have created the node anyway.
 */
export function credentialUsed(n: { credentialHash: string | null; lastHeartbeat: number; registeredAt: number }): boolean {
  return n.credentialHash !== null && n.lastHeartbeat !== n.registeredAt;
}
