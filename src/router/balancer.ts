// The router's balancer: which replica serves the next request attempt. Priority tiers, then,
// within a tier, prefix affinity: a key (src/router/prefix-key.ts, one per conversation) goes
// back to the endpoint that served it last while that endpoint is usable and under a loose load
// bound (stickyLoadFactor, 2 × its share of the tier's in flight); otherwise, and for a key not
// seen before, consistent hashing with bounded loads (loadFactor, 1.25) places it, and the table
// remembers the new endpoint, whose cache now holds the conversation's latest turn. Plain CHWBL
// moved almost half the repeat turns of test/bench/affinity.ts off the engine of their previous
// turn (at ~4 in flight per engine its bound of 5 is often reached) and sent the turn after a
// move back to the ring home, whose cache lacked the moved turn. Total load stays even because
// keys are placed by the tight bound and held only to the loose one (measured there too). It
// also keeps what the control plane reads back (last-used stamps, in-flight per model) and the
// engine metrics.

import { fnv1a, fnvStep, mix32 } from "../lib/hash";
import type { EndpointInfo, UsageSource } from "../protocol/routing";

/** How the balancer places requests; their defaults are the config schema's (ServeConfig's balance_* keys). */
export interface BalancerSettings {
  /** Bounded-load factor c: no endpoint takes more than ceil(c × its share of the load). */
  loadFactor: number;
  /**
   * The looser factor a key's remembered endpoint is held to: a key stays with the endpoint that
   * served it last (the one caching its freshest prefix) while that endpoint has fewer than
   * ceil(this × its share) in flight. At least loadFactor.
   */
  stickyLoadFactor: number;
  /** Slots of the key → endpoint table (a power of two ≥ 2; two-way set associative, fixed memory). */
  stickySlots: number;
  /** Virtual nodes per unit of weight on the hash ring (weight 2: twice as many). */
  vnodesPerWeight: number;
  /** Saturated at ≥ inflight requests in flight or ≥ queue waiting in the engine. */
  saturation: { inflight: number; queue: number };
  /** KV-cache usage (0..1) above which an endpoint is passed over while others are not. */
  kvHigh: number;
  /** Engine waiting count above which the same applies. */
  queueHigh: number;
}

export interface BalancerOptions extends BalancerSettings {
  /** Wall clock, ms (last-used stamps, cooldowns): the router's scheduler's now(). */
  now: () => number;
}

/** One per endpoint id. The balancer owns `inflight` and `lastUsed`; the metrics poller writes through setMetrics. */
export interface EndpointState {
  readonly id: string;
  readonly url: string;
  readonly info: EndpointInfo;
  inflight: number;
  /** ms of the last acquire; 0 = never. */
  lastUsed: number;
  cooldownUntil: number;
  /** Engine metrics, -1 unknown. */
  waiting: number;
  running: number;
  kvUsage: number;
}

export interface Lease {
  readonly endpoint: EndpointState;
  /** Un-counts the request; only the first call does anything. */
  release(): void;
}

// Ring steps taken before giving up on the ring order and scanning the tier's members. With
// c = 1.25 at most 80% of endpoints can be at their bound, so 64 steps fail by chance about
// once in 10^6; past that the tier is degenerate (mostly cooling, excluded or hot) and a linear
// scan is cheaper than walking every virtual node.
const WALK_LIMIT = 64;
// Ring entries are sorted packed as hash × 2^20 + member index, exact in a float64 (32+20 bits).
const MEMBER_BITS = 2 ** 20;
// Top bits of a key index a table of ring offsets, so the binary search covers one bucket
// instead of the whole ring. About one bucket per vnode (2^ceil(log2 size) of them): the search
// is then a step or two at 4 endpoints and at 400 alike, and the table no bigger than the ring.
const MIN_BUCKET_BITS = 4;
const MAX_BUCKET_BITS = 16;

const EMPTY_TIERS: readonly Tier[] = [];

/** Endpoints of one priority that serve one model name in one scope (a pool, or any pool). */
interface Tier {
  readonly priority: number;
  readonly members: readonly State[];
  readonly totalWeight: number;
  /** Sorted vnodes as pairs [hash, member index]: the pair a search ends on shares a cache line. */
  readonly ring: Uint32Array;
  /** bucket b → first ring index whose hash's top bits (32 − shift of them) are ≥ b. */
  readonly buckets: Uint32Array;
  readonly shift: number;
  // Kept incrementally on acquire/release/setMetrics so a pick never sums over members.
  inflight: number;
  hotCount: number;
  satCount: number;
}

interface ModelTiers {
  any: Tier[];
  pools: Map<string, Tier[]>;
}

class State implements EndpointState {
  // The fields a pick reads are declared first so they sit together in the object: at 400
  // endpoints the states no longer all fit in L1. hot and sat are cached verdicts so tiers can
  // count them; waiting and kvUsage are accessors so that a poller writing the fields directly
  // cannot leave the counts stale.
  sat = false;
  hot = false;
  cooldownUntil = 0;
  inflight = 0;
  /** vnodes / vnodesPerWeight: the share of a tier's load the bound allows this endpoint. */
  weight = 1;
  /** Every distinct tier this endpoint is in, for the counters; empty once removed. */
  tiers: readonly Tier[] = EMPTY_TIERS;
  lastUsed = 0;
  /** Set with lastUsed: an injected clock may read 0, which must still count as known. */
  acquired = false;
  readonly id: string;
  url: string;
  info: EndpointInfo;
  running = -1;
  vnodes: Uint32Array = new Uint32Array(0);
  private _waiting = -1;
  private _kvUsage = -1;

  constructor(
    info: EndpointInfo,
    private readonly cfg: Limits,
  ) {
    this.id = info.id;
    this.url = info.url;
    this.info = info;
  }

  get waiting(): number {
    return this._waiting;
  }
  set waiting(v: number) {
    this._waiting = v;
    this.refresh();
  }
  get kvUsage(): number {
    return this._kvUsage;
  }
  set kvUsage(v: number) {
    this._kvUsage = v;
    this.refresh();
  }

  /** Recomputes hot and saturated and moves the tiers' counts when either flips. */
  refresh(): void {
    const c = this.cfg;
    const hot = this._waiting > c.queueHigh || this._kvUsage > c.kvHigh;
    const sat = this.inflight >= c.satInflight || this._waiting >= c.satQueue;
    if (hot !== this.hot) {
      this.hot = hot;
      const d = hot ? 1 : -1;
      for (const t of this.tiers) t.hotCount += d;
    }
    if (sat !== this.sat) {
      this.sat = sat;
      const d = sat ? 1 : -1;
      for (const t of this.tiers) t.satCount += d;
    }
  }
}

interface Limits {
  readonly satInflight: number;
  readonly satQueue: number;
  readonly kvHigh: number;
  readonly queueHigh: number;
}

class LeaseImpl implements Lease {
  private open = true;
  constructor(
    readonly endpoint: State,
    private readonly owner: Balancer,
  ) {}
  release(): void {
    if (!this.open) return;
    this.open = false;
    this.owner.uncount(this.endpoint);
  }
}

export class Balancer implements UsageSource {
  private readonly now: () => number;
  private readonly loadFactor: number;
  private readonly stickyLoadFactor: number;
  private readonly vnodesPerWeight: number;
  // The sticky table: mixed key → the endpoint that served it last, two-way set associative with
  // the set picked by the mixed key's low bits (slots 2j and 2j+1), least recently written out.
  // Memory is fixed and a lookup is a few array reads. Slot key 0 is empty: mix32 is a
  // bijection with mix32(0) = 0, and key 0 (no key) is never stored. An endpoint removed from
  // the table may stay in a slot, but with no tiers, and a remembered endpoint is only used from
  // a tier it is in.
  private readonly stickyMask: number;
  private readonly stickyKeys: Uint32Array;
  private readonly stickyStates: (State | undefined)[];
  /** Per set: which of its two slots was written last. */
  private readonly stickyRecent: Uint8Array;
  private readonly limits: Limits;
  private states = new Map<string, State>();
  private list: readonly State[] = [];
  private models = new Map<string, ModelTiers>();
  /**
   * The tiers of the current table by signature: the next table reuses a tier whose members
   * and their weights are unchanged (the same State objects) instead of building its ring again.
   * A thousand models' rings cost the router thread ~18 ms per table otherwise, and the table is
   * re-sent whenever a replica becomes ready.
   */
  private tierMemo = new Map<string, Tier>();
  // Removed endpoints still serving requests: their models still have work in flight, and an
  // id that comes back before they finish (a list published without it for a tick) is the same
  // replica with the same requests on it.
  private readonly orphans = new Map<string, State>();
  // Scratch for pick(): one set of fields reused instead of a result object per call.
  private best: State | undefined;
  private bestLoad = 0;
  private firstHot: State | undefined;
  private bestHot: State | undefined;
  private bestHotLoad = 0;

  constructor(opts: BalancerOptions) {
    this.now = opts.now;
    this.loadFactor = opts.loadFactor;
    this.stickyLoadFactor = opts.stickyLoadFactor;
    const slots = opts.stickySlots;
    if (!(Number.isInteger(slots) && slots >= 2 && (slots & (slots - 1)) === 0 && slots <= 1 << 24)) throw new Error(`stickySlots must be a power of two from 2 to 2^24, got ${slots}`);
    this.stickyMask = slots - 2;
    this.stickyKeys = new Uint32Array(slots);
    this.stickyStates = new Array<State | undefined>(slots).fill(undefined);
    this.stickyRecent = new Uint8Array(slots >>> 1);
    this.vnodesPerWeight = opts.vnodesPerWeight;
    const sat = opts.saturation;
    this.limits = {
      satInflight: sat.inflight,
      satQueue: sat.queue,
      kvHigh: opts.kvHigh,
      queueHigh: opts.queueHigh,
    };
    if (!(this.loadFactor >= 1)) throw new Error(`loadFactor must be at least 1, got ${this.loadFactor}`);
    if (!(this.stickyLoadFactor >= this.loadFactor)) throw new Error(`stickyLoadFactor must be at least loadFactor (${this.loadFactor}), got ${this.stickyLoadFactor}`);
    if (!(this.vnodesPerWeight > 0)) throw new Error(`vnodesPerWeight must be positive, got ${this.vnodesPerWeight}`);
  }

  /**
   * Replaces the endpoint table. Ids that stay keep their state (in flight, last used, metrics,
   * cooldown), as does an id removed and back while requests on it were still in flight; all
   * rings are rebuilt here so acquire only reads them.
   */
  setEndpoints(list: EndpointInfo[]): void {
    const next = new Map<string, State>();
    const ordered: State[] = [];
    for (const info of list) {
      if (next.has(info.id)) continue; // a duplicate id would count one replica twice
      let s = this.states.get(info.id) ?? this.orphans.get(info.id);
      if (s === undefined) s = new State(info, this.limits);
      else {
        s.info = info;
        s.url = info.url;
      }
      const want = vnodeCount(info.weight, this.vnodesPerWeight);
      if (s.vnodes.length !== want) s.vnodes = vnodePositions(info.id, want);
      s.weight = want / this.vnodesPerWeight;
      next.set(info.id, s);
      ordered.push(s);
    }
    for (const [id, s] of this.states) {
      if (next.has(id)) continue;
      s.tiers = EMPTY_TIERS;
      if (s.inflight > 0) this.orphans.set(id, s);
    }
    for (const s of ordered) this.orphans.delete(s.id);

    // Group members per (name, scope, priority), keeping list order so equal memberships give
    // equal signatures: an alias, or the only pool, then shares the name's Tier and its ring.
    const groups = new Map<string, { any: Map<number, State[]>; pools: Map<string, Map<number, State[]>> }>();
    for (const s of ordered) {
      const { models, pool, priority } = s.info;
      for (let i = 0; i < models.length; i++) {
        const name = models[i]!;
        if (models.indexOf(name) !== i) continue;
        let g = groups.get(name);
        if (g === undefined) groups.set(name, (g = { any: new Map(), pools: new Map() }));
        push(g.any, priority, s);
        let p = g.pools.get(pool);
        if (p === undefined) g.pools.set(pool, (p = new Map()));
        push(p, priority, s);
      }
    }
    const memo = new Map<string, Tier>();
    const tiersOf = new Map<State, Set<Tier>>();
    const build = (byPriority: Map<number, State[]>): Tier[] => {
      const out: Tier[] = [];
      for (const priority of [...byPriority.keys()].sort((a, b) => a - b)) {
        const members = byPriority.get(priority)!;
        const sig = `${priority}\n${members.map((m) => `${m.id} ${m.vnodes.length}`).join("\n")}`;
        let t = memo.get(sig);
        if (t === undefined) {
          const prev = this.tierMemo.get(sig);
          t = prev !== undefined && sameStates(prev.members, members) ? prev : this.buildTier(priority, members);
          memo.set(sig, t);
          for (const m of members) {
            let set = tiersOf.get(m);
            if (set === undefined) tiersOf.set(m, (set = new Set()));
            set.add(t);
          }
        }
        out.push(t);
      }
      return out;
    };
    const models = new Map<string, ModelTiers>();
    for (const [name, g] of groups) {
      const pools = new Map<string, Tier[]>();
      for (const [pool, byPriority] of g.pools) pools.set(pool, build(byPriority));
      models.set(name, { any: build(g.any), pools });
    }
    for (const s of ordered) s.tiers = [...(tiersOf.get(s) ?? [])];

    this.states = next;
    this.list = ordered;
    this.models = models;
    this.tierMemo = memo;
  }

  private buildTier(priority: number, members: State[]): Tier {
    let total = 0;
    let size = 0;
    for (const m of members) {
      total += m.weight;
      size += m.vnodes.length;
    }
    if (members.length >= MEMBER_BITS) throw new Error(`too many endpoints in one tier: ${members.length}`);
    const packed = new Float64Array(size);
    let k = 0;
    for (let i = 0; i < members.length; i++) for (const h of members[i]!.vnodes) packed[k++] = h * MEMBER_BITS + i;
    packed.sort();
    const ring = new Uint32Array(2 * size);
    for (let j = 0; j < size; j++) {
      const p = packed[j]!;
      const m = p % MEMBER_BITS;
      ring[2 * j] = (p - m) / MEMBER_BITS;
      ring[2 * j + 1] = m;
    }
    const bits = Math.max(MIN_BUCKET_BITS, Math.min(MAX_BUCKET_BITS, Math.ceil(Math.log2(size))));
    const shift = 32 - bits;
    const nb = 1 << bits;
    const buckets = new Uint32Array(nb + 1);
    let j = 0;
    for (let b = 0; b <= nb; b++) {
      while (j < size && ring[2 * j]! >>> shift < b) j++;
      buckets[b] = j;
    }
    let inflight = 0;
    let hotCount = 0;
    let satCount = 0;
    for (const m of members) {
      inflight += m.inflight;
      if (m.hot) hotCount++;
      if (m.sat) satCount++;
    }
    return { priority, members, totalWeight: total, ring, buckets, shift, inflight, hotCount, satCount };
  }

  /**
   * Picks an endpoint for one request attempt, counts it in flight and stamps its last use, all
   * in this one synchronous step. undefined: nothing serves the model in this pool once the
   * excluded ids are left out. When every candidate is saturated or cooling down, one of them is
   * still returned (the least loaded, else the one whose cooldown ends first): a blip on the only
   * replica should slow requests down, not answer them as if the model were not running.
   */
  acquire(model: string, key: number, pool?: string, exclude?: ReadonlySet<string>): Lease | undefined {
    const entry = this.models.get(model);
    if (entry === undefined) return undefined;
    const tiers = pool === undefined ? entry.any : entry.pools.get(pool);
    if (tiers === undefined) return undefined;
    const now = this.now();
    const k = mix32(key);
    const ex = exclude !== undefined && exclude.size > 0 ? exclude : undefined;
    // The key's slot in its set if it has one, else the set's least recently written slot.
    const sk = this.stickyKeys;
    const base = k & this.stickyMask;
    let slot = -1;
    let remembered: State | undefined;
    if (key !== 0) {
      if (sk[base] === k) slot = base;
      else if (sk[base + 1] === k) slot = base + 1;
      if (slot >= 0) remembered = this.stickyStates[slot];
      else slot = base + 1 - this.stickyRecent[base >>> 1]!;
    }
    let s: State | undefined;
    for (let i = 0; i < tiers.length && s === undefined; i++) s = this.pick(tiers[i]!, k, remembered, ex, now);
    if (s === undefined) s = lastResort(tiers, ex, now);
    if (s === undefined) return undefined;
    if (slot >= 0) {
      sk[slot] = k;
      this.stickyStates[slot] = s;
      this.stickyRecent[base >>> 1] = slot - base;
    }
    return this.take(s, now);
  }

  /**
   * Acquires endpoint `id` itself, whatever its load or cooldown, when it serves the model in the
   * pool and is not excluded; else undefined. For a request only that replica can serve: one
   * continuing a response its engine keeps (the Responses API's previous_response_id).
   */
  acquireOn(id: string, model: string, pool?: string, exclude?: ReadonlySet<string>): Lease | undefined {
    const s = this.states.get(id);
    if (s === undefined || (exclude !== undefined && exclude.has(id))) return undefined;
    const entry = this.models.get(model);
    const tiers = entry === undefined ? undefined : pool === undefined ? entry.any : entry.pools.get(pool);
    if (tiers === undefined || !sharesTier(tiers, s.tiers)) return undefined;
    return this.take(s, this.now());
  }

  /** Counts a request on `s` and stamps its last use, in the same synchronous step as the pick. */
  private take(s: State, now: number): Lease {
    s.inflight++;
    s.lastUsed = now;
    s.acquired = true;
    const ts = s.tiers;
    for (let i = 0; i < ts.length; i++) ts[i]!.inflight++;
    if (!s.sat && s.inflight >= this.limits.satInflight) s.refresh();
    return new LeaseImpl(s, this);
  }

  /** @internal Lease.release's second half; exactly once per acquire. */
  uncount(s: State): void {
    s.inflight--;
    const ts = s.tiers;
    for (let i = 0; i < ts.length; i++) ts[i]!.inflight--;
    if (s.sat) s.refresh();
    if (s.inflight === 0 && ts === EMPTY_TIERS && this.orphans.get(s.id) === s) this.orphans.delete(s.id);
  }

  /**
   * One tier's pick: the key's remembered endpoint if it is a member and keeps the key (see
   * keeps); else bounded-load consistent hashing, the first endpoint clockwise from the key that
   * is usable and under its bound, not hot unless every usable one is. undefined when every
   * member is saturated, cooling down or excluded (the caller spills to the next tier).
   */
  private pick(t: Tier, key: number, remembered: State | undefined, ex: ReadonlySet<string> | undefined, now: number): State | undefined {
    const members = t.members;
    const n = members.length;
    if (t.satCount === n) return undefined;
    // When every member is hot, hotness ranks nothing; skip the two-class bookkeeping.
    const allHot = t.hotCount === n;
    if (remembered !== undefined && this.keeps(remembered, t, allHot, ex, now)) return remembered;
    const ring = t.ring;
    const len = ring.length >>> 1;
    // The paper's bound ceil(c·(T+1)/n), with each member's share w/W in place of 1/n so weights
    // hold under load too (as HAProxy does); identical when weights are equal.
    const perWeight = (this.loadFactor * (t.inflight + 1)) / t.totalWeight;

    const b = key >>> t.shift;
    let lo = t.buckets[b]!;
    let hi = t.buckets[b + 1]!;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ring[2 * mid]! < key) lo = mid + 1;
      else hi = mid;
    }
    let pos = lo === len ? 0 : lo;

    this.best = undefined;
    this.bestLoad = Infinity;
    this.firstHot = undefined;
    this.bestHot = undefined;
    this.bestHotLoad = Infinity;
    const steps = len < WALK_LIMIT ? len : WALK_LIMIT;
    for (let i = 0; i < steps; i++) {
      const m = ring[2 * pos + 1]!;
      if (++pos === len) pos = 0;
      const s = members[m]!;
      if (this.consider(s, perWeight, allHot, ex, now)) return s;
    }
    // Every vnode lies on the ring, so a walk over all of it has seen every member.
    if (steps < len) {
      for (let m = 0; m < n; m++) {
        const s = members[m]!;
        if (this.consider(s, perWeight, allHot, ex, now)) return s;
      }
    }
    return this.best ?? this.firstHot ?? this.bestHot;
  }

  /**
   * Whether a key's remembered endpoint serves it again from tier `t`: a member of `t` (never an
   * endpoint since removed), usable, not hot unless all are, and under the sticky bound.
   */
  private keeps(s: State, t: Tier, allHot: boolean, ex: ReadonlySet<string> | undefined, now: number): boolean {
    if (s.sat || s.cooldownUntil > now || (!allHot && s.hot) || (ex !== undefined && ex.has(s.id))) return false;
    const ts = s.tiers;
    let member = false;
    for (let i = 0; i < ts.length; i++) if (ts[i] === t) member = true;
    return member && s.inflight < ((this.stickyLoadFactor * (t.inflight + 1)) / t.totalWeight) * s.weight;
  }

  /** true: take `s` now. Otherwise records it among the fallbacks of the current pick. */
  private consider(s: State, perWeight: number, allHot: boolean, ex: ReadonlySet<string> | undefined, now: number): boolean {
    if (s.sat || s.cooldownUntil > now || (ex !== undefined && ex.has(s.id))) return false;
    // inflight + 1 ≤ ceil(x) ⇔ inflight < x for an integer inflight.
    const within = s.inflight < perWeight * s.weight;
    const load = s.inflight / s.weight;
    if (allHot || !s.hot) {
      if (within) return true;
      if (load < this.bestLoad) {
        this.bestLoad = load;
        this.best = s;
      }
    } else {
      if (within && this.firstHot === undefined) this.firstHot = s;
      if (load < this.bestHotLoad) {
        this.bestHotLoad = load;
        this.bestHot = s;
      }
    }
    return false;
  }

  /** Whether any endpoint at all serves the model (name or alias), in the pool if one is given. */
  has(model: string, pool?: string): boolean {
    const entry = this.models.get(model);
    if (entry === undefined) return false;
    return (pool === undefined ? entry.any : entry.pools.get(pool)) !== undefined;
  }

  /** Passes the endpoint over until now+ms; never shortens a cooldown already running. */
  cooldown(id: string, ms: number): void {
    const s = this.states.get(id);
    if (s === undefined) return;
    const until = this.now() + ms;
    if (until > s.cooldownUntil) s.cooldownUntil = until;
  }

  /** Engine metrics from the poller; fields left out keep their value, -1 means unknown. */
  setMetrics(id: string, m: { running?: number; waiting?: number; kvUsage?: number }): void {
    const s = this.states.get(id);
    if (s === undefined) return;
    if (m.running !== undefined) s.running = m.running;
    if (m.waiting !== undefined) s.waiting = m.waiting;
    if (m.kvUsage !== undefined) s.kvUsage = m.kvUsage;
  }

  /** The current table, in setEndpoints order. Replaced, never mutated, by setEndpoints. */
  endpoints(): readonly EndpointState[] {
    return this.list;
  }

  /** id → ms of the last acquire. An endpoint never acquired since this router started is absent: unknown, not idle. */
  lastUsed(): Map<string, number> {
    const out = new Map<string, number>();
    for (const s of this.list) if (s.acquired) out.set(s.id, s.lastUsed);
    return out;
  }

  /** Model name (first of info.models) → requests in flight, including on endpoints removed mid-request. */
  inflightByModel(): Map<string, number> {
    const out = new Map<string, number>();
    const add = (s: State) => {
      const name = s.info.models[0];
      if (name !== undefined) out.set(name, (out.get(name) ?? 0) + s.inflight);
    };
    for (const s of this.list) add(s);
    for (const s of this.orphans.values()) add(s);
    return out;
  }

  /** Replica id → requests in flight, only those with any, including endpoints removed mid-request (a replica draining). */
  inflightByReplica(): Map<string, number> {
    const out = new Map<string, number>();
    for (const s of this.list) if (s.inflight > 0) out.set(s.id, s.inflight);
    for (const s of this.orphans.values()) if (s.inflight > 0) out.set(s.id, s.inflight);
    return out;
  }
}

/** The same State objects in the same order (a State replaced for an id is another member). */
function sameStates(a: readonly State[], b: readonly State[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * Every candidate saturated or cooling (or excluded): the best tier that has anyone not cooling
 * gives its least loaded; if all are cooling, the one that recovers first.
 */
function lastResort(tiers: readonly Tier[], ex: ReadonlySet<string> | undefined, now: number): State | undefined {
  let soonest: State | undefined;
  for (const t of tiers) {
    let best: State | undefined;
    let bestLoad = Infinity;
    for (const s of t.members) {
      if (ex !== undefined && ex.has(s.id)) continue;
      if (s.cooldownUntil > now) {
        if (soonest === undefined || s.cooldownUntil < soonest.cooldownUntil) soonest = s;
        continue;
      }
      const load = s.inflight / s.weight;
      if (load < bestLoad) {
        bestLoad = load;
        best = s;
      }
    }
    if (best !== undefined) return best;
  }
  return soonest;
}

function push<K>(m: Map<K, State[]>, k: K, s: State): void {
  const a = m.get(k);
  if (a === undefined) m.set(k, [s]);
  else a.push(s);
}

function vnodeCount(weight: number, perWeight: number): number {
  const v = Math.round(perWeight * weight);
  return Number.isFinite(v) && v >= 1 ? v : 1;
}

/** Ring positions depend only on the id and the vnode's index, so a weight change or a new peer moves no one else's keys. */
function vnodePositions(id: string, count: number): Uint32Array {
  const out = new Uint32Array(count);
  const base = fnv1a(id);
  // murmur3's finaliser (mix32) spreads the positions, and keys (FNV output, or small integers
  // from a caller) likewise, over the whole ring.
  for (let i = 0; i < count; i++) out[i] = mix32(fnvStep(base, mix32(i + 1)));
  return out;
}

/** Whether the two lists of tiers have one in common (a loop: acquireOn is on the request path, and a closure per call is garbage). */
function sharesTier(a: readonly Tier[], b: readonly Tier[]): boolean {
  for (let i = 0; i < a.length; i++) if (b.includes(a[i]!)) return true;
  return false;
}
