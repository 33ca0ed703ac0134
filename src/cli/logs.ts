// `llmgw logs REPLICA [-f | --previous]`: a replica's engine log, fetched through the control
// plane from the agent that runs it; -f follows it as the engine writes; --previous shows the
// run before the current one, or the last run of a replica that exited or was stopped (the
// agent keeps past runs' logs up to an hour, at most 20 per node, each cut to its last MiB). The engine's bytes are its own:
// they are printed through the sanitiser (newlines and tabs kept, a CR made a newline, every
// other control spelled out), so a log cannot drive the operator's terminal.

import { UsageError } from "../config/flags";
import { safeText, SafeTextStream } from "../lib/text";
import { LOG_TAIL_DEFAULT } from "../protocol/defaults";
import { CLIENT_FLAGS, CliError, resolveClient } from "./client";
import type { Command } from "./command";

export const command: Command = {
  name: "logs",
  summary: "Show a replica's engine log; -f to follow it, --previous for its past run.",
  usage: "llmgw logs REPLICA [-f | -p/--previous] [--tail N]",
  flags: {
    follow: { kind: "boolean", short: "f", help: "keep printing new lines as the engine writes them" },
    previous: {
      kind: "boolean",
      short: "p",
      help: "the log of the engine run before the current one, or of a replica whose engine exited or that was stopped (also one gone from `llmgw replicas`); its node keeps it up to 1h, at most 20 per node, each its last 1 MiB",
    },
    tail: { kind: "string", short: "n", value: "N", help: `lines from the end to start with (default ${LOG_TAIL_DEFAULT})` },
    ...CLIENT_FLAGS,
  },
  examples: ["llmgw logs r-1a2b3c4d", "llmgw logs r-1a2b3c4d -f --tail 20", "llmgw logs r-1a2b3c4d --previous"],
  async run({ flags, positionals }) {
    if (positionals.length !== 1) throw new UsageError("logs takes exactly one replica id (see `llmgw replicas`)");
    if (flags.previous && flags.follow) throw new UsageError("--previous and -f/--follow do not go together: a past run's log is complete, there is nothing to follow");
    const tail = Number(flags.tail ?? LOG_TAIL_DEFAULT);
    if (!Number.isInteger(tail) || tail < 0 || tail > 100_000) throw new UsageError(`--tail must be a whole number from 0 to 100000, not "${flags.tail}"`);
    const client = resolveClient(flags);
    const url = `${client.server}/api/v1/replicas/${encodeURIComponent(positionals[0]!)}/logs?tail=${tail}${flags.follow ? "&follow=1" : ""}${flags.previous ? "&previous=1" : ""}`;
    const res = await fetch(url, { headers: { authorization: `Bearer ${client.token}` }, ...(client.tls ? { tls: client.tls } : {}) }).catch((e: Error) => {
      throw new CliError(`cannot reach the llmgw server at ${client.server}: ${e.message}`);
    });
    if (!res.ok) {
      const body = (await res.json().catch(() => undefined)) as { error?: { message?: string } } | undefined;
      // The message may quote what a node sent (its name): sanitised like the log itself.
      throw new CliError(safeText(body?.error?.message ?? `HTTP ${res.status}`));
    }
    const of = res.headers.get("x-llmgw-log-replica");
    if (of) {
      const node = res.headers.get("x-llmgw-log-node");
      const dec = (v: string) => safeText(decodeURIComponent(v));
      process.stderr.write(`${safeText(positionals[0]!)} has run once; its previous run is that of ${dec(of)}${node ? ` on ${dec(node)}` : ""}, the failed replica it replaced:\n`);
    }
    const safe = new SafeTextStream();
    for await (const chunk of res.body!) process.stdout.write(safe.push(chunk));
    process.stdout.write(safe.end());
  },
};
