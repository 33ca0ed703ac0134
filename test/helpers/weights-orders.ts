// An in-memory WeightsOrdersPort (control/store-port.ts), for unit tests of what keeps the
// operator's pulls and removals: the store contract (test/contract/store.ts) holds the real ones
// to the same behaviour.

import type { WeightsOrdersPort } from "../../src/control/store-port";
import type { WeightsOrderRow } from "../../src/control/types";

export class MemoryWeightsOrders implements WeightsOrdersPort {
  readonly rows = new Map<string, WeightsOrderRow>();
  private readonly key = (r: { node: string; repo: string; revision: string }) => `${r.node}\u0000${r.repo}@${r.revision}`;

  async weightsOrders(): Promise<WeightsOrderRow[]> {
    return [...this.rows.values()].sort((a, b) => (this.key(a) < this.key(b) ? -1 : 1)).map((r) => ({ ...r }));
  }

  async putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void> {
    for (const r of rows) this.rows.set(this.key(r), { ...r });
  }

  async deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void> {
    for (const k of keys) if (this.rows.get(this.key(k))?.kind === k.kind) this.rows.delete(this.key(k));
  }
}
