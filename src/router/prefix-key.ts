// The affinity key of an OpenAI request: a 32-bit hash of its leading prompt content, so
// requests that share a prompt prefix land on the replica whose engine already caches it.
//
// For chat, the leading content is the conversation's opening: every message up to and
// including the first user message (system and developer prompts, few-shot turns before it).
// Each later turn only extends the same prompt, so every turn of a conversation keeps one key,
// and the balancer (src/router/balancer.ts) sends it back to the engine that served the
// conversation's last turn, which holds its whole history; a key over the full history would
// change every turn and move the conversation away from its cache (measured in
// test/bench/affinity.ts). Conversations sharing a system prompt still differ by their
// opening question, so one long system prompt does not pile a whole group onto one replica.
// The Responses API's opening is read the same way: its `instructions`, then its `input` items
// (messages and other items, such as function call outputs) up to the first user message.

import { FNV_OFFSET, fnvStep } from "../lib/hash";

// Prompt text goes through Bun's native CRC-32 (chained by seed, so parts hash exactly like their
// concatenation): an FNV-1a loop in JS is a serial multiply per character, about 1 µs for a 1 KB
// chat, ten times the native call. Roles, separators and token ids are a few FNV-1a steps
// (src/lib/hash.ts).
const crc32 = Bun.hash.crc32;
// Mixed in between fields so ["ab","c"] and ["a","bc"] differ; never counted against maxChars,
// because only prompt text decides where the cacheable prefix ends.
const SEP_ROLE = 0x1e;
const SEP_MESSAGE = 0x1f;
/** Characters of the first user message hashed even when the messages before it used up maxChars. */
const FIRST_USER_CHARS = 1024;

// Module-level rather than returned in a tuple: the hot path reads two numbers per field and
// allocating a pair per message would be the only garbage this function makes.
let h = FNV_OFFSET;
let budget = 0;

/** Prompt text, up to what is left of the budget (UTF-16 units, as String.length counts). */
function mixText(s: string): void {
  const n = s.length;
  if (n === 0 || budget === 0) return;
  if (n <= budget) {
    h = crc32(s, h);
    budget -= n;
  } else {
    h = crc32(s.slice(0, budget), h);
    budget = 0;
  }
}

/** A short string outside the prompt text (a role, a part's type), counted against the budget. */
function mixShort(s: string): void {
  const n = s.length < budget ? s.length : budget;
  let x = h;
  for (let i = 0; i < n; i++) x = fnvStep(x, s.charCodeAt(i));
  h = x;
  budget -= n;
}

function mixCode(c: number): void {
  h = fnvStep(h, c);
}

function mixContent(content: unknown): void {
  if (typeof content === "string") {
    mixText(content);
    return;
  }
  if (!Array.isArray(content)) return;
  for (let i = 0; i < content.length && budget > 0; i++) {
    const part: unknown = content[i];
    if (part === null || typeof part !== "object") continue;
    const p = part as { type?: unknown; text?: unknown };
    if (typeof p.text === "string") mixText(p.text);
    // Images and audio are not hashed (they can be megabytes of base64), but their presence
    // is, so a text-only prompt and the same text beside an image do not collide.
    else if (typeof p.type === "string") mixShort(p.type);
  }
}

/** Completions' `prompt` and embeddings' `input`: a string, strings, or token ids. */
function mixPrompt(prompt: unknown): boolean {
  if (typeof prompt === "string") {
    mixText(prompt);
    return true;
  }
  if (!Array.isArray(prompt) || prompt.length === 0) return false;
  const first: unknown = prompt[0];
  if (typeof first === "string") {
    mixText(first);
    return true;
  }
  // A pre-tokenised prompt: a flat array of ids, or an array of such arrays (take the first).
  const toks: unknown = typeof first === "number" ? prompt : first;
  if (!Array.isArray(toks)) return false;
  for (let i = 0; i < toks.length && budget > 0; i++, budget--) {
    const t: unknown = toks[i];
    if (typeof t === "number") mixCode(t | 0);
  }
  return true;
}

/**
 * Chat messages, or Responses API input items, in order up to and including the first user
 * message: each one's role (an item without one, its type) and content (a tool output item, its
 * output).
 */
function mixMessages(messages: readonly unknown[]): void {
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (m === null || typeof m !== "object") continue;
    const msg = m as { role?: unknown; type?: unknown; content?: unknown; output?: unknown };
    const user = msg.role === "user";
    // Past the budget only the first user message is still read.
    if (budget === 0 && !user) continue;
    // The first user message always counts, with a budget of its own: a system prompt longer
    // than maxChars must not leave every conversation behind it with the same key.
    if (user && budget < FIRST_USER_CHARS) budget = FIRST_USER_CHARS;
    if (typeof msg.role === "string") mixShort(msg.role);
    else if (typeof msg.type === "string") mixShort(msg.type);
    mixCode(SEP_ROLE);
    mixContent(msg.content !== undefined ? msg.content : msg.output);
    mixCode(SEP_MESSAGE);
    if (user) break;
  }
}

/**
 * 32-bit hash of the request's leading prompt content, at most `maxChars` characters of it:
 * role and content of the chat messages in order up to and including the first user message,
 * else the completion `prompt`, else the `input`: the Responses API's items read as messages are
 * (after its `instructions`), or a string, strings or token ids. 0 when the body has none of them.
 */
export function prefixKey(body: unknown, maxChars = 2048): number {
  if (body === null || typeof body !== "object") return 0;
  const b = body as { messages?: unknown; prompt?: unknown; input?: unknown; instructions?: unknown };
  h = FNV_OFFSET;
  budget = maxChars > 0 ? maxChars : 0;
  const messages = b.messages;
  if (Array.isArray(messages)) {
    if (messages.length === 0) return 0;
    mixMessages(messages);
    return h >>> 0;
  }
  if (b.prompt !== undefined) return mixPrompt(b.prompt) ? h >>> 0 : 0;
  const input = b.input;
  if (input === undefined) return 0;
  // The Responses API's system prompt comes first in the engine's prompt, as a system message would.
  if (typeof b.instructions === "string" && b.instructions !== "") {
    mixShort("system");
    mixCode(SEP_ROLE);
    mixText(b.instructions);
    mixCode(SEP_MESSAGE);
  }
  if (Array.isArray(input) && input.length > 0 && input[0] !== null && typeof input[0] === "object" && !Array.isArray(input[0])) {
    mixMessages(input);
    return h >>> 0;
  }
  return mixPrompt(input) ? h >>> 0 : 0;
}
