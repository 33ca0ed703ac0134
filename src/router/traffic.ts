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
/** prompt_tokens (chat, completions, embeddings) or input_tokens (Responses API). */
const PROMPT_KEYS = [enc.encode('"prompt_tokens"'), enc.encode('"input_tokens"')];
/** A usage of total_tokens alone (vLLM's rerank before it added prompt_tokens): all prompt. */
const TOTAL_KEYS = [enc.encode('"total_tokens"')];
/** Cached prompt tokens: prompt_tokens_details (chat, completions) or input_tokens_details (Responses API). */
const CACHED_KEYS = [enc.encode('"cached_tokens"')];
/** lastNumber()'s per-key search memo (it runs to the end without yielding, so one pair serves every search), as long as the longest key list. */
const SEARCHED = new Int32Array(2);
const FOUND = new Int32Array(2);
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
  /**
   * The answer's first read, for a usage that comes before a long body: vLLM's rerank answer is
   * {id, model, usage, results}, and the results (with each document's text) may be far longer
   * than the tail looked at. Searched only when the tail holds no usage.
   */
  private first: Uint8Array | undefined = undefined;
  private firstFrom = 0;
  private firstTo = 0;
  /** Set when the answer is SSE: its content chunks are counted. */
  key: Uint8Array | undefined;

  /** Body bytes d[a, b) of the answer. */
  feed(d: Uint8Array, a: number, b: number): void {
    if (this.n === 0) {
      this.first = d;
      this.firstFrom = a;
      this.firstTo = b;
    }
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
    const n = this.lastNumber(USAGE_KEYS);
    return n >= 0 ? n : this.chunks;
  }

  /** Content chunks counted so far (SSE): the completion's tokens as it streams. */
  get streamed(): number {
    return this.chunks;
  }

  /** The prompt's tokens from the engine's usage in the answer's tail, or -1 when it gave none. */
  prompt(): number {
    const n = this.lastNumber(PROMPT_KEYS);
    if (n >= 0 || this.key !== undefined) return n;
    // A whole answer: its usage may come before its body (rerank), or give total_tokens alone.
    const h = this.headNumber(PROMPT_KEYS);
    if (h >= 0) return h;
    if (this.lastNumber(USAGE_KEYS) >= 0 || this.headNumber(USAGE_KEYS) >= 0) return -1;
    const t = this.lastNumber(TOTAL_KEYS);
    return t >= 0 ? t : this.headNumber(TOTAL_KEYS);
  }

  /** The prompt's tokens served from the engine's prefix cache (usage's *_tokens_details.cached_tokens), or -1 when it gave none. */
  cached(): number {
    return this.lastNumber(CACHED_KEYS);
  }

  /**
   * The number after the last of these keys in the answer's tail, or -1. Newest range first; in
   * each, the last match (a stream's final usage chunk). Read from the bytes: nothing is decoded.
   * A backward search runs on past a range's start (to the read's, when a stream carries no
   * usage), so what it found is kept for the ranges before it in the same read (a chunked
   * answer's chunks are ranges of one read): there the last match at or before their end is the
   * same one whenever it lies at or before that end. (No view of the range: a first view of a
   * fresh socket read costs more than the search.)
   */
  private lastNumber(keys: readonly Uint8Array[]): number {
    let prev: Uint8Array | undefined;
    // Per key: where in `prev` the last search started (-1: none yet), and what it found.
    const searched = SEARCHED;
    const found = FOUND;
    for (let k = 1; k <= Math.min(this.n, KEPT); k++) {
      const i = (this.n - k) % KEPT;
      const d = this.bufs[i]!;
      const a = this.start(i);
      const b = this.to[i]!;
      if (d !== prev) {
        prev = d;
        searched.fill(-1);
      }
      let best = -1;
      let len = 0;
      for (let j = 0; j < keys.length; j++) {
        const key = keys[j]!;
        const end = b - key.length;
        if (end < a) continue;
        let at = found[j]!;
        if (!(searched[j]! >= end && at <= end)) {
          at = lastIndexOf.call(d, key, end);
          searched[j] = end;
          found[j] = at;
        }
        if (at >= a && at > best) {
          best = at;
          len = key.length;
        }
      }
      if (best < 0) continue;
      const n = numberAfter(d, best + len, b);
      if (n >= 0) return n;
    }
    return -1;
  }

  /** The number after the first of these keys in the first TAIL_BYTES of the answer's first read, or -1. */
  private headNumber(keys: readonly Uint8Array[]): number {
    const d = this.first;
    if (d === undefined) return -1;
    const a = this.firstFrom;
    // A view bounds the search (a read may be large); made only on this rare path.
    const head = d.subarray(a, Math.min(this.firstTo, a + TAIL_BYTES));
    let best = -1;
    let len = 0;
    for (const key of keys) {
      const at = indexOf.call(head, key, 0);
      if (at >= 0 && (best < 0 || at < best)) {
        best = at;
        len = key.length;
      }
    }
    return best < 0 ? -1 : numberAfter(d, a + best + len, this.firstTo);
  }

  /** Where the part of kept range i that is looked at begins. */
  private start(i: number): number {
    return Math.max(this.from[i]!, this.to[i]! - TAIL_BYTES);
  }
}

/** The whole number after a JSON key that ends at d[v] (past its colon and spaces, up to b), or -1 when none is there. */
function numberAfter(d: Uint8Array, v: number, b: number): number {
  while (v < b && (d[v] === SPACE || d[v] === COLON)) v++;
  let n = 0;
  let digits = 0;
  for (; v < b && d[v]! >= ZERO && d[v]! <= NINE && digits < 12; v++, digits++) n = n * 10 + (d[v]! - ZERO);
  return digits > 0 ? n : -1;
}
