// The HTTP/1.1 wire, both directions. The router's public listener and the admin/agent listener
// (server.ts) and the router's client to engines (client.ts) parse and render messages with the
// pieces in this file and nothing else: one tokenizer for header lines, one chunked-body decoder, one
// header renderer, one set of limits. So both directions are exactly as strict, and one table of
// cases (test/unit/wire-cases.test.ts) runs against both.
//
// The rules (RFC 9112, and its request-smuggling section §6.3), the same for a request and a
// response:
// - lines end in CRLF (a bare CR or LF is refused), no obs-fold, no control character other
//   than HTAB, header names are tokens with no whitespace before the colon;
// - Content-Length is 1 to 15 digits, and copies must agree (kept once);
// - Transfer-Encoding is "chunked" alone, over all its lines, and never with Content-Length;
// - chunk-size lines are 1 to 15 hex digits, optional whitespace, optional extensions without
//   controls, at most WIRE_LIMITS.maxChunkLineBytes; chunk data is followed by CRLF exactly;
//   trailers are header lines (read and dropped); extensions and trailers together count
//   against the head limit (CVE-2024-22019), plain size lines do not (a long stream of tokens
//   from an engine has thousands of them);
// - heads over maxHeadBytes, or with more than maxHeaders lines, are refused.
// What differs by direction is only what cannot be the same: the request line and Host rules,
// 100-continue and the version answers (server), the status line and 1xx (client).
//
// A framing error is a WireError: the server answers its status and closes; the client reports
// a protocol error and drops the socket. Messages name the side ("request" / "response") and
// never an address.
//
// This folder may import src/lib only.

/** A message the wire refuses: the server answers `status` with `code`; the client calls it a protocol error. */
export class WireError {
  constructor(
    readonly status: number,
    readonly message: string,
    readonly code: string,
  ) {}
}

/** Which direction a message travels: it names the message in errors. */
export type Side = "request" | "response";

/** The limits both directions apply (each listener or pool may lower or raise the head ones). */
export const WIRE_LIMITS = {
  /** Start line and header lines together. */
  maxHeadBytes: 16 * 1024,
  /** Header lines in one head. */
  maxHeaders: 100,
  /** One chunk-size line, extensions included (a real one is a few bytes: "1a\r\n"). */
  maxChunkLineBytes: 1024,
  /** Hex digits of a chunk size (leading zeros included). */
  maxChunkDigits: 15,
  /** A chunk size at least this is refused where no body limit applies (2^48: beyond any real body). */
  maxChunkSize: 2 ** 48,
  /** Content-Length digits. */
  maxLengthDigits: 15,
} as const;

// ---- bytes and text

/** Bytes as latin1 text, read straight from the array (a TextDecoder would need a view of it first). */
export const latin1Slice = (Buffer.prototype as unknown as { latin1Slice(this: Uint8Array, start: number, end: number): string }).latin1Slice;

/**
 * Writes text as latin1 (one byte per character) into the array at `offset`; returns the bytes
 * written. Header values are bytes read with latin1Slice: written back this way they leave as
 * the very bytes that came in, where UTF-8 would turn each byte >= 0x80 into two.
 */
export const latin1Write = (Buffer.prototype as unknown as { latin1Write(this: Uint8Array, s: string, offset: number, length?: number): number }).latin1Write;

/** 1 for the characters of a token (RFC 9110 §5.6.2): what a header name may be made of. */
export const TCHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") TCHAR[c.charCodeAt(0)] = 1;

/** Whether s[from, to) is a token: one or more of TCHAR. */
export function isToken(s: string, from: number, to: number): boolean {
  if (to <= from) return false;
  for (let i = from; i < to; i++) if (TCHAR[s.charCodeAt(i)] !== 1) return false;
  return true;
}

/** A control character other than HTAB, CR and LF. */
export const BAD_CTL = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]/;
/** A CR not followed by LF, or an LF not preceded by CR. */
export const BARE_CRLF = /\r(?!\n)|(?<!\r)\n/;
/**
 * What a head may not hold, read as latin1 text: a control character other than HTAB, CR and
 * LF; a CR not followed by LF; an LF not preceded by CR. One test over the head, then lines
 * are split on CRLF alone and a value can never carry a line of its own.
 */
export const BAD_HEAD_BYTE = /[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n/;

/** Index of the CRLFCRLF that ends a head, searching from `from`; -1 when not there yet. */
export function headEnd(d: Uint8Array, from: number): number {
  let i = d.indexOf(13, from);
  while (i >= 0 && i + 3 < d.length) {
    if (d[i + 1] === 10 && d[i + 2] === 13 && d[i + 3] === 10) return i;
    i = d.indexOf(13, i + 1);
  }
  return -1;
}

/** The first LF in d[from..] not preceded by CR, or -1: a line that will never end a head the way it is read. */
export function bareLf(d: Uint8Array, from: number, start: number): number {
  for (let i = d.indexOf(10, from); i >= 0; i = d.indexOf(10, i + 1)) if (i === start || d[i - 1] !== 13) return i;
  return -1;
}

/** s[from, to) without leading and trailing spaces and tabs. */
export function trimOws(s: string, from: number, to: number): string {
  let a = from;
  let b = to;
  while (a < b && (s.charCodeAt(a) === 32 || s.charCodeAt(a) === 9)) a++;
  while (b > a && (s.charCodeAt(b - 1) === 32 || s.charCodeAt(b - 1) === 9)) b--;
  return s.slice(a, b);
}

/** The parts in one array (the part itself when there is one). */
export function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  let n = 0;
  for (const p of parts) n += p.byteLength;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** a then b, in one new array. */
export function join(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.byteLength + b.byteLength);
  out.set(a);
  out.set(b, a.byteLength);
  return out;
}

/**
 * `head` as latin1 bytes, then `data`, then `tail`, in one buffer: a head whose header values
 * are passed on byte for byte (see latin1Write).
 */
export function latin1Bytes(head: string, data?: Uint8Array, tail?: Uint8Array): Uint8Array {
  const n = head.length;
  const d = data === undefined ? 0 : data.byteLength;
  const out = new Uint8Array(n + d + (tail === undefined ? 0 : tail.byteLength));
  latin1Write.call(out, head, 0);
  if (data !== undefined) out.set(data, n);
  if (tail !== undefined) out.set(tail, n + d);
  return out;
}

/** The value of 1 to 15 decimal digits; -1 for anything else (Content-Length, as both sides read it). */
export function digits(s: string): number {
  const n = s.length;
  if (n === 0 || n > WIRE_LIMITS.maxLengthDigits) return -1;
  let v = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

/** Whether a comma-separated list holds `token` (compared as given: lower-case both). */
export function hasToken(list: string, token: string): boolean {
  for (const t of list.split(",")) if (t.trim() === token) return true;
  return false;
}

const NON_ASCII = /[^\x00-\x7f]/;
/** UTF-8 size of a string; most are ASCII, where it is the length. */
export function byteLength(s: string): number {
  return NON_ASCII.test(s) ? Buffer.byteLength(s) : s.length;
}

// ---- the header tokenizer

/**
 * Header names seen on every request or answer, lower-case. A name that is one of them (in any
 * case) is read as this very string: no lower-cased copy of the head, no slice per name, and
 * the framing checks compare equal strings.
 */
const KNOWN_NAMES = [
  "host", "date", "accept", "server", "expect", "connection", "user-agent", "keep-alive", "traceparent", "tracestate",
  "content-type", "x-request-id", "authorization", "cache-control", "content-length", "accept-encoding", "transfer-encoding",
];
const NAMES_BY_LENGTH: string[][] = [];
for (const n of KNOWN_NAMES) (NAMES_BY_LENGTH[n.length] ??= []).push(n);

/** s[from, to), a token, lower-case: one of KNOWN_NAMES when it is one. */
function headerName(s: string, from: number, to: number): string {
  const known = NAMES_BY_LENGTH[to - from];
  if (known !== undefined) {
    for (let k = 0; k < known.length; k++) {
      const n = known[k]!;
      let i = 0;
      for (; i < n.length; i++) {
        let c = s.charCodeAt(from + i);
        if (c >= 65 && c <= 90) c += 32;
        if (c !== n.charCodeAt(i)) break;
      }
      if (i === n.length) return n;
    }
  }
  return s.slice(from, to).toLowerCase();
}

/**
 * Header lines as one side reads them: names lower-case, values trimmed, in order, with the
 * few that frame a message picked out on the way. A head may be fed in several pieces of whole
 * lines (the client parses lines as they arrive); the fields add up.
 */
export class HeaderFields {
  names: string[] = [];
  values: string[] = [];
  /** Content-Length as sent (copies agreeing), or undefined. */
  contentLength: string | undefined;
  /** Transfer-Encoding lines joined with ", ", or undefined. */
  transferEncoding: string | undefined;
  connection: string | undefined;
  expect: string | undefined;
  hosts = 0;

  constructor(
    readonly side: Side,
    readonly maxHeaders: number,
  ) {}

  /** Empty again, for the next head: fresh arrays (the last head's are still held by whoever it went to), no framing headers. */
  reset(): void {
    this.names = [];
    this.values = [];
    this.contentLength = undefined;
    this.transferEncoding = undefined;
    this.connection = undefined;
    this.expect = undefined;
    this.hosts = 0;
  }

  /**
   * Tokenizes the header lines text[at, end of text): CRLF-separated, already checked for
   * controls and bare CR/LF (BAD_HEAD_BYTE).
   */
  lines(text: string, at: number): void {
    const n = text.length;
    const names = this.names;
    const values = this.values;
    while (at < n) {
      let end = text.indexOf("\r\n", at);
      if (end < 0) end = n;
      const c0 = text.charCodeAt(at);
      if (c0 === 32 || c0 === 9) throw new WireError(400, "folded header lines are not accepted", "bad_request");
      const colon = text.indexOf(":", at);
      if (colon <= at || colon > end) throw new WireError(400, "malformed header line", "bad_request");
      if (!isToken(text, at, colon)) throw new WireError(400, `malformed header name ${JSON.stringify(text.slice(at, Math.min(colon, at + 40)))}`, "bad_request");
      if (names.length === this.maxHeaders) throw new WireError(431, `more than ${this.maxHeaders} header lines`, "request_header_fields_too_large");
      const name = headerName(text, at, colon);
      const value = trimOws(text, colon + 1, end);
      at = end + 2;
      // Only names of these lengths can be one of the framing headers.
      const len = name.length;
      if (len === 4 || len === 6 || len === 10 || len === 14 || len === 17) {
        if (!this.framing(name, value)) continue;
      }
      names.push(name);
      values.push(value);
    }
  }

  /** Notes a framing header; false for a repeated Content-Length, which is kept once. */
  private framing(name: string, value: string): boolean {
    if (name === "host") this.hosts++;
    else if (name === "content-length") {
      if (this.contentLength !== undefined) {
        if (this.contentLength !== value) throw new WireError(400, "conflicting Content-Length headers", "bad_request");
        // The same value again: kept once, so the reader sees one value (RFC 9110 §8.6).
        return false;
      }
      this.contentLength = value;
    } else if (name === "transfer-encoding") this.transferEncoding = this.transferEncoding === undefined ? value : `${this.transferEncoding}, ${value}`;
    else if (name === "connection") this.connection = this.connection === undefined ? value : `${this.connection}, ${value}`;
    else if (name === "expect") this.expect = this.expect === undefined ? value : `${this.expect}, ${value}`;
    return true;
  }

  /**
   * The body's framing once the head is whole: "chunked", a length (>= 0), or -1 for none given.
   * Refuses what smuggling is made of: both framings, a coding other than chunked alone, a
   * Content-Length that is not digits.
   */
  bodyFraming(): number | "chunked" {
    const te = this.transferEncoding;
    if (te !== undefined) {
      if (this.contentLength !== undefined) throw new WireError(400, `a ${this.side} may not carry both Transfer-Encoding and Content-Length`, "bad_request");
      if (te !== "chunked" && te.toLowerCase() !== "chunked")
        throw new WireError(501, `Transfer-Encoding: ${te.slice(0, 40)} is not supported${this.side === "request" ? "; send chunked or a Content-Length" : ""}`, "not_implemented");
      return "chunked";
    }
    if (this.contentLength === undefined) return -1;
    const n = digits(this.contentLength);
    if (n < 0) throw new WireError(400, "Content-Length must be a number of bytes", "bad_request");
    return n;
  }
}

/** Checks a head's text for controls and bare CR/LF; throws the side's error. */
export function checkHeadText(text: string, side: Side): void {
  // One pass over a good head; which rule a bad one broke is worked out only then.
  if (!BAD_HEAD_BYTE.test(text)) return;
  if (BAD_CTL.test(text)) throw new WireError(400, `the ${side} head holds a control character`, "bad_request");
  throw new WireError(400, `a line of the ${side} head does not end in CRLF`, "bad_request");
}

// ---- the header renderer

/** Headers rendered once ("name: value\r\n" lines) with their size in bytes. */
export interface HeaderBlock {
  text: string;
  bytes: number;
  /** The text is bytes, one per character (header values passed on as received): written as latin1, not UTF-8; `bytes` is then its length. */
  latin1?: boolean;
}

/** Renders headers, by name; a caller sending the same ones often keeps the block. */
export function headerBlock(headers: Record<string, string>): HeaderBlock {
  let text = "";
  for (const k in headers) text += `${k}: ${headers[k]}\r\n`;
  return { text, bytes: byteLength(text) };
}

/** Renders header lines from [name, value] pairs (latin1 values, passed on byte for byte). */
export function headerLines(pairs: readonly (readonly [string, string])[]): string {
  let text = "";
  for (let i = 0; i < pairs.length; i++) text += `${pairs[i]![0]}: ${pairs[i]![1]}\r\n`;
  return text;
}

// ---- the chunked decoder

const C_SIZE = 0;
const C_DATA = 1;
const C_CRLF = 2;
const C_TRAILERS = 3;
const C_DONE = 4;

/**
 * A chunked body (RFC 9112 §7.1), decoded as it arrives: size lines with optional extensions,
 * data and its CRLF, then trailer lines (read and dropped) up to an empty line. decode() takes
 * what one read brought and hands body bytes to `out` as views of it; a partial line is left
 * unconsumed for the caller to carry over to the next read.
 */
export class ChunkedDecoder {
  private state = C_SIZE;
  private remaining = 0;
  /** Bytes of body decoded so far. */
  size = 0;
  /** Bytes of extensions and trailer lines so far. */
  private overhead = 0;

  constructor(
    readonly side: Side,
    /** Body bytes allowed (413 past it); Infinity for none. */
    private readonly maxBody: number,
    /** Extension and trailer bytes allowed. */
    private readonly maxOverhead: number,
  ) {}

  get done(): boolean {
    return this.state === C_DONE;
  }

  /**
   * Decodes d[from..]; returns where it stopped: at the end, after the body's last byte (done),
   * or at the start of a line not yet whole (carry it over). `out` may stop the decoder by
   * returning false (the reader went away); decode() then returns -1.
   */
  decode(d: Uint8Array, from: number, out: (d: Uint8Array, a: number, b: number) => boolean | void): number {
    let p = from;
    const n = d.length;
    while (p < n) {
      const st = this.state;
      if (st === C_DATA) {
        const take = Math.min(this.remaining, n - p);
        this.remaining -= take;
        if (this.remaining === 0) this.state = C_CRLF;
        if (out(d, p, p + take) === false) return -1;
        p += take;
      } else if (st === C_CRLF) {
        if (n - p < 2) {
          if (d[p] !== 13) throw this.noCrlf();
          return p;
        }
        if (d[p] !== 13 || d[p + 1] !== 10) throw this.noCrlf();
        p += 2;
        this.state = C_SIZE;
      } else if (st === C_SIZE || st === C_TRAILERS) {
        const nl = d.indexOf(10, p);
        if (nl < 0) {
          if (n - p > WIRE_LIMITS.maxChunkLineBytes) throw new WireError(400, "a chunk-size or trailer line is too long", "bad_request");
          return p;
        }
        if (nl === p || d[nl - 1] !== 13) throw new WireError(400, `a line of the ${this.side} body does not end in CRLF`, "bad_request");
        if (st === C_SIZE) this.sizeLine(d, p, nl - 1);
        else if (this.trailerLine(d, p, nl - 1)) return nl + 1;
        p = nl + 1;
      } else return p;
    }
    return p;
  }

  private badSize(): WireError {
    return new WireError(400, `malformed chunk-size line in the ${this.side} body`, "bad_request");
  }

  private noCrlf(): WireError {
    return new WireError(400, `a chunk of the ${this.side} body is not followed by CRLF`, "bad_request");
  }

  /** A chunk-size line [from, cr). */
  private sizeLine(d: Uint8Array, from: number, cr: number): void {
    let size = 0;
    let i = from;
    for (; i < cr; i++) {
      const c = d[i]!;
      let v: number;
      if (c >= 48 && c <= 57) v = c - 48;
      else if (c >= 97 && c <= 102) v = c - 87;
      else if (c >= 65 && c <= 70) v = c - 55;
      else break;
      size = size * 16 + v;
    }
    const count = i - from;
    if (count === 0 || count > WIRE_LIMITS.maxChunkDigits) throw this.badSize();
    // What may follow the digits: whitespace, then ";extensions" without controls.
    for (; i < cr; i++) {
      const c = d[i]!;
      if (c === 59) break; // ';'
      if (c !== 32 && c !== 9) throw this.badSize();
    }
    if (i < cr) {
      for (let j = i; j < cr; j++) {
        const c = d[j]!;
        if ((c < 32 && c !== 9) || c === 127) throw this.badSize();
      }
      this.addOverhead(cr - i);
    }
    if (size === 0) {
      this.state = C_TRAILERS;
      return;
    }
    this.size += size;
    if (this.size > this.maxBody) throw new WireError(413, `${this.side} body is over the limit of ${this.maxBody} bytes`, "request_too_large");
    if (size >= WIRE_LIMITS.maxChunkSize) throw new WireError(400, `chunk size too large in the ${this.side} body`, "bad_request");
    this.remaining = size;
    this.state = C_DATA;
  }

  /** A trailer line [from, cr): true for the empty line that ends the body. */
  private trailerLine(d: Uint8Array, from: number, cr: number): boolean {
    if (cr === from) {
      this.state = C_DONE;
      return true;
    }
    this.addOverhead(cr - from + 2);
    const line = latin1Slice.call(d, from, cr);
    if (BAD_HEAD_BYTE.test(line) || !isToken(line, 0, line.indexOf(":"))) throw new WireError(400, "malformed trailer line", "bad_request");
    return false;
  }

  private addOverhead(n: number): void {
    this.overhead += n;
    if (this.overhead > this.maxOverhead) throw new WireError(400, `chunk extensions and trailers of the ${this.side} body are over ${this.maxOverhead} bytes`, "bad_request");
  }
}

// ---- body pieces

/** Buffer's native copy, called on a plain Uint8Array: no view of the source is made (a first view of a fresh socket read costs more than the copy). */
const copyRange = Buffer.prototype.copy as unknown as (this: Uint8Array, target: Uint8Array, targetStart: number, sourceStart: number, sourceEnd: number) => number;

/**
 * Body bytes as ranges of the arrays they arrived in, gathered to go out in one buffer: the
 * engine client hands the router ranges of its socket reads (each read is an array of its own,
 * kept as long as a range of it is), and the server copies them straight into the buffer it
 * writes, framing included. One allocation and one copy per write, where slicing each chunk,
 * joining the slices and framing the join made one per chunk and three copies.
 */
export class Pieces {
  private readonly bufs: Uint8Array[] = [];
  /** Start and end of each range, in pairs. */
  private readonly ends: number[] = [];
  /** Bytes in all. */
  size = 0;

  /** Ranges held. */
  get count(): number {
    return this.bufs.length;
  }

  /** Adds d[a, b) (nothing when empty). */
  add(d: Uint8Array, a: number, b: number): void {
    if (b <= a) return;
    this.bufs.push(d);
    this.ends.push(a, b);
    this.size += b - a;
  }

  clear(): void {
    this.bufs.length = 0;
    this.ends.length = 0;
    this.size = 0;
  }

  /** Copies the bytes into out from `at`; returns where they end. */
  copyTo(out: Uint8Array, at: number): number {
    const bufs = this.bufs;
    const ends = this.ends;
    for (let i = 0; i < bufs.length; i++) at += copyRange.call(bufs[i]!, out, at, ends[2 * i]!, ends[2 * i + 1]!);
    return at;
  }

  /** The bytes in one array (a whole read as it is). */
  bytes(): Uint8Array {
    if (this.bufs.length === 1 && this.ends[0] === 0 && this.ends[1] === this.bufs[0]!.byteLength) return this.bufs[0]!;
    const out = new Uint8Array(this.size);
    this.copyTo(out, 0);
    return out;
  }
}
