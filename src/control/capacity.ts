// Whether a model can EVER fit on this fleet, as opposed to not now. Placement says why nothing
// was placed this tick, from the GPUs free at that moment; an operator (and a client) needs to
// know first whether waiting can help at all. "Never" is judged on the fleet as if every node
// were ready and every card free and healthy: no node has that class; no node has that many
// cards of it; the engine version every such node reported cannot serve it (a multi-node vLLM
// profile on releases before multi-node serving, protocol/engine-features.ts), which is said
// first; no fabric has that many such nodes. Anything short of that is "not now" (busy,
// cordoned, draining, unreachable, unhealthy, an engine missing or its version unknown). A pure
// function of the snapshot's nodes and GPUs and the engines the nodes reported.

import { plural } from "../lib/format";
import { nearest } from "../lib/text";
import type { ModelSpec, Profile } from "../protocol/catalog";
import { type VersionLack, versionLack, versionLackText } from "../protocol/engine-features";
import type { EngineReport } from "../protocol/heartbeat";
import type { Snapshot } from "./types";

/** Per GPU class: each node's count of devices of the class, and the node's fabrics. */
export interface FleetCapacity {
  /** Nodes known at all: with none (a cluster still booting) nothing is judged "never". */
  nodes: number;
  byClass: ReadonlyMap<string, { node: string; count: number; fabrics: readonly string[] }[]>;
  /** Per node, engine → the version its agent reported; a node absent here has not said (unknown). */
  versions: ReadonlyMap<string, ReadonlyMap<string, string>>;
}

// Per reports array (a heartbeat's, kept until the next one replaces it), so a tick over a
// thousand nodes builds no map for reports it has seen.
const versionsOf = new WeakMap<readonly EngineReport[], ReadonlyMap<string, string> | null>();

/** Engine → version, of the engines a node's reports name a version for (read-only). */
export function reportedVersions(reports: readonly EngineReport[] | undefined): ReadonlyMap<string, string> | undefined {
  if (!reports) return undefined;
  let out = versionsOf.get(reports);
  if (out === undefined) {
    const m = new Map<string, string>();
    for (const e of reports) if (e.version !== null) m.set(e.engine, e.version);
    versionsOf.set(reports, (out = m.size > 0 ? m : null));
  }
  return out ?? undefined;
}

export function fleetCapacity(snapshot: Pick<Snapshot, "nodes" | "gpus">, engines?: ReadonlyMap<string, readonly EngineReport[]>): FleetCapacity {
  const fabrics = new Map(snapshot.nodes.map((n) => [n.name, n.fabrics]));
  const perNode = new Map<string, Map<string, number>>();
  for (const g of snapshot.gpus) {
    if (!fabrics.has(g.node)) continue;
    let m = perNode.get(g.class);
    if (!m) perNode.set(g.class, (m = new Map()));
    m.set(g.node, (m.get(g.node) ?? 0) + 1);
  }
  const byClass = new Map<string, { node: string; count: number; fabrics: readonly string[] }[]>();
  for (const [cls, m] of perNode) byClass.set(cls, [...m].map(([node, count]) => ({ node, count, fabrics: fabrics.get(node) ?? [] })));
  const versions = new Map<string, ReadonlyMap<string, string>>();
  for (const [node, reports] of engines ?? []) {
    const v = fabrics.has(node) ? reportedVersions(reports) : undefined;
    if (v) versions.set(node, v);
  }
  return { nodes: snapshot.nodes.length, byClass, versions };
}

/** What "never" is judged on: a profile's shape, and its engine when its versions are to count. */
type Shape = Pick<Profile, "gpu_class" | "gpus" | "nodes"> & Partial<Pick<Profile, "engine">>;

/**
 * Of the nodes with p.gpus cards of p's class, those whose reported version of p's engine cannot
 * serve p, said as versionLackText says it; undefined when there are none.
 */
export function versionNeverText(cap: FleetCapacity, p: Shape): string | undefined {
  if (p.engine === undefined) return undefined;
  let lack: VersionLack | undefined;
  const unable: { node: string; version: string }[] = [];
  for (const n of cap.byClass.get(p.gpu_class) ?? []) {
    const version = cap.versions.get(n.node)?.get(p.engine);
    const l = n.count >= p.gpus ? versionLack(p.engine, version, p) : undefined;
    if (!l) continue;
    lack = l;
    unable.push({ node: n.node, version: version! });
  }
  return lack ? versionLackText(p.engine, unable, lack) : undefined;
}

/** Why this profile can never be placed on this fleet, or undefined when it could be (all free). */
export function profileNeverFits(cap: FleetCapacity, p: Shape): string | undefined {
  const nodes = cap.byClass.get(p.gpu_class);
  if (!nodes || nodes.length === 0) {
    const guess = nearest(p.gpu_class, cap.byClass.keys());
    const known = [...cap.byClass.keys()].sort();
    return `no node has ${p.gpu_class} GPUs${guess ? ` (did you mean ${guess}?)` : known.length > 0 ? ` (the fleet has ${known.slice(0, 5).join(", ")}${known.length > 5 ? ", …" : ""})` : " (no node has any GPU)"}`;
  }
  const largest = Math.max(...nodes.map((n) => n.count));
  if (largest < p.gpus) return `no node has ${p.gpus} ${p.gpu_class} GPUs (the largest has ${largest})`;
  // Capability before capacity: what the engines' versions rule out is said first, and the
  // nodes it rules out count for nothing after.
  const old = versionNeverText(cap, p);
  const able = nodes.filter((n) => n.count >= p.gpus && (p.engine === undefined || !versionLack(p.engine, cap.versions.get(n.node)?.get(p.engine), p)));
  if (able.length === 0) return old;
  if (p.nodes <= 1) return undefined;
  const perFabric = new Map<string, number>();
  for (const n of able) for (const f of n.fabrics) perFabric.set(f, (perFabric.get(f) ?? 0) + 1);
  const best = Math.max(0, ...perFabric.values());
  if (best >= p.nodes) return undefined;
  const need = `${old ? `${old}; of the other nodes, it needs` : "needs"} ${p.nodes} ${p.gpu_class} nodes with ${plural(p.gpus, "GPU")} each in one fabric`;
  return perFabric.size === 0 ? `${need}, and no such node is in a fabric` : `${need}, and no fabric has more than ${best}`;
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
