// A key's or a team's limits as listed, each with its current use in front ("12/60") once the
// routers report it: the one rendering `keys list`, `teams list` and the dashboard share. Pure.

/** A key's or a team's limits as listed by the admin API. */
export interface LimitView {
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  budget_tokens: number | null;
  budget_gpu_hours: number | null;
  budget_period: string | null;
  priority: string | null;
  /** Each limit's current use, once the routers' admission reports it (absent until then). */
  use?: { rpm?: number; tpm?: number; concurrent?: number; budget_tokens?: number; budget_gpu_hours?: number };
}

/** "60", or "12/60" once its use is known; "-" for no limit. */
function cell(limit: number | null, use: number | undefined): string {
  if (limit === null) return "-";
  return use === undefined ? String(limit) : `${use}/${limit}`;
}

const compact = (n: number) => (n >= 1e9 && n % 1e7 === 0 ? `${n / 1e9}G` : n >= 1e6 && n % 1e4 === 0 ? `${n / 1e6}M` : n >= 1e4 && n % 10 === 0 ? `${n / 1e3}k` : String(n));

/** The RPM, TPM, CONCURRENT and BUDGET cells. */
export function limitCells(l: LimitView): string[] {
  const u = l.use ?? {};
  const budgets: string[] = [];
  if (l.budget_tokens !== null) budgets.push(`${u.budget_tokens === undefined ? "" : `${compact(u.budget_tokens)}/`}${compact(l.budget_tokens)} tok`);
  if (l.budget_gpu_hours !== null) budgets.push(`${u.budget_gpu_hours === undefined ? "" : `${u.budget_gpu_hours}/`}${l.budget_gpu_hours} GPU-h`);
  const budget = budgets.length > 0 ? `${budgets.join(", ")}/${l.budget_period ?? "month"}` : "-";
  return [cell(l.rpm, u.rpm), cell(l.tpm, u.tpm), cell(l.max_concurrent, u.concurrent), budget];
}
