// The usage ledger in PostgreSQL: each tick's rows added to the stored ones in one transaction.
// Not retried once it may have committed: an addition done twice would count twice.

import { asc, gte, lt, sql } from "drizzle-orm";
import type { LedgerPort, UsageTotal } from "../../control/store-port";
import type { UsageRow } from "../../protocol/routing";
import { USAGE_BATCH, addedCounters, mergeUsageRows, totalFields, usageRow, usageTotal, usageValues } from "../usage-rows";
import type { PgConnection } from "./connection";
import * as schema from "./schema";

const t = schema.usageHours;
/** Each counter added to the stored one. */
const ADD = addedCounters(t);

export class PgLedger implements LedgerPort {
  constructor(private readonly c: PgConnection) {}

  addUsage(rows: readonly UsageRow[]): Promise<void> {
    const merged = mergeUsageRows(rows);
    if (merged.length === 0) return Promise.resolve();
    // "meta": nothing another control plane holds in memory changed.
    return this.c.write("once", "meta", async (tx) => {
      for (let i = 0; i < merged.length; i += USAGE_BATCH)
        await tx
          .insert(t)
          .values(merged.slice(i, i + USAGE_BATCH).map(usageValues))
          .onConflictDoUpdate({ target: [t.team, t.key, t.model, t.hour], set: ADD });
    });
  }

  usageSince(since: number): Promise<UsageRow[]> {
    return this.c.call("read", async () =>
      (
        await this.c.db
          .select()
          .from(t)
          .where(gte(t.hour, since))
          .orderBy(asc(t.hour), sql`${t.team} COLLATE "C"`, sql`${t.key} COLLATE "C"`, sql`${t.model} COLLATE "C"`)
      ).map(usageRow),
    );
  }

  usageTotalsSince(starts: readonly number[]): Promise<UsageTotal[]> {
    if (starts.length === 0) return Promise.resolve([]);
    return this.c.call("read", async () =>
      (
        await this.c.db
          .select({ team: t.team, key: t.key, ...totalFields(t, starts) })
          .from(t)
          .where(gte(t.hour, Math.min(...starts)))
          .groupBy(t.team, t.key)
      ).map((v) => usageTotal(v, starts)),
    );
  }

  pruneUsage(before: number): Promise<void> {
    return this.c.write("idempotent", "meta", async (tx) => {
      await tx.delete(t).where(lt(t.hour, before));
    });
  }
}
