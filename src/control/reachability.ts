// Which nodes went silent since the last tick and which came back, as a pure function: the set
// of nodes last seen unreachable goes in and comes out, and the events that say so go into the
// tick's plan, so they are written in its transaction, once per outage.

import { type Stall, deafTime } from "./load";
import { nodeState, observedFrom } from "./views";
import type { NewEvent, NodeRow } from "./types";

export interface ReachabilityInput {
  nodes: readonly NodeRow[];
  now: number;
  /** Silence is only counted from here (clock-watch.ts). */
  watchedSince: number;
  nodeTimeoutMs: number;
  /** When the head node itself was not listening (load.ts): silence then is not the node's. */
  deaf?: readonly Stall[];
  /** Nodes last seen unreachable. */
  unreachable: ReadonlySet<string>;
}

export function reachability(input: ReachabilityInput): { events: NewEvent[]; unreachable: Set<string> } {
  const { now } = input;
  const unreachable = new Set(input.unreachable);
  const events: NewEvent[] = [];
  for (const n of input.nodes) {
    const gone = nodeState(n.adminState, heardAt(n.lastHeartbeat, now, input.watchedSince, input.deaf), now, input.nodeTimeoutMs) === "unreachable";
    if (gone && !unreachable.has(n.name)) {
      unreachable.add(n.name);
      events.push({ kind: "node.unreachable", subject: `node/${n.name}`, message: `node ${n.name} unreachable: no heartbeat for ${Math.round((now - n.lastHeartbeat) / 1000)}s` });
    } else if (!gone) unreachable.delete(n.name);
  }
  return { events, unreachable };
}

/**
 * A node's last heartbeat as silence is judged: counted from when the control plane started
 * watching, and moved later by the time since then the head node was deaf (a stall, a queue), so
 * the node's silence is only the part of it somebody listened to.
 */
export function heardAt(lastHeartbeat: number, now: number, watchedSince: number, deaf: readonly Stall[] = []): number {
  const from = observedFrom(lastHeartbeat, now, watchedSince);
  return deaf.length === 0 ? from : from + deafTime(deaf, from, now);
}
