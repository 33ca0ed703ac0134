// Several control planes on one store: once a tick, this router's recent demand on each limited
// key and team goes to the store, and its share of their allowances comes back (computed in the
// store's transaction from every router's row, limit-shares.ts) and is sent to the router. A
// single head node has none of this: its router holds every allowance whole.

import type { Logger } from "pino";
import type { Scheduler } from "../lib/scheduler";
import type { EndpointSink, LimitShares, UsageSource } from "../protocol/routing";
import { DemandWindow, INFLIGHT, type Shares, computeShares, computeSlots } from "./limit-shares";
import type { LimitSharesPort } from "./store-port";

export interface LimitShareExchangeOptions {
  /** This control plane's name (its router's in the rows) and how long a silent router's row still counts. */
  name: string;
  liveWithinMs: number;
  source: Pick<UsageSource, "limitUse">;
  sink: Pick<EndpointSink, "setLimitShares">;
  store: LimitSharesPort;
  scheduler: Pick<Scheduler, "mono">;
  log: Logger;
}

export class LimitShareExchange {
  private readonly window = new DemandWindow();
  /** Failures in a row, to say so once, not every tick. */
  private failing = 0;
  /** When the store last answered (monotonic ms). */
  private okAt: number;
  /** The router was told to hold no share: the store has not answered for long. */
  private dropped = false;
  /** What the router was last sent (as JSON): the same shares are not sent again, each costs the router thread a pass over its keys. */
  private sent = "";

  constructor(private readonly o: LimitShareExchangeOptions) {
    // Until the first exchange, a bucket made for a key is empty, not full: a head node that
    // joins others must not admit a whole limit before it learns its share.
    o.sink.setLimitShares?.({ shares: [], fallback: 0, awaiting: true });
    this.okAt = o.scheduler.mono();
  }

  /** Reports this router's demand (as of the usage just refreshed) and sends it its shares. */
  async exchange(): Promise<Shares | undefined> {
    const { name, liveWithinMs } = this.o;
    const now = this.o.scheduler.mono();
    const { demand, used, quiet, con } = this.window.take(now, this.o.source.limitUse?.() ?? []);
    // The row says of each max-concurrent its demand and what is in flight (the others count it as held).
    const row = new Map(demand);
    for (const [x, c] of con) row.set(x, c.demand).set(x + INFLIGHT, c.inflight);
    try {
      const out = await this.o.store.shareLimits(name, row, (rows) => ({
        ...computeShares({ own: name, demand, quiet, used, rows, liveWithinMs }),
        slots: computeSlots({ own: name, con, rows, liveWithinMs }),
      }));
      this.send({ shares: [...out.shares], fallback: out.fallback, slots: [...(out.slots ?? [])] });
      if (this.failing > 0) this.o.log.info({ ticks: this.failing }, "limit shares exchanged through the store again");
      this.failing = 0;
      this.okAt = now;
      this.dropped = false;
      return out;
    } catch (e) {
      // The router keeps the shares it has for a while; the others see this row age and, past
      // liveWithinMs, count this router gone and share its part among themselves. Before that,
      // this router gives its shares up: refusing a limited key here beats admitting it twice.
      if (this.failing++ === 0) this.o.log.warn({ err: (e as Error).message }, "limit shares not exchanged through the store: the router keeps its last shares for now");
      if (!this.dropped && now - this.okAt >= liveWithinMs / 2) {
        this.dropped = true;
        this.send({ shares: [], fallback: 0 });
        this.o.log.error({ silent_ms: Math.round(now - this.okAt) }, "limit shares: the store has not answered for long; this router admits no request of a key or team with a rate limit until it does");
      }
      return undefined;
    }
  }

  private send(s: LimitShares): void {
    const text = JSON.stringify(s);
    if (text === this.sent) return;
    this.sent = text;
    this.o.sink.setLimitShares?.(s);
  }
}
