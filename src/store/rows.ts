// Rows both dialects write alike, made once: the columns are the same in schema.ts and
// pg/schema.ts, so what a join stores does not drift between SQLite and PostgreSQL.

import type { HeartbeatRequest } from "../protocol/heartbeat";

/** A control plane's release and protocol as its row holds them: absent where a release before them left nulls. */
export function releaseOf(r: { version: string | null; protocol: number | null }): { version?: string; protocol?: number } {
  return { ...(r.version !== null ? { version: r.version } : {}), ...(r.protocol !== null ? { protocol: Number(r.protocol) } : {}) };
}

/** The row of a node that joins for the first time: pending when joins need approval. */
export function joinedNodeRow(hb: HeartbeatRequest, now: number, join: { credentialHash: string; pending: boolean }) {
  return {
    name: hb.node,
    address: hb.address,
    labels: hb.labels,
    fabrics: hb.fabrics,
    adminState: join.pending ? ("pending" as const) : ("none" as const),
    lastHeartbeat: now,
    agentVersion: hb.agent_version,
    agentProtocol: hb.protocol ?? null,
    registeredAt: now,
    credentialHash: join.credentialHash,
  };
}
