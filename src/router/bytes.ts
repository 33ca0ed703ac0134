// Byte and text helpers shared by the router's HTTP/1.1 server (http1.ts) and its client to
// engines (upstream.ts): both parse heads off socket buffers on the hot path.

/** Bytes as latin1 text, read straight from the array (a TextDecoder would need a view of it first). */
export const latin1Slice = (Buffer.prototype as unknown as { latin1Slice(this: Uint8Array, start: number, end: number): string }).latin1Slice;

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
