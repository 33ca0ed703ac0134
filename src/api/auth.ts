// Bearer-token checks. Each listener's routes take exactly one kind of token; comparison runs
// in constant time over digests, so neither content nor length leaks through timing.

import type { MiddlewareHandler } from "hono";
import { bearerToken, sameSecret } from "../lib/digest";
import { errorBody } from "./errors";
import type { PeerEnv } from "./listener";

export { bearerToken };

export function tokenMatches(presented: string, expected: string): boolean {
  return sameSecret(presented, expected);
}

/**
 * The request proved who sent it (a token, a credential, a session): the listener stops
 * treating its connection as an unauthenticated one (short deadlines, first to be closed when
 * the admin listener is full). A no-op where the app is not served by the listener.
 */
export function markAuthenticated(c: { env: unknown }): void {
  (c.env as Partial<PeerEnv> | undefined)?.authenticated?.();
}

/** Refuses requests that do not carry `Authorization: Bearer <token>` for this kind. */
export function requireToken(kind: "admin" | "join", expected: string): MiddlewareHandler {
  return async (c, next) => {
    const presented = bearerToken(c.req.header("authorization"));
    if (presented === undefined || !tokenMatches(presented, expected)) {
      const what = kind === "admin" ? "the admin token" : "the agent join token";
      c.header("WWW-Authenticate", 'Bearer realm="llmgw"');
      return c.json(errorBody("unauthorized", `missing or wrong bearer token: this route needs ${what}`), 401);
    }
    markAuthenticated(c);
    await next();
  };
}
