// The budgets' periods, in UTC, as the router (budget.ts) and the control plane (budget-spend.ts)
// both count them: a day from 00:00, a week from Monday 00:00, a calendar month from its 1st.

export type BudgetPeriod = "day" | "week" | "month";
/** A period's place in BudgetSpent's triples. */
export const PERIOD_INDEX = { day: 0, week: 1, month: 2 } as const;
const DAY_MS = 86_400_000;

/** The start of the period holding `now` (ms since epoch). */
export function periodStart(now: number, p: BudgetPeriod): number {
  const day = now - (((now % DAY_MS) + DAY_MS) % DAY_MS);
  if (p === "day") return day;
  if (p === "week") return day - ((new Date(day).getUTCDay() + 6) % 7) * DAY_MS;
  const d = new Date(day);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** The end of the period holding `now`: when its budget is whole again. */
export function periodEnd(now: number, p: BudgetPeriod): number {
  if (p === "day") return periodStart(now, p) + DAY_MS;
  if (p === "week") return periodStart(now, p) + 7 * DAY_MS;
  const d = new Date(periodStart(now, p));
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}

/** The starts of the day, the week and the month holding `now`, in BudgetSpent's order. */
export function periodStarts(now: number): [number, number, number] {
  return [periodStart(now, "day"), periodStart(now, "week"), periodStart(now, "month")];
}
