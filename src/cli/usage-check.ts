// `llmgw usage --check`: per replica, the usage ledger against the engine's own token counters
// (GET /api/v1/usage/check): the engine's tokens since the baseline, the ledger's, and the
// difference. Exits 1 when any replica's drift is not 0, so a cron job or CI can alarm on it.

import { safeDeep } from "../lib/text";
import type { ReplicaDrift } from "../protocol/ledger-check";
import type { Client } from "./client";
import { table } from "./render";

const STATE: Record<ReplicaDrift["state"], string> = { checked: "checked", no_counters: "no counters", waiting: "waiting" };

/** Prints the check; answers the exit code: 1 when a drift is not 0, else 0. */
export async function usageCheck(client: Client, format: string): Promise<number> {
  const rows = await client.get<ReplicaDrift[]>("/api/v1/usage/check");
  const drifted = rows.filter((r) => r.drift_prompt_tokens !== 0 || r.drift_completion_tokens !== 0);
  if (format === "json") process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  else if (rows.length === 0) process.stdout.write("No replica checked yet: the router has read no engine's counters.\n");
  else {
    const pair = (p: number, c: number) => `${p}/${c}`;
    const shown = safeDeep(rows);
    process.stdout.write(
      `${table(
        ["REPLICA", "MODEL", "STATE", "ENGINE", "LEDGER", "DRIFT"],
        shown.map((r) => {
          const known = r.state === "checked";
          return [r.replica, r.model, STATE[r.state], known ? pair(r.engine_prompt_tokens, r.engine_completion_tokens) : "-", known ? pair(r.ledger_prompt_tokens, r.ledger_completion_tokens) : "-", known ? pair(r.drift_prompt_tokens, r.drift_completion_tokens) : "-"];
        }),
      )}\n`,
    );
    process.stdout.write(
      drifted.length === 0
        ? "Tokens as prompt/completion since each replica's baseline. No drift: the ledger counted every token the engines did.\n"
        : `Tokens as prompt/completion since each replica's baseline. Drift on ${drifted.length} replica(s): the engine counted tokens the ledger did not (or the reverse); see the README on what a cut stream leaves.\n`,
    );
  }
  return drifted.length > 0 ? 1 : 0;
}
