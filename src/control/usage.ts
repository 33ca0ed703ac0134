// Idleness across several routers (one per control plane on one store): each router reports
// its last-used map and since when it has watched without a gap; this merges those reports into
// what one router's map is to the reconcile step and the views. Pure functions of the reports
// and the time.
//
// The seeds' rule holds across routers: unknown is not idle. A replica is known idle for a
// duration only if every router that could have served it has watched that long, so the merge
// answers, beside the newest stamp per replica, the latest watchingSince among the routers still
// reporting: idleness is only counted from then. A router that restarted (its thread, its
// process) reports an empty map and a fresh watchingSince: its lost stamps cannot make anything
// look idle, because nothing is idle for longer than it has watched. A router that stopped
// reporting (its control plane gone) no longer limits once it has been silent for liveWithinMs,
// and the stamps it did report still count.
//
// What is not covered: a router's use since its last report (at most one report interval, the
// same race a single router has between the tick's collection and its decision), and a router
// still serving while it cannot reach the store (it limits only while its reports keep coming).

import type { RouterUsage } from "./types";

export interface MergeInput {
  /** Every router's report as the store holds it. */
  reports: readonly RouterUsage[];
  /** This control plane's clock (ms since epoch). */
  now: number;
  /** A router that reported within this long is alive and limits idleness; older reports still give their stamps. */
  liveWithinMs: number;
  /**
   * This control plane's own router, fresher than its row in the store (collected this tick):
   * it replaces the report of the same name.
   */
  own?: { router: string; watchingSince: number; lastUsed: ReadonlyMap<string, number> };
}

export interface MergedUsage {
  /** Replica id → the newest last-used stamp any router reported (never later than now). */
  lastUsed: Map<string, number>;
  /**
   * Idleness is counted from here: the latest watchingSince among the live routers (never later
   * than now); -Infinity when no router is alive (only stamps remain).
   */
  since: number;
  /** The routers that limit: alive, with their watchingSince, latest first (for logs and tests). */
  live: { router: string; watchingSince: number }[];
}

export function mergeUsage({ reports, now, liveWithinMs, own }: MergeInput): MergedUsage {
  const all: { router: string; watchingSince: number; lastUsed: ReadonlyMap<string, number>; reportedAgoMs: number }[] = reports.filter((r) => r.router !== own?.router);
  if (own) all.push({ ...own, reportedAgoMs: 0 });
  const lastUsed = new Map<string, number>();
  let since = Number.NEGATIVE_INFINITY;
  const live: MergedUsage["live"] = [];
  for (const r of all) {
    for (const [id, t] of r.lastUsed) {
      // A stamp from a clock ahead of this one means "just now", not later: it must not read as
      // older than anything (a far-future stamp would otherwise sort as the longest idle).
      const at = Math.min(t, now);
      if (!Number.isFinite(at)) continue;
      const prev = lastUsed.get(id);
      if (prev === undefined || at > prev) lastUsed.set(id, at);
    }
    // A report from the database's future (a negative age) is fresh.
    if (r.reportedAgoMs <= liveWithinMs) {
      const w = Number.isFinite(r.watchingSince) ? Math.min(r.watchingSince, now) : now;
      live.push({ router: r.router, watchingSince: w });
      if (w > since) since = w;
    }
  }
  live.sort((a, b) => b.watchingSince - a.watchingSince || (a.router < b.router ? -1 : 1));
  return { lastUsed, since, live };
}

/**
 * The stamps as known idleness reads them: a use before `since` counts from `since` (nothing is
 * known idle for longer than every router has watched). For views: idle_seconds is then the
 * time the replica is known to have gone unused. Replicas no router has reported stay absent
 * (unknown).
 */
export function knownIdleStamps(m: { lastUsed: ReadonlyMap<string, number>; since: number }): Map<string, number> {
  if (m.since === Number.NEGATIVE_INFINITY) return new Map(m.lastUsed);
  const out = new Map<string, number>();
  for (const [id, t] of m.lastUsed) out.set(id, Math.max(t, m.since));
  return out;
}

/** How long a replica is known to have gone unused, or undefined when unknown (never reported). */
export function knownIdleMs(m: { lastUsed: ReadonlyMap<string, number>; since: number }, id: string, now: number): number | undefined {
  const t = m.lastUsed.get(id);
  if (t === undefined) return undefined;
  return Math.max(0, now - Math.max(t, m.since));
}
