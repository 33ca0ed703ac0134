// cli/: the `llmgw` commands, one file per subcommand, each exporting a Command that main.ts
// loads only when it runs; the operator commands are clients of the admin API (client.ts) and
// render for terminals here (render.ts: colour, tables, bars; lib/format and lib/text for
// durations, plurals and terminal-safe text).
//
// May import: config (flags, datadir, schemas), protocol, lib, and sim for the fake engine. The
// long-running roles are loaded by dynamic import inside run() only (serve, agent, and the demo
// through app), so a quick command never pays for them. Never the store.
//
// This file: the shape every subcommand file exports, and the shared help/flag handling around it.

import { type FlagSpecs, type FlagValues, flagHelp, parseFlags } from "../config/flags";

export interface Command {
  name: string;
  summary: string;
  usage: string;
  flags: FlagSpecs;
  examples?: string[];
  /** Extra help text after the usage line. */
  details?: string;
  run(ctx: { flags: FlagValues; positionals: string[]; argv: string[] }): Promise<number | void>;
}

export function helpText(cmd: Command): string {
  const parts = [`${cmd.summary}\n`, `Usage:\n  ${cmd.usage}\n`];
  if (cmd.details) parts.push(`${cmd.details.trim()}\n`);
  if (Object.keys(cmd.flags).length > 0) parts.push(`Flags:\n${flagHelp(cmd.flags)}\n`);
  if (cmd.examples?.length) parts.push(`Examples:\n${cmd.examples.map((e) => `  ${e}`).join("\n")}\n`);
  return parts.join("\n");
}

/** Parses argv for a command; returns undefined when help was printed instead. */
export function parseFor(cmd: Command, argv: string[]): { flags: FlagValues; positionals: string[] } | undefined {
  const parsed = parseFlags(argv, cmd.flags);
  if (parsed.flags.help) {
    process.stdout.write(helpText(cmd));
    return undefined;
  }
  return parsed;
}
