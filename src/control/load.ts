// How far behind the head node is, and what it does about it (issue 14: a slow head node never
// declares healthy nodes lost).
//
// Three measures, all on the injected Scheduler:
// - event-loop lag: a timer every SAMPLE_MS compares scheduler.mono() deltas; a stall of the
//   process (SIGSTOP, a long synchronous step) shows as one big gap. sample() is also called by
//   the control loop before it judges silence, so a tick that runs first after a stall already
//   knows about it;
// - queue wait: how long a heartbeat waited in the intake's write queue before it was handled;
// - tick duration.
//
// Gaps and waits are kept as "deaf" intervals in wall time (bounded: the recent past only), so
// deafTime(stalls, since, now) says how much of [since, now] the head node was not listening.
// Deadlines discount that much: silence while nobody listened is not a node's silence. The
// functions that judge deadlines (reachability, reconcile) get the stalls as plain data.
//
// When loaded, the heartbeat interval announced to agents doubles (up to MAX_FACTOR × the
// configured one) and comes back one step at a time after CALM_STEPS quiet intervals. The node
// timeout in force always covers the longest interval announced recently (timeoutInForce).
//
// Shedding, in this order, before anything that changes state:
//   1. "summary": overview()/summary served from a cache up to SUMMARY_CACHE_MS old;
//   2. "metrics": what the control plane computes for metrics only. The control plane computes
//      none itself today (engine metrics are polled by the router, src/router); the level is the
//      hook for it;
//   3. "unchanged_heartbeats": heartbeats that changed nothing take the cheapest path (the
//      intake's compare-and-timestamp path reads shedding() to skip any further work).
// Heartbeats that change something, ticks, and catalog and node changes are never shed.

import type { Scheduler, Timer } from "../lib/scheduler";

/** A span in wall time during which the head node was not listening. */
export interface Stall {
  /** Wall time the span ended (when it was noticed). */
  end: number;
  ms: number;
}

export type Shed = "summary" | "metrics" | "unchanged_heartbeats";
export const SHED_ORDER: readonly Shed[] = ["summary", "metrics", "unchanged_heartbeats"];

export const SAMPLE_MS = 250;
/** A gap, queue wait or tick past this is "behind". */
export const BEHIND_MS = 1_000;
/** Past this, metrics are shed too; past HEAVY_MS × 3, unchanged heartbeats. */
export const HEAVY_MS = 3_000;
export const MAX_FACTOR = 4;
/** Quiet (configured) intervals before the interval comes back one step. */
export const CALM_STEPS = 3;
export const SUMMARY_CACHE_MS = 3_000;
const MAX_STALLS = 256;

/** The stalls as disjoint spans sorted by start, with the length of all spans before each. */
interface Merged {
  count: number;
  starts: number[];
  ends: number[];
  before: number[];
}
const mergedOf = new WeakMap<readonly Stall[], Merged>();

function merged(stalls: readonly Stall[]): Merged {
  const known = mergedOf.get(stalls);
  // The monitor's list only grows at its end (or is replaced): the same length is the same list.
  if (known && known.count === stalls.length) return known;
  const spans = stalls.map((s) => [s.end - s.ms, s.end] as const).sort((x, y) => x[0] - y[0]);
  const m: Merged = { count: stalls.length, starts: [], ends: [], before: [] };
  let total = 0;
  for (const [a, b] of spans) {
    const last = m.ends.length - 1;
    if (last >= 0 && a <= m.ends[last]!) {
      if (b > m.ends[last]!) {
        total += b - m.ends[last]!;
        m.ends[last] = b;
      }
      continue;
    }
    m.before.push(total);
    m.starts.push(a);
    m.ends.push(b);
    total += b - a;
  }
  mergedOf.set(stalls, m);
  return m;
}

/** How much deaf time lies before t. */
function coveredBefore(m: Merged, t: number): number {
  // The last span starting before t.
  let lo = 0;
  let hi = m.starts.length - 1;
  let i = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (m.starts[mid]! < t) {
      i = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  if (i < 0) return 0;
  return m.before[i]! + Math.min(t, m.ends[i]!) - m.starts[i]!;
}

/**
 * How much of [since, now] the stalls cover, overlapping ones counted once. Pure. The merged
 * spans are kept per list, so a tick asking for every node of a large fleet pays O(log stalls)
 * a node, not a sort.
 */
export function deafTime(stalls: readonly Stall[], since: number, now: number): number {
  if (stalls.length === 0 || now <= since) return 0;
  const m = merged(stalls);
  return coveredBefore(m, now) - coveredBefore(m, since);
}

/** The node timeout in force: it covers 3 × the longest interval announced within the window. Pure. */
export function timeoutInForce(nodeTimeoutMs: number, announced: readonly { at: number; ms: number }[], now: number, currentMs: number): number {
  const window = nodeTimeoutMs + currentMs;
  let longest = currentMs;
  for (const a of announced) if (now - a.at <= window) longest = Math.max(longest, a.ms);
  return Math.max(nodeTimeoutMs, 3 * longest);
}

export interface IntervalState {
  ms: number;
  /** Mono time the head node was last seen behind. */
  lastBehind: number;
  /** Mono time of the last change of ms. */
  changedAt: number;
}

/**
 * The interval policy, pure: behind doubles the interval (at most once per configured interval,
 * up to MAX_FACTOR ×); CALM_STEPS quiet intervals since the last sign of load and since the last
 * change halve it, step by step, back to the configured one.
 */
export function nextInterval(s: IntervalState, behind: boolean, mono: number, configuredMs: number): IntervalState {
  if (behind) {
    const lastBehind = mono;
    if (s.ms < configuredMs * MAX_FACTOR && mono - s.changedAt >= configuredMs) return { ms: Math.min(configuredMs * MAX_FACTOR, s.ms * 2), lastBehind, changedAt: mono };
    return { ...s, lastBehind };
  }
  const calm = CALM_STEPS * configuredMs;
  if (s.ms > configuredMs && mono - s.lastBehind >= calm && mono - s.changedAt >= calm) return { ...s, ms: Math.max(configuredMs, s.ms / 2), changedAt: mono };
  return s;
}

/** What shedding a given lateness calls for, in SHED_ORDER. Pure. */
export function sheddingFor(behindMs: number): Shed[] {
  if (behindMs < BEHIND_MS) return [];
  if (behindMs < HEAVY_MS) return ["summary"];
  if (behindMs < 3 * HEAVY_MS) return ["summary", "metrics"];
  return [...SHED_ORDER];
}

export type Episode = { kind: "head.behind"; behindMs: number; intervalMs: number } | { kind: "head.caught_up"; behindMs: number; intervalMs: number };

export interface LoadView {
  behind_ms: number;
  heartbeat_interval_ms: number;
  configured_interval_ms: number;
  shedding: Shed[];
}

export class LoadMonitor {
  private timer: Timer | undefined;
  private lastMono: number;
  private stalls: Stall[] = [];
  /** Largest lateness seen, with the mono time: behind_ms reads the recent past. */
  private recent: { at: number; ms: number }[] = [];
  private interval: IntervalState;
  private announced: { at: number; ms: number }[] = [];
  private behind = false;
  private worst = 0;
  private pending: Episode[] = [];

  constructor(
    private readonly scheduler: Scheduler,
    readonly configuredIntervalMs: number,
    readonly nodeTimeoutMs: number,
  ) {
    this.lastMono = scheduler.mono();
    this.interval = { ms: configuredIntervalMs, lastBehind: Number.NEGATIVE_INFINITY, changedAt: Number.NEGATIVE_INFINITY };
  }

  start(): void {
    this.lastMono = this.scheduler.mono();
    this.timer ??= this.scheduler.every(SAMPLE_MS, () => this.sample()).unref();
  }
  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  /** Measures the gap since the last sample; anything beyond SAMPLE_MS is lag. A no-op until start(). */
  sample(): void {
    // Only while the sampler runs: without it, a gap is just time nobody measured.
    if (!this.timer) return;
    const m = this.scheduler.mono();
    const gap = m - this.lastMono;
    this.lastMono = m;
    const lag = gap - SAMPLE_MS;
    if (lag > 0) this.note(lag, lag >= BEHIND_MS / 4);
    else this.step(false);
  }

  /** A heartbeat waited this long in the write queue before it was handled. */
  queueWait(ms: number): void {
    // The common case, a wait too short to count, costs nothing: the sampler keeps calm time.
    if (ms < BEHIND_MS / 4) return;
    this.note(ms, true);
  }

  /** A tick took this long (during which nothing else was handled). */
  tickTook(ms: number): void {
    this.note(ms, ms >= BEHIND_MS / 4);
  }

  private note(ms: number, deaf: boolean): void {
    const now = this.scheduler.now();
    const m = this.scheduler.mono();
    if (deaf) {
      // Replaced, not changed in place: a list handed out stays as it was.
      this.stalls = [...this.stalls.slice(Math.max(0, this.stalls.length + 1 - MAX_STALLS)), { end: now, ms }];
    }
    if (ms >= BEHIND_MS) {
      this.recent.push({ at: m, ms });
      if (this.recent.length > MAX_STALLS) this.recent.splice(0, this.recent.length - MAX_STALLS);
    }
    this.step(ms >= BEHIND_MS, ms);
  }

  private step(behind: boolean, ms = 0): void {
    const m = this.scheduler.mono();
    const before = this.interval.ms;
    this.interval = nextInterval(this.interval, behind, m, this.configuredIntervalMs);
    if (this.interval.ms !== before) this.announced.push({ at: this.scheduler.now(), ms: before }, { at: this.scheduler.now(), ms: this.interval.ms });
    const keep = this.nodeTimeoutMs + this.configuredIntervalMs * MAX_FACTOR;
    this.announced = this.announced.filter((a) => this.scheduler.now() - a.at <= keep);
    if (behind) {
      this.worst = Math.max(this.worst, ms);
      if (!this.behind) {
        this.behind = true;
        this.pending.push({ kind: "head.behind", behindMs: ms, intervalMs: this.interval.ms });
      }
    } else if (this.behind && m - this.interval.lastBehind >= CALM_STEPS * this.configuredIntervalMs) {
      this.behind = false;
      this.pending.push({ kind: "head.caught_up", behindMs: this.worst, intervalMs: this.interval.ms });
      this.worst = 0;
    }
  }

  /** The episodes begun or ended since the last call, once each (the control loop writes them as events). */
  takeEpisodes(): Episode[] {
    const out = this.pending;
    this.pending = [];
    return out;
  }

  /** Stalls of the recent past, as plain data for the pure deadline functions. */
  deafSpans(): readonly Stall[] {
    const horizon = this.scheduler.now() - 4 * (this.nodeTimeoutMs + 60_000);
    // A new list only when one has aged out: the deadline functions keep work per list.
    if (this.stalls.length > 0 && this.stalls[0]!.end < horizon) this.stalls = this.stalls.filter((s) => s.end >= horizon);
    return this.stalls;
  }

  /** The heartbeat interval to announce now. */
  intervalMs(): number {
    return this.interval.ms;
  }

  /** The node timeout in force: never shorter than 3 × an interval agents may still be following. */
  nodeTimeoutInForce(): number {
    return timeoutInForce(this.nodeTimeoutMs, this.announced, this.scheduler.now(), this.interval.ms);
  }

  /** The worst lateness in the last CALM_STEPS configured intervals (0 when calm). */
  behindMs(): number {
    const m = this.scheduler.mono();
    const window = Math.max(10_000, CALM_STEPS * this.configuredIntervalMs);
    this.recent = this.recent.filter((r) => m - r.at <= window);
    return this.recent.reduce((a, r) => Math.max(a, r.ms), 0);
  }

  /** What is shed now, in SHED_ORDER. */
  shedding(): Shed[] {
    return sheddingFor(this.behindMs());
  }

  view(): LoadView {
    return { behind_ms: Math.round(this.behindMs()), heartbeat_interval_ms: Math.round(this.interval.ms), configured_interval_ms: this.configuredIntervalMs, shedding: this.shedding() };
  }
}
