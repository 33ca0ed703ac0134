// Step 8: placement reasons, recorded when they change and cleared once the model gets what it
// wants (placed this tick, or satisfied already), so `models` and `status` say why a model is
// short and stop saying it when it no longer is.

import type { PlanBuilder } from "./plan";
import type { ModelStateRow } from "../types";

export function recordReasons(
  b: PlanBuilder,
  mstate: ReadonlyMap<string, ModelStateRow>,
  unplaceable: ReadonlyMap<string, string>,
  requested: readonly { model: string }[],
  satisfied: readonly string[],
): void {
  for (const [model, reason] of unplaceable) {
    if (mstate.get(model)?.unplaceableReason === reason) continue;
    b.setModel(model, { unplaceableReason: reason });
    b.event({ kind: "model.unplaceable", subject: `model/${model}`, message: `cannot place ${model}: ${reason}` });
  }
  const clear = (model: string) => {
    if (mstate.get(model)?.unplaceableReason) b.setModel(model, { unplaceableReason: null });
  };
  for (const r of requested) if (!unplaceable.has(r.model)) clear(r.model);
  for (const model of satisfied) clear(model);
}
