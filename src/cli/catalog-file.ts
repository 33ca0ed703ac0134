// A catalog file as its author sees it: a syntax error at its line and column, and the
// server's problems (paths like models[llama-3.1-8b].profiles[0].gpu_class) mapped back to the
// line and column of the key they name. Bun's YAML and JSON parsers say what is wrong but not
// where, so the positions come from a small scanner of the text: block mappings and sequences,
// flow collections ([a, b], {k: v}) and JSON. It only has to find keys; the parsers judge.

export type Seg = string | number;
export type Pos = { line: number; col: number };
export type Kind = "yaml" | "json";

/**
 * A scanned file: each key's (and each sequence item's) position, by JSON of its path; and each
 * key a mapping names twice (YAML and JSON parsers keep the last silently), with both places.
 */
export class Positions extends Map<string, Pos> {
  readonly duplicates: { path: Seg[]; at: Pos; first: Pos }[] = [];

  /** Records a mapping key's position; a second one under the same path is a duplicate. */
  setKey(path: Seg[], at: Pos): void {
    const k = key(path);
    const first = this.get(k);
    if (first !== undefined) this.duplicates.push({ path, at, first });
    else this.set(k, at);
  }
}

class ScanError extends Error {
  constructor(
    message: string,
    readonly at: number,
  ) {
    super(message);
  }
}

/** 1-based line and column of an offset. */
export function positionAt(text: string, offset: number): Pos {
  let line = 1;
  let start = 0;
  for (let i = 0; i < offset && i < text.length; i++)
    if (text[i] === "\n") {
      line++;
      start = i + 1;
    }
  return { line, col: offset - start + 1 };
}

const key = (path: readonly Seg[]) => JSON.stringify(path);

/** How long the search for a YAML syntax error's position may take. */
const SEARCH_BUDGET_MS = 2000;

/** How deep positions are followed: a catalog's deepest key is models[i].profiles[j].env.NAME. */
const MAX_DEPTH = 32;

/**
 * Scans a flow collection or scalar starting at `i` (JSON when `json`, else YAML's flow style),
 * recording the position of each key and item under `path`; returns the offset after it.
 */
function scanFlow(text: string, i: number, path: Seg[], out: Positions, offsetOf: (o: number) => Pos, json: boolean): number {
  const ws = (j: number): number => {
    for (;;) {
      while (j < text.length && " \t\r\n".includes(text[j]!)) j++;
      if (!json && text[j] === "#") {
        while (j < text.length && text[j] !== "\n") j++;
        continue;
      }
      return j;
    }
  };
  const quoted = (j: number): [string, number] => {
    const q = text[j]!;
    let s = "";
    let k = j + 1;
    for (; k < text.length; k++) {
      const c = text[k]!;
      if (q === '"' && c === "\\") {
        const n = text[k + 1];
        if (json && (n === undefined || !'"\\/bfnrtu'.includes(n))) throw new ScanError("bad escape in a string", k);
        s += n === "n" ? "\n" : n === "t" ? "\t" : (n ?? "");
        k++;
      } else if (q === "'" && c === "'" && text[k + 1] === "'") {
        s += "'";
        k++;
      } else if (c === q) return [s, k + 1];
      else if (json && c === "\n") throw new ScanError("a string may not span lines", k);
      else s += c;
    }
    throw new ScanError("a quoted string is never closed", j);
  };
  const plain = (j: number, stops: string): [string, number] => {
    let k = j;
    while (k < text.length && !stops.includes(text[k]!) && !(text[k] === ":" && " \t\r\n,]}".includes(text[k + 1] ?? " ")) && !(text[k] === "#" && " \t".includes(text[k - 1] ?? " ")))
      k++;
    return [text.slice(j, k).trim(), k];
  };
  const value = (j: number, p: Seg[]): number => {
    // A catalog nests a few levels; deeper is no catalog, and not worth a position.
    if (p.length > MAX_DEPTH) throw new Error("nested too deep");
    j = ws(j);
    const c = text[j];
    if (c === undefined) throw new ScanError("the file ends where a value should be", j);
    if (c === "{") {
      j = ws(j + 1);
      if (text[j] === "}") return j + 1;
      for (;;) {
        j = ws(j);
        let k: string;
        const at = j;
        if (text[j] === '"' || (!json && text[j] === "'")) [k, j] = quoted(j);
        else if (json) throw new ScanError("expected a quoted key", j);
        else [k, j] = plain(j, ",}\n");
        out.setKey([...p, k], offsetOf(at));
        j = ws(j);
        if (text[j] === ":") j = value(j + 1, [...p, k]);
        else if (json) throw new ScanError("expected ':' after the key", j);
        j = ws(j);
        if (text[j] === ",") {
          j++;
          if (!json && text[ws(j)] === "}") return ws(j) + 1;
          continue;
        }
        if (text[j] === "}") return j + 1;
        throw new ScanError("expected ',' or '}'", j);
      }
    }
    if (c === "[") {
      j = ws(j + 1);
      if (text[j] === "]") return j + 1;
      for (let n = 0; ; n++) {
        j = ws(j);
        out.set(key([...p, n]), offsetOf(j));
        j = value(j, [...p, n]);
        j = ws(j);
        if (text[j] === ",") {
          j++;
          if (!json && text[ws(j)] === "]") return ws(j) + 1;
          continue;
        }
        if (text[j] === "]") return j + 1;
        throw new ScanError("expected ',' or ']'", j);
      }
    }
    if (c === '"' || (!json && c === "'")) return quoted(j)[1];
    if (json) {
      const m = /^(?:true|false|null|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)/.exec(text.slice(j, j + 400));
      if (!m) throw new ScanError("expected a value (a string, number, true, false, null, object or array)", j);
      return j + m[0].length;
    }
    const [s, k] = plain(j, ",]}\n");
    if (s === "") throw new ScanError("expected a value", j);
    return k;
  };
  return value(i, path);
}

/** Positions in a JSON text; a syntax error is thrown as a ScanError at its offset. */
function jsonPositions(text: string): Positions {
  const out = new Positions();
  const offsetOf = lineIndex(text);
  const end = scanFlow(text, 0, [], out, offsetOf, true);
  let j = end;
  while (j < text.length && " \t\r\n".includes(text[j]!)) j++;
  if (j < text.length) throw new ScanError("unexpected text after the end of the value", j);
  return out;
}

/** An offset → position function over precomputed line starts. */
function lineIndex(text: string): (offset: number) => Pos {
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text[i] === "\n") starts.push(i + 1);
  return (offset) => {
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (starts[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    return { line: lo + 1, col: offset - starts[lo]! + 1 };
  };
}

type Frame = { col: number; kind: "map" | "seq"; path: Seg[]; key: string; index: number };

/** The offset just past a key's ':' on a block line (outside quotes and flow), or -1. */
function colonAt(s: string): { key: string; end: number } | undefined {
  let k = 0;
  let name: string;
  if (s[0] === '"' || s[0] === "'") {
    const q = s[0];
    k = 1;
    while (k < s.length && !(s[k] === q && !(q === "'" && s[k + 1] === "'") && !(q === '"' && s[k - 1] === "\\"))) k += q === "'" && s[k] === "'" ? 2 : 1;
    if (k >= s.length) return undefined;
    try {
      name = q === '"' ? (JSON.parse(s.slice(0, k + 1)) as string) : s.slice(1, k).replace(/''/g, "'");
    } catch {
      name = s.slice(1, k);
    }
    k++;
    while (s[k] === " ") k++;
    return s[k] === ":" && (k + 1 >= s.length || " \t".includes(s[k + 1]!)) ? { key: name, end: k + 1 } : undefined;
  }
  if ("[{#&*!|>%@`".includes(s[0] ?? "")) return undefined;
  for (; k < s.length; k++) {
    if (s[k] === "#" && s[k - 1] === " ") return undefined;
    if (s[k] === ":" && (k + 1 >= s.length || " \t".includes(s[k + 1]!))) return { key: s.slice(0, k).trim(), end: k + 1 };
  }
  return undefined;
}

/** Positions in a YAML text of block style with flow collections inside; best effort on anything else. */
function yamlPositions(text: string): Positions {
  const out = new Positions();
  const offsetOf = lineIndex(text);
  const lines = text.split("\n");
  const stack: Frame[] = [];
  const childPath = (): Seg[] => {
    const top = stack.at(-1);
    return top ? [...top.path, top.kind === "map" ? top.key : top.index] : [];
  };
  let offset = 0;
  let skipUntil = 0;
  let blockIndent = -1;
  for (const raw of lines) {
    const lineStart = offset;
    offset += raw.length + 1;
    if (lineStart < skipUntil) continue;
    const line = raw.replace(/\r$/, "");
    const indent = line.length - line.trimStart().length;
    if (blockIndent >= 0) {
      if (line.trim() === "" || indent > blockIndent) continue;
      blockIndent = -1;
    }
    const body = line.trimStart();
    if (body === "" || body.startsWith("#") || /^(?:---|\.\.\.)(?:\s|$)/.test(body) || body.startsWith("%")) continue;
    if (stack.length > MAX_DEPTH) return out;
    let c = indent;
    let rest = body;
    for (let guard = 0; guard < 64; guard++) {
      if (rest === "-" || rest.startsWith("- ")) {
        while (stack.length > 0 && stack.at(-1)!.col > c) stack.pop();
        const top = stack.at(-1);
        if (top?.kind === "seq" && top.col === c) top.index++;
        else stack.push({ col: c, kind: "seq", path: childPath(), key: "", index: 0 });
        const seq = stack.at(-1)!;
        out.set(key([...seq.path, seq.index]), offsetOf(lineStart + c));
        const after = rest.slice(1);
        const pad = after.length - after.trimStart().length;
        c += 1 + pad;
        rest = after.trimStart();
        if (rest === "" || rest.startsWith("#")) break;
        continue;
      }
      const kv = colonAt(rest);
      if (kv) {
        while (stack.length > 0 && (stack.at(-1)!.col > c || (stack.at(-1)!.col === c && stack.at(-1)!.kind === "seq"))) stack.pop();
        const top = stack.at(-1);
        if (!(top?.kind === "map" && top.col === c)) stack.push({ col: c, kind: "map", path: childPath(), key: "", index: 0 });
        const map = stack.at(-1)!;
        map.key = kv.key;
        out.setKey([...map.path, kv.key], offsetOf(lineStart + c));
        const v = rest.slice(kv.end).trimStart();
        const vAt = lineStart + c + (rest.length - v.length);
        if (v.startsWith("[") || v.startsWith("{")) skipUntil = flowEnd(text, vAt, [...map.path, kv.key], out, offsetOf);
        else if (/^[|>]/.test(v)) blockIndent = c;
        break;
      }
      if (rest.startsWith("[") || rest.startsWith("{")) skipUntil = flowEnd(text, lineStart + c, childPath(), out, offsetOf);
      break;
    }
  }
  return out;
}

function flowEnd(text: string, at: number, path: Seg[], out: Positions, offsetOf: (o: number) => Pos): number {
  try {
    return scanFlow(text, at, path, out, offsetOf, false);
  } catch {
    return at;
  }
}

/** The positions of a file's keys, or an empty map when it cannot be scanned. */
export function scanPositions(text: string, kind: Kind): Positions {
  try {
    return kind === "json" ? jsonPositions(text) : yamlPositions(text);
  } catch {
    return new Positions();
  }
}

/** A syntax error with where it is: `line:col: message`. */
export function syntaxError(text: string, kind: Kind, parserMessage: string): { pos?: Pos; message: string } {
  const said = parserMessage.replace(/^(?:JSON|YAML) Parse error: /, "");
  if (kind === "json") {
    try {
      jsonPositions(text);
    } catch (e) {
      if (e instanceof ScanError) return { pos: positionAt(text, e.at), message: e.message };
    }
    return { message: said };
  }
  const at = yamlErrorAt(text);
  return { pos: at?.pos, message: at?.opener ? `${said} (is the ${at.opener} here ever closed?)` : said };
}

const parses = (t: string) => {
  try {
    Bun.YAML.parse(t);
    return true;
  } catch {
    return false;
  }
};

/**
 * Where a YAML text stops parsing: the line after the longest prefix of whole lines that parses
 * (cut only where no flow collection or quoted string is open, so a prefix fails only for a
 * real error), and on that line the column after the longest part of it that still parses.
 */
function yamlErrorAt(text: string): { pos: Pos; opener?: string } | undefined {
  const lines = text.split("\n");
  if (lines.length > 1_000_000) return undefined;
  const clean = cleanLineEnds(lines);
  // The first clean cut that fails, by bisection: failing is monotone over clean cuts.
  let lo = 0;
  let hi = clean.length;
  const prefix = (n: number) => lines.slice(0, n).join("\n");
  // Each try parses a prefix again: a file of megabytes gets its message without a position
  // rather than a wait of many seconds.
  const deadline = performance.now() + SEARCH_BUDGET_MS;
  while (lo < hi) {
    if (performance.now() > deadline) return undefined;
    const mid = (lo + hi) >> 1;
    if (parses(prefix(clean[mid]!))) lo = mid + 1;
    else hi = mid;
  }
  const okLines = lo === 0 ? 0 : clean[lo - 1]!;
  // Blank and comment lines are not where an error is.
  let line = okLines;
  while (line < lines.length - 1 && /^\s*(?:#.*)?$/.test(lines[line]!)) line++;
  const before = prefix(line);
  const l = lines[line] ?? "";
  let col = /^ */.exec(l)![0].length;
  // A tab in the indentation is the error itself (YAML indents with spaces only).
  if (l[col] !== "\t" && l.length <= 300 && before.length <= 256 * 1024 && performance.now() < deadline && !/["'[\]{}]/.test(l)) for (let k = l.length; k > col; k--) if (parses(`${before}${line > 0 ? "\n" : ""}${l.slice(0, k)}`)) {
    col = k;
    break;
  }
  const open = unclosedAt(l);
  if (open !== undefined) col = open;
  const pos = { line: line + 1, col: Math.min(col, Math.max(0, l.length - 1)) + 1 };
  return open === undefined ? { pos } : { pos, opener: l[open] };
}

/** Where a line (starting outside any flow or quote) opens a flow collection or quoted string it does not close: the outermost, or undefined. */
function unclosedAt(l: string): number | undefined {
  const opens: number[] = [];
  let quote: { ch: string; at: number } | undefined;
  for (let i = 0; i < l.length; i++) {
    const c = l[i]!;
    if (quote) {
      if (quote.ch === '"' && c === "\\") i++;
      else if (c === quote.ch) {
        if (quote.ch === "'" && l[i + 1] === "'") i++;
        else quote = undefined;
      }
    } else if (c === "#" && (i === 0 || " \t".includes(l[i - 1]!))) break;
    else if ((c === '"' || c === "'") && (i === 0 || " \t[{,:-".includes(l[i - 1]!))) quote = { ch: c, at: i };
    else if (c === "[" || c === "{") opens.push(i);
    else if ((c === "]" || c === "}") && opens.length > 0) opens.pop();
  }
  return opens[0] ?? quote?.at;
}

/** Numbers of lines (1-based counts of a prefix) whose end is outside any flow collection or quoted string. */
function cleanLineEnds(lines: string[]): number[] {
  const clean: number[] = [];
  let depth = 0;
  let quote: string | undefined;
  lines.forEach((l, n) => {
    for (let i = 0; i < l.length; i++) {
      const c = l[i]!;
      if (quote) {
        if (quote === '"' && c === "\\") i++;
        else if (c === quote) {
          if (quote === "'" && l[i + 1] === "'") i++;
          else quote = undefined;
        }
      } else if (c === "#" && (i === 0 || " \t".includes(l[i - 1]!))) break;
      else if ((c === '"' || c === "'") && (i === 0 || " \t[{,:-".includes(l[i - 1]!))) quote = c;
      else if (c === "[" || c === "{") depth++;
      else if ((c === "]" || c === "}") && depth > 0) depth--;
    }
    if (depth === 0 && !quote) clean.push(n + 1);
  });
  return clean;
}

/**
 * A path as the server renders it (`models[llama-3.1-8b].profiles[0].gpu_class`,
 * `env["bad name"]`, `models[3].name`) as segments into the parsed file, a model named by its
 * name found by index; undefined when it does not read as one.
 */
export function pathSegments(rendered: string, data: unknown): Seg[] | undefined {
  const segs: Seg[] = [];
  const re = /([A-Za-z_][A-Za-z0-9_-]*)|\.([A-Za-z_][A-Za-z0-9_-]*)|\[("(?:[^"\\]|\\.)*")\]|\[([^\]]*)\]/y;
  let at = 0;
  while (at < rendered.length) {
    re.lastIndex = at;
    const m = re.exec(rendered);
    if (!m || (m[1] !== undefined && at > 0)) return undefined;
    at = re.lastIndex;
    if (m[1] !== undefined || m[2] !== undefined) segs.push((m[1] ?? m[2])!);
    else if (m[3] !== undefined) segs.push(JSON.parse(m[3]) as string);
    else if (/^\d+$/.test(m[4]!)) segs.push(Number(m[4]));
    else if (segs.length === 1 && segs[0] === "models") {
      const models = (data as { models?: unknown } | null)?.models;
      const i = Array.isArray(models) ? models.findIndex((x) => (x as { name?: unknown } | null)?.name === m[4]) : -1;
      if (i < 0) return undefined;
      segs.push(i);
    } else return undefined;
  }
  return segs;
}

/** The position of the deepest part of `path` the file has (a missing key: where its object is). */
export function positionOf(positions: Positions, path: readonly Seg[]): Pos | undefined {
  for (let n = path.length; n > 0; n--) {
    const p = positions.get(key(path.slice(0, n)));
    if (p) return p;
  }
  return undefined;
}
