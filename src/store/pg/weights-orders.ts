// The operator's pulls and removals of weights not done yet, in the PostgreSQL store: the
// weights_orders table (see ../schema.ts), read whole by every control plane.

import { and, eq } from "drizzle-orm";
import type { WeightsOrdersPort } from "../../control/store-port";
import type { WeightsOrderRow } from "../../control/types";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { byBytes } from "./sql";

const t = schema.weightsOrders;

export class PgWeightsOrders implements WeightsOrdersPort {
  constructor(private readonly c: PgConnection) {}

  weightsOrders(): Promise<WeightsOrderRow[]> {
    return this.c.call("read", () => this.c.db.select().from(t).orderBy(byBytes(t.node), byBytes(t.repo), byBytes(t.revision)));
  }

  putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void> {
    if (rows.length === 0) return Promise.resolve();
    // An upsert: a second try after a lost answer writes the same rows.
    return this.c.write("idempotent", "meta", async (tx) => {
      for (const r of rows) await tx.insert(t).values(r).onConflictDoUpdate({ target: [t.node, t.repo, t.revision], set: { kind: r.kind, at: r.at } });
    });
  }

  deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void> {
    if (keys.length === 0) return Promise.resolve();
    return this.c.write("idempotent", "meta", async (tx) => {
      for (const k of keys) await tx.delete(t).where(and(eq(t.node, k.node), eq(t.repo, k.repo), eq(t.revision, k.revision), eq(t.kind, k.kind)));
    });
  }
}
