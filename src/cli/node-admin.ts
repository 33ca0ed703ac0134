// `llmgw cordon|uncordon|drain NODE`: the three node administration verbs, which differ only in
// the API action they call.

import { UsageError } from "../config/flags";
import { safeText } from "../lib/text";
import { parseDuration } from "../protocol/duration";
import { CLIENT_FLAGS, resolveClient } from "./client";
import { STALL_AFTER, WAIT_TIMEOUT, waitForDrain } from "./wait";
import type { Command } from "./command";

function nodeCommand(action: "cordon" | "uncordon" | "drain", summary: string): Command {
  const drain = action === "drain";
  return {
    name: action,
    summary,
    usage: `llmgw ${action} NODE${drain ? " [--wait [--timeout DURATION] [--stall DURATION]]" : ""} [--server URL] [--token TOKEN]`,
    flags: {
      ...(drain
        ? {
            wait: {
              kind: "boolean" as const,
              short: "w",
              help: "follow the replicas as they move, until the node is empty; exit 1 at once, with why, if the drain can never finish",
            },
            timeout: { kind: "string" as const, value: "DURATION", help: `give up waiting after this long, exit 1 with what holds it up (default ${WAIT_TIMEOUT})` },
            stall: { kind: "string" as const, value: "DURATION", help: `say so, with the cause, when nothing has moved for this long, and keep waiting (default ${STALL_AFTER})` },
          }
        : {}),
      ...CLIENT_FLAGS,
    },
    ...(drain
      ? {
          details:
            "A replica on a draining node stops once replicas elsewhere cover its model, so the model never has fewer ready than before. A drain that cannot finish (a model with nowhere else to go) shows in `llmgw status` under Attention, with why.",
        }
      : {}),
    examples: drain ? ["llmgw drain gpu-03", "llmgw drain gpu-03 --wait", "llmgw drain gpu-03 --wait --timeout 30m --stall 5m"] : [`llmgw ${action} gpu-03`],
    async run({ flags, positionals }) {
      if (positionals.length !== 1) throw new UsageError(`${action} takes exactly one node name`);
      const timeout = parseDuration((flags.timeout as string | undefined) ?? WAIT_TIMEOUT);
      if (timeout === undefined) throw new UsageError(`--timeout must be a duration like 10m, not "${flags.timeout}"`);
      const stall = parseDuration((flags.stall as string | undefined) ?? STALL_AFTER);
      if (stall === undefined || stall <= 0) throw new UsageError(`--stall must be a duration like 2m, not "${flags.stall}"`);
      const client = resolveClient(flags);
      const res = await client.send<{ message: string }>("POST", `/api/v1/nodes/${encodeURIComponent(positionals[0]!)}/${action}`);
      process.stdout.write(`${safeText(res.message)}\n`);
      if (drain && flags.wait) await waitForDrain(client, positionals[0]!, { timeoutMs: timeout, stallMs: stall });
    },
  };
}

export const cordon = nodeCommand("cordon", "Stop placing new replicas on a node; running ones stay.");
export const uncordon = nodeCommand("uncordon", "Allow placement on a node again.");
export const drain = nodeCommand("drain", "Move a node's replicas elsewhere, then leave it cordoned and empty.");
