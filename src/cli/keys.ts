// `llmgw keys create|list|revoke`: client API keys for the router. A key is printed once, at
// creation; the server keeps only its hash.

import { UsageError } from "../config/flags";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { safeDeep, safeText } from "../lib/text";
import { table } from "./render";

export const command: Command = {
  name: "keys",
  summary: "Create, list and revoke client API keys for the router.",
  usage: "llmgw keys create NAME [--pool POOL]\n  llmgw keys list [-o json]\n  llmgw keys revoke NAME",
  flags: { pool: { kind: "string", value: "POOL", help: "bind the key to one pool: its requests see only that pool's models" }, ...outputFlag(["table", "json"]), ...CLIENT_FLAGS },
  details: "Keys are checked on /v1/* when serve runs with --require-api-key. The key is shown once, when created; only its SHA-256 is stored.",
  examples: ["llmgw keys create team-a --pool team-a", "llmgw keys list", "llmgw keys revoke team-a"],
  async run({ flags, positionals }) {
    const [verb, name, ...extra] = positionals;
    const format = outputFormat(flags, ["table", "json"]);
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
    const client = resolveClient(flags);
    switch (verb) {
      case "create": {
        if (!name) throw new UsageError("keys create needs a NAME");
        const res = await client.send<{ name: string; key: string; pool: string | null; message: string }>("POST", "/api/v1/keys", { name, ...(flags.pool ? { pool: flags.pool } : {}) });
        if (format === "json") process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
        else process.stdout.write(`${res.key}\n`), process.stderr.write(`${safeText(res.message)}\n`);
        return;
      }
      case "list": {
        const keys = await client.get<{ name: string; pool: string | null; created_at: string }[]>("/api/v1/keys");
        if (format === "json") process.stdout.write(`${JSON.stringify(keys, null, 2)}\n`);
        else process.stdout.write(keys.length ? `${table(["NAME", "POOL", "CREATED"], safeDeep(keys).map((k) => [k.name, k.pool ?? "(any)", k.created_at]))}\n` : "No API keys. Create one with `llmgw keys create NAME`.\n");
        return;
      }
      case "revoke": {
        if (!name) throw new UsageError("keys revoke needs a NAME");
        const res = await client.send<{ message: string }>("DELETE", `/api/v1/keys/${encodeURIComponent(name)}`);
        process.stdout.write(`${safeText(res.message)}\n`);
        return;
      }
      default:
        throw new UsageError(verb ? `unknown keys action "${verb}" (create, list or revoke)` : "keys needs an action: create, list or revoke");
    }
  },
};
