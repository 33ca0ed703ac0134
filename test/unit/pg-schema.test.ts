// The two dialects' table definitions (src/store/schema.ts for SQLite, src/store/pg/schema.ts for
// PostgreSQL) are written twice; this holds them to one schema: the same tables, columns, types
// (each SQLite type with its PostgreSQL counterpart), not-null, defaults, primary keys, unique
// constraints, indexes and foreign keys with their onDelete, as drizzle itself reads them.

import { describe, expect, test } from "bun:test";
import { is } from "drizzle-orm";
import { PgTable, getTableConfig as pgConfig } from "drizzle-orm/pg-core";
import { SQLiteTable, getTableConfig as sqliteConfig } from "drizzle-orm/sqlite-core";
import * as pg from "../../src/store/pg/schema";
import * as lite from "../../src/store/schema";

type Config = ReturnType<typeof sqliteConfig> | ReturnType<typeof pgConfig>;

/** A column's type, in words both dialects share. */
function kind(dialect: "sqlite" | "pg", columnType: string, dataType: string, mode?: string): string {
  if (dialect === "sqlite") {
    if (columnType === "SQLiteInteger" || columnType === "SQLiteTimestamp") return "integer";
    if (columnType === "SQLiteBoolean") return "boolean";
    if (columnType === "SQLiteTextJson") return "json";
    if (columnType === "SQLiteText") return "text";
    if (columnType === "SQLiteReal") return "real";
  } else {
    if (columnType === "PgInteger" || columnType === "PgSerial") return "integer";
    // ms since epoch and ids outgrow int4: bigint, read as JS numbers like SQLite's integers.
    if ((columnType === "PgBigInt53" || columnType === "PgBigSerial53") && dataType === "number") return "integer";
    if (columnType === "PgBoolean") return "boolean";
    if (columnType === "PgJsonb") return "json";
    if (columnType === "PgText") return "text";
    if (columnType === "PgDoublePrecision") return "real";
  }
  return `unmapped ${dialect} ${columnType}/${dataType}/${mode ?? ""}`;
}

function describeTable(dialect: "sqlite" | "pg", c: Config) {
  const cols = c.columns.map((col) => ({
    name: col.name,
    type: kind(dialect, col.columnType, col.dataType, (col as { mode?: string }).mode),
    notNull: col.notNull,
    primary: col.primary,
    unique: col.isUnique,
    default: col.hasDefault && col.default !== undefined ? JSON.stringify(col.default) : null,
    // An identity/serial key or SQLite's autoincrement: the database numbers the rows.
    generatedKey: dialect === "pg" ? col.columnType.endsWith("Serial") || col.columnType === "PgBigSerial53" : col.primary && (col as unknown as { autoIncrement?: boolean }).autoIncrement === true,
    enum: (col as { enumValues?: string[] }).enumValues ?? null,
  }));
  return {
    name: c.name,
    columns: cols.sort((a, b) => a.name.localeCompare(b.name)),
    primaryKeys: c.primaryKeys.map((pk) => pk.columns.map((x) => x.name)),
    uniques: c.uniqueConstraints.map((u) => u.columns.map((x) => x.name)),
    indexes: c.indexes
      .map((i) => ({ name: i.config.name ?? "", unique: !!i.config.unique, columns: i.config.columns.map((x) => (x as { name: string }).name) }))
      .sort((a, b) => a.name.localeCompare(b.name)),
    foreignKeys: c.foreignKeys
      .map((fk) => {
        const r = fk.reference();
        return { columns: r.columns.map((x) => x.name), table: (dialect === "pg" ? pgConfig(r.foreignTable as PgTable) : sqliteConfig(r.foreignTable as SQLiteTable)).name, foreignColumns: r.foreignColumns.map((x) => x.name), onDelete: fk.onDelete ?? "no action" };
      })
      .sort((a, b) => a.columns.join().localeCompare(b.columns.join())),
  };
}

const sqliteTables = (Object.values(lite) as unknown[]).filter((t): t is SQLiteTable => is(t, SQLiteTable)).map((t) => describeTable("sqlite", sqliteConfig(t)));
const pgTables = (Object.values(pg) as unknown[]).filter((t): t is PgTable => is(t, PgTable)).map((t) => describeTable("pg", pgConfig(t)));
const byName = <T extends { name: string }>(xs: T[]) => [...xs].sort((a, b) => a.name.localeCompare(b.name));

describe("the PostgreSQL schema is the SQLite schema", () => {
  test("the same tables", () => {
    expect(sqliteTables.length).toBe(21);
    expect(byName(pgTables).map((t) => t.name)).toEqual(byName(sqliteTables).map((t) => t.name));
  });

  test("every column maps to a known type on both sides", () => {
    for (const t of [...sqliteTables, ...pgTables]) for (const c of t.columns) expect(`${t.name}.${c.name}: ${c.type}`).not.toContain("unmapped");
  });

  for (const t of sqliteTables) {
    test(`table ${t.name}: columns, keys, indexes, foreign keys`, () => {
      const other = pgTables.find((p) => p.name === t.name);
      expect(other).toEqual(t);
    });
  }

  test("a difference is caught (the comparison can fail)", () => {
    const nodes = sqliteTables.find((t) => t.name === "nodes")!;
    const changed = structuredClone(nodes);
    changed.columns.find((c) => c.name === "admin_state")!.default = JSON.stringify("cordoned");
    expect(changed).not.toEqual(pgTables.find((t) => t.name === "nodes"));
    const gpus = pgTables.find((t) => t.name === "gpus")!;
    expect(gpus.foreignKeys).toEqual([{ columns: ["node"], table: "nodes", foreignColumns: ["name"], onDelete: "cascade" }]);
    expect(gpus.primaryKeys).toEqual([["node", "idx"]]);
    expect(pgTables.find((t) => t.name === "events")!.columns.find((c) => c.name === "id")).toMatchObject({ generatedKey: true, primary: true });
  });
});
