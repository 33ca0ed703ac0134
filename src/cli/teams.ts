// `llmgw teams create|update|list|delete`: teams, whose limits their keys share (a key is held to
// its own and its team's). A team with keys is deleted only with --force, which revokes them.

import { UsageError } from "../config/flags";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { safeDeep, safeText } from "../lib/text";
import { LIMIT_FLAGS, type LimitView, limitCells, limitFields } from "./limit-flags";
import { table } from "./render";

/** A team as `GET /api/v1/teams` lists it. */
interface TeamView extends LimitView {
  name: string;
  keys: string[];
  created_at: string;
  updated_at: string;
}

export const command: Command = {
  name: "teams",
  summary: "Create, change, list and delete teams: limits their keys share.",
  usage: [
    "llmgw teams create NAME [--rpm N] [--tpm N] [--max-concurrent N] [--budget-tokens N] [--budget-gpu-hours H] [--budget-period day|week|month] [--priority interactive|batch]",
    "  llmgw teams update NAME [the same flags; a flag given none clears it]",
    "  llmgw teams list [-o table|wide|json]",
    "  llmgw teams delete NAME [--force]",
  ].join("\n"),
  flags: {
    ...LIMIT_FLAGS,
    force: { kind: "boolean", help: "delete: even while keys belong to the team, revoking them with it" },
    ...outputFlag(["table", "wide", "json"]),
    ...CLIENT_FLAGS,
  },
  details:
    "A team's limits are shared by all its keys; each key is also held to its own. A key that names no priority takes its team's. Put a key in a team with `llmgw keys create NAME --team TEAM`.",
  examples: ["llmgw teams create search --rpm 1200 --budget-gpu-hours 100 --budget-period week", "llmgw teams update search --rpm none", "llmgw teams list", "llmgw teams delete search --force"],
  async run({ flags, positionals }) {
    const [verb, name, ...extra] = positionals;
    const format = outputFormat(flags, ["table", "wide", "json"]);
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
    if (flags.force && verb !== "delete") throw new UsageError("--force goes with teams delete only");
    const client = resolveClient(flags);
    const print = (res: { message: string }): void => void process.stdout.write(format === "json" ? `${JSON.stringify(res, null, 2)}\n` : `${safeText(res.message)}\n`);
    switch (verb) {
      case "create": {
        if (!name) throw new UsageError("teams create needs a NAME");
        return print(await client.send<TeamView & { message: string }>("POST", "/api/v1/teams", { name, ...limitFields(flags, false) }));
      }
      case "update": {
        if (!name) throw new UsageError("teams update needs a NAME");
        const body = limitFields(flags, true);
        if (Object.keys(body).length === 0) throw new UsageError("teams update needs something to change: --priority or a limit flag");
        return print(await client.send<TeamView & { message: string }>("PATCH", `/api/v1/teams/${encodeURIComponent(name)}`, body));
      }
      case "list": {
        const teams = await client.get<TeamView[]>("/api/v1/teams");
        if (format === "json") process.stdout.write(`${JSON.stringify(teams, null, 2)}\n`);
        else process.stdout.write(teams.length ? `${teamTable(teams, format === "wide")}\n` : "No teams. Create one with `llmgw teams create NAME`.\n");
        return;
      }
      case "delete": {
        if (!name) throw new UsageError("teams delete needs a NAME");
        return print(await client.send<{ message: string }>("DELETE", `/api/v1/teams/${encodeURIComponent(name)}${flags.force ? "?force=1" : ""}`));
      }
      default:
        throw new UsageError(verb ? `unknown teams action "${verb}" (create, update, list or delete)` : "teams needs an action: create, update, list or delete");
    }
  },
};

/** NAME TIER RPM TPM CONCURRENT BUDGET KEYS (wide: the keys by name, and CREATED). */
function teamTable(teams: TeamView[], wide: boolean): string {
  const headers = ["NAME", "TIER", "RPM", "TPM", "CONCURRENT", "BUDGET", "KEYS", ...(wide ? ["KEY NAMES", "CREATED"] : [])];
  const rows = safeDeep(teams).map((t) => [t.name, t.priority ?? "interactive", ...limitCells(t), String(t.keys.length), ...(wide ? [t.keys.join(",") || "-", t.created_at] : [])]);
  return table(headers, rows);
}
