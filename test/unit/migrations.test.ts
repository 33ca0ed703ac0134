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

    // Both migrators skip every entry not newer than the last one applied: an entry dated before
    // its predecessor is never applied to a database that already had the predecessor.
    test(`${dialect}: each journal entry is dated after the one before it`, () => {
      const whens = JOURNALS[dialect].map((e) => e.when);
      for (let i = 1; i < whens.length; i++) expect({ tag: JOURNALS[dialect][i]!.tag, after: whens[i]! > whens[i - 1]! }).toEqual({ tag: JOURNALS[dialect][i]!.tag, after: true });
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

  // A database made by an older release: the migrations it knew applied, with the dates it knew.
  function olderDatabase(path: string, through: string, dated: Record<string, number> = {}): void {
    const db = new Database(path);
    const d = drizzle({ client: db }) as unknown as { dialect: { migrate(m: unknown, s: unknown, c: unknown): void }; session: unknown };
    const known = embeddedMigrations().slice(0, JOURNAL.findIndex((e) => e.tag === through) + 1);
    const tags = JOURNAL.map((e) => e.tag);
    d.dialect.migrate(known.map((m, i) => ({ ...m, folderMillis: dated[tags[i]!] ?? m.folderMillis })), d.session, { migrationsFolder: "(embedded)" });
    db.close();
  }
  const tables = (s: Store) => (s.sqlite.query("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]).map((r) => r.name);

  test("a database from the release before limit_shares gets every later table when opened", () => {
    const path = join(scratchDir("llmgw-mig-"), "old.db");
    olderDatabase(path, "0007_usage_hours");
    const s = new Store({ path, ...SQLITE_DEFAULTS });
    expect(tables(s)).toContain("limit_shares");
    expect(schemaOf(s.sqlite)).toEqual(schemaOf(new Store({ path: ":memory:", ...SQLITE_DEFAULTS }).sqlite));
    s.close();
  });

  test("a database that applied limit_shares under its first, earlier date opens and keeps its rows", () => {
    const path = join(scratchDir("llmgw-mig-"), "old.db");
    olderDatabase(path, "0008_limit_shares", { "0008_limit_shares": 1796587183636 });
    const raw = new Database(path);
    raw.run("INSERT INTO limit_shares (router, demand, shares, reported_at) VALUES ('r1', '{}', '{}', 1)");
    raw.close();
    const s = new Store({ path, ...SQLITE_DEFAULTS });
    expect(s.sqlite.query("SELECT router FROM limit_shares").all()).toEqual([{ router: "r1" }]);
    expect(schemaOf(s.sqlite)).toEqual(schemaOf(new Store({ path: ":memory:", ...SQLITE_DEFAULTS }).sqlite));
    s.close();
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
