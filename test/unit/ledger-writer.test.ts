// The control plane's half of the usage ledger (src/control/ledger-writer.ts): the router's rows
// written once a tick as deltas, kept through a failed write and never counted twice, and old
// rows pruned by the leader alone, at most once an hour. Also the router thread's usage message
// carrying the rows (src/protocol/router-link.ts).

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { LedgerWriter } from "../../src/control/ledger-writer";
import type { LedgerPort } from "../../src/control/store-port";
import { FromRouter } from "../../src/protocol/router-link";
import type { UsageRow } from "../../src/protocol/routing";
import { usageRow } from "../helpers/usage-row";

const HOUR = 3_600_000;
const row = (over: Partial<UsageRow> = {}): UsageRow => usageRow({ team: "t", key: "k", hour: 10 * HOUR, prompt_tokens: 10, completion_tokens: 3, ...over });

function fakeStore() {
  const written: UsageRow[][] = [];
  const pruned: number[] = [];
  let failing = false;
  const store: LedgerPort = {
    addUsage: async (rows) => {
      if (failing) throw new Error("database is locked");
      written.push([...rows]);
    },
    usageSince: async () => [],
    usageTotalsSince: async () => [],
    pruneUsage: async (before) => {
      pruned.push(before);
    },
  };
  return { store, written, pruned, fail: (f: boolean) => (failing = f) };
}

describe("ledger writer", () => {
  test("each tick writes the rows the router handed over, once; a failed write keeps them, added up with the next ones", async () => {
    const s = fakeStore();
    let next: UsageRow[] = [row()];
    const w = new LedgerWriter({ source: { takeLedger: () => next.splice(0) }, store: s.store, retentionMs: 90 * 24 * HOUR, log: pino({ level: "silent" }) });
    await w.write(11 * HOUR, false);
    expect(s.written).toEqual([[row()]]);
    await w.write(11 * HOUR + 5000, false);
    expect(s.written).toHaveLength(1);
    s.fail(true);
    next = [row({ prompt_tokens: 5 })];
    await w.write(11 * HOUR + 10_000, false);
    expect(w.waiting).toBe(1);
    s.fail(false);
    next = [row({ prompt_tokens: 7 }), row({ model: "m2" })];
    await w.write(11 * HOUR + 15_000, false);
    expect(s.written[1]).toEqual([row({ requests: 2, prompt_tokens: 12, completion_tokens: 6 }), row({ model: "m2" })]);
    expect(w.waiting).toBe(0);
    expect(s.pruned).toEqual([]);
  });

  test("the leader prunes rows past the retention at most once an hour", async () => {
    const s = fakeStore();
    const w = new LedgerWriter({ store: s.store, retentionMs: 24 * HOUR, log: pino({ level: "silent" }) });
    await w.write(100 * HOUR, true);
    await w.write(100 * HOUR + 59 * 60_000, true);
    await w.write(101 * HOUR, true);
    expect(s.pruned).toEqual([76 * HOUR, 77 * HOUR]);
  });

  test("the router thread's usage answer carries the ledger's rows, checked field by field", () => {
    const ok = FromRouter.safeParse({ type: "usage", id: 1, lastUsed: [], inflightByModel: [], ledger: [row()] });
    expect(ok.success).toBe(true);
    const bad = FromRouter.safeParse({ type: "usage", id: 1, lastUsed: [], inflightByModel: [], ledger: [{ ...row(), prompt_tokens: -1 }] });
    expect(bad.success).toBe(false);
  });
});
