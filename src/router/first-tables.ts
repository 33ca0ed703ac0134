// A router that has just started (a restarted or upgraded head node) knows no model until its
// control plane hands it the catalog and the endpoints: answered then, a request for a model that
// exists would get "does not exist". So until both tables have come once, requests wait here, and
// are dispatched in arrival order the moment they come; a client sees a slower first byte, never a
// wrong answer. Bounded: at most MAX_WAITING wait, and for at most the wait given; past either, a
// 503 with Retry-After says the router is starting.

import type { ClientExchange } from "../http/exchange";
import type { Scheduler, Timer } from "../lib/scheduler";
import { openAIError, send } from "./errors";

/** Requests held at most while the first tables are on their way. */
export const MAX_WAITING = 1024;

export class FirstTables {
  private catalog = false;
  private endpoints = false;
  private waiting: ClientExchange[] | undefined = [];
  private timer: Timer | undefined;

  constructor(
    private readonly o: {
      scheduler: Pick<Scheduler, "after">;
      /** How long a request waits for the tables before it is answered 503. */
      waitMs: number;
      dispatch: (ex: ClientExchange) => void;
    },
  ) {}

  /** Whether requests are dispatched at once (both tables have come). */
  get open(): boolean {
    return this.waiting === undefined;
  }

  /** A request: dispatched now, or held until the tables come. */
  handle(ex: ClientExchange): void {
    const w = this.waiting;
    if (w === undefined) return this.o.dispatch(ex);
    if (w.length >= MAX_WAITING) return this.refuse(ex);
    w.push(ex);
    this.timer ??= this.o.scheduler.after(this.o.waitMs, () => this.expire());
  }

  /** The catalog came. */
  catalogCame(): void {
    this.catalog = true;
    this.maybeOpen();
  }

  /** The endpoints came. */
  endpointsCame(): void {
    this.endpoints = true;
    this.maybeOpen();
  }

  /** The router stops: whatever waits is answered now. */
  close(): void {
    this.timer?.cancel();
    const w = this.waiting ?? [];
    this.waiting = [];
    for (const ex of w) this.refuse(ex);
  }

  private maybeOpen(): void {
    if (!this.catalog || !this.endpoints || this.waiting === undefined) return;
    const w = this.waiting;
    this.waiting = undefined;
    this.timer?.cancel();
    // A client that went away meanwhile has its exchange answered (aborted) already.
    for (const ex of w) if (!ex.answered) this.o.dispatch(ex);
  }

  private expire(): void {
    this.timer = undefined;
    const w = this.waiting ?? [];
    if (this.waiting !== undefined) this.waiting = [];
    for (const ex of w) this.refuse(ex);
  }

  private refuse(ex: ClientExchange): void {
    if (ex.answered) return;
    send(ex, openAIError(503, "the router is starting and has not heard from its control plane yet; try again shortly", { code: "router_starting", type: "server_error", headers: { "retry-after": "1" } }));
  }
}
