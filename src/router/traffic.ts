// Output tokens of one answer, as cheaply as the hot path allows: the engine's own count when
// it gives one (the `usage` of a whole answer, or of a stream's final usage chunk), otherwise
// the content chunks of an SSE stream counted as they pass (one chunk carries one token with
// vLLM, SGLang and llama-server). No body is parsed as it passes: a stream is scanned natively
// for one byte pattern, and only the last few ranges are kept (references to the reads, not
// copies) to read the usage from at the end.

/** Native search over a Uint8Array (Buffer's, which takes any Uint8Array). */
const indexOf = Buffer.prototype.indexOf as unknown as (this: Uint8Array, value: Uint8Array, from: number) => number;
const enc = new TextEncoder();
const QUOTE = 0x22;
const SPACE = 0x20;

/** The field whose non-empty string value is one token, per streaming path. */
const CONTENT_KEYS: Record<string, Uint8Array> = {
  "/v1/chat/completions": enc.encode('"content":'),
  "/v1/completions": enc.encode('"text":'),
  // Responses API: response.output_text.delta events.
  "/v1/responses": enc.encode('"delta":'),
};
/** completion_tokens (chat, completions) or output_tokens (Responses API); the last one wins. */
const USAGE_KEYS = [enc.encode('"completion_tokens"'), enc.encode('"output_tokens"')];
const lastIndexOf = Buffer.prototype.lastIndexOf as unknown as (this: Uint8Array, value: Uint8Array, from: number) => number;
const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;
/** Ranges kept for the usage: the final usage chunk and what follows it fit in them. */
const KEPT = 4;
/** Bytes of each kept range looked at, from its end. */
const TAIL_BYTES = 4096;

/** The content key of a path's streamed chunks, or undefined when its chunks carry no tokens. */
export function contentKey(path: string): Uint8Array | undefined {
  const q = path.indexOf("?");
  const p = q < 0 ? path : path.slice(0, q);
  // Compared, not looked up: a key lookup hashes the path, fresh from each request's head.
  return p === "/v1/chat/completions" ? CHAT_KEY : p === "/v1/completions" ? TEXT_KEY : p === "/v1/responses" ? DELTA_KEY : undefined;
}
const CHAT_KEY = CONTENT_KEYS["/v1/chat/completions"];
const TEXT_KEY = CONTENT_KEYS["/v1/completions"];
const DELTA_KEY = CONTENT_KEYS["/v1/responses"];

export class TokenCount {
  /** Content chunks seen (SSE only). */
  private chunks = 0;
  private readonly bufs: (Uint8Array | undefined)[] = [undefined, undefined, undefined, undefined];
  private readonly from: number[] = [0, 0, 0, 0];
  private readonly to: number[] = [0, 0, 0, 0];
  private n = 0;
  /** Set when the answer is SSE: its content chunks are counted. */
  key: Uint8Array | undefined;

  /** Body bytes d[a, b) of the answer. */
  feed(d: Uint8Array, a: number, b: number): void {
    const i = this.n++ % KEPT;
    this.bufs[i] = d;
    this.from[i] = a;
    this.to[i] = b;
    const key = this.key;
    if (key === undefined) return;
    const len = key.length;
    for (let at = indexOf.call(d, key, a); at >= 0 && at + len < b; at = indexOf.call(d, key, at + len)) {
      let v = at + len;
      if (d[v] === SPACE) v++;
      // A string value, not empty: `"content":"x…`, not `"content":""` or `"content":null`.
      if (v + 1 < b && d[v] === QUOTE && d[v + 1] !== QUOTE) this.chunks++;
    }
  }

  /** The answer's output tokens: the engine's usage when the tail holds one, else the chunks counted. */
  total(): number {
    // Newest range first; in each, the last usage field (a stream's final usage chunk). Read
    // from the bytes: nothing is decoded.
    for (let k = 1; k <= Math.min(this.n, KEPT); k++) {
      const i = (this.n - k) % KEPT;
      const whole = this.bufs[i]!;
      const from = this.start(i);
      const to = this.to[i]!;
      // The range alone is searched: a backward search of the whole read would run on to its
      // start for a stream with no usage, once per kept range and key (a few KiB each time).
      const d = from === 0 && to === whole.length ? whole : whole.subarray(from, to);
      const a = 0;
      const b = to - from;
      let best = -1;
      let len = 0;
      for (const key of USAGE_KEYS) {
        if (b - key.length < a) continue;
        const at = lastIndexOf.call(d, key, b - key.length);
        if (at >= a && at > best) {
          best = at;
          len = key.length;
        }
      }
      if (best < 0) continue;
      let v = best + len;
      while (v < b && (d[v] === SPACE || d[v] === COLON)) v++;
      let n = 0;
      let digits = 0;
      for (; v < b && d[v]! >= ZERO && d[v]! <= NINE && digits < 12; v++, digits++) n = n * 10 + (d[v]! - ZERO);
      if (digits > 0) return n;
    }
    return this.chunks;
  }

  /** Where the part of kept range i that is looked at begins. */
  private start(i: number): number {
    return Math.max(this.from[i]!, this.to[i]! - TAIL_BYTES);
  }
}
