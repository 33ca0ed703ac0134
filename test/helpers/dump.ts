// A deterministic dump of every table in a store, so a test can assert that a request changed
// nothing: compare the dump taken before with the one taken after. `storeWrites` is the cheap
// first look: while it stays the same, no row was written and the dump cannot differ.

import type { Database } from "bun:sqlite";

export interface StoreDump {
  /** Table name → its rows, each row a list of column values, ordered by every column. */
  tables: Record<string, unknown[][]>;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

function cell(v: unknown): unknown {
  // Blobs compare by content; everything else SQLite hands back is a plain JSON value.
  if (v instanceof Uint8Array) return `blob:${Buffer.from(v).toString("hex")}`;
  if (typeof v === "bigint") return `bigint:${v}`;
  return v;
}

/** Every table (sqlite_sequence included, so a rolled-back insert's id would show), every row. */
export function dumpStore(db: Database): StoreDump {
  const names = db
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    .all()
    .map((r) => r.name);
  const tables: Record<string, unknown[][]> = {};
  for (const name of names) {
    const cols = db
      .query<{ name: string }, []>(`PRAGMA table_info(${quote(name)})`)
      .all()
      .map((c) => c.name);
    if (cols.length === 0) continue;
    const list = cols.map(quote).join(", ");
    tables[name] = db
      .query<unknown[], []>(`SELECT ${list} FROM ${quote(name)} ORDER BY ${list}`)
      .values()
      .map((row) => row.map(cell));
  }
  return { tables };
}

/** The dump as one string, for cheap equality checks. */
export function dumpText(db: Database): string {
  return JSON.stringify(dumpStore(db));
}

/** Names the tables whose rows differ between two dumps, with a short sample of each side. */
export function diffDumps(before: StoreDump, after: StoreDump): string[] {
  const out: string[] = [];
  for (const t of new Set([...Object.keys(before.tables), ...Object.keys(after.tables)])) {
    const a = JSON.stringify(before.tables[t] ?? null);
    const b = JSON.stringify(after.tables[t] ?? null);
    if (a !== b) out.push(`${t}: before ${a.slice(0, 300)} after ${b.slice(0, 300)}`);
  }
  return out;
}

/**
 * Rows inserted, updated or deleted through the store's connection since it opened (SQLite's
 * total_changes(), rolled-back writes included). Unchanged means nothing was written.
 */
export function storeWrites(db: Database): number {
  return db.query<{ n: number }, []>("SELECT total_changes() AS n").get()!.n;
}
