// The compiled binary carries its migrations inside it; this pins that the embedded set is
// exactly drizzle/ and builds the same schema as drizzle's own file-reading migrator.

import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { migrate } from "drizzle-orm/bun-sqlite/migrator";
import { EMBEDDED_SQL, JOURNAL, embeddedMigrations } from "../../src/store/migrations";
import { Store } from "../../src/store";

const DRIZZLE = join(import.meta.dir, "../../drizzle");

function schemaOf(db: Database): string[] {
  return (db.query("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name").all() as { sql: string | null }[]).map(
    (r) => JSON.stringify(r),
  );
}

describe("embedded migrations", () => {
  test("every .sql file in drizzle/ is embedded, and nothing else", () => {
    const files = readdirSync(DRIZZLE).filter((f) => f.endsWith(".sql")).map((f) => f.replace(/\.sql$/, "")).sort();
    expect(files.length).toBeGreaterThan(0);
    expect(Object.keys(EMBEDDED_SQL).sort()).toEqual(files);
    expect(JOURNAL.map((e) => e.tag).sort()).toEqual(files);
  });

  test("the embedded text is byte-for-byte the file on disk", () => {
    for (const [tag, text] of Object.entries(EMBEDDED_SQL)) expect(text).toBe(readFileSync(join(DRIZZLE, `${tag}.sql`), "utf8"));
  });

  test("applying them yields the same schema as drizzle's migrate() from the folder", () => {
    const fromFolder = new Database(":memory:");
    migrate(drizzle({ client: fromFolder }), { migrationsFolder: DRIZZLE });
    const store = new Store({ path: ":memory:" });
    expect(schemaOf(store.sqlite)).toEqual(schemaOf(fromFolder));
    expect(embeddedMigrations().length).toBe(JOURNAL.length);
  });

  test("opening an existing database again applies nothing twice and keeps its rows", () => {
    const dir = require("node:fs").mkdtempSync(join(require("node:os").tmpdir(), "llmgw-mig-"));
    const path = join(dir, "x.db");
    const a = new Store({ path });
    a.setMeta("k", "v");
    a.close();
    const b = new Store({ path });
    expect(b.getMeta("k")).toBe("v");
    const applied = b.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number };
    expect(applied.n).toBe(JOURNAL.length);
    expect((b.sqlite.query("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode).toBe("wal");
    expect((b.sqlite.query("PRAGMA foreign_keys").get() as { foreign_keys: number }).foreign_keys).toBe(1);
    b.close();
  });
});
