// Errors in OpenAI's shape, so every client SDK turns them into its own error types:
// {"error": {"message", "type", "param", "code"}}.

const JSON_HEADERS = { "content-type": "application/json" };

export function openAIError(
  status: number,
  message: string,
  opts: { type?: string; param?: string | null; code?: string | null; headers?: Record<string, string> } = {},
): Response {
  const type = opts.type ?? (status >= 500 ? "server_error" : status === 401 ? "authentication_error" : "invalid_request_error");
  const body = JSON.stringify({ error: { message, type, param: opts.param ?? null, code: opts.code ?? null } });
  return new Response(body, { status, headers: opts.headers ? { ...JSON_HEADERS, ...opts.headers } : JSON_HEADERS });
}

/** The SSE frame that ends a stream whose upstream died: an error event, then the end. */
export function sseErrorFrame(message: string): string {
  return `data: ${JSON.stringify({ error: { message, type: "server_error", param: null, code: "upstream_error" } })}\n\n`;
}
