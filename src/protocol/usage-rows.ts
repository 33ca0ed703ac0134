// The usage ledger's rows added up: the control plane gathers its router's rows until they are
// written, the store merges a batch before its upsert, the API groups rows for a reader.

import { USAGE_COUNTERS, type UsageRow } from "./routing";

/** The rows with those of the same team, key, model and hour added together. */
export function mergeUsageRows(rows: readonly UsageRow[]): UsageRow[] {
  const by = new Map<string, UsageRow>();
  for (const r of rows) {
    const id = `${r.team}\u0000${r.key}\u0000${r.model}\u0000${r.hour}`;
    const had = by.get(id);
    if (had === undefined) by.set(id, { ...r });
    else for (const c of USAGE_COUNTERS) had[c] += r[c];
  }
  return [...by.values()];
}

/** The rows added up per value of `by` (the others left ""; hour 0 when grouped), largest in tokens first. */
export function groupUsageRows(rows: readonly UsageRow[], by: "team" | "key" | "model"): UsageRow[] {
  const out = new Map<string, UsageRow>();
  for (const r of rows) {
    const v = r[by];
    const had = out.get(v);
    if (had === undefined) out.set(v, { ...r, team: by === "team" ? v : "", key: by === "key" ? v : "", model: by === "model" ? v : "", hour: 0 });
    else for (const c of USAGE_COUNTERS) had[c] += r[c];
  }
  return [...out.values()].sort((a, b) => b.prompt_tokens + b.completion_tokens - (a.prompt_tokens + a.completion_tokens) || (a[by] < b[by] ? -1 : 1));
}
