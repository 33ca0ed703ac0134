// Step 5: placement of what is short, over the GPUs as they are once this step's removals and
// state changes are done. Every model gets its first replica before any gets its next.

import type { EngineReport } from "../../protocol/heartbeat";
import { type PlacementNode, type PlacementResult, place } from "../placement";
import { holdsGpus } from "../views";
import { type ReconcileContext, gpuKey } from "./context";
import type { ModelRequest } from "./desired";
import type { PlanBuilder } from "./plan";

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

/** The fleet as placement sees it: every node, its GPUs marked used when held, its weights and missing engines. */
export function placementNodes(ctx: ReconcileContext, held: ReadonlySet<string>, portFull: ReadonlyMap<string, string> = new Map()): PlacementNode[] {
  const gpusByNode = new Map<string, PlacementNode["gpus"]>();
  for (const g of ctx.snapshot.gpus) {
    let l = gpusByNode.get(g.node);
    if (!l) gpusByNode.set(g.node, (l = []));
    l.push({ index: g.index, uuid: g.uuid, class: g.class, healthy: g.healthy, used: portFull.has(g.node) || held.has(gpuKey(g.node, g.index)), parent: g.parent });
  }
  const weightsByNode = new Map<string, Set<string>>();
  for (const w of ctx.snapshot.weights) {
    let s = weightsByNode.get(w.node);
    if (!s) weightsByNode.set(w.node, (s = new Set()));
    s.add(w.model);
  }
  return ctx.snapshot.nodes.map((n) => {
    const missing = missingEngines(ctx.engines?.get(n.name));
    return {
      name: n.name,
      state: ctx.nodeState.get(n.name)!,
      fabrics: n.fabrics,
      gpus: gpusByNode.get(n.name) ?? [],
      weights: weightsByNode.get(n.name) ?? new Set(),
      ...(missing ? { missingEngines: missing } : {}),
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
