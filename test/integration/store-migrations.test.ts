// Both dialects' migrations, applied for real (a SQLite file, a real PostgreSQL 15), build the
// same schema: tables, columns, nullability, defaults, primary keys, indexes and foreign keys as
// each database's own catalog reports them. The PostgreSQL set applied by the binary's embedded
// migrator equals drizzle's own migrate() from drizzle/pg/, and control planes opening one
// fresh database together migrate it once.

import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import { JOURNALS } from "../../src/store/migrations";
import { Store } from "../../src/store";
import { PgStore } from "../../src/store/pg";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { scratchDir } from "../helpers/tmp";
import { PG_DEFAULTS, SQLITE_DEFAULTS } from "../helpers/control-settings";

interface Column {
  name: string;
  /** integer-like or text-like: what each SQLite column's affinity maps to in PostgreSQL. */
  type: string;
  nullable: boolean;
  default: string | null;
}
interface TableShape {
  columns: Column[];
  primaryKey: string[];
  indexes: string[];
  foreignKeys: string[];
}
type Shape = Record<string, TableShape>;

const PG_TYPE: Record<string, string> = { integer: "integer", bigint: "integer", boolean: "integer", text: "text", jsonb: "text", "double precision": "real" };

function sqliteShape(db: Database): Shape {
  const out: Shape = {};
  const tables = db.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '__drizzle%' ORDER BY name").all() as { name: string }[];
  for (const { name } of tables) {
    const cols = db.query(`PRAGMA table_info("${name}")`).all() as { name: string; type: string; notnull: number; dflt_value: string | null; pk: number }[];
    const idx = db.query(`PRAGMA index_list("${name}")`).all() as { name: string; unique: number; origin: string }[];
    const fks = db.query(`PRAGMA foreign_key_list("${name}")`).all() as { table: string; from: string; to: string; on_delete: string }[];
    out[name] = {
      columns: cols
        .map((c) => ({ name: c.name, type: c.type.toLowerCase(), nullable: c.notnull === 0 && c.pk === 0, default: normDefault(c.dflt_value) }))
        .sort((a, b) => (a.name < b.name ? -1 : 1)),
      primaryKey: cols
        .filter((c) => c.pk > 0)
        .sort((a, b) => a.pk - b.pk)
        .map((c) => c.name),
      indexes: idx
        .filter((i) => i.origin !== "pk")
        .map((i) => `${i.name}${i.unique ? " unique" : ""} (${(db.query(`PRAGMA index_info("${i.name}")`).all() as { name: string }[]).map((x) => x.name).join(",")})`)
        .sort(),
      foreignKeys: fks.map((f) => `${f.from} -> ${f.table}.${f.to} on delete ${f.on_delete.toLowerCase()}`).sort(),
    };
  }
  return out;
}

async function pgShape(sql: postgres.Sql): Promise<Shape> {
  const out: Shape = {};
  const cols = await sql<{ table_name: string; column_name: string; data_type: string; is_nullable: string; column_default: string | null }[]>`
    SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, column_name`;
  const pks = await sql<{ table: string; columns: string[] }[]>`
    SELECT c.relname AS table, array_agg(a.attname ORDER BY k.ord) AS columns
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
    WHERE n.nspname = 'public' AND i.indisprimary GROUP BY c.relname`;
  const idx = await sql<{ table: string; name: string; unique: boolean; columns: string[] }[]>`
    SELECT c.relname AS table, ic.relname AS name, i.indisunique AS unique, array_agg(a.attname ORDER BY k.ord) AS columns
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
    WHERE n.nspname = 'public' AND NOT i.indisprimary GROUP BY c.relname, ic.relname, i.indisunique`;
  const fks = await sql<{ table: string; from: string; to_table: string; to: string; on_delete: string }[]>`
    SELECT c.relname AS table, a.attname AS from, fc.relname AS to_table, fa.attname AS to,
      CASE con.confdeltype WHEN 'c' THEN 'cascade' WHEN 'a' THEN 'no action' WHEN 'r' THEN 'restrict' WHEN 'n' THEN 'set null' ELSE 'set default' END AS on_delete
    FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_class fc ON fc.oid = con.confrelid
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = con.conkey[1] JOIN pg_attribute fa ON fa.attrelid = fc.oid AND fa.attnum = con.confkey[1]
    WHERE con.contype = 'f'`;
  for (const c of cols) {
    const t = (out[c.table_name] ??= { columns: [], primaryKey: [], indexes: [], foreignKeys: [] });
    // A serial's default is its sequence: SQLite's autoincrement has none to show.
    const dflt = c.column_default?.startsWith("nextval(") ? null : normDefault(c.column_default);
    t.columns.push({ name: c.column_name, type: c.data_type, nullable: c.is_nullable === "YES", default: dflt });
  }
  for (const p of pks) out[p.table]!.primaryKey = p.columns;
  for (const i of idx) out[i.table]!.indexes.push(`${i.name}${i.unique ? " unique" : ""} (${i.columns.join(",")})`);
  for (const f of fks) out[f.table]!.foreignKeys.push(`${f.from} -> ${f.to_table}.${f.to} on delete ${f.on_delete}`);
  for (const t of Object.values(out)) {
    t.columns.sort((a, b) => (a.name < b.name ? -1 : 1));
    t.indexes.sort();
    t.foreignKeys.sort();
  }
  return out;
}

/** 'none'::text → 'none'; false → 0 (SQLite keeps booleans as integers). */
function normDefault(d: string | null): string | null {
  if (d === null) return null;
  const v = d.replace(/::[a-z ]+$/i, "");
  return v === "false" ? "0" : v === "true" ? "1" : v;
}

/** PostgreSQL's shape in SQLite's words: each type by the affinity it stands for. */
function asSqlite(s: Shape): Shape {
  return Object.fromEntries(Object.entries(s).map(([n, t]) => [n, { ...t, columns: t.columns.map((c) => ({ ...c, type: PG_TYPE[c.type] ?? `unmapped ${c.type}` })) }]));
}

let pg: Postgres;
let dir: string;
beforeAll(async () => {
  pg = await startPostgres();
  dir = scratchDir("llmgw-mig-");
}, 60_000);
afterAll(async () => {
  await pg?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
}, 30_000);

describe("both dialects' migrations build one schema", () => {
  test("SQLite's file and PostgreSQL's catalog agree on tables, columns, nullability, defaults, keys, indexes and foreign keys", async () => {
    const lite = new Store({ path: join(dir, "a.db"), ...SQLITE_DEFAULTS });
    const liteShape = sqliteShape(lite.sqlite);
    lite.close();
    const store = await PgStore.open({ ...PG_DEFAULTS, url: pg.url });
    await store.close();
    const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
    try {
      const shape = await pgShape(sql);
      expect(Object.keys(liteShape).length).toBe(21);
      expect(Object.keys(shape).sort()).toEqual(Object.keys(liteShape).sort());
      expect(asSqlite(shape)).toEqual(liteShape);
      // The comparison sees what matters: bigint ms times, jsonb, booleans, cascades.
      expect(shape.nodes!.columns.find((c) => c.name === "last_heartbeat")!.type).toBe("bigint");
      expect(shape.nodes!.columns.find((c) => c.name === "labels")!.type).toBe("jsonb");
      expect(shape.gpus!.columns.find((c) => c.name === "healthy")!.type).toBe("boolean");
      expect(shape.gpus!.foreignKeys).toEqual(["node -> nodes.name on delete cascade"]);
      expect(shape.gpus!.primaryKey).toEqual(["node", "idx"]);
      expect(shape.nodes!.indexes).toEqual(["nodes_credential_hash_unique unique (credential_hash)"]);
      const applied = await sql`SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations`;
      expect(applied[0]!.n).toBe(JOURNALS.pg.length);
    } finally {
      await sql.end();
    }
  }, 30_000);

  test("the embedded PostgreSQL migrator builds what drizzle's migrate() builds from drizzle/pg/, and opening again applies nothing", async () => {
    await pg.sql("CREATE DATABASE by_drizzle", "postgres");
    const a = postgres(pg.url.replace(/\/llmgw$/, "/by_drizzle"), { max: 1, onnotice: () => {} });
    const b = postgres(pg.url, { max: 1, onnotice: () => {} });
    try {
      await migrate(drizzle({ client: a }), { migrationsFolder: join(import.meta.dir, "../../drizzle/pg") });
      expect(await pgShape(a)).toEqual(await pgShape(b));
      const again = await PgStore.open({ ...PG_DEFAULTS, url: pg.url });
      await again.close();
      expect((await b`SELECT hash, created_at::text FROM drizzle.__drizzle_migrations ORDER BY id`).map((r) => ({ ...r }))).toEqual(
        (await a`SELECT hash, created_at::text FROM drizzle.__drizzle_migrations ORDER BY id`).map((r) => ({ ...r })),
      );
    } finally {
      await Promise.all([a.end(), b.end()]);
    }
  }, 30_000);

  test("five control planes opening one fresh database at once migrate it once", async () => {
    await pg.sql("CREATE DATABASE together", "postgres");
    const url = pg.url.replace(/\/llmgw$/, "/together");
    const stores = await Promise.all(Array.from({ length: 5 }, () => PgStore.open({ ...PG_DEFAULTS, url })));
    await Promise.all(stores.map((s) => s.close()));
    const rows = await pg.sql("SELECT count(*)::int AS n FROM drizzle.__drizzle_migrations", "together");
    expect(rows[0]!.n).toBe(JOURNALS.pg.length);
  }, 30_000);
});
