// Step 3: an on-demand model is wanted while it is used, not only while it is asked for cold:
// the router's last-used stamps of its replicas count as asking. Records the newest use as the
// model's last request, and returns model state as the rest of the step must read it.

import type { ReconcileContext } from "./context";
import type { PlanBuilder } from "./plan";
import { type ModelStateRow, emptyModelState } from "../types";

/** A use this close to the recorded request is the same news: not written again. */
const SAME_REQUEST_MS = 1000;

/** The newest last-used stamp of any replica of each model. */
export function lastUseByModel(ctx: Pick<ReconcileContext, "snapshot" | "lastUsed">): Map<string, number> {
  const usedAt = new Map<string, number>();
  for (const r of ctx.snapshot.replicas) {
    const t = ctx.lastUsed.get(r.id);
    if (t !== undefined && t > (usedAt.get(r.model) ?? 0)) usedAt.set(r.model, t);
  }
  return usedAt;
}

export function recordUse(ctx: ReconcileContext, b: PlanBuilder): Map<string, ModelStateRow> {
  const mstate = new Map(ctx.modelState);
  const usedAt = lastUseByModel(ctx);
  for (const m of ctx.snapshot.models) {
    if (!m.spec.on_demand) continue;
    const t = usedAt.get(m.name);
    const st = mstate.get(m.name);
    // A stamp from the future is a clock that went back, not news.
    if (t === undefined || t > ctx.now || (st?.lastRequestedAt != null && st.lastRequestedAt >= t - SAME_REQUEST_MS)) continue;
    b.setModel(m.name, { lastRequestedAt: t });
    mstate.set(m.name, { ...(st ?? emptyModelState(m.name)), lastRequestedAt: t });
  }
  return mstate;
}
