// The dashboard at /ui on the admin listener: a read-only, server-rendered view of the same
// summary and tables the admin API serves. It takes the admin token only: from a login form
// or a `?token=` link, either of which starts a server-side session (sessions.ts: a random id
// in an HttpOnly, SameSite=Strict cookie, 12 h at most, 1 h idle), or as `Authorization:
// Bearer` for scripts. Logging out is a POST carrying the session's CSRF token, and revokes the
// session. Every response carries a strict CSP whose per-response nonce is the only way an
// inline script or style runs. Everything shown passes through the sanitiser first
// (lib/text.ts): HTML escaping stops markup, not the control characters inside it.

import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { compress } from "hono/compress";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { Context } from "hono";
import type { Scheduler } from "../lib/scheduler";

/** The wall clock a session or page reads (a Scheduler, or just its now()). */
type Clock = Pick<Scheduler, "now">;
import type { Controller } from "../control/controller";
import type { TrafficSource } from "../protocol/routing";
import { safeDeep } from "../lib/text";
import { bearerToken, tokenMatches } from "./auth";
import { type Session, SessionStore, csrfMatches } from "./sessions";
import { Dashboard, type DashboardData, DashboardPage, ICON_SVG, LoginPage } from "./ui-view";

export const UI_COOKIE = "llmgw_ui";
const EVENTS_SHOWN = 50;

export interface UiOptions {
  controller: Controller;
  adminToken: string;
  /** Time for session expiry; the controller's clock when not given. */
  clock?: Clock;
  /** The session store; one of its own (in memory, per listener) when not given. */
  sessions?: SessionStore;
  /** The router's traffic figures per model: requests, errors, tokens, TTFT buckets, in flight, held. */
  traffic?: TrafficSource;
}

type Env = { Variables: { nonce: string } };

export function uiRoutes(o: UiOptions): Hono<Env> {
  const app = new Hono<Env>();
  const ctl = o.controller;
  const sessions = o.sessions ?? new SessionStore({ clock: o.clock ?? ctl.opts.scheduler });

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

  /** The request's live session (by cookie), if any. */
  const sessionOf = (c: Context<Env>): Session | undefined => sessions.touch(getCookie(c, UI_COOKIE));

  /** Signed in: by a live session, or by the admin token as a bearer header (no session). */
  const authed = (c: Context<Env>): { session?: Session } | undefined => {
    const bearer = bearerToken(c.req.header("authorization"));
    if (bearer !== undefined && tokenMatches(bearer, o.adminToken)) return {};
    const session = sessionOf(c);
    return session ? { session } : undefined;
  };

  const secure = (c: Context<Env>) => new URL(c.req.url).protocol === "https:";

  /** A new session for every sign-in; the one the browser held before, if any, ends. */
  const startSession = (c: Context<Env>): Session => {
    sessions.revoke(getCookie(c, UI_COOKIE));
    const { id, session } = sessions.create();
    setCookie(c, UI_COOKIE, id, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c), maxAge: Math.floor(sessions.absoluteMs / 1000) });
    return session;
  };

  const endSession = (c: Context<Env>) => {
    sessions.revoke(getCookie(c, UI_COOKIE));
    deleteCookie(c, UI_COOKIE, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c) });
  };

  const login = (c: Context<Env>, error?: string, stripQuery = false) => {
    c.header("WWW-Authenticate", 'Bearer realm="llmgw"');
    return c.html(`<!DOCTYPE html>${<LoginPage nonce={c.get("nonce")} error={error} stripQuery={stripQuery} />}`, 401);
  };

  const data = async (): Promise<DashboardData> => {
    // One snapshot for both: the summary and the tables describe the same moment, as
    // `GET /api/v1/summary` and the table routes do.
    const { summary, tables } = await ctl.overview();
    const events = (await ctl.events({ limit: EVENTS_SHOWN })).reverse();
    // Names, classes, labels, errors and event messages are what nodes, engines and catalog
    // files said: sanitised for the page, however a view gained the field.
    return safeDeep({ summary, tables, events, now: ctl.opts.scheduler.now() });
  };

  const wrong = "That is not this server's admin token.";

  app.get("/", async (c) => {
    const given = c.req.query("token");
    if (given !== undefined) {
      if (given.length > 1024 || !tokenMatches(given, o.adminToken)) return login(c, wrong, true);
      const session = startSession(c);
      // A link followed from another site: the browser would not send the Strict cookie on
      // the redirect that ends such a navigation (the login form again), so answer with the
      // page itself, which drops the query from the address bar as it loads.
      if (c.req.header("sec-fetch-site") === "cross-site")
        return c.html(`<!DOCTYPE html>${<DashboardPage nonce={c.get("nonce")} d={await data()} csrf={session.csrf} stripQuery />}`);
      return c.redirect("/ui", 303);
    }
    const who = authed(c);
    if (!who) return login(c);
    return c.html(`<!DOCTYPE html>${<DashboardPage nonce={c.get("nonce")} d={await data()} csrf={who.session?.csrf} />}`);
  });

  app.get("/fragment", async (c) => {
    if (!authed(c)) return c.text("sign in again at /ui", 401);
    return c.html(`${<Dashboard d={await data()} />}`);
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

  // Logging out changes state, so it is a POST with the session's CSRF token: a link or an
  // image on another page cannot end (or, with a GET, prefetch away) a session.
  app.get("/logout", (c) => {
    // Behind the sign-in like every route; signed in, still not a way to log out.
    if (!authed(c)) return login(c);
    c.header("Allow", "POST");
    return c.text("log out with the button on /ui (POST /ui/logout with the page's CSRF token)", 405);
  });

  app.post("/logout", async (c) => {
    const session = sessionOf(c);
    if (!session) {
      // A script signed in by bearer header holds no session: nothing to revoke.
      if (authed(c)) return c.text("no dashboard session to log out of (this request is signed in by bearer header)", 400);
      endSession(c);
      return login(c);
    }
    let csrf: unknown;
    try {
      csrf = (await c.req.parseBody()).csrf;
    } catch {
      csrf = undefined;
    }
    if (!csrfMatches(csrf, session)) return c.text("refused: this form's CSRF token is missing or not this session's; reload /ui and try again", 403);
    endSession(c);
    return c.redirect("/ui", 303);
  });

  return app;
}
