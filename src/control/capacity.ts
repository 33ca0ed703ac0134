// Whether a model can EVER fit on this fleet, as opposed to not now. Placement says why nothing
// was placed this tick, from the GPUs free at that moment; an operator (and a client) needs to
// know first whether waiting can help at all. "Never" is judged on the fleet as if every node
// were ready and every card free and healthy: no node has that class; no node has that many
// cards of it; no fabric has that many such nodes. Anything short of that is "not now" (busy,
// cordoned, draining, unreachable, unhealthy, an engine missing). A pure function of the
// snapshot's nodes and GPUs.

import { plural } from "../lib/format";
import { nearest } from "../lib/text";
import type { ModelSpec, Profile } from "../protocol/catalog";
import type { Snapshot } from "./types";

/** Per GPU class: each node's count of devices of the class, and the node's fabrics. */
export interface FleetCapacity {
  /** Nodes known at all: with none (a cluster still booting) nothing is judged "never". */
  nodes: number;
  byClass: ReadonlyMap<string, { count: number; fabrics: readonly string[] }[]>;
}

export function fleetCapacity(snapshot: Pick<Snapshot, "nodes" | "gpus">): FleetCapacity {
  const fabrics = new Map(snapshot.nodes.map((n) => [n.name, n.fabrics]));
  const perNode = new Map<string, Map<string, number>>();
  for (const g of snapshot.gpus) {
    if (!fabrics.has(g.node)) continue;
    let m = perNode.get(g.class);
    if (!m) perNode.set(g.class, (m = new Map()));
    m.set(g.node, (m.get(g.node) ?? 0) + 1);
  }
  const byClass = new Map<string, { count: number; fabrics: readonly string[] }[]>();
  for (const [cls, m] of perNode) byClass.set(cls, [...m].map(([node, count]) => ({ count, fabrics: fabrics.get(node) ?? [] })));
  return { nodes: snapshot.nodes.length, byClass };
}

/** Why this profile can never be placed on this fleet, or undefined when it could be (all free). */
export function profileNeverFits(cap: FleetCapacity, p: Pick<Profile, "gpu_class" | "gpus" | "nodes">): string | undefined {
  const nodes = cap.byClass.get(p.gpu_class);
  if (!nodes || nodes.length === 0) {
    const guess = nearest(p.gpu_class, cap.byClass.keys());
    const known = [...cap.byClass.keys()].sort();
    return `no node has ${p.gpu_class} GPUs${guess ? ` (did you mean ${guess}?)` : known.length > 0 ? ` (the fleet has ${known.slice(0, 5).join(", ")}${known.length > 5 ? ", …" : ""})` : " (no node has any GPU)"}`;
  }
  const largest = Math.max(...nodes.map((n) => n.count));
  if (largest < p.gpus) return `no node has ${p.gpus} ${p.gpu_class} GPUs (the largest has ${largest})`;
  if (p.nodes <= 1) return undefined;
  const perFabric = new Map<string, number>();
  for (const n of nodes) if (n.count >= p.gpus) for (const f of n.fabrics) perFabric.set(f, (perFabric.get(f) ?? 0) + 1);
  const best = Math.max(0, ...perFabric.values());
  if (best >= p.nodes) return undefined;
  if (perFabric.size === 0) return `needs ${p.nodes} ${p.gpu_class} nodes with ${plural(p.gpus, "GPU")} each in one fabric, and no such node is in a fabric`;
  return `needs ${p.nodes} ${p.gpu_class} nodes with ${plural(p.gpus, "GPU")} each in one fabric, and no fabric has more than ${best}`;
}

/** Why no profile of the model can ever be placed (each profile's reason), or undefined when one could. */
export function modelNeverFits(cap: FleetCapacity, spec: Pick<ModelSpec, "profiles">): string | undefined {
  if (cap.nodes === 0) return undefined;
  const reasons: string[] = [];
  for (const p of spec.profiles) {
    const r = profileNeverFits(cap, p);
    if (r === undefined) return undefined;
    reasons.push(spec.profiles.length > 1 ? `${p.name}: ${r}` : r);
  }
  return reasons.join("; ");
}

/** How a "never" reason reads wherever it is shown. */
export function neverText(reason: string): string {
  return `can never fit on this fleet: ${reason}; waiting will not help (add such nodes, or change the model's profiles)`;
}
