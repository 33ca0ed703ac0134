// `llmgw usage`: what each team, key and model used, from the usage ledger (GET /api/v1/usage):
// requests, prompt, completion and cached tokens, errors and aborted streams, per hour, or added
// up per team, key, model or pool. Plain text only (no colour, so NO_COLOR changes nothing).

import { UsageError } from "../config/flags";
import { safeDeep } from "../lib/text";
import type { UsageRowView } from "../protocol/views";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { table } from "./render";
import { usageCheck } from "./usage-check";

const GROUPS = ["team", "key", "model", "pool"] as const;
const FORMATS = ["table", "json", "csv"] as const;
/** The columns of -o csv, as the API names them. */
const CSV_FIELDS = ["hour", "team", "key", "model", "pool", "requests", "prompt_tokens", "completion_tokens", "cached_tokens", "errors", "errors_4xx", "errors_5xx", "refused", "aborted", "gpu_seconds"] as const;

export const command: Command = {
  name: "usage",
  summary: "Show what each team, key and model used: requests, tokens, errors, aborted streams.",
  usage: "llmgw usage [--by team|key|model|pool] [--since 24h] [-o table|json|csv]\n  llmgw usage --check [-o table|json]",
  flags: {
    by: { kind: "string", value: "GROUP", help: "add the hourly rows up per team, key, model or pool", choices: [...GROUPS] },
    since: { kind: "string", value: "DURATION", help: "how far back (default 24h): the hours that overlap it" },
    check: { kind: "boolean", help: "per replica, the ledger against the engine's own token counters; exits 1 when any drift is not 0" },
    ...outputFlag([...FORMATS]),
    ...CLIENT_FLAGS,
  },
  details:
    "Counts come from the engines' own usage, streamed requests included; a stream cut by its client or engine counts the tokens it streamed and shows under ABORTED. Requests without a key show under key and team \"-\". The ledger is written once a control-plane tick: the last few seconds may not show yet. GPU time is not metered yet (0). With --check, per replica: the engine's own prompt/completion token counters' growth since a baseline, the ledger's tokens for the requests that ended there, and the drift between them; the command exits 1 when any drift is not 0 (a replica whose engine exports no counters shows \"no counters\" and does not fail it).",
  examples: ["llmgw usage", "llmgw usage --by team --since 7d", "llmgw usage --by key -o csv > usage.csv", "llmgw usage --check"],
  async run({ flags, positionals }) {
    if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
    const format = outputFormat(flags, [...FORMATS]);
    const by = flags.by as string | undefined;
    if (flags.check === true) {
      if (format === "csv" || by !== undefined || flags.since !== undefined) throw new UsageError("--check takes no --by, --since or -o csv: it shows each replica's check as a table or JSON");
      return usageCheck(resolveClient(flags), format);
    }
    if (by !== undefined && !(GROUPS as readonly string[]).includes(by)) throw new UsageError(`--by must be one of ${GROUPS.join(", ")}, not "${by}"`);
    const q = new URLSearchParams();
    if (flags.since !== undefined) q.set("since", String(flags.since));
    if (by !== undefined) q.set("by", by);
    const rows = await resolveClient(flags).get<UsageRowView[]>(`/api/v1/usage${q.size > 0 ? `?${q}` : ""}`);
    if (format === "json") process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
    else if (format === "csv") process.stdout.write(csv(rows));
    else process.stdout.write(rows.length > 0 ? `${usageTable(safeDeep(rows), by)}\n` : "No usage recorded in that time.\n");
  },
};

/** One line per row, RFC 4180 quoting. */
export function csv(rows: readonly UsageRowView[]): string {
  const cell = (v: unknown): string => {
    const s = v === undefined ? "" : String(v);
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  };
  const lines = [CSV_FIELDS.join(",")];
  for (const r of rows) lines.push(CSV_FIELDS.map((f) => cell(f === "hour" ? (r.hour > 0 ? new Date(r.hour).toISOString() : "") : r[f])).join(","));
  return `${lines.join("\n")}\n`;
}

const dash = (s: string | undefined): string => (s === undefined || s === "" ? "-" : s);

/** HOUR TEAM KEY MODEL REQUESTS PROMPT COMPLETION CACHED ERRORS ABORTED; grouped, the group's column alone. */
function usageTable(rows: readonly UsageRowView[], by: string | undefined): string {
  const first = by === undefined ? ["HOUR", "TEAM", "KEY", "MODEL"] : [by.toUpperCase()];
  const lead = (r: UsageRowView): string[] =>
    by === undefined ? [new Date(r.hour).toISOString().slice(0, 13).replace("T", " ") + ":00", dash(r.team), dash(r.key), r.model] : [dash(by === "pool" ? r.pool : r[by as "team" | "key" | "model"])];
  return table(
    [...first, "REQUESTS", "PROMPT", "COMPLETION", "CACHED", "ERRORS", "ABORTED"],
    rows.map((r) => [...lead(r), String(r.requests), String(r.prompt_tokens), String(r.completion_tokens), String(r.cached_tokens), String(r.errors), String(r.aborted)]),
  );
}
