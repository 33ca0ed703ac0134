// `llmgw logs REPLICA [-f]`: a replica's engine log, fetched through the control plane from
// the agent that runs it; -f follows it as the engine writes. The engine's bytes are its own:
// they are printed through the sanitiser (newlines and tabs kept, a CR made a newline, every
// other control spelled out), so a log cannot drive the operator's terminal.

import { UsageError } from "../config/flags";
import { SafeTextStream } from "../lib/text";
import { LOG_TAIL_DEFAULT } from "../protocol/defaults";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
import type { Command } from "./command";

export const command: Command = {
  name: "logs",
  summary: "Show a replica's engine log; -f to follow it.",
  usage: "llmgw logs REPLICA [-f] [--tail N]",
  flags: {
    follow: { kind: "boolean", short: "f", help: "keep printing new lines as the engine writes them" },
    tail: { kind: "string", short: "n", value: "N", help: `lines from the end to start with (default ${LOG_TAIL_DEFAULT})` },
    ...CLIENT_FLAGS,
  },
  examples: ["llmgw logs r-1a2b3c4d", "llmgw logs r-1a2b3c4d -f --tail 20"],
  async run({ flags, positionals }) {
    if (positionals.length !== 1) throw new UsageError("logs takes exactly one replica id (see `llmgw replicas`)");
    const tail = Number(flags.tail ?? LOG_TAIL_DEFAULT);
    if (!Number.isInteger(tail) || tail < 0 || tail > 100_000) throw new UsageError(`--tail must be a whole number from 0 to 100000, not "${flags.tail}"`);
    const client = resolveClient(flags);
    const url = `${client.server}/api/v1/replicas/${encodeURIComponent(positionals[0]!)}/logs?tail=${tail}${flags.follow ? "&follow=1" : ""}`;
    const res = await fetch(url, { headers: { authorization: `Bearer ${client.token}` }, ...(client.tls ? { tls: client.tls } : {}) }).catch((e: Error) => {
      throw new CliError(`cannot reach the llmgw server at ${client.server}: ${e.message}`);
    });
    if (!res.ok) {
      const body = (await res.json().catch(() => undefined)) as { error?: { message?: string } } | undefined;
      throw new CliError(body?.error?.message ?? `HTTP ${res.status}`);
    }
    const safe = new SafeTextStream();
    for await (const chunk of res.body!) process.stdout.write(safe.push(chunk));
    process.stdout.write(safe.end());
  },
};
