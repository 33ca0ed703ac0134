// The SQL migrations, embedded in the binary. drizzle's own migrate() reads drizzle/ from
// disk, which a compiled binary does not have; so each migration is imported as text and
// handed to the dialect's migrator exactly as drizzle's file reader would build it.
// After `npm run db:generate` adds a migration, add its import here: a test fails until then.

import { createHash } from "node:crypto";
import journal from "../../drizzle/meta/_journal.json";
import m0000 from "../../drizzle/0000_init.sql" with { type: "text" };
import m0001 from "../../drizzle/0001_api_keys.sql" with { type: "text" };
import m0002 from "../../drizzle/0002_node_trust.sql" with { type: "text" };
import m0003 from "../../drizzle/0003_control_planes.sql" with { type: "text" };

export const EMBEDDED_SQL: Record<string, string> = {
  "0000_init": m0000,
  "0001_api_keys": m0001,
  "0002_node_trust": m0002,
  "0003_control_planes": m0003,
};

export interface MigrationMeta {
  sql: string[];
  bps: boolean;
  folderMillis: number;
  hash: string;
}

export interface JournalEntry {
  idx: number;
  when: number;
  tag: string;
  breakpoints: boolean;
}

export const JOURNAL: JournalEntry[] = (journal as { entries: JournalEntry[] }).entries;

/** The migrations in journal order, shaped as drizzle's readMigrationFiles() returns them. */
export function embeddedMigrations(): MigrationMeta[] {
  return JOURNAL.map((entry) => {
    const query = EMBEDDED_SQL[entry.tag];
    if (query === undefined) throw new Error(`migration ${entry.tag} is in the journal but not embedded in src/store/migrations.ts`);
    return {
      sql: query.split("--> statement-breakpoint"),
      bps: entry.breakpoints,
      folderMillis: entry.when,
      hash: createHash("sha256").update(query).digest("hex"),
    };
  });
}
