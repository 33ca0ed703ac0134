// The dashboard at /ui on the admin listener: a read-only, server-rendered view of the same
// summary and tables the admin API serves. It takes the admin token only: from a login form
// or a `?token=` link, either of which sets an HttpOnly, SameSite=Strict cookie holding an
// HMAC derived from the token (never the token itself), or as `Authorization: Bearer` for
// scripts. Every response carries a strict CSP whose per-response nonce is the only way an
// inline script or style runs.

import { createHmac, randomBytes } from "node:crypto";
import { Hono } from "hono";
import { compress } from "hono/compress";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { Context } from "hono";
import type { Controller } from "../control/controller";
import { bearerToken, tokenMatches } from "./auth";
import { Dashboard, type DashboardData, DashboardPage, ICON_SVG, LoginPage } from "./ui-view";

export const UI_COOKIE = "llmgw_ui";
const SESSION_LABEL = "llmgw dashboard session v1";
const SESSION_SECONDS = 12 * 3600;
const EVENTS_SHOWN = 50;

export interface UiOptions {
  controller: Controller;
  adminToken: string;
}

type Env = { Variables: { nonce: string } };

/** The cookie value for a token: changes when the token does, and reveals nothing about it. */
export function sessionValue(adminToken: string): string {
  return createHmac("sha256", adminToken).update(SESSION_LABEL).digest("base64url");
}

export function uiRoutes(o: UiOptions): Hono<Env> {
  const app = new Hono<Env>();
  const session = sessionValue(o.adminToken);
  const ctl = o.controller;

  app.use(async (c, next) => {
    const nonce = randomBytes(16).toString("base64");
    c.set("nonce", nonce);
    c.header(
      "Content-Security-Policy",
      `default-src 'self'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; img-src 'self'; connect-src 'self'; ` +
        `form-action 'self'; base-uri 'none'; object-src 'none'; frame-ancestors 'none'`,
    );
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Referrer-Policy", "no-referrer");
    c.header("X-Frame-Options", "DENY");
    c.header("Cross-Origin-Opener-Policy", "same-origin");
    c.header("Cross-Origin-Resource-Policy", "same-origin");
    // Fleet data and login answers belong in no cache, shared or not.
    c.header("Cache-Control", "no-store");
    await next();
  });
  // A 200-node page is a few hundred KB of repetitive markup, fetched every two seconds.
  app.use(compress());

  const authed = (c: Context<Env>): boolean => {
    const bearer = bearerToken(c.req.header("authorization"));
    if (bearer !== undefined && tokenMatches(bearer, o.adminToken)) return true;
    const cookie = getCookie(c, UI_COOKIE);
    return cookie !== undefined && cookie.length < 200 && tokenMatches(cookie, session);
  };

  const secure = (c: Context<Env>) => new URL(c.req.url).protocol === "https:";

  const startSession = (c: Context<Env>) =>
    setCookie(c, UI_COOKIE, session, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c), maxAge: SESSION_SECONDS });

  const endSession = (c: Context<Env>) => deleteCookie(c, UI_COOKIE, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c) });

  const login = (c: Context<Env>, error?: string, stripQuery = false) => {
    c.header("WWW-Authenticate", 'Bearer realm="llmgw"');
    return c.html(`<!DOCTYPE html>${<LoginPage nonce={c.get("nonce")} error={error} stripQuery={stripQuery} />}`, 401);
  };

  const data = (): DashboardData => {
    // Both calls are synchronous, so no heartbeat lands between them: the summary and the
    // tables describe the same moment, as `GET /api/v1/summary` and the table routes do.
    const summary = ctl.summary();
    const tables = ctl.tables();
    const events = ctl.events({ limit: EVENTS_SHOWN }).reverse();
    return { summary, tables, events, now: ctl.opts.clock.now() };
  };

  const wrong = "That is not this server's admin token.";

  app.get("/", (c) => {
    const given = c.req.query("token");
    if (given !== undefined) {
      if (given.length > 1024 || !tokenMatches(given, o.adminToken)) return login(c, wrong, true);
      startSession(c);
      // A link followed from another site: the browser would not send the Strict cookie on
      // the redirect that ends such a navigation (the login form again), so answer with the
      // page itself, which drops the query from the address bar as it loads.
      if (c.req.header("sec-fetch-site") === "cross-site") return c.html(`<!DOCTYPE html>${<DashboardPage nonce={c.get("nonce")} d={data()} stripQuery />}`);
      return c.redirect("/ui", 303);
    }
    if (!authed(c)) return login(c);
    return c.html(`<!DOCTYPE html>${<DashboardPage nonce={c.get("nonce")} d={data()} />}`);
  });

  app.get("/fragment", (c) => {
    if (!authed(c)) return c.text("sign in again at /ui", 401);
    return c.html(`${<Dashboard d={data()} />}`);
  });

  // Behind the session like the rest: on the login form the browser's icon request gets a 401.
  app.get("/icon.svg", (c) => {
    if (!authed(c)) return c.text("sign in at /ui", 401);
    c.header("Cache-Control", "private, max-age=86400");
    return c.body(ICON_SVG, 200, { "Content-Type": "image/svg+xml" });
  });

  app.post("/login", async (c) => {
    let given: unknown;
    try {
      given = (await c.req.parseBody()).token;
    } catch {
      given = undefined;
    }
    // The form's field; without one, a script may log in with the bearer header.
    const token = typeof given === "string" ? given : bearerToken(c.req.header("authorization"));
    if (token === undefined || token.length > 1024 || !tokenMatches(token, o.adminToken)) return login(c, wrong);
    startSession(c);
    return c.redirect("/ui", 303);
  });

  app.get("/logout", (c) => {
    const was = authed(c);
    endSession(c);
    if (!was) return login(c);
    return c.redirect("/ui", 303);
  });

  return app;
}
