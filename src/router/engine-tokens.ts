// The engines' own cumulative token counters, read from the same /metrics answer the load
// poller reads (engine-metrics.ts), for the ledger's reconciliation (reconcile-ledger.ts):
// vLLM's and SGLang's prompt_tokens_total and generation_tokens_total, llama-server's
// prompt_tokens_total and tokens_predicted_total. Line by line, like the load reader: a line
// whose name is not one of these costs a character compare.

/** An engine's cumulative prompt and completion (generation) tokens since it started. */
export interface EngineTokens {
  prompt: number;
  completion: number;
}

const PROMPT = 0;
const COMPLETION = 1;
const FAMILIES = ["vllm", "sglang", "llamacpp"] as const;

/** Metric name → family × 2 + kind. */
const WANTED = new Map<string, number>([
  ["vllm:prompt_tokens_total", 0 * 2 + PROMPT],
  ["vllm:generation_tokens_total", 0 * 2 + COMPLETION],
  ["sglang:prompt_tokens_total", 1 * 2 + PROMPT],
  ["sglang:generation_tokens_total", 1 * 2 + COMPLETION],
  ["llamacpp:prompt_tokens_total", 2 * 2 + PROMPT],
  ["llamacpp:tokens_predicted_total", 2 * 2 + COMPLETION],
]);

const SPACE = 32;
const TAB = 9;
const CR = 13;
const QUOTE = 34;
const BACKSLASH = 92;
const LBRACE = 123;
const RBRACE = 125;

function blank(c: number): boolean {
  return c === SPACE || c === TAB || c === CR;
}

/**
 * Sums each family's counters over their series (vLLM labels one series per model name and, with
 * data parallelism, per engine; the sum is the replica's). A malformed line is passed over.
 */
export class EngineTokenReader {
  private readonly sum = new Float64Array(FAMILIES.length * 2);
  private readonly seen = new Uint8Array(FAMILIES.length * 2);

  /** Reads the line text[start, end) (no newline). */
  line(text: string, start: number, end: number): void {
    let i = start;
    while (i < end && blank(text.charCodeAt(i))) i++;
    const c = text.charCodeAt(i);
    // v, s or l: every wanted name starts with one of them; comments and most lines stop here.
    if (c !== 118 && c !== 115 && c !== 108) return;
    const s = i;
    while (i < end) {
      const ch = text.charCodeAt(i);
      if (ch === LBRACE || blank(ch)) break;
      i++;
    }
    const slot = WANTED.get(text.slice(s, i));
    if (slot === undefined) return;
    while (i < end && blank(text.charCodeAt(i))) i++;
    if (text.charCodeAt(i) === LBRACE) {
      // Past the labels: a quoted value may hold a brace, and a quote escaped.
      let quoted = false;
      for (i++; i < end; i++) {
        const ch = text.charCodeAt(i);
        if (quoted) {
          if (ch === BACKSLASH) i++;
          else if (ch === QUOTE) quoted = false;
        } else if (ch === QUOTE) quoted = true;
        else if (ch === RBRACE) break;
      }
      if (i >= end) return;
      i++;
    }
    while (i < end && blank(text.charCodeAt(i))) i++;
    const vs = i;
    while (i < end && !blank(text.charCodeAt(i))) i++;
    const v = Number(text.slice(vs, i));
    if (vs === i || !Number.isFinite(v) || v < 0) return;
    this.sum[slot]! += v;
    this.seen[slot] = 1;
  }

  /**
   * The counters read, of the family `engine` names when it gave both (else the first family that
   * did); undefined when the answer held none: that engine's counters are unknown, not zero.
   */
  tokens(engine?: string): EngineTokens | undefined {
    const hinted = FAMILIES.findIndex((f) => engine !== undefined && engine.toLowerCase().includes(f === "llamacpp" ? "llama" : f));
    const order = hinted >= 0 ? [hinted, 0, 1, 2] : [0, 1, 2];
    for (const f of order) {
      if (this.seen[f * 2 + PROMPT] === 1 && this.seen[f * 2 + COMPLETION] === 1) return { prompt: this.sum[f * 2 + PROMPT]!, completion: this.sum[f * 2 + COMPLETION]! };
    }
    return undefined;
  }
}
