// The messages between a head node's main thread (the control plane) and the router's own
// thread: the EndpointSink, UsageSource, TrafficSource and DemandSink contracts of ./routing.ts as messages.
// Each side validates what arrives with these schemas; a message that fails is logged and dropped.
// The endpoint list, the catalog and the traffic figures go as changes (app/list-delta.ts).

import { z } from "zod";
import { ReplicaDriftSchema } from "./ledger-check";
import { KEY_TIERS, TTFT_BUCKETS_MS } from "./routing";

const Endpoint = z.object({
  id: z.string(),
  url: z.string(),
  models: z.array(z.string()),
  engine: z.string(),
  pool: z.string(),
  weight: z.number(),
  priority: z.number(),
  max_inflight: z.number().int().min(1).optional(),
  key: z.string().optional(),
  data_parallel: z.object({ dp: z.number().int().min(1), tp: z.number().int().min(1), dp_attention: z.boolean() }).optional(),
  gpus: z.number().int().min(1).optional(),
});

const Catalog = z.object({
  name: z.string(),
  aliases: z.array(z.string()),
  on_demand: z.boolean(),
  pool: z.string(),
  created: z.number(),
  start_timeout_ms: z.number().optional(),
  unavailable: z.object({ kind: z.enum(["never", "parked"]), reason: z.string() }).optional(),
  starting: z.object({ node: z.string(), since: z.number(), fetching: z.string().optional() }).optional(),
});

const Limits = z.object({
  rpm: z.number().optional(),
  tpm: z.number().optional(),
  maxConcurrent: z.number().optional(),
  budgetTokens: z.number().optional(),
  budgetGpuHours: z.number().optional(),
  budgetPeriod: z.enum(["day", "week", "month"]).optional(),
});

const ApiKey = z.object({
  name: z.string(),
  sha256: z.string(),
  pool: z.string().nullable(),
  team: z.string().optional(),
  models: z.array(z.string()).optional(),
  expiresAt: z.number().optional(),
  tier: z.enum(KEY_TIERS).optional(),
  limits: Limits.optional(),
  teamLimits: Limits.optional(),
});

const Triple = z.tuple([z.number(), z.number(), z.number()]);
const BudgetFigure = z.object({ name: z.string(), tokens: Triple, gpu_seconds: Triple });

/** Control → router. */
export const ToRouter = z.discriminatedUnion("type", [
  /** EndpointSink.setEndpoints, as changes (app/list-delta.ts): every endpoint id in order, whole only those that changed. */
  z.object({ type: z.literal("endpoints"), keys: z.array(z.string()), changed: z.array(Endpoint) }),
  /** EndpointSink.setCatalog, as changes: every model name in order, whole only the entries that changed. */
  z.object({ type: z.literal("catalog"), keys: z.array(z.string()), changed: z.array(Catalog) }),
  z.object({ type: z.literal("api_keys"), keys: z.array(ApiKey) }),
  /** FleetMetricsSink.setFleetMetrics: the fleet gauges' exposition text. */
  z.object({ type: z.literal("fleet_metrics"), text: z.string() }),
  /** EndpointSink.setBudgetSpent: the period's stored spend of every key and team. */
  z.object({ type: z.literal("budget_spent"), through: z.number(), starts: Triple, keys: z.array(BudgetFigure), teams: z.array(BudgetFigure) }),
  /** EndpointSink.setLimitShares: this router's share of each limited key's and team's rpm and tpm. */
  z.object({
    type: z.literal("limit_shares"),
    shares: z.array(z.tuple([z.string(), z.number().min(0).max(1)])),
    fallback: z.number().min(0).max(1),
    slots: z.array(z.tuple([z.string(), z.number().int().min(0)])).optional(),
    awaiting: z.boolean().optional(),
  }),
  /** Asks for a usage snapshot; the router answers with a `usage` of the same id. */
  z.object({ type: z.literal("usage_request"), id: z.number().int() }),
  /** Asks for the traffic figures; the router answers with a `traffic` of the same id. */
  z.object({ type: z.literal("traffic_request"), id: z.number().int() }),
  /** Asks for the ledger's reconciliation with the engines' counters; answered by a `ledger_check` of the same id. */
  z.object({ type: z.literal("ledger_check_request"), id: z.number().int() }),
  z.object({ type: z.literal("stop") }),
]);
export type ToRouter = z.infer<typeof ToRouter>;

const Entries = z.array(z.tuple([z.string(), z.number()]));
const Count = z.number().int().nonnegative();

/** One model's ModelTraffic. */
const Traffic = z.object({
  model: z.string(),
  requests: Count,
  errors: Count,
  output_tokens: Count,
  ttft_counts: z.array(Count).length(TTFT_BUCKETS_MS.length + 1),
  inflight: Count,
  queued: Count,
});

/** One UsageRow of the router's ledger. */
const UsageRowSchema = z.object({
  team: z.string(),
  key: z.string(),
  model: z.string(),
  hour: z.number().int(),
  requests: Count,
  prompt_tokens: Count,
  completion_tokens: Count,
  cached_tokens: Count,
  errors: Count,
  errors_4xx: Count,
  errors_5xx: Count,
  refused: Count,
  aborted: Count,
  gpu_seconds: z.number().nonnegative(),
});

/** Router → control. */
export const FromRouter = z.discriminatedUnion("type", [
  z.object({ type: z.literal("started"), port: z.number().int() }),
  /** The router could not listen: the listener's own message. */
  z.object({ type: z.literal("failed"), error: z.string() }),
  /** UsageSource's snapshots, each limited key's and team's use, and the ledger's rows since the last usage answer (deltas: the thread forgets them). */
  z.object({
    type: z.literal("usage"),
    id: z.number().int(),
    lastUsed: Entries,
    inflightByModel: Entries,
    /** Replicas with requests in flight (a roll stops a draining one once it has none); absent from an older router. */
    inflightByReplica: Entries.optional(),
    limitUse: z
      .array(z.object({ of: z.enum(["key", "team"]), name: z.string(), rpm: z.number().optional(), tpm: z.number().optional(), concurrent: z.number(), budget_tokens: z.number().optional(), budget_gpu_hours: z.number().optional(), askedRequests: z.number().optional(), askedTokens: z.number().optional(), usedRequests: z.number().optional(), usedTokens: z.number().optional(), maxConcurrent: z.number().optional(), rpmLimit: z.number().optional(), tpmLimit: z.number().optional() }))
      .optional(),
    ledger: z.array(UsageRowSchema).optional(),
    /** The number of the ledger take these rows are (UsageSource.ledgerGen). */
    ledger_gen: z.number().optional(),
  }),
  /** TrafficSource.traffic(), as changes: every model's name in order, the figures of those that changed since the last answer. */
  z.object({ type: z.literal("traffic"), id: z.number().int(), keys: z.array(z.string()), changed: z.array(Traffic) }),
  /** Per replica, the ledger against the engine's own counters (LedgerCheckSource). */
  z.object({ type: z.literal("ledger_check"), id: z.number().int(), replicas: z.array(ReplicaDriftSchema) }),
  /** DemandSink.requestModel, as a message: nothing answers it. */
  z.object({ type: z.literal("demand"), model: z.string() }),
  z.object({ type: z.literal("stopped") }),
]);
export type FromRouter = z.infer<typeof FromRouter>;
