// Which nodes went silent since the last tick and which came back, as a pure function: the set
// of nodes last seen unreachable goes in and comes out, and the events that say so go into the
// tick's plan, so they are written in its transaction, once per outage.

import { observedFrom } from "./reconciler";
import type { NewEvent, NodeRow } from "./types";
import { nodeState } from "./views";

export interface ReachabilityInput {
  nodes: readonly NodeRow[];
  now: number;
  /** Silence is only counted from here (see Controller's watch). */
  watchedSince: number;
  nodeTimeoutMs: number;
  /** Nodes last seen unreachable. */
  unreachable: ReadonlySet<string>;
}

export function reachability(input: ReachabilityInput): { events: NewEvent[]; unreachable: Set<string> } {
  const { now } = input;
  const unreachable = new Set(input.unreachable);
  const events: NewEvent[] = [];
  for (const n of input.nodes) {
    const gone = nodeState(n.adminState, observedFrom(n.lastHeartbeat, now, input.watchedSince), now, input.nodeTimeoutMs) === "unreachable";
    if (gone && !unreachable.has(n.name)) {
      unreachable.add(n.name);
      events.push({ kind: "node.unreachable", subject: `node/${n.name}`, message: `node ${n.name} unreachable: no heartbeat for ${Math.round((now - n.lastHeartbeat) / 1000)}s` });
    } else if (!gone) unreachable.delete(n.name);
  }
  return { events, unreachable };
}
