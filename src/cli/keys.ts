// `llmgw keys create|update|list|revoke`: client API keys for the router, with their team, the
// models they may use, when they expire, their priority and limits. A key is printed once, at
// creation; the server keeps only its hash.

import { UsageError, type FlagValues } from "../config/flags";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { safeDeep, safeText } from "../lib/text";
import { LIMIT_FLAGS, type LimitView, limitCells, limitFields } from "./limit-flags";
import { table } from "./render";

/** A key as `GET /api/v1/keys` lists it. */
interface KeyView extends LimitView {
  name: string;
  pool: string | null;
  team: string | null;
  models: string[] | null;
  expires_at: string | null;
  created_at: string;
  updated_at: string | null;
}

const USAGE = [
  "llmgw keys create NAME [--team T] [--pool P] [--models m1,m2] [--rpm N] [--tpm N] [--max-concurrent N] [--budget-tokens N] [--budget-gpu-hours H] [--budget-period day|week|month] [--expires 30d] [--priority interactive|batch]",
  "  llmgw keys update NAME [the same flags; a flag given none clears it]",
  "  llmgw keys list [-o table|wide|json]",
  "  llmgw keys revoke NAME",
].join("\n");

export const command: Command = {
  name: "keys",
  summary: "Create, change, list and revoke client API keys for the router.",
  usage: USAGE,
  flags: {
    team: { kind: "string", value: "TEAM", help: "the team the key belongs to (held to the team's limits too)", complete: "teams" },
    pool: { kind: "string", value: "POOL", help: "bind the key to one pool: its requests see only that pool's models" },
    models: { kind: "string", value: "M1,M2", help: "the only models (names or aliases) the key may use, comma-separated" },
    expires: { kind: "string", value: "WHEN", help: "when the key stops working: a duration from now (30d, 12h) or an RFC 3339 time" },
    ...LIMIT_FLAGS,
    ...outputFlag(["table", "wide", "json"]),
    ...CLIENT_FLAGS,
  },
  details:
    "Keys are checked on /v1/* when serve runs with --require-api-key. The key is shown once, when created; only its SHA-256 is stored. A key is held to its own limits and to its team's (shared by the team's keys). On update, a flag given `none` clears what it sets (a limit: no limit).",
  examples: [
    "llmgw keys create web --team search --rpm 600 --tpm 200000",
    "llmgw keys create nightly --team search --priority batch --budget-gpu-hours 20 --budget-period day",
    "llmgw keys create trial --models llama-3-8b --expires 30d",
    "llmgw keys update web --rpm none",
    "llmgw keys list -o wide",
    "llmgw keys revoke trial",
  ],
  async run({ flags, positionals }) {
    const [verb, name, ...extra] = positionals;
    const format = outputFormat(flags, ["table", "wide", "json"]);
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
    const client = resolveClient(flags);
    switch (verb) {
      case "create": {
        if (!name) throw new UsageError("keys create needs a NAME");
        const res = await client.send<KeyView & { key: string; message: string }>("POST", "/api/v1/keys", { name, ...keyFields(flags, false) });
        if (format === "json") process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
        else process.stdout.write(`${res.key}\n`), process.stderr.write(`${safeText(res.message)}\n`);
        return;
      }
      case "update": {
        if (!name) throw new UsageError("keys update needs a NAME");
        const body = keyFields(flags, true);
        if (Object.keys(body).length === 0) throw new UsageError("keys update needs something to change: --team, --pool, --models, --expires, --priority or a limit flag");
        const res = await client.send<KeyView & { message: string }>("PATCH", `/api/v1/keys/${encodeURIComponent(name)}`, body);
        if (format === "json") process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
        else process.stdout.write(`${safeText(res.message)}\n`);
        return;
      }
      case "list": {
        const keys = await client.get<KeyView[]>("/api/v1/keys");
        if (format === "json") process.stdout.write(`${JSON.stringify(keys, null, 2)}\n`);
        else process.stdout.write(keys.length ? `${keyTable(keys, format === "wide")}\n` : "No API keys. Create one with `llmgw keys create NAME`.\n");
        return;
      }
      case "revoke": {
        if (!name) throw new UsageError("keys revoke needs a NAME");
        const res = await client.send<{ message: string }>("DELETE", `/api/v1/keys/${encodeURIComponent(name)}`);
        process.stdout.write(`${safeText(res.message)}\n`);
        return;
      }
      default:
        throw new UsageError(verb ? `unknown keys action "${verb}" (create, update, list or revoke)` : "keys needs an action: create, update, list or revoke");
    }
  },
};

/** The body fields the flags give; on update (`clearable`) a flag given `none` is null. */
function keyFields(flags: FlagValues, clearable: boolean): Record<string, unknown> {
  const out: Record<string, unknown> = limitFields(flags, clearable);
  for (const f of ["team", "pool", "expires"] as const) {
    const v = flags[f];
    if (typeof v !== "string") continue;
    if (v === "none" && !clearable) throw new UsageError(`--${f} none clears it: use it with update; on create leave the flag out`);
    out[f] = v === "none" ? null : v;
  }
  const models = flags.models;
  if (typeof models === "string") {
    if (models === "none" && clearable) out.models = null;
    else {
      const list = models.split(",").map((m) => m.trim()).filter((m) => m !== "");
      if (list.length === 0) throw new UsageError("--models needs at least one model name (comma-separated)");
      out.models = list;
    }
  }
  return out;
}

/**
 * NAME TEAM POOL TIER RPM TPM CONCURRENT BUDGET EXPIRES (wide: MODELS and CREATED too). A limit
 * shows its current use in front of it ("12/60") once the routers' admission reports it.
 */
function keyTable(keys: KeyView[], wide: boolean): string {
  const headers = ["NAME", "TEAM", "POOL", "TIER", "RPM", "TPM", "CONCURRENT", "BUDGET", "EXPIRES", ...(wide ? ["MODELS", "CREATED"] : [])];
  const rows = safeDeep(keys).map((k) => [
    k.name,
    k.team ?? "-",
    k.pool ?? "(any)",
    k.priority ?? (k.team ? "(team)" : "interactive"),
    ...limitCells(k),
    k.expires_at ?? "never",
    ...(wide ? [k.models ? k.models.join(",") : "(all)", k.created_at] : []),
  ]);
  return table(headers, rows);
}
