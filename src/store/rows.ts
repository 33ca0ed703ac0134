// Rows both dialects write alike, made once: the columns are the same in schema.ts and
// pg/schema.ts, so what a join stores does not drift between SQLite and PostgreSQL.

import type { HeartbeatRequest } from "../protocol/heartbeat";

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
    registeredAt: now,
    credentialHash: join.credentialHash,
  };
}
