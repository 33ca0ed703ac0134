// The operator's pulls and removals of weights not done yet, in the SQLite store: the
// weights_orders table (see ../schema.ts), read whole by every control plane on the file.

import { and, asc, eq } from "drizzle-orm";
import type { WeightsOrdersPort } from "../../control/store-port";
import type { WeightsOrderRow } from "../../control/types";
import { guarded } from "../errors";
import { type Sqlite, schema } from "./db";

const t = schema.weightsOrders;

export class SqliteWeightsOrders implements WeightsOrdersPort {
  constructor(private readonly s: Sqlite) {}

  weightsOrders(): Promise<WeightsOrderRow[]> {
    return guarded(() => this.s.db.select().from(t).orderBy(asc(t.node), asc(t.repo), asc(t.revision)).all());
  }

  putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void> {
    return guarded(() => {
      this.s.db.transaction((tx) => {
        for (const r of rows) tx.insert(t).values(r).onConflictDoUpdate({ target: [t.node, t.repo, t.revision], set: { kind: r.kind, at: r.at } }).run();
      });
    });
  }

  deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void> {
    return guarded(() => {
      this.s.db.transaction((tx) => {
        for (const k of keys) tx.delete(t).where(and(eq(t.node, k.node), eq(t.repo, k.repo), eq(t.revision, k.revision), eq(t.kind, k.kind))).run();
      });
    });
  }
}
