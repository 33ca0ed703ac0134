// The built-in OpenAI-compatible fake engine: stands in for vLLM where there are no GPUs, with
// the same wire shapes, a slot limit with a FIFO queue, a simulated prefix cache and vLLM metrics.
// Demos, tests and the router's benchmarks run against it, so the per-request path is kept small.
// Given a key (--api-key, or LLMGW_FAKE_ENGINE_API_KEY) it answers /v1/* only to a request that
// presents it, as vLLM and SGLang do; /health and /metrics stay open like theirs.

import { sameBytes } from "../lib/digest";
import type { Server } from "bun";
import { type FlagSpecs, UsageError, parseFlags } from "../config/flags";
import { hostPort } from "../lib/net";
import { openAIErrorBody } from "../router/errors";
import { PrefixCache, ttftWithHits } from "./prefix-cache";
import { SCORED_PATHS, embed, scoredResponse } from "./fake-scoring";

export interface PrefixCacheOptions {
  /** Cached blocks kept in the LRU; 0 disables the cache. */
  blocks: number;
  /** Prompt characters per block (vLLM's 16-token block is about 64 characters). */
  blockChars: number;
  /** Share of TTFT saved when the whole prompt hits, 0..1. */
  hitSpeedup: number;
}

export interface FakeEngineOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** Served model names; the first is the primary one and labels the metrics. */
  models: string[];
  ttftMs?: number;
  tokenDelayMs?: number;
  /**
   * At token delay 0, write each streamed event on its own (a turn of the event loop between
   * them, as an engine producing tokens does) instead of the whole answer in one write.
   */
  flushEvents?: boolean;
  /** Completion tokens per response unless the request sets max_tokens / max_completion_tokens. */
  tokens?: number;
  /** Requests generated at once; the rest wait in FIFO order. */
  slots?: number;
  prefixCache?: Partial<PrefixCacheOptions>;
  embeddingDim?: number;
  /** Answer /v1/* only with `Authorization: Bearer <apiKey>` (401 otherwise). */
  apiKey?: string;
  /**
   * Answer every Nth inference request 503 before doing any work (and counting none of it), as an
   * engine that refuses requests under trouble does: the router retries them on another replica.
   */
  failEvery?: number;
}

/** The environment variable `llmgw fake-engine` takes its key from when --api-key is not given. */
export const FAKE_ENGINE_KEY_ENV = "LLMGW_FAKE_ENGINE_API_KEY";
/** The time between tokens, for engines a catalog profile starts (its env), when --token-delay-ms is not given. */
export const FAKE_TOKEN_DELAY_ENV = "LLMGW_FAKE_TOKEN_DELAY_MS";
/** Every Nth inference request answered 503 (FakeEngineOptions.failEvery), for engines a catalog profile starts, when --fail-every is not given. */
export const FAKE_FAIL_EVERY_ENV = "LLMGW_FAKE_FAIL_EVERY";

export interface FakeEngineStats {
  /** Valid inference requests received (chat, completions, embeddings). */
  requests: number;
  completed: number;
  /** Requests whose client went away (or that stop() cut short) before they finished. */
  aborted: number;
  running: number;
  waiting: number;
  /** Prefix-cache blocks that hit / were looked up. */
  prefixHits: number;
  prefixQueries: number;
  /** Requests answered 503 on purpose (failEvery). */
  failed: number;
}

export interface FakeEngine {
  url: string;
  port: number;
  stop(): Promise<void>;
  stats(): FakeEngineStats;
}

/** Upper bound on completion tokens per request, whatever max_tokens asks for. */
export const MAX_COMPLETION_TOKENS = 4096;

const DEFAULTS = {
  host: "127.0.0.1",
  /** 0: any free port. */
  port: 0,
  ttftMs: 20,
  tokenDelayMs: 5,
  tokens: 16,
  slots: 8,
  embeddingDim: 16,
  prefixCache: { blocks: 4096, blockChars: 64, hitSpeedup: 0.8 } satisfies PrefixCacheOptions,
};

const FINGERPRINT = "fp_llmgw_fake";

// Deterministic text: a fixed word cycle, pre-serialised once so streaming a token is a string concat.
const WORDS =
  "The quick brown fox jumps over the lazy dog while a small cluster answers every request from a warm replica".split(" ");
const TOKEN_JSON: string[] = [];
const CONTENT_END: number[] = [0];
let fullText = "";
for (let i = 0; i < MAX_COMPLETION_TOKENS; i++) {
  const t = (i === 0 ? "" : " ") + WORDS[i % WORDS.length];
  TOKEN_JSON.push(JSON.stringify(t));
  fullText += t;
  CONTENT_END.push(fullText.length);
}
const FULL_TEXT = fullText;

const JSON_HEADERS = { "content-type": "application/json" };
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };
const PROM_HEADERS = { "content-type": "text/plain; version=0.0.4; charset=utf-8" };
const DONE_FRAME = "data: [DONE]\n\n";

const enum Kind {
  Chat,
  Text,
  Responses,
}

/** Most choices one request may ask for (`n`), as OpenAI's API allows. */
export const MAX_CHOICES = 128;

/** One generation request from arrival to its last token or abort. */
interface Job {
  kind: Kind;
  /** Completion tokens per choice. */
  n: number;
  /** Choices generated side by side (`n` of the request); 1 for the Responses API. */
  choices: number;
  /** "length" when max_tokens cut the answer, as a real engine says; "stop" otherwise. */
  finish: "stop" | "length";
  emitted: number;
  /** Completion tokens (all choices) already added to the engine's generation counter. */
  generated: number;
  prompt: string;
  promptTokens: number;
  cachedTokens: number;
  ttftMs: number;
  done: boolean;
  holding: boolean;
  admitted: (() => void) | undefined;
  admission: Promise<void> | undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
  wake: (() => void) | undefined;
  // SSE frame pieces, built once per stream.
  pre: string;
  usageTail: string;
  includeUsage: boolean;
}

function fireWake(job: Job): void {
  const wake = job.wake;
  job.timer = undefined;
  job.wake = undefined;
  wake?.();
}

/**
 * Ends a stream whose job was aborted. Without this, a pull() that enqueues nothing is called
 * again at once, forever, when only request.signal (not cancel) reported the disconnect.
 */
function endStream(c: ReadableStreamDefaultController<string>): void {
  try {
    c.close();
  } catch {
    // Already cancelled by the consumer.
  }
}

function approxTokens(chars: number): number {
  return Math.ceil(chars / 4);
}

/** An error in the router's OpenAI shape (router/errors.ts): {"error": {message, type, param, code}}. */
function errorResponse(status: number, message: string, opts: { type?: string; param?: string | null; code?: string | null } = {}): Response {
  return new Response(openAIErrorBody(status, message, opts), { status, headers: JSON_HEADERS });
}

function badRequest(message: string, param: string | null): Response {
  return errorResponse(400, message, { param });
}

/** Path of an absolute request URL without building a URL object. */
function pathOf(url: string): string {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return "/";
  const q = url.indexOf("?", start);
  return q < 0 ? url.slice(start) : url.slice(start, q);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The chat prompt as the cache sees it: every message's role and text, concatenated. */
function chatPrompt(messages: unknown): string | Response {
  if (!Array.isArray(messages) || messages.length === 0) {
    return badRequest("`messages` is required and must be a non-empty array", "messages");
  }
  let prompt = "";
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isObject(m) || typeof m.role !== "string") {
      return badRequest(`\`messages[${i}].role\` is required and must be a string`, `messages[${i}].role`);
    }
    prompt += m.role;
    const content = m.content;
    if (typeof content === "string") prompt += content;
    else if (Array.isArray(content)) {
      for (const part of content) if (isObject(part) && typeof part.text === "string") prompt += part.text;
    } else if (content !== undefined && content !== null) {
      return badRequest(`\`messages[${i}].content\` must be a string or an array of content parts`, `messages[${i}].content`);
    }
  }
  return prompt;
}

function textPrompt(prompt: unknown): string | Response {
  if (typeof prompt === "string") return prompt;
  if (Array.isArray(prompt) && prompt.length > 0) {
    // A list of strings is a batch and a list of numbers is pre-tokenised; both just feed the cache key.
    if (prompt.every((p) => typeof p === "string")) return prompt.join("");
    if (prompt.every((p) => typeof p === "number")) return prompt.join(",");
  }
  return badRequest("`prompt` is required and must be a string or an array of strings", "prompt");
}

/**
 * The Responses API's prompt: `input` is a string or a list of items (messages with string or
 * input_text content; other item types, such as function_call_output, count by their text);
 * `instructions` is the system prompt.
 */
function responsesPrompt(input: unknown, instructions: unknown): string | Response {
  if (instructions != null && typeof instructions !== "string") return badRequest("`instructions` must be a string", "instructions");
  let prompt = typeof instructions === "string" ? `system${instructions}` : "";
  if (typeof input === "string") return prompt + `user${input}`;
  if (!Array.isArray(input) || input.length === 0) return badRequest("`input` is required and must be a string or a non-empty array of input items", "input");
  for (let i = 0; i < input.length; i++) {
    const item: unknown = input[i];
    if (!isObject(item)) return badRequest(`\`input[${i}]\` must be an object`, `input[${i}]`);
    if (typeof item.role === "string") prompt += item.role;
    const content = item.content ?? item.output;
    if (typeof content === "string") prompt += content;
    else if (Array.isArray(content)) {
      for (const part of content) if (isObject(part) && typeof part.text === "string") prompt += part.text;
    } else if (content != null) return badRequest(`\`input[${i}].content\` must be a string or an array of content parts`, `input[${i}].content`);
  }
  return prompt;
}

/** A Responses API `response` object: in progress (no output yet) or done (completed, or incomplete when max_output_tokens cut it). */
function responseObject(job: Job, id: string, model: string, created: number, phase: "in_progress" | "done", text: string) {
  const done = phase === "done";
  const status = !done ? "in_progress" : job.finish === "length" ? "incomplete" : "completed";
  return {
    id,
    object: "response",
    created_at: created,
    status,
    error: null,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: null,
    model,
    output: done ? [{ id: `msg_${id.slice(5)}`, type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text, annotations: [], logprobs: [] }] }] : [],
    parallel_tool_calls: true,
    temperature: 1,
    top_p: 1,
    tool_choice: "auto",
    tools: [],
    max_output_tokens: job.finish === "length" ? job.n : null,
    text: { format: { type: "text" } },
    usage: done
      ? { input_tokens: job.promptTokens, input_tokens_details: { cached_tokens: job.cachedTokens }, output_tokens: job.n, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: job.promptTokens + job.n }
      : null,
  };
}

function labelValue(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/**
 * A turn of the event loop: what a stream enqueued before it is written to the socket before
 * what it enqueues after (within one turn Bun gathers a stream's chunks into one write).
 */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function checkOption(name: string, value: number, min: number, integer: boolean): void {
  if (!Number.isFinite(value) || value < min || (integer && !Number.isInteger(value))) {
    throw new Error(`fake engine option ${name} must be ${integer ? "an integer" : "a number"} >= ${min}, got ${value}`);
  }
}

class Engine {
  readonly served: Set<string>;
  readonly primary: string;
  readonly ttftMs: number;
  readonly tokenDelayMs: number;
  /** Streams without a token delay still write event by event (FakeEngineOptions.flushEvents). */
  readonly flushEvents: boolean;
  readonly tokens: number;
  readonly slots: number;
  readonly hitSpeedup: number;
  readonly embeddingDim: number;
  readonly cache: PrefixCache | undefined;
  readonly modelsBody: string;
  /** `Bearer <key>` as bytes, or undefined when the engine checks no key. */
  private readonly expected: Buffer | undefined;

  // Set iteration is insertion order: a FIFO queue with O(1) removal of a waiter that gives up.
  private readonly queue = new Set<Job>();
  private readonly live = new Set<Job>();
  private readonly idPrefix = Math.random().toString(36).slice(2, 8);
  private nextId = 0;
  running = 0;
  requests = 0;
  completed = 0;
  aborted = 0;
  prefixHits = 0;
  prefixQueries = 0;
  promptTokensTotal = 0;
  generationTokensTotal = 0;
  cacheQueryTokens = 0;
  cacheHitTokens = 0;
  /** failEvery (0: never), and the inference requests seen, for it. */
  private readonly failEvery: number;
  private inference = 0;
  /** Requests answered 503 on purpose (failEvery). */
  failed = 0;

  constructor(opts: FakeEngineOptions) {
    if (!Array.isArray(opts.models) || opts.models.length === 0 || opts.models.some((m) => typeof m !== "string" || m === "")) {
      throw new Error("fake engine option models must be a non-empty list of model names");
    }
    if (opts.apiKey !== undefined && (typeof opts.apiKey !== "string" || opts.apiKey === "" || /[\s\x00-\x1f\x7f]/.test(opts.apiKey)))
      throw new Error("fake engine option apiKey must be a non-empty string without spaces or control characters");
    this.expected = opts.apiKey !== undefined ? Buffer.from(`Bearer ${opts.apiKey}`) : undefined;
    this.served = new Set(opts.models);
    this.primary = opts.models[0]!;
    this.ttftMs = opts.ttftMs ?? DEFAULTS.ttftMs;
    this.tokenDelayMs = opts.tokenDelayMs ?? DEFAULTS.tokenDelayMs;
    this.flushEvents = opts.flushEvents === true && this.tokenDelayMs === 0;
    this.tokens = opts.tokens ?? DEFAULTS.tokens;
    this.slots = opts.slots ?? DEFAULTS.slots;
    this.embeddingDim = opts.embeddingDim ?? DEFAULTS.embeddingDim;
    this.failEvery = opts.failEvery ?? 0;
    checkOption("failEvery", this.failEvery, 0, true);
    const pc = { ...DEFAULTS.prefixCache, ...opts.prefixCache };
    checkOption("ttftMs", this.ttftMs, 0, false);
    checkOption("tokenDelayMs", this.tokenDelayMs, 0, false);
    checkOption("tokens", this.tokens, 1, true);
    checkOption("slots", this.slots, 1, true);
    checkOption("embeddingDim", this.embeddingDim, 1, true);
    checkOption("prefixCache.blocks", pc.blocks, 0, true);
    checkOption("prefixCache.blockChars", pc.blockChars, 1, true);
    checkOption("prefixCache.hitSpeedup", pc.hitSpeedup, 0, false);
    this.tokens = Math.min(this.tokens, MAX_COMPLETION_TOKENS);
    this.hitSpeedup = Math.min(1, pc.hitSpeedup);
    this.cache = pc.blocks > 0 ? new PrefixCache(pc.blocks, pc.blockChars) : undefined;
    const created = Math.floor(Date.now() / 1000);
    this.modelsBody = JSON.stringify({
      object: "list",
      data: opts.models.map((id) => ({ id, object: "model", created, owned_by: "llmgw-fake" })),
    });
  }

  stats(): FakeEngineStats {
    return {
      requests: this.requests,
      completed: this.completed,
      aborted: this.aborted,
      running: this.running,
      waiting: this.queue.size,
      prefixHits: this.prefixHits,
      prefixQueries: this.prefixQueries,
      failed: this.failed,
    };
  }

  fetch(req: Request, server: Server<undefined>): Response | Promise<Response> {
    const path = pathOf(req.url);
    const method = req.method;
    if (this.expected !== undefined && path.startsWith("/v1/") && !this.authorized(req.headers.get("authorization"))) {
      return errorResponse(401, "Incorrect or missing API key: this engine answers only with its key (Authorization: Bearer <key>)", { type: "invalid_request_error", code: "invalid_api_key" });
    }
    if (method === "POST") {
      if (this.failEvery > 0 && path.startsWith("/v1/") && ++this.inference % this.failEvery === 0) {
        this.failed++;
        return errorResponse(503, `the fake engine refuses every ${this.failEvery}th request (--fail-every); nothing was generated`, { type: "server_error", code: "unavailable" });
      }
      if (path === "/v1/chat/completions") return this.generate(req, server, Kind.Chat);
      if (path === "/v1/completions") return this.generate(req, server, Kind.Text);
      if (path === "/v1/responses") return this.generate(req, server, Kind.Responses);
      if (path === "/v1/embeddings") return this.embeddings(req);
      if (SCORED_PATHS.has(path)) return this.readBody(req).then((b) => scoredResponse(b, path, `${this.idPrefix}${(this.nextId++).toString(36)}`, (n) => this.countScored(n)));
    } else if (method === "GET") {
      if (path === "/health") return new Response(null, { status: 200 });
      if (path === "/v1/models") return new Response(this.modelsBody, { headers: JSON_HEADERS });
      if (path === "/metrics") return new Response(this.metrics(), { headers: PROM_HEADERS });
    }
    return errorResponse(404, `Invalid URL (${method} ${path})`, { code: "not_found" });
  }

  /** In constant time, so the key cannot be guessed a byte at a time from response times. */
  private authorized(header: string | null): boolean {
    if (header === null) return false;
    const got = Buffer.from(header);
    return sameBytes(got, this.expected!);
  }

  /** Parses the JSON object body and resolves the model, or says what is wrong with them. */
  private async readBody(req: Request): Promise<Record<string, unknown> | Response> {
    let body: unknown;
    try {
      body = await req.json();
    } catch {
      return badRequest("request body is not valid JSON", null);
    }
    if (!isObject(body)) return badRequest("request body must be a JSON object", null);
    const model = body.model;
    if (typeof model !== "string") return badRequest("`model` is required and must be a string", "model");
    if (!this.served.has(model)) {
      return errorResponse(
        404,
        `The model \`${model}\` does not exist. Served here: ${[...this.served].join(", ")}`,
        { param: "model", code: "model_not_found" },
      );
    }
    return body;
  }

  private async generate(req: Request, server: Server<undefined>, kind: Kind): Promise<Response> {
    const body = await this.readBody(req);
    if (body instanceof Response) return body;
    const prompt = kind === Kind.Chat ? chatPrompt(body.messages) : kind === Kind.Text ? textPrompt(body.prompt) : responsesPrompt(body.input, body.instructions);
    if (typeof prompt !== "string") return prompt;

    // The fake model always has more to say than a limit allows: given a limit, it writes up to
    // it and stops for that reason ("length"); without one it writes its usual answer ("stop").
    let n = this.tokens;
    let finish: Job["finish"] = "stop";
    const maxField = kind === Kind.Responses ? "max_output_tokens" : body.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens";
    const max = body[maxField];
    if (max != null) {
      if (typeof max !== "number" || !Number.isInteger(max) || max < 1) {
        return badRequest(`\`${maxField}\` must be a positive integer`, maxField);
      }
      n = Math.min(max, MAX_COMPLETION_TOKENS);
      finish = "length";
    }
    let choices = 1;
    if (kind !== Kind.Responses && body.n != null) {
      if (typeof body.n !== "number" || !Number.isInteger(body.n) || body.n < 1 || body.n > MAX_CHOICES) return badRequest(`\`n\` must be an integer from 1 to ${MAX_CHOICES}`, "n");
      choices = body.n;
    }
    const stream = body.stream;
    if (stream != null && typeof stream !== "boolean") return badRequest("`stream` must be a boolean", "stream");
    const so = body.stream_options;
    const includeUsage = isObject(so) && so.include_usage === true;

    this.requests++;
    const model = body.model as string;
    const job: Job = {
      kind,
      n,
      choices,
      finish,
      emitted: 0,
      generated: 0,
      prompt,
      promptTokens: approxTokens(prompt.length),
      cachedTokens: 0,
      ttftMs: this.ttftMs,
      done: false,
      holding: false,
      admitted: undefined,
      admission: undefined,
      timer: undefined,
      wake: undefined,
      pre: "",
      usageTail: includeUsage ? ',"usage":null' : "",
      includeUsage,
    };
    const id = (kind === Kind.Chat ? "chatcmpl-" : kind === Kind.Text ? "cmpl-" : "resp_") + this.idPrefix + (this.nextId++).toString(36);
    const created = Math.floor(Date.now() / 1000);
    job.admission = this.admit(job);

    if (stream === true) {
      // Bun's idle timeout (10 s) would cut a slow or queued stream; the client decides when to give up.
      server.timeout(req, 0);
      if (kind === Kind.Responses) return this.responsesStream(req, job, id, model, created);
      job.pre =
        `data: {"id":"${id}","object":"${kind === Kind.Chat ? "chat.completion.chunk" : "text_completion"}",` +
        `"created":${created},"model":${JSON.stringify(model)},"system_fingerprint":"${FINGERPRINT}","choices":[`;
      // Bun both aborts the signal and cancels the body on disconnect, and that has regressed in
      // the past; either one alone must free the slot, and abort() is idempotent.
      req.signal.addEventListener("abort", () => this.abort(job), { once: true });
      const body = new ReadableStream<string>({
        pull: (c) => this.step(job, c),
        cancel: () => this.abort(job),
      });
      return new Response(body, { headers: SSE_HEADERS });
    }

    const delayed = job.admission !== undefined || job.ttftMs > 0 || (n > 1 && this.tokenDelayMs > 0);
    if (delayed) {
      server.timeout(req, 0);
      req.signal.addEventListener("abort", () => this.abort(job), { once: true });
      if (job.admission) await job.admission;
      const total = job.done ? 0 : job.ttftMs + (n - 1) * this.tokenDelayMs;
      if (total > 0) await this.wait(job, total);
      // Nobody is listening any more; Bun drops whatever is returned.
      if (job.done) return new Response(null, { status: 499 });
    }
    job.emitted = n;
    this.finish(job);
    const usage = this.usage(job);
    const content = FULL_TEXT.slice(0, CONTENT_END[n]);
    if (kind === Kind.Responses) return new Response(JSON.stringify(responseObject(job, id, model, created, "done", content)), { headers: JSON_HEADERS });
    const all = [];
    for (let index = 0; index < choices; index++)
      all.push(
        kind === Kind.Chat
          ? { index, message: { role: "assistant", content }, logprobs: null, finish_reason: finish }
          : { index, text: content, logprobs: null, finish_reason: finish },
      );
    return new Response(
      JSON.stringify({
        id,
        object: kind === Kind.Chat ? "chat.completion" : "text_completion",
        created,
        model,
        system_fingerprint: FINGERPRINT,
        choices: all,
        usage,
      }),
      { headers: JSON_HEADERS },
    );
  }

  /**
   * The Responses API streamed: the event sequence OpenAI sends and its SDKs parse
   * (response.created, in_progress, output_item.added, content_part.added, output_text.delta
   * per token, output_text.done, content_part.done, output_item.done, then completed, or
   * incomplete when max_output_tokens cut it), each an SSE `event:` with its JSON `data:`.
   */
  private responsesStream(req: Request, job: Job, id: string, model: string, created: number): Response {
    req.signal.addEventListener("abort", () => this.abort(job), { once: true });
    let seq = 0;
    const msgId = `msg_${id.slice(5)}`;
    const ev = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...data })}\n\n`;
    const item = (status: string, text: string) => ({ id: msgId, type: "message", status, role: "assistant", content: text === "" && status === "in_progress" ? [] : [{ type: "output_text", text, annotations: [], logprobs: [] }] });
    const part = (text: string) => ({ type: "output_text", text, annotations: [], logprobs: [] });
    const pull = async (c: ReadableStreamDefaultController<string>) => {
      let out = "";
      if (job.emitted === 0) {
        const shell = responseObject(job, id, model, created, "in_progress", "");
        out += ev("response.created", { response: shell }) + ev("response.in_progress", { response: shell });
        if (job.admission) await job.admission;
        if (job.done) return endStream(c);
        if (job.ttftMs > 0) await this.wait(job, job.ttftMs);
        if (job.done) return endStream(c);
        out += ev("response.output_item.added", { output_index: 0, item: item("in_progress", "") });
        out += ev("response.content_part.added", { item_id: msgId, output_index: 0, content_index: 0, part: part("") });
      } else if (this.tokenDelayMs > 0 || this.flushEvents) {
        await (this.flushEvents ? nextTurn() : this.wait(job, this.tokenDelayMs));
        if (job.done) return endStream(c);
      }
      do {
        const i = job.emitted++;
        this.generate1(job);
        out += ev("response.output_text.delta", { item_id: msgId, output_index: 0, content_index: 0, delta: JSON.parse(TOKEN_JSON[i]!), logprobs: [] });
      } while (this.tokenDelayMs === 0 && !this.flushEvents && job.emitted < job.n);
      if (job.emitted < job.n) return c.enqueue(out);
      const text = FULL_TEXT.slice(0, CONTENT_END[job.n]);
      this.finish(job);
      out += ev("response.output_text.done", { item_id: msgId, output_index: 0, content_index: 0, text, logprobs: [] });
      out += ev("response.content_part.done", { item_id: msgId, output_index: 0, content_index: 0, part: part(text) });
      out += ev("response.output_item.done", { output_index: 0, item: item("completed", text) });
      const final = responseObject(job, id, model, created, "done", text);
      out += ev(final.status === "completed" ? "response.completed" : "response.incomplete", { response: final });
      c.enqueue(out);
      c.close();
    };
    const body = new ReadableStream<string>({ pull, cancel: () => this.abort(job) });
    return new Response(body, { headers: SSE_HEADERS });
  }

  /** Produces the next SSE frames; called by the stream only when it wants data, so backpressure holds. */
  private async step(job: Job, c: ReadableStreamDefaultController<string>): Promise<void> {
    let out = "";
    if (job.emitted === 0) {
      if (job.admission) await job.admission;
      if (job.done) return endStream(c);
      if (job.ttftMs > 0) {
        await this.wait(job, job.ttftMs);
        if (job.done) return endStream(c);
      }
      if (job.kind === Kind.Chat) {
        for (let x = 0; x < job.choices; x++) out += job.pre + '{"index":' + x + ',"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]' + job.usageTail + "}\n\n";
      }
      out += this.tokenFrame(job, job.emitted++);
    } else {
      if (this.tokenDelayMs > 0 || this.flushEvents) {
        await (this.flushEvents ? nextTurn() : this.wait(job, this.tokenDelayMs));
        if (job.done) return endStream(c);
      }
      out = this.tokenFrame(job, job.emitted++);
    }
    // Without a delay there is nothing to pace, so the rest goes out in one write (unless each
    // event is to be flushed on its own).
    if (this.tokenDelayMs === 0 && !this.flushEvents) while (job.emitted < job.n) out += this.tokenFrame(job, job.emitted++);
    if (job.emitted < job.n) {
      c.enqueue(out);
      return;
    }
    for (let x = 0; x < job.choices; x++) {
      const choice = job.kind === Kind.Chat ? '{"index":' + x + ',"delta":{},"logprobs":null,"finish_reason":"' + job.finish + '"}]' : '{"index":' + x + ',"text":"","logprobs":null,"finish_reason":"' + job.finish + '"}]';
      out += job.pre + choice + job.usageTail + "}\n\n";
    }
    this.finish(job);
    if (job.includeUsage) out += job.pre + '],"usage":' + JSON.stringify(this.usage(job)) + "}\n\n";
    out += DONE_FRAME;
    c.enqueue(out);
    c.close();
  }

  private tokenFrame(job: Job, i: number): string {
    this.generate1(job);
    const tok = TOKEN_JSON[i]!;
    if (job.choices > 1) {
      let out = "";
      for (let x = 0; x < job.choices; x++)
        out +=
          job.kind === Kind.Chat
            ? job.pre + '{"index":' + x + ',"delta":{"content":' + tok + '},"logprobs":null,"finish_reason":null}]' + job.usageTail + "}\n\n"
            : job.pre + '{"index":' + x + ',"text":' + tok + ',"logprobs":null,"finish_reason":null}]' + job.usageTail + "}\n\n";
      return out;
    }
    return job.kind === Kind.Chat
      ? job.pre + '{"index":0,"delta":{"content":' + tok + '},"logprobs":null,"finish_reason":null}]' + job.usageTail + "}\n\n"
      : job.pre + '{"index":0,"text":' + tok + ',"logprobs":null,"finish_reason":null}]' + job.usageTail + "}\n\n";
  }

  private usage(job: Job): Record<string, unknown> {
    const completion = job.n * job.choices;
    const usage: Record<string, unknown> = {
      prompt_tokens: job.promptTokens,
      completion_tokens: completion,
      total_tokens: job.promptTokens + completion,
    };
    // As vLLM does: the details appear only when something was actually served from cache.
    if (job.cachedTokens > 0) usage.prompt_tokens_details = { cached_tokens: job.cachedTokens };
    return usage;
  }

  /** Takes a slot now (undefined) or queues the job and returns when it gets one. */
  private admit(job: Job): Promise<void> | undefined {
    this.live.add(job);
    if (this.running < this.slots && this.queue.size === 0) {
      this.start(job);
      return undefined;
    }
    return new Promise<void>((resolve) => {
      job.admitted = resolve;
      this.queue.add(job);
    });
  }

  /** Occupies a slot; the cache is consulted here, when the request is scheduled, as in vLLM. */
  private start(job: Job): void {
    this.running++;
    job.holding = true;
    const cache = this.cache;
    if (cache === undefined) return;
    const r = cache.lookup(job.prompt);
    this.prefixQueries += r.queried;
    this.prefixHits += r.hit;
    job.cachedTokens = Math.min(job.promptTokens, approxTokens(r.hit * cache.blockChars));
    this.cacheQueryTokens += job.promptTokens;
    this.cacheHitTokens += job.cachedTokens;
    if (r.hitFraction > 0) job.ttftMs = ttftWithHits(this.ttftMs, this.hitSpeedup, r.hitFraction);
  }

  private release(job: Job): void {
    this.live.delete(job);
    if (!job.holding) return;
    job.holding = false;
    this.running--;
    while (this.running < this.slots && this.queue.size > 0) {
      const next = this.queue.values().next().value!;
      this.queue.delete(next);
      this.start(next);
      const admitted = next.admitted;
      next.admitted = undefined;
      admitted?.();
    }
  }

  /**
   * Tokens generated, counted as they are made, as vLLM counts each step's: a stream the client
   * leaves keeps what was generated before it left, and no more.
   */
  private generate1(job: Job): void {
    job.generated += job.choices;
    this.generationTokensTotal += job.choices;
  }

  /**
   * The prompt is counted with the usage the answer reports, at its end: a stream cut before its
   * end reported none, and counts none (vLLM counts a prompt once prefilled; see README, the
   * ledger's reconciliation).
   */
  private finish(job: Job): void {
    if (job.done) return;
    job.done = true;
    this.completed++;
    this.promptTokensTotal += job.promptTokens;
    this.generationTokensTotal += job.n * job.choices - job.generated;
    job.generated = job.n * job.choices;
    this.release(job);
  }

  /** Client gone (or engine stopping): stop generating at once and hand the slot on. */
  abort(job: Job): void {
    if (job.done) return;
    job.done = true;
    this.aborted++;
    if (this.queue.delete(job)) {
      const admitted = job.admitted;
      job.admitted = undefined;
      admitted?.();
    }
    if (job.timer !== undefined) {
      clearTimeout(job.timer);
      fireWake(job);
    }
    this.release(job);
  }

  private wait(job: Job, ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      job.wake = resolve;
      job.timer = setTimeout(fireWake, ms, job);
    });
  }

  abortAll(): void {
    for (const job of [...this.live]) this.abort(job);
  }

  private async embeddings(req: Request): Promise<Response> {
    const body = await this.readBody(req);
    if (body instanceof Response) return body;
    const input = body.input;
    let inputs: string[];
    if (typeof input === "string") inputs = [input];
    else if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === "string")) inputs = input as string[];
    else if (Array.isArray(input) && input.length > 0 && input.every((s) => typeof s === "number")) inputs = [input.join(",")];
    else return badRequest("`input` is required and must be a string or a non-empty array of strings", "input");
    const format = body.encoding_format;
    if (format != null && format !== "float" && format !== "base64") {
      return badRequest('`encoding_format` must be "float" or "base64"', "encoding_format");
    }
    this.requests++;
    let promptTokens = 0;
    const data = inputs.map((text, index) => {
      promptTokens += approxTokens(text.length);
      const v = embed(text, this.embeddingDim);
      // The official Python client asks for base64 by default and decodes little-endian float32.
      const embedding = format === "base64" ? Buffer.from(new Float32Array(v).buffer).toString("base64") : v;
      return { object: "embedding", index, embedding };
    });
    this.completed++;
    this.promptTokensTotal += promptTokens;
    return new Response(
      JSON.stringify({ object: "list", data, model: body.model, usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } }),
      { headers: JSON_HEADERS },
    );
  }

  /** A rerank or score answered (fake-scoring.ts): counted in the prompt tokens, as vLLM counts them. */
  private countScored(promptTokens: number): void {
    this.requests++;
    this.completed++;
    this.promptTokensTotal += promptTokens;
  }

  private metrics(): string {
    return vllmMetrics(this, this.queue.size);
  }
}

/** The vLLM metrics the engine serves on /metrics, named and typed as vLLM names them. */
function vllmMetrics(e: Pick<Engine, "primary" | "running" | "slots" | "cacheQueryTokens" | "cacheHitTokens" | "promptTokensTotal" | "generationTokensTotal" | "completed">, waiting: number): string {
  const l = `{model_name="${labelValue(e.primary)}"}`;
  const gauge = (name: string, help: string, value: number) => `# HELP ${name} ${help}\n# TYPE ${name} gauge\n${name}${l} ${value}\n`;
  const counter = (name: string, help: string, value: number) => `# HELP ${name} ${help}\n# TYPE ${name} counter\n${name}${l} ${value}\n`;
  return (
    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", e.running) +
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting) +
    // Running over slots: what a router wants from KV usage, and 1 exactly when requests start queueing.
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.running / e.slots) +
    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", e.cacheQueryTokens) +
    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", e.cacheHitTokens) +
    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", e.promptTokensTotal) +
    counter("vllm:generation_tokens_total", "Number of generation tokens processed.", e.generationTokensTotal) +
    "# HELP vllm:request_success_total Count of successfully processed requests.\n" +
    "# TYPE vllm:request_success_total counter\n" +
    `vllm:request_success_total{finished_reason="stop",model_name="${labelValue(e.primary)}"} ${e.completed}\n`
  );
}

/** Starts a fake engine; resolves once it listens. */
export async function startFakeEngine(opts: FakeEngineOptions): Promise<FakeEngine> {
  const engine = new Engine(opts);
  const host = opts.host ?? DEFAULTS.host;
  const server = Bun.serve({
    hostname: host,
    port: opts.port ?? DEFAULTS.port,
    development: false,
    fetch: (req, srv) => engine.fetch(req, srv),
    error: () => errorResponse(500, "internal error in the fake engine"),
  });
  const port = server.port!;
  const url = `http://${hostPort(host, port)}`;
  let stopping: Promise<void> | undefined;
  return {
    url,
    port,
    stats: () => engine.stats(),
    stop: () =>
      (stopping ??= (async () => {
        engine.abortAll();
        await server.stop(true);
      })()),
  };
}

/**
 * `llmgw fake-engine`'s flags, parsed by the CLI's parser (config/flags.ts) both when main.ts
 * dispatches the command and when this file runs on its own; `--help` shows these.
 */
export const FAKE_ENGINE_FLAGS: FlagSpecs = {
  model: { kind: "list", value: "NAME", help: "a name to serve (required; the first is the primary)" },
  host: { kind: "string", value: "HOST", help: `address to listen on (default ${DEFAULTS.host})` },
  port: { kind: "string", value: "PORT", help: `port to listen on (default ${DEFAULTS.port}: any free port)` },
  "ttft-ms": { kind: "string", value: "MS", help: "time to first token" },
  "token-delay-ms": { kind: "string", value: "MS", help: "time between tokens" },
  "flush-events": { kind: "boolean", help: "with --token-delay-ms 0, write a streamed answer event by event rather than in one write" },
  tokens: { kind: "string", value: "N", help: "tokens per completion" },
  "fail-every": { kind: "string", value: "N", help: `answer every Nth inference request 503 before any work (default 0: never; or env ${FAKE_FAIL_EVERY_ENV})` },
  slots: { kind: "string", value: "N", help: "requests served at once; more queue" },
  "cache-blocks": { kind: "string", value: "N", help: "size of the simulated prefix cache, in blocks" },
  "api-key": { kind: "string", value: "KEY", help: `answer /v1/* only with Authorization: Bearer KEY, 401 otherwise; /health and /metrics stay open (prefer env ${FAKE_ENGINE_KEY_ENV}, which \`ps\` does not show)` },
  help: { kind: "boolean", short: "h", help: "show this help" },
};

const USAGE = `usage: llmgw fake-engine --model NAME [--model NAME2 ...] [--port P] [--host H]
                         [--ttft-ms N] [--token-delay-ms N] [--flush-events] [--tokens N] [--slots N] [--cache-blocks N] [--fail-every N]
                         [--api-key KEY (or env ${FAKE_ENGINE_KEY_ENV})]`;

function numberFlag(flag: string, raw: string, min: number, max: number, integer: boolean): number {
  const v = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isFinite(v) || v < min || v > max || (integer && !Number.isInteger(v))) {
    const what = integer ? "an integer" : "a number";
    const range = max === Infinity ? `>= ${min}` : `from ${min} to ${max}`;
    throw new UsageError(`${flag} must be ${what} ${range}, got "${raw}"`);
  }
  return v;
}

function keyFlag(flag: string, raw: string): string {
  if (raw === "" || /[\s\x00-\x1f\x7f]/.test(raw)) throw new UsageError(`${flag} must be a non-empty key without spaces or control characters`);
  return raw;
}

/**
 * Parses `llmgw fake-engine` flags into engine options; throws UsageError naming the bad flag.
 * The key comes from --api-key, else from env[LLMGW_FAKE_ENGINE_API_KEY] (the agent's way: a
 * command line shows in `ps`, an environment does not).
 */
export function parseFakeEngineFlags(argv: string[], env: Record<string, string | undefined> = {}): FakeEngineOptions {
  const { flags, positionals } = parseFlags(argv[0] === "fake-engine" ? argv.slice(1) : argv, FAKE_ENGINE_FLAGS);
  if (positionals.length > 0) throw new UsageError(`unknown flag ${positionals[0]}`);
  const str = (name: string) => flags[name] as string | undefined;
  const models = (flags.model as string[] | undefined) ?? [];
  if (models.some((m) => m === "")) throw new UsageError("--model must not be empty");
  if (models.length === 0) throw new UsageError("--model is required (give it once per served name)");
  const opts: FakeEngineOptions = { models, port: DEFAULTS.port };
  const number = (name: string, min: number, max: number, integer: boolean) => {
    const raw = str(name);
    return raw === undefined ? undefined : numberFlag(`--${name}`, raw, min, max, integer);
  };
  if (str("host") !== undefined) opts.host = str("host");
  opts.port = number("port", 0, 65535, true) ?? opts.port;
  const set = <K extends "ttftMs" | "tokenDelayMs" | "tokens" | "slots">(key: K, v: number | undefined) => {
    if (v !== undefined) opts[key] = v;
  };
  set("ttftMs", number("ttft-ms", 0, Infinity, false));
  set("tokenDelayMs", number("token-delay-ms", 0, Infinity, false));
  // A catalog profile cannot pass the fake engine flags (the agent writes its command line), but
  // it can set env: a simulated cluster's engines made slow, as a real one under load is.
  const delayEnv = env[FAKE_TOKEN_DELAY_ENV];
  if (opts.tokenDelayMs === undefined && delayEnv !== undefined && delayEnv !== "") opts.tokenDelayMs = numberFlag(FAKE_TOKEN_DELAY_ENV, delayEnv, 0, 60_000, false);
  set("tokens", number("tokens", 1, MAX_COMPLETION_TOKENS, true));
  set("slots", number("slots", 1, Infinity, true));
  const failEvery = number("fail-every", 0, 1_000_000, true);
  const failEnv = env[FAKE_FAIL_EVERY_ENV];
  if (failEvery !== undefined) opts.failEvery = failEvery;
  else if (failEnv !== undefined && failEnv !== "") opts.failEvery = numberFlag(FAKE_FAIL_EVERY_ENV, failEnv, 0, 1_000_000, true);
  if (flags["flush-events"] === true) opts.flushEvents = true;
  const blocks = number("cache-blocks", 0, Infinity, true);
  if (blocks !== undefined) opts.prefixCache = { blocks };
  if (str("api-key") !== undefined) opts.apiKey = keyFlag("--api-key", str("api-key")!);
  const fromEnv = env[FAKE_ENGINE_KEY_ENV];
  if (opts.apiKey === undefined && fromEnv !== undefined && fromEnv !== "") opts.apiKey = keyFlag(FAKE_ENGINE_KEY_ENV, fromEnv);
  return opts;
}

/** `llmgw fake-engine`: runs until SIGTERM/SIGINT; resolves to the process exit code. */
export async function fakeEngineMain(argv: string[]): Promise<number> {
  // Lets tests make a model's engine fail on every start, as a broken model would.
  const fail = process.env.LLMGW_FAKE_FAIL;
  if (fail) {
    process.stderr.write(fail.endsWith("\n") ? fail : `${fail}\n`);
    return 1;
  }
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  let opts: FakeEngineOptions;
  try {
    opts = parseFakeEngineFlags(argv, process.env);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    process.stderr.write(`llmgw fake-engine: ${e.message}\n${USAGE}\n`);
    return 2;
  }
  let engine: FakeEngine;
  try {
    engine = await startFakeEngine(opts);
  } catch (e) {
    process.stderr.write(`llmgw fake-engine: cannot listen on ${opts.host ?? DEFAULTS.host}:${opts.port}: ${(e as Error).message}\n`);
    return 1;
  }
  process.stdout.write(`llmgw fake-engine listening on ${engine.url} serving ${opts.models.join(", ")}${opts.apiKey !== undefined ? " (API key required on /v1/*)" : ""}\n`);
  // Lets tests make a model's engine crash a while after it became ready, as one that dies
  // under its first requests would: LLMGW_FAKE_CRASH is printed to stderr, then it exits 1.
  const crashAfter = Number(process.env.LLMGW_FAKE_CRASH_AFTER_MS);
  if (process.env.LLMGW_FAKE_CRASH_AFTER_MS !== undefined && Number.isFinite(crashAfter) && crashAfter >= 0)
    setTimeout(() => {
      const crash = process.env.LLMGW_FAKE_CRASH || "fake engine crashing: LLMGW_FAKE_CRASH_AFTER_MS was set";
      process.stderr.write(crash.endsWith("\n") ? crash : `${crash}\n`, () => process.exit(1));
    }, crashAfter);
  return await new Promise<number>((resolve) => {
    // The demo asks its engines to go with it: a demo killed with SIGKILL cannot stop them,
    // and they run in their own session, so nothing else would.
    const parent = Number(process.env.LLMGW_EXIT_WITH_PARENT);
    const watch = Number.isInteger(parent) && parent > 1 ? setInterval(() => {
      try {
        process.kill(parent, 0);
      } catch {
        onSignal();
      }
    }, 500) : undefined;
    const onSignal = () => {
      if (watch) clearInterval(watch);
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
      engine.stop().then(
        () => resolve(0),
        () => resolve(1),
      );
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
}

if (import.meta.main) {
  fakeEngineMain(process.argv.slice(2)).then((code) => process.exit(code));
}
