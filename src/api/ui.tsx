// The dashboard at /ui on the admin listener: a server-rendered view of the same summary and
// tables the admin API serves, the last hour's charts (history.ts), a page per model and per
// node, the API keys, the teams and a page per team (its keys, each limit with its use, its
// usage), the usage ledger per team and hour (ui-usage.tsx), and
// the operator's actions (cordon, uncordon, drain, unpark, delete a model, create and revoke
// keys) as POST forms that call the control plane's operations the admin API calls. It takes
// the admin token only: posted from its sign-in form, which starts a server-side session
// (sessions.ts: a random id in an HttpOnly, SameSite=Strict cookie, 12 h at most, 1 h idle), or
// as `Authorization: Bearer` for scripts. Never from the URL: a token in a link stays in
// browser history and proxy logs. Logging out is a POST carrying the session's CSRF token, and
// revokes the session; every action is the same: a POST from a session carrying its CSRF token
// (else 403, and nothing changes), answered with a 303 back to the page and a message shown
// once there.
// Every response carries a strict CSP whose per-response nonce is the only way an
// inline script or style runs. Everything shown passes through the sanitiser first
// (lib/text.ts): HTML escaping stops markup, not the control characters inside it.

import type { WeightsAdmin } from "../control/weights-admin";
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { compress } from "hono/compress";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import type { Context, MiddlewareHandler } from "hono";
import { ZodError } from "zod";
import type { Scheduler } from "../lib/scheduler";
import type { ApiKeys } from "../control/api-keys";
import type { CatalogAdmin } from "../control/catalog-admin";
import type { EventLog } from "../control/event-log";
import type { FleetViews } from "../control/fleet-views";
import type { NodeAdmin } from "../control/node-admin";
import type { Teams } from "../control/teams";
import type { UsageViews } from "../control/usage-views";
import { ConflictError, NotFoundError, StoreUnavailableError } from "../control/errors";
import { safeDeep } from "../lib/text";
import { CreateKeyBody } from "../protocol/admin";
import { SegmentName } from "../protocol/common";
import type { EventView } from "../protocol/views";
import { bearerToken, markAuthenticated, tokenMatches } from "./auth";
import { HttpError, zodToApiError } from "./errors";
import { History } from "./history";
import { type Session, SessionStore, csrfMatches } from "./sessions";
import { KeysPage, TeamPage, TeamsPage, linkKeys, linkTeams } from "./ui-keys";
import { DashboardPage, type Flash, type HistoryView, ModelPage, NodePage, NotFoundPage, Overview } from "./ui-pages";
import { TeamUsageSection, UsagePage, teamAnchor, teamUsageData, usagePageData, usageRange } from "./ui-usage";
import { type DashboardData, ICON_SVG, LoginPage, modelHref, nodeHref } from "./ui-view";

/** The wall clock a session or page reads (a Scheduler, or just its now()). */
type Clock = Pick<Scheduler, "now">;

export const UI_COOKIE = "llmgw_ui";
const EVENTS_SHOWN = 50;

/** What the dashboard asks of the control plane: the admin API's reads, and the operator's actions it offers. */
export interface UiControl {
  views: Pick<FleetViews, "overview" | "model" | "replicas" | "tables">;
  events: Pick<EventLog, "events">;
  keys: Pick<ApiKeys, "listApiKeys" | "createApiKey" | "revokeApiKey">;
  teams: Pick<Teams, "listTeams" | "team">;
  catalog: Pick<CatalogAdmin, "unpark" | "deleteModel">;
  nodes: Pick<NodeAdmin, "setNodeAdminState">;
  ledger: Pick<UsageViews, "usage">;
  /** Each node's copy of a model's weights (absent without a Hub). */
  weights?: Pick<WeightsAdmin, "modelNodes">;
}

export interface UiOptions {
  control: UiControl;
  adminToken: string;
  /** The wall clock pages and session expiry read. */
  clock: Clock;
  /** The session store; one of its own (in memory, per listener) when not given. */
  sessions?: SessionStore;
  /** The last hour's figures (history.ts), sampled by whoever built it; an empty one when not given. */
  history?: History;
}

/** Events shown on a model's or node's page, and how far back its replicas' events are looked for. */
const PAGE_EVENTS = 30;
const RELATED_EVENTS_SCAN = 500;

type Env = { Variables: { nonce: string } };

export function uiRoutes(o: UiOptions): Hono<Env> {
  const app = new Hono<Env>();
  const ctl = o.control;
  const sessions = o.sessions ?? new SessionStore({ clock: o.clock });

  app.use(securityHeaders);
  // A 200-node page is a few hundred KB of repetitive markup, fetched every two seconds.
  app.use(compress());

  const signIn = signInOf(sessions, o.adminToken);
  const { authed, login } = signIn;
  const { data, historyView, relatedEvents } = viewsOf(ctl, o.clock, o.history ?? new History());

  /** A message for the session's next page, taken when shown. */
  const flashes = new WeakMap<Session, Flash>();
  const takeFlash = (session: Session | undefined): Flash | undefined => {
    if (!session) return undefined;
    const f = flashes.get(session);
    flashes.delete(session);
    return f;
  };

  app.get("/", async (c) => {
    // A sign-in link of older releases (/ui?token=…) signs no one in, and its token is neither
    // checked nor shown: the form, with the query dropped from the address bar.
    const linked = c.req.query("token") !== undefined;
    const who = authed(c);
    if (!who) return login(c, linked ? LINK_REFUSED : undefined, linked);
    if (linked) return c.redirect("/ui", 303);
    const flash = takeFlash(who.session);
    return c.html(`<!DOCTYPE html>${<DashboardPage nonce={c.get("nonce")} d={await data()} h={historyView()} csrf={who.session?.csrf} flash={flash} />}`);
  });

  app.get("/fragment", async (c) => {
    if (!authed(c)) return c.text("sign in again at /ui", 401);
    return c.html(`${<Overview d={await data()} h={historyView()} />}`);
  });

  pageRoutes(app, { ctl, clock: o.clock, authed, login, takeFlash, historyView, relatedEvents });
  actionRoutes(app, { ctl, sessionOf: signIn.sessionOf, authed, login, flashes });

  // Behind the session like the rest: on the login form the browser's icon request gets a 401.
  app.get("/icon.svg", (c) => {
    if (!authed(c)) return c.text("sign in at /ui", 401);
    c.header("Cache-Control", "private, max-age=86400");
    return c.body(ICON_SVG, 200, { "Content-Type": "image/svg+xml" });
  });

  signInRoutes(app, signIn, o.adminToken);
  return app;
}

/** Every answer's headers: a strict CSP with this response's nonce, no framing, no sniffing, no caching. */
const securityHeaders: MiddlewareHandler<Env> = async (c, next) => {
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
};

const WRONG_TOKEN = "That is not this server's admin token.";
const LINK_REFUSED = "Sign-in links (/ui?token=…) no longer sign in: the token would stay in browser history and proxy logs. Paste the admin token here instead.";

/** Who is signed in, and signing in and out: the session cookie, or the admin token as a bearer header. */
interface SignIn {
  /** The request's live session (by cookie), if any. */
  sessionOf(c: Ctx): Session | undefined;
  /** Signed in: by a live session, or by the admin token as a bearer header (no session). */
  authed: Authed;
  /** A new session for every sign-in; the one the browser held before, if any, ends. */
  startSession(c: Ctx): Session;
  endSession(c: Ctx): void;
  /** The sign-in form (401), with an error and, for a sign-in link, the query dropped from the address bar. */
  login(c: Ctx, error?: string, stripQuery?: boolean): Response;
}

function signInOf(sessions: SessionStore, adminToken: string): SignIn {
  const sessionOf = (c: Ctx): Session | undefined => sessions.touch(getCookie(c, UI_COOKIE));
  const secure = (c: Ctx) => new URL(c.req.url).protocol === "https:";
  return {
    sessionOf,
    authed: (c) => {
      const bearer = bearerToken(c.req.header("authorization"));
      if (bearer !== undefined && tokenMatches(bearer, adminToken)) {
        markAuthenticated(c);
        return {};
      }
      const session = sessionOf(c);
      if (session) markAuthenticated(c);
      return session ? { session } : undefined;
    },
    startSession: (c) => {
      markAuthenticated(c);
      sessions.revoke(getCookie(c, UI_COOKIE));
      const { id, session } = sessions.create();
      setCookie(c, UI_COOKIE, id, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c), maxAge: Math.floor(sessions.absoluteMs / 1000) });
      return session;
    },
    endSession: (c) => {
      sessions.revoke(getCookie(c, UI_COOKIE));
      deleteCookie(c, UI_COOKIE, { path: "/ui", httpOnly: true, sameSite: "Strict", secure: secure(c) });
    },
    login: (c, error, stripQuery = false) => {
      c.header("WWW-Authenticate", 'Bearer realm="llmgw"');
      return c.html(`<!DOCTYPE html>${<LoginPage nonce={c.get("nonce")} error={error} stripQuery={stripQuery} />}`, 401);
    },
  };
}

/** What the pages show, each read as one snapshot and passed through the sanitiser. */
function viewsOf(ctl: UiControl, clock: Clock, history: History) {
  const data = async (): Promise<DashboardData> => {
    // One snapshot for both: the summary and the tables describe the same moment, as
    // `GET /api/v1/summary` and the table routes do.
    const { summary, tables } = await ctl.views.overview();
    const events = (await ctl.events.events({ limit: EVENTS_SHOWN })).reverse();
    // Names, classes, labels, errors and event messages are what nodes, engines and catalog
    // files said: sanitised for the page, however a view gained the field.
    return safeDeep({ summary, tables, events, now: clock.now() });
  };

  const historyView = (): HistoryView =>
    safeDeep({
      now: clock.now(),
      windowMs: history.windowMs,
      traffic: history.readsTraffic,
      models: history.models().map((name) => ({ name, points: [...history.model(name)] })),
      classes: history.classes().map((name) => ({ name, points: [...history.gpuClass(name)] })),
      untrackedModels: history.untrackedModels,
      untrackedClasses: history.untrackedClasses,
    });

  /** The newest events about `subject`, and about the replicas named (as far back as the scan goes), newest first. */
  const relatedEvents = async (subject: string, others: string[]): Promise<EventView[]> => {
    const [own, recent] = await Promise.all([ctl.events.events({ limit: PAGE_EVENTS, subject }), others.length > 0 ? ctl.events.events({ limit: RELATED_EVENTS_SCAN }) : []]);
    const wanted = new Set(others);
    const byId = new Map<number, EventView>();
    for (const e of [...own, ...recent.filter((x) => wanted.has(x.subject))]) byId.set(e.id, e);
    return [...byId.values()].sort((a, b) => b.id - a.id).slice(0, PAGE_EVENTS);
  };

  return { data, historyView, relatedEvents };
}

/** Signing in with the admin token (a new session) and out (a POST with the session's CSRF token). */
function signInRoutes(app: Hono<Env>, signIn: SignIn, adminToken: string): void {
  const { authed, login, sessionOf, startSession, endSession } = signIn;
  app.post("/login", async (c) => {
    let given: unknown;
    try {
      given = (await c.req.parseBody()).token;
    } catch {
      given = undefined;
    }
    // The form's field; without one, a script may log in with the bearer header.
    const token = typeof given === "string" ? given : bearerToken(c.req.header("authorization"));
    if (token === undefined || token.length > 1024 || !tokenMatches(token, adminToken)) return login(c, WRONG_TOKEN);
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
}

type Ctx = Context<Env>;
type Authed = (c: Ctx) => { session?: Session } | undefined;

interface PageDeps {
  ctl: UiControl;
  clock: Clock;
  authed: Authed;
  login: (c: Ctx) => Response;
  takeFlash: (s: Session | undefined) => Flash | undefined;
  historyView: () => HistoryView;
  relatedEvents: (subject: string, others: string[]) => Promise<EventView[]>;
}

/** A node's name from the URL, or undefined when it cannot be one. */
function nodeParam(raw: string): string | undefined {
  const r = SegmentName.safeParse(raw);
  return r.success ? r.data : undefined;
}

/** The pages of one model, one node, the keys, the teams and one team: read-only, for a session or a bearer script. */
function pageRoutes(app: Hono<Env>, d: PageDeps): void {
  const { ctl } = d;
  const notFound = (c: Ctx, csrf: string | undefined, what: string) => c.html(`<!DOCTYPE html>${<NotFoundPage nonce={c.get("nonce")} csrf={csrf} what={safeDeep(what)} />}`, 404);

  app.get("/models/:name{.+}", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const raw = c.req.param("name");
    let found: Awaited<ReturnType<UiControl["views"]["model"]>>;
    try {
      found = await ctl.views.model(raw);
    } catch (e) {
      if (e instanceof NotFoundError) return notFound(c, who.session?.csrf, `No model or alias is called "${raw.slice(0, 120)}".`);
      throw e;
    }
    const { view, spec } = found;
    const replicas = await ctl.views.replicas(view.name);
    const events = await d.relatedEvents(`model/${view.name}`, replicas.map((r) => `replica/${r.id}`));
    const h = d.historyView();
    const weights = await ctl.weights?.modelNodes(view.name);
    const page = safeDeep({ view, spec, replicas, events, now: h.now, weights });
    const points = h.models.find((m) => m.name === page.view.name)?.points ?? [];
    const flash = d.takeFlash(who.session);
    return c.html(
      `<!DOCTYPE html>${<ModelPage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} d={{ ...page, points, windowMs: h.windowMs, traffic: h.traffic }} />}`,
    );
  });

  app.get("/nodes/:name", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const raw = c.req.param("name");
    const name = nodeParam(raw);
    const tables = await ctl.views.tables();
    const node = name === undefined ? undefined : tables.nodes.find((n) => n.name === name);
    if (!node) return notFound(c, who.session?.csrf, `No node is called "${raw.slice(0, 120)}".`);
    const replicas = tables.replicas.filter((r) => r.shards.some((s) => s.node === node.name));
    const events = await d.relatedEvents(`node/${node.name}`, replicas.map((r) => `replica/${r.id}`));
    const page = safeDeep({ node, replicas, events, now: d.clock.now() });
    const flash = d.takeFlash(who.session);
    return c.html(`<!DOCTYPE html>${<NodePage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} d={page} />}`);
  });

  app.get("/keys", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const keys = safeDeep(linkKeys(await ctl.keys.listApiKeys()));
    const flash = d.takeFlash(who.session);
    return c.html(`<!DOCTYPE html>${<KeysPage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} keys={keys} now={d.clock.now()} />}`);
  });

  app.get("/teams", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const teams = safeDeep(linkTeams(await ctl.teams.listTeams()));
    const flash = d.takeFlash(who.session);
    return c.html(`<!DOCTYPE html>${<TeamsPage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} teams={teams} />}`);
  });

  app.get("/teams/:name", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const raw = c.req.param("name");
    let team: Awaited<ReturnType<UiControl["teams"]["team"]>>;
    try {
      team = await ctl.teams.team(raw);
    } catch (e) {
      if (e instanceof NotFoundError) return notFound(c, who.session?.csrf, `No team is called "${raw.slice(0, 120)}".`);
      throw e;
    }
    const keys = linkKeys((await ctl.keys.listApiKeys()).filter((k) => k.team === team.name));
    const page = safeDeep({ team, keys, now: d.clock.now() });
    const usage = <TeamUsageSection t={await teamUsageData(ctl, team.name, page.now)} now={page.now} anchor={teamAnchor(team.name)} />;
    const flash = d.takeFlash(who.session);
    return c.html(`<!DOCTYPE html>${<TeamPage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} team={page.team} keys={page.keys} now={page.now} usage={usage} />}`);
  });

  app.get("/usage", async (c) => {
    const who = d.authed(c);
    if (!who) return d.login(c);
    const raw = c.req.query("range");
    const range = usageRange(raw);
    // An unknown range: the default one, saying why, as a 400.
    const flash: Flash | undefined = range === undefined ? safeDeep({ tone: "bad", text: `range "${String(raw).slice(0, 40)}" is not one of 24h, 7d, 30d: showing 24h` }) : d.takeFlash(who.session);
    const page = await usagePageData(ctl, range ?? "24h", d.clock.now());
    return c.html(`<!DOCTYPE html>${<UsagePage nonce={c.get("nonce")} csrf={who.session?.csrf} flash={flash} d={page} />}`, range === undefined ? 400 : 200);
  });
}

interface ActionDeps {
  ctl: UiControl;
  sessionOf: (c: Ctx) => Session | undefined;
  authed: Authed;
  login: (c: Ctx) => Response;
  flashes: WeakMap<Session, Flash>;
}

type Form = Record<string, string | File | (string | File)[]>;
/** What an action did: the message, and where to go back to. */
type Done = { flash: Flash; to: string };

/** What went wrong, as the admin API would say it (its 400, 404 and 409 messages); undefined for anything else. */
function refusal(e: unknown): string | undefined {
  if (e instanceof ZodError) return zodToApiError(e).error.message;
  if (e instanceof HttpError || e instanceof NotFoundError || e instanceof ConflictError || e instanceof StoreUnavailableError) return e.message;
  return undefined;
}

const field = (f: Form, k: string): string | undefined => (typeof f[k] === "string" ? (f[k] as string) : undefined);

/**
 * The operator's actions. Each: a session (a bearer script has none: 403, it uses the API), the
 * session's CSRF token in the form (else 403, nothing done), then the controller method the
 * admin API calls, and a 303 back with what happened (or why not) shown once.
 */
function actionRoutes(app: Hono<Env>, d: ActionDeps): void {
  const { ctl } = d;
  const action = (path: string, back: (c: Ctx) => string, run: (c: Ctx, form: Form) => Promise<Done>) =>
    app.post(path, async (c) => {
      const session = d.sessionOf(c);
      if (!session) {
        if (d.authed(c)) return c.text("refused: dashboard actions need a dashboard session (sign in at /ui); scripts use the admin API under /api/v1", 403);
        return d.login(c);
      }
      let form: Form = {};
      try {
        form = (await c.req.parseBody()) as Form;
      } catch {
        form = {};
      }
      if (!csrfMatches(form.csrf, session)) return c.text("refused: this form's CSRF token is missing or not this session's; reload the page and try again", 403);
      let done: Done;
      try {
        done = await run(c, form);
      } catch (e) {
        const why = refusal(e);
        if (why === undefined) throw e;
        done = { flash: { tone: "bad", text: why }, to: back(c) };
      }
      d.flashes.set(session, safeDeep(done.flash));
      return c.redirect(done.to, 303);
    });

  const nodeBack = (c: Ctx) => nodeHref(c.req.param("name") ?? "");
  for (const [verb, state, said] of [
    ["cordon", "cordoned", "cordoned"],
    ["uncordon", "none", "uncordoned"],
    ["drain", "draining", "draining"],
  ] as const) {
    action(`/nodes/:name/${verb}`, nodeBack, async (c) => {
      const raw = c.req.param("name") ?? "";
      const name = nodeParam(raw);
      if (name === undefined) throw new NotFoundError(`node "${raw.slice(0, 80)}" not found`);
      const { changed } = await ctl.nodes.setNodeAdminState(name, state);
      return { flash: { tone: "ok", text: `node/${name} ${changed ? said : `already ${said}`}` }, to: nodeHref(name) };
    });
  }

  const modelBack = (c: Ctx) => modelHref(c.req.param("name") ?? "");
  action("/models/:name{.+}/unpark", modelBack, async (c) => {
    const { model, changed } = await ctl.catalog.unpark(c.req.param("name") ?? "");
    return { flash: { tone: "ok", text: `model/${model} ${changed ? "unparked: it will be tried again" : "was not parked"}` }, to: modelHref(model) };
  });
  action("/models/:name{.+}/delete", modelBack, async (c, form) => {
    const raw = c.req.param("name") ?? "";
    if (field(form, "confirm") !== "yes") return { flash: { tone: "bad", text: `nothing deleted: tick the box to confirm deleting ${raw.slice(0, 120)}` }, to: modelHref(raw) };
    const name = await ctl.catalog.deleteModel(raw);
    return { flash: { tone: "ok", text: `model/${name} deleted` }, to: "/ui" };
  });

  action("/keys", () => "/ui/keys", async (_c, form) => {
    const pool = field(form, "pool")?.trim();
    const body = CreateKeyBody.parse({ name: field(form, "name")?.trim(), ...(pool ? { pool } : {}) });
    const k = await ctl.keys.createApiKey(body.name, body.pool);
    return { flash: { tone: "ok", text: `key/${k.name} created${k.pool ? ` for pool ${k.pool}` : ""}`, key: { name: k.name, key: k.key } }, to: "/ui/keys" };
  });
  action("/keys/:name/revoke", () => "/ui/keys", async (c, form) => {
    const name = c.req.param("name") ?? "";
    if (field(form, "confirm") !== "yes") return { flash: { tone: "bad", text: `nothing revoked: tick the box to confirm revoking ${name.slice(0, 80)}` }, to: "/ui/keys" };
    await ctl.keys.revokeApiKey(name);
    return { flash: { tone: "ok", text: `key/${name} revoked` }, to: "/ui/keys" };
  });
}
