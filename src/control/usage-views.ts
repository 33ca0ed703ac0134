// What the usage ledger says, for the admin API and `llmgw usage`: the stored hourly rows since a
// time, or the same added up per team, key, model or pool (a model's pool from the catalog; a
// model no longer in it counts under pool "").

import type { UsageRowView } from "../protocol/views";
import { groupUsageRows } from "../protocol/usage-rows";
import type { Scheduler } from "../lib/scheduler";
import type { CatalogPort, LedgerPort } from "./store-port";

export interface UsageViewsOptions {
  store: Pick<LedgerPort, "usageSince"> & Pick<CatalogPort, "models">;
  scheduler: Pick<Scheduler, "now">;
}

const HOUR_MS = 3_600_000;

export class UsageViews {
  constructor(private readonly o: UsageViewsOptions) {}

  /** Rows of the hours that overlap the last `sinceMs`. */
  async usage(sinceMs: number, by?: "team" | "key" | "model" | "pool"): Promise<UsageRowView[]> {
    const from = this.o.scheduler.now() - sinceMs;
    const rows = await this.o.store.usageSince(from - (from % HOUR_MS));
    if (by === undefined) return rows;
    if (by !== "pool") return groupUsageRows(rows, by);
    const pools = new Map((await this.o.store.models()).map((m) => [m.name, m.spec.pool ?? "default"]));
    // Grouped by model first, then each model's row put under its pool.
    const out = new Map<string, UsageRowView>();
    for (const r of groupUsageRows(rows, "model")) {
      const pool = pools.get(r.model) ?? "";
      const had = out.get(pool);
      if (had === undefined) out.set(pool, { ...r, model: "", pool });
      else for (const [k, v] of Object.entries(r)) if (typeof v === "number" && k !== "hour") (had as unknown as Record<string, number>)[k]! += v;
    }
    return [...out.values()];
  }
}
