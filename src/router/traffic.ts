// Output tokens of one answer, as cheaply as the hot path allows: the engine's own count when
// it gives one (the `usage` of a whole answer, or of a stream's final usage chunk), otherwise
// the content chunks of an SSE stream counted as they pass (one chunk carries one token with
// vLLM, SGLang and llama-server). No body is parsed as it passes: a stream is scanned natively
// for one byte pattern, and only the last few ranges are kept (references to the reads, not
// copies) to read the usage from at the end.

/** Native search over a Uint8Array (Buffer's, which takes any Uint8Array). */
const indexOf = Buffer.prototype.indexOf as unknown as (this: Uint8Array, value: Uint8Array, from: number) => number;
const enc = new TextEncoder();
const dec = new TextDecoder();
const QUOTE = 0x22;
const SPACE = 0x20;

/** The field whose non-empty string value is one token, per streaming path. */
const CONTENT_KEYS: Record<string, Uint8Array> = {
  "/v1/chat/completions": enc.encode('"content":'),
  "/v1/completions": enc.encode('"text":'),
  // Responses API: response.output_text.delta events.
  "/v1/responses": enc.encode('"delta":'),
};
/** Any usage field ends so: only a tail holding one is decoded. */
const TOKENS_KEY = enc.encode('_tokens"');
/** completion_tokens (chat, completions) or output_tokens (Responses API); the last one wins. */
const USAGE = /"(?:completion|output)_tokens"\s*:\s*(\d+)/g;
/** Ranges kept for the usage: the final usage chunk and what follows it fit in them. */
const KEPT = 4;
/** Bytes of each kept range looked at, from its end. */
const TAIL_BYTES = 4096;

/** The content key of a path's streamed chunks, or undefined when its chunks carry no tokens. */
export function contentKey(path: string): Uint8Array | undefined {
  const q = path.indexOf("?");
  return CONTENT_KEYS[q < 0 ? path : path.slice(0, q)];
}

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
    const n = Math.min(this.n, KEPT);
    // A stream that ends without a usage field (none was asked for) has nothing decoded.
    let found = false;
    for (let k = n; k >= 1 && !found; k--) {
      const i = (this.n - k) % KEPT;
      const at = indexOf.call(this.bufs[i]!, TOKENS_KEY, this.start(i));
      found = at >= 0 && at < this.to[i]!;
    }
    if (!found) return this.chunks;
    let text = "";
    for (let k = n; k >= 1; k--) {
      const i = (this.n - k) % KEPT;
      text += dec.decode(this.bufs[i]!.subarray(this.start(i), this.to[i]!));
    }
    let last: number | undefined;
    for (const m of text.matchAll(USAGE)) last = Number(m[1]);
    return last !== undefined && Number.isSafeInteger(last) ? last : this.chunks;
  }

  /** Where the part of kept range i that is looked at begins. */
  private start(i: number): number {
    return Math.max(this.from[i]!, this.to[i]! - TAIL_BYTES);
  }
}
