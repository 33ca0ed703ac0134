// Terminal rendering shared by the CLI commands: colour decisions, aligned tables, usage bars,
// and the width they fit. Colour only on a terminal and never under NO_COLOR; piped output stays
// plain ASCII so scripts and `grep` see stable characters. A table fits the terminal's width (80
// columns piped) by cutting its free text and shortening its lists; `-o wide` renders with no
// width (Infinity) and cuts no free text.

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

/** Columns when there is no terminal to ask (piped output) and COLUMNS does not say. */
export const DEFAULT_COLUMNS = 80;

/**
 * The width the output should fit: COLUMNS when it is a positive number (as `ls` and Python's
 * shutil read it: a person may set it for a pipe), else the terminal's own width, else 80.
 */
export function terminalWidth(stream: { isTTY?: boolean; columns?: number } = process.stdout, env: Record<string, string | undefined> = process.env): number {
  const fromEnv = Number(env.COLUMNS);
  if (env.COLUMNS && Number.isInteger(fromEnv) && fromEnv > 0) return fromEnv;
  if (stream.isTTY && typeof stream.columns === "number" && stream.columns > 0) return stream.columns;
  return DEFAULT_COLUMNS;
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

/**
 * A cell a table may narrow to fit its width: free text (a reason, an error) is cut with "…", a
 * list (classes, fabrics, a placement) shows the items that fit and counts the rest. Plain text
 * (no colour codes). With no width (`-o wide`) text is whole and a list stops at LIST_CELL_MAX.
 */
export type FlexCell = { text: string } | { items: readonly string[]; sep?: string };
export type Cell = string | FlexCell;

export interface TableOptions {
  /** Right-aligned (numeric) columns. */
  right?: number[];
  indent?: string;
  /** Columns the whole table should fit (the terminal's); absent or Infinity: as wide as it is. */
  width?: number;
}

/** Narrowest a flexible column is made, unless its header is wider or its cells are all narrower. */
const FLEX_MIN = 12;

function cellText(c: Cell, max: number): string {
  if (typeof c === "string") return c;
  if ("text" in c) return Number.isFinite(max) ? clip(c.text, max) : c.text;
  return listCell(c.items, Math.min(max, LIST_CELL_MAX), c.sep);
}

/** A table as `table` renders it, and whether fitting it cut anything. */
export function fitTable(headers: string[], rows: Cell[][], opts: TableOptions = {}): { text: string; cut: boolean } {
  const right = new Set(opts.right ?? []);
  const indent = opts.indent ?? "";
  const flex = headers.map((_, i) => rows.some((r) => r[i] !== undefined && typeof r[i] !== "string"));
  const natural = headers.map((h, i) => Math.max(width(h), ...rows.map((r) => width(cellText(r[i] ?? "", Number.POSITIVE_INFINITY)))));
  const fits = (caps: number[]) => indent.length + caps.reduce((a, w) => a + w, 0) + 2 * (caps.length - 1) <= (opts.width ?? Number.POSITIVE_INFINITY);
  let widths = natural;
  if (!fits(natural)) {
    // The widest flexible columns give way first, none below its floor (FLEX_MIN, or its header's
    // width when even that is too wide): the largest cap that fits.
    const roomy = headers.map((h, i) => Math.min(natural[i]!, Math.max(width(h), FLEX_MIN)));
    const tight = headers.map((h, i) => Math.min(natural[i]!, width(h)));
    const capped = (floor: number[], cap: number) => natural.map((w, i) => (flex[i] ? Math.max(floor[i]!, Math.min(w, cap)) : w));
    const floor = fits(capped(roomy, 0)) ? roomy : tight;
    let lo = 0;
    let hi = Math.max(...natural);
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (fits(capped(floor, mid))) lo = mid;
      else hi = mid - 1;
    }
    widths = capped(floor, lo);
  }
  let cut = false;
  const render = (r: Cell[]) =>
    r.map((c, i) => {
      const text = cellText(c, widths[i]!);
      if (typeof c !== "string" && text !== cellText(c, Number.POSITIVE_INFINITY)) cut = true;
      return text;
    });
  const line = (cells: string[]) =>
    indent +
    cells
      .map((c, i) => (i === cells.length - 1 && !right.has(i) ? c : pad(c, widths[i]!, right.has(i))))
      .join("  ")
      .trimEnd();
  const text = [line(headers), ...rows.map((r) => line(render(r)))].join("\n");
  return { text, cut };
}

/**
 * A kubectl-like table: upper-case headers, two spaces between columns; numeric columns
 * right-aligned. Given a width, its flexible cells (FlexCell) narrow until it fits; columns of
 * plain strings never do.
 */
export function table(headers: string[], rows: Cell[][], opts: TableOptions = {}): string {
  return fitTable(headers, rows, opts).text;
}

/** `text` cut so that `used` columns before it and it fit `max`; whole with no width (`-o wide`). */
export function fitText(text: string, used: number, max: number | undefined): string {
  if (max === undefined || !Number.isFinite(max)) return text;
  return clip(text, Math.max(FLEX_MIN, max - used));
}

// eslint-disable-next-line no-control-regex
const ESCAPE = /\x1b\[[0-9;]*m/g;
const RESET = "\x1b[0m";

/**
 * A line of prose broken at spaces into lines of at most `max` columns, the ones after the first
 * indented by `hang`; colour escapes are zero-wide and carried across the breaks (closed at the
 * end of a line, opened again on the next). A word longer than a line is broken inside. With no
 * width, or a line that fits, the line as it is.
 */
export function wrap(line: string, max: number | undefined, hang = 2): string[] {
  if (max === undefined || !Number.isFinite(max) || width(line) <= max) return [line];
  // The visible text, and each escape at the visible position it precedes.
  const escapes: { at: number; code: string }[] = [];
  let plain = "";
  let last = 0;
  for (const m of line.matchAll(ESCAPE)) {
    plain += line.slice(last, m.index);
    escapes.push({ at: plain.length, code: m[0] });
    last = m.index + m[0].length;
  }
  plain += line.slice(last);
  const indent = Math.min(hang, Math.floor(max / 2));
  // A break never falls in the line's own indentation.
  const lead = /^ */.exec(plain)![0].length;
  // Greedy breaks over the plain text: [start, end) of each line, the space at a break dropped.
  const spans: [number, number][] = [];
  let start = 0;
  while (start < plain.length) {
    const room = spans.length === 0 ? max : max - indent;
    if (plain.length - start <= room) {
      spans.push([start, plain.length]);
      break;
    }
    const space = plain.lastIndexOf(" ", start + room);
    let end = space > Math.max(start, lead) ? space : start + room;
    while (end > start + 1 && plain[end - 1] === " ") end--;
    spans.push([start, end]);
    start = end;
    while (plain[start] === " ") start++;
  }
  let active = "";
  let e = 0;
  const take = (code: string) => {
    active = code === RESET ? "" : active + code;
    return code;
  };
  return spans.map(([from, to], n) => {
    let out = n === 0 ? "" : " ".repeat(indent) + active;
    for (let i = from; i < to; i++) {
      while (e < escapes.length && escapes[e]!.at === i) out += take(escapes[e++]!.code);
      out += plain[i]!;
    }
    const next = spans[n + 1]?.[0];
    if (next === undefined) {
      while (e < escapes.length) out += take(escapes[e++]!.code);
      return out;
    }
    // Escapes among the spaces dropped at the break take effect from the next line on.
    while (e < escapes.length && escapes[e]!.at < next) take(escapes[e++]!.code);
    return active ? `${out}${RESET}` : out;
  });
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
