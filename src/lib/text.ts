// The one sanitiser for text that came from outside (nodes, engines, catalog files, clients)
// on its way to a person: a terminal or the dashboard. A terminal obeys control characters
// (ESC clears the screen, OSC retitles the window, CR overwrites a line) and bidi overrides
// reorder what is read, and invisible format characters make two different strings look alike,
// so none of them may reach it raw; each is replaced by a visible escape that says what was
// there, in plain ASCII: C0, DEL and C1 as `\xHH` (ESC is `\x1b`), bidi marks, overrides and
// isolates and the invisible format characters as `\uHHHH`, a lone surrogate as U+FFFD. On one
// line (table cells, status lines) tab, newline, CR, VT, FF and the line/paragraph separators
// become a space; multi-line text keeps newline and tab. The output is printable, so
// sanitising twice changes nothing further.

/**
 * The format characters (Unicode category Cf) that reorder text or are drawn as nothing, so a
 * terminal shows no trace of them: the Arabic letter mark U+061C; zero-width space,
 * non-joiner, joiner and the left-to-right/right-to-left marks U+200B–U+200F; the line and
 * paragraph separators U+2028/U+2029; bidi embeddings and overrides U+202A–U+202E; word joiner,
 * invisible operators, isolates and the deprecated format controls U+2060–U+206F; the byte order
 * mark (zero-width no-break space) U+FEFF. The joiners make an emoji sequence show as its parts,
 * escaped: a price an operator's terminal pays for never hiding a character.
 */
const FORMAT = "\\u061c\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\ufeff";
const LONE_SURROGATE = "[\\ud800-\\udbff](?![\\udc00-\\udfff])|(?<![\\ud800-\\udbff])[\\udc00-\\udfff]";

/** Characters refused in single-line text: C0 (U+0000–U+001F), DEL and C1 (U+007F–U+009F), FORMAT, lone surrogates. */
const UNSAFE = new RegExp(`[\\u0000-\\u001f\\u007f-\\u009f${FORMAT}]|${LONE_SURROGATE}`, "g");

/** The same, allowing newline and tab: for text meant to span lines (logs, an engine's stderr). */
const UNSAFE_MULTILINE = new RegExp(`[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u009f${FORMAT}]|${LONE_SURROGATE}`, "g");

// Non-global twins for finding the first: no lastIndex state shared between calls.
const FIND = new RegExp(UNSAFE.source);
const FIND_MULTILINE = new RegExp(UNSAFE_MULTILINE.source);

function escape(ch: string): string {
  const c = ch.charCodeAt(0);
  if ((c >= 0x09 && c <= 0x0d) || c === 0x2028 || c === 0x2029) return " ";
  if (c >= 0xd800 && c <= 0xdfff) return "\ufffd";
  return c <= 0xff ? `\\x${c.toString(16).padStart(2, "0")}` : `\\u${c.toString(16).padStart(4, "0")}`;
}

export interface SafeTextOptions {
  /**
   * Keep newline and tab (a CR, alone or before LF, becomes a newline). Default: one line, where
   * every line break and tab becomes a space.
   */
  multiline?: boolean;
}

/** `s` with every control character and bidi override replaced by a visible escape. */
export function safeText(s: string, opts: SafeTextOptions = {}): string {
  if (opts.multiline) return s.replace(/\r\n?/g, "\n").replace(UNSAFE_MULTILINE, escape);
  return s.replace(UNSAFE, escape);
}

/**
 * A copy of a value (as parsed from JSON) with every string in it, keys included, passed
 * through `safeText` on one line: for a view rendered for people, so a field added to a view
 * later is covered without anyone remembering to.
 */
export function safeDeep<T>(v: T, depth = 0): T {
  if (typeof v === "string") return safeText(v) as T;
  if (depth > 64 || v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) return v.map((e) => safeDeep(e, depth + 1)) as T;
  const out: Record<string, unknown> = {};
  for (const [k, e] of Object.entries(v)) {
    const key = safeText(k);
    // "__proto__" as an own key (JSON.parse makes one) must stay a key, not set a prototype.
    if (key === "__proto__") Object.defineProperty(out, key, { value: safeDeep(e, depth + 1), enumerable: true, writable: true, configurable: true });
    else out[key] = safeDeep(e, depth + 1);
  }
  return out as T;
}

/** The first character `safeText` would replace, with its position, or undefined. */
export function firstUnsafe(s: string, opts: SafeTextOptions = {}): { at: number; code: string } | undefined {
  const m = (opts.multiline ? FIND_MULTILINE : FIND).exec(opts.multiline ? s.replace(/\r\n?/g, "\n") : s);
  if (!m) return undefined;
  return { at: m.index, code: `U+${m[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}` };
}

/**
 * Sanitises a stream of text chunk by chunk (an engine's log): a CR at a chunk's end is held
 * back until the next chunk says whether it was half of a CRLF.
 */
export class SafeTextStream {
  private carry = "";
  private readonly decoder = new TextDecoder();
  push(chunk: Uint8Array | string): string {
    let s = this.carry + (typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true }));
    this.carry = "";
    if (s.endsWith("\r")) {
      this.carry = "\r";
      s = s.slice(0, -1);
    }
    // A high surrogate at the end may be completed by the next chunk.
    const last = s.charCodeAt(s.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      this.carry = s.slice(-1) + this.carry;
      s = s.slice(0, -1);
    }
    return safeText(s, { multiline: true });
  }
  end(): string {
    const s = this.carry + this.decoder.decode();
    this.carry = "";
    return safeText(s, { multiline: true });
  }
}

/** Edit distance, case-insensitive: single-letter insertions, deletions, substitutions and swaps of neighbours (a typo's usual shapes). */
export function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  const d: number[][] = Array.from({ length: x.length + 1 }, (_, i) => Array.from({ length: y.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= x.length; i++)
    for (let j = 1; j <= y.length; j++) {
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  return d[x.length]![y.length]!;
}

/**
 * The known word nearest to a mistyped one, when it is near enough to be what was meant (a
 * third of its length in edits, at least 1, at most 3; a case-only difference always is);
 * undefined otherwise.
 */
export function nearest(word: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const k of known) {
    if (k.toLowerCase() === word.toLowerCase()) return k;
    const d = editDistance(word, k);
    if (d < bestDistance) [best, bestDistance] = [k, d];
  }
  const allowed = Math.min(3, Math.max(1, Math.floor(word.length / 3)));
  return bestDistance <= allowed ? best : undefined;
}
