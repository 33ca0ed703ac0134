// The control plane's tables in PostgreSQL: the same tables, columns, keys and indexes as the
// SQLite definition in ../schema.ts, in PostgreSQL's types (test/unit/pg-schema.test.ts checks
// the two equal). Times in ms since epoch are bigint read as JS numbers; JSON is jsonb with the
// same TypeScript types; booleans are boolean. drizzle-kit generates drizzle/pg/ from this file
// (`npm run db:generate`); nothing outside src/store touches drizzle.

import { bigint, bigserial, boolean, doublePrecision, index, integer, jsonb, pgTable, primaryKey, text } from "drizzle-orm/pg-core";

const ms = (name: string) => bigint(name, { mode: "number" });
const json = <T>(name: string) => jsonb(name).$type<T>();

export const nodes = pgTable("nodes", {
  name: text("name").primaryKey(),
  address: text("address").notNull(),
  labels: json<Record<string, string>>("labels").notNull(),
  fabrics: json<string[]>("fabrics").notNull(),
  /** See ../schema.ts. */
  adminState: text("admin_state", { enum: ["none", "cordoned", "draining", "pending"] }).notNull().default("none"),
  lastHeartbeat: ms("last_heartbeat").notNull(),
  agentVersion: text("agent_version").notNull(),
  agentProtocol: integer("agent_protocol"),
  registeredAt: ms("registered_at").notNull(),
  credentialHash: text("credential_hash").unique(),
});

export const nodeAddresses = pgTable("node_addresses", {
  node: text("node").primaryKey(),
  address: text("address").notNull(),
  createdAt: ms("created_at").notNull(),
});

export const gpus = pgTable(
  "gpus",
  {
    node: text("node").notNull().references(() => nodes.name, { onDelete: "cascade" }),
    index: integer("idx").notNull(),
    uuid: text("uuid").notNull(),
    name: text("name").notNull(),
    class: text("class").notNull(),
    memoryMib: integer("memory_mib").notNull(),
    healthy: boolean("healthy").notNull(),
    parent: text("parent"),
  },
  (t) => [primaryKey({ columns: [t.node, t.index] })],
);

export const weights = pgTable(
  "weights",
  {
    node: text("node").notNull().references(() => nodes.name, { onDelete: "cascade" }),
    model: text("model").notNull(),
  },
  (t) => [primaryKey({ columns: [t.node, t.model] })],
);

export const models = pgTable("models", {
  name: text("name").primaryKey(),
  spec: jsonb("spec").notNull(),
  revision: integer("revision").notNull().default(1),
  createdAt: ms("created_at").notNull(),
  updatedAt: ms("updated_at").notNull(),
});

export const modelAliases = pgTable("model_aliases", {
  alias: text("alias").primaryKey(),
  model: text("model").notNull().references(() => models.name, { onDelete: "cascade" }),
});

export const replicas = pgTable(
  "replicas",
  {
    id: text("id").primaryKey(),
    model: text("model").notNull(),
    profile: text("profile").notNull(),
    state: text("state", { enum: ["starting", "ready", "draining", "failed"] }).notNull(),
    shards: json<{ node: string; gpus: number[] }[]>("shards").notNull(),
    port: integer("port"),
    endpoint: text("endpoint"),
    failures: integer("failures").notNull().default(0),
    error: text("error"),
    createdAt: ms("created_at").notNull(),
    updatedAt: ms("updated_at").notNull(),
    readyAt: ms("ready_at"),
    launch: text("launch"),
    drainUntil: ms("drain_until"),
  },
  (t) => [index("replicas_model").on(t.model)],
);

export const modelState = pgTable("model_state", {
  model: text("model").primaryKey(),
  failures: integer("failures").notNull().default(0),
  crashes: integer("crashes").notNull().default(0),
  parked: boolean("parked").notNull().default(false),
  reason: text("reason"),
  lastFailureAt: ms("last_failure_at"),
  lastRequestedAt: ms("last_requested_at"),
  scaleTarget: integer("scale_target"),
  unplaceableReason: text("unplaceable_reason"),
});

export const events = pgTable(
  "events",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    at: ms("at").notNull(),
    kind: text("kind").notNull(),
    subject: text("subject").notNull(),
    message: text("message").notNull(),
    data: jsonb("data"),
  },
  (t) => [index("events_at").on(t.at)],
);

export const meta = pgTable("meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
});

export const apiKeys = pgTable("api_keys", {
  name: text("name").primaryKey(),
  hash: text("hash").notNull().unique(),
  pool: text("pool"),
  createdAt: ms("created_at").notNull(),
  team: text("team"),
  models: text("models"),
  expiresAt: ms("expires_at"),
  updatedAt: ms("updated_at"),
  ...limitColumns(),
});

function limitColumns() {
  return {
    rpm: bigint("rpm", { mode: "number" }),
    tpm: bigint("tpm", { mode: "number" }),
    maxConcurrent: bigint("max_concurrent", { mode: "number" }),
    budgetTokens: bigint("budget_tokens", { mode: "number" }),
    budgetGpuHours: doublePrecision("budget_gpu_hours"),
    budgetPeriod: text("budget_period"),
    tier: text("tier"),
  };
}

export const teams = pgTable("teams", {
  name: text("name").primaryKey(),
  ...limitColumns(),
  createdAt: ms("created_at").notNull(),
  updatedAt: ms("updated_at").notNull(),
});

export const leases = pgTable("leases", {
  name: text("name").primaryKey(),
  holder: text("holder").notNull(),
  epoch: integer("epoch").notNull(),
  expiresAt: ms("expires_at").notNull(),
});

export const controlPlanes = pgTable("control_planes", {
  name: text("name").primaryKey(),
  adminUrl: text("admin_url").notNull(),
  routerUrl: text("router_url").notNull(),
  startedAt: ms("started_at").notNull(),
  seenAt: ms("seen_at").notNull(),
  version: text("version"),
  protocol: integer("protocol"),
});

export const routerUsage = pgTable("router_usage", {
  router: text("router").primaryKey(),
  watchingSince: ms("watching_since").notNull(),
  lastUsed: json<Record<string, number>>("last_used").notNull(),
  reportedAt: ms("reported_at").notNull(),
});

/** Each router's share of the limits, and its demand (see the SQLite schema). */
export const limitShares = pgTable("limit_shares", {
  router: text("router").primaryKey(),
  demand: json<Record<string, number>>("demand").notNull(),
  shares: json<Record<string, number>>("shares").notNull(),
  reportedAt: ms("reported_at").notNull(),
});

/** The usage ledger (see the SQLite schema). */
export const usageHours = pgTable(
  "usage_hours",
  {
    team: text("team").notNull(),
    key: text("key").notNull(),
    model: text("model").notNull(),
    hour: ms("hour").notNull(),
    requests: bigint("requests", { mode: "number" }).notNull().default(0),
    promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull().default(0),
    completionTokens: bigint("completion_tokens", { mode: "number" }).notNull().default(0),
    cachedTokens: bigint("cached_tokens", { mode: "number" }).notNull().default(0),
    errors: bigint("errors", { mode: "number" }).notNull().default(0),
    errors4xx: bigint("errors_4xx", { mode: "number" }).notNull().default(0),
    errors5xx: bigint("errors_5xx", { mode: "number" }).notNull().default(0),
    refused: bigint("refused", { mode: "number" }).notNull().default(0),
    aborted: bigint("aborted", { mode: "number" }).notNull().default(0),
    gpuSeconds: doublePrecision("gpu_seconds").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.team, t.key, t.model, t.hour] }), index("usage_hours_hour").on(t.hour)],
);

export const nodeReports = pgTable("node_reports", {
  node: text("node").primaryKey(),
  report: text("report").notNull(),
  at: ms("at").notNull(),
});

/** See ../schema.ts. */
export const changes = pgTable("changes", {
  seq: ms("seq").primaryKey(),
  kind: text("kind", { enum: ["node", "model", "replica", "key"] }).notNull(),
  key: text("key").notNull(),
});

export const changeCounter = pgTable("change_counter", {
  id: integer("id").primaryKey(),
  seq: ms("seq").notNull(),
});

/** Pulls and removals of weights not done yet (see ../schema.ts). */
export const weightsOrders = pgTable(
  "weights_orders",
  {
    node: text("node").notNull(),
    repo: text("repo").notNull(),
    revision: text("revision").notNull(),
    kind: text("kind", { enum: ["pull", "remove"] }).notNull(),
    at: ms("at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.node, t.repo, t.revision] })],
);
