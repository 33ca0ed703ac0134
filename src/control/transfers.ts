// The head node's transfer plan: which node fetches which file of a model's weights, and from
// where. A fabric downloads a file from the Hub once; its other nodes copy it from a node of the
// fabric that holds it verified, spread over the holders, or, while nobody holds it yet, from a
// node that is receiving it (the agent serves the bytes it has and the rest as they arrive), so
// the copies run behind the one Hub download as a fan-out or a chain instead of after it. A
// copy whose source failed is planned from another source; one whose bytes failed their
// checksum from a peer is not fetched from that peer again (the Hub, when no other holds it).
// A pure function of what the nodes last reported:
// no I/O and no clock of its own (`now` is given), so the same reports give the same plan, and
// the orders for transfers already running are given again unchanged (the agent keeps them).

import { encodePath } from "../hub/client";
import { bytes } from "../lib/format";
import { type DiskReport, type FetchOrder, type TransferReport, type WeightFile, type WeightsHeld, type WeightsManifest, transferGrant } from "../protocol/weights";

export const TRANSFER_DEFAULTS = {
  /** Files a node fetches at once (its running transfers and new orders). */
  maxTransfersPerNode: 4,
  /** Files a node serves to its peers at once. */
  maxServesPerNode: 4,
  /** How long a peer grant lasts at least (see grantExpiry). */
  grantTtlMs: 3_600_000,
} as const;

export type TransferOptions = { [K in keyof typeof TRANSFER_DEFAULTS]?: number };

/** A node as the plan sees it, from its last heartbeat and its row. */
export interface TransferNode {
  name: string;
  /** Its fabrics, as placement reads them: nodes sharing one are "of one fabric". None: a fabric of its own. */
  fabrics: readonly string[];
  /**
   * Why the node neither fetches nor serves now (unreachable, draining, cordoned for transfers),
   * in a few words for a status line; undefined when it does.
   */
  unusable?: string | undefined;
  /** Its agent's listener, scheme://host:port; undefined when it has none: then it never serves. */
  peerUrl: string | undefined;
  /** Its listener's certificate (PEM) when peerUrl is https: what a node copying from it trusts. */
  peerCert?: string | undefined;
  /** SHA-256 of its credential: the grants to copy from it are derived from it. */
  credentialSha256: string;
  /**
   * Its agent serves only whole verified files, not the part of a file it is still receiving
   * (agents of protocol 1): it is a source once it holds a file, never while it fetches it.
   */
  wholeOnly?: boolean | undefined;
  held: readonly WeightsHeld[];
  transfers: readonly TransferReport[];
  /** Undefined when the agent did not say (an older agent): never a reason to hold back. */
  disk: DiskReport | undefined;
  /**
   * repo@revision of the weights a replica on this node uses. When given, weights llmgw fetched
   * that no replica uses and no want names count as room (the agent removes them to make room);
   * when absent, nothing does.
   */
  inUse?: ReadonlySet<string> | undefined;
}

/** A revision a node is to hold: a replica placed there, or a `weights pull`. */
export interface WeightsWant {
  node: string;
  repo: string;
  revision: string;
}

/** The Hub as the head node reaches it. The token goes only into orders of repositories that need it. */
export interface HubAccess {
  endpoint: string;
  token?: string | undefined;
  needsToken(repo: string): boolean;
  /** Weights placed at a file:// source (local-weights.ts): never fetched from the Hub, copied from any node holding them. */
  isLocal?: (repo: string) => boolean;
}

export interface TransferInput {
  manifests: readonly WeightsManifest[];
  nodes: readonly TransferNode[];
  wants: readonly WeightsWant[];
  hub: HubAccess;
  /** ms since the epoch: only grants' expiry reads it. */
  now: number;
  options?: TransferOptions;
}

/**
 * One node's weights of one revision, for views:
 * - present: every file verified;
 * - fetching: files are being fetched (running, or ordered in this plan);
 * - waiting: wanted, nothing moving now: a copy in the fabric, a free slot, a free source;
 * - blocked: wanted and held back until something changes (disk, the node, the file list), see reason;
 * - partial: some files, not wanted.
 */
export interface WeightsStatus {
  node: string;
  repo: string;
  revision: string;
  state: "present" | "fetching" | "waiting" | "blocked" | "partial";
  files_total: number;
  files_present: number;
  bytes_total: number;
  bytes_present: number;
  /** The files being fetched: bytes done of their size, their rate summed, their sources ("hub" or a node). */
  fetching: { files: number; bytes_done: number; bytes_total: number; rate: number; from: string[] } | null;
  /** Seconds to the last byte at the present rate; null when nothing moves. */
  estimate_seconds: number | null;
  reason: string | null;
}

/** What one fabric moves in this plan (null: the nodes in no fabric, each a fabric of its own). */
export interface FabricTransfers {
  fabric: string | null;
  hub_files: number;
  hub_bytes: number;
  peer_files: number;
  peer_bytes: number;
  /** Files wanted there that nothing moves now. */
  waiting_files: number;
}

export interface TransferPlan {
  /** Every node by name → the orders it is to run now, by repo, revision, path (empty: none). */
  orders: Map<string, FetchOrder[]>;
  /** Per node and revision it wants, holds or fetches; by repo, revision, node. */
  status: WeightsStatus[];
  fabrics: FabricTransfers[];
}

// ---- shared helpers ---------------------------------------------------------------------------

const byString = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
const revKey = (repo: string, revision: string) => `${repo}@${revision}`;
/** A fabric key no fabric name can be: the fabric of a node in none. */
const ownFabric = (name: string) => `\u0000${name}`;
const isOwn = (fabric: string) => fabric.startsWith("\u0000");

/**
 * When grants of this plan end: at least ttl and at most 2·ttl from now, and the same for every
 * plan within one ttl window, so orders given again while a transfer runs are identical. An
 * agent still tells orders apart by file and source: at a window's turn only the grant changes.
 */
export function grantExpiry(now: number, ttlMs: number): number {
  return (Math.floor(now / ttlMs) + 2) * ttlMs;
}

/** The node's fabrics as keys, deduplicated and sorted; a node in none has one of its own. */
function fabricKeys(n: TransferNode): string[] {
  return n.fabrics.length > 0 ? [...new Set(n.fabrics)].sort(byString) : [ownFabric(n.name)];
}

/** repo@revision → verified paths. */
function heldIndex(n: TransferNode): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const h of n.held) {
    const k = revKey(h.repo, h.revision);
    const s = out.get(k);
    if (s) for (const p of h.files) s.add(p);
    else out.set(k, new Set(h.files));
  }
  return out;
}

/** repo@revision → path → its running transfer (the first reported, if twice). */
function flyingIndex(n: TransferNode): Map<string, Map<string, TransferReport>> {
  const out = new Map<string, Map<string, TransferReport>>();
  for (const t of n.transfers) {
    const k = revKey(t.repo, t.revision);
    let m = out.get(k);
    if (!m) out.set(k, (m = new Map()));
    if (!m.has(t.path)) m.set(t.path, t);
  }
  return out;
}

interface Room {
  /** Bytes the disk can still take: free, plus what can be removed, less what running transfers still need. */
  free: number;
  /** Of it, what removing unused fetched weights would give. */
  reclaim: number;
  /** What --models-max-bytes leaves (Infinity without a bound). */
  limitLeft: number;
}

/** The node's room, counting as removable only fetched weights no replica uses and `keep` does not name. */
function roomOf(n: TransferNode, keep: ReadonlySet<string>): Room | undefined {
  const d = n.disk;
  if (d === undefined) return undefined;
  let flying = 0;
  for (const t of n.transfers) flying += Math.max(0, t.size - t.done);
  let reclaim = 0;
  if (n.inUse !== undefined) {
    for (const h of n.held) {
      const k = revKey(h.repo, h.revision);
      if (h.fetched && !n.inUse.has(k) && !keep.has(k)) reclaim += h.bytes;
    }
  }
  const limitLeft = d.max_bytes === null ? Number.POSITIVE_INFINITY : d.max_bytes - Math.max(0, d.kept_bytes - reclaim) - flying;
  return { free: d.free_bytes + reclaim - flying, reclaim, limitLeft };
}

/** Bytes of the manifest's files the node neither holds nor is fetching. */
function bytesToFetch(held: ReadonlySet<string> | undefined, flying: ReadonlyMap<string, unknown> | undefined, m: WeightsManifest): number {
  let n = 0;
  for (const f of m.files) if (!held?.has(f.path) && !flying?.has(f.path)) n += f.size;
  return n;
}

/** Why `need` more bytes do not fit in `room`, or undefined when they do. */
function noRoomReason(need: number, room: Room | undefined): string | undefined {
  if (room === undefined || need === 0) return undefined;
  if (need > room.free) {
    const of = room.reclaim > 0 ? ` (${bytes(room.reclaim)} of it by removing weights no replica uses)` : "";
    return `disk: needs ${bytes(need)}, ${bytes(Math.max(0, room.free))} free${of}`;
  }
  if (need > room.limitLeft) return `disk: needs ${bytes(need)}, --models-max-bytes leaves room for ${bytes(Math.max(0, room.limitLeft))}`;
  return undefined;
}

export type WeightsFit = { fits: true; needBytes: number } | { fits: false; needBytes: number; reason: string };

/**
 * Whether the rest of a revision (the files the node neither holds nor is fetching) fits on
 * the node's disk, after what its running transfers still need; for placement, which passes
 * over a node that cannot hold the weights with this reason. Unknown disk fits.
 */
export function weightsFit(node: TransferNode, manifest: WeightsManifest): WeightsFit {
  const k = revKey(manifest.repo, manifest.revision);
  const needBytes = bytesToFetch(heldIndex(node).get(k), flyingIndex(node).get(k), manifest);
  const reason = noRoomReason(needBytes, roomOf(node, new Set([k])));
  return reason === undefined ? { fits: true, needBytes } : { fits: false, needBytes, reason };
}

// ---- the plan ---------------------------------------------------------------------------------

interface NodeView {
  node: TransferNode;
  name: string;
  fabrics: string[];
  held: Map<string, Set<string>>;
  flying: Map<string, Map<string, TransferReport>>;
  usable: boolean;
  canServe: boolean;
  /** Transfers it runs in this plan (kept and new). */
  fetches: number;
  /** Transfers it serves in this plan. */
  serves: number;
  orders: FetchOrder[];
  /** Peers sharing a fabric, by name; computed once. */
  peers?: NodeView[];
}

interface Ctx {
  views: Map<string, NodeView>;
  byFabric: Map<string, NodeView[]>;
  manifests: Map<string, WeightsManifest>;
  /** repo@revision → names of nodes wanting it. */
  wants: Map<string, Set<string>>;
  hub: HubAccess;
  expiresAt: number;
  max: { transfers: number; serves: number };
  /** repo@revision\0path → fabric keys where a node is getting the file (running or ordered). */
  coming: Map<string, Set<string>>;
  /** node\0repo@revision\0path of running transfers whose order is given again. */
  kept: Set<string>;
  /** node\0repo@revision\0path → the source whose transfer reported an error: another is chosen if there is one. */
  avoid: Map<string, { from: string; checksum: boolean }>;
  /** repo@revision\0path → the nodes getting the file in this plan (kept or ordered): they serve what they have. */
  receiving: Map<string, Set<NodeView>>;
  /** node\0repo@revision → why it is blocked or waiting (the first file's reason). */
  blocked: Map<string, string>;
  waiting: Map<string, string>;
  fabrics: Map<string, FabricTransfers>;
}

const fileKey = (k: string, path: string) => `${k}\u0000${path}`;
const nodeRev = (node: string, k: string) => `${node}\u0000${k}`;

function holds(v: NodeView, k: string, path: string): boolean {
  return v.held.get(k)?.has(path) ?? false;
}

function peersOf(ctx: Ctx, v: NodeView): NodeView[] {
  if (v.peers) return v.peers;
  const seen = new Set<NodeView>();
  for (const f of v.fabrics) for (const p of ctx.byFabric.get(f) ?? []) if (p !== v) seen.add(p);
  return (v.peers = [...seen].sort((a, b) => byString(a.name, b.name)));
}

function sharedFabric(a: NodeView, b: NodeView): string | undefined {
  return a.fabrics.find((f) => b.fabrics.includes(f));
}

function tally(ctx: Ctx, fabric: string | undefined): FabricTransfers {
  const label = fabric === undefined || isOwn(fabric) ? null : fabric;
  const key = label ?? "";
  let t = ctx.fabrics.get(key);
  if (!t) ctx.fabrics.set(key, (t = { fabric: label, hub_files: 0, hub_bytes: 0, peer_files: 0, peer_bytes: 0, waiting_files: 0 }));
  return t;
}

function markComing(ctx: Ctx, k: string, path: string, v: NodeView): void {
  const fk = fileKey(k, path);
  let s = ctx.coming.get(fk);
  if (!s) ctx.coming.set(fk, (s = new Set()));
  for (const f of v.fabrics) s.add(f);
  let r = ctx.receiving.get(fk);
  if (!r) ctx.receiving.set(fk, (r = new Set()));
  r.add(v);
}

/** Whether v is receiving the file and can serve its peers what it has of it so far. */
function receives(ctx: Ctx, v: NodeView, k: string, path: string): boolean {
  return v.node.wholeOnly !== true && (ctx.receiving.get(fileKey(k, path))?.has(v) ?? false);
}

function orderFromHub(ctx: Ctx, v: NodeView, m: WeightsManifest, f: WeightFile): void {
  const url = `${ctx.hub.endpoint.replace(/\/+$/, "")}/${m.repo}/resolve/${m.revision}/${encodePath(f.path)}`;
  const token = ctx.hub.token !== undefined && ctx.hub.needsToken(m.repo) ? { token: ctx.hub.token } : {};
  v.orders.push({ repo: m.repo, revision: m.revision, file: f, from: { kind: "hub", url, ...token } });
  v.fetches++;
  markComing(ctx, revKey(m.repo, m.revision), f.path, v);
  const t = tally(ctx, v.fabrics[0]);
  t.hub_files++;
  t.hub_bytes += f.size;
}

function orderFromPeer(ctx: Ctx, v: NodeView, m: WeightsManifest, f: WeightFile, src: NodeView): void {
  const base = src.node.peerUrl!.replace(/\/+$/, "");
  const url = `${base}/weights/v1/${m.repo}/${m.revision}/${encodePath(f.path)}?expires=${ctx.expiresAt}`;
  const grant = transferGrant(src.node.credentialSha256, m.repo, m.revision, f.path, ctx.expiresAt);
  v.orders.push({ repo: m.repo, revision: m.revision, file: f, from: { kind: "peer", node: src.name, url, grant, ...(src.node.peerCert !== undefined ? { cert: src.node.peerCert } : {}) } });
  v.fetches++;
  src.serves++;
  markComing(ctx, revKey(m.repo, m.revision), f.path, v);
  const t = tally(ctx, sharedFabric(v, src));
  t.peer_files++;
  t.peer_bytes += f.size;
}

function wait(ctx: Ctx, v: NodeView, k: string, reason: string): void {
  const nk = nodeRev(v.name, k);
  if (!ctx.waiting.has(nk)) ctx.waiting.set(nk, reason);
  tally(ctx, v.fabrics[0]).waiting_files++;
}

function buildCtx(input: TransferInput): Ctx {
  const given = Object.fromEntries(Object.entries(input.options ?? {}).filter(([, v]) => v !== undefined));
  const o = { ...TRANSFER_DEFAULTS, ...given };
  for (const [name, v] of Object.entries(o)) if (!(Number.isInteger(v) && v >= 1)) throw new Error(`transfer option ${name} must be a whole number of at least 1, not ${v}`);
  const views = new Map<string, NodeView>();
  const byFabric = new Map<string, NodeView[]>();
  for (const n of [...input.nodes].sort((a, b) => byString(a.name, b.name))) {
    if (views.has(n.name)) continue;
    const usable = n.unusable === undefined;
    const v: NodeView = { node: n, name: n.name, fabrics: fabricKeys(n), held: heldIndex(n), flying: flyingIndex(n), usable, canServe: usable && n.peerUrl !== undefined, fetches: 0, serves: 0, orders: [] };
    views.set(n.name, v);
    for (const f of v.fabrics) {
      const list = byFabric.get(f);
      if (list) list.push(v);
      else byFabric.set(f, [v]);
    }
  }
  const manifests = new Map(input.manifests.map((m) => [revKey(m.repo, m.revision), m]));
  const wants = new Map<string, Set<string>>();
  for (const w of input.wants) {
    if (!views.has(w.node)) continue;
    const k = revKey(w.repo, w.revision);
    const s = wants.get(k);
    if (s) s.add(w.node);
    else wants.set(k, new Set([w.node]));
  }
  return {
    views,
    byFabric,
    manifests,
    wants,
    hub: input.hub,
    expiresAt: grantExpiry(input.now, o.grantTtlMs),
    max: { transfers: o.maxTransfersPerNode, serves: o.maxServesPerNode },
    coming: new Map(),
    kept: new Set(),
    avoid: new Map(),
    receiving: new Map(),
    blocked: new Map(),
    waiting: new Map(),
    fabrics: new Map(),
  };
}

/**
 * Running transfers first, each given its order again as it runs (same source), so the agent
 * goes on with it: while the file is still wanted and not yet held, and its source still can
 * serve it: it holds the file, or its own transfer of it is kept too. Chains are kept link by
 * link from their root (the Hub or a holder), so a link behind one that stopped, or a cycle,
 * is planned afresh. A transfer reporting an error is planned afresh, away from that source if
 * another can serve. Running transfers count against the bounds before anything new is ordered.
 */
function keepRunning(ctx: Ctx): void {
  const pending: { v: NodeView; t: TransferReport; m: WeightsManifest; f: WeightFile; kk: string }[] = [];
  const seen = new Set<string>();
  for (const v of ctx.views.values()) {
    if (!v.usable) continue;
    const running = [...v.node.transfers].sort((a, b) => byString(a.repo, b.repo) || byString(a.revision, b.revision) || byString(a.path, b.path));
    for (const t of running) {
      const k = revKey(t.repo, t.revision);
      const m = ctx.manifests.get(k);
      const kk = `${v.name}\u0000${fileKey(k, t.path)}`;
      if (m === undefined || seen.has(kk) || !ctx.wants.get(k)?.has(v.name) || holds(v, k, t.path) || ctx.blocked.has(nodeRev(v.name, k))) continue;
      seen.add(kk);
      const f = m.files.find((x) => x.path === t.path);
      if (f === undefined) continue;
      if (t.error !== null) ctx.avoid.set(kk, { from: t.from, checksum: /checksum/i.test(t.error) });
      else pending.push({ v, t, m, f, kk });
    }
  }
  // Two Hub downloads of one file in a fabric (orders crossed in flight): the one furthest on is kept.
  pending.sort((a, b) => b.t.done - a.t.done);
  const fromHub = new Set<string>();
  for (let more = true; more; ) {
    more = false;
    for (const { v, t, m, f, kk } of pending) {
      if (ctx.kept.has(kk)) continue;
      const k = revKey(t.repo, t.revision);
      if (t.from === "hub") {
        if (v.fabrics.some((x) => fromHub.has(fileKey(fileKey(k, t.path), x)))) continue;
        for (const x of v.fabrics) fromHub.add(fileKey(fileKey(k, t.path), x));
        orderFromHub(ctx, v, m, f);
      } else {
        const src = ctx.views.get(t.from);
        if (src === undefined || !src.canServe || sharedFabric(v, src) === undefined) continue;
        if (!holds(src, k, t.path) && !receives(ctx, src, k, t.path)) continue;
        orderFromPeer(ctx, v, m, f, src);
      }
      ctx.kept.add(kk);
      more = true;
    }
  }
}

/**
 * Which wanted revisions each node is held back from: an unusable node, an unknown file list,
 * or a disk that cannot take the rest (the node's revisions in name order, each taking its share
 * of the room before the next is checked).
 */
function holdBack(ctx: Ctx): void {
  const byNode = new Map<string, string[]>();
  for (const [k, names] of ctx.wants) for (const n of names) (byNode.get(n) ?? byNode.set(n, []).get(n)!).push(k);
  for (const [name, keys] of byNode) {
    const v = ctx.views.get(name)!;
    keys.sort(byString);
    const room = roomOf(v.node, new Set(keys));
    for (const k of keys) {
      const m = ctx.manifests.get(k);
      let reason: string | undefined;
      if (!v.usable) reason = `node ${name} takes no transfers now: ${v.node.unusable}`;
      else if (m === undefined) reason = `the file list of ${k} is not known yet`;
      else {
        const need = bytesToFetch(v.held.get(k), v.flying.get(k), m);
        reason = noRoomReason(need, room);
        if (reason === undefined && room !== undefined) {
          room.free -= need;
          room.limitLeft -= need;
        }
      }
      if (reason !== undefined) ctx.blocked.set(nodeRev(name, k), reason);
    }
  }
}

/** The node with the fewest serves in this plan (then by name), below the bound, other than `avoid`. */
function leastServing(ctx: Ctx, nodes: NodeView[], avoid: string | undefined): NodeView | undefined {
  let best: NodeView | undefined;
  for (const h of nodes) if (h.serves < ctx.max.serves && h.name !== avoid && (best === undefined || h.serves < best.serves)) best = h;
  return best;
}

/**
 * A holder first, else a node receiving the file; `avoid` (whose transfer failed) only when no
 * other can serve now.
 */
function pickSource(ctx: Ctx, holders: NodeView[], receivers: NodeView[], avoid: string | undefined): NodeView | undefined {
  const again = [...holders, ...receivers].find((h) => h.name === avoid && h.serves < ctx.max.serves);
  return leastServing(ctx, holders, avoid) ?? leastServing(ctx, receivers, avoid) ?? again;
}

function fabricName(v: NodeView): string {
  const f = v.fabrics[0]!;
  return isOwn(f) ? `node ${v.name}` : `fabric ${v.fabrics.filter((x) => !isOwn(x)).join(", ")}`;
}

/** New orders for one file of one revision to the nodes that want it and neither hold nor fetch it. */
function planFile(ctx: Ctx, m: WeightsManifest, f: WeightFile, needers: NodeView[]): void {
  const k = revKey(m.repo, m.revision);
  const rest: NodeView[] = [];
  for (const v of needers) {
    const peers = peersOf(ctx, v).filter((p) => p.canServe);
    let holders = peers.filter((p) => holds(p, k, f.path));
    let receivers = peers.filter((p) => !holds(p, k, f.path) && receives(ctx, p, k, f.path));
    const avoid = ctx.avoid.get(`${v.name}\u0000${fileKey(k, f.path)}`);
    // A peer's copy failed its checksum: never that peer again, nor a copy still coming (it may
    // come from it); another holder, else the Hub, though the fabric has the file.
    const badPeer = avoid?.checksum === true && avoid.from !== "hub";
    if (badPeer) {
      holders = holders.filter((p) => p.name !== avoid.from);
      receivers = [];
    }
    if (holders.length + receivers.length === 0 && !badPeer) {
      rest.push(v);
      continue;
    }
    if (v.fetches >= ctx.max.transfers) {
      wait(ctx, v, k, `at most ${ctx.max.transfers} transfers at a time on ${v.name}`);
      continue;
    }
    if (holders.length + receivers.length === 0) {
      orderFromHub(ctx, v, m, f);
      continue;
    }
    const src = pickSource(ctx, holders, receivers, avoid?.from);
    if (src === undefined) {
      const all = [...holders, ...receivers];
      const who = all.length === 1 ? `${all[0]!.name}, which ${holders.length > 0 ? "holds" : "is getting"} it in ${fabricName(v)}, serves` : `the ${all.length} nodes holding or getting it in ${fabricName(v)} serve`;
      wait(ctx, v, k, `waiting for a source of ${f.path}: ${who} the most transfers allowed (${ctx.max.serves})`);
    } else orderFromPeer(ctx, v, m, f, src);
  }
  if (ctx.hub.isLocal?.(m.repo) === true) {
    planFromAnyHolder(ctx, m, f, rest);
    return;
  }
  planFromHub(ctx, m, f, rest);
}

/**
 * The Hub, once per fabric, for nodes no peer can serve the file: a node whose fabric is already
 * getting it waits for it; of the others one per fabric fetches it from the Hub and the rest of
 * that fabric copy it from that node as it arrives (or wait for it, when it serves no more).
 */
function planFromHub(ctx: Ctx, m: WeightsManifest, f: WeightFile, rest: NodeView[]): void {
  const k = revKey(m.repo, m.revision);
  const coming = ctx.coming.get(fileKey(k, f.path));
  const arriving = (v: NodeView) => `waiting for ${f.path} to arrive in ${fabricName(v)}, to copy it from there`;
  let candidates: NodeView[] = [];
  for (const v of rest) {
    if (coming !== undefined && v.fabrics.some((x) => coming.has(x))) wait(ctx, v, k, arriving(v));
    else candidates.push(v);
  }
  while (candidates.length > 0) {
    let pick: NodeView | undefined;
    // Fewest fetches, then fewest serves: the fabric's Hub downloads spread over its nodes, each serving its own.
    for (const v of candidates) if (v.fetches < ctx.max.transfers && (pick === undefined || v.fetches < pick.fetches || (v.fetches === pick.fetches && v.serves < pick.serves))) pick = v;
    if (pick === undefined) {
      for (const v of candidates) wait(ctx, v, k, `at most ${ctx.max.transfers} transfers at a time on ${v.name}`);
      return;
    }
    orderFromHub(ctx, pick, m, f);
    const chosen = pick;
    const next: NodeView[] = [];
    for (const v of candidates) {
      if (v === chosen) continue;
      if (sharedFabric(v, chosen) === undefined) next.push(v);
      else if (chosen.canServe && chosen.serves < ctx.max.serves && v.fetches < ctx.max.transfers) orderFromPeer(ctx, v, m, f, chosen);
      else wait(ctx, v, k, arriving(v));
    }
    candidates = next;
  }
}

/**
 * A file placed at a file:// source, to nodes no peer of whose fabric holds it: copied from any
 * node holding it, whatever its fabric (there is no Hub to fetch it from).
 */
function planFromAnyHolder(ctx: Ctx, m: WeightsManifest, f: WeightFile, needers: NodeView[]): void {
  const k = revKey(m.repo, m.revision);
  for (const v of needers) {
    const holders = [...ctx.views.values()].filter((p) => p !== v && p.canServe && holds(p, k, f.path)).sort((a, b) => byString(a.name, b.name));
    if (holders.length === 0) {
      const coming = ctx.coming.get(fileKey(k, f.path));
      wait(ctx, v, k, coming !== undefined ? `waiting for ${f.path} to arrive on a node, to copy it from there` : `no node that serves its peers holds ${f.path} (weights placed by hand are never fetched from the Hub)`);
      continue;
    }
    if (v.fetches >= ctx.max.transfers) {
      wait(ctx, v, k, `at most ${ctx.max.transfers} transfers at a time on ${v.name}`);
      continue;
    }
    // A holder whose copy failed its checksum here is not asked again while another holds it.
    const avoid = ctx.avoid.get(`${v.name}\u0000${fileKey(k, f.path)}`);
    const others = avoid?.checksum === true ? holders.filter((h) => h.name !== avoid.from) : holders;
    const src = pickSource(ctx, others.length > 0 ? others : holders, [], avoid?.from);
    if (src === undefined) wait(ctx, v, k, `waiting for a source of ${f.path}: the nodes holding it serve the most transfers allowed (${ctx.max.serves})`);
    else orderFromPeer(ctx, v, m, f, src);
  }
}

/** Every wanted revision's files in name order, each to the nodes that still need it. */
function planNew(ctx: Ctx): void {
  for (const k of [...ctx.wants.keys()].sort(byString)) {
    const m = ctx.manifests.get(k);
    if (m === undefined) continue;
    const wanting = [...ctx.wants.get(k)!]
      .sort(byString)
      .map((n) => ctx.views.get(n)!)
      .filter((v) => v.usable && !ctx.blocked.has(nodeRev(v.name, k)));
    if (wanting.length === 0) continue;
    const files = [...m.files].sort((a, b) => byString(a.path, b.path));
    for (const f of files) {
      const needers = wanting.filter((v) => !holds(v, k, f.path) && !ctx.kept.has(`${v.name}\u0000${fileKey(k, f.path)}`));
      if (needers.length > 0) planFile(ctx, m, f, needers);
    }
  }
}

function statusOf(ctx: Ctx, v: NodeView, k: string): WeightsStatus {
  const m = ctx.manifests.get(k);
  const [repo, revision] = [k.slice(0, k.lastIndexOf("@")), k.slice(k.lastIndexOf("@") + 1)];
  const held = v.held.get(k);
  let filesTotal = 0;
  let bytesTotal = 0;
  let filesPresent = 0;
  let bytesPresent = 0;
  if (m !== undefined) {
    for (const f of m.files) {
      filesTotal++;
      bytesTotal += f.size;
      if (held?.has(f.path)) {
        filesPresent++;
        bytesPresent += f.size;
      }
    }
  } else {
    filesPresent = held?.size ?? 0;
    bytesPresent = v.node.held.filter((h) => revKey(h.repo, h.revision) === k).reduce((n, h) => n + h.bytes, 0);
  }
  const mine = v.orders.filter((o) => o.repo === repo && o.revision === revision);
  let fetching: WeightsStatus["fetching"] = null;
  if (mine.length > 0) {
    const from = new Set<string>();
    let done = 0;
    let size = 0;
    let rate = 0;
    for (const o of mine) {
      from.add(o.from.kind === "hub" ? "hub" : o.from.node);
      size += o.file.size;
      const t = v.flying.get(k)?.get(o.file.path);
      if (t !== undefined && ctx.kept.has(`${v.name}\u0000${fileKey(k, o.file.path)}`)) {
        done += Math.min(t.done, o.file.size);
        rate += t.rate;
      }
    }
    fetching = { files: mine.length, bytes_done: done, bytes_total: size, rate, from: [...from].sort(byString) };
  }
  const wanted = ctx.wants.get(k)?.has(v.name) ?? false;
  const complete = m !== undefined && filesPresent === filesTotal;
  const blocked = ctx.blocked.get(nodeRev(v.name, k));
  const state: WeightsStatus["state"] = complete ? "present" : fetching ? "fetching" : !wanted ? "partial" : blocked !== undefined ? "blocked" : "waiting";
  const reason = complete ? null : (blocked ?? (state === "waiting" || state === "fetching" ? (ctx.waiting.get(nodeRev(v.name, k)) ?? null) : null));
  const left = bytesTotal - bytesPresent - (fetching?.bytes_done ?? 0);
  const estimate = fetching !== null && fetching.rate > 0 ? Math.ceil(Math.max(0, left) / fetching.rate) : null;
  return { node: v.name, repo, revision, state, files_total: filesTotal, files_present: filesPresent, bytes_total: bytesTotal, bytes_present: bytesPresent, fetching, estimate_seconds: estimate, reason };
}

function statuses(ctx: Ctx): WeightsStatus[] {
  const out: WeightsStatus[] = [];
  for (const v of ctx.views.values()) {
    const keys = new Set<string>([...v.held.keys(), ...v.flying.keys()]);
    for (const [k, names] of ctx.wants) if (names.has(v.name)) keys.add(k);
    for (const k of keys) out.push(statusOf(ctx, v, k));
  }
  return out.sort((a, b) => byString(a.repo, b.repo) || byString(a.revision, b.revision) || byString(a.node, b.node));
}

/**
 * The plan for now: per node the fetch orders it is to run (the running ones again, unchanged,
 * and new ones within the bounds), per node and revision its status, per fabric what moves.
 * Rules: a file a node holds verified is never fetched again; a fabric gets a file from the Hub
 * through one node at a time, and only when no node of it holds the file (or when a peer's copy
 * failed its checksum and no other node holds it); the others copy from a holder of their
 * fabric, the holder with the fewest serves first, else from a node of it receiving the file
 * (whose own transfer is in this plan: copies form a fan-out or a chain behind the Hub's); a node
 * in no fabric is a fabric of its own; a node whose disk cannot take the rest of a revision gets
 * no orders for it; an unusable node neither fetches nor serves, nor does a node without a
 * listener serve.
 */
export function planTransfers(input: TransferInput): TransferPlan {
  const ctx = buildCtx(input);
  holdBack(ctx);
  keepRunning(ctx);
  planNew(ctx);
  const orders = new Map<string, FetchOrder[]>();
  for (const v of ctx.views.values()) {
    orders.set(
      v.name,
      v.orders.sort((a, b) => byString(a.repo, b.repo) || byString(a.revision, b.revision) || byString(a.file.path, b.file.path)),
    );
  }
  const fabrics = [...ctx.fabrics.values()].sort((a, b) => (a.fabric === null ? 1 : b.fabric === null ? -1 : byString(a.fabric, b.fabric)));
  return { orders, status: statuses(ctx), fabrics };
}

// ---- placement's preference -------------------------------------------------------------------

/**
 * How good a node is for a revision's weights: 2 holds every file; 1 needs nothing from the Hub
 * (nodes of its fabric hold, or are fetching, each file it lacks: a copy there is fast); 0 must
 * fetch from the Hub. `cost` says it for `explain`.
 */
export interface WeightsPreference {
  rank: 0 | 1 | 2;
  cost: string;
  /** Bytes it lacks: copied from holders of its fabric, copied from a node of its fabric as they arrive there, from the Hub. */
  copyBytes: number;
  laterBytes: number;
  hubBytes: number;
}

/** Per node by name, its preference for the revision's weights, from what every node holds and fetches. */
export function placementPreference(nodes: readonly TransferNode[], manifest: WeightsManifest, local = false): Map<string, WeightsPreference> {
  const k = revKey(manifest.repo, manifest.revision);
  const ctx = buildCtx({ manifests: [manifest], nodes, wants: [], hub: { endpoint: "", needsToken: () => false }, now: 0 });
  const out = new Map<string, WeightsPreference>();
  for (const v of ctx.views.values()) {
    const peers = peersOf(ctx, v);
    const servers = peers.filter((p) => p.canServe);
    const perHolder = new Map<NodeView, number>();
    let copyBytes = 0;
    let laterBytes = 0;
    let hubBytes = 0;
    let laterFrom: NodeView | undefined;
    let farFrom: NodeView | undefined;
    for (const f of manifest.files) {
      if (holds(v, k, f.path)) continue;
      const hs = servers.filter((p) => holds(p, k, f.path));
      if (hs.length > 0) {
        copyBytes += f.size;
        for (const h of hs) perHolder.set(h, (perHolder.get(h) ?? 0) + f.size);
        continue;
      }
      const getter = servers.find((p) => p.flying.get(k)?.has(f.path));
      if (getter !== undefined) {
        laterBytes += f.size;
        laterFrom ??= getter;
      } else {
        hubBytes += f.size;
        if (local) farFrom ??= [...ctx.views.values()].find((p) => p !== v && p.canServe && holds(p, k, f.path));
      }
    }
    const parts: string[] = [];
    // Weights placed by hand have no Hub: what no peer of the fabric holds comes from a node of another.
    if (hubBytes > 0 && local) parts.push(farFrom !== undefined ? `copy ${bytes(hubBytes)} from ${farFrom.name}, of another fabric` : `copy ${bytes(hubBytes)} from a node of another fabric`);
    else if (hubBytes > 0) parts.push(`fetch ${bytes(hubBytes)} from the Hub`);
    if (copyBytes > 0) {
      const ranked = [...perHolder].sort((a, b) => b[1] - a[1] || byString(a[0].name, b[0].name));
      const top = ranked[0]![0];
      const more = ranked.length > 1 ? ` (or ${ranked.length - 1} more)` : "";
      parts.push(`copy ${bytes(copyBytes)} from ${top.name}${more} in fabric ${sharedFabric(v, top)}`);
    }
    // Copies are pipelined: a peer serves what it has of a file while it still receives the rest.
    if (laterFrom !== undefined) parts.push(`copy ${bytes(laterBytes)} from ${laterFrom.name} in fabric ${sharedFabric(v, laterFrom)} as it arrives there`);
    const rank = copyBytes + laterBytes + hubBytes === 0 ? 2 : hubBytes === 0 ? 1 : 0;
    out.set(v.name, { rank, cost: parts.length > 0 ? parts.join("; ") : "present", copyBytes, laterBytes, hubBytes });
  }
  return out;
}
