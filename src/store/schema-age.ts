// Whether a store's schema is newer than this binary knows: its migration table holds one
// applied after the newest this release embeds (a later release migrated it during an upgrade).
// Such a control plane must neither migrate (nothing runs backwards) nor lead (its writes would
// miss what the newer schema expects): it stands by and says why, until it is upgraded too.

import { type MigrationDialect, embeddedMigrations } from "./migrations";

/** The newest migration this binary embeds for the dialect (drizzle's created_at, ms). */
export function newestKnown(dialect: MigrationDialect): number {
  return Math.max(0, ...embeddedMigrations(dialect).map((m) => m.folderMillis));
}

/**
 * Why this binary must not lead (or, on SQLite, open) a store whose newest applied migration is
 * `applied` (drizzle's created_at; undefined: none applied), or undefined when it knows them all.
 */
export function schemaAheadReason(applied: number | undefined, dialect: MigrationDialect): string | undefined {
  const known = newestKnown(dialect);
  if (applied === undefined || applied <= known) return undefined;
  const at = (ms: number) => new Date(ms).toISOString().slice(0, 19).replace("T", " ");
  return `the store's schema is newer than this release knows (a migration of ${at(applied)} UTC is applied; this release's newest is of ${at(known)} UTC): a later release migrated it. Upgrade this control plane to that release; until then it stands by and writes nothing`;
}
