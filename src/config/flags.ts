// A small, strict command-line flag parser: long flags with kebab-case names, `--flag value`
// and `--flag=value`, repeatable flags, short aliases. Unknown flags are errors that name the
// flag, because a mistyped flag that is silently ignored is worse than no flag at all.
// Free of zod so the CLI's quick commands stay quick.

export type FlagKind = "string" | "boolean" | "list";
export interface FlagSpec {
  kind: FlagKind;
  short?: string;
  help?: string;
  /** Shown in help as the value's name, e.g. URL, FILE (a FILE, PATH or DIR value completes as one). */
  value?: string;
  /** The values it takes, for shell completion (checking them is the command's or the config schema's job). */
  choices?: readonly string[];
  /** What shell completion offers for its value when it is a name the server knows, or a path. */
  complete?: FlagCompletion;
}
export type FlagCompletion = "nodes" | "models" | "replicas" | "subjects" | "keys" | "teams" | "files" | "dirs";
export type FlagSpecs = Record<string, FlagSpec>;
export type FlagValues = Record<string, string | boolean | string[]>;

export class UsageError extends Error {}

/** The log levels and formats serve, agent and demo take (their config schemas check them). */
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal", "silent"] as const;
export const LOG_FORMATS = ["auto", "text", "json"] as const;

export const LOG_FORMAT_HELP =
  "auto: readable text lines when stdout is a terminal, JSON lines when it is piped or a file; or text, or json";

export function parseFlags(argv: string[], specs: FlagSpecs): { flags: FlagValues; positionals: string[] } {
  const flags: FlagValues = {};
  const positionals: string[] = [];
  const byShort = new Map<string, string>();
  for (const [name, s] of Object.entries(specs)) if (s.short) byShort.set(s.short, name);

  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      name = eq >= 0 ? arg.slice(2, eq) : arg.slice(2);
      inline = eq >= 0 ? arg.slice(eq + 1) : undefined;
      if (!(name in specs)) throw new UsageError(`unknown flag --${name}`);
    } else if (arg.startsWith("-") && arg.length > 1 && arg !== "-") {
      const short = arg.slice(1, 2);
      name = byShort.get(short);
      if (!name) throw new UsageError(`unknown flag -${short}`);
      if (arg.length > 2) inline = arg.slice(2).replace(/^=/, "");
    } else {
      positionals.push(arg);
      continue;
    }
    const spec = specs[name]!;
    if (spec.kind === "boolean") {
      if (inline !== undefined) {
        if (!/^(true|false|1|0)$/.test(inline)) throw new UsageError(`--${name} takes no value or true/false, not "${inline}"`);
        flags[name] = inline === "true" || inline === "1";
      } else flags[name] = true;
      continue;
    }
    let value = inline;
    if (value === undefined) {
      const next = argv[i + 1];
      if (next === undefined || (next.startsWith("-") && next.length > 1)) throw new UsageError(`--${name} needs a value${spec.value ? ` (${spec.value})` : ""}`);
      value = next;
      i++;
    }
    if (spec.kind === "list") {
      const prev = flags[name];
      flags[name] = [...(Array.isArray(prev) ? prev : []), value];
    } else flags[name] = value;
  }
  return { flags, positionals };
}

export function flagHelp(specs: FlagSpecs): string {
  const rows = Object.entries(specs).map(([name, s]) => {
    const left = `${s.short ? `-${s.short}, ` : "    "}--${name}${s.kind === "boolean" ? "" : ` ${s.value ?? "VALUE"}`}${s.kind === "list" ? " (repeatable)" : ""}`;
    return [left, s.help ?? ""] as const;
  });
  const width = Math.max(...rows.map(([l]) => l.length), 10) + 2;
  return rows.map(([l, h]) => `  ${l.padEnd(width)}${h}`).join("\n");
}
