// The engine's own usage for every streamed request, without the client seeing a difference:
// a streamed chat or completions request that did not ask for `stream_options.include_usage`
// is sent to the engine with it (withUsage), so the stream ends with the engine's usage chunk
// (prompt, completion and cached tokens) for the ledger; UsageStrip then takes out of the
// stream what the option added (the usage-only chunk, and the `"usage":null` some engines put
// in every chunk), so the client gets the bytes it would have got without it.

import type { Pieces } from "../http/wire";
import { type BodyFacts, utf8Text } from "./request-body";

const indexOf = Buffer.prototype.indexOf as unknown as (this: Uint8Array, value: Uint8Array, from: number) => number;
const lastIndexOf = Buffer.prototype.lastIndexOf as unknown as (this: Uint8Array, value: Uint8Array, from: number) => number;
const copyRange = Buffer.prototype.copy as unknown as (this: Uint8Array, target: Uint8Array, targetStart: number, sourceStart: number, sourceEnd: number) => number;
const enc = new TextEncoder();
const OPTION = enc.encode('"stream_options":{"include_usage":true},');
/** The option alone in an empty body: no comma after it. */
const OPTION_ONLY = enc.encode('"stream_options":{"include_usage":true}');
const USAGE = enc.encode('"usage":');
const NULL = enc.encode("null");
const EMPTY_CHOICES = enc.encode('"choices":[],');
const NEWLINE = enc.encode("\n");
const LF = 0x0a;
const CR = 0x0d;
const BRACE = 0x7b;
const COMMA = 0x2c;

/** Whether the router adds include_usage to this request (and so strips what it adds from the answer). */
export function addsUsage(path: string, facts: BodyFacts): boolean {
  return facts.stream && facts.streamOptions !== "usage" && (path === "/v1/chat/completions" || path === "/v1/completions");
}

/**
 * The body with `stream_options.include_usage` set: inserted before its first member when it
 * has no stream_options (everything else byte for byte), else merged into them (re-encoded).
 */
export function withUsage(bytes: Uint8Array, facts: BodyFacts): Uint8Array {
  const at = bytes.indexOf(BRACE);
  if (facts.streamOptions === "other" || at < 0) {
    const body = JSON.parse(utf8Text(bytes)) as { stream_options?: unknown };
    const so = typeof body.stream_options === "object" && body.stream_options !== null ? body.stream_options : {};
    return enc.encode(JSON.stringify({ ...body, stream_options: { ...so, include_usage: true } }));
  }
  // `{}` and `{ "model": … }` alike: the option and a comma go right after the brace, unless nothing follows it.
  let next = at + 1;
  while (next < bytes.length && (bytes[next] === 0x20 || bytes[next] === 0x0a || bytes[next] === 0x0d || bytes[next] === 0x09)) next++;
  const option = bytes[next] === 0x7d ? OPTION_ONLY : OPTION;
  // Copied range by range, with no view made of either side: a subarray of the body (a Buffer)
  // costs more than the copy itself, on every streamed request.
  const out = new Uint8Array(bytes.byteLength + option.byteLength);
  copyRange.call(bytes, out, 0, 0, at + 1);
  out.set(option, at + 1);
  copyRange.call(bytes, out, at + 1 + option.byteLength, at + 1, bytes.byteLength);
  return out;
}

function startsAt(d: Uint8Array, at: number, what: Uint8Array, end: number): boolean {
  if (at < 0 || at + what.length > end) return false;
  for (let i = 0; i < what.length; i++) if (d[at + i] !== what[i]) return false;
  return true;
}

/**
 * Takes out of an SSE stream what include_usage added. Works on whole lines (an SSE event's data
 * is one line of JSON): a line cut by the end of a read is held (copied) until the read that
 * ends it, so a pattern is never split. The ranges passed on are references into the reads.
 */
export class UsageStrip {
  private carry: Uint8Array | undefined;
  /** The usage-only event's data line was taken out at the end of a read: the blank line ending it opens the next. */
  private blankNext = false;

  /** Adds to `out` what the client would have seen of d[a, b). */
  pass(d: Uint8Array, a: number, b: number, out: Pieces): void {
    if (this.carry !== undefined) {
      const c = this.carry;
      const joined = new Uint8Array(c.byteLength + b - a);
      joined.set(c, 0);
      joined.set(d.subarray(a, b), c.byteLength);
      this.carry = undefined;
      d = joined;
      a = 0;
      b = joined.byteLength;
    }
    if (this.blankNext && a < b) {
      // A lone CR may yet be the blank line's start: held until the byte after it comes.
      if (d[a] === CR && a + 1 === b) {
        this.carry = d.slice(a, b);
        return;
      }
      this.blankNext = false;
      if (d[a] === LF) a++;
      else if (d[a] === CR && d[a + 1] === LF) a += 2;
    }
    const last = b > a ? lastIndexOf.call(d, NEWLINE, b - 1) : -1;
    if (last < a) {
      if (b > a) this.carry = d.slice(a, b);
      return;
    }
    const stop = last + 1;
    this.strip(d, a, stop, out);
    if (stop < b) this.carry = d.slice(stop, b);
  }

  /** Bytes of a line cut by a read's end are held. */
  get holding(): boolean {
    return this.carry !== undefined;
  }

  /** The end of the stream: what was held goes out as it is. */
  flush(out: Pieces): void {
    const c = this.carry;
    this.carry = undefined;
    if (c !== undefined) out.add(c, 0, c.byteLength);
  }

  /** d[a, b), whole lines, less the usage-only event and every `,"usage":null`. */
  private strip(d: Uint8Array, a: number, b: number, out: Pieces): void {
    let emit = a;
    let at = a;
    for (;;) {
      const u = indexOf.call(d, USAGE, at);
      if (u < 0 || u + USAGE.length > b) break;
      const v = u + USAGE.length;
      if (u - 1 >= emit && d[u - 1] === COMMA && startsAt(d, v, NULL, b)) {
        out.add(d, emit, u - 1);
        emit = at = v + NULL.length;
        continue;
      }
      if (startsAt(d, u - EMPTY_CHOICES.length, EMPTY_CHOICES, b)) {
        // The usage-only chunk: its data line goes, and the blank line that ends its event.
        const s = lastIndexOf.call(d, NEWLINE, u);
        const start = s >= 0 && s + 1 >= emit ? s + 1 : emit;
        const e = indexOf.call(d, NEWLINE, u);
        let end = e < 0 || e + 1 > b ? b : e + 1;
        if (end < b && d[end] === LF) end++;
        else if (end + 1 < b && d[end] === CR && d[end + 1] === LF) end += 2;
        else if (end >= b) this.blankNext = true;
        out.add(d, emit, start);
        emit = at = end;
        continue;
      }
      at = v;
    }
    out.add(d, emit, b);
  }
}
