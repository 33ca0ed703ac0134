// The shape every subcommand file exports, and the shared help/flag handling around it.

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
