// The flags keys and teams share for their limits and priority, turned into the admin API's
// body fields (a limit given `none` on update clears it), and a key's or a team's limits as a
// table shows them: each with its current use in front ("12/60") once the routers report it.

import { UsageError, type FlagSpecs, type FlagValues } from "../config/flags";

const TIERS = ["interactive", "batch"] as const;
const PERIODS = ["day", "week", "month"] as const;

/** Flag name → body field, for the whole-number limits. */
const COUNTS = [
  ["rpm", "rpm"],
  ["tpm", "tpm"],
  ["max-concurrent", "max_concurrent"],
  ["budget-tokens", "budget_tokens"],
] as const;

export const LIMIT_FLAGS: FlagSpecs = {
  rpm: { kind: "string", value: "N", help: "requests per minute" },
  tpm: { kind: "string", value: "N", help: "tokens (prompt and completion) per minute" },
  "max-concurrent": { kind: "string", value: "N", help: "requests in flight at once" },
  "budget-tokens": { kind: "string", value: "N", help: "tokens per budget period" },
  "budget-gpu-hours": { kind: "string", value: "H", help: "GPU-hours per budget period (may be fractional)" },
  "budget-period": { kind: "string", value: "PERIOD", help: "the budgets' period: day, week or month (default month)", choices: PERIODS },
  priority: { kind: "string", value: "TIER", help: "admission tier: interactive (default) or batch, admitted after interactive", choices: TIERS },
};

/** The body fields the limit flags give; with `clearable`, a flag given `none` is null (cleared). */
export function limitFields(flags: FlagValues, clearable: boolean): Record<string, number | string | null> {
  const out: Record<string, number | string | null> = {};
  const given = (flag: string): string | undefined => {
    const v = flags[flag];
    if (v === undefined) return undefined;
    if (typeof v !== "string") throw new UsageError(`--${flag} needs a value`);
    return v;
  };
  const none = (flag: string, v: string) => {
    if (v !== "none") return false;
    if (!clearable) throw new UsageError(`--${flag} none clears a limit: use it with update; on create leave the flag out`);
    return true;
  };
  for (const [flag, field] of COUNTS) {
    const v = given(flag);
    if (v === undefined) continue;
    if (none(flag, v)) out[field] = null;
    else if (/^[1-9]\d{0,15}$/.test(v)) out[field] = Number(v);
    else throw new UsageError(`--${flag} must be a positive whole number${clearable ? " (or none to clear it)" : ""}, not "${v}"`);
  }
  const hours = given("budget-gpu-hours");
  if (hours !== undefined) {
    if (none("budget-gpu-hours", hours)) out.budget_gpu_hours = null;
    else if (/^\d+(\.\d+)?$/.test(hours) && Number(hours) > 0) out.budget_gpu_hours = Number(hours);
    else throw new UsageError(`--budget-gpu-hours must be a positive number of GPU-hours (e.g. 2 or 0.5)${clearable ? " or none" : ""}, not "${hours}"`);
  }
  const period = given("budget-period");
  if (period !== undefined) {
    if (none("budget-period", period)) out.budget_period = null;
    else if ((PERIODS as readonly string[]).includes(period)) out.budget_period = period;
    else throw new UsageError(`--budget-period must be day, week or month, not "${period}"`);
  }
  const tier = given("priority");
  if (tier !== undefined) {
    if (none("priority", tier)) out.priority = null;
    else if ((TIERS as readonly string[]).includes(tier)) out.priority = tier;
    else throw new UsageError(`--priority must be interactive or batch, not "${tier}"`);
  }
  return out;
}

// One rendering of limits with their use for the terminal and the dashboard.
export { type LimitView, limitCells } from "../lib/limit-cells";
