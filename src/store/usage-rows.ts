// The usage ledger's rows as both dialects write and read them: rows of one key, model and hour
// added up before a write (one upsert may touch a row once, ../protocol/usage-rows.ts), cut into
// batches the databases take in one statement, and read back from the columns.

import { type AnyColumn, sql } from "drizzle-orm";
import type { UsageRow } from "../protocol/routing";
import type { UsageTotal } from "../control/store-port";
export { mergeUsageRows } from "../protocol/usage-rows";

/** Rows per INSERT: 14 values each, well under SQLite's and PostgreSQL's limits on a statement's parameters. */
export const USAGE_BATCH = 500;

/** A row as the schemas' columns (drizzle's property names). */
export function usageValues(r: UsageRow) {
  return {
    team: r.team,
    key: r.key,
    model: r.model,
    hour: r.hour,
    requests: r.requests,
    promptTokens: r.prompt_tokens,
    completionTokens: r.completion_tokens,
    cachedTokens: r.cached_tokens,
    errors: r.errors,
    errors4xx: r.errors_4xx,
    errors5xx: r.errors_5xx,
    refused: r.refused,
    aborted: r.aborted,
    gpuSeconds: r.gpu_seconds,
  };
}

/** A row read back (PostgreSQL's bigints may come as strings). */
export function usageRow(v: ReturnType<typeof usageValues>): UsageRow {
  return {
    team: v.team,
    key: v.key,
    model: v.model,
    hour: Number(v.hour),
    requests: Number(v.requests),
    prompt_tokens: Number(v.promptTokens),
    completion_tokens: Number(v.completionTokens),
    cached_tokens: Number(v.cachedTokens),
    errors: Number(v.errors),
    errors_4xx: Number(v.errors4xx),
    errors_5xx: Number(v.errors5xx),
    refused: Number(v.refused),
    aborted: Number(v.aborted),
    gpu_seconds: Number(v.gpuSeconds),
  };
}

/** The ledger's counter columns, in either dialect's table. */
interface CounterColumns {
  requests: AnyColumn;
  promptTokens: AnyColumn;
  completionTokens: AnyColumn;
  cachedTokens: AnyColumn;
  errors: AnyColumn;
  errors4xx: AnyColumn;
  errors5xx: AnyColumn;
  refused: AnyColumn;
  aborted: AnyColumn;
  gpuSeconds: AnyColumn;
}

/** An upsert's SET: each counter added to the stored one (both dialects name the proposed row `excluded`). */
export function addedCounters(t: CounterColumns) {
  return {
    requests: sql`${t.requests} + excluded.requests`,
    promptTokens: sql`${t.promptTokens} + excluded.prompt_tokens`,
    completionTokens: sql`${t.completionTokens} + excluded.completion_tokens`,
    cachedTokens: sql`${t.cachedTokens} + excluded.cached_tokens`,
    errors: sql`${t.errors} + excluded.errors`,
    errors4xx: sql`${t.errors4xx} + excluded.errors_4xx`,
    errors5xx: sql`${t.errors5xx} + excluded.errors_5xx`,
    refused: sql`${t.refused} + excluded.refused`,
    aborted: sql`${t.aborted} + excluded.aborted`,
    gpuSeconds: sql`${t.gpuSeconds} + excluded.gpu_seconds`,
  };
}

/** The ledger's columns the budgets' totals read, in either dialect's table. */
interface TotalColumns {
  hour: AnyColumn;
  promptTokens: AnyColumn;
  completionTokens: AnyColumn;
  gpuSeconds: AnyColumn;
}

/** A SELECT's fields: per start, the tokens (prompt and completion) and GPU-seconds of the hours from it (t0, g0, t1, g1, ...). */
export function totalFields(t: TotalColumns, starts: readonly number[]) {
  const out: Record<string, ReturnType<typeof sql>> = {};
  starts.forEach((s, i) => {
    out[`t${i}`] = sql`sum(case when ${t.hour} >= ${s} then ${t.promptTokens} + ${t.completionTokens} else 0 end)`;
    out[`g${i}`] = sql`sum(case when ${t.hour} >= ${s} then ${t.gpuSeconds} else 0 end)`;
  });
  return out;
}

/** A totals row read back (sums may come as strings, or null over no row). */
export function usageTotal(v: Record<string, unknown>, starts: readonly number[]): UsageTotal {
  return { team: String(v.team), key: String(v.key), tokens: starts.map((_, i) => Number(v[`t${i}`] ?? 0)), gpu_seconds: starts.map((_, i) => Number(v[`g${i}`] ?? 0)) };
}
