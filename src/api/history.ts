// The dashboard's memory of the last hour: per model, request rate, error rate, tokens/s, TTFT
// p50/p99, in flight and held; per GPU class, used and unhealthy of total. Kept in memory only
// (a restart forgets it) and bounded three ways: points older than the window go, each series
// holds at most `maxPoints`, and at most `maxModels` models and `maxClasses` classes are kept.
//
// The router's figures are cumulative since it started (protocol/routing.ts), so each sample
// is the difference from the one before: rates over the sampling interval, and the TTFT
// percentiles of the requests answered in that interval, from the bucket counts' difference.
// A counter that went backwards is a restarted router: that sample counts from zero.

import type { Scheduler, Timer } from "../lib/scheduler";
import { type ModelTraffic, TTFT_BUCKETS_MS, type TrafficSource } from "../protocol/routing";
import type { ClassUse } from "../protocol/views";

/** Sampled this often: an hour is then 240 points per series. */
export const HISTORY_INTERVAL_MS = 15_000;
export const HISTORY_WINDOW_MS = 3600_000;
/** Models charted at most; a fleet with more charts the first ones seen (the page says so). */
export const HISTORY_MAX_MODELS = 100;
export const HISTORY_MAX_CLASSES = 32;
/** Points per series at most, however often record() is called. */
export const HISTORY_MAX_POINTS = 400;

export interface ModelPoint {
  at: number;
  /** Per second over the interval before `at`; null at the first sample (nothing to compare with). */
  rps: number | null;
  errors_ps: number | null;
  tokens_ps: number | null;
  /** Milliseconds; null when no request was answered in the interval. */
  ttft_p50: number | null;
  ttft_p99: number | null;
  inflight: number;
  queued: number;
}

export interface GpuPoint {
  at: number;
  used: number;
  unhealthy: number;
  total: number;
}

interface ModelSeries {
  last: ModelTraffic | undefined;
  lastAt: number;
  points: ModelPoint[];
}

/**
 * The q-quantile (0..1) of a histogram given as counts per bucket (TTFT_BUCKETS_MS's upper bounds,
 * then one past the last), interpolated within the bucket as Prometheus's histogram_quantile
 * does; a quantile in the last, open bucket is its lower bound. Undefined for no observations.
 */
export function bucketQuantile(counts: readonly number[], q: number, bounds: readonly number[] = TTFT_BUCKETS_MS): number | undefined {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!(total > 0)) return undefined;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    const c = counts[i] ?? 0;
    if (c > 0 && seen + c >= rank) {
      if (i >= bounds.length) return bounds[bounds.length - 1]!;
      const lo = i === 0 ? 0 : bounds[i - 1]!;
      const hi = bounds[i]!;
      return lo + ((hi - lo) * (rank - seen)) / c;
    }
    seen += c;
  }
  return bounds[bounds.length - 1]!;
}

export interface HistoryOptions {
  windowMs?: number;
  maxModels?: number;
  maxClasses?: number;
  maxPoints?: number;
}

export class History {
  readonly windowMs: number;
  private readonly maxModels: number;
  private readonly maxClasses: number;
  private readonly maxPoints: number;
  private readonly byModel = new Map<string, ModelSeries>();
  private readonly byClass = new Map<string, GpuPoint[]>();
  private latest = -Infinity;
  /** Models (or classes) seen in the last sample but not charted, for want of room. */
  untrackedModels = 0;
  untrackedClasses = 0;
  /** Whether a router's figures are sampled into it (startSampling sets it). */
  readsTraffic = false;

  constructor(o: HistoryOptions = {}) {
    this.windowMs = o.windowMs ?? HISTORY_WINDOW_MS;
    this.maxModels = o.maxModels ?? HISTORY_MAX_MODELS;
    this.maxClasses = o.maxClasses ?? HISTORY_MAX_CLASSES;
    this.maxPoints = o.maxPoints ?? HISTORY_MAX_POINTS;
  }

  /**
   * One sample at `at` (wall-clock ms). A sample older than the newest one (the clock went
   * back) is dropped whole: the differences it would make are not about any real interval.
   * `traffic` undefined: the router could not be read this time (the GPU figures still count).
   */
  record(at: number, traffic: readonly ModelTraffic[] | undefined, gpus: readonly ClassUse[]): void {
    if (!(at > this.latest)) return;
    this.latest = at;
    if (traffic) this.recordTraffic(at, traffic);
    this.untrackedClasses = 0;
    for (const g of gpus) {
      let s = this.byClass.get(g.class);
      if (!s) {
        if (this.byClass.size >= this.maxClasses) {
          this.untrackedClasses++;
          continue;
        }
        this.byClass.set(g.class, (s = []));
      }
      push(s, { at, used: g.used, unhealthy: g.unhealthy, total: g.total }, this.maxPoints);
    }
    this.evict(at);
  }

  private recordTraffic(at: number, traffic: readonly ModelTraffic[]): void {
    this.untrackedModels = 0;
    for (const t of traffic) {
      let s = this.byModel.get(t.model);
      if (!s) {
        if (this.byModel.size >= this.maxModels) {
          this.untrackedModels++;
          continue;
        }
        this.byModel.set(t.model, (s = { last: undefined, lastAt: at, points: [] }));
      }
      push(s.points, pointFrom(at, s.last, s.lastAt, t), this.maxPoints);
      s.last = t;
      s.lastAt = at;
    }
  }

  /** Drops points older than the window, and series left with none. */
  private evict(now: number): void {
    const from = now - this.windowMs;
    for (const [k, s] of this.byModel) {
      dropBefore(s.points, from);
      if (s.points.length === 0) this.byModel.delete(k);
    }
    for (const [k, s] of this.byClass) {
      dropBefore(s, from);
      if (s.length === 0) this.byClass.delete(k);
    }
  }

  /** Charted models, by name. */
  models(): string[] {
    return [...this.byModel.keys()].sort();
  }
  model(name: string): readonly ModelPoint[] {
    return this.byModel.get(name)?.points ?? [];
  }
  classes(): string[] {
    return [...this.byClass.keys()].sort();
  }
  gpuClass(name: string): readonly GpuPoint[] {
    return this.byClass.get(name) ?? [];
  }
  /** The newest sample's time; -Infinity before the first. */
  get newest(): number {
    return this.latest;
  }
}

function push<T>(s: T[], p: T, max: number): void {
  s.push(p);
  if (s.length > max) s.splice(0, s.length - max);
}

function dropBefore(s: { at: number }[], from: number): void {
  let i = 0;
  while (i < s.length && s[i]!.at < from) i++;
  if (i > 0) s.splice(0, i);
}

/** One point from the model's previous cumulative snapshot (if any) and this one. */
function pointFrom(at: number, prev: ModelTraffic | undefined, prevAt: number, t: ModelTraffic): ModelPoint {
  const gauges = { at, inflight: t.inflight, queued: t.queued };
  const secs = (at - prevAt) / 1000;
  if (!prev || !(secs > 0)) return { ...gauges, rps: null, errors_ps: null, tokens_ps: null, ttft_p50: null, ttft_p99: null };
  const restarted =
    t.requests < prev.requests || t.errors < prev.errors || t.output_tokens < prev.output_tokens || t.ttft_counts.some((c, i) => c < (prev.ttft_counts[i] ?? 0));
  const base = restarted ? undefined : prev;
  const d = (now: number, before: number | undefined) => Math.max(0, now - (before ?? 0));
  const counts = t.ttft_counts.map((c, i) => d(c, base?.ttft_counts[i]));
  return {
    ...gauges,
    rps: d(t.requests, base?.requests) / secs,
    errors_ps: d(t.errors, base?.errors) / secs,
    tokens_ps: d(t.output_tokens, base?.output_tokens) / secs,
    ttft_p50: bucketQuantile(counts, 0.5) ?? null,
    ttft_p99: bucketQuantile(counts, 0.99) ?? null,
  };
}

export interface SamplerOptions {
  history: History;
  scheduler: Pick<Scheduler, "now" | "every">;
  /** The router's figures; none (GPU usage only) when not given. */
  traffic?: TrafficSource;
  /** GPU use per class now (the summary's). */
  gpus: () => Promise<readonly ClassUse[]>;
  intervalMs?: number;
  /** Told when a sample fails (the next one tries again). */
  onError?: (e: unknown) => void;
}

/** Takes one sample now (awaitable), then one every interval; cancel the timer to stop. */
export function startSampling(o: SamplerOptions): { timer: Timer; sample: () => Promise<void> } {
  o.history.readsTraffic = o.traffic !== undefined;
  let running: Promise<void> | undefined;
  /** A sample already under way is the one awaited: two never overlap. */
  const sample = (): Promise<void> => (running ??= once().finally(() => (running = undefined)));
  const once = async () => {
    try {
      let traffic: ModelTraffic[] | undefined;
      try {
        traffic = o.traffic ? await o.traffic.traffic() : undefined;
      } catch (e) {
        o.onError?.(e);
      }
      const gpus = await o.gpus();
      o.history.record(o.scheduler.now(), traffic, gpus);
    } catch (e) {
      o.onError?.(e);
    }
  };
  void sample();
  const timer = o.scheduler.every(o.intervalMs ?? HISTORY_INTERVAL_MS, () => void sample());
  return { timer, sample };
}
