// Byte and text helpers shared by the router's HTTP/1.1 server (http1.ts) and its client to
// engines (upstream.ts): both parse heads off socket buffers on the hot path.

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

/**
 * `head` as latin1 bytes, then `data`, then `tail`, in one buffer: a response head whose
 * header values are passed on byte for byte (see latin1Write).
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
  if (n === 0 || n > 15) return -1;
  let v = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}
