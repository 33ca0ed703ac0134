// The router's view of engine load: a small Prometheus text-format parser, the mapping from
// vLLM / SGLang / llama.cpp metric names to one {running, waiting, kvUsage} figure, and a poller
// that refreshes those figures off the request path so the balancer can pass over busy replicas.
// Its rounds and per-request timeouts run on an injected Scheduler (src/lib/scheduler.ts). An
// answer is read as it arrives, within caps and in slices with I/O let in between
// (metrics-body.ts): an engine's /metrics can cost other requests nothing they can see.

import { errorText } from "../lib/format";
import type { DataParallelLayout } from "../protocol/engine-layout";
import { letIoIn, type Scheduler, type Timer, realScheduler } from "../lib/scheduler";
import { METRICS_CAPS, type MetricsCaps, MetricsRefused, readLinesWithin } from "./metrics-body";
import { type EngineTokens, EngineTokenReader } from "./engine-tokens";

/** One sample line of a Prometheus text exposition. */
export interface PromSample {
  name: string;
  /** Null-prototype object: label names come from the network and must not reach Object.prototype. */
  labels: Record<string, string>;
  value: number;
  /** Milliseconds since the epoch, when the line carries one. */
  timestamp?: number;
}

/** What a replica's engine says about its load; -1 in a field means the engine did not say. */
export interface EngineLoad {
  running: number;
  waiting: number;
  /** KV cache in use, 0..1. */
  kvUsage: number;
}

export const UNKNOWN_LOAD: Readonly<EngineLoad> = Object.freeze({ running: -1, waiting: -1, kvUsage: -1 });

export class PrometheusParseError extends Error {
  constructor(
    readonly line: number,
    readonly reason: string,
    lineText: string,
  ) {
    const shown = lineText.length > 120 ? `${lineText.slice(0, 120)}…` : lineText;
    super(`metrics line ${line}: ${reason}: ${JSON.stringify(shown)}`);
    this.name = "PrometheusParseError";
  }
}

const TAB = 9;
const CR = 13;
const SPACE = 32;
const QUOTE = 34;
const HASH = 35;
const COMMA = 44;
const EQUALS = 61;
const BACKSLASH = 92;
const LBRACE = 123;
const RBRACE = 125;

function isBlank(c: number): boolean {
  // CR counts as a blank so CRLF expositions parse without a separate pass.
  return c === SPACE || c === TAB || c === CR;
}

function isLabelStart(c: number): boolean {
  return (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95;
}

function isLabelChar(c: number): boolean {
  return isLabelStart(c) || (c >= 48 && c <= 57);
}

function isNameStart(c: number): boolean {
  return isLabelStart(c) || c === 58;
}

function isNameChar(c: number): boolean {
  return isLabelChar(c) || c === 58;
}

/** A sample value as Go's ParseFloat reads it, which is what Prometheus clients write. */
function parseValue(tok: string): number | undefined {
  const n = Number(tok);
  if (!Number.isNaN(n)) return n;
  switch (tok.toLowerCase()) {
    case "nan":
      return NaN;
    case "+inf":
    case "inf":
    case "+infinity":
    case "infinity":
      return Infinity;
    case "-inf":
    case "-infinity":
      return -Infinity;
    default:
      return undefined;
  }
}

/** Lines skipped on purpose: blank, comment, or a name the caller did not ask for. */
const SKIP = 0;

/**
 * Parses the line text[start, end) (no newline). Returns the sample, SKIP, or an error reason:
 * strings rather than exceptions so the lenient load reader pays nothing for a bad line.
 */
function parseLine(text: string, start: number, end: number, only: ((name: string) => boolean) | undefined): PromSample | typeof SKIP | string {
  let i = start;
  while (i < end && isBlank(text.charCodeAt(i))) i++;
  if (i === end) return SKIP;
  let c = text.charCodeAt(i);
  // HELP, TYPE, OpenMetrics' EOF and free comments alike: nothing in them changes a sample.
  if (c === HASH) return SKIP;
  if (!isNameStart(c)) return "metric name expected";
  const nameStart = i++;
  while (i < end && isNameChar(text.charCodeAt(i))) i++;
  const name = text.slice(nameStart, i);
  if (only !== undefined && !only(name)) return SKIP;

  const labels: Record<string, string> = Object.create(null);
  while (i < end && isBlank(text.charCodeAt(i))) i++;
  if (i < end && text.charCodeAt(i) === LBRACE) {
    i++;
    for (;;) {
      while (i < end && isBlank(text.charCodeAt(i))) i++;
      if (i >= end) return "unterminated label set";
      c = text.charCodeAt(i);
      if (c === RBRACE) {
        i++;
        break;
      }
      if (!isLabelStart(c)) return "label name expected";
      const ls = i++;
      while (i < end && isLabelChar(text.charCodeAt(i))) i++;
      const lname = text.slice(ls, i);
      while (i < end && isBlank(text.charCodeAt(i))) i++;
      if (i >= end || text.charCodeAt(i) !== EQUALS) return `"=" expected after label ${lname}`;
      i++;
      while (i < end && isBlank(text.charCodeAt(i))) i++;
      if (i >= end || text.charCodeAt(i) !== QUOTE) return `quoted value expected for label ${lname}`;
      i++;
      let value = "";
      let chunk = i;
      for (;;) {
        if (i >= end) return `unterminated value of label ${lname}`;
        const ch = text.charCodeAt(i);
        if (ch === QUOTE) {
          value += text.slice(chunk, i);
          i++;
          break;
        }
        if (ch === BACKSLASH) {
          if (i + 1 >= end) return `unterminated value of label ${lname}`;
          value += text.slice(chunk, i);
          const next = text.charCodeAt(i + 1);
          // The format defines \\, \" and \n; any other escape is kept as written rather than
          // failing the whole scrape over one odd label.
          value += next === 110 ? "\n" : next === BACKSLASH ? "\\" : next === QUOTE ? '"' : text.slice(i, i + 2);
          i += 2;
          chunk = i;
          continue;
        }
        i++;
      }
      if (lname in labels) return `label ${lname} repeated`;
      labels[lname] = value;
      while (i < end && isBlank(text.charCodeAt(i))) i++;
      if (i >= end) return "unterminated label set";
      if (text.charCodeAt(i) === COMMA) {
        i++;
        continue;
      }
      if (text.charCodeAt(i) === RBRACE) {
        i++;
        break;
      }
      return '"," or "}" expected after a label';
    }
    while (i < end && isBlank(text.charCodeAt(i))) i++;
  }

  if (i >= end) return "value expected";
  let ts = i;
  while (i < end && !isBlank(text.charCodeAt(i))) i++;
  const value = parseValue(text.slice(ts, i));
  if (value === undefined) return `bad value ${JSON.stringify(text.slice(ts, i))}`;
  const sample: PromSample = { name, labels, value };

  while (i < end && isBlank(text.charCodeAt(i))) i++;
  // An OpenMetrics exemplar (`# {...} v`) may follow the value or timestamp; it is not load.
  if (i < end && text.charCodeAt(i) !== HASH) {
    ts = i;
    while (i < end && !isBlank(text.charCodeAt(i))) i++;
    const t = Number(text.slice(ts, i));
    if (!Number.isInteger(t)) return `bad timestamp ${JSON.stringify(text.slice(ts, i))}`;
    sample.timestamp = t;
    while (i < end && isBlank(text.charCodeAt(i))) i++;
    if (i < end && text.charCodeAt(i) !== HASH) return "unexpected text after the timestamp";
  }
  return sample;
}

/**
 * Parses a Prometheus text exposition (format 0.0.4, and OpenMetrics' sample lines) into its
 * samples, in order. `only` skips every other metric before its labels are parsed, which is most
 * of the cost. Throws PrometheusParseError naming the first malformed line.
 */
export function parsePrometheus(text: string, only?: (name: string) => boolean): PromSample[] {
  const out: PromSample[] = [];
  let lineNo = 0;
  for (let start = 0; start < text.length; ) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    lineNo++;
    const r = parseLine(text, start, end, only);
    if (typeof r === "string") throw new PrometheusParseError(lineNo, r, text.slice(start, end));
    if (r !== SKIP) out.push(r);
    start = end + 1;
  }
  return out;
}

const VLLM = 0;
const SGLANG = 1;
const LLAMACPP = 2;
const FAMILIES = 3;

const RUNNING = 0;
const WAITING = 1;
const KV = 2;
/** Read only when the family's preferred KV metric is absent (vLLM v0's gpu_cache_usage_perc). */
const KV_FALLBACK = 3;
const ROLES = 4;

/**
 * Labels that tell apart the ranks of one data-parallel group (SGLang's schedulers: tp_rank,
 * pp_rank, moe_ep_rank; see scheduler_metrics_mixin.py). With --enable-metrics-for-all-schedulers
 * every rank reports its group's queue, so within a group one rank's value is the group's
 * (the fullest, should one lag); only groups (dp_rank, engines, models) add up.
 */
const RANK_LABELS = new Set(["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"]);

/*
 * SGLang with data parallelism (--dp-size d, --tp-size t). Which series appear, from SGLang's
 * source (python/sglang/srt: metrics/collector.py, managers/scheduler.py and
 * scheduler_metrics_mixin.py, managers/data_parallel_controller.py, layers/dp_attention.py):
 * - Each scheduler process (one per GPU rank) writes its gauges into prometheus_client's
 *   multiprocess directory with multiprocess_mode="mostrecent": series with the same labels from
 *   several processes come out as one, the one written last. The schedulers that write are those
 *   with attn_tp_rank 0, or all of them with --enable-metrics-for-all-schedulers.
 * - Plain DP: d TP groups of t schedulers each, tp_rank 0…t-1 in every group; by default one
 *   scheduler per group (tp_rank 0) writes. DP attention: one TP group of t schedulers, DP group
 *   = tp_rank ÷ (t/d) (compute_dp_attention_world_info), attn_tp_rank = tp_rank mod (t/d); by
 *   default d of them write (tp_rank 0, t/d, 2t/d…), with all schedulers all t, t/d per group
 *   saying the same.
 * - Labels: releases before PR #7597 (mid 2025) give model_name and engine_type only, so every
 *   group's series collapse into one; from it on tp_rank, pp_rank (later moe_ep_rank) and
 *   dp_rank, the last whenever the DP controller started the scheduler. Expositions trimmed to
 *   model_name and tp_rank (test/fixtures/metrics/sglang/datadog-sglang_metrics.prom) tell the
 *   ranks apart by tp_rank alone: under DP attention that still names the group, under plain
 *   DP the groups' series collapse.
 * - A multi-node replica's leader serves only its own node's schedulers (the directory is local).
 * So with the replica's layout known (protocol/engine-layout.ts): a series' DP group is its
 * dp_rank, else under DP attention its tp_rank ÷ (t/d), else unknown (one group); a group counts
 * its fullest rank once; groups add up; and where fewer groups can be told apart than the
 * replica has, those seen stand for the rest (their sum × d / seen): an estimate, fair because
 * SGLang's DP controller spreads requests over the groups (round robin or shortest queue).
 */

/** A SGLang sample's series (name and labels but the rank labels and dp_rank) and its DP group under `layout`. */
function dpGroupOf(sample: PromSample, layout: DataParallelLayout): { series: string; group: string } {
  const rest: string[] = [];
  let dpRank: string | undefined;
  let tpRank: string | undefined;
  for (const k in sample.labels) {
    const v = sample.labels[k]!;
    if (k === "dp_rank") dpRank = v;
    else if (k === "tp_rank") tpRank = v;
    else if (!RANK_LABELS.has(k)) rest.push(`${k}\u0000${v}`);
  }
  const series = `${sample.name}\u0001${rest.sort().join("\u0001")}`;
  if (dpRank !== undefined) return { series, group: `d${dpRank}` };
  const perGroup = layout.tp / layout.dp;
  const rank = Number(tpRank);
  if (layout.dp_attention && tpRank !== undefined && Number.isInteger(perGroup) && perGroup >= 1 && Number.isInteger(rank) && rank >= 0)
    return { series, group: `t${Math.floor(rank / perGroup)}` };
  return { series, group: "?" };
}

/** The sample's group: its name and labels without the rank labels, or null when it has none of them. */
function groupKey(sample: PromSample): string | null {
  let ranked = false;
  const rest: string[] = [];
  for (const k in sample.labels) {
    if (RANK_LABELS.has(k)) ranked = true;
    else rest.push(`${k}\u0000${sample.labels[k]}`);
  }
  return ranked ? `${sample.name}\u0001${rest.sort().join("\u0001")}` : null;
}

/** Metric name → accumulator slot (family * ROLES + role). Names are matched, never HELP text. */
const WANTED = new Map<string, number>([
  ["vllm:num_requests_running", VLLM * ROLES + RUNNING],
  ["vllm:num_requests_waiting", VLLM * ROLES + WAITING],
  ["vllm:kv_cache_usage_perc", VLLM * ROLES + KV],
  ["vllm:gpu_cache_usage_perc", VLLM * ROLES + KV_FALLBACK],
  ["sglang:num_running_reqs", SGLANG * ROLES + RUNNING],
  ["sglang:num_queue_reqs", SGLANG * ROLES + WAITING],
  // Requests waiting for their grammar to compile are as much a queue as the main one.
  ["sglang:num_grammar_queue_reqs", SGLANG * ROLES + WAITING],
  ["sglang:token_usage", SGLANG * ROLES + KV],
  ["llamacpp:requests_processing", LLAMACPP * ROLES + RUNNING],
  ["llamacpp:requests_deferred", LLAMACPP * ROLES + WAITING],
  // Removed upstream by llama.cpp #13660; builds after it give no KV figure at all.
  ["llamacpp:kv_cache_usage_ratio", LLAMACPP * ROLES + KV],
]);

function familyOfHint(engine: string | undefined): number {
  switch (engine?.toLowerCase().replace(/[^a-z]/g, "")) {
    case "vllm":
    case "fake":
      return VLLM;
    case "sglang":
      return SGLANG;
    case "llamacpp":
      return LLAMACPP;
    default:
      return -1;
  }
}

/**
 * Reads one engine's load out of its /metrics text. The engine is recognised by the metric
 * names present; the hint (the replica's engine) only breaks a tie when several families
 * appear. Counts are summed over label sets (data-parallel engines, several model names), but the
 * ranks of one data-parallel group count once (see RANK_LABELS); KV usage takes the fullest label
 * set, since one full pool is enough to make a replica queue. `layout`, an SGLang replica's
 * data-parallel shape, tells its groups apart where the labels do not (see dpGroupOf).
 * Malformed lines of the metrics we read are ignored, and other lines are not even parsed.
 */
export function readEngineLoad(text: string, engine?: string, layout?: DataParallelLayout): EngineLoad {
  const r = new LoadReader(layout);
  for (let start = 0; start < text.length; ) {
    let end = text.indexOf("\n", start);
    if (end < 0) end = text.length;
    r.line(text, start, end);
    start = end + 1;
  }
  return r.load(engine);
}

/**
 * readEngineLoad a line at a time, for an exposition read as it arrives (metrics-body.ts):
 * line() each line, then load().
 */
export class LoadReader {
  private readonly sum = new Float64Array(FAMILIES * ROLES);
  private readonly max = new Float64Array(FAMILIES * ROLES);
  private readonly count = new Uint32Array(FAMILIES * ROLES);
  /** slot → group → the group's value, for samples that carry rank labels */
  private groups: Map<string, number>[] | undefined;
  /** With a layout, SGLang's samples: slot → series → DP group → the group's value (see dpGroupOf). */
  private dpGroups: Map<string, Map<string, number>>[] | undefined;

  /** `layout`: the replica's data-parallel shape, for SGLang (readEngineLoad). */
  constructor(private readonly layout?: DataParallelLayout) {}

  /** Reads the line text[start, end) (no newline). */
  line(text: string, start: number, end: number): void {
    let s = start;
    while (s < end && isBlank(text.charCodeAt(s))) s++;
    const c = text.charCodeAt(s);
    // Every name we want starts with l, s or v: comments and most other lines stop here.
    if (c !== 118 && c !== 115 && c !== 108) return;
    let nameEnd = s;
    while (nameEnd < end) {
      const ch = text.charCodeAt(nameEnd);
      if (ch === LBRACE || isBlank(ch)) break;
      nameEnd++;
    }
    const slot = WANTED.get(text.slice(s, nameEnd));
    if (slot === undefined) return;
    const r = parseLine(text, start, end, undefined);
    if (typeof r !== "object") return;
    const v = r.value;
    if (!Number.isFinite(v) || v < 0) return;
    const key = this.layout && slot >= SGLANG * ROLES && slot < (SGLANG + 1) * ROLES ? undefined : groupKey(r);
    if (key === undefined) this.addToGroup(slot, r, this.layout!);
    else if (key === null) this.sum[slot]! += v;
    else {
      this.groups ??= Array.from({ length: FAMILIES * ROLES }, () => new Map<string, number>());
      const g = this.groups[slot]!;
      g.set(key, Math.max(v, g.get(key) ?? 0));
    }
    if (this.count[slot] === 0 || v > this.max[slot]!) this.max[slot] = v;
    this.count[slot]!++;
  }

  private addToGroup(slot: number, r: PromSample, layout: DataParallelLayout): void {
    const { series, group } = dpGroupOf(r, layout);
    this.dpGroups ??= Array.from({ length: FAMILIES * ROLES }, () => new Map<string, Map<string, number>>());
    let g = this.dpGroups[slot]!.get(series);
    if (g === undefined) this.dpGroups[slot]!.set(series, (g = new Map()));
    g.set(group, Math.max(r.value, g.get(group) ?? 0));
  }

  /** The load of the lines read so far; `engine` is the hint readEngineLoad takes. */
  load(engine?: string): EngineLoad {
    const { count, max } = this;
    const sum = Float64Array.from(this.sum);
    if (this.groups) for (let slot = 0; slot < sum.length; slot++) for (const v of this.groups[slot]!.values()) sum[slot]! += v;
    if (this.dpGroups) {
      const dp = this.layout!.dp;
      for (let slot = 0; slot < sum.length; slot++) {
        for (const byGroup of this.dpGroups[slot]!.values()) {
          let s = 0;
          for (const v of byGroup.values()) s += v;
          sum[slot]! += byGroup.size < dp ? (s * dp) / byGroup.size : s;
        }
      }
    }
    const present = (f: number): boolean => {
      for (let r = 0; r < ROLES; r++) if (count[f * ROLES + r]! > 0) return true;
      return false;
    };
    let family = familyOfHint(engine);
    if (family < 0 || !present(family)) {
      family = -1;
      for (let f = 0; f < FAMILIES; f++) {
        if (present(f)) {
          family = f;
          break;
        }
      }
    }
    if (family < 0) return { ...UNKNOWN_LOAD };
    const b = family * ROLES;
    const kvSlot = count[b + KV]! > 0 ? b + KV : b + KV_FALLBACK;
    return {
      running: count[b + RUNNING]! > 0 ? sum[b + RUNNING]! : -1,
      waiting: count[b + WAITING]! > 0 ? sum[b + WAITING]! : -1,
      kvUsage: count[kvSlot]! > 0 ? max[kvSlot]! : -1,
    };
  }
}

/** The endpoint fields the poller reads; the router's endpoint table satisfies it structurally. */
export interface MetricsEndpoint {
  id: string;
  url: string;
  /**
   * `key`: the replica's engine key; an engine started with one may guard /metrics with it.
   * `data_parallel`: an SGLang replica's data-parallel shape (readEngineLoad's layout).
   */
  info: { engine: string; key?: string; data_parallel?: DataParallelLayout };
}

/** Told of each poll's start and of the engine's token counters it read (reconcile-ledger.ts). */
export interface EngineTokensSink {
  /** A poll of `ep` starts; what it returns is handed back to end(). */
  begin(ep: MetricsEndpoint): number;
  /** The answer was read whole: the engine's counters, or undefined when it had none. */
  end(ep: MetricsEndpoint, begun: number, tokens: EngineTokens | undefined): void;
}

/** Structurally a subset of a pino logger. */
export interface EngineMetricsLog {
  debug(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  info?(obj: object, msg: string): void;
}

export interface EngineMetricsPollerOptions {
  endpoints: () => readonly MetricsEndpoint[];
  /** Called once per endpoint per round, with UNKNOWN_LOAD's values when it could not be read. */
  apply: (id: string, load: EngineLoad) => void;
  intervalMs?: number;
  timeoutMs?: number;
  fetch?: typeof fetch;
  log?: EngineMetricsLog;
  /** Rounds and request timeouts run on it (default: the real clock). */
  scheduler?: Scheduler;
  /**
   * Spread each round's requests evenly over this many ms instead of sending them all at once
   * (default 0: at once). A thousand engines polled in one burst cost the thread that serves
   * prompts tens of milliseconds every round.
   */
  spreadMs?: number;
  /**
   * At most this many requests a second (default: no cap): a round over more endpoints takes
   * longer than the interval, and the rounds due meanwhile are skipped, as for a slow round.
   */
  maxPerSecond?: number;
  /** How much of an answer is read at most (default METRICS_CAPS); past a cap the load is unknown. */
  caps?: MetricsCaps;
  /** The engines' token counters, read from the same answers. */
  tokens?: EngineTokensSink;
}

/** The finest step a spread round is cut into (ms). */
const SPREAD_STEP_MS = 10;

const NO_LOG: EngineMetricsLog = { debug() {}, warn() {} };

/**
 * Polls every endpoint's /metrics each interval, all at once or spread over part of it
 * (spreadMs, maxPerSecond), each with a timeout. A round that
 * is still running when the next is due makes that one skip, so a hanging engine can never pile
 * up requests. Anything short of a readable exposition counts as unknown: the endpoint gets -1s,
 * every failure is logged at debug, and a warning goes out once per endpoint per outage. So does
 * an answer over a cap (caps) or compressed though identity was asked for: the read is cut there.
 */
export class EngineMetricsPoller {
  private readonly endpoints: () => readonly MetricsEndpoint[];
  private readonly apply: (id: string, load: EngineLoad) => void;
  private readonly intervalMs: number;
  private readonly timeoutMs: number;
  private readonly fetchFn: typeof fetch;
  private readonly log: EngineMetricsLog;
  private readonly scheduler: Scheduler;
  private readonly spreadMs: number;
  private readonly maxPerSecond: number;
  private readonly caps: MetricsCaps;
  private readonly tokens: EngineTokensSink | undefined;
  private timer: Timer | undefined;
  private round: Promise<void> | undefined;
  /** Aborts the current round's requests when stop() is called. */
  private roundAbort: AbortController | undefined;
  /** Endpoints inside an outage that has already been warned about. */
  private readonly down = new Set<string>();
  /** Bumped by stop(), so a round that outlives it applies nothing. */
  private generation = 0;
  /** Rounds not started because the previous one was still running. */
  skippedRounds = 0;

  constructor(opts: EngineMetricsPollerOptions) {
    this.endpoints = opts.endpoints;
    this.apply = opts.apply;
    this.intervalMs = opts.intervalMs ?? 1000;
    this.timeoutMs = opts.timeoutMs ?? 500;
    this.fetchFn = opts.fetch ?? fetch;
    this.log = opts.log ?? NO_LOG;
    this.scheduler = opts.scheduler ?? realScheduler;
    this.spreadMs = opts.spreadMs ?? 0;
    this.maxPerSecond = opts.maxPerSecond ?? Number.POSITIVE_INFINITY;
    this.caps = opts.caps ?? METRICS_CAPS;
    this.tokens = opts.tokens;
    for (const [k, v] of [
      ["intervalMs", this.intervalMs],
      ["timeoutMs", this.timeoutMs],
    ] as const) {
      if (!Number.isFinite(v) || v <= 0) throw new Error(`EngineMetricsPoller ${k} must be a positive number of milliseconds, got ${v}`);
    }
    if (!Number.isFinite(this.spreadMs) || this.spreadMs < 0) throw new Error(`EngineMetricsPoller spreadMs must be 0 or more milliseconds, got ${this.spreadMs}`);
    if (!(this.maxPerSecond > 0)) throw new Error(`EngineMetricsPoller maxPerSecond must be positive, got ${this.maxPerSecond}`);
  }

  /** Polls now and then every interval until stop(). Calling it twice changes nothing. */
  start(): void {
    if (this.timer !== undefined) return;
    // Metrics are no reason to keep a process alive that has nothing else to do.
    this.timer = this.scheduler.every(this.intervalMs, () => this.tick()).unref();
    this.tick();
  }

  /** Stops the timer and abandons the round in flight; nothing is applied after this returns. */
  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.generation++;
    this.roundAbort?.abort();
    // Its requests are aborted, so a later start() or pollOnce() begins afresh instead of joining it.
    this.round = undefined;
    this.roundAbort = undefined;
  }

  /** One round over every endpoint; joins the round in flight instead of starting another. */
  pollOnce(): Promise<void> {
    if (this.round !== undefined) return this.round;
    const round = this.runRound().finally(() => {
      if (this.round === round) {
        this.round = undefined;
        this.roundAbort = undefined;
      }
    });
    this.round = round;
    return round;
  }

  private tick(): void {
    if (this.round !== undefined) {
      this.skippedRounds++;
      return;
    }
    void this.pollOnce();
  }

  private async runRound(): Promise<void> {
    let list: readonly MetricsEndpoint[];
    try {
      list = this.endpoints();
    } catch (e) {
      this.log.warn({ err: failureText(e) }, "engine metrics: cannot list endpoints");
      return;
    }
    // Forget endpoints that left, so one that comes back later and fails is warned about again.
    if (this.down.size > 0) {
      const ids = new Set(list.map((ep) => ep.id));
      for (const id of this.down) if (!ids.has(id)) this.down.delete(id);
    }
    const abort = new AbortController();
    const gen = this.generation;
    this.roundAbort = abort;
    const spread = Math.max(this.spreadMs, Number.isFinite(this.maxPerSecond) ? (list.length / this.maxPerSecond) * 1000 : 0);
    const steps = Math.min(list.length, Math.floor(spread / SPREAD_STEP_MS));
    if (steps <= 1) {
      await Promise.all(list.map((ep) => this.pollEndpoint(ep, abort.signal, gen)));
      return;
    }
    // Step k starts its share of the endpoints k × spread/steps ms into the round; stop() cancels the steps not begun.
    const per = Math.ceil(list.length / steps);
    const polls: Promise<void>[] = [];
    for (let k = 0; k * per < list.length; k++) {
      const batch = list.slice(k * per, (k + 1) * per);
      const run = () => Promise.all(batch.map((ep) => this.pollEndpoint(ep, abort.signal, gen))).then(() => {});
      if (k === 0) polls.push(run());
      else polls.push(this.later((k * spread) / steps, abort.signal, run));
    }
    await Promise.all(polls);
  }

  /** `run` after `ms` on the scheduler, or nothing once `signal` aborts; settles when either is done. */
  private later(ms: number, signal: AbortSignal, run: () => Promise<void>): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = this.scheduler.after(ms, () => {
        signal.removeEventListener("abort", cancel);
        void run().then(resolve);
      }).unref();
      const cancel = () => {
        timer.cancel();
        resolve();
      };
      signal.addEventListener("abort", cancel, { once: true });
    });
  }

  private async pollEndpoint(ep: MetricsEndpoint, stopSignal: AbortSignal, gen: number): Promise<void> {
    const url = `${ep.url.replace(/\/+$/, "")}/metrics`;
    let load: EngineLoad | undefined;
    let failure: string | undefined;
    let refused: { cap: string; limit: number | string } | undefined;
    const begun = this.tokens?.begin(ep) ?? 0;
    let counted: EngineTokenReader | undefined;
    // The timeout covers the body too, and is the scheduler's: aborted with a TimeoutError, as
    // AbortSignal.timeout() would, so it reads "timed out".
    const timeout = new AbortController();
    const timer = this.scheduler.after(this.timeoutMs, () => timeout.abort(new DOMException("The operation timed out.", "TimeoutError"))).unref();
    try {
      // Plain text, not OpenMetrics: prometheus_client (vLLM, SGLang) negotiates on Accept.
      // Uncompressed: an answer compressed anyway is refused, not inflated (metrics-body.ts).
      const headers: Record<string, string> = { accept: "text/plain", "accept-encoding": "identity" };
      if (ep.info.key) headers.authorization = `Bearer ${ep.info.key}`;
      const res = await this.fetchFn(url, { headers, decompress: false, signal: AbortSignal.any([stopSignal, timeout.signal]) });
      if (!res.ok) {
        failure = `HTTP ${res.status}`;
        await res.body?.cancel().catch(() => {});
      } else {
        const reader = new LoadReader(ep.info.data_parallel);
        const tokens = this.tokens !== undefined ? new EngineTokenReader() : undefined;
        await readLinesWithin(
          res,
          this.caps,
          (text, start, end) => {
            reader.line(text, start, end);
            tokens?.line(text, start, end);
          },
          () => letIoIn(this.scheduler),
        );
        counted = tokens;
        const l = reader.load(ep.info.engine);
        if (l.running < 0 && l.waiting < 0 && l.kvUsage < 0) failure = "no vLLM, SGLang or llama.cpp load metrics in the response";
        else load = l;
      }
    } catch (e) {
      failure = failureText(e);
      if (e instanceof MetricsRefused) refused = { cap: e.cap, limit: e.limit };
    } finally {
      timer.cancel();
    }
    if (gen !== this.generation) return;
    if (counted !== undefined) this.safeTokens(ep, begun, counted.tokens(ep.info.engine));
    if (load !== undefined) {
      if (this.down.delete(ep.id)) {
        // Called as methods: pino's need their `this`.
        if (this.log.info) this.log.info({ endpoint: ep.id, url }, "engine metrics readable again");
        else this.log.debug({ endpoint: ep.id, url }, "engine metrics readable again");
      }
      this.safeApply(ep.id, load);
      return;
    }
    const fields = { endpoint: ep.id, engine: ep.info.engine, url, err: failure, ...refused };
    this.log.debug(fields, "engine metrics unavailable; load unknown");
    if (!this.down.has(ep.id)) {
      this.down.add(ep.id);
      this.log.warn(fields, "engine metrics unavailable; routing this replica without load figures until they return");
    }
    this.safeApply(ep.id, { ...UNKNOWN_LOAD });
  }

  private safeTokens(ep: MetricsEndpoint, begun: number, tokens: EngineTokens | undefined): void {
    try {
      this.tokens!.end(ep, begun, tokens);
    } catch (e) {
      this.log.warn({ endpoint: ep.id, err: failureText(e) }, "engine metrics: reading the token counters failed");
    }
  }

  private safeApply(id: string, load: EngineLoad): void {
    try {
      this.apply(id, load);
    } catch (e) {
      this.log.warn({ endpoint: id, err: failureText(e) }, "engine metrics: applying a load figure failed");
    }
  }
}

/**
 * lib's errorText, but an error keeps its class name in front ("TypeError: fetch failed"): the
 * poller's log lines have always named it, and it is most of what tells a refused connection
 * from a DNS failure or a bug in apply.
 */
function failureText(e: unknown): string {
  return e instanceof Error && e.name !== "TimeoutError" && !(e instanceof MetricsRefused) ? `${e.name}: ${e.message}` : errorText(e);
}
