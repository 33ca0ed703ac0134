// `llmgw events [-f]`: what the control plane did and why (placed, ready, failed, parked,
// drained, node unreachable…), oldest first; -f keeps following.

import type { EventView } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { safeDeep } from "../lib/text";
import { ago } from "../lib/format";
import { type Style, detectStyle, fitText, paint, terminalWidth, width as visible } from "./render";

/** Recent events shown before following, unless --limit says. */
const DEFAULT_LIMIT = 50;

function color(kind: string): "red" | "yellow" | "green" | "gray" {
  if (/failed|parked|unreachable|lost|unplaceable|unhealthy/.test(kind)) return "red";
  if (/stopping|drain|cordon|evict/.test(kind)) return "yellow";
  if (/ready|registered|created|unparked|reachable|healthy|recovered/.test(kind)) return "green";
  return "gray";
}

/**
 * One event per line: how long ago (table), or its timestamp and subject (wide: for pasting into
 * a report or matching against other logs). The message is cut to fit `width` columns (the
 * terminal's; none given: whole), and whole with `wide`.
 */
export function renderEvent(event: EventView, style: Style, opts: { wide?: boolean; now?: number; width?: number } = {}): string {
  // Messages quote what nodes and engines said (errors, names).
  const e = safeDeep(event);
  const when = opts.wide ? e.at.replace("T", " ").replace(/\.\d+Z$/, "Z") : ago(e.at, opts.now ?? Date.now()).padStart(10);
  const subject = opts.wide ? `  ${e.subject.padEnd(24)}` : "";
  const lead = `${paint(style, "dim", when)}  ${paint(style, color(e.kind), e.kind.padEnd(18))}${subject}  `;
  return `${lead}${fitText(e.message, visible(lead), opts.wide ? undefined : opts.width)}\n`;
}

export const command: Command = {
  name: "events",
  summary: "Show what the control plane did and why; -f to follow.",
  usage: "llmgw events [-f] [--limit N] [--subject node/NAME|model/NAME|replica/ID] [-o table|wide|json]",
  details:
    "The table says how long ago each event happened, each on one line that fits the terminal (COLUMNS, else the terminal's width, else 80 when piped): a long message is cut with \"…\". -o wide prints its timestamp (UTC) and subject instead, and every message whole; -o json one object per event.",
  flags: {
    follow: { kind: "boolean", short: "f", help: "keep printing new events" },
    limit: { kind: "string", short: "n", value: "N", help: `how many recent events to show first (default ${DEFAULT_LIMIT})` },
    subject: { kind: "string", value: "SUBJECT", complete: "subjects", help: "only events about this, e.g. node/gpu-01 or model/llama" },
    ...OUTPUT_FLAG,
    ...CLIENT_FLAGS,
  },
  examples: ["llmgw events", "llmgw events -f", "llmgw events -o wide", "llmgw events --subject model/llama-3.1-8b -n 200"],
  async run({ flags }) {
    const format = outputFormat(flags);
    const limit = Number(flags.limit ?? DEFAULT_LIMIT);
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new (await import("../config/flags")).UsageError("--limit must be a whole number from 1 to 1000");
    const client = resolveClient(flags);
    const style = detectStyle();
    const subject = flags.subject ? `&subject=${encodeURIComponent(flags.subject as string)}` : "";
    const print = (list: EventView[]) => {
      for (const e of list) process.stdout.write(format === "json" ? `${JSON.stringify(e)}\n` : renderEvent(e, style, { wide: format === "wide", width: terminalWidth() }));
    };
    let list = await client.get<EventView[]>(`/api/v1/events?limit=${limit}${subject}`);
    if (format === "json" && !flags.follow) {
      process.stdout.write(`${JSON.stringify(list, null, 2)}\n`);
      return;
    }
    print(list);
    if (!flags.follow) return;
    let after = list.at(-1)?.id ?? 0;
    for (;;) {
      await Bun.sleep(1000);
      list = await client.get<EventView[]>(`/api/v1/events?after=${after}&limit=1000${subject}`);
      print(list);
      after = list.at(-1)?.id ?? after;
    }
  },
};
