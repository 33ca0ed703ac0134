// Placement's first pass over the fleet: every GPU flattened in node order, with which GPUs
// share memory (MIG instances, compute instances of one GPU instance), so the Fleet of
// placement.ts numbers them once and its loops touch typed arrays, not objects.

import type { PlacementGpu, PlacementNode } from "./placement";

/** Every GPU flattened in node order (by index within a node): Fleet's numbering. */
export interface FlatGpus {
  count: number;
  /** node id's GPUs are off[id] … off[id + 1] - 1 */
  off: Int32Array;
  gClass: Int32Array;
  gIndex: Int32Array;
  /** 1 while healthy, unused and not blocked by a held GPU it shares memory with */
  gFree: Uint8Array;
  busy: Int32Array;
  /** (GPU, the GPU whose memory it shares) pairs */
  shares: number[];
}

/** A node's GPUs by index; the list itself when it is sorted already. */
export function byIndex(gpus: readonly PlacementGpu[]): readonly PlacementGpu[] {
  for (let j = 1; j < gpus.length; j++) if (gpus[j - 1]!.index > gpus[j]!.index) return [...gpus].sort((a, b) => a.index - b.index);
  return gpus;
}

/** Flattens the GPUs, numbering classes in order of first appearance into classId. */
export function flattenGpus(nodes: readonly PlacementNode[], classId: Map<string, number>): FlatGpus {
  const n = nodes.length;
  let count = 0;
  for (const node of nodes) count += node.gpus.length;
  const flat: FlatGpus = { count, off: new Int32Array(n + 1), gClass: new Int32Array(count), gIndex: new Int32Array(count), gFree: new Uint8Array(count), busy: new Int32Array(n), shares: [] };
  const gUsed = new Uint8Array(count);
  const { shares, gFree } = flat;
  let p = 0;
  for (let id = 0; id < n; id++) {
    const gpus = byIndex(nodes[id]!.gpus);
    const sharesFrom = shares.length;
    sharedMemory(gpus, p, shares);
    let busy = 0;
    for (const g of gpus) {
      let c = classId.get(g.class);
      if (c === undefined) {
        c = classId.size;
        classId.set(g.class, c);
      }
      const ok = g.healthy && !g.used;
      if (!ok) busy++;
      flat.gClass[p] = c;
      flat.gIndex[p] = g.index;
      gFree[p] = ok ? 1 : 0;
      gUsed[p] = g.used ? 1 : 0;
      p++;
    }
    // A held GPU holds the memory it shares: the GPU instance standing for it, or every compute
    // instance inside it. Blocked ones count as busy, so the node is not whole either.
    for (let x = sharesFrom; x < shares.length; x += 2) {
      const a = shares[x]!;
      const b = shares[x + 1]!;
      if (gUsed[a] && gFree[b]) {
        gFree[b] = 0;
        busy++;
      }
      if (gUsed[b] && gFree[a]) {
        gFree[a] = 0;
        busy++;
      }
    }
    flat.busy[id] = busy;
    flat.off[id + 1] = p;
  }
  return flat;
}

/** Appends (GPU, parent) pairs, as flattened positions from `base`, for GPUs naming another of the node as parent. */
export function sharedMemory(gpus: readonly PlacementGpu[], base: number, shares: number[]): void {
  let uuidAt: Map<string, number> | undefined;
  for (let j = 0; j < gpus.length; j++) {
    const g = gpus[j]!;
    if (g.parent == null) continue;
    if (!uuidAt) {
      uuidAt = new Map();
      gpus.forEach((x, i) => uuidAt!.set(x.uuid, base + i));
    }
    const lead = uuidAt.get(g.parent);
    if (lead !== undefined && lead !== base + j) shares.push(base + j, lead);
  }
}

/** The share pairs as adjacency lists both ways: GPU p's are list[off[p]] … list[off[p + 1] - 1]. */
export function linkTable(shares: readonly number[], count: number): { off: Int32Array; list: Int32Array } {
  const degree = new Int32Array(count + 1);
  for (let x = 0; x < shares.length; x++) degree[shares[x]! + 1]!++;
  for (let q = 0; q < count; q++) degree[q + 1]! += degree[q]!;
  const off = degree.slice();
  const list = new Int32Array(shares.length);
  const fill = degree.slice(0, count);
  for (let x = 0; x < shares.length; x += 2) {
    const a = shares[x]!;
    const b = shares[x + 1]!;
    list[fill[a]!++] = b;
    list[fill[b]!++] = a;
  }
  return { off, list };
}
