// Which Hugging Face revision every shard of a replica loads, from the catalog and what the
// replica's nodes report: one answer for all shards, so a multi-node replica never mixes the
// weights of two commits. Pure: the projections (projections.ts) hand it the heartbeats' reports.

/** Per node (as last heartbeated), per model, the revisions it holds, newest first. */
export type ReportedRevisions = ReadonlyMap<string, ReadonlyMap<string, readonly string[]>>;

export interface ReplicaRevision {
  /** What every shard's assignment carries; null: the model is in no node's hub cache layout. */
  revision: string | null;
  /**
   * False when a node of the replica has not reported its revisions (an older agent, or a head
   * node that restarted and has not heard from it yet): the answer may change once it does, so
   * it must not be kept for the replica's lifetime.
   */
  settled: boolean;
}

/**
 * For a model the catalog does not pin (a pin wins outright, and the agent of a node without it
 * fails the replica naming the revisions it has): the newest revision present on every node of
 * the replica, in the leader's order (`nodes[0]` is the leader); when they have none in common,
 * the leader's newest, so the nodes without it fail saying so instead of each loading its own
 * newest. Nodes that have not reported are left out.
 */
export function commonRevision(model: string, nodes: readonly string[], reported: ReportedRevisions): ReplicaRevision {
  const known = nodes.flatMap((n) => {
    const r = reported.get(n);
    return r === undefined ? [] : [r.get(model) ?? []];
  });
  const settled = known.length === nodes.length;
  const order = known.find((l) => l.length > 0);
  if (order === undefined) return { revision: null, settled };
  const common = order.find((rev) => known.every((l) => l.includes(rev)));
  return { revision: common ?? order[0]!, settled };
}
