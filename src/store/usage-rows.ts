// The usage ledger's rows as both dialects write and read them: rows of one key, model and hour
// added up before a write (one upsert may touch a row once, ../protocol/usage-rows.ts), cut into
// batches the databases take in one statement, and read back from the columns.

import type { UsageRow } from "../protocol/routing";
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
