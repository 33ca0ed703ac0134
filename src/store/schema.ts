// The control plane's tables. drizzle-kit generates the SQL migrations in drizzle/ from this
// file; nothing outside src/store touches drizzle.


import { index, integer, primaryKey, real, sqliteTable, text } from "drizzle-orm/sqlite-core";

const json = <T>(name: string) => text(name, { mode: "json" }).$type<T>();

export const nodes = sqliteTable("nodes", {
  name: text("name").primaryKey(),
  address: text("address").notNull(),
  labels: json<Record<string, string>>("labels").notNull(),
  fabrics: json<string[]>("fabrics").notNull(),
  /**
   * What an operator asked for; reachability is derived from last_heartbeat at read time.
   * "pending": joined under `serve --approve-nodes` and not yet approved (`llmgw nodes approve`).
   */
  adminState: text("admin_state", { enum: ["none", "cordoned", "draining", "pending"] }).notNull().default("none"),
  lastHeartbeat: integer("last_heartbeat").notNull(),
  agentVersion: text("agent_version").notNull(),
  /** The protocol its agent speaks (protocol/version.ts); null: an agent that did not say, protocol 1. */
  agentProtocol: integer("agent_protocol"),
  registeredAt: integer("registered_at").notNull(),
  /**
   * SHA-256 (hex) of the node's own credential, handed out once on its first heartbeat; the
   * credential itself is never stored. Null only for a node that joined before credentials
   * existed, which claims one with its next join-token heartbeat.
   */
  credentialHash: text("credential_hash").unique(),
});

/**
 * Data-plane addresses an operator allowed a node to report although its heartbeats come from
 * elsewhere (`llmgw nodes allow-address`). Keyed by name, not tied to a node row, so an address
 * can be allowed before the node first joins.
 */
export const nodeAddresses = sqliteTable("node_addresses", {
  node: text("node").primaryKey(),
  address: text("address").notNull(),
  createdAt: integer("created_at").notNull(),
});

export const gpus = sqliteTable(
  "gpus",
  {
    node: text("node").notNull().references(() => nodes.name, { onDelete: "cascade" }),
    index: integer("idx").notNull(),
    uuid: text("uuid").notNull(),
    name: text("name").notNull(),
    class: text("class").notNull(),
    memoryMib: integer("memory_mib").notNull(),
    healthy: integer("healthy", { mode: "boolean" }).notNull(),
    /** The physical card's uuid for a MIG instance; null for a whole card. */
    parent: text("parent"),
  },
  (t) => [primaryKey({ columns: [t.node, t.index] })],
);

export const weights = sqliteTable(
  "weights",
  {
    node: text("node").notNull().references(() => nodes.name, { onDelete: "cascade" }),
    model: text("model").notNull(),
  },
  (t) => [primaryKey({ columns: [t.node, t.model] })],
);

export const models = sqliteTable("models", {
  name: text("name").primaryKey(),
  /** The validated ModelSpec as JSON: the catalog entry exactly as applied, defaults filled. */
  spec: text("spec", { mode: "json" }).notNull(),
  /** Bumped on every change; a new revision unparks. */
  revision: integer("revision").notNull().default(1),
  createdAt: integer("created_at").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

/** One row per alias, so the database itself refuses an alias owned twice. */
export const modelAliases = sqliteTable("model_aliases", {
  alias: text("alias").primaryKey(),
  model: text("model").notNull().references(() => models.name, { onDelete: "cascade" }),
});

export const replicas = sqliteTable(
  "replicas",
  {
    id: text("id").primaryKey(),
    model: text("model").notNull(),
    profile: text("profile").notNull(),
    state: text("state", { enum: ["starting", "ready", "draining", "failed"] }).notNull(),
    /** [{node, gpus:[indices]}]; shard 0 is the leader and serves HTTP. */
    shards: json<{ node: string; gpus: number[] }[]>("shards").notNull(),
    port: integer("port"),
    endpoint: text("endpoint"),
    failures: integer("failures").notNull().default(0),
    error: text("error"),
    createdAt: integer("created_at").notNull(),
    updatedAt: integer("updated_at").notNull(),
    readyAt: integer("ready_at"),
    launch: text("launch"),
    drainUntil: integer("drain_until"),
  },
  (t) => [index("replicas_model").on(t.model)],
);

/** Per-model state the reconciler keeps between ticks: failures, parking, demand, placement. */
export const modelState = sqliteTable("model_state", {
  model: text("model").primaryKey(),
  failures: integer("failures").notNull().default(0),
  /** Crashes soon after ready in a row (control/reconcile/crashes.ts). */
  crashes: integer("crashes").notNull().default(0),
  parked: integer("parked", { mode: "boolean" }).notNull().default(false),
  reason: text("reason"),
  lastFailureAt: integer("last_failure_at"),
  /** Last time a client asked for this model (on-demand models want a replica until idle_timeout). */
  lastRequestedAt: integer("last_requested_at"),
  /** Replicas the load-based scaler wants, between min and max; null = no signal. */
  scaleTarget: integer("scale_target"),
  /** Why placement could not give it what it wants, as last computed; null when it could. */
  unplaceableReason: text("unplaceable_reason"),
});

export const events = sqliteTable(
  "events",
  {
    id: integer("id").primaryKey({ autoIncrement: true }),
    at: integer("at").notNull(),
    kind: text("kind").notNull(),
    subject: text("subject").notNull(),
    message: text("message").notNull(),
    data: text("data", { mode: "json" }),
  },
  (t) => [index("events_at").on(t.at)],
);

export const meta = sqliteTable("meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
});


/** Client API keys for the router: only a SHA-256 of each key is kept; the key is shown once. */
export const apiKeys = sqliteTable("api_keys", {
  name: text("name").primaryKey(),
  hash: text("hash").notNull().unique(),
  /** When set, requests with this key see only this pool's models. */
  pool: text("pool"),
  createdAt: integer("created_at").notNull(),
  /** A team's name (teams.name; kept as text, the control plane checks it exists). */
  team: text("team"),
  /** JSON array of model names or aliases; null: every model of its pool. */
  models: text("models"),
  expiresAt: integer("expires_at"),
  updatedAt: integer("updated_at"),
  ...limitColumns(),
});

/** What a key or a team may use (null: no limit) and its admission tier. */
function limitColumns() {
  return {
    rpm: integer("rpm"),
    tpm: integer("tpm"),
    maxConcurrent: integer("max_concurrent"),
    budgetTokens: integer("budget_tokens"),
    budgetGpuHours: real("budget_gpu_hours"),
    budgetPeriod: text("budget_period"),
    tier: text("tier"),
  };
}

/** Teams: limits their keys share. */
export const teams = sqliteTable("teams", {
  name: text("name").primaryKey(),
  ...limitColumns(),
  createdAt: integer("created_at").notNull(),
  updatedAt: integer("updated_at").notNull(),
});

// ---- several control planes on one store. Times here are the database's clock (ms since
// epoch), so control planes on machines whose clocks differ still agree on who leads.

/** The leader lease: one row ("leader"), its holder and the fencing epoch that rises with each new leader. */
export const leases = sqliteTable("leases", {
  name: text("name").primaryKey(),
  holder: text("holder").notNull(),
  epoch: integer("epoch").notNull(),
  expiresAt: integer("expires_at").notNull(),
});

/** Every control plane that registered, and when it last said it was alive. */
export const controlPlanes = sqliteTable("control_planes", {
  name: text("name").primaryKey(),
  adminUrl: text("admin_url").notNull(),
  routerUrl: text("router_url").notNull(),
  startedAt: integer("started_at").notNull(),
  seenAt: integer("seen_at").notNull(),
  /** Its release and protocol (protocol/version.ts); null from a release before they were kept. */
  version: text("version"),
  protocol: integer("protocol"),
});

/** Each router's last-used map, as it last reported it; the leader merges them (newest wins). */
export const routerUsage = sqliteTable("router_usage", {
  router: text("router").primaryKey(),
  watchingSince: integer("watching_since").notNull(),
  /** {replica id: ms since epoch}. */
  lastUsed: json<Record<string, number>>("last_used").notNull(),
  reportedAt: integer("reported_at").notNull(),
});

/**
 * Each router's share of every limited key's and team's per-minute allowance (limit-shares.ts),
 * with the demand it was computed from: {item: number} each, item as limit-shares.ts names it.
 * A router's control plane rewrites its row every tick; rows not rewritten lately are of routers gone.
 */
export const limitShares = sqliteTable("limit_shares", {
  router: text("router").primaryKey(),
  demand: json<Record<string, number>>("demand").notNull(),
  shares: json<Record<string, number>>("shares").notNull(),
  reportedAt: integer("reported_at").notNull(),
});

/**
 * The usage ledger: per team, key (by name; "" for both without keys), model and hour (ms since
 * epoch of its start), what the routers counted. Each control plane adds its router's counts
 * once a tick (additive upserts: several writers are safe); the leader deletes rows past the
 * retention.
 */
export const usageHours = sqliteTable(
  "usage_hours",
  {
    team: text("team").notNull(),
    key: text("key").notNull(),
    model: text("model").notNull(),
    hour: integer("hour").notNull(),
    requests: integer("requests").notNull().default(0),
    promptTokens: integer("prompt_tokens").notNull().default(0),
    completionTokens: integer("completion_tokens").notNull().default(0),
    cachedTokens: integer("cached_tokens").notNull().default(0),
    errors: integer("errors").notNull().default(0),
    errors4xx: integer("errors_4xx").notNull().default(0),
    errors5xx: integer("errors_5xx").notNull().default(0),
    refused: integer("refused").notNull().default(0),
    aborted: integer("aborted").notNull().default(0),
    gpuSeconds: real("gpu_seconds").notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.team, t.key, t.model, t.hour] }), index("usage_hours_hour").on(t.hour)],
);

/** What a node's heartbeats say beside its inventory (engines, discovery, revisions, log listener), as JSON. */
export const nodeReports = sqliteTable("node_reports", {
  node: text("node").primaryKey(),
  report: text("report").notNull(),
  at: integer("at").notNull(),
});

// ---- what committed writes changed, so another control plane reads them alone (../control/image/)

/**
 * One row per row written in a table the in-memory image holds, filled by triggers (see the
 * migration that made them): which node, model, replica or API key changed (kind, key), in the
 * order the writes committed. seq rises by one with each row, without gaps (change_counter); the
 * oldest rows are pruned, so a reader whose cursor is older finds a gap and loads everything.
 */
export const changes = sqliteTable("changes", {
  seq: integer("seq").primaryKey(),
  kind: text("kind", { enum: ["node", "model", "replica", "key"] }).notNull(),
  key: text("key").notNull(),
});

/** The last seq handed out (one row, id 1): the triggers raise it, so seq follows commit order. */
export const changeCounter = sqliteTable("change_counter", {
  id: integer("id").primaryKey(),
  seq: integer("seq").notNull(),
});

/**
 * What an operator asked of a node's weights and is not done yet (weights-admin.ts): "pull" (a
 * revision wanted on the node with no replica there), "remove" (the node to delete a revision it
 * holds). One per node and revision: a pull replaces a removal and the reverse. Kept here so a
 * restarted head node, or another control plane leading after it, carries them on.
 */
export const weightsOrders = sqliteTable(
  "weights_orders",
  {
    node: text("node").notNull(),
    repo: text("repo").notNull(),
    revision: text("revision").notNull(),
    kind: text("kind", { enum: ["pull", "remove"] }).notNull(),
    at: integer("at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.node, t.repo, t.revision] })],
);
