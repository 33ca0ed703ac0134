// Errors in OpenAI's shape, so every client SDK turns them into its own error types:
// {"error": {"message", "type", "param", "code"}}; and the two ways the router answers with a
// whole reply: send() it, or answer() it as an SSE error event to a stream already opened for a
// request held for a cold start.

import type { ClientExchange } from "../http/exchange";

/** A whole answer: what the router's listener writes in one go. */
export interface Reply {
  status: number;
  headers: Record<string, string>;
  body: string;
}

const JSON_HEADERS = { "content-type": "application/json" };

export function openAIError(
  status: number,
  message: string,
  opts: { type?: string; param?: string | null; code?: string | null; headers?: Record<string, string> } = {},
): Reply {
  return { status, headers: opts.headers ? { ...JSON_HEADERS, ...opts.headers } : JSON_HEADERS, body: openAIErrorBody(status, message, opts) };
}

/** The JSON body of an OpenAI-shaped error. */
export function openAIErrorBody(status: number, message: string, opts: { type?: string; param?: string | null; code?: string | null } = {}): string {
  const type = opts.type ?? (status >= 500 ? "server_error" : status === 401 ? "authentication_error" : "invalid_request_error");
  return JSON.stringify({ error: { message, type, param: opts.param ?? null, code: opts.code ?? null } });
}

/** A JSON answer. */
export function jsonReply(value: unknown, status = 200): Reply {
  return { status, headers: JSON_HEADERS, body: JSON.stringify(value) };
}

/** The SSE frame that ends a stream whose upstream died: an error event, then the end. */
export function sseErrorFrame(message: string): string {
  return `data: ${JSON.stringify({ error: { message, type: "server_error", param: null, code: "upstream_error" } })}\n\n`;
}

/** A whole reply to the client. */
export function send(ex: ClientExchange, r: Reply): void {
  ex.respond(r.status, r.headers, r.body);
}

const enc = new TextEncoder();

/**
 * A whole reply, or, to a stream already opened for a held request (its 200 sent), the reply's
 * OpenAI-shaped error as an SSE event, then the end.
 */
export function answer(ex: ClientExchange, r: Reply): void {
  if (ex.aborted) return;
  if (!ex.answered) return send(ex, r);
  ex.end(enc.encode(`data: ${r.body}\n\n`));
}
