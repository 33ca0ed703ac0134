// The rule both store dialects (and the in-memory model) apply when a join-token heartbeat
// names a node that exists.

/**
 * Whether the join token is refused for a node that exists: it is, once the node holds a
 * credential, unless the join carries that same credential. A joining agent chooses its
 * credential itself and sends it with every try (HeartbeatRequest.join_credential), so a join
 * whose answer was lost (a connection cut, a store failover after the commit) is answered when
 * sent again; anyone else with the join token is refused the name.
 */
export function joinRefused(storedHash: string | null, joinHash: string): boolean {
  return storedHash !== null && storedHash !== joinHash;
}
