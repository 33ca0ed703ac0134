// The admin API's client keys and teams: keys created (the key shown once) with their team,
// models, expiry, tier and limits, listed, changed, revoked; teams created, listed, changed and
// deleted (refused while keys belong to one, unless ?force=1); and what they used, the usage
// ledger's rows.

import type { Hono } from "hono";
import type { ApiKeyRevoked, ApiKeyUpdated, CreatedApiKey, TeamDeleted, TeamWritten } from "../protocol/views";
import type { AdminControl } from "./admin";
import { HttpError, parseJsonBody } from "./errors";
import { ROUTES } from "./openapi";

async function jsonBody(req: Request): Promise<unknown> {
  const type = req.headers.get("content-type") ?? "";
  if (type && !/^application\/json\b/i.test(type)) throw new HttpError(415, "unsupported_media_type", `send the body as application/json, not ${type.slice(0, 60)}`);
  return parseJsonBody(await req.text());
}

/** The router's API keys. */
export function keyRoutes(app: Hono, ctl: AdminControl): void {
  app.get("/keys", async (c) => c.json(await ctl.keys.listApiKeys()));
  app.post("/keys", async (c) => {
    const { name, pool, ...opts } = ROUTES.createKey.body.parse(await jsonBody(c.req.raw));
    const k = await ctl.keys.createApiKey(name, pool, opts);
    return c.json({ ...k, message: `key/${k.name} created; this is the only time the key is shown` } satisfies CreatedApiKey, 201);
  });
  app.patch("/keys/:name", async (c) => {
    const body = ROUTES.updateKey.body.parse(await jsonBody(c.req.raw));
    const k = await ctl.keys.updateApiKey(c.req.param("name"), body);
    return c.json({ ...k, message: `key/${k.name} changed` } satisfies ApiKeyUpdated);
  });
  app.delete("/keys/:name", async (c) => {
    const name = c.req.param("name");
    await ctl.keys.revokeApiKey(name);
    return c.json({ name, message: `key/${name} revoked` } satisfies ApiKeyRevoked);
  });
}

/** Teams: limits their keys share. */
export function teamRoutes(app: Hono, ctl: AdminControl): void {
  app.get("/teams", async (c) => c.json(await ctl.teams.listTeams()));
  app.post("/teams", async (c) => {
    const body = ROUTES.createTeam.body.parse(await jsonBody(c.req.raw));
    const t = await ctl.teams.createTeam(body);
    return c.json({ ...t, message: `team/${t.name} created` } satisfies TeamWritten, 201);
  });
  app.get("/teams/:name", async (c) => c.json(await ctl.teams.team(c.req.param("name"))));
  app.patch("/teams/:name", async (c) => {
    const body = ROUTES.updateTeam.body.parse(await jsonBody(c.req.raw));
    const t = await ctl.teams.updateTeam(c.req.param("name"), body);
    return c.json({ ...t, message: `team/${t.name} changed` } satisfies TeamWritten);
  });
  app.delete("/teams/:name", async (c) => {
    const q = ROUTES.deleteTeam.query.parse(c.req.query());
    const name = c.req.param("name");
    const revoked = await ctl.teams.deleteTeam(name, q.force);
    return c.json({ name, revoked, message: `team/${name} deleted${revoked.length > 0 ? `; keys revoked: ${revoked.join(", ")}` : ""}` } satisfies TeamDeleted);
  });
}

/** The usage ledger: hourly rows per team, key and model, or added up per team, key, model or pool. */
export function usageRoutes(app: Hono, ctl: AdminControl): void {
  app.get("/usage", async (c) => {
    const q = ROUTES.usage.query.parse(c.req.query());
    return c.json(await ctl.ledger.usage(q.since, q.by));
  });
}
