// What the control plane and the router tell each other, in process today and over a wire
// once they are split: the endpoint list and catalog (control → router), and last-used times,
// in-flight counts and demand (router → control). Plain types; the two sides never import
// each other, only this file.

import type { DataParallelLayout } from "./engine-layout";

export interface EndpointInfo {
  /** Replica id. */
  id: string;
  /** Base URL without a trailing slash. */
  url: string;
  /** The model's name first, then its aliases: clients may use any of them. */
  models: string[];
  engine: string;
  pool: string;
  weight: number;
  /** The profile's priority tier; lower is preferred. */
  priority: number;
  /**
   * The profile's max_inflight: requests this replica is sent at once, the rest waiting in the
   * router's fair queue while every replica of the model is at its bound. Absent: no bound.
   */
  max_inflight?: number;
  /**
   * The replica's own engine key: the router presents it as `Authorization: Bearer <key>` to
   * the engine, in place of whatever the client sent. Absent for engines started without one.
   */
  key?: string;
  /**
   * An SGLang replica with data parallelism: its groups and how their ranks are numbered, which
   * the router needs to add up the groups' queues from the engine's /metrics (older SGLang
   * releases label them so that not every group can be told apart). Absent: one group.
   */
  data_parallel?: DataParallelLayout;
  /** The GPUs the replica holds (all its shards'): its requests share them for GPU-seconds. Absent: none metered. */
  gpus?: number;
}

/** A catalog model as the router needs it: to list it, to tell unknown from not running. */
export interface CatalogEntry {
  name: string;
  aliases: string[];
  on_demand: boolean;
  pool: string;
  /** Created time, seconds since the epoch, for /v1/models. */
  created: number;
  /**
   * How long the control plane gives a replica of this model to start before it gives up on it
   * (its profiles' longest start timeout plus the control plane's margin), ms: the router holds a
   * request for a cold on-demand model up to this, or its own cold-start timeout when longer.
   * Absent: the router's cold-start timeout alone.
   */
  start_timeout_ms?: number;
  /**
   * Set when waiting will not bring a replica: the model can never run on this fleet (`never`),
   * or it is parked after failing every start, or crashing in a loop (`parked`). The router
   * answers at once with this reason in a way no client retries, and leaves the model out of
   * /v1/models.
   */
  unavailable?: { kind: "never" | "parked"; reason: string };
  /**
   * Set while a replica of this model is starting (its oldest, when several): the node its
   * engine runs on (the leader's, for a multi-node replica) and since when (ms since epoch). The
   * router names the node in the progress comments of a streamed request it holds for it.
   */
  starting?: { node: string; since: number; fetching?: string };
}

/**
 * What a key or a team may use. Absent means no limit. Budgets are per period (budgetPeriod,
 * month when not given), reserved before a request goes out and settled from its real usage.
 */
export interface UsageLimits {
  /** Requests per minute. */
  rpm?: number;
  /** Tokens (prompt and completion) per minute. */
  tpm?: number;
  /** Requests in flight at once. */
  maxConcurrent?: number;
  /** Tokens per budget period. */
  budgetTokens?: number;
  /** GPU-hours per budget period (a request's share of its replica's GPUs while it ran). */
  budgetGpuHours?: number;
  budgetPeriod?: "day" | "week" | "month";
}

/** The router's admission tiers for a key's requests: interactive ones are admitted before batch ones. */
export const KEY_TIERS = ["interactive", "batch"] as const;
export type KeyTier = (typeof KEY_TIERS)[number];

/** A client API key as the router checks it: never the key itself, only its SHA-256 (hex). */
export interface ApiKeyEntry {
  name: string;
  sha256: string;
  pool: string | null;
  /** The team the key belongs to: held to the team's limits too, shared by its keys. */
  team?: string;
  /** The models (names or aliases) the key may use; absent: every model its pool offers. */
  models?: string[];
  /** When the key stops working (ms since epoch). */
  expiresAt?: number;
  /** Its admission tier; interactive when not given. */
  tier?: KeyTier;
  /** The key's own limits. */
  limits?: UsageLimits;
  /** Its team's limits, shared by all the team's keys. */
  teamLimits?: UsageLimits;
}

/** Control → router: replaces the router's table wholesale. */
export interface EndpointSink {
  setEndpoints(endpoints: EndpointInfo[]): void;
  setCatalog(models: CatalogEntry[]): void;
  setApiKeys(keys: ApiKeyEntry[]): void;
  /** The period's stored spend of every key and team (budget.ts); absent: a router that enforces no budgets. */
  setBudgetSpent?(spent: BudgetSpent): void;
  /** Several control planes: this router's share of each limited key's and team's rpm and tpm (control/limit-shares.ts). Absent: no sharing. */
  setLimitShares?(s: LimitShares): void;
}

/** A limit's name in limit shares: `key:rpm:alice`, `team:tpm:research`, `key:con:alice` (max-concurrent). */
export function limitItem(of: "key" | "team", limit: "rpm" | "tpm" | "con", name: string): string {
  return `${of}:${limit}:${name}`;
}

/**
 * Control → router: the router's share (0..1) of each per-minute allowance, by item
 * (`key:rpm:NAME`, `team:tpm:NAME`), `fallback` for the allowances not listed. `awaiting`: shares
 * are coming but not computed yet (a head node that shares its limits, just started): a bucket
 * made meanwhile is filled to its first share when that comes, not to the whole limit.
 */
export interface LimitShares {
  shares: readonly (readonly [string, number])[];
  fallback: number;
  /** Its slots (whole requests in flight) of each max-concurrent, by `con` item; one not listed: the limit × fallback, rounded down. */
  slots?: readonly (readonly [string, number])[];
  awaiting?: boolean;
}

/**
 * Control → router: what the store's usage ledger holds of each key and team since the start of
 * each budget period (UTC day, week from Monday, month), read after the rows the router handed
 * over up to ledger take `through` (UsageSource.ledgerGen) were written, so the router adds only
 * what it counted after that.
 */
export interface BudgetSpent {
  through: number;
  /** The start of the day, the week and the month (ms since epoch) the figures are for, in that order. */
  starts: [number, number, number];
  keys: BudgetFigure[];
  teams: BudgetFigure[];
}

/** One key's or team's spend since each of BudgetSpent.starts: tokens (prompt and completion) and GPU-seconds. */
export interface BudgetFigure {
  name: string;
  tokens: [number, number, number];
  gpu_seconds: [number, number, number];
}

/**
 * Router → control, read once a tick: when each replica was last sent a request (ms since
 * epoch; absent means unknown, never idle) and how many requests each model has in flight.
 * Snapshots, not an event stream: per-request notification would cost per request and carry
 * no more than the newest stamp.
 */
export interface UsageSource {
  lastUsed(): ReadonlyMap<string, number>;
  inflightByModel(): ReadonlyMap<string, number>;
  /**
   * Replica id → requests in flight (an id absent: none), endpoints removed mid-request
   * included: a roll stops a draining replica once it has none. Absent, or undefined: not known.
   */
  inflightByReplica?(): ReadonlyMap<string, number> | undefined;
  /**
   * Fetches fresh snapshots when the router lives elsewhere (its own thread): the control loop
   * awaits this before it reads the two above. Absent for a router in the same thread.
   */
  refresh?(): Promise<void>;
  /**
   * The ledger's rows counted since the last call, handed over and forgotten by the router
   * (deltas: whoever takes them adds them up). Absent: a router that keeps no ledger.
   */
  takeLedger?(): UsageRow[];
  /**
   * The number of the latest ledger take whose rows reached this side (takeLedger): the control
   * plane says up to which take its store read of the budgets' spend holds them. Absent: no budgets.
   */
  ledgerGen?(): number;
  /**
   * Since when the router has watched without a gap (ms since epoch): a router that restarted
   * (its thread replaced) has lost its stamps, so nothing is known idle for longer than this.
   * Absent: since the process started.
   */
  watchingSince?(): number;
  /**
   * What each limited key and team has used of its limits now (admission.ts), as of the last
   * refresh for a router on its own thread. Absent: the router counts no limits.
   */
  limitUse?(): readonly LimitUseEntry[];
}

/** A key's or a team's use of its limits on one router: requests and tokens this minute, requests in flight. */
export interface LimitUseEntry {
  of: "key" | "team";
  name: string;
  /** Of the requests-per-minute allowance: how much is spent (a minute's worth is the limit). */
  rpm?: number;
  /** Of the tokens-per-minute allowance: how much is spent. */
  tpm?: number;
  /** Requests in flight. */
  concurrent: number;
  /** Of the token budget: spent this period and reserved by requests in flight (budget.ts). */
  budget_tokens?: number;
  /** Of the GPU-hour budget: spent this period and reserved by requests in flight. */
  budget_gpu_hours?: number;
  /** Requests asked since the router started, admitted or refused: several routers share a limit by this demand. */
  askedRequests?: number;
  /** Tokens asked likewise (prompts as estimated, admitted or refused, and completions counted). */
  askedTokens?: number;
  /** Of those, the requests admitted and the tokens they spent: a router using its share keeps it. */
  usedRequests?: number;
  usedTokens?: number;
  /** Its max-concurrent as set, when it has one (the router's own slots of it may be fewer). */
  maxConcurrent?: number;
  /** Its rpm and tpm as set (what the router holds of them may be less: its share). */
  rpmLimit?: number;
  tpmLimit?: number;
}

/**
 * One row of the usage ledger: what one key (by name, with its team; "" for both without keys)
 * used of one model (its canonical name) in one hour (ms since epoch of the hour's start).
 * Tokens are the engine's own usage; a stream cut short counts what was streamed.
 */
export interface UsageRow {
  team: string;
  key: string;
  model: string;
  hour: number;
  requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens: number;
  /** Requests that failed, all kinds: the engine's or the router's 4xx and 5xx, and refusals by a limit. */
  errors: number;
  errors_4xx: number;
  errors_5xx: number;
  /** Refused by the key's or its team's limits before an engine was touched. */
  refused: number;
  /** Streams cut by the client or the engine before their end. */
  aborted: number;
  /** The requests' shares of their replicas' GPUs while they held a slot there (gpu-time.ts). */
  gpu_seconds: number;
}

/** The counters of a UsageRow, in the order they are added up. */
export const USAGE_COUNTERS = ["requests", "prompt_tokens", "completion_tokens", "cached_tokens", "errors", "errors_4xx", "errors_5xx", "refused", "aborted", "gpu_seconds"] as const;

/**
 * Control → router: the fleet's gauges (nodes, GPUs, replicas, idleness), already in the
 * Prometheus text exposition format, for the router to serve on its /metrics after its own
 * series: one scrape target has everything. Replaces the last text wholesale.
 */
export interface FleetMetricsSink {
  setFleetMetrics(text: string): void;
}

/** Router → control: a client asked for this model (name or alias) and nothing serves it. */
export interface DemandSink {
  requestModel(nameOrAlias: string): void;
}

/**
 * Upper bounds (ms) of the buckets the router counts each request's time to first byte in; the
 * last count of `ModelTraffic.ttft_counts` is for everything slower than the last bound.
 */
export const TTFT_BUCKETS_MS = [25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000] as const;

/**
 * What the router has seen of one model (its canonical name) since it started: cumulative
 * counters, so a reader takes rates and windowed percentiles from the difference of two
 * snapshots; and the two gauges as they are now.
 */
export interface ModelTraffic {
  model: string;
  /** Requests answered (any status), and of those the ones that failed (status ≥ 500 or no answer). */
  requests: number;
  errors: number;
  /** Completion tokens the engines reported (usage) or the router counted in streamed chunks. */
  output_tokens: number;
  /** Requests per TTFT bucket (length TTFT_BUCKETS_MS.length + 1), cumulative. */
  ttft_counts: number[];
  /** Requests being proxied now, and requests held for a replica (cold start) now. */
  inflight: number;
  queued: number;
}

/** Router → control (or to whoever draws it): the traffic figures, per model. */
export interface TrafficSource {
  /** A snapshot: fresh from the router's thread when it runs on one. */
  traffic(): Promise<ModelTraffic[]>;
}
