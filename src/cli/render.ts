// Terminal rendering shared by the CLI commands: colour decisions, aligned tables, usage bars.
// Colour only on a terminal and never under NO_COLOR; piped output stays plain ASCII so scripts
// and `grep` see stable characters.

export interface Style {
  color: boolean;
}

export function detectStyle(stream: { isTTY?: boolean } = process.stdout, env = process.env): Style {
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== "") return { color: false };
  if (env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== "" && env.FORCE_COLOR !== "0") return { color: true };
  return { color: !!stream.isTTY && env.TERM !== "dumb" };
}

const CODES = { bold: 1, dim: 2, red: 31, green: 32, yellow: 33, blue: 34, magenta: 35, cyan: 36, gray: 90 } as const;
export type Paint = keyof typeof CODES;

export function paint(style: Style, what: Paint, text: string): string {
  return style.color ? `\x1b[${CODES[what]}m${text}\x1b[0m` : text;
}

/** Visible width, ignoring colour escapes. */
export function width(s: string): number {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\x1b\[[0-9;]*m/g, "").length;
}

function pad(s: string, w: number, right: boolean): string {
  const gap = " ".repeat(Math.max(0, w - width(s)));
  return right ? gap + s : s + gap;
}

/**
 * Widest a cell holding a list gets (GPU classes, fabrics, labels, aliases, placements): every
 * row is padded to the widest cell of its column, so one node reporting 256 classes would make
 * each row of the table kilobytes long. The whole list is in `-o json` and the one-item views.
 */
export const LIST_CELL_MAX = 60;
/** Widest a cell of free text gets (an address, a version), for the same reason. */
export const TEXT_CELL_MAX = 64;

/** `s` cut to `max` characters, the cut marked with "…". For plain text (no colour codes). */
export function clip(s: string, max: number = TEXT_CELL_MAX): string {
  return s.length <= max ? s : `${s.slice(0, Math.max(0, max - 1))}…`;
}

/**
 * Items joined by `sep` within `max` characters: as many as fit whole, then how many were left
 * out ("8xH100-80GB,2xA100-80GB,+254 more"); "-" for none. An item too long on its own is cut
 * with "…". For plain text (no colour codes).
 */
export function listCell(items: readonly string[], max: number = LIST_CELL_MAX, sep = ","): string {
  if (items.length === 0) return "-";
  const whole = items.join(sep);
  if (whole.length <= max) return whole;
  const more = (k: number) => `${sep}+${items.length - k} more`;
  let shown = items[0]!.length;
  let k = 1;
  while (k < items.length && shown + sep.length + items[k]!.length + more(k + 1).length <= max) shown += sep.length + items[k++]!.length;
  const head = items.slice(0, k).join(sep);
  return head.length + more(k).length <= max ? head + more(k) : clip(items[0]!, max - more(1).length) + more(1);
}

/** A kubectl-like table: upper-case headers, two spaces between columns; numeric columns right-aligned. */
export function table(headers: string[], rows: string[][], opts: { right?: number[]; indent?: string } = {}): string {
  const right = new Set(opts.right ?? []);
  const widths = headers.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ""))));
  const line = (cells: string[]) =>
    (opts.indent ?? "") +
    cells
      .map((c, i) => (i === cells.length - 1 && !right.has(i) ? c : pad(c, widths[i]!, right.has(i))))
      .join("  ")
      .trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/**
 * A usage bar of `cells` characters: used, unhealthy and free in distinguishable glyphs. With
 * colour: solid blocks in colour; plain: '#' used, 'x' unhealthy, '.' free. Any non-zero part
 * gets at least one cell so a single broken card is never rounded away.
 */
export function usageBar(style: Style, used: number, unhealthy: number, total: number, cells = 24): string {
  if (total <= 0) return "[" + " ".repeat(cells) + "]";
  const parts = [used, unhealthy];
  const n = parts.map((p) => (p > 0 ? Math.max(1, Math.round((p / total) * cells)) : 0));
  // Keep the bar exactly `cells` wide, trimming the largest part if rounding overshot.
  while (n[0]! + n[1]! > cells) {
    if (n[0]! >= n[1]!) n[0]!--;
    else n[1]!--;
  }
  const free = cells - n[0]! - n[1]!;
  if (!style.color) return `[${"#".repeat(n[0]!)}${"x".repeat(n[1]!)}${".".repeat(free)}]`;
  return `[${paint(style, "cyan", "█".repeat(n[0]!))}${paint(style, "red", "█".repeat(n[1]!))}${paint(style, "gray", "░".repeat(free))}]`;
}
