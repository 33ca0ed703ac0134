// The control plane's half of the usage ledger: once a tick it takes the rows its router counted
// since the last tick (deltas: the router has forgotten them) and adds them to the store in one
// write. Rows a failed write could not store are kept, added up, for the next tick. Every control
// plane writes its own router's rows (the additions commute); the leader alone deletes rows past
// the retention, at most once an hour.

import type { Logger } from "pino";
import type { UsageRow, UsageSource } from "../protocol/routing";
import { mergeUsageRows } from "../protocol/usage-rows";
import type { LedgerPort } from "./store-port";

const HOUR_MS = 3_600_000;

export interface LedgerWriterOptions {
  /** The router's side; absent without a router (nothing to write). */
  source?: Pick<UsageSource, "takeLedger" | "ledgerGen">;
  store: Pick<LedgerPort, "addUsage" | "pruneUsage">;
  /** Rows of hours that started longer ago than this are deleted. */
  retentionMs: number;
  log: Logger;
}

export class LedgerWriter {
  /** Rows taken from the router and not yet stored. */
  private pending: UsageRow[] = [];
  private prunedAt = Number.NEGATIVE_INFINITY;
  /** The router's latest ledger take whose rows are all in the store (UsageSource.ledgerGen): the budgets' store read holds them. */
  storedThrough = 0;

  constructor(private readonly o: LedgerWriterOptions) {}

  /** The tick's write: the router's new rows (with any a failed write left) added to the store; the leader's pruning. */
  async write(now: number, leading: boolean): Promise<void> {
    const taken = this.o.source?.takeLedger?.() ?? [];
    const gen = this.o.source?.ledgerGen?.() ?? 0;
    if (taken.length > 0) this.pending = this.pending.length === 0 ? taken : mergeUsageRows([...this.pending, ...taken]);
    if (this.pending.length > 0) {
      const rows = this.pending;
      try {
        await this.o.store.addUsage(rows);
        this.pending = [];
        this.storedThrough = gen;
      } catch (e) {
        this.o.log.warn({ err: (e as Error).message, rows: rows.length }, "usage ledger not written to the store: its rows are kept for the next tick");
      }
    } else this.storedThrough = gen;
    if (leading && now - this.prunedAt >= HOUR_MS) {
      this.prunedAt = now;
      try {
        await this.o.store.pruneUsage(now - this.o.retentionMs);
      } catch (e) {
        this.o.log.warn({ err: (e as Error).message }, "old usage ledger rows not deleted: tried again in an hour");
      }
    }
  }

  /** Rows waiting for a write that failed (a test reads it). */
  get waiting(): number {
    return this.pending.length;
  }
}
