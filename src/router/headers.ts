// The headers the router passes between a client and an engine, and the caches that make them
// cheap. Named lists rather than "everything but hop-by-hop": building headers is per-request
// work on the hot path, and engines need (and send) only a few. Up: what identifies or traces a
// request. Down: an answer's head is rendered as text once per replica and content type (or,
// when the engine sends more than a content type, once per replica and set of values) and
// reused, answer after answer, as the same engine sends the same headers.

import type { RequestHeaders } from "../http/exchange";
import type { HeaderBlock } from "../http/wire";
import type { ExtraHeaders } from "../http/client";

const PASS_UP = new Set(["accept", "x-request-id", "traceparent", "tracestate", "user-agent"]);
const PASS_DOWN = new Set(["content-type", "cache-control", "x-request-id", "openai-processing-ms"]);
const NON_ASCII = /[^\x00-\x7f]/;
const NO_HEADERS: ExtraHeaders = [];

/** An answer's head for the client, with whether the answer is an SSE stream. */
export interface AnswerHead extends HeaderBlock {
  readonly sse: boolean;
}

/** Headers passed upstream: what identifies or traces the request (the pool adds Host, Content-Type, Content-Length). */
export function forwardHeaders(h: RequestHeaders): ExtraHeaders {
  let out: [string, string][] | undefined;
  const names = h.names;
  for (let i = 0; i < names.length; i++) {
    const n = names[i]!;
    if (PASS_UP.has(n)) (out ??= []).push([n, h.values[i]!]);
  }
  return out ?? NO_HEADERS;
}

export class AnswerHeaders {
  /** By replica, then content type: the head of an answer that passes on a content type alone. */
  private readonly blocks = new Map<string, Map<string, AnswerHead>>();
  /** The last one asked for, compared first: the type is a string fresh from each engine answer, and comparing it costs less than hashing it for the lookup. */
  private last: { id: string; type: string | undefined; head: AnswerHead } | undefined;
  /** By replica: the last head of more than a content type, with the [name, value, …] it was made of. */
  private readonly passed = new Map<string, { pairs: string[]; head: AnswerHead }>();

  /** The client's head of an engine's answer (the engine's names and values), from replica `id`. */
  answer(id: string, names: readonly string[], values: readonly string[]): AnswerHead {
    // Usually only Content-Type is passed on, and the text for it is made once per replica and type.
    let type: string | undefined;
    let more = false;
    for (let i = 0; i < names.length; i++) {
      const k = names[i]!;
      if (!PASS_DOWN.has(k)) continue;
      if (k === "content-type" && type === undefined) type = values[i];
      else more = true;
    }
    return more ? this.passedHeaders(id, names, values, type) : this.replicaHeaders(id, type);
  }

  /** The answer headers for a replica and a content type, rendered once. */
  replicaHeaders(id: string, type: string | undefined): AnswerHead {
    const last = this.last;
    if (last !== undefined && last.id === id && last.type === type) return last.head;
    const h = this.replicaBlock(id, type);
    this.last = { id, type, head: h };
    return h;
  }

  private replicaBlock(id: string, type: string | undefined): AnswerHead {
    let byType = this.blocks.get(id);
    if (byType === undefined) {
      // Replicas come and go: the cache is dropped when it outgrows the fleet, not kept forever.
      if (this.blocks.size > 4096) this.blocks.clear();
      byType = new Map();
      this.blocks.set(id, byType);
    }
    const key = type ?? "";
    let h = byType.get(key);
    if (h === undefined) {
      h = head(`x-llmgw-replica: ${id}\r\n${type !== undefined ? `content-type: ${type}\r\n` : ""}`, type);
      if (byType.size > 16) byType.clear();
      byType.set(key, h);
    }
    return h;
  }

  /**
   * The answer headers for a replica that passes on more than a content type (an SSE stream's
   * Cache-Control, a request id): the last ones made for it again when the engine sent the same
   * pass-down headers, as it does answer after answer.
   */
  private passedHeaders(id: string, names: readonly string[], values: readonly string[], type: string | undefined): AnswerHead {
    const last = this.passed.get(id);
    if (last !== undefined) {
      const pairs = last.pairs;
      let j = 0;
      let same = true;
      for (let i = 0; i < names.length && same; i++) {
        if (!PASS_DOWN.has(names[i]!)) continue;
        same = j < pairs.length && pairs[j] === names[i] && pairs[j + 1] === values[i];
        j += 2;
      }
      if (same && j === pairs.length) return last.head;
    }
    let text = `x-llmgw-replica: ${id}\r\n`;
    const pairs: string[] = [];
    for (let i = 0; i < names.length; i++) {
      if (!PASS_DOWN.has(names[i]!)) continue;
      text += `${names[i]!}: ${values[i]!}\r\n`;
      pairs.push(names[i]!, values[i]!);
    }
    const h = head(text, type);
    // Replicas come and go: dropped when it outgrows the fleet, as the content-type cache is.
    if (this.passed.size > 4096) this.passed.clear();
    this.passed.set(id, { pairs, head: h });
    return h;
  }
}

/**
 * Answer headers made of an engine's header values: latin1 text (as the client read them), so
 * a value with bytes >= 0x80 goes out as those bytes, not as their UTF-8 encoding.
 */
function head(text: string, type: string | undefined): AnswerHead {
  const sse = type !== undefined && type.includes("text/event-stream");
  return NON_ASCII.test(text) ? { text, bytes: text.length, latin1: true, sse } : { text, bytes: text.length, sse };
}
