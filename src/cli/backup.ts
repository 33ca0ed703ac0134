// `llmgw backup FILE`: a consistent copy of the head node's database, taken while it runs.
// Restore by putting the file in a data dir as llmgw.db (with the old admin.token and
// join.token beside it, or agents will need the new join token).

import { existsSync, renameSync, writeFileSync } from "node:fs";
import { UsageError } from "../config/flags";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
import type { Command } from "./command";

export const command: Command = {
  name: "backup",
  summary: "Write a consistent copy of the database while the server runs.",
  usage: "llmgw backup FILE [--force]",
  flags: { force: { kind: "boolean", help: "overwrite FILE if it exists" }, ...CLIENT_FLAGS },
  details:
    "Restore: mkdir new-data && cp FILE new-data/llmgw.db && cp llmgw-data/*.token new-data/ && llmgw serve --data-dir new-data",
  examples: ["llmgw backup /var/backups/llmgw-$(date +%F).db"],
  async run({ flags, positionals }) {
    if (positionals.length !== 1) throw new UsageError("backup takes exactly one FILE");
    const file = positionals[0]!;
    if (existsSync(file) && !flags.force) throw new CliError(`${file} exists; pass --force to overwrite it`);
    const client = resolveClient(flags);
    const res = await fetch(`${client.server}/api/v1/backup`, { headers: { authorization: `Bearer ${client.token}` }, ...(client.tls ? { tls: client.tls } : {}) }).catch((e: Error) => {
      throw new CliError(`cannot reach the llmgw server at ${client.server}: ${e.message}`);
    });
    if (!res.ok) {
      const body = (await res.json().catch(() => undefined)) as { error?: { message?: string } } | undefined;
      throw new CliError(body?.error?.message ?? `backup failed: HTTP ${res.status}`);
    }
    const bytes = new Uint8Array(await res.arrayBuffer());
    // Written beside the target and renamed, so a half-written backup never has the real name.
    const tmp = `${file}.partial`;
    writeFileSync(tmp, bytes, { mode: 0o600 });
    renameSync(tmp, file);
    process.stdout.write(`backup written to ${file} (${bytes.length} bytes)\n`);
  },
};
