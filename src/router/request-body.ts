// What the router needs of an inference request's body, read once: the model it names, whether
// it streams, its prefix-affinity key and the Responses API's previous_response_id; or the
// OpenAI-shaped refusal of a body that is not JSON, goes over the router's limits, or names no
// model. The bytes themselves go to the engine untouched. A pure function of the bytes and the
// limits, so the router thread and the body worker (body-worker.ts) read a body alike.

import { type JsonLimits, type Scan, scanJson } from "./body-scan";
import { type Reply, openAIError } from "./errors";
import { prefixKey } from "./prefix-key";

export interface BodyFacts {
  model: string;
  /** `"stream": true`. */
  stream: boolean;
  /** Prefix-affinity key (prefix-key.ts); 0: none. */
  key: number;
  /** The Responses API's `previous_response_id`, when a string. */
  previousResponseId?: string | undefined;
  /** [modelStart, modelEnd): the bytes of the root's `model` value, to put another name there (body-scan.ts). */
  modelStart: number;
  modelEnd: number;
  /** A stream's `stream_options`: "usage" when it asks for include_usage, "other" when it has some without it; absent: none. */
  streamOptions?: "usage" | "other" | undefined;
  /** The most output it asks for (`max_tokens`, `max_completion_tokens`, `max_output_tokens`, the largest), absent when it names none: what a budget reserves. */
  maxOutput?: number | undefined;
}

/** The largest of a body's output maxima, or undefined when it names none. */
function maxOutputOf(body: Record<string, unknown>): number | undefined {
  let max: number | undefined;
  for (const v of [body.max_tokens, body.max_completion_tokens, body.max_output_tokens])
    if (typeof v === "number" && Number.isFinite(v) && v >= 0 && (max === undefined || v > max)) max = v;
  return max;
}

/** A body read: its facts, or the reply refusing it. */
export type BodyRead = { facts: BodyFacts; reply?: undefined } | { reply: Reply; facts?: undefined };

const utf8Slice = (Buffer.prototype as unknown as { utf8Slice(this: Uint8Array, start: number, end: number): string }).utf8Slice;

/**
 * A request body as text exactly as TextDecoder reads it (one leading BOM dropped, bytes that
 * are not UTF-8 as U+FFFD), through Buffer's decoder: JSON.parse reads its string in about half
 * the time of TextDecoder's.
 */
export function utf8Text(b: Uint8Array): string {
  const from = b.length >= 3 && b[0] === 0xef && b[1] === 0xbb && b[2] === 0xbf ? 3 : 0;
  return utf8Slice.call(b, from, b.length);
}

/** The refusal of a body the scan found over a limit, naming the limit and the flag that sets it. */
export function overLimit(over: "depth" | "values", limits: JsonLimits): Reply {
  if (over === "depth")
    return openAIError(400, `the request body nests arrays and objects more than ${limits.maxDepth} levels deep, the router's limit (--max-json-depth ${limits.maxDepth}); send a flatter body`, {
      code: "json_too_deep",
    });
  return openAIError(
    413,
    `the request body holds more than ${limits.maxValues} JSON values (array elements and object members together), the router's limit (--max-json-values ${limits.maxValues}); send a smaller request`,
    { code: "json_too_many_values" },
  );
}

/**
 * The message of the listener's own 413 for a body over the size cap, naming the flag: the
 * listener is shared with the admin API and knows nothing of the router's flags.
 */
export function sizeRefusal(message: string, code: string): string {
  return code === "request_too_large" ? `${message} (the router's --max-body-bytes); send a smaller request, or raise the limit` : message;
}

/** Reads a whole body: the scan (done already, or done here), then JSON.parse, then the fields. */
export function readBody(bytes: Uint8Array, limits: JsonLimits, scan: Scan = scanJson(bytes, limits)): BodyRead {
  if (scan.over !== undefined) return { reply: overLimit(scan.over, limits) };
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(utf8Text(bytes));
  } catch (e) {
    return { reply: openAIError(400, `We could not parse the JSON body of your request: ${(e as Error).message}`, { code: "invalid_json" }) };
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) return { reply: openAIError(400, "the request body must be a JSON object", { code: "invalid_request" }) };
  const model = body.model;
  if (model === undefined || model === "") return { reply: openAIError(400, "you must provide a model parameter", { param: "model", code: "missing_model" }) };
  if (typeof model !== "string")
    return { reply: openAIError(400, `model must be a string, not ${model === null ? "null" : Array.isArray(model) ? "an array" : typeof model}`, { param: "model", code: "invalid_type" }) };
  const prev = body.previous_response_id;
  if (prev !== undefined && prev !== null && typeof prev !== "string")
    return { reply: openAIError(400, `previous_response_id must be a string, not ${Array.isArray(prev) ? "an array" : typeof prev}`, { param: "previous_response_id", code: "invalid_type" }) };
  const so = body.stream_options;
  const streamOptions = so === undefined ? undefined : so !== null && typeof so === "object" && (so as { include_usage?: unknown }).include_usage === true ? "usage" : "other";
  return {
    facts: {
      model,
      stream: body.stream === true,
      streamOptions,
      key: prefixKey(body),
      previousResponseId: typeof prev === "string" ? prev : undefined,
      maxOutput: maxOutputOf(body),
      modelStart: scan.modelStart,
      modelEnd: scan.modelEnd,
    },
  };
}

const enc = new TextEncoder();

/**
 * The body with its `model` value replaced by `name` (for an engine that serves one name only),
 * everything else byte for byte; re-encoded whole only when the scan did not place the value.
 */
export function withModel(bytes: Uint8Array, facts: BodyFacts, name: string): Uint8Array {
  const value = enc.encode(JSON.stringify(name));
  if (facts.modelStart < 0) return enc.encode(JSON.stringify({ ...(JSON.parse(utf8Text(bytes)) as object), model: name }));
  const out = new Uint8Array(bytes.byteLength - (facts.modelEnd - facts.modelStart) + value.byteLength);
  out.set(bytes.subarray(0, facts.modelStart), 0);
  out.set(value, facts.modelStart);
  out.set(bytes.subarray(facts.modelEnd), facts.modelStart + value.byteLength);
  return out;
}
