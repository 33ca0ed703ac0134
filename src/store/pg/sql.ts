// The PostgreSQL dialect's queries and row mappings, shared by its parts: the snapshot's and the
// change feed's statements written out (one round trip each), a group of heartbeats as one
// statement, plans' parts as one statement each with their rows handed over as one JSON document.

import { type SQL, asc, inArray, sql } from "drizzle-orm";
import type { EventRow, Lease, ModelRow, NewEvent, PlanWrite } from "../../control/types";
import type { ModelSpec } from "../../protocol/catalog";
import type { HeartbeatRequest } from "../../protocol/heartbeat";
import { TOKEN_KEYS, clearTokenMigration } from "../token-digests";
import type { Db, Tx } from "./connection";
import * as schema from "./schema";

/** The database's own clock, ms since epoch (clock_timestamp: the moment of the call, not of the transaction's start). */
export const DB_NOW = sql.raw("(extract(epoch from clock_timestamp()) * 1000)::bigint");

type ModelRecord = typeof schema.models.$inferSelect;

export const toModel = (r: ModelRecord): ModelRow => ({ name: r.name, spec: r.spec as ModelSpec, revision: r.revision, createdAt: r.createdAt, updatedAt: r.updatedAt });

export const eventRecord = (e: NewEvent, at: number) => ({ at, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null });

export const toEvent = (r: typeof schema.events.$inferSelect): EventRow => ({ id: r.id, at: r.at, kind: r.kind, subject: r.subject, message: r.message, data: r.data });

/** Text ordered by bytes, as SQLite orders it, whatever the database's collation. */
export const byBytes = (col: SQL.Aliased | Parameters<typeof asc>[0]) => sql`${col} COLLATE "C"`;

// The snapshot's queries, written out: one round trip for all of them, rows shaped as the domain types.
export const SNAPSHOT_SQL = {
  nodes: `SELECT name, address, labels, fabrics, admin_state AS "adminState", last_heartbeat AS "lastHeartbeat", agent_version AS "agentVersion", agent_protocol AS "agentProtocol", registered_at AS "registeredAt" FROM nodes ORDER BY name COLLATE "C"`,
  gpus: `SELECT node, idx AS "index", uuid, name, class, memory_mib AS "memoryMib", healthy, parent FROM gpus ORDER BY node COLLATE "C", idx`,
  weights: `SELECT node, model FROM weights ORDER BY node COLLATE "C", model COLLATE "C"`,
  models: `SELECT name, spec, revision, created_at AS "createdAt", updated_at AS "updatedAt" FROM models ORDER BY name COLLATE "C"`,
  replicas: `SELECT id, model, profile, state, shards, port, endpoint, failures, error, created_at AS "createdAt", updated_at AS "updatedAt", ready_at AS "readyAt", launch, drain_until AS "drainUntil" FROM replicas ORDER BY id COLLATE "C"`,
  modelState: `SELECT model, failures, crashes, parked, reason, last_failure_at AS "lastFailureAt", last_requested_at AS "lastRequestedAt", scale_target AS "scaleTarget", unplaceable_reason AS "unplaceableReason" FROM model_state ORDER BY model COLLATE "C"`,
} as const;

const LIMIT_COLUMNS = `rpm, tpm, max_concurrent AS "maxConcurrent", budget_tokens AS "budgetTokens", budget_gpu_hours AS "budgetGpuHours", budget_period AS "budgetPeriod", tier`;

// changesSince's queries: the snapshot's columns, of the rows the changes name ($1, a text array).
export const CHANGE_SQL = {
  changes: `SELECT seq, kind, key FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2`,
  nodes: `SELECT name, address, labels, fabrics, admin_state AS "adminState", last_heartbeat AS "lastHeartbeat", agent_version AS "agentVersion", agent_protocol AS "agentProtocol", registered_at AS "registeredAt" FROM nodes WHERE name = ANY($1::text[])`,
  gpus: `SELECT node, idx AS "index", uuid, name, class, memory_mib AS "memoryMib", healthy, parent FROM gpus WHERE node = ANY($1::text[]) ORDER BY node COLLATE "C", idx`,
  weights: `SELECT node, model FROM weights WHERE node = ANY($1::text[]) ORDER BY node COLLATE "C", model COLLATE "C"`,
  credentials: `SELECT name AS node, credential_hash AS hash FROM nodes WHERE name = ANY($1::text[]) AND credential_hash IS NOT NULL`,
  addresses: `SELECT node, address FROM node_addresses WHERE node = ANY($1::text[])`,
  models: `SELECT name, spec, revision, created_at AS "createdAt", updated_at AS "updatedAt" FROM models WHERE name = ANY($1::text[])`,
  modelState: `SELECT model, failures, crashes, parked, reason, last_failure_at AS "lastFailureAt", last_requested_at AS "lastRequestedAt", scale_target AS "scaleTarget", unplaceable_reason AS "unplaceableReason" FROM model_state WHERE model = ANY($1::text[])`,
  replicas: `SELECT id, model, profile, state, shards, port, endpoint, failures, error, created_at AS "createdAt", updated_at AS "updatedAt", ready_at AS "readyAt", launch, drain_until AS "drainUntil" FROM replicas WHERE id = ANY($1::text[])`,
  apiKeys: `SELECT name, hash, pool, created_at AS "createdAt", team, models, expires_at AS "expiresAt", updated_at AS "updatedAt", ${LIMIT_COLUMNS} FROM api_keys WHERE name = ANY($1::text[])`,
  teams: `SELECT name, created_at AS "createdAt", updated_at AS "updatedAt", ${LIMIT_COLUMNS} FROM teams WHERE name = ANY($1::text[])`,
} as const;

// A group of heartbeats' inventory in one statement (after the change counter's lock, applyHeartbeats), rows
// handed over as JSON text: the nodes upserted; each node's GPUs and weights upserted (a GPU row
// that says the same is left alone: no new row version) and the ones it no longer reports
// deleted (rows apart from those upserted, so no two parts touch one row).
export const HEARTBEATS_SQL = `WITH
  v AS (SELECT * FROM jsonb_to_recordset($1::text::jsonb) AS v(name text, address text, labels jsonb, fabrics jsonb, agent_version text, agent_protocol integer)),
  g AS (SELECT * FROM jsonb_to_recordset($3::text::jsonb) AS g(node text, idx integer, uuid text, name text, class text, memory_mib integer, healthy boolean, parent text)),
  w AS (SELECT * FROM jsonb_to_recordset($4::text::jsonb) AS w(node text, model text)),
  up AS (
    INSERT INTO nodes (name, address, labels, fabrics, admin_state, last_heartbeat, agent_version, agent_protocol, registered_at)
    SELECT v.name, v.address, v.labels, v.fabrics, 'none', $2::bigint, v.agent_version, v.agent_protocol, $2::bigint FROM v
    ON CONFLICT (name) DO UPDATE SET address = excluded.address, labels = excluded.labels, fabrics = excluded.fabrics, last_heartbeat = excluded.last_heartbeat, agent_version = excluded.agent_version, agent_protocol = excluded.agent_protocol
    RETURNING name, (xmax = 0) AS inserted),
  dg AS (DELETE FROM gpus USING v WHERE gpus.node = v.name AND NOT EXISTS (SELECT 1 FROM g WHERE g.node = gpus.node AND g.idx = gpus.idx)),
  ig AS (
    INSERT INTO gpus (node, idx, uuid, name, class, memory_mib, healthy, parent) SELECT g.node, g.idx, g.uuid, g.name, g.class, g.memory_mib, g.healthy, g.parent FROM g
    ON CONFLICT (node, idx) DO UPDATE SET uuid = excluded.uuid, name = excluded.name, class = excluded.class, memory_mib = excluded.memory_mib, healthy = excluded.healthy, parent = excluded.parent
    WHERE (gpus.uuid, gpus.name, gpus.class, gpus.memory_mib, gpus.healthy, gpus.parent) IS DISTINCT FROM (excluded.uuid, excluded.name, excluded.class, excluded.memory_mib, excluded.healthy, excluded.parent)),
  dw AS (DELETE FROM weights USING v WHERE weights.node = v.name AND NOT EXISTS (SELECT 1 FROM w WHERE w.node = weights.node AND w.model = weights.model)),
  iw AS (INSERT INTO weights (node, model) SELECT w.node, w.model FROM w ON CONFLICT DO NOTHING)
SELECT up.name, up.inserted FROM up CROSS JOIN (SELECT pg_notify($5, $6)) AS n`;

/** The shared tokens' meta rows, after replacing any token kept in clear by its digest (token-digests.ts). */
export async function tokenRows(tx: Tx): Promise<{ key: string; value: string }[]> {
  const rows = await tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS));
  const { put, remove } = clearTokenMigration(rows);
  if (put.length === 0 && remove.length === 0) return rows;
  for (const r of put) await tx.insert(schema.meta).values(r).onConflictDoNothing({ target: schema.meta.key });
  await tx.delete(schema.meta).where(inArray(schema.meta.key, remove));
  return tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS));
}

export async function readLeaseRow(db: Pick<Db, "execute">): Promise<Lease | undefined> {
  const r = (await db.execute(sql`SELECT holder, epoch, expires_at - ${DB_NOW} AS remaining FROM leases WHERE name = 'leader'`))[0] as { holder: string; epoch: number; remaining: number } | undefined;
  return r ? { holder: r.holder, epoch: Number(r.epoch), expiresInMs: Number(r.remaining) } : undefined;
}

/** Names in byte order, as COLLATE "C" sorts them: the order node rows are locked in. */
export function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** A group of heartbeats' inventory as HEARTBEATS_SQL takes it: nodes, GPUs and weights, each one JSON document. */
export function inventoryRows(hbs: readonly HeartbeatRequest[]): { nodes: string; gpus: string; weights: string } {
  return {
    nodes: JSON.stringify(hbs.map((hb) => ({ name: hb.node, address: hb.address, labels: hb.labels, fabrics: hb.fabrics, agent_version: hb.agent_version, agent_protocol: hb.protocol ?? null }))),
    gpus: JSON.stringify(hbs.flatMap((hb) => hb.gpus.map((g) => ({ node: hb.node, idx: g.index, uuid: g.uuid, name: g.name, class: g.class, memory_mib: g.memory_mib, healthy: g.healthy, parent: g.parent ?? null })))),
    weights: JSON.stringify(hbs.flatMap((hb) => [...new Set(hb.models)].map((m) => ({ node: hb.node, model: m })))),
  };
}

/** Rows handed to one statement as one JSON document: `jsonb_to_recordset(...) AS v(<columns>)`. */
export function recordset(rows: readonly object[], columns: string): SQL {
  return sql`jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS v(${sql.raw(columns)})`;
}

/** Column and type of each field a replica or model-state patch may set. */
export const REPLICA_COLUMNS: Record<string, [string, string]> = {
  model: ["model", "text"],
  profile: ["profile", "text"],
  state: ["state", "text"],
  shards: ["shards", "jsonb"],
  port: ["port", "integer"],
  endpoint: ["endpoint", "text"],
  failures: ["failures", "integer"],
  error: ["error", "text"],
  createdAt: ["created_at", "bigint"],
  readyAt: ["ready_at", "bigint"],
  launch: ["launch", "text"],
  drainUntil: ["drain_until", "bigint"],
};

export const MODEL_STATE_COLUMNS: Record<string, [string, string]> = {
  failures: ["failures", "integer"],
  crashes: ["crashes", "integer"],
  parked: ["parked", "boolean"],
  reason: ["reason", "text"],
  lastFailureAt: ["last_failure_at", "bigint"],
  lastRequestedAt: ["last_requested_at", "bigint"],
  scaleTarget: ["scale_target", "integer"],
  unplaceableReason: ["unplaceable_reason", "text"],
};

/** Patches grouped by the fields they set (undefined ones are not set, as drizzle's updates leave them), keys in order. */
export function byFields(patches: Iterable<[string, object]>, columns: Record<string, [string, string]>): { fields: string[]; rows: Record<string, unknown>[] }[] {
  const groups = new Map<string, { fields: string[]; rows: Record<string, unknown>[] }>();
  for (const [key, patch] of patches) {
    const set = Object.entries(patch).filter(([, v]) => v !== undefined);
    for (const [f] of set) if (!Object.hasOwn(columns, f)) throw new Error(`no column for the field ${f}`);
    const fields = set.map(([f]) => f).sort();
    const id = fields.join(",");
    let g = groups.get(id);
    if (!g) groups.set(id, (g = { fields, rows: [] }));
    g.rows.push({ key, ...Object.fromEntries(set) });
  }
  return [...groups.values()];
}

/** A plan's replica updates, one statement per set of fields; a replica updated twice ends as both in order say. */
export async function updateReplicas(tx: Tx, updates: PlanWrite["update"], now: number): Promise<void> {
  if (updates.length === 0) return;
  const merged = new Map<string, object>();
  for (const u of updates) {
    // updated_at is the plan's time, whatever a patch says.
    const { updatedAt: _, ...patch } = u.patch;
    const into: Record<string, unknown> = { ...merged.get(u.id) };
    for (const [k, v] of Object.entries(patch)) if (v !== undefined) into[k] = v;
    merged.set(u.id, into);
  }
  for (const { fields, rows } of byFields(merged, REPLICA_COLUMNS)) {
    const set = [...fields.map((f) => `${REPLICA_COLUMNS[f]![0]} = v."${f}"`), "updated_at = "].join(", ");
    const columns = ["key text", ...fields.map((f) => `"${f}" ${REPLICA_COLUMNS[f]![1]}`)].join(", ");
    await tx.execute(sql`UPDATE replicas SET ${sql.raw(set)}${now}::bigint FROM ${recordset(rows, columns)} WHERE replicas.id = v.key`);
  }
}

/** A plan's model-state patches, upserted one statement per set of fields (an empty patch writes nothing). */
export async function upsertModelState(tx: Tx, patches: PlanWrite["modelState"]): Promise<void> {
  const nonEmpty = [...patches].filter(([, p]) => Object.values(p).some((v) => v !== undefined));
  for (const { fields, rows } of byFields(nonEmpty, MODEL_STATE_COLUMNS)) {
    const cols = fields.map((f) => MODEL_STATE_COLUMNS[f]![0]);
    const columns = ["key text", ...fields.map((f) => `"${f}" ${MODEL_STATE_COLUMNS[f]![1]}`)].join(", ");
    const text = `INSERT INTO model_state (model, ${cols.join(", ")}) SELECT v.key, ${fields.map((f) => `v."${f}"`).join(", ")} FROM `;
    const conflict = ` ON CONFLICT (model) DO UPDATE SET ${cols.map((c) => `${c} = excluded.${c}`).join(", ")}`;
    await tx.execute(sql`${sql.raw(text)}${recordset(rows, columns)}${sql.raw(conflict)}`);
  }
}

/** Events in one statement, their ids in the order given. */
export async function insertEvents(tx: Tx, events: readonly NewEvent[], at: number): Promise<void> {
  if (events.length === 0) return;
  const rows = JSON.stringify(events.map((e) => ({ kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null })));
  await tx.execute(
    sql`INSERT INTO events (at, kind, subject, message, data)
      SELECT ${at}::bigint, v.kind, v.subject, v.message, v.data
      FROM ROWS FROM (jsonb_to_recordset(${rows}::text::jsonb) AS (kind text, subject text, message text, data jsonb)) WITH ORDINALITY AS v(kind, subject, message, data, ord)
      ORDER BY v.ord`,
  );
}
