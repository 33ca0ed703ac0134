// Placement: which GPUs on which nodes the replicas the reconciler wants to add get, and for
// each model it could not fully place, one reason a person can act on. A pure function of the
// fleet and the requests — no I/O, clock or randomness — so the same tick gives the same answer.

import { plural } from "../lib/format";
import type { Profile } from "../protocol/catalog";
import { versionLack, versionLackText } from "../protocol/engine-features";
import { type FlatGpus, flattenGpus, linkTable } from "./placement-gpus";
import { HELD, type ModelWeights, type NodeWeights, weightHolders } from "./weights-placement";

export interface PlacementGpu {
  index: number;
  uuid: string;
  class: string;
  healthy: boolean;
  /** held by a replica already */
  used: boolean;
  /**
   * The card's uuid for a MIG instance, or the uuid of another GPU of the same node whose memory
   * this one shares (a compute instance beside the one standing for its GPU instance). Such a
   * GPU and that one are never given to two replicas, except that GPUs sharing one parent may
   * each go to a profile asking for their class (compute instances asked for explicitly).
   */
  parent?: string | null;
}

export interface PlacementNode {
  name: string;
  state: "ready" | "cordoned" | "draining" | "unreachable" | "pending";
  fabrics: string[];
  gpus: PlacementGpu[];
  /** models whose weights are on this node */
  weights: ReadonlySet<string>;
  /**
   * Model → this node's standing for its weights from the Hub (weights-placement.ts). For a
   * model any node has a standing for, the ranks replace `weights`: held › its fabric holds ›
   * from the Hub, a preference among the nodes that fit; a node whose disk cannot take them
   * (noRoom) is passed over with that reason.
   */
  hubWeights?: ReadonlyMap<string, NodeWeights>;
  /**
   * Engines this node's agent looked for and found no version of (not installed, the probe
   * failed), with why; profiles of those engines are not placed here. Absent, or an engine
   * absent from it, means unknown (an older agent, a simulated node): never a reason to avoid it.
   */
  missingEngines?: ReadonlyMap<string, string>;
  /** Engine → the version this node's agent reported; a profile it cannot serve (engine-features.ts) is not placed here. */
  engineVersions?: ReadonlyMap<string, string>;
}

/** Built in, so every node can run it whatever its agent says. */
const ALWAYS_AVAILABLE = "fake";

export interface PlacementRequest {
  model: string;
  /** replicas to add now */
  count: number;
  /** in preference order */
  profiles: Profile[];
  placement: "binpack" | "spread";
  /** nodes already running a replica of this model (spread avoids them) */
  nodesInUse: ReadonlySet<string>;
}

export interface Shard {
  node: string;
  /** GPU indices on that node, ascending */
  gpus: number[];
}

export interface Placed {
  model: string;
  profile: string;
  /** shard 0 is the leader of a multi-node replica */
  shards: Shard[];
}

export interface PlacementResult {
  placed: Placed[];
  /** model → one reason a person can act on, for every request not fully placed */
  unplaceable: Map<string, string>;
}

/** Fabrics listed by name in a multi-node reason before the rest are summed up. */
const REASON_FABRICS = 6;

/**
 * The GPUs of one class. An entry is a node that has GPUs of the class (in any state); entries
 * follow node-name order, so "the lowest entry" is "the first by name". Ready entries sit in
 * buckets by (node whole?, free GPUs of the class), each a bitset over entries, so picking a
 * node reads a few words instead of scanning every node of the class for every replica.
 */
interface ClassIndex {
  id: number;
  name: string;
  node: Int32Array;
  /** GPUs of the class on the entry's node, healthy or not */
  total: Int32Array;
  /** healthy, unused GPUs of the class on the entry's node */
  free: Int32Array;
  /** entry e's GPU indices are gpus[start[e]] … gpus[start[e + 1] - 1], ascending */
  start: Int32Array;
  gpus: Int32Array;
  /** the flattened position (Fleet's numbering) of the GPU at the same position in `gpus` */
  gpos: Int32Array;
  /** 1 while the GPU at the same position in `gpus` is healthy and unused */
  avail: Uint8Array;
  /** free counts run 0 … buckets - 1 (the most GPUs of the class any node has) */
  buckets: number;
  /** 32-bit words per bitset */
  words: number;
  /** bucket (whole, free) starts at ((whole * buckets) + free) * words */
  bits: Uint32Array;
  /** entries per bucket, so empty buckets are skipped without reading their words */
  size: Int32Array;
  /** node states and fabrics of the class, for reasons; they do not change within a call */
  stats?: ClassStats;
}

interface ClassStats {
  notReady: { cordoned: number; draining: number; unreachable: number; pending: number };
  /** fabric ids that have a ready node of the class */
  fabrics: number[];
}

const byString = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The fleet as placement works on it: an internal copy in typed arrays, so the caller's objects
 * stay untouched and the hot loops touch numbers, not objects. Node ids are positions in name
 * order, so keeping the first of equal candidates breaks ties by name.
 */
class Fleet {
  readonly names: string[];
  readonly states: PlacementNode["state"][];
  readonly ready: Uint8Array;
  /** GPUs per node that are used or unhealthy: 0 means the node is whole */
  readonly busy: Int32Array;
  readonly fabricNames: string[];
  /** node id's fabric ids (deduplicated, ascending) are fabList[fabOff[id]] … fabList[fabOff[id + 1] - 1] */
  readonly fabOff: Int32Array;
  readonly fabList: Int32Array;
  readonly classes: ClassIndex[] = [];
  readonly classId = new Map<string, number>();
  /** node id's entries are (entClass[x], entPos[x]) for x in entOff[id] … entOff[id + 1] - 1 */
  readonly entOff: Int32Array;
  readonly entClass: Int32Array;
  readonly entPos: Int32Array;
  readonly byName = new Map<string, number>();
  /** requested model → how good each node is for its weights, and the nodes whose disk cannot take them */
  readonly weights: Map<string, ModelWeights>;
  /** engine → ids of nodes whose agent found no version of it; why, per node id */
  readonly lacking: Map<string, number[]>;
  readonly lackWhy: (ReadonlyMap<string, string> | undefined)[];
  readonly versions: (ReadonlyMap<string, string> | undefined)[];
  /** engine and node count → ids of nodes whose engine version cannot serve such a profile */
  private readonly unableIds = new Map<string, number[]>();
  /** bumped by every take, so a reason computed for one state is not reused for another */
  generation = 0;
  /** nodes hidden from the buckets while one profile is tried (see hide) */
  private hidden: number[] = [];
  /** Flattened GPU p's class, and its position and entry within that class's arrays. */
  private readonly gClass: Int32Array;
  private readonly gAt: Int32Array;
  private readonly gEnt: Int32Array;
  /** GPUs that share GPU p's memory: linkList[linkOff[p]] … linkList[linkOff[p + 1] - 1] */
  private readonly linkOff: Int32Array;
  private readonly linkList: Int32Array;

  constructor(input: readonly PlacementNode[], requests: readonly PlacementRequest[]) {
    const nodes = inNameOrder(input);
    const n = nodes.length;
    this.names = nodes.map((x) => x.name);
    this.states = nodes.map((x) => x.state);
    this.ready = new Uint8Array(n);
    nodes.forEach((x, id) => {
      this.byName.set(x.name, id);
      this.ready[id] = x.state === "ready" ? 1 : 0;
    });
    this.lackWhy = nodes.map((x) => x.missingEngines);
    this.lacking = lackingEngines(nodes);
    this.versions = nodes.map((x) => x.engineVersions);
    const fabrics = fabricIndex(nodes);
    this.fabricNames = fabrics.names;
    this.fabOff = fabrics.off;
    this.fabList = fabrics.list;
    this.weights = weightHolders(nodes, requests);

    const flat = flattenGpus(nodes, this.classId);
    this.busy = flat.busy;
    this.gClass = flat.gClass;
    const links = linkTable(flat.shares, flat.count);
    this.linkOff = links.off;
    this.linkList = links.list;

    const sizes = classSizes(flat, this.classId.size, n);
    for (const [name, c] of this.classId) this.classes[c] = emptyClass(c, name, sizes.entries[c]!, sizes.perClass[c]!);
    const filled = fillClasses(this.classes, flat, n, sizes.allEntries);
    this.entOff = filled.entOff;
    this.entClass = filled.entClass;
    this.entPos = filled.entPos;
    this.gAt = filled.gAt;
    this.gEnt = filled.gEnt;
    for (const ci of this.classes) fillBuckets(ci, this.ready, this.busy);
  }

  /** The entry of class c on node id, or -1. */
  entryOf(id: number, c: number): number {
    for (let x = this.entOff[id]!; x < this.entOff[id + 1]!; x++) if (this.entClass[x] === c) return this.entPos[x]!;
    return -1;
  }

  /** Takes the k lowest free GPUs of entry e (on a ready node) and moves buckets to match. */
  take(ci: ClassIndex, e: number, k: number): number[] {
    const id = ci.node[e]!;
    const out: number[] = [];
    const taken: number[] = [];
    for (let j = ci.start[e]!; j < ci.start[e + 1]! && out.length < k; j++) {
      if (ci.avail[j] === 0) continue;
      ci.avail[j] = 0;
      out.push(ci.gpus[j]!);
      taken.push(ci.gpos[j]!);
    }
    const wasWhole = this.busy[id] === 0;
    clearBit(ci, wasWhole ? 1 : 0, ci.free[e]!, e);
    ci.free[e]! -= k;
    setBit(ci, 0, ci.free[e]!, e);
    this.busy[id]! += k;
    // The node is no longer whole, which moves its entries of every other class too.
    if (wasWhole) {
      for (let x = this.entOff[id]!; x < this.entOff[id + 1]!; x++) {
        const other = this.classes[this.entClass[x]!]!;
        if (other === ci) continue;
        const oe = this.entPos[x]!;
        clearBit(other, 1, other.free[oe]!, oe);
        setBit(other, 0, other.free[oe]!, oe);
      }
    }
    // The node is not whole any more, so blocking only moves the blocked GPU's own entry.
    for (const q of taken) for (let x = this.linkOff[q]!; x < this.linkOff[q + 1]!; x++) this.block(this.linkList[x]!);
    this.generation++;
    return out;
  }

  /** Takes GPU q (flattened position) out of what is free, on a node that is no longer whole. */
  private block(q: number): void {
    const ci = this.classes[this.gClass[q]!]!;
    const at = this.gAt[q]!;
    if (ci.avail[at] === 0) return;
    const e = this.gEnt[q]!;
    ci.avail[at] = 0;
    clearBit(ci, 0, ci.free[e]!, e);
    ci.free[e]!--;
    setBit(ci, 0, ci.free[e]!, e);
    this.busy[ci.node[e]!]!++;
  }

  /** Ids of the nodes whose version of p's engine cannot serve p (engine-features.ts). */
  unable(p: Pick<Profile, "engine" | "nodes">): number[] {
    const key = `${p.engine}\u0000${p.nodes}`;
    let ids = this.unableIds.get(key);
    if (ids) return ids;
    ids = [];
    for (let id = 0; id < this.names.length; id++) {
      const v = this.versions[id]?.get(p.engine);
      if (v !== undefined && versionLack(p.engine, v, p)) ids.push(id);
    }
    this.unableIds.set(key, ids);
    return ids;
  }

  /**
   * Takes the ready nodes that cannot run p's engine, or whose version of it cannot serve p, out
   * of class ci's buckets (and out of the ready flags the direct scans read) while one profile is
   * tried; unhide puts them back as they are, which is as they were: a hidden node is never taken from.
   */
  hide(ci: ClassIndex, p: Pick<Profile, "engine" | "nodes">): void {
    for (const ids of [this.lacking.get(p.engine), this.unable(p)]) {
      for (const id of ids ?? []) {
        if (!this.ready[id]) continue;
        this.ready[id] = 0;
        this.hidden.push(id);
        const e = this.entryOf(id, ci.id);
        if (e >= 0) clearBit(ci, this.busy[id] === 0 ? 1 : 0, ci.free[e]!, e);
      }
    }
  }

  /**
   * Takes the given ready nodes out of class ci's buckets, as hide does, for one request (its
   * nodes whose disk cannot take the weights); returns those it took, for showAgain.
   */
  hideNodes(ci: ClassIndex, ids: readonly number[]): number[] {
    const out: number[] = [];
    for (const id of ids) {
      if (!this.ready[id]) continue;
      this.ready[id] = 0;
      out.push(id);
      const e = this.entryOf(id, ci.id);
      if (e >= 0) clearBit(ci, this.busy[id] === 0 ? 1 : 0, ci.free[e]!, e);
    }
    return out;
  }

  showAgain(ci: ClassIndex, ids: readonly number[]): void {
    for (const id of ids) {
      this.ready[id] = 1;
      const e = this.entryOf(id, ci.id);
      if (e >= 0) setBit(ci, this.busy[id] === 0 ? 1 : 0, ci.free[e]!, e);
    }
  }

  unhide(ci: ClassIndex): void {
    for (const id of this.hidden) {
      this.ready[id] = 1;
      const e = this.entryOf(id, ci.id);
      if (e >= 0) setBit(ci, this.busy[id] === 0 ? 1 : 0, ci.free[e]!, e);
    }
    this.hidden = [];
  }

  inFabric(id: number, fabric: number): boolean {
    for (let x = this.fabOff[id]!; x < this.fabOff[id + 1]!; x++) if (this.fabList[x] === fabric) return true;
    return false;
  }

  stats(ci: ClassIndex): ClassStats {
    if (ci.stats) return ci.stats;
    const notReady = { cordoned: 0, draining: 0, unreachable: 0, pending: 0 };
    const present = new Uint8Array(this.fabricNames.length);
    for (let e = 0; e < ci.node.length; e++) {
      const id = ci.node[e]!;
      const s = this.states[id]!;
      if (s !== "ready") notReady[s]++;
      else for (let x = this.fabOff[id]!; x < this.fabOff[id + 1]!; x++) present[this.fabList[x]!] = 1;
    }
    const fabrics: number[] = [];
    present.forEach((v, f) => v && fabrics.push(f));
    return (ci.stats = { notReady, fabrics });
  }
}

// ---- building the fleet ------------------------------------------------------------------------
// The constructor's passes, each a function of what the ones before built.

/** The nodes by name; the input itself when it is sorted already (the usual case). */
function inNameOrder(input: readonly PlacementNode[]): readonly PlacementNode[] {
  let sorted = true;
  for (let i = 1; i < input.length && sorted; i++) sorted = input[i - 1]!.name < input[i]!.name;
  if (sorted) return input;
  const order = input.map((_, i) => i).sort((a, b) => byString(input[a]!.name, input[b]!.name));
  return order.map((i) => input[i]!);
}

/** Engine → ids of nodes whose agent found no version of it (the built-in one never lacks). */
function lackingEngines(nodes: readonly PlacementNode[]): Map<string, number[]> {
  const lacking = new Map<string, number[]>();
  nodes.forEach((x, id) => {
    if (!x.missingEngines) return;
    for (const engine of x.missingEngines.keys()) {
      if (engine === ALWAYS_AVAILABLE) continue;
      let list = lacking.get(engine);
      if (!list) lacking.set(engine, (list = []));
      list.push(id);
    }
  });
  return lacking;
}

/** Fabric names in order, and each node's fabric ids (deduplicated, ascending) as off/list. */
function fabricIndex(nodes: readonly PlacementNode[]): { names: string[]; off: Int32Array; list: Int32Array } {
  const fabricSet = new Set<string>();
  for (const node of nodes) for (const f of node.fabrics) fabricSet.add(f);
  const names = [...fabricSet].sort(byString);
  const fabricId = new Map(names.map((f, i) => [f, i]));
  const off = new Int32Array(nodes.length + 1);
  const list: number[] = [];
  nodes.forEach((node, id) => {
    if (node.fabrics.length === 1) list.push(fabricId.get(node.fabrics[0]!)!);
    else if (node.fabrics.length > 1) list.push(...[...new Set(node.fabrics.map((f) => fabricId.get(f)!))].sort((a, b) => a - b));
    off[id + 1] = list.length;
  });
  return { names, off, list: Int32Array.from(list) };
}

/** Per class: entries (nodes having it) and GPUs; and entries over all classes. */
function classSizes(flat: FlatGpus, nc: number, n: number): { entries: Int32Array; perClass: Int32Array; allEntries: number } {
  const lastNode = new Int32Array(nc).fill(-1);
  const entries = new Int32Array(nc);
  const perClass = new Int32Array(nc);
  let allEntries = 0;
  for (let id = 0; id < n; id++) {
    for (let q = flat.off[id]!; q < flat.off[id + 1]!; q++) {
      const c = flat.gClass[q]!;
      perClass[c]!++;
      if (lastNode[c] !== id) {
        lastNode[c] = id;
        entries[c]!++;
        allEntries++;
      }
    }
  }
  return { entries, perClass, allEntries };
}

/** A class's arrays, sized for e entries and g GPUs, not yet filled. */
function emptyClass(id: number, name: string, e: number, g: number): ClassIndex {
  return {
    id,
    name,
    node: new Int32Array(e),
    total: new Int32Array(e),
    free: new Int32Array(e),
    start: new Int32Array(e + 1),
    gpus: new Int32Array(g),
    gpos: new Int32Array(g),
    avail: new Uint8Array(g),
    buckets: 0,
    words: (e + 31) >>> 5,
    bits: new Uint32Array(0),
    size: new Int32Array(0),
  };
}

/**
 * Fills the classes' arrays from the flattened GPUs. A node's GPUs of one class land next to
 * each other in the class's arrays because nodes are filled one after another. Returns each
 * node's entries and each GPU's place in its class.
 */
function fillClasses(classes: ClassIndex[], flat: FlatGpus, n: number, allEntries: number) {
  const nc = classes.length;
  const out = { entOff: new Int32Array(n + 1), entClass: new Int32Array(allEntries), entPos: new Int32Array(allEntries), gAt: new Int32Array(flat.count), gEnt: new Int32Array(flat.count) };
  const lastNode = new Int32Array(nc).fill(-1);
  const curEntry = new Int32Array(nc);
  const nextEntry = new Int32Array(nc);
  const cursor = new Int32Array(nc);
  let x = 0;
  for (let id = 0; id < n; id++) {
    for (let q = flat.off[id]!; q < flat.off[id + 1]!; q++) {
      const c = flat.gClass[q]!;
      const ci = classes[c]!;
      if (lastNode[c] !== id) {
        lastNode[c] = id;
        const e = nextEntry[c]!++;
        curEntry[c] = e;
        ci.node[e] = id;
        ci.start[e] = cursor[c]!;
        out.entClass[x] = c;
        out.entPos[x] = e;
        x++;
      }
      const e = curEntry[c]!;
      const at = cursor[c]!++;
      out.gAt[q] = at;
      out.gEnt[q] = e;
      ci.gpos[at] = q;
      ci.gpus[at] = flat.gIndex[q]!;
      ci.avail[at] = flat.gFree[q]!;
      ci.total[e]!++;
      ci.free[e]! += flat.gFree[q]!;
    }
    out.entOff[id + 1] = x;
  }
  for (let c = 0; c < nc; c++) classes[c]!.start[classes[c]!.node.length] = cursor[c]!;
  return out;
}

/** Sizes the class's buckets by its biggest node and puts every ready entry in its bucket. */
function fillBuckets(ci: ClassIndex, ready: Uint8Array, busy: Int32Array): void {
  const e = ci.node.length;
  let most = 0;
  for (let i = 0; i < e; i++) if (ci.total[i]! > most) most = ci.total[i]!;
  ci.buckets = most + 1;
  ci.bits = new Uint32Array(2 * ci.buckets * ci.words);
  ci.size = new Int32Array(2 * ci.buckets);
  for (let i = 0; i < e; i++) {
    const id = ci.node[i]!;
    if (ready[id]) setBit(ci, busy[id] === 0 ? 1 : 0, ci.free[i]!, i);
  }
}

function setBit(ci: ClassIndex, whole: number, free: number, e: number): void {
  const b = whole * ci.buckets + free;
  ci.bits[b * ci.words + (e >>> 5)]! |= 1 << (e & 31);
  ci.size[b]!++;
}

function clearBit(ci: ClassIndex, whole: number, free: number, e: number): void {
  const b = whole * ci.buckets + free;
  ci.bits[b * ci.words + (e >>> 5)]! &= ~(1 << (e & 31));
  ci.size[b]!--;
}

/**
 * The one loop over bucket bitsets: visits the entries in bucket b0, or in b0 and b1 together
 * (b1 < 0: b0 alone), lowest entry first and each once, until `visit` returns true. Returns that
 * entry, or -1 when none did (or the buckets are empty).
 */
function scanBuckets(ci: ClassIndex, b0: number, b1: number, visit: (e: number) => boolean | void): number {
  const { bits, size, words } = ci;
  const two = b1 >= 0;
  if (size[b0] === 0 && (!two || size[b1] === 0)) return -1;
  const base0 = b0 * words;
  const base1 = two ? b1 * words : 0;
  for (let w = 0; w < words; w++) {
    let v = two ? bits[base0 + w]! | bits[base1 + w]! : bits[base0 + w]!;
    while (v !== 0) {
      const e = (w << 5) + 31 - Math.clz32(v & -v);
      v &= v - 1;
      if (visit(e) === true) return e;
    }
  }
  return -1;
}

const first = () => true;

/** The lowest entry in bucket (whole, free), or -1. */
function firstIn(ci: ClassIndex, whole: number, free: number): number {
  return scanBuckets(ci, whole * ci.buckets + free, -1, first);
}

// ---- orders ------------------------------------------------------------------------------------
// Who wins among candidate entries, as comparators: negative when a goes first. Every one ends
// with the entry itself, which is name order, so ties always go to the node name.

/** binpack, one node: partly used before whole (whole nodes stay whole for multi-node replicas), then the tightest fit. */
function binpackOne(fleet: Fleet, ci: ClassIndex, a: number, b: number): number {
  const wholeA = fleet.busy[ci.node[a]!] === 0 ? 1 : 0;
  const wholeB = fleet.busy[ci.node[b]!] === 0 ? 1 : 0;
  return wholeA - wholeB || ci.free[a]! - ci.free[b]! || a - b;
}

/** spread, one node: away from the model's other replicas, then the emptiest. */
function spreadOne(ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.inUse[ci.node[a]!]! - m.inUse[ci.node[b]!]! || ci.free[b]! - ci.free[a]! || a - b;
}

/** The emptiest. */
function roomiest(ci: ClassIndex, a: number, b: number): number {
  return ci.free[b]! - ci.free[a]! || a - b;
}

/** binpack, one of several nodes: holds the weights, then the fewest GPUs of the class (bigger nodes stay for bigger shards). */
function binpackShard(ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.hasWeights[ci.node[b]!]! - m.hasWeights[ci.node[a]!]! || ci.total[a]! - ci.total[b]! || a - b;
}

/** spread, one of several nodes: not running the model, then holds the weights. */
function spreadShard(ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.inUse[ci.node[a]!]! - m.inUse[ci.node[b]!]! || m.hasWeights[ci.node[b]!]! - m.hasWeights[ci.node[a]!]! || a - b;
}

/** The leader of a multi-node replica: a node with the weights if any, then by name. */
function leaderFirst(ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.hasWeights[ci.node[b]!]! - m.hasWeights[ci.node[a]!]! || a - b;
}

/** binpack among nodes with weights: the higher rank, then binpack's own order. */
function binpackWeights(fleet: Fleet, ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.hasWeights[ci.node[b]!]! - m.hasWeights[ci.node[a]!]! || binpackOne(fleet, ci, a, b);
}

/** spread among nodes with weights: away from the model's other replicas, then the higher rank, then the emptiest. */
function spreadWeights(ci: ClassIndex, m: Marks, a: number, b: number): number {
  return m.inUse[ci.node[a]!]! - m.inUse[ci.node[b]!]! || m.hasWeights[ci.node[b]!]! - m.hasWeights[ci.node[a]!]! || roomiest(ci, a, b);
}

/** What one request's scans need to know about its model, as flags indexed by node id. */
interface Marks {
  /** the node's weights rank for the model (0 none; see weightHolders) */
  hasWeights: Uint8Array;
  weightNodes: readonly number[];
  /** nodes running the model already, or given a replica of it in this call */
  inUse: Uint8Array;
  inUseNodes: readonly number[];
  /** nodes whose disk cannot take the model's weights: not candidates */
  noRoom: readonly number[];
}

/** The entry of class `ci` for one shard of k GPUs, or -1. */
function pickSingle(fleet: Fleet, ci: ClassIndex, k: number, spread: boolean, m: Marks): number {
  if (k >= ci.buckets) return -1;
  const { id: c, free, node } = ci;

  // Nodes with the weights first (then, for Hub weights, nodes whose fabric has them): no
  // download, or a fast copy. They are few, so they are scanned directly.
  let best = -1;
  for (const id of m.weightNodes) {
    if (!fleet.ready[id]) continue;
    const e = fleet.entryOf(id, c);
    if (e < 0 || free[e]! < k) continue;
    if (best < 0 || (spread ? spreadWeights(ci, m, e, best) : binpackWeights(fleet, ci, m, e, best)) < 0) best = e;
  }
  if (best >= 0 && !(spread && m.inUse[node[best]!])) return best;
  const heldWithWeights = best;

  if (!spread) {
    // A node already partly used keeps whole nodes whole for multi-node replicas; among those,
    // the fewest free GPUs that still fit.
    for (let whole = 0; whole < 2; whole++) {
      for (let f = k; f < ci.buckets; f++) {
        const e = firstIn(ci, whole, f);
        if (e >= 0) return e;
      }
    }
    return -1;
  }

  // spread: the emptiest node not running the model yet. Weight holders that qualify were
  // taken above, so the ones met here are all in use.
  const fresh = (e: number) => m.inUse[node[e]!] === 0;
  for (let f = ci.buckets - 1; f >= k; f--) {
    const e = scanBuckets(ci, f, ci.buckets + f, fresh);
    if (e >= 0) return e;
  }
  // Every node with room runs the model already: a second replica there beats none.
  if (heldWithWeights >= 0) return heldWithWeights;
  best = -1;
  for (const id of m.inUseNodes) {
    if (!fleet.ready[id]) continue;
    const e = fleet.entryOf(id, c);
    if (e < 0 || free[e]! < k) continue;
    if (best < 0 || roomiest(ci, e, best) < 0) best = e;
  }
  return best;
}

/** Entries of class `ci` for n whole nodes in one fabric, leader first, or null. */
function pickMulti(fleet: Fleet, ci: ClassIndex, k: number, n: number, spread: boolean, m: Marks, scratch: Int32Array[]): number[] | null {
  if (k >= ci.buckets) return null;
  const [fabCount, fabWeights, fabFresh] = scratch as [Int32Array, Int32Array, Int32Array];
  fabCount.fill(0);
  fabWeights.fill(0);
  fabFresh.fill(0);
  // Whole ready nodes with at least k GPUs of the class are exactly the "whole" buckets from k up.
  const cands: number[] = [];
  const count = (e: number) => {
    const id = ci.node[e]!;
    const from = fleet.fabOff[id]!;
    const to = fleet.fabOff[id + 1]!;
    if (from === to) return;
    cands.push(e);
    for (let x = from; x < to; x++) {
      const fb = fleet.fabList[x]!;
      fabCount[fb]!++;
      fabWeights[fb]! += m.hasWeights[id]!;
      fabFresh[fb]! += 1 - m.inUse[id]!;
    }
  };
  for (let f = k; f < ci.buckets; f++) scanBuckets(ci, ci.buckets + f, -1, count);

  const better = (a: number, b: number): boolean => {
    // Weights beyond n nodes do not help this replica, so ranks count up to n nodes' worth.
    const wa = Math.min(fabWeights[a]!, HELD * n);
    const wb = Math.min(fabWeights[b]!, HELD * n);
    if (spread) {
      const fa = Math.min(fabFresh[a]!, n);
      const fb = Math.min(fabFresh[b]!, n);
      if (fa !== fb) return fa > fb;
      if (wa !== wb) return wa > wb;
      return fabCount[a]! > fabCount[b]!; // the roomiest fabric; ties keep the earlier name
    }
    if (wa !== wb) return wa > wb;
    return fabCount[a]! < fabCount[b]!; // tightest fit leaves bigger blocks for bigger replicas
  };
  let fabric = -1;
  for (let fb = 0; fb < fabCount.length; fb++) {
    if (fabCount[fb]! < n) continue;
    if (fabric < 0 || better(fb, fabric)) fabric = fb;
  }
  if (fabric < 0) return null;

  // Within the fabric, the best n nodes, then the leader first.
  const order = spread ? (a: number, b: number) => spreadShard(ci, m, a, b) : (a: number, b: number) => binpackShard(ci, m, a, b);
  const pick = cands
    .filter((e) => fleet.inFabric(ci.node[e]!, fabric))
    .sort(order)
    .slice(0, n);
  return pick.sort((a, b) => leaderFirst(ci, m, a, b));
}

/**
 * Places `count` replicas per request, requests in the order given, each placement taking its
 * GPUs from what later requests see. Per replica the first profile that fits wins. Order of
 * preference, ties always to the node name:
 * Weights: a node holding them ranks above one whose fabric holds them (Hub weights, see
 * PlacementNode.hubWeights) above any other; a node whose disk cannot take them is no candidate.
 * - binpack, one node: the higher weights rank › partly used (keeps whole nodes whole) › fewest free
 *   GPUs of the class that still fit;
 * - spread, one node: not running the model (nodesInUse, or placed in this call) › holds the
 *   weights › most free GPUs of the class; when every node with room runs it, one of those;
 * - several nodes, the fabric (candidates are its whole nodes with enough GPUs of the class;
 *   counts capped at the nodes needed): binpack: most holding the weights › fewest candidates
 *   (tightest fit); spread: most not running the model › most holding the weights › most
 *   candidates. Within it, binpack: weights › fewest GPUs of the class; spread: not running
 *   the model › weights. The leader (shard 0) is a weight holder if any, then the first by name.
 * A model requested twice in one call keeps the first reason.
 */
export function place(nodes: readonly PlacementNode[], requests: readonly PlacementRequest[]): PlacementResult {
  const fleet = new Fleet(nodes, requests);
  const n = fleet.names.length;
  const nf = fleet.fabricNames.length;
  const placed: Placed[] = [];
  const unplaceable = new Map<string, string>();
  const reasons = new ReasonCache(fleet);

  // Per-request flags, set from short lists and cleared the same way, so a request costs
  // nothing for the nodes it does not concern.
  const hasWeights = new Uint8Array(n);
  const inUse = new Uint8Array(n);
  const scratch = [new Int32Array(nf), new Int32Array(nf), new Int32Array(nf)];
  /** model → nodes given a replica of it in this call, which spread avoids like nodesInUse */
  const chosen = new Map<string, number[]>();

  function tryProfile(p: Profile, spread: boolean, m: Marks): Shard[] | null {
    const c = fleet.classId.get(p.gpu_class);
    if (c === undefined) return null;
    const ci = fleet.classes[c]!;
    fleet.hide(ci, p);
    const noRoom = m.noRoom.length > 0 ? fleet.hideNodes(ci, m.noRoom) : m.noRoom;
    try {
      return tryClass(ci, p, spread, m);
    } finally {
      if (noRoom.length > 0) fleet.showAgain(ci, noRoom);
      fleet.unhide(ci);
    }
  }

  function tryClass(ci: ClassIndex, p: Profile, spread: boolean, m: Marks): Shard[] | null {
    if (p.nodes <= 1) {
      const e = pickSingle(fleet, ci, p.gpus, spread, m);
      if (e < 0) return null;
      return [{ node: fleet.names[ci.node[e]!]!, gpus: fleet.take(ci, e, p.gpus) }];
    }
    const picks = pickMulti(fleet, ci, p.gpus, p.nodes, spread, m, scratch);
    if (!picks) return null;
    return picks.map((e) => ({ node: fleet.names[ci.node[e]!]!, gpus: fleet.take(ci, e, p.gpus) }));
  }

  for (const req of requests) {
    if (req.count <= 0) continue;
    const spread = req.placement === "spread";
    const w = fleet.weights.get(req.model);
    const weightNodes = w?.ids ?? [];
    for (let x = 0; x < weightNodes.length; x++) hasWeights[weightNodes[x]!] = w!.ranks[x]!;
    const inUseNodes: number[] = [];
    const mark = (id: number) => {
      if (inUse[id] === 0) {
        inUse[id] = 1;
        inUseNodes.push(id);
      }
    };
    let mine = chosen.get(req.model);
    if (!mine) chosen.set(req.model, (mine = []));
    for (const name of req.nodesInUse) {
      const id = fleet.byName.get(name);
      if (id !== undefined) mark(id);
    }
    for (const id of mine) mark(id);
    const marks: Marks = { hasWeights, weightNodes, inUse, inUseNodes, noRoom: w?.noRoom ?? [] };

    // Capacity only shrinks within a call, so a profile that failed once stays failed for the
    // rest of this request; skipping it keeps large counts cheap.
    const failed = new Uint8Array(req.profiles.length);
    let done = 0;
    while (done < req.count) {
      let shards: Shard[] | null = null;
      let profile = "";
      for (let i = 0; i < req.profiles.length && !shards; i++) {
        if (failed[i]) continue;
        const p = req.profiles[i]!;
        shards = tryProfile(p, spread, marks);
        if (shards) profile = p.name;
        else failed[i] = 1;
      }
      if (!shards) break;
      placed.push({ model: req.model, profile, shards });
      for (const s of shards) {
        const id = fleet.byName.get(s.node)!;
        mine.push(id);
        mark(id);
      }
      done++;
    }
    if (done < req.count && !unplaceable.has(req.model)) {
      const prefix = done > 0 ? `placed ${done} of ${req.count}; ` : "";
      const why = w && w.noRoom.length > 0 ? diskReason(fleet, req.profiles, w) : reasons.explain(req.profiles);
      unplaceable.set(req.model, prefix + why);
    }

    for (const id of weightNodes) hasWeights[id] = 0;
    for (const id of inUseNodes) inUse[id] = 0;
  }
  return { placed, unplaceable };
}

// ---- reasons ---------------------------------------------------------------------------------
// Computed only for what failed, from the state after this call's earlier placements: the
// numbers match what the person will see once these replicas start. On a full fleet many
// requests fail in a row for the same shape with nothing placed between, so a reason is kept
// until the next placement.

class ReasonCache {
  private readonly cache = new Map<string, { generation: number; text: string }>();
  constructor(private readonly fleet: Fleet) {}

  explain(profiles: readonly Profile[]): string {
    if (profiles.length === 0) return "the model has no profiles";
    if (profiles.length === 1) return this.profile(profiles[0]!);
    return profiles.map((p) => `${p.name}: ${this.profile(p)}`).join("; ");
  }

  private profile(p: Profile): string {
    const key = `${p.gpus}/${p.nodes}/${p.gpu_class}/${p.engine}`;
    const hit = this.cache.get(key);
    if (hit && hit.generation === this.fleet.generation) return hit.text;
    const text = profileReason(this.fleet, p);
    this.cache.set(key, { generation: this.fleet.generation, text });
    return text;
  }
}

/** Nodes named in a disk reason before the rest are summed up. */
const REASON_DISKS = 3;

/**
 * The reason for a model some nodes' disks cannot hold: "h100-2: disk: needs 134 GiB, 20 GiB
 * free", then, when other ready nodes of the class remain, why none of those would do. Not
 * cached: the nodes passed over are this model's own.
 */
function diskReason(fleet: Fleet, profiles: readonly Profile[], w: ModelWeights): string {
  if (profiles.length === 0) return "the model has no profiles";
  const one = (p: Profile): string => {
    const c = fleet.classId.get(p.gpu_class);
    if (c === undefined) return profileReason(fleet, p);
    const ci = fleet.classes[c]!;
    const named: string[] = [];
    let more = 0;
    w.noRoom.forEach((id, x) => {
      if (!fleet.ready[id] || fleet.entryOf(id, c) < 0) return;
      if (named.length < REASON_DISKS) named.push(`${fleet.names[id]}: ${w.why[x]}`);
      else more++;
    });
    if (named.length === 0) return profileReason(fleet, p);
    if (more > 0) named.push(`${plural(more, "more node")} without room`);
    const hidden = fleet.hideNodes(ci, w.noRoom);
    try {
      let left = 0;
      for (let b = 0; b < 2 * ci.buckets; b++) left += ci.size[b]!;
      return left > 0 ? `${named.join("; ")}; ${profileReason(fleet, p)}` : named.join("; ");
    } finally {
      fleet.showAgain(ci, hidden);
    }
  };
  if (profiles.length === 1) return one(profiles[0]!);
  return profiles.map((p) => `${p.name}: ${one(p)}`).join("; ");
}

/** Groups of nodes lacking an engine named in a reason before the rest are summed up. */
const REASON_LACK_GROUPS = 3;

/**
 * "2 nodes have no vllm: vllm not found on PATH", one part per distinct reason, most nodes first,
 * for the ready nodes of class ci that cannot run the engine; "" when there are none.
 */
function lackText(fleet: Fleet, ci: ClassIndex, engine: string): string {
  const ids = fleet.lacking.get(engine);
  if (!ids) return "";
  const groups = new Map<string, number>();
  for (const id of ids) {
    if (!fleet.ready[id] || fleet.entryOf(id, ci.id) < 0) continue;
    const why = fleet.lackWhy[id]?.get(engine) ?? "";
    groups.set(why, (groups.get(why) ?? 0) + 1);
  }
  const sorted = [...groups].sort((a, b) => b[1] - a[1]);
  const parts = sorted
    .slice(0, REASON_LACK_GROUPS)
    .map(([why, count]) => `${plural(count, "node")} ${count === 1 ? "has" : "have"} no ${engine}${why ? `: ${why}` : ""}`);
  const rest = sorted.slice(REASON_LACK_GROUPS).reduce((sum, [, count]) => sum + count, 0);
  if (rest > 0) parts.push(`${plural(rest, "more node")} without ${engine}`);
  return parts.join("; ");
}

function profileReason(fleet: Fleet, p: Profile): string {
  const cls = p.gpu_class;
  const c = fleet.classId.get(cls);
  if (c === undefined) return `no node has ${cls} GPUs`;
  const ci = fleet.classes[c]!;
  // Counted before the nodes that cannot run the engine are hidden, then everything else is
  // counted without them, as placement saw the class.
  const lack = p.engine === ALWAYS_AVAILABLE ? "" : lackText(fleet, ci, p.engine);
  // Capability before capacity: the ready nodes whose engine version cannot serve p, said first.
  const unable = fleet.unable(p).filter((id) => fleet.ready[id] && fleet.entryOf(id, ci.id) >= 0);
  const lacks = unable.length > 0 ? versionLack(p.engine, fleet.versions[unable[0]!]?.get(p.engine), p) : undefined;
  const old = lacks ? versionLackText(p.engine, unable.map((id) => ({ node: fleet.names[id]!, version: fleet.versions[id]!.get(p.engine)! })), lacks) : "";
  if (!lack && !old) return classReason(fleet, ci, p, "", false);
  fleet.hide(ci, p);
  try {
    const rest = classReason(fleet, ci, p, lack, old !== "");
    return old && rest ? `${old}; ${rest}` : old || rest;
  } finally {
    fleet.unhide(ci);
  }
}

/** `versionsHid`: ready nodes were hidden for their engine's version, said before this. */
function classReason(fleet: Fleet, ci: ClassIndex, p: Profile, lack: string, versionsHid: boolean): string {
  const cls = p.gpu_class;
  const { notReady, fabrics: classFabrics } = fleet.stats(ci);
  const notReadyText = (["cordoned", "draining", "unreachable", "pending"] as const)
    .filter((s) => notReady[s] > 0)
    .map((s) => `${notReady[s]} ${s}`)
    .join(", ");
  let readyNodes = 0;
  for (let b = 0; b < 2 * ci.buckets; b++) readyNodes += ci.size[b]!;
  const notReadySuffix = notReadyText ? `; not ready: ${notReadyText}` : "";
  const need = `needs ${p.nodes} whole ${cls} nodes (${plural(p.gpus, "GPU")} each) in one fabric`;
  if (readyNodes === 0 && lack) return `${p.nodes > 1 ? `${need}; ` : ""}no ready ${cls} node can run ${p.engine} (${lack}${notReadySuffix})`;
  if (readyNodes === 0 && versionsHid) return notReadyText && `not ready: ${notReadyText}`;
  if (readyNodes === 0) return `no ready node has ${cls} GPUs (${notReadyText})`;
  const lackSuffix = lack ? `; ${lack}` : "";
  // Fabrics of ready nodes that can run the engine: the class's own list may name some only the hidden nodes are in.
  const fabrics = lack || versionsHid ? classFabrics.filter((f) => hasReadyIn(fleet, ci, f)) : classFabrics;

  if (p.nodes <= 1) {
    // How many ready nodes have how many free cards, most first: shows how far off it is.
    const parts: string[] = [];
    for (let f = ci.buckets - 1; f >= 0; f--) {
      const count = ci.size[f]! + ci.size[ci.buckets + f]!;
      if (count === 0) continue;
      const verb = count === 1 ? "has" : "have";
      parts.push(parts.length === 0 ? `${plural(count, "node")} ${verb} ${f}` : `${count} ${verb} ${f}`);
    }
    return `no ${cls} node has ${plural(p.gpus, "free GPU")} (${parts.join(", ")}${lackSuffix}${notReadySuffix})`;
  }

  // Multi-node: whole nodes with enough cards of the class, per fabric that has ready nodes of it.
  if (fabrics.length === 0) return `${need}; no ready ${cls} node is in a fabric${lackSuffix}${notReadySuffix}`;
  const whole = new Int32Array(fleet.fabricNames.length);
  const countWhole = (e: number) => {
    const id = ci.node[e]!;
    for (let x = fleet.fabOff[id]!; x < fleet.fabOff[id + 1]!; x++) whole[fleet.fabList[x]!]!++;
  };
  for (let f = p.gpus; f < ci.buckets; f++) scanBuckets(ci, ci.buckets + f, -1, countWhole);
  const listed = [...fabrics].sort((a, b) => whole[b]! - whole[a]! || a - b);
  let text = listed
    .slice(0, REASON_FABRICS)
    .map((f) => `${fleet.fabricNames[f]} has ${whole[f]}`)
    .join(", ");
  if (listed.length > REASON_FABRICS) text += `, and ${plural(listed.length - REASON_FABRICS, "more fabric")}`;
  return `${need}; ${text}${lackSuffix}${notReadySuffix}`;
}

/** Whether fabric f has a ready node with GPUs of class ci. */
function hasReadyIn(fleet: Fleet, ci: ClassIndex, f: number): boolean {
  for (let e = 0; e < ci.node.length; e++) if (fleet.ready[ci.node[e]!] && fleet.inFabric(ci.node[e]!, f)) return true;
  return false;
}
