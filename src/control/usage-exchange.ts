// The router's usage as the control plane holds it: the last-used map collected once a tick (so
// its cost does not grow with traffic), and with several control planes on one store, every
// router's report merged (usage.ts has the rules): this one's is written to the store and
// everyone's is read, newest stamp winning, and idleness is counted only from the latest
// watchingSince of the routers still reporting. A control plane without a router is fully
// working: it cannot tell idle from busy (it says "unknown").

import type { Logger } from "pino";
import type { LimitUseEntry, UsageSource } from "./interfaces";
import type { UsagePort } from "./store-port";
import { knownIdleStamps, mergeUsage } from "./usage";

export interface UsageExchangeOptions {
  /** The router's side; absent without a router. */
  source?: UsageSource;
  /**
   * Several control planes on one store: this one's name, which names its router in usage
   * reports, and how long a router's report keeps it limiting idleness. Absent for a single head node.
   */
  shared?: { name: string; liveWithinMs: number };
  store: UsagePort;
  log: Logger;
}

export class UsageExchange {
  private used: ReadonlyMap<string, number> = new Map();
  /** Idleness is counted from here: the latest watchingSince of the live routers (usage.ts); -Infinity alone. */
  private from = Number.NEGATIVE_INFINITY;

  constructor(private readonly o: UsageExchangeOptions) {}

  /** The last-used map as collected on the latest tick (with several routers, all of theirs merged). */
  get lastUsed(): ReadonlyMap<string, number> {
    return this.used;
  }

  /** Since when idleness is counted. */
  get since(): number {
    return this.from;
  }

  /** The router's requests in flight per model, or undefined without a router (nothing scales). */
  inflightByModel(): ReadonlyMap<string, number> | undefined {
    return this.o.source?.inflightByModel();
  }

  /**
   * The router's requests in flight per replica; undefined when not known: no router, or it has
   * not said, or several control planes (the other routers' requests are not reported, so a
   * draining replica waits out the drain timeout).
   */
  inflightByReplica(): ReadonlyMap<string, number> | undefined {
    return this.o.shared ? undefined : this.o.source?.inflightByReplica?.();
  }

  /** Each limited key's and team's use of its limits on this control plane's router (as of the last refresh for a router thread). */
  limitUse(): readonly LimitUseEntry[] {
    return this.o.source?.limitUse?.() ?? [];
  }

  /** Asks the router for fresh usage (a router on its own thread answers a message). */
  async refresh(): Promise<void> {
    await this.o.source?.refresh?.();
  }

  /** Reads a router's last-used map (the router's own, or one a test stands in with). */
  collect(source: UsageSource | undefined = this.o.source): void {
    if (source) this.used = new Map(source.lastUsed());
  }

  /** The stamps the tables show: with several routers, how long each replica is known to have gone unused. */
  forTables(): ReadonlyMap<string, number> {
    return this.o.shared ? knownIdleStamps({ lastUsed: this.used, since: this.from }) : this.used;
  }

  /**
   * Reports this router's usage (the map just collected, and since when the router has watched
   * without a gap: this process's watch, or the router thread's restart, whichever is later) and
   * merges every router's. A store that does not answer leaves nothing known idle this tick.
   */
  async exchange(now: number, watchedSince: number): Promise<void> {
    if (!this.o.shared) return;
    const { name, liveWithinMs } = this.o.shared;
    const own = { router: name, watchingSince: Math.max(watchedSince, this.o.source?.watchingSince?.() ?? Number.NEGATIVE_INFINITY), lastUsed: this.used };
    try {
      await this.o.store.reportUsage(name, own.watchingSince, own.lastUsed);
      const merged = mergeUsage({ reports: await this.o.store.routerUsage(), now, liveWithinMs, own });
      this.used = merged.lastUsed;
      this.from = merged.since;
    } catch (e) {
      this.from = now;
      this.o.log.warn({ err: (e as Error).message }, "router usage not exchanged through the store: no replica counts as idle this tick");
    }
  }
}
