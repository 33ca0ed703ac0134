// `llmgw cordon|uncordon|drain NODE`: the three node administration verbs, which differ only in
// the API action they call.

import { UsageError } from "../config/flags";
import { CLIENT_FLAGS, resolveClient } from "./client";
import type { Command } from "./command";

function nodeCommand(action: "cordon" | "uncordon" | "drain", summary: string): Command {
  return {
    name: action,
    summary,
    usage: `llmgw ${action} NODE [--server URL] [--token TOKEN]`,
    flags: { ...CLIENT_FLAGS },
    examples: [`llmgw ${action} gpu-03`],
    async run({ flags, positionals }) {
      if (positionals.length !== 1) throw new UsageError(`${action} takes exactly one node name`);
      const client = resolveClient(flags);
      const res = await client.send<{ message: string }>("POST", `/api/v1/nodes/${encodeURIComponent(positionals[0]!)}/${action}`);
      process.stdout.write(`${res.message}\n`);
    },
  };
}

export const cordon = nodeCommand("cordon", "Stop placing new replicas on a node; running ones stay.");
export const uncordon = nodeCommand("uncordon", "Allow placement on a node again.");
export const drain = nodeCommand("drain", "Move a node's replicas elsewhere, then leave it cordoned and empty.");
