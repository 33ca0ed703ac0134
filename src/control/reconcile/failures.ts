// Failed starts: how long a model waits before its next try, and when it stops being tried.

import { oneLine } from "../../lib/format";
import { FAILURE_TEXT_MAX } from "./engine-failure";
import type { ReconcileConfig } from "./config";
import type { Plan } from "./plan";
import type { ModelStateRow } from "../types";

/** How long to wait before retrying a model after `failures` consecutive failures. */
export function backoffDelay(failures: number, cfg: Pick<ReconcileConfig, "backoffMs" | "backoffMaxMs">): number {
  if (failures <= 0) return 0;
  return Math.min(cfg.backoffMaxMs, cfg.backoffMs * 2 ** Math.min(failures - 1, 30));
}

/**
 * True while a model must wait before its next start: after failed starts, or crashes soon after
 * ready (crashes.ts), whichever run is longer. A clock that went backwards does not extend the wait.
 */
export function inBackoff(st: Pick<ModelStateRow, "failures" | "crashes" | "lastFailureAt"> | undefined, now: number, cfg: Pick<ReconcileConfig, "backoffMs" | "backoffMaxMs">): boolean {
  const run = st ? Math.max(st.failures, st.crashes) : 0;
  if (!st || run <= 0 || st.lastFailureAt == null) return false;
  const elapsed = now - st.lastFailureAt;
  return elapsed >= 0 && elapsed < backoffDelay(run, cfg);
}

/** Records a failed start: counts it, and parks the model once it has failed too often in a row. */
export function recordFailure(
  plan: Plan,
  model: string,
  st: ModelStateRow | undefined,
  error: string,
  now: number,
  cfg: Pick<ReconcileConfig, "maxFailures">,
): void {
  const pending = plan.modelState.get(model) ?? {};
  const failures = (pending.failures ?? st?.failures ?? 0) + 1;
  const parked = failures >= cfg.maxFailures;
  plan.modelState.set(model, { ...pending, failures, lastFailureAt: now, reason: error, ...(parked ? { parked: true } : {}) });
  if (parked && !(st?.parked ?? false))
    plan.events.push({
      kind: "model.parked",
      subject: `model/${model}`,
      message: `model ${model} parked after ${failures} failed starts; not retried until unparked or changed. Last error: ${oneLine(error, FAILURE_TEXT_MAX)}`,
    });
}
