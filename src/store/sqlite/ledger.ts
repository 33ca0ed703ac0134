// The usage ledger in SQLite: each tick's rows added to the stored ones in one transaction.

import { asc, gte, lt, sql } from "drizzle-orm";
import type { LedgerPort, UsageTotal } from "../../control/store-port";
import type { UsageRow } from "../../protocol/routing";
import { guarded } from "../errors";
import { USAGE_BATCH, addedCounters, mergeUsageRows, totalFields, usageRow, usageTotal, usageValues } from "../usage-rows";
import { type Sqlite, schema } from "./db";

const t = schema.usageHours;
/** Each counter added to the stored one. */
const ADD = addedCounters(t);

export class SqliteLedger implements LedgerPort {
  constructor(private readonly s: Sqlite) {}

  addUsage(rows: readonly UsageRow[]): Promise<void> {
    const merged = mergeUsageRows(rows);
    if (merged.length === 0) return Promise.resolve();
    return guarded(() => {
      this.s.db.transaction((tx) => {
        for (let i = 0; i < merged.length; i += USAGE_BATCH)
          tx.insert(t)
            .values(merged.slice(i, i + USAGE_BATCH).map(usageValues))
            .onConflictDoUpdate({ target: [t.team, t.key, t.model, t.hour], set: ADD })
            .run();
      });
    });
  }

  usageSince(since: number): Promise<UsageRow[]> {
    return guarded(() =>
      this.s.db
        .select()
        .from(t)
        .where(gte(t.hour, since))
        .orderBy(asc(t.hour), asc(t.team), asc(t.key), asc(t.model))
        .all()
        .map(usageRow),
    );
  }

  usageTotalsSince(starts: readonly number[]): Promise<UsageTotal[]> {
    if (starts.length === 0) return Promise.resolve([]);
    return guarded(() =>
      this.s.db
        .select({ team: t.team, key: t.key, ...totalFields(t, starts) })
        .from(t)
        .where(gte(t.hour, Math.min(...starts)))
        .groupBy(t.team, t.key)
        .all()
        .map((v) => usageTotal(v, starts)),
    );
  }

  pruneUsage(before: number): Promise<void> {
    return guarded(() => {
      this.s.db.delete(t).where(lt(t.hour, before)).run();
    });
  }
}
