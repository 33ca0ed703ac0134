// The usage ledger checked against the engines' own token counters, per replica: what the router
// measures (router/reconcile-ledger.ts), what the router thread sends the control plane
// (router-link.ts), what GET /api/v1/usage/check answers and `llmgw usage --check` shows.

import { z } from "zod";

export const ReplicaDriftSchema = z.object({
  replica: z.string(),
  model: z.string(),
  state: z
    .enum(["checked", "no_counters", "waiting"])
    .describe("checked: compared at a moment with nothing in flight since the baseline; no_counters: its engine exports no token counters, so it cannot be checked; waiting: no such moment seen yet."),
  engine_prompt_tokens: z.number().describe("The engine's prompt-token counter's growth since the baseline, as of the last check."),
  engine_completion_tokens: z.number().describe("The engine's generation-token counter's growth since the baseline."),
  ledger_prompt_tokens: z.number().describe("Prompt tokens the ledger counted for requests that ended on this replica since the baseline."),
  ledger_completion_tokens: z.number(),
  drift_prompt_tokens: z.number().describe("engine − ledger: 0 when the ledger counted every prompt token the engine did."),
  drift_completion_tokens: z.number(),
  since: z.number().describe("The baseline's time, ms since the epoch (0: none)."),
  checked_at: z.number().describe("The last check's time, ms since the epoch (0: none)."),
  engine_restarts: z.number().describe("Baselines taken again because the engine's counters went down (it restarted)."),
});
export type ReplicaDrift = z.infer<typeof ReplicaDriftSchema>;

/** Whoever can answer for the router's reconciliation (the router, or its thread's link). */
export interface LedgerCheckSource {
  ledgerCheck(): Promise<ReplicaDrift[]>;
}
