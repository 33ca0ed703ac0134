// `-w/--watch` for status and the tables: render, wait, render again until interrupted. On a
// terminal each view replaces the last (cursor home, clear); piped, each is printed after the
// last with a line saying when, so a log of it still reads. A failed fetch is shown in place
// of the view and the next round tries again: a server restarting is exactly when people watch.

import type { FlagSpecs, FlagValues } from "../config/flags";
import { UsageError } from "../config/flags";
import { safeText } from "../lib/text";

export const WATCH_FLAGS: FlagSpecs = {
  watch: { kind: "boolean", short: "w", help: "keep the view on screen, refreshed every --interval (default 2s), until Ctrl-C" },
  interval: { kind: "string", value: "SECONDS", help: "seconds between refreshes with --watch (default 2)" },
};

/** Whether to watch, and how often (ms); a json output is refused (a stream of documents is not one). */
export function watchSettings(flags: FlagValues, format: string): { watch: boolean; everyMs: number } {
  const watch = flags.watch === true;
  const raw = flags.interval as string | undefined;
  if (raw !== undefined && !watch) throw new UsageError("--interval goes with -w/--watch");
  const seconds = raw === undefined ? 2 : Number(raw);
  if (!Number.isFinite(seconds) || seconds < 0.2 || seconds > 3600) throw new UsageError(`--interval must be a number of seconds from 0.2 to 3600, not "${raw}"`);
  if (watch && format === "json") throw new UsageError("-w/--watch shows a table; for scripts poll with -o json instead");
  return { watch, everyMs: Math.round(seconds * 1000) };
}

/** Renders once, or again and again every `everyMs` until SIGINT/SIGTERM (then exits 0). */
export async function runWatched(render: () => Promise<string>, opts: { watch: boolean; everyMs: number; title: string }): Promise<void> {
  if (!opts.watch) {
    process.stdout.write(await render());
    return;
  }
  let stop = false;
  let wake: (() => void) | undefined;
  const quit = () => {
    stop = true;
    wake?.();
  };
  process.once("SIGINT", quit);
  process.once("SIGTERM", quit);
  const tty = process.stdout.isTTY === true;
  while (!stop) {
    let view: string;
    try {
      view = await render();
    } catch (e) {
      view = `error: ${safeText((e as Error).message)}; trying again in ${opts.everyMs / 1000}s\n`;
    }
    const stamp = `Every ${opts.everyMs / 1000}s: llmgw ${opts.title}    ${new Date().toISOString().replace(/\.\d+Z$/, "Z")}\n\n`;
    process.stdout.write(tty ? `\x1b[H\x1b[2J${stamp}${view}` : `${stamp}${view}\n`);
    await new Promise<void>((resolve) => {
      wake = resolve;
      setTimeout(resolve, opts.everyMs).unref();
    });
  }
}
