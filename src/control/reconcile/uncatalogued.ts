// Step 2: replicas of models that left the catalog stop; failed ones are forgotten.

import type { ReconcileContext } from "./context";
import type { PlanBuilder } from "./plan";

export function stopUncatalogued(ctx: ReconcileContext, b: PlanBuilder): void {
  for (const r of ctx.snapshot.replicas) {
    if (b.isRemoved(r) || ctx.models.has(r.model)) continue;
    const state = b.stateOf(r);
    if (state === "failed") b.remove(r);
    else if (state !== "draining") {
      b.setState(r, "draining");
      b.event({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id}: model ${r.model} is no longer in the catalog` });
    }
  }
}
