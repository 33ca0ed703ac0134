// The admin API: the tables, the summary, the catalog and node administration, behind the
// admin token. Every body and query is parsed with the schema its entry in openapi.ts
// documents; answers are the protocol's view types.

import { Hono } from "hono";
import { getBunServer } from "hono/bun";
import type { Logger } from "pino";
import type { ApiKeys } from "../control/api-keys";
import type { CatalogAdmin } from "../control/catalog-admin";
import type { ModelRestart } from "../control/model-restart";
import type { EventLog } from "../control/event-log";
import type { FleetViews } from "../control/fleet-views";
import type { Backups, LogSources } from "../control/log-sources";
import type { NodeAdmin } from "../control/node-admin";
import type { Teams } from "../control/teams";
import type { UsageViews } from "../control/usage-views";
import { type ModelSpec, catalogPath, checkCatalogFile, inFileOrder, zodIssues } from "../protocol/catalog";
import { ConflictError } from "../control/errors";
import { SegmentName } from "../protocol/common";
import type { ApplyDryRun, ApplyResult, Explanation, ModelDeleted, ModelDetail, ModelPutResult, NodeActionResult, NodeAdmission, RestartResult, RouterExposure, UnparkResult } from "../protocol/views";
import { VERSION } from "../version";
import { keyRoutes, teamRoutes, usageRoutes } from "./admin-keys";
import { type WeightsControl, modelWeights, weightsRoutes } from "./admin-weights";
import { CatalogProblems, HttpError, parseJsonBody } from "./errors";
import type { JoinTokenRotated, NodeAddressResult, NodeApproved, NodeDeleted } from "../protocol/admin";
import { openApiDocument, ROUTES } from "./openapi";

/** The stored spec as a client would write it: durations back in words, so GET → PUT round-trips. */
export function specToWire(spec: ModelSpec) {
  const words = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`);
  return {
    ...spec,
    idle_timeout: words(spec.idle_timeout),
    profiles: spec.profiles.map((p) => (p.start_timeout === undefined ? p : { ...p, start_timeout: words(p.start_timeout) })),
  };
}

/** A conflict with the stored catalog, as CatalogProblems (409). */
function asProblems(models?: unknown) {
  return (e: unknown): never => {
    if (e instanceof ConflictError && e.issues.length > 0) throw new CatalogProblems(e.issues, models, 409);
    throw e;
  };
}

/** A catalog body's paths as people read them: a model by its name (catalogPath). */
const catalogBody = (path: (string | number)[], body: unknown) => catalogPath(path, (body as { models?: unknown } | null)?.models);

async function jsonBody(req: Request, render?: typeof catalogBody): Promise<unknown> {
  const type = req.headers.get("content-type") ?? "";
  if (type && !/^application\/json\b/i.test(type)) throw new HttpError(415, "unsupported_media_type", `send the body as application/json, not ${type.slice(0, 60)}`);
  return parseJsonBody(await req.text(), render);
}

function nodeName(raw: string): string {
  const r = SegmentName.safeParse(raw);
  if (!r.success) throw new HttpError(404, "not_found", `node "${raw.slice(0, 80)}" not found`);
  return r.data;
}

/** How `join-token rotate` replaces the join token: the assembly's, which knows where it lives (a file; with several control planes, the store too). */
export interface JoinTokenRotation {
  /** Given by flag, env or config: not this server's to replace. */
  given: boolean;
  /** A new token put in force; answers the file it was written to, and whether every control plane on the store follows it. */
  rotate(): Promise<{ path: string; shared: boolean }>;
}

/** What the admin API asks of the control plane: the operator's reads and operations. */
export interface AdminControl {
  views: Pick<FleetViews, "summary" | "nodes" | "node" | "replicas" | "models" | "model" | "hasModel" | "explain" | "dryRunApply">;
  catalog: Pick<CatalogAdmin, "putModels" | "deleteModel" | "unpark" | "catalogConflicts">;
  restarts: Pick<ModelRestart, "restart">;
  nodes: Pick<NodeAdmin, "setNodeAdminState" | "deleteNode" | "approveNode" | "allowNodeAddress" | "allowedAddresses">;
  keys: Pick<ApiKeys, "createApiKey" | "listApiKeys" | "updateApiKey" | "revokeApiKey">;
  teams: Pick<Teams, "createTeam" | "listTeams" | "team" | "updateTeam" | "deleteTeam">;
  /** The usage ledger's rows. */
  ledger: Pick<UsageViews, "usage">;
  events: Pick<EventLog, "event" | "events">;
  logs: Pick<LogSources, "logSource">;
  backups: Pick<Backups, "backup">;
  /** `weights ls|pull|rm`; absent without a Hub. */
  weights?: WeightsControl;
}

/** The admin API under /api/v1 (app.ts mounts it behind the admin token), its parts registered in the order they always were. */
export function adminRoutes(
  ctl: AdminControl,
  log: Logger,
  rotation: JoinTokenRotation,
  routerExposure: () => RouterExposure | undefined = () => undefined,
  nodeAdmission: () => NodeAdmission | undefined = () => undefined,
): Hono {
  const app = new Hono();

  app.get("/openapi.json", (c) => c.json(openApiDocument(VERSION)));

  app.get("/summary", async (c) => {
    const router = routerExposure();
    const admission = nodeAdmission();
    const summary = await ctl.views.summary();
    return c.json({ ...summary, ...(router ? { router } : {}), ...(admission ? { node_admission: admission } : {}) });
  });

  nodeRoutes(app, ctl, log, rotation);

  app.get("/replicas", async (c) => {
    const q = ROUTES.listReplicas.query.parse(c.req.query());
    return c.json(await ctl.views.replicas(q.model));
  });

  catalogRoutes(app, ctl);
  keyRoutes(app, ctl);
  teamRoutes(app, ctl);
  usageRoutes(app, ctl);
  logRoutes(app, ctl);
  recordRoutes(app, ctl);
  weightsRoutes(app, ctl.weights, jsonBody);
  return app;
}

/** The nodes: their tables, admin states, deletion, approval and address allowances, and the join token that admits new ones. */
function nodeRoutes(app: Hono, ctl: AdminControl, log: Logger, rotation: JoinTokenRotation): void {
  app.get("/nodes", async (c) => c.json(await ctl.views.nodes()));
  app.get("/nodes/:name", async (c) => c.json(await ctl.views.node(nodeName(c.req.param("name")))));
  for (const [action, state, verb] of [
    ["cordon", "cordoned", "cordoned"],
    ["uncordon", "none", "uncordoned"],
    ["drain", "draining", "draining"],
  ] as const) {
    app.post(`/nodes/:name/${action}`, async (c) => {
      const name = nodeName(c.req.param("name"));
      const { changed } = await ctl.nodes.setNodeAdminState(name, state);
      return c.json({ node: name, action, changed, message: `node/${name} ${changed ? verb : `already ${verb}`}` } satisfies NodeActionResult);
    });
  }

  app.delete("/nodes/:name", async (c) => {
    const name = nodeName(c.req.param("name"));
    const q = ROUTES.deleteNode.query.parse(c.req.query());
    const { stopped } = await ctl.nodes.deleteNode(name, q.force);
    const also = stopped.length > 0 ? `; stopped ${stopped.join(", ")}, to be placed elsewhere` : "";
    return c.json({ node: name, stopped, message: `node/${name} deleted${also}; to join it again, remove the agent's credential file on the node and restart it` } satisfies NodeDeleted);
  });
  app.post("/nodes/:name/approve", async (c) => {
    const name = nodeName(c.req.param("name"));
    const { changed } = await ctl.nodes.approveNode(name);
    return c.json({ node: name, changed, message: `node/${name} ${changed ? "approved" : "was not pending"}` } satisfies NodeApproved);
  });
  app.get("/node-addresses", async (c) => c.json(await ctl.nodes.allowedAddresses()));
  app.put("/nodes/:name/address", async (c) => {
    const raw = c.req.param("name");
    const r = SegmentName.safeParse(raw);
    if (!r.success) throw new HttpError(400, "invalid_request", `name: "${raw.slice(0, 80)}" is not a valid node name`);
    const body = ROUTES.allowNodeAddress.body.parse(await jsonBody(c.req.raw));
    const { changed } = await ctl.nodes.allowNodeAddress(r.data, body.address);
    return c.json({ node: r.data, address: body.address, changed, message: `node/${r.data} may report address ${body.address}` } satisfies NodeAddressResult);
  });
  app.delete("/nodes/:name/address", async (c) => {
    const name = nodeName(c.req.param("name"));
    const { changed } = await ctl.nodes.allowNodeAddress(name, null);
    return c.json({ node: name, address: null, changed, message: `node/${name} ${changed ? "may report only the address it heartbeats from" : "had no address allowance"}` } satisfies NodeAddressResult);
  });
  /** A new join token in the data dir's join.token; the old one stops admitting at once (on every control plane of the store). */
  app.post("/join-token/rotate", async (c) => {
    // A token given by --join-token or LLMGW_JOIN_TOKEN is not the file's: writing the file would not change it for the next start.
    if (rotation.given)
      throw new HttpError(409, "conflict", "the join token was given with --join-token (or LLMGW_JOIN_TOKEN, or the config file): change it there and restart, or remove it to let the server keep one in join.token");
    const { path, shared } = await rotation.rotate();
    const where = shared ? " on any control plane of this store" : "";
    await ctl.events.event("join_token.rotated", "join-token", `join token rotated: the old one no longer admits new nodes${where}; joined nodes keep their credentials`);
    log.warn({ path, shared }, "join token rotated");
    return c.json({ path, message: `join token rotated: the new one is in ${path} (0600); the old one no longer admits new nodes${where}, joined nodes keep working` } satisfies JoinTokenRotated);
  });
}

/** The catalog: models one by one (with their explanation and unparking) and a whole catalog file at once. */
function catalogRoutes(app: Hono, ctl: AdminControl): void {
  app.get("/models", async (c) => c.json(await ctl.views.models()));
  const explain = async (name: string) => ctl.views.explain(name) satisfies Promise<Explanation>;
  // Registered so the route list is the documented one; hono's router hands GET .../explain to
  // the model route below all the same (a name may hold a "/"), which tells the two apart.
  app.get("/models/:name{.+}/explain", async (c) => c.json(await explain(c.req.param("name"))));
  app.get("/models/:name{.+}", async (c) => {
    const name = c.req.param("name");
    // A model whose own name ends in "/explain" is still answered as itself.
    const explained = name.endsWith("/explain") ? name.slice(0, -"/explain".length) : undefined;
    if (explained && !(await ctl.views.hasModel(name))) return c.json(await explain(explained));
    const { view, spec } = await ctl.views.model(name);
    return c.json({ ...view, spec: specToWire(spec), ...(await modelWeights(ctl.weights, view.name)) } satisfies ModelDetail);
  });
  app.put("/models/:name{.+}", async (c) => {
    const name = c.req.param("name");
    const body = await jsonBody(c.req.raw, catalogBody);
    if (body !== null && typeof body === "object" && !Array.isArray(body)) {
      const given = (body as { name?: unknown }).name;
      if (given === undefined) (body as { name?: unknown }).name = name;
      else if (given !== name)
        throw new HttpError(
          400,
          "invalid_request",
          typeof given === "string" ? `name: "${given.slice(0, 80)}" does not match the URL's model name "${name}"` : `name: must be a string (the model's name, "${name}")`,
        );
    }
    const parsed = ROUTES.putModel.body.safeParse(body);
    if (!parsed.success) throw new CatalogProblems(zodIssues(parsed.error.issues, ROUTES.putModel.body, body));
    const spec = parsed.data;
    const [result] = await ctl.catalog.putModels([spec]).catch(asProblems());
    const { view } = await ctl.views.model(spec.name);
    const answer = { ...view, spec: specToWire(spec), result: result!.result, message: `model/${spec.name} ${result!.result}` } satisfies ModelPutResult;
    return c.json(answer, result!.result === "created" ? 201 : 200);
  });
  app.delete("/models/:name{.+}", async (c) => {
    const name = await ctl.catalog.deleteModel(c.req.param("name"));
    return c.json({ name, result: "deleted", message: `model/${name} deleted` } satisfies ModelDeleted);
  });

  app.post("/models/:name{.+}/unpark", async (c) => {
    const { model, changed } = await ctl.catalog.unpark(c.req.param("name"));
    return c.json({ name: model, changed, message: `model/${model} ${changed ? "unparked" : "was not parked"}` } satisfies UnparkResult);
  });

  app.post("/models/:name{.+}/restart", async (c) => {
    const { model, replicas } = await ctl.restarts.restart(c.req.param("name"));
    const message = replicas > 0 ? `model/${model} restarting: ${replicas} replica${replicas === 1 ? "" : "s"} to be replaced one at a time (llmgw models ${model} shows the progress)` : `model/${model} has no replicas running: nothing to restart`;
    return c.json({ name: model, replicas, message } satisfies RestartResult);
  });

  /** A whole catalog file (as JSON): every model created or replaced, all or none. */
  app.post("/apply", async (c) => {
    const q = ROUTES.apply.query.parse(c.req.query());
    const body = await jsonBody(c.req.raw, catalogBody);
    const models = (body as { models?: unknown } | null)?.models;
    const { file, specs, issues } = checkCatalogFile(body);
    if (!file) {
      // The models that are fine on their own are also judged against the stored catalog, so
      // one answer names every problem; a model already refused for its names is not judged twice.
      const named = new Set(issues.filter((i) => i.path[2] === "name" || i.path[2] === "aliases").map((i) => i.path[1]));
      const conflicts = await ctl.catalog.catalogConflicts(specs.map((s, i) => (named.has(i) ? undefined : s)));
      throw new CatalogProblems(inFileOrder([...issues, ...conflicts]), models);
    }
    if (q.dry_run) return c.json((await ctl.views.dryRunApply(file.models).catch(asProblems(models))) satisfies ApplyDryRun);
    const results = await ctl.catalog.putModels(file.models, true).catch(asProblems(models));
    return c.json({ results: results.map((r) => ({ ...r, message: `model/${r.name} ${r.result}` })) } satisfies ApplyResult);
  });
}

/**
 * A replica's engine log, fetched from its node's agent; ?follow=1 keeps streaming, ?previous=1
 * is its past run: when its node has none (the replica runs its first run), the last run of the
 * failed replica it replaced, named in x-llmgw-log-replica and x-llmgw-log-node.
 */
function logRoutes(app: Hono, ctl: AdminControl): void {
  app.get("/replicas/:id/logs", async (c) => {
    const q = ROUTES.replicaLogs.query.parse(c.req.query());
    const id = c.req.param("id");
    // A followed log stays open far past Bun's idle timeout.
    if (q.follow) (getBunServer(c) as { timeout?(req: Request, seconds: number): void } | undefined)?.timeout?.(c.req.raw, 0);
    const src = await ctl.logs.logSource(id, q.previous);
    let res = await agentLog(src, q, c.req.raw.signal);
    let from = { id, node: src.node };
    if (res.status === 404 && q.previous && src.predecessor) {
      const before = await ctl.logs.logSource(src.predecessor, true).catch(() => undefined);
      const alt = before ? await agentLog(before, q, c.req.raw.signal).catch(() => undefined) : undefined;
      if (alt?.ok && before) {
        await res.body?.cancel();
        res = alt;
        from = { id: src.predecessor, node: before.node };
      }
    }
    if (res.status === 404) throw new HttpError(404, "not_found", (await res.text()).trim());
    if (!res.ok) throw new HttpError(503, "agent_unreachable", `the agent on ${from.node} answered ${res.status} for logs`);
    const headers: Record<string, string> = { "content-type": "text/plain; charset=utf-8", "cache-control": "no-cache" };
    if (from.id !== id) Object.assign(headers, { "x-llmgw-log-replica": encodeURIComponent(from.id), "x-llmgw-log-node": encodeURIComponent(from.node) });
    return new Response(res.body, { headers });
  });
}

/** What the server keeps: the database as a download, and the event log. */
function recordRoutes(app: Hono, ctl: AdminControl): void {
  /** A consistent copy of the database, taken while the server runs, as a download. */
  app.get("/backup", async (c) => {
    const path = await ctl.backups.backup();
    const file = Bun.file(path);
    const bytes = await file.arrayBuffer();
    await file.delete();
    c.header("content-type", "application/vnd.sqlite3");
    c.header("content-disposition", 'attachment; filename="llmgw.db"');
    return c.body(bytes);
  });

  app.get("/events", async (c) => {
    const q = ROUTES.events.query.parse(c.req.query());
    return c.json(await ctl.events.events({ afterId: q.after, limit: q.limit, subject: q.subject }));
  });
}

/** One request to a node's log listener; unreachable is a 503 naming the node. */
async function agentLog(src: { url: string; node: string; token: string; cert?: string }, q: { tail: number; follow: boolean; previous: boolean }, signal: AbortSignal): Promise<Response> {
  const url = `${src.url}?tail=${q.tail}${q.follow ? "&follow=1" : ""}${q.previous ? "&previous=1" : ""}`;
  // A log listener serving HTTPS sent its own certificate in its heartbeats: trust exactly
  // that one (it lists the node's address), nothing a CA signed.
  const tls = src.cert ? { tls: { ca: src.cert } } : {};
  try {
    return await fetch(url, { headers: { authorization: `Bearer ${src.token}` }, signal, ...tls });
  } catch (e) {
    throw new HttpError(503, "agent_unreachable", `cannot reach the agent on ${src.node} for logs: ${(e as Error).message}`);
  }
}
