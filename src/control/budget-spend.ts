// The budgets' spend as the store holds it, handed to the router once a tick: per key and per
// team, the tokens and GPU-seconds the usage ledger holds since the start of the current day,
// week and month (UTC, protocol/budget-periods.ts). Read after the tick's ledger write, from the
// store every control plane writes to: the spend survives restarts and is the same on every
// router, whoever served it. The figure names the router's last ledger take whose rows it holds
// (LedgerWriter.storedThrough), so the router adds only what it counted after that (router/budget.ts).

import type { Logger } from "pino";
import type { Scheduler } from "../lib/scheduler";
import { periodStarts } from "../protocol/budget-periods";
import type { BudgetFigure, EndpointSink } from "../protocol/routing";
import type { LedgerWriter } from "./ledger-writer";
import type { LedgerPort } from "./store-port";

export interface BudgetSpendOptions {
  /** The router's side; absent without a router (nothing to enforce). */
  sink?: Pick<EndpointSink, "setBudgetSpent">;
  store: Pick<LedgerPort, "usageTotalsSince">;
  /** Up to which of the router's ledger takes the store holds the rows. */
  writer: Pick<LedgerWriter, "storedThrough">;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
}

export class BudgetSpend {
  constructor(private readonly o: BudgetSpendOptions) {}

  /** Reads the periods' totals and hands them to the router; a store that does not answer leaves the router its last figures. */
  async publish(): Promise<void> {
    const sink = this.o.sink;
    if (sink?.setBudgetSpent === undefined) return;
    // Taken before the read: rows written after it started are counted by the router until the next one.
    const through = this.o.writer.storedThrough;
    const starts = periodStarts(this.o.scheduler.now());
    let totals;
    try {
      totals = await this.o.store.usageTotalsSince(starts);
    } catch (e) {
      this.o.log.warn({ err: (e as Error).message }, "budgets' spend not read from the store: the router keeps the figures it has until the next tick");
      return;
    }
    const keys = new Map<string, BudgetFigure>();
    const teams = new Map<string, BudgetFigure>();
    for (const t of totals) {
      if (t.key !== "") add(keys, t.key, t.tokens, t.gpu_seconds);
      if (t.team !== "") add(teams, t.team, t.tokens, t.gpu_seconds);
    }
    sink.setBudgetSpent({ through, starts, keys: [...keys.values()], teams: [...teams.values()] });
  }
}

/** Adds one key's row under `name` (a key that moved teams has rows under each). */
function add(to: Map<string, BudgetFigure>, name: string, tokens: readonly number[], gpu: readonly number[]): void {
  let f = to.get(name);
  if (f === undefined) to.set(name, (f = { name, tokens: [0, 0, 0], gpu_seconds: [0, 0, 0] }));
  const t = f.tokens;
  const g = f.gpu_seconds;
  for (const i of [0, 1, 2] as const) {
    t[i] += tokens[i] ?? 0;
    g[i] += gpu[i] ?? 0;
  }
}
