// Serves a fetch-style app (the admin/agent Hono app) on the router's own HTTP/1.1 server, so
// the admin listener gets the same strict parsing, deadlines and connection caps as the router
// listener: Bun.serve offers no per-connection control to build them on. Each request becomes
// a Request (its body already read whole), its Response is written back, streamed when its
// body is, and the Request's signal is aborted when the client leaves (the assignments long
// poll waits on it).

import type { ClientExchange, HeaderBlock } from "../http/server";

/**
 * The fetch handler's second argument (the app's `c.env`): what Hono's getConnInfo ('hono/bun')
 * reads, and `authenticated`, which the app's auth calls once a request proves who sent it
 * (auth.ts markAuthenticated), so the listener treats its connection as authenticated.
 */
export interface PeerEnv {
  requestIP(req: Request): { address: string; family: "IPv4" | "IPv6"; port: number } | null;
  authenticated?(): void;
}

export interface FetchApp {
  fetch(req: Request, env: PeerEnv): Response | Promise<Response>;
}

export interface ServeAppOptions {
  scheme: "http" | "https";
  /** The app's answer when something outside it failed (a malformed Host, a throw): its own error shape. */
  errorBody: (status: number, message: string, code: string) => string;
  onError?: (err: unknown) => void;
}

/** Hop-by-hop and framing headers: the server frames the answer itself (RFC 9110 §7.6.1). */
const HOP = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "date", "upgrade", "proxy-connection", "te", "trailer"]);
/** host [":" port] as RFC 9110 §7.2 has it: a reg-name, an IPv4 address or a bracketed IPv6 literal. */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]+)(?::\d{0,5})?$/;
const EMPTY = new Uint8Array(0);
const PENDING = Symbol("pending");
/**
 * Methods are case-sensitive (RFC 9110 §9.1), but a Request upper-cases "get" and turns a method
 * it does not know into GET: only these reach the app as they are.
 */
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]);
const ALLOW = [...METHODS].join(", ");
const JSON_HEADERS = { "content-type": "application/json" };

/** The http1 handler that serves `app`. */
export function serveApp(app: FetchApp, o: ServeAppOptions): (ex: ClientExchange) => void {
  return (ex) => {
    handle(app, o, ex).catch((err) => {
      o.onError?.(err);
      if (!ex.answered) ex.respond(500, JSON_HEADERS, o.errorBody(500, "internal error; see the server log", "internal"));
      else ex.destroy();
    });
  };
}

async function handle(app: FetchApp, o: ServeAppOptions, ex: ClientExchange): Promise<void> {
  // An HTTP/1.0 request may come without Host; one Host at most is the server's own rule.
  const host = ex.headers.get("host") ?? "localhost";
  if (!HOST.test(host)) {
    ex.respond(400, JSON_HEADERS, o.errorBody(400, "malformed Host header", "bad_request"));
    return;
  }
  if (!METHODS.has(ex.method)) {
    ex.respond(405, { ...JSON_HEADERS, allow: ALLOW }, o.errorBody(405, `method ${ex.method} is not served here; use one of ${ALLOW}`, "method_not_allowed"));
    return;
  }
  const headers = new Headers();
  for (const [name, value] of ex.headers.entries()) if (!HOP.has(name)) headers.append(name, value);
  const bodied = ex.method !== "GET" && ex.method !== "HEAD";
  if (bodied) headers.set("content-length", String(ex.body.byteLength));
  const ac = new AbortController();
  let cancel: (() => void) | undefined;
  ex.onAbort = () => {
    ac.abort();
    cancel?.();
  };
  const req = new Request(`${o.scheme}://${host}${ex.target}`, {
    method: ex.method,
    headers,
    signal: ac.signal,
    ...(bodied ? { body: ex.body } : {}),
  });
  const peer = { address: ex.remoteAddress, family: ex.remoteFamily, port: ex.remotePort };
  const res = await app.fetch(req, { requestIP: () => peer, authenticated: () => ex.authenticated() });
  if (ex.aborted) {
    res.body?.cancel().catch(() => {});
    return;
  }
  const block = responseHeaders(res.headers);
  const body = res.body;
  if (body === null || ex.method === "HEAD" || res.status === 204 || res.status === 304) {
    body?.cancel().catch(() => {});
    ex.respond(res.status, block, EMPTY);
    return;
  }
  const reader = body.getReader();
  cancel = () => void reader.cancel().catch(() => {});
  const first = await reader.read();
  if (ex.aborted) return;
  if (first.done) {
    ex.respond(res.status, block, EMPTY);
    return;
  }
  // A body that ends within this turn (a JSON answer, a page) goes out whole with its length;
  // one that does not (a log being followed) is streamed as it comes.
  const next = reader.read();
  const second = await Promise.race([next, new Promise<typeof PENDING>((r) => setImmediate(r, PENDING))]);
  if (ex.aborted) return;
  if (second !== PENDING && second.done) {
    ex.respond(res.status, block, first.value);
    return;
  }
  let ok = ex.stream(res.status, block, first.value);
  let chunk = second === PENDING ? await next : second;
  for (;;) {
    if (ex.aborted) return;
    if (!ok) {
      await new Promise<void>((resolve) => {
        ex.onDrain = resolve;
        const abort = ex.onAbort;
        ex.onAbort = () => {
          abort?.();
          resolve();
        };
      });
      if (ex.aborted) return;
    }
    if (chunk.done) {
      ex.end();
      return;
    }
    ok = ex.write(chunk.value);
    chunk = await reader.read();
  }
}

/** The Response's headers as one block; Set-Cookie stays one line per cookie. */
function responseHeaders(h: Headers): HeaderBlock {
  let text = "";
  for (const [name, value] of h) if (!HOP.has(name)) text += `${name}: ${value}\r\n`;
  return { text, bytes: Buffer.byteLength(text) };
}
