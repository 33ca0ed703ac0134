// The SQL migrations of both dialects, embedded in the binary. drizzle's own migrate() reads
// drizzle/<dialect>/ from disk, which a compiled binary does not have; so each migration is
// imported as text and shaped exactly as drizzle's file reader would build it.
// After `npm run db:generate` adds a migration, add its import here: a test fails until then.

import { sha256hex } from "../lib/digest";
import sqliteJournal from "../../drizzle/sqlite/meta/_journal.json";
import s0000 from "../../drizzle/sqlite/0000_init.sql" with { type: "text" };
import s0001 from "../../drizzle/sqlite/0001_api_keys.sql" with { type: "text" };
import s0002 from "../../drizzle/sqlite/0002_node_trust.sql" with { type: "text" };
import s0003 from "../../drizzle/sqlite/0003_control_planes.sql" with { type: "text" };
import s0004 from "../../drizzle/sqlite/0004_changes.sql" with { type: "text" };
import s0005 from "../../drizzle/sqlite/0005_crashes.sql" with { type: "text" };
import s0006 from "../../drizzle/sqlite/0006_teams.sql" with { type: "text" };
import s0007 from "../../drizzle/sqlite/0007_usage_hours.sql" with { type: "text" };
import s0008 from "../../drizzle/sqlite/0008_limit_shares.sql" with { type: "text" };
import s0009 from "../../drizzle/sqlite/0009_weights_orders.sql" with { type: "text" };
import s0010 from "../../drizzle/sqlite/0010_protocol.sql" with { type: "text" };
import s0011 from "../../drizzle/sqlite/0011_replica_rollout.sql" with { type: "text" };
import pgJournal from "../../drizzle/pg/meta/_journal.json";
import p0000 from "../../drizzle/pg/0000_init.sql" with { type: "text" };
import p0001 from "../../drizzle/pg/0001_changes.sql" with { type: "text" };
import p0002 from "../../drizzle/pg/0002_crashes.sql" with { type: "text" };
import p0003 from "../../drizzle/pg/0003_teams.sql" with { type: "text" };
import p0004 from "../../drizzle/pg/0004_usage_hours.sql" with { type: "text" };
import p0005 from "../../drizzle/pg/0005_limit_shares.sql" with { type: "text" };
import p0006 from "../../drizzle/pg/0006_weights_orders.sql" with { type: "text" };
import p0007 from "../../drizzle/pg/0007_protocol.sql" with { type: "text" };
import p0008 from "../../drizzle/pg/0008_replica_rollout.sql" with { type: "text" };

export type MigrationDialect = "sqlite" | "pg";

export const EMBEDDED: Record<MigrationDialect, Record<string, string>> = {
  sqlite: {
    "0000_init": s0000,
    "0001_api_keys": s0001,
    "0002_node_trust": s0002,
    "0003_control_planes": s0003,
    "0004_changes": s0004,
    "0005_crashes": s0005,
    "0006_teams": s0006,
    "0007_usage_hours": s0007,
    "0008_limit_shares": s0008,
    "0009_weights_orders": s0009,
    "0010_protocol": s0010,
    "0011_replica_rollout": s0011,
  },
  pg: {
    "0000_init": p0000,
    "0001_changes": p0001,
    "0002_crashes": p0002,
    "0003_teams": p0003,
    "0004_usage_hours": p0004,
    "0005_limit_shares": p0005,
    "0006_weights_orders": p0006,
    "0007_protocol": p0007,
    "0008_replica_rollout": p0008,
  },
};

/** The SQLite set (as before the PostgreSQL dialect came). */
export const EMBEDDED_SQL = EMBEDDED.sqlite;

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

export const JOURNALS: Record<MigrationDialect, JournalEntry[]> = {
  sqlite: (sqliteJournal as { entries: JournalEntry[] }).entries,
  pg: (pgJournal as { entries: JournalEntry[] }).entries,
};

export const JOURNAL = JOURNALS.sqlite;

/** The migrations in journal order, shaped as drizzle's readMigrationFiles() returns them. */
export function embeddedMigrations(dialect: MigrationDialect = "sqlite"): MigrationMeta[] {
  return JOURNALS[dialect].map((entry) => {
    const query = EMBEDDED[dialect][entry.tag];
    if (query === undefined) throw new Error(`${dialect} migration ${entry.tag} is in the journal but not embedded in src/store/migrations.ts`);
    return {
      sql: query.split("--> statement-breakpoint"),
      bps: entry.breakpoints,
      folderMillis: entry.when,
      hash: sha256hex(query),
    };
  });
}
