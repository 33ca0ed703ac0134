// The compiled binary carries its migrations inside it; this pins that each dialect's embedded
// set is exactly drizzle/<dialect>/ and that SQLite's builds the same schema as drizzle's own
// file-reading migrator (PostgreSQL's: test/integration/store-migrations.test.ts).

import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { drizzle } from "drizzle-orm/bun-sqlite";
import { migrate } from "drizzle-orm/bun-sqlite/migrator";
import { EMBEDDED, JOURNAL, JOURNALS, embeddedMigrations, type MigrationDialect } from "../../src/store/migrations";
import { Store } from "../../src/store";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const ROOT = join(import.meta.dir, "../../drizzle");
const DRIZZLE = join(ROOT, "sqlite");
const dirOf = (d: MigrationDialect) => join(ROOT, d);

function schemaOf(db: Database): string[] {
  return (db.query("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name").all() as { sql: string | null }[]).map(
    (r) => JSON.stringify(r),
  );
}

describe("embedded migrations", () => {
  test("drizzle/ holds one folder per dialect and no migration outside them", () => {
    expect(readdirSync(ROOT).sort()).toEqual(["pg", "sqlite"]);
  });

  for (const dialect of ["sqlite", "pg"] as const) {
    test(`${dialect}: every .sql file in drizzle/${dialect}/ is embedded, and every journal entry, and nothing else`, () => {
      const files = readdirSync(dirOf(dialect)).filter((f) => f.endsWith(".sql")).map((f) => f.replace(/\.sql$/, "")).sort();
      expect(files.length).toBeGreaterThan(0);
      expect(Object.keys(EMBEDDED[dialect]).sort()).toEqual(files);
      expect(JOURNALS[dialect].map((e) => e.tag).sort()).toEqual(files);
      const journal = JSON.parse(readFileSync(join(dirOf(dialect), "meta/_journal.json"), "utf8")) as { dialect: string; entries: unknown[] };
      expect(journal.dialect).toBe(dialect === "pg" ? "postgresql" : "sqlite");
      expect(JOURNALS[dialect]).toEqual(journal.entries as never);
      expect(embeddedMigrations(dialect).map((m) => m.folderMillis)).toEqual(JOURNALS[dialect].map((e) => e.when));
    });

    test(`${dialect}: the embedded text is byte-for-byte the file on disk`, () => {
      for (const [tag, text] of Object.entries(EMBEDDED[dialect])) expect(text).toBe(readFileSync(join(dirOf(dialect), `${tag}.sql`), "utf8"));
    });
  }

  test("applying them yields the same schema as drizzle's migrate() from the folder", () => {
    const fromFolder = new Database(":memory:");
    migrate(drizzle({ client: fromFolder }), { migrationsFolder: DRIZZLE });
    const store = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    expect(schemaOf(store.sqlite)).toEqual(schemaOf(fromFolder));
    expect(embeddedMigrations().length).toBe(JOURNAL.length);
  });

  test("opening an existing database again applies nothing twice and keeps its rows", () => {
    const dir = scratchDir("llmgw-mig-");
    const path = join(dir, "x.db");
    const a = new Store({ path, ...SQLITE_DEFAULTS });
    a.setMeta("k", "v");
    a.close();
    const b = new Store({ path, ...SQLITE_DEFAULTS });
    expect(b.getMeta("k")).toBe("v");
    const applied = b.sqlite.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number };
    expect(applied.n).toBe(JOURNAL.length);
    expect((b.sqlite.query("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode).toBe("wal");
    expect((b.sqlite.query("PRAGMA foreign_keys").get() as { foreign_keys: number }).foreign_keys).toBe(1);
    b.close();
  });
});
