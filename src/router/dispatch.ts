// Where every request to the router's listener is decided: its route (one table, ROUTER_ROUTES,
// that a test walks to check each route's auth), who may call it (the admin token for /metrics,
// a client API key on /v1/* when keys are required), and its answer: the model list and a
// model's entry from the catalog, /metrics, health, or, for an inference POST, its body read
// (at once when cheap, else on the body worker) and the request handed on: to the proxy when
// its model has a replica, to cold-start when it has none yet. A hand-written dispatch, not a
// framework's: this is the hot path.
//
// Where a request is admitted before an engine is touched is forward(): its key, pool, model
// and body are known there, and nothing has been held or sent yet.

import type { ClientExchange } from "../http/exchange";
import { bearerToken, sameSecret, sha256hex } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import type { ApiKeyEntry } from "../protocol/routing";
import { type Admission, type KeyState, promptEstimate, refusalReply, withRateHeaders } from "./admission";
import type { Balancer } from "./balancer";
import type { BodyReader } from "./body-reader";
import { type Budget, Reservation, tokenReservation } from "./budget";
import type { Catalog } from "./catalog";
import type { ColdStart } from "./cold-start";
import type { Ledger } from "./ledger";
import { expiredKey, mayUse, modelNotFound } from "./key-rules";
import { type Reply, jsonReply, openAIError, send } from "./errors";
import type { RouterMetrics } from "./metrics";
import type { ProxyRequest } from "./proxy";
import type { BodyFacts, BodyRead } from "./request-body";
import type { ResponseIds } from "./response-ids";

/**
 * The inference endpoints passed on to engines: OpenAI's, and the rerank, score, classify and
 * tokenize ones at least two of vLLM, SGLang and llama-server serve under the same path.
 * Nothing else reaches an engine: an engine's other paths are its admin surface (vLLM's
 * /v1/load_lora_adapter, SGLang's /update_weights, llama-server's /slots), not the clients'.
 */
export const INFERENCE_PATHS = [
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/embeddings",
  "/v1/responses",
  "/v1/rerank", // vLLM, SGLang, llama-server
  "/rerank", // vLLM, llama-server
  "/v1/score", // vLLM, SGLang
  "/classify", // vLLM, SGLang
  "/tokenize", // vLLM, SGLang, llama-server
  "/detokenize", // vLLM, SGLang, llama-server
] as const;

/**
 * Every route the router serves and who may call it. Dispatch goes through this table, and a
 * test walks it to check each route refuses callers without the right token: a route added
 * here without thinking about auth fails that test.
 */
export const ROUTER_ROUTES = [
  ...INFERENCE_PATHS.map((path) => ({ method: "POST", path, prefix: false, auth: "client", kind: "proxy" }) as const),
  { method: "GET", path: "/v1/models", prefix: false, auth: "client", kind: "models" },
  { method: "GET", path: "/v1/models/", prefix: true, auth: "client", kind: "model" },
  { method: "GET", path: "/metrics", prefix: false, auth: "admin", kind: "metrics" },
  { method: "GET", path: "/healthz", prefix: false, auth: "none", kind: "health" },
  { method: "GET", path: "/health", prefix: false, auth: "none", kind: "health" },
] as const;
type RouteDef = (typeof ROUTER_ROUTES)[number];
/** Exact routes by method, then path: one lookup per request, however long the table grows. */
const EXACT_ROUTES = new Map<string, Map<string, RouteDef>>();
for (const r of ROUTER_ROUTES) {
  if (r.prefix) continue;
  let byPath = EXACT_ROUTES.get(r.method);
  if (byPath === undefined) EXACT_ROUTES.set(r.method, (byPath = new Map()));
  byPath.set(r.path, r);
}
const PREFIX_ROUTES = ROUTER_ROUTES.filter((r) => r.prefix);
/** A dot segment ("." or "..", plain or percent-encoded) or an encoded slash or backslash, in a path. */
const DOT_SEGMENT = /(?:^|\/|%2f|%5c|\\)(?:\.|%2e){1,2}(?:$|\/|%2f|%5c|\\)/i;
const ENCODED_SLASH = /%2f|%5c|\\/i;
/** The paths whose streamed answers are SSE: only these are opened early for a held request. */
const SSE_PATHS = new Set(["/v1/chat/completions", "/v1/completions", "/v1/responses"]);

/** The parts of the router dispatch uses. */
export interface DispatchContext {
  /** The admin token: it alone opens GET /metrics. */
  readonly adminToken: string | undefined;
  /** Require a client API key on /v1/*. */
  readonly requireApiKey: boolean;
  readonly catalog: Pick<Catalog, "get" | "list">;
  readonly metrics: Pick<RouterMetrics, "render">;
  readonly bodies: Pick<BodyReader, "readNow" | "readOff">;
  readonly responses: Pick<ResponseIds, "route">;
  readonly balancer: Pick<Balancer, "has">;
  readonly time: Pick<Scheduler, "mono" | "now">;
  readonly coldStart: Pick<ColdStart, "hold">;
  /** The keys' and teams' rate and concurrency limits. */
  readonly admission: Pick<Admission, "setKeys" | "of" | "admit" | "headers">;
  /** The keys' and teams' budgets (budget.ts); absent: none enforced. */
  readonly budget?: Pick<Budget, "setKeys" | "of" | "reserve">;
  /** The usage ledger: refusals by a limit are counted here, answers where they end (proxy.ts). */
  readonly ledger: Pick<Ledger, "setKeys" | "refused">;
  /** Sends a request on to a replica (proxy.ts). */
  proxy(req: ProxyRequest): void;
  internalError(ex: ClientExchange, e: unknown): void;
}

export class Dispatch {
  private keys = new Map<string, ApiKeyEntry>();

  constructor(private readonly ctx: DispatchContext) {}

  /** The client API keys the control plane sent (by their SHA-256). */
  setApiKeys(keys: ApiKeyEntry[]): void {
    this.keys = new Map(keys.map((k) => [k.sha256, k]));
    this.ctx.admission.setKeys(keys);
    this.ctx.budget?.setKeys(keys);
    this.ctx.ledger.setKeys(keys);
  }

  /** One request, from the listener. */
  handle(ex: ClientExchange): void {
    const path = ex.path;
    // Dot segments are refused, not resolved: a path that means something else once normalised
    // (by an engine, or a proxy in front of one) is how an allow-list is walked around.
    if ((path.includes(".") || path.includes("%") || path.includes("\\")) && (DOT_SEGMENT.test(path) || (ENCODED_SLASH.test(path) && !path.startsWith("/v1/models/"))))
      return send(ex, openAIError(400, "the request path may not hold dot segments or encoded slashes", { code: "invalid_path" }));
    const route = this.route(ex.method, path);
    if (!route)
      return send(ex, openAIError(404, `no route ${ex.method} ${path.slice(0, 200)}; the router serves POST ${INFERENCE_PATHS.join(", ")} and GET /v1/models`, { code: "not_found" }));
    let key: ApiKeyEntry | undefined;
    if (route.auth === "admin") {
      const token = this.ctx.adminToken;
      if (!token || !this.bearerIs(ex, token)) return send(ex, openAIError(401, `${ex.method} ${path} needs the admin token as a bearer token`, { code: "invalid_api_key" }));
    } else if (route.auth === "client") {
      const auth = this.authorize(ex);
      if (auth !== undefined && "status" in auth) return send(ex, auth);
      key = auth;
    }
    const pool = key?.pool ?? undefined;
    switch (route.kind) {
      case "proxy":
        return this.inference(ex, key);
      case "models":
        return send(ex, this.listModels(pool, key));
      case "model": {
        let id: string;
        try {
          id = decodeURIComponent(path.slice("/v1/models/".length));
        } catch {
          return send(ex, openAIError(400, "the model id in the path is not valid percent-encoding", { param: "model", code: "invalid_request" }));
        }
        return send(ex, this.getModel(id, pool, key));
      }
      case "metrics":
        return ex.respond(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }, this.ctx.metrics.render());
      default:
        return send(ex, jsonReply({ status: "ok" }));
    }
  }

  /** The last exact route found, compared first: the path is a string fresh from each request's head, and comparing it costs less than hashing it for two lookups. */
  private last: RouteDef | undefined;

  private route(method: string, path: string): RouteDef | undefined {
    const last = this.last;
    if (last !== undefined && last.path === path && last.method === method) return last;
    const r = EXACT_ROUTES.get(method)?.get(path);
    if (r !== undefined) return (this.last = r);
    for (const p of PREFIX_ROUTES) if (p.method === method && path.startsWith(p.path) && path.length > p.path.length) return p;
    return undefined;
  }

  /** Constant-time comparison of a bearer token against a secret. */
  private bearerIs(ex: ClientExchange, token: string): boolean {
    const presented = bearerToken(ex.headers.get("authorization"));
    return presented !== undefined && sameSecret(presented, token);
  }

  /**
   * The request's key, or an error reply when keys are required and it has none that works;
   * undefined: served as anonymous. On a router open to anyone, a request that presents a key of
   * ours is still that key's: held to its pool, models and limits (and its team's), and counted
   * as its; any other (none, an unknown or an expired one) is anonymous, as the open router
   * serves everyone.
   */
  private authorize(ex: ClientExchange): Reply | ApiKeyEntry | undefined {
    if (!this.ctx.requireApiKey && this.keys.size === 0) return undefined;
    const presented = bearerToken(ex.headers.get("authorization"));
    // Keys are looked up by their SHA-256: the secret itself is never compared or kept.
    const key = presented !== undefined ? this.keys.get(sha256hex(presented)) : undefined;
    const expired = key !== undefined ? expiredKey(key, this.ctx.time.now()) : undefined;
    if (!this.ctx.requireApiKey) return expired === undefined ? key : undefined;
    if (!key) return openAIError(401, "Incorrect or missing API key: send Authorization: Bearer <key> (create one with `llmgw keys create NAME`)", { code: "invalid_api_key" });
    return expired ?? key;
  }

  private listModels(pool: string | undefined, key: ApiKeyEntry | undefined): Reply {
    const data = [];
    for (const m of this.ctx.catalog.list()) {
      if (pool && m.pool !== pool) continue;
      // What no client can use now or by waiting is not offered.
      if (m.unavailable) continue;
      if (!mayUse(key, m.name, this.ctx.catalog)) continue;
      data.push({ id: m.name, object: "model", created: m.created, owned_by: "llmgw" });
      for (const a of m.aliases) data.push({ id: a, object: "model", created: m.created, owned_by: "llmgw", root: m.name });
    }
    return jsonReply({ object: "list", data });
  }

  private getModel(id: string, pool: string | undefined, key: ApiKeyEntry | undefined): Reply {
    const m = this.ctx.catalog.get(id);
    if (m && !mayUse(key, id, this.ctx.catalog)) return modelNotFound(id);
    if (!m || (pool && m.pool !== pool)) return openAIError(404, `The model '${id}' does not exist`, { code: "model_not_found", param: "model" });
    return jsonReply({ id, object: "model", created: m.created, owned_by: "llmgw", ...(id !== m.name ? { root: m.name } : {}) });
  }

  /**
   * POST to an inference path: its body (read whole by the server, within the size cap) is read
   * here when that is cheap, else on the body worker (body-reader.ts), then forwarded.
   */
  private inference(ex: ClientExchange, key: ApiKeyEntry | undefined): void {
    const ctx = this.ctx;
    const t0 = ctx.time.mono();
    // A key bound to a pool decides the pool; otherwise the client may pick one by header.
    const pool = key?.pool ?? ex.headers.get("x-llmgw-pool");
    const read = ctx.bodies.readNow(ex.body);
    if (read !== undefined) return this.forward(ex, read, pool, key, t0);
    ctx.bodies.readOff(ex.body, (later) => {
      if (ex.aborted) return;
      try {
        this.forward(ex, later, pool, key, t0);
      } catch (e) {
        ctx.internalError(ex, e);
      }
    });
  }

  /** A body read: refused, or the request handed on (to a replica now, or held for a cold start). */
  private forward(ex: ClientExchange, read: BodyRead, pool: string | undefined, key: ApiKeyEntry | undefined, t0: number): void {
    if (read.reply !== undefined) return send(ex, read.reply);
    const facts = read.facts;
    // The key's SHA-256 marks what its requests own (responses, admission, the ledger's rows).
    const owner = key?.sha256 ?? "";
    if (key !== undefined && !mayUse(key, facts.model, this.ctx.catalog)) return send(ex, modelNotFound(facts.model));
    let pin: string | undefined;
    if (facts.previousResponseId !== undefined && ex.path === "/v1/responses") {
      const to = this.ctx.responses.route(facts.previousResponseId, owner, this.ctx.requireApiKey);
      if ("status" in to) return send(ex, to);
      pin = to.pin;
    }
    // Admitted (or refused) by its key's and team's limits before anything is sent or held.
    const adm = owner !== "" ? this.ctx.admission.of(owner) : undefined;
    // Its key's and team's budgets reserve its most before anything is sent (budget.ts).
    const budget = owner !== "" ? this.reserve(ex, owner, facts, adm) : undefined;
    if (budget === null) return;
    let prompt = 0;
    if (adm !== undefined) {
      prompt = promptEstimate(ex.body.byteLength);
      const no = this.ctx.admission.admit(adm, prompt);
      if (no !== undefined) {
        budget?.release();
        this.ctx.ledger.refused(owner, this.ctx.catalog.get(facts.model)?.name ?? facts.model);
        return send(ex, refusalReply(no, adm.rated ? this.ctx.admission.headers(adm) : ""));
      }
      ex.holder = adm;
    }
    if (budget !== undefined) {
      budget.inner = ex.holder;
      ex.holder = budget;
    }
    const req: ProxyRequest = { ex, facts, pool, owner, pin, t0, adm, prompt, budget };
    if (this.ctx.balancer.has(facts.model, pool)) return this.ctx.proxy(req);
    this.ctx.coldStart.hold(req, facts.stream && SSE_PATHS.has(ex.path));
  }

  /** The reservation of a budgeted key's request; null: refused (answered here); undefined: no budget. */
  private reserve(ex: ClientExchange, owner: string, facts: BodyFacts, adm: KeyState | undefined): Reservation | null | undefined {
    const b = this.ctx.budget;
    const of = b?.of(owner);
    if (b === undefined || of === undefined) return undefined;
    const r = b.reserve(of, tokenReservation(ex.path, ex.body.byteLength, facts.maxOutput));
    if (r instanceof Reservation) return r;
    const model = facts.model;
    this.ctx.ledger.refused(owner, this.ctx.catalog.get(model)?.name ?? model);
    send(ex, withRateHeaders(r, adm, this.ctx.admission));
    return null;
  }
}
