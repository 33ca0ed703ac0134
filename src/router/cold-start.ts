// Requests for a model no replica serves yet. The control plane hears of the demand; a request
// for an on-demand model is held (at most maxHeldPerModel per model) until a replica of it is
// published, the hold's deadline passes, the model becomes one that waiting will not bring back,
// or the client goes away, and then handed to the proxy or answered. A streamed request held is
// answered 200 and text/event-stream at once, then sent an SSE comment line every
// coldStartProgressMs (and whenever the node of its replica becomes known) saying what it waits
// for, so no proxy cuts a silent connection; any error then comes as an SSE error event.

import type { ClientExchange } from "../http/exchange";
import type { Scheduler, Timer } from "../lib/scheduler";
import { safeText } from "../lib/text";
import type { CatalogEntry, DemandSink } from "../protocol/routing";
import { type Admission, headerRecord, withRateHeaders } from "./admission";
import type { Balancer } from "./balancer";
import type { Catalog } from "./catalog";
import { type Reply, answer, openAIError, send } from "./errors";
import type { RouterMetrics } from "./metrics";
import type { Ledger } from "./ledger";
import type { ProxyRequest } from "./proxy";
import { unavailableReply } from "./unavailable";

/** The parts of the router a held request uses. */
export interface ColdStartContext {
  readonly settings: {
    /** A request for a cold on-demand model waits this long at least (longer when its start timeout is). */
    readonly coldStartTimeoutMs: number;
    readonly coldStartProgressMs: number;
    readonly maxHeldPerModel: number;
  };
  readonly balancer: Pick<Balancer, "has">;
  readonly catalog: Pick<Catalog, "get">;
  readonly scheduler: Pick<Scheduler, "mono" | "after" | "every">;
  readonly metrics: Pick<RouterMetrics, "answered">;
  readonly demand: DemandSink | undefined;
  readonly log: { warn(o: object, m?: string): void } | undefined;
  /** A limited key's x-ratelimit-* headers, on the head of its held stream too. */
  readonly admission?: Pick<Admission, "headers">;
  /** The usage ledger: a held request answered here (refused, or no replica came) is counted in it. */
  readonly ledger?: Pick<Ledger, "answered">;
  /** The router still serves: once it stopped, a held request is answered at its next look. */
  serving(): boolean;
  /** Sends a request on to a replica (proxy.ts), now that its model has one. */
  proxy(req: ProxyRequest): void;
  internalError(ex: ClientExchange, e: unknown): void;
}

/** The head of a stream opened for a held request: SSE, never cached, never buffered by nginx. */
const HELD_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };
const enc = new TextEncoder();

export class ColdStart {
  private readonly waiters = new Set<() => void>();
  /** Requests held now, per model (its name): bounded by maxHeldPerModel. */
  private readonly holding = new Map<string, number>();

  constructor(private readonly ctx: ColdStartContext) {}

  /** Requests held now, per model (its name, not an alias); absent: none. */
  heldByModel(): ReadonlyMap<string, number> {
    return this.holding;
  }

  /** Requests held now, all models together. */
  get waiting(): number {
    return this.waiters.size;
  }

  /** Each held request looks again; each on its own: one that throws must not leave the others waiting. */
  wake(): void {
    for (const w of [...this.waiters]) {
      try {
        w();
      } catch (e) {
        this.ctx.log?.warn({ err: (e as Error).message }, "cold-start waiter failed");
      }
    }
  }

  /**
   * No replica serves the request's model: 404 if the catalog does not know it (in this pool);
   * otherwise the control plane hears of the demand, and an on-demand model is waited for (then
   * proxied), any other answered 503 at once. `progress`: a streamed request, answered 200 at
   * once while held.
   */
  hold(req: ProxyRequest, progress: boolean): void {
    const { ex, pool } = req;
    const model = req.facts.model;
    const ctx = this.ctx;
    const entry = ctx.catalog.get(model);
    if (!entry || (pool !== undefined && entry.pool !== pool))
      return send(ex, this.rated(req, openAIError(404, `The model '${model}' does not exist${pool ? ` in pool '${pool}'` : ""}`, { param: "model", code: "model_not_found" })));
    // Nothing serves it: tell the control plane someone wants it. An on-demand model is worth
    // waiting for; any other is starting, failing or unplaceable, and the client is better
    // served by a prompt 503 it can retry.
    if (entry.unavailable) return this.unavailable(req, entry);
    ctx.demand?.requestModel(model);
    const holdMs = Math.max(ctx.settings.coldStartTimeoutMs, entry.start_timeout_ms ?? 0);
    const notReady = () => {
      ctx.metrics.answered(entry.name, 503);
      answer(
        ex,
        this.rated(
          req,
          openAIError(503, `no replica of '${model}' is ready${entry.on_demand ? ` after waiting ${Math.round(holdMs / 1000)}s for one to start` : ""}; try again shortly`, {
            code: "model_not_ready",
            headers: { "retry-after": entry.on_demand ? "30" : "10" },
          }),
        ),
      );
    };
    if (!entry.on_demand) return notReady();
    const held = this.holding.get(entry.name) ?? 0;
    const max = ctx.settings.maxHeldPerModel;
    if (held >= max) {
      ctx.metrics.answered(entry.name, 503);
      const message = `${held} requests are already waiting for '${entry.name}' to start, the most one model may hold (--max-held-per-model ${max}); try again shortly`;
      return send(ex, this.rated(req, openAIError(503, message, { code: "too_many_waiting", headers: { "retry-after": "10" } })));
    }
    this.waitForEndpoint(entry, req, holdMs, progress, (ok) => {
      if (ok && !ex.aborted) return ctx.proxy(req);
      const now = ctx.catalog.get(model);
      if (now?.unavailable) return this.unavailable(req, now);
      notReady();
    });
  }

  /** A model waiting cannot bring back (never, parked): answered at once, so no client retries in vain (unavailable.ts). */
  private unavailable(req: ProxyRequest, entry: CatalogEntry): void {
    const reply = this.rated(req, unavailableReply(entry.unavailable!));
    this.ctx.metrics.answered(entry.name, reply.status);
    answer(req.ex, reply);
  }

  /** A reply of the router's own, with a limited key's x-ratelimit-* headers. */
  private rated(req: ProxyRequest, r: Reply): Reply {
    // Every reply of cold start's own passes here, once per request: counted in the ledger here.
    const model = req.facts.model;
    this.ctx.ledger?.answered(req.owner, this.ctx.catalog.get(model)?.name ?? model, r.status, 0, 0, 0, false);
    return withRateHeaders(r, req.adm, this.ctx.admission);
  }

  /**
   * Waits until the model has an endpoint, the deadline passes, the model becomes unavailable,
   * or the client goes away. A streamed request (`progress`) is answered 200 at once, and sent
   * a comment line every coldStartProgressMs and whenever the node of its replica changes.
   */
  private waitForEndpoint(entry: CatalogEntry, req: ProxyRequest, holdMs: number, progress: boolean, then: (ok: boolean) => void): void {
    const { ex, pool } = req;
    const model = req.facts.model;
    const ctx = this.ctx;
    if (ctx.balancer.has(model, pool)) return then(true);
    const name = entry.name;
    this.holding.set(name, (this.holding.get(name) ?? 0) + 1);
    const since = ctx.scheduler.mono();
    let ticker: Timer | undefined;
    let over = false;
    const done = (ok: boolean) => {
      if (over) return;
      over = true;
      timer.cancel();
      ticker?.cancel();
      this.waiters.delete(check);
      const n = (this.holding.get(name) ?? 1) - 1;
      if (n > 0) this.holding.set(name, n);
      else this.holding.delete(name);
      ex.onAbort = undefined;
      try {
        then(ok);
      } catch (e) {
        ctx.internalError(ex, e);
      }
    };
    /** The node the last comment named: a new one is told at once, not at the next interval. */
    let shown: string | undefined;
    const check = () => {
      if (ctx.balancer.has(model, pool)) done(true);
      else if (!ctx.serving() || ctx.catalog.get(model)?.unavailable) done(false);
      else if (progress && ex.answered && this.startingNode(name) !== shown) ex.write(this.progressLine(name, since, (shown = this.startingNode(name))));
    };
    const timer = ctx.scheduler.after(holdMs, () => done(false));
    this.waiters.add(check);
    ex.onAbort = () => done(false);
    if (!progress) return;
    // Headers and a first comment at once, with no grace to wait for a fast warm-up: real cold
    // starts take tens of seconds, and a client told "starting" from the first moment never
    // has to guess whether a silent connection is a cold start or a hang.
    const adm = req.adm;
    const head = adm !== undefined && adm.rated && ctx.admission !== undefined ? { ...HELD_HEADERS, ...headerRecord(ctx.admission.headers(adm)) } : HELD_HEADERS;
    ex.stream(200, head, this.progressLine(name, since, (shown = this.startingNode(name))));
    // A throw here would be the timer's, far from any request: it ends this hold alone.
    ticker = ctx.scheduler.every(ctx.settings.coldStartProgressMs, () => {
      try {
        if (!over) ex.write(this.progressLine(name, since, (shown = this.startingNode(name))));
      } catch (e) {
        ctx.log?.warn({ err: (e as Error).message }, "cold-start progress failed");
        done(false);
      }
    });
  }

  /** Where the control plane says the model's replica is starting, if it has. */
  private startingNode(name: string): string | undefined {
    return this.ctx.catalog.get(name)?.starting?.node;
  }

  /** How far the starting replica's weights are, while its node fetches them. */
  private fetching(name: string): string | undefined {
    return this.ctx.catalog.get(name)?.starting?.fetching;
  }

  /**
   * The SSE comment a held stream is sent: the model, the node its replica starts on when the
   * control plane has said, and the seconds waited. One line, whatever the names hold.
   */
  private progressLine(name: string, since: number, node: string | undefined): Uint8Array {
    const secs = Math.round((this.ctx.scheduler.mono() - since) / 1000);
    const fetching = node !== undefined ? this.fetching(name) : undefined;
    // ": fetching weights of llama-3.1-8b on h100-2: 42 % (56 GiB/134 GiB) from h100-3, 80 s".
    const what = fetching !== undefined ? `fetching weights of ${name} on ${node}: ${fetching}` : `starting ${name}${node ? ` on ${node}` : ""}`;
    return enc.encode(`: ${safeText(what).slice(0, 300)}, ${secs} s\n\n`);
  }
}
