// Where a request for a model whose replicas have a concurrency bound (the profile's
// max_inflight) gets its slot: on the least loaded replica with one free for its tier, or, when
// none has, in the model's fair queue (fair-queue.ts) until a request on one of them ends. The
// request's key gives its tier and team (a key with no team is a team of its own).
//
// The last slot of each replica is kept for interactive requests: a batch request is given a
// slot only while the replica has at least two free (bound − 1 slots at most are batch ones; a
// replica bounded at 1 has no spare, and its one slot goes to whichever tier is first in line).
// An interactive request arriving while batch work fills a replica therefore never waits behind
// it for longer than one request of its own tier.
//
// Only models every replica of which (in the request's pool) has a bound are gated: a replica
// without one takes any load, so the balancer (balancer.ts) places those as it always has. A
// request pinned to one replica (the Responses API's previous_response_id) is not gated either.
// While it waits the client hears nothing; the wait is bounded by the cold-start timeout
// (503 model_not_ready) and the queue by --max-held-per-model (503 too_many_waiting).

import type { Scheduler } from "../lib/scheduler";
import type { ApiKeyEntry, EndpointInfo, KeyTier } from "../protocol/routing";
import { type Admission, withRateHeaders } from "./admission";
import type { Balancer, EndpointState, Lease } from "./balancer";
import type { Catalog } from "./catalog";
import { answer, openAIError } from "./errors";
import { FairQueue, type Waiter } from "./fair-queue";
import type { RouterMetrics } from "./metrics";
import type { ProxyRequest, SlotClaim } from "./proxy";

export interface SlotGateContext {
  readonly settings: { readonly maxHeldPerModel: number; readonly coldStartTimeoutMs: number };
  readonly balancer: Pick<Balancer, "endpoints" | "acquireOn">;
  readonly catalog: Pick<Catalog, "nameOf">;
  readonly scheduler: Pick<Scheduler, "after" | "now">;
  readonly metrics: Pick<RouterMetrics, "answered">;
  readonly admission?: Pick<Admission, "headers">;
  readonly log?: { warn(o: object, m?: string): void } | undefined;
}

interface Waiting {
  readonly claim: SlotClaim;
  readonly tier: KeyTier;
  readonly name: string;
  waiter: Waiter<Waiting> | undefined;
}

const NO_KEY = { tier: "interactive" as KeyTier, team: "", weight: 1 };

export class SlotGate {
  private keys = new Map<string, { tier: KeyTier; team: string }>();
  /** The endpoint list the index below was built from (the balancer replaces, never mutates, it). */
  private seen: readonly EndpointState[] | undefined;
  /** Model name or alias → its replicas, or null when one of them has no bound. */
  private byModel = new Map<string, EndpointState[] | null>();
  private readonly queues = new Map<string, FairQueue<Waiting>>();

  constructor(private readonly ctx: SlotGateContext) {}

  /** Every key's tier and team (a key without a team is a team of its own, named by its SHA-256). */
  setKeys(keys: readonly ApiKeyEntry[]): void {
    this.keys = new Map(keys.map((k) => [k.sha256, { tier: k.tier ?? "interactive", team: k.team !== undefined ? `team:${k.team}` : `key:${k.sha256}` }]));
  }

  /** Requests waiting now, per model (its name). */
  waitingByModel(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [name, q] of this.queues) if (q.size > 0) out.set(name, q.size);
    return out;
  }

  /**
   * A slot for the claim's request: a lease on a replica with room for its tier, "wait" when it
   * was queued (or answered: the queue was full), undefined when the balancer should place it.
   */
  acquire(claim: SlotClaim): Lease | "wait" | undefined {
    const { req, exclude } = claim;
    const group = this.group(req.facts.model, req.pool, exclude);
    if (group === undefined) return undefined;
    const who = this.keys.get(req.owner) ?? NO_KEY;
    const name = this.ctx.catalog.nameOf(req.facts.model);
    const q = this.queues.get(name);
    if (q === undefined || q.size === 0) {
      const s = roomy(group, who.tier, this.ctx.scheduler.now());
      if (s !== undefined) return this.take(s, req, exclude, name);
    }
    this.wait(claim, who.tier, who.team, name);
    return "wait";
  }

  /** Replicas or their bounds changed: waiters get the slots that appeared. */
  wake(): void {
    for (const name of this.queues.keys()) this.pump(name);
  }

  private wait(claim: SlotClaim, tier: KeyTier, team: string, name: string): void {
    const { ex } = claim.req;
    let q = this.queues.get(name);
    if (q === undefined) {
      const { maxHeldPerModel, coldStartTimeoutMs } = this.ctx.settings;
      q = new FairQueue<Waiting>({ scheduler: this.ctx.scheduler, max: maxHeldPerModel, timeoutMs: coldStartTimeoutMs }, (w) => this.timedOut(w));
      this.queues.set(name, q);
    }
    const w: Waiting = { claim, tier, name, waiter: undefined };
    w.waiter = q.push(w, tier, team, claim.req.owner);
    if (w.waiter === undefined) {
      const max = this.ctx.settings.maxHeldPerModel;
      this.ctx.metrics.answered(name, 503);
      const message = `${q.size} requests are already waiting for a free slot on '${name}', whose every replica is at its max_inflight; that is the most one model may hold (--max-held-per-model ${max}); try again shortly`;
      answer(ex, withRateHeaders(openAIError(503, message, { code: "too_many_waiting", headers: { "retry-after": "10" } }), claim.req.adm, this.ctx.admission));
      return;
    }
    ex.onAbort = () => {
      if (w.waiter !== undefined && q.remove(w.waiter)) this.ctx.metrics.answered(name, 499);
    };
    // Queued behind batch work that has no slot left to take, an interactive request may find
    // the slot kept for its tier free: it is now first in line, and served at once.
    if (tier === "interactive") this.pump(name);
  }

  private timedOut(w: Waiting): void {
    const req = w.claim.req;
    req.ex.onAbort = undefined;
    this.ctx.metrics.answered(w.name, 503);
    const secs = Math.round(this.ctx.settings.coldStartTimeoutMs / 1000);
    const message = `no replica of '${req.facts.model}' had a free slot within ${secs}s: every one is at its max_inflight; try again shortly`;
    answer(req.ex, withRateHeaders(openAIError(503, message, { code: "model_not_ready", headers: { "retry-after": "10" } }), req.adm, this.ctx.admission));
  }

  /** Gives free slots to the model's waiters, in the queue's order, while the head has room. */
  private pump(name: string): void {
    const q = this.queues.get(name);
    if (q === undefined) return;
    for (let head = q.peek(); head !== undefined; head = q.peek()) {
      const w = head.item;
      const { req, exclude } = w.claim;
      const group = this.group(req.facts.model, req.pool, exclude);
      const s = group === undefined ? undefined : roomy(group, w.tier, this.ctx.scheduler.now());
      if (group !== undefined && s === undefined) return;
      q.shift();
      req.ex.onAbort = undefined;
      try {
        w.claim.resume(s === undefined ? undefined : this.take(s, req, exclude, name));
      } catch (e) {
        this.ctx.log?.warn({ err: (e as Error).message }, "a waiter given its slot failed");
      }
    }
    // A waiter resumed above may have emptied and replaced this queue already.
    if (q.size === 0 && this.queues.get(name) === q) this.queues.delete(name);
  }

  /** A lease on `s` that, given back, hands the freed slot to the model's next waiter. */
  private take(s: EndpointState, req: ProxyRequest, exclude: ReadonlySet<string> | undefined, name: string): Lease {
    return new GatedLease(this.ctx.balancer.acquireOn(s.id, req.facts.model, req.pool, exclude)!, this, name);
  }

  /** @internal A gated lease was given back: the model's next waiter may take the slot. */
  freed(name: string): void {
    if (this.queues.size > 0) this.pump(name);
  }

  /** The model's replicas in the pool, not excluded, when every one has a bound; else undefined. */
  private group(model: string, pool: string | undefined, exclude: ReadonlySet<string> | undefined): EndpointState[] | undefined {
    const list = this.ctx.balancer.endpoints();
    if (list !== this.seen) this.index(list);
    const all = this.byModel.get(model);
    if (all == null) return undefined;
    if (pool === undefined && (exclude === undefined || exclude.size === 0)) return all;
    const out = all.filter((s) => (pool === undefined || s.info.pool === pool) && (exclude === undefined || !exclude.has(s.id)));
    return out.length > 0 ? out : undefined;
  }

  private index(list: readonly EndpointState[]): void {
    const by = new Map<string, EndpointState[] | null>();
    for (const s of list) {
      for (const m of new Set(s.info.models)) {
        const cur = by.get(m);
        if (cur === null) continue;
        if (!bounded(s.info)) by.set(m, null);
        else if (cur === undefined) by.set(m, [s]);
        else cur.push(s);
      }
    }
    this.byModel = by;
    this.seen = list;
  }
}

/** One object per request, where a closure over the same would be three (its scope, the function, the lease). */
class GatedLease implements Lease {
  private open = true;
  readonly endpoint: EndpointState;

  constructor(
    private readonly inner: Lease,
    private readonly gate: SlotGate,
    private readonly name: string,
  ) {
    this.endpoint = inner.endpoint;
  }

  release(): void {
    if (!this.open) return;
    this.open = false;
    this.inner.release();
    this.gate.freed(this.name);
  }
}

function bounded(info: EndpointInfo): boolean {
  return info.max_inflight !== undefined;
}

/**
 * The least loaded replica with a slot free for the tier (batch: never the last one), if any;
 * one cooling down after a failure only when no other has room.
 */
function roomy(group: readonly EndpointState[], tier: KeyTier, now: number): EndpointState | undefined {
  let best: EndpointState | undefined;
  let cooling: EndpointState | undefined;
  for (const s of group) {
    const bound = s.info.max_inflight!;
    const limit = tier === "batch" && bound > 1 ? bound - 1 : bound;
    if (s.inflight >= limit) continue;
    if (s.cooldownUntil > now) cooling ??= s;
    else if (best === undefined || s.inflight / bound < best.inflight / best.info.max_inflight!) best = s;
  }
  return best ?? cooling;
}
