// A usage ledger row for tests: every counter zero, one request, unless the test says otherwise.

import type { UsageRow } from "../../src/protocol/routing";

export function usageRow(over: Partial<UsageRow> = {}): UsageRow {
  return {
    team: "",
    key: "",
    model: "m",
    hour: 0,
    requests: 1,
    prompt_tokens: 0,
    completion_tokens: 0,
    cached_tokens: 0,
    errors: 0,
    errors_4xx: 0,
    errors_5xx: 0,
    refused: 0,
    aborted: 0,
    gpu_seconds: 0,
    ...over,
  };
}
