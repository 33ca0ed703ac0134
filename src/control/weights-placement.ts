// What placement knows of the Hub weights of each model on each node: how good the node is for
// them (it holds them, its fabric holds them, or they come from the Hub), what fetching them
// there costs, and whether its disk can take them at all. Made from the weights planner's view
// of the nodes (transfers.ts placementPreference and weightsFit) and handed to placement with
// the other per-node facts, so placement itself stays a pure function of what it is given;
// and how placement reads them per requested model (weightHolders).

import type { ModelSpec } from "../protocol/catalog";
import type { PlacementNode, PlacementRequest } from "./placement";
import type { WeightsManifest } from "../protocol/weights";
import { type TransferNode, placementPreference, weightsFit } from "./transfers";

/** One node's standing for one model's weights. */
export interface NodeWeights {
  /** 2: holds every file; 1: its fabric holds (or is getting) what it lacks; 0: from the Hub. */
  rank: 0 | 1 | 2;
  /** For `explain`: "present", "copy 134 GiB from h100-3 in fabric f1", "fetch 134 GiB from the Hub". */
  cost: string;
  /** Why its disk cannot take the weights ("disk: needs 134 GiB, 20 GiB free"), or why no node can have them: placement passes it over. */
  noRoom?: string;
  /** Weights placed at a file:// source: rank 0 copies them from a node of another fabric, never the Hub. */
  local?: boolean;
  /** Some of what it lacks is still arriving at a node of its fabric, which serves it as it arrives (pipelined copies). */
  arriving?: boolean;
}

/** Node → model → its standing; only models with an hf:// source whose file list is known. */
export type WeightsStanding = ReadonlyMap<string, ReadonlyMap<string, NodeWeights>>;

/** The Hub repository of a spec with an hf:// source pinned to a revision, else undefined. */
export function hubWeightsOf(spec: Pick<ModelSpec, "source" | "revision">): { repo: string; revision: string } | undefined {
  if (spec.source?.startsWith("hf://") !== true || spec.revision === undefined) return undefined;
  return { repo: spec.source.slice("hf://".length), revision: spec.revision };
}

/**
 * Every node's standing for every model whose weights come from the Hub and whose files are
 * known. `inUse(node)` names the revisions (repo@revision) a replica on it uses: the rest of
 * what llmgw fetched there counts as room, since the agent removes it to make room.
 */
export function weightsStanding(
  models: readonly { name: string; spec: Pick<ModelSpec, "source" | "revision"> }[],
  nodes: readonly TransferNode[],
  manifestOf: (repo: string, revision: string) => WeightsManifest | undefined,
  inUse: (node: string) => ReadonlySet<string>,
  /** A file:///PATH source's weights as some node found them (local-weights.ts), undefined while none did. */
  localOf: (source: string) => { repo: string; revision: string } | undefined = () => undefined,
): Map<string, Map<string, NodeWeights>> {
  const out = new Map<string, Map<string, NodeWeights>>();
  if (nodes.length === 0) return out;
  const withUse = nodes.map((n) => ({ ...n, inUse: inUse(n.name) }));
  const put = (node: string, model: string, w: NodeWeights) => {
    let mine = out.get(node);
    if (!mine) out.set(node, (mine = new Map()));
    mine.set(model, w);
  };
  for (const m of models) {
    const source = m.spec.source;
    const local = source?.startsWith("file://") === true;
    const hub = local ? localOf(source!) : hubWeightsOf(m.spec);
    if (hub === undefined) {
      // No node has reported the weights placed there: nowhere to copy them from, so no node can run it.
      if (local) for (const n of withUse) put(n.name, m.name, { rank: 0, cost: "none", noRoom: `no node holds ${source} (no agent found the directory)`, local: true });
      continue;
    }
    const manifest = manifestOf(hub.repo, hub.revision);
    if (manifest === undefined) continue;
    const prefs = placementPreference(withUse, manifest, local);
    for (const n of withUse) {
      const p = prefs.get(n.name);
      if (p === undefined) continue;
      const fit = weightsFit(n, manifest);
      put(n.name, m.name, { rank: p.rank, cost: p.cost, ...(fit.fits ? {} : { noRoom: fit.reason }), ...(local ? { local: true } : {}), ...(p.laterBytes > 0 ? { arriving: true } : {}) });
    }
  }
  return out;
}

/** Which preference a node's standing gives it, and what getting the weights there costs, for `explain`. */
export function explainWeights(s: NodeWeights | undefined): string {
  if (s === undefined) return "weights: nothing known of this node's yet (from the Hub)";
  if (s.rank === 2) return "holds the weights (present)";
  if (s.rank === 1) return `its fabric ${s.arriving === true ? "holds or is receiving" : "holds"} the weights (${s.cost})`;
  if (s.local === true) return `weights placed by hand, held in another fabric (${s.cost})`;
  return `weights from the Hub (${s.cost})`;
}

// ---- as placement reads it ------------------------------------------------------------------

/** A requested model's nodes with a weights rank above 0 (ids, and their ranks), and those whose disk cannot take them. */
export interface ModelWeights {
  ids: number[];
  ranks: number[];
  noRoom: number[];
  why: string[];
}

/** Rank of a node holding the weights of a model without a Hub standing (what its heartbeat lists). */
export const HELD = 2;

/** Requested model → its nodes' weight ranks: from the Hub standing when any node has one for it, else from the weights on disk. */
export function weightHolders(nodes: readonly PlacementNode[], requests: readonly PlacementRequest[]): Map<string, ModelWeights> {
  const requested = new Set<string>();
  for (const r of requests) requested.add(r.model);
  const weights = new Map<string, ModelWeights>();
  const entry = (model: string) => {
    let w = weights.get(model);
    if (!w) weights.set(model, (w = { ids: [], ranks: [], noRoom: [], why: [] }));
    return w;
  };
  const add = (model: string, id: number, rank = HELD) => {
    const w = entry(model);
    w.ids.push(id);
    w.ranks.push(rank);
  };
  const fromHub = new Set<string>();
  for (const node of nodes) if (node.hubWeights) for (const m of node.hubWeights.keys()) if (requested.has(m)) fromHub.add(m);
  for (const m of fromHub) requested.delete(m);
  if (fromHub.size > 0)
    nodes.forEach((node, id) => {
      for (const m of fromHub) {
        const s = node.hubWeights?.get(m);
        if (s === undefined) continue;
        if (s.rank > 0) add(m, id, s.rank);
        if (s.noRoom !== undefined) {
          const w = entry(m);
          w.noRoom.push(id);
          w.why.push(s.noRoom);
        }
      }
    });
  if (requested.size === 0) return weights;
  nodes.forEach((node, id) => {
    // Whichever side is smaller: a node may hold hundreds of models while a tick asks about a few.
    if (node.weights.size <= requested.size) {
      for (const m of node.weights) if (requested.has(m)) add(m, id);
    } else {
      for (const m of requested) if (node.weights.has(m)) add(m, id);
    }
  });
  return weights;
}
