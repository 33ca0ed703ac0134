// What the SQLite dialect's parts share: the database (bun:sqlite and drizzle over it), the
// database's own clock, and the row mappings to the control plane's domain types.

import type { Database } from "bun:sqlite";
import { getTableColumns, inArray, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import type { EventRow, Lease, ModelRow, NewEvent } from "../../control/types";
import type { ModelSpec } from "../../protocol/catalog";
import * as schema from "../schema";
import { TOKEN_KEYS, clearTokenMigration } from "../token-digests";

export { schema };

export type Db = BunSQLiteDatabase<typeof schema>;
export type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];

/** The database as every part of the dialect holds it. */
export interface Sqlite {
  db: Db;
  sqlite: Database;
}

const { credentialHash: _credentialHash, ...columns } = getTableColumns(schema.nodes);
/** A node row's columns but its credential's hash, which stays inside the store. */
export const nodeColumns = columns;

type ModelRecord = typeof schema.models.$inferSelect;
type EventRecord = typeof schema.events.$inferSelect;
export const toModel = (r: ModelRecord): ModelRow => ({ name: r.name, spec: r.spec as ModelSpec, revision: r.revision, createdAt: r.createdAt, updatedAt: r.updatedAt });
export const toEvent = (r: EventRecord): EventRow => ({ id: r.id, at: r.at, kind: r.kind, subject: r.subject, message: r.message, data: r.data });
export const eventRecord = (e: NewEvent, at: number) => ({ at, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null });

/** The database's own clock, ms since epoch: what leases and "last seen" of control planes are measured by. */
export const DB_NOW = sql.raw("CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)");

export function readLeaseRow(db: { all<T>(q: ReturnType<typeof sql>): T[] }): Lease | undefined {
  const r = db.all<{ holder: string; epoch: number; left: number }>(sql`SELECT holder, epoch, expires_at - ${DB_NOW} AS left FROM leases WHERE name = 'leader'`)[0];
  return r ? { holder: r.holder, epoch: r.epoch, expiresInMs: r.left } : undefined;
}

/** The shared tokens' meta rows, after replacing any token kept in clear by its digest (token-digests.ts). */
export function tokenRows(tx: Tx): { key: string; value: string }[] {
  const rows = tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS)).all();
  const { put, remove } = clearTokenMigration(rows);
  if (put.length === 0 && remove.length === 0) return rows;
  for (const r of put) tx.insert(schema.meta).values(r).onConflictDoNothing({ target: schema.meta.key }).run();
  tx.delete(schema.meta).where(inArray(schema.meta.key, remove)).run();
  return tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS)).all();
}
