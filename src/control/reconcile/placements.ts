// Step 5: placement of what is short, over the GPUs as they are once this step's removals and
// state changes are done. Every model gets its first replica before any gets its next.

import type { EngineReport } from "../../protocol/heartbeat";
import { reportedVersions } from "../capacity";
import { type PlacementNode, type PlacementResult, place } from "../placement";
import { holdsGpus } from "../views";
import { type ReconcileContext, gpuKey } from "./context";
import type { ModelRequest } from "./desired";
import type { PlanBuilder } from "./plan";
import type { GpuRow } from "../types";

/** The engines a node's reports say it cannot run (no version found), with why. */
export function missingEngines(reports: readonly EngineReport[] | undefined): Map<string, string> | undefined {
  if (!reports) return undefined;
  let out: Map<string, string> | undefined;
  for (const e of reports) {
    if (e.version !== null) continue;
    (out ??= new Map()).set(e.engine, e.error ?? "");
  }
  return out;
}

/** GPUs (gpuKey) held by replicas that stay and hold cards once the plan so far is applied. */
export function heldGpus(ctx: Pick<ReconcileContext, "snapshot">, b: PlanBuilder): Set<string> {
  const held = new Set<string>();
  for (const r of ctx.snapshot.replicas) {
    if (!b.isRemoved(r) && holdsGpus(b.stateOf(r))) for (const s of r.shards) for (const g of s.gpus) held.add(gpuKey(s.node, g));
  }
  return held;
}

// Grouped per node once per array: the in-memory image hands out the same GPU and weight arrays
// while they stand, so a step over unchanged hardware does not group them again (read-only).
const gpusGrouped = new WeakMap<readonly GpuRow[], Map<string, GpuRow[]>>();
const weightsGrouped = new WeakMap<readonly { node: string; model: string }[], Map<string, ReadonlySet<string>>>();

function gpusByNode(gpus: readonly GpuRow[]): Map<string, GpuRow[]> {
  let out = gpusGrouped.get(gpus);
  if (out) return out;
  out = new Map();
  for (const g of gpus) {
    let l = out.get(g.node);
    if (!l) out.set(g.node, (l = []));
    l.push(g);
  }
  gpusGrouped.set(gpus, out);
  return out;
}

function weightsByNode(weights: readonly { node: string; model: string }[]): Map<string, ReadonlySet<string>> {
  let out = weightsGrouped.get(weights);
  if (out) return out;
  const sets = new Map<string, Set<string>>();
  for (const w of weights) {
    let s = sets.get(w.node);
    if (!s) sets.set(w.node, (s = new Set()));
    s.add(w.model);
  }
  weightsGrouped.set(weights, (out = sets));
  return out;
}

const NO_WEIGHTS: ReadonlySet<string> = new Set();

/** The fleet as placement sees it: every node, its GPUs marked used when held, its weights (and its standing for Hub weights), missing engines and engine versions. */
export function placementNodes(ctx: ReconcileContext, held: ReadonlySet<string>, portFull: ReadonlyMap<string, string> = new Map()): PlacementNode[] {
  const gpus = gpusByNode(ctx.snapshot.gpus);
  const weights = weightsByNode(ctx.snapshot.weights);
  return ctx.snapshot.nodes.map((n) => {
    const missing = missingEngines(ctx.engines?.get(n.name));
    const versions = reportedVersions(ctx.engines?.get(n.name));
    const full = portFull.has(n.name);
    const hub = ctx.weights?.get(n.name);
    return {
      name: n.name,
      state: ctx.nodeState.get(n.name)!,
      fabrics: n.fabrics,
      gpus: (gpus.get(n.name) ?? []).map((g) => ({ index: g.index, uuid: g.uuid, class: g.class, healthy: g.healthy, used: full || held.has(gpuKey(n.name, g.index)), parent: g.parent })),
      weights: weights.get(n.name) ?? NO_WEIGHTS,
      ...(missing ? { missingEngines: missing } : {}),
      ...(versions ? { engineVersions: versions } : {}),
      ...(hub ? { hubWeights: hub } : {}),
    };
  });
}

/** Sorts requests in place, the order they are placed in: models with nothing ready first, then the least covered, then by name. */
export function byNeed(requests: ModelRequest[]): ModelRequest[] {
  return requests.sort((a, b) => (a.ready === 0 ? 0 : 1) - (b.ready === 0 ? 0 : 1) || a.ready / a.desired - b.ready / b.desired || (a.model < b.model ? -1 : 1));
}

/** Places the requests (sorted by byNeed) on the nodes; nothing to place, nothing placed. */
export function placeShort(pnodes: readonly PlacementNode[], requests: readonly ModelRequest[]): PlacementResult {
  return requests.length > 0 ? place(pnodes, requests) : { placed: [], unplaceable: new Map<string, string>() };
}
