// How several routers share each limited key's and team's per-minute allowance (rpm, tpm): each
// router holds a share of it (its bucket's size and refill are limit × share, admission.ts), and
// every control plane recomputes its router's share once a tick from what every router reported
// to the store: its recent demand (requests and tokens asked, admitted or refused) per item.
//
// A share is a floor for every live router (RESERVE / N: a router that sees its first request of
// a key can answer it without waiting for a tick) plus the rest in proportion to demand. A share
// that shrinks loses what its bucket held beyond it, so shares move only for demand that matters:
// each router's demand counts as at least its even part of the allowance over the window (QUIET
// of it: a few stray requests move nothing), and while a router is asked more than that, a share that would shrink
// by less than STICKY stays as it was (routers hit alike keep their even shares through the noise
// of their demand); nor does a share shrink below what its router uses (USING times what it
// admitted over the window: a router still serving a burst from its bucket while another already
// refuses keeps what it holds). Shares computed by different control planes at different moments could sum to more than 1, so each
// is also capped by what the others hold now: share ≤ 1 − Σ others' stored shares, computed and
// written in one store transaction (serialised with the others' own). A router that wants more
// thus waits until the others' rows show they gave it up (a tick or two), and the stored shares
// of the live routers never sum to more than 1: together the routers' buckets hold at most the
// limit and refill at most at the limit's rate, which is the bound of one router alone.
// A router gone (its row not rewritten within liveWithinMs) stops counting, and its share is free.
//
// Requests in flight (max-concurrent) are split the same way but in whole slots (computeSlots):
// the limit apportioned by the same weights (largest remainders), capped by what the others hold
// or still have in flight, so the routers together never have more in flight than the limit.

import { limitItem } from "../protocol/routing";

/** What a router's own row calls the share of the items it did not list (keys it has not counted yet). */
export const FALLBACK = "*";
/** The part of each allowance spread evenly over the live routers, whatever their demand. */
export const RESERVE = 1 / 8;
/** How far back a router's demand counts. */
export const DEMAND_WINDOW_MS = 5_000;
/** The least demand a router counts with: this part of what the limit allows over the window, shared by the routers. */
export const QUIET = 1;
/** A share whose target is below it by less than this (relative to the larger of it and an even split) is left as it is. */
export const STICKY = 0.2;
/** A share does not shrink below this many times what its router admitted over the window (as a part of what the limit refills in it). */
export const USING = 2;

export type LimitKind = "rpm" | "tpm" | "con";
/** In a row's demand, beside a `con` item: the requests that router has in flight. */
export const INFLIGHT = "#inflight";

/** An allowance's name in the store's rows and the router's messages (protocol/routing.ts). */
export const itemOf: (of: "key" | "team", limit: LimitKind, name: string) => string = limitItem;

/** A `con` item's figures on this router: its demand, its requests in flight, the limit. */
export interface SlotDemand {
  demand: number;
  /** The least demand each router counts with (quietFloor). */
  quiet?: number;
  inflight: number;
  limit: number;
}

/**
 * This router's slots of each max-concurrent limit: its part of the limit apportioned by the
 * weights of computeShares (largest remainders, ties by router name: every control plane reading
 * the same rows apportions the same way), capped by the limit less what each live other holds or
 * still has in flight, whichever is more. A router with no slot refuses until one is its.
 */
export function computeSlots(i: { own: string; con: ReadonlyMap<string, SlotDemand>; rows: readonly ShareRow[]; liveWithinMs: number }): Map<string, number> {
  const others = i.rows.filter((r) => r.router !== i.own && r.reportedAgoMs <= i.liveWithinMs);
  const n = others.length + 1;
  const out = new Map<string, number>();
  for (const [x, c] of i.con) {
    const least = (c.quiet ?? 0) / n;
    const all = [{ router: i.own, d: Math.max(least, c.demand) }, ...others.map((r) => ({ router: r.router, d: Math.max(least, r.demand[x] ?? 0) }))];
    const total = all.reduce((s, a) => s + a.d, 0);
    const quota = all.map((a) => ({ router: a.router, q: c.limit * weight(a.d, total, n) }));
    const whole = quota.map((a) => ({ router: a.router, n: Math.floor(a.q + 1e-9), rest: a.q - Math.floor(a.q + 1e-9) }));
    let left = c.limit - whole.reduce((s, a) => s + a.n, 0);
    for (const a of [...whole].sort((p, q) => q.rest - p.rest || (p.router < q.router ? -1 : p.router > q.router ? 1 : 0))) {
      if (left <= 0) break;
      a.n++;
      left--;
    }
    const target = whole.find((a) => a.router === i.own)!.n;
    const held = others.reduce((s, r) => s + Math.max(slotsHeld(r, x, c.limit), Math.max(0, r.demand[x + INFLIGHT] ?? 0)), 0);
    out.set(x, Math.max(0, Math.min(target, c.limit - held)));
  }
  return out;
}

/** The slots a router holds: as it listed them, else its fallback share of the limit (all when it says neither). */
function slotsHeld(r: ShareRow, x: string, limit: number): number {
  const s = r.shares[x];
  if (typeof s === "number" && Number.isFinite(s)) return Math.max(0, s);
  return Math.floor(limit * heldBy(r, x) + 1e-9);
}

/** One router's row as the store holds it. */
export interface ShareRow {
  router: string;
  /** Its recent demand per item. */
  demand: Readonly<Record<string, number>>;
  /** Its share per item, and FALLBACK's for the items it did not list. */
  shares: Readonly<Record<string, number>>;
  /** How long ago it was written (the database's clock). */
  reportedAgoMs: number;
}

/** A router's shares: per item, and for any item not listed; and its slots of each max-concurrent (whole requests). */
export interface Shares {
  shares: Map<string, number>;
  fallback: number;
  slots?: Map<string, number>;
}

export interface ShareInput {
  /** This router's name (its control plane's). */
  own: string;
  /** Its recent demand per item: every item it limits, 0 when unasked. */
  demand: ReadonlyMap<string, number>;
  /** Per item, the least demand each router counts with, before it is divided among them (quietFloor); absent: 0. */
  quiet?: ReadonlyMap<string, number>;
  /** Per item, what this router admitted over the window (requests, tokens): one that uses its share keeps it. */
  used?: ReadonlyMap<string, number>;
  /** Every router's row as stored now, this one's previous too (ignored). */
  rows: readonly ShareRow[];
  liveWithinMs: number;
}

/** This router's shares: RESERVE / N each plus the rest by demand, capped by what the live others hold. */
export function computeShares(i: ShareInput): Shares {
  const others = i.rows.filter((r) => r.router !== i.own && r.reportedAgoMs <= i.liveWithinMs);
  const n = others.length + 1;
  const held = (x: string) => others.reduce((s, r) => s + heldBy(r, x), 0);
  const before = i.rows.find((r) => r.router === i.own && r.reportedAgoMs <= i.liveWithinMs)?.shares;
  const shares = new Map<string, number>();
  for (const [x, d] of i.demand) {
    const least = (i.quiet?.get(x) ?? 0) / n;
    const own = Math.max(least, d);
    const total = others.reduce((s, r) => s + Math.max(least, r.demand[x] ?? 0), own);
    const want = weight(own, total, n);
    const was = before?.[x];
    // What it uses it keeps: USING times what it admitted over the window, as a part of what the limit refills in it.
    const allowance = (i.quiet?.get(x) ?? 0) / QUIET;
    const keep = typeof was === "number" && allowance > 0 ? Math.min(was, (USING * (i.used?.get(x) ?? 0)) / allowance) : 0;
    const near = typeof was === "number" && d > least && was - want < STICKY * Math.max(was, 1 / n);
    const target = typeof was === "number" && want < was ? Math.max(want, near ? was : keep) : want;
    shares.set(x, clamp(Math.min(target, 1 - held(x))));
  }
  return { shares, fallback: clamp(Math.min(1 / n, 1 - held(FALLBACK))) };
}

/** A router's part: RESERVE / n, plus the rest by its demand `d` of the routers' `total` (evenly when nobody asks). */
function weight(d: number, total: number, n: number): number {
  const floor = RESERVE / n;
  return total > 0 ? floor + (1 - n * floor) * (d / total) : 1 / n;
}

/** The least demand the routers count with for a limit of `perMinute` (before it is divided among them): QUIET of what it allows over the demand window. */
export function quietFloor(perMinute: number): number {
  return (perMinute * QUIET * DEMAND_WINDOW_MS) / 60_000;
}

/** What a router holds of an item: its share, else its share of items it did not list (1 when it says neither). */
function heldBy(r: ShareRow, x: string): number {
  const s = r.shares[x] ?? r.shares[FALLBACK];
  return typeof s === "number" && Number.isFinite(s) ? Math.min(1, Math.max(0, s)) : 1;
}

function clamp(s: number): number {
  // Rounded down a little: the sum of shares each computed from the others' stays ≤ 1 in floating point.
  const r = Math.floor(s * 1e9) / 1e9;
  return r < 0 ? 0 : r > 1 ? 1 : r;
}

/** A key's or team's cumulative asks, as the router reports them (LimitUseEntry). */
export interface Asked {
  of: "key" | "team";
  name: string;
  rpm?: number;
  tpm?: number;
  askedRequests?: number;
  askedTokens?: number;
  usedRequests?: number;
  usedTokens?: number;
  concurrent?: number;
  maxConcurrent?: number;
  rpmLimit?: number;
  tpmLimit?: number;
}

/**
 * A router's demand over the last DEMAND_WINDOW_MS, per item, from the cumulative counts it
 * reports each tick: the count now less the oldest one within the window. A count that went
 * down (the router thread replaced, the key made anew) starts again from zero.
 */
export class DemandWindow {
  private readonly seen = new Map<string, { at: number; n: number; u: number }[]>();

  constructor(private readonly windowMs = DEMAND_WINDOW_MS) {}

  /**
   * Takes this tick's counts (at: monotonic ms) and answers each limited item's demand; and of
   * each max-concurrent, its demand (the requests asked), what is in flight and the limit.
   */
  add(at: number, use: readonly Asked[]): Map<string, number> {
    return this.take(at, use).demand;
  }

  take(at: number, use: readonly Asked[]): { demand: Map<string, number>; used: Map<string, number>; quiet: Map<string, number>; con: Map<string, SlotDemand> } {
    const out = new Map<string, number>();
    const used = new Map<string, number>();
    const quiet = new Map<string, number>();
    const con = new Map<string, SlotDemand>();
    const next = new Map<string, { at: number; n: number; u: number }[]>();
    const one = (x: string, n: number, u = 0) => {
      const seen = this.seen.get(x);
      // A limit seen first: counted from 0 (its counters are as new, but for a head node's start).
      let h = seen ?? [{ at, n: 0, u: 0 }];
      if (n < h[h.length - 1]!.n || u < h[h.length - 1]!.u) h = [{ at, n: 0, u: 0 }];
      const last = h[h.length - 1]!;
      h = h.filter((s) => s.at >= at - this.windowMs);
      const base = h[0] ?? last;
      out.set(x, n - base.n);
      used.set(x, u - base.u);
      h.push({ at, n, u });
      next.set(x, h);
    };
    for (const u of use) {
      if (u.rpm !== undefined) {
        one(itemOf(u.of, "rpm", u.name), u.askedRequests ?? 0, u.usedRequests ?? 0);
        quiet.set(itemOf(u.of, "rpm", u.name), quietFloor(u.rpmLimit ?? 0));
      }
      if (u.tpm !== undefined) {
        one(itemOf(u.of, "tpm", u.name), u.askedTokens ?? 0, u.usedTokens ?? 0);
        quiet.set(itemOf(u.of, "tpm", u.name), quietFloor(u.tpmLimit ?? 0));
      }
      if (u.maxConcurrent !== undefined) {
        const x = itemOf(u.of, "con", u.name);
        one(x, u.askedRequests ?? 0);
        con.set(x, { demand: out.get(x)!, quiet: u.maxConcurrent * QUIET, inflight: u.concurrent ?? 0, limit: u.maxConcurrent });
        out.delete(x);
        used.delete(x);
      }
    }
    this.seen.clear();
    for (const [x, h] of next) this.seen.set(x, h);
    return { demand: out, used, quiet, con };
  }
}
