// The router is handed the API key list when it differs from what it holds, and a publication
// overtaken by a later one (a create or revoke while a tick read the keys) sends nothing.

import { describe, expect, test } from "bun:test";
import { KeyPublisher } from "../../src/control/key-publisher";
import type { ApiKeyRow, TeamRow } from "../../src/control/types";
import type { ApiKeyEntry } from "../../src/protocol/routing";

const row = (name: string, hash = `h-${name}`, pool: string | null = null): ApiKeyRow => ({ name, hash, pool, createdAt: 1 });

describe("KeyPublisher", () => {
  test("sends the first list, then only a different one; reset() sends again", async () => {
    let rows = [row("a")];
    const k = new KeyPublisher(async () => ({ keys: rows, teams: [] }));
    const sent: ApiKeyEntry[][] = [];
    const sink = { setApiKeys: (e: ApiKeyEntry[]) => sent.push(e) };
    expect(await k.publish(undefined)).toBe(false);
    expect(await k.publish(sink)).toBe(true);
    expect(await k.publish(sink)).toBe(false);
    rows = [row("a", "h-other")];
    expect(await k.publish(sink)).toBe(true);
    rows = [row("a", "h-other", "p")];
    expect(await k.publish(sink)).toBe(true);
    rows = [];
    expect(await k.publish(sink)).toBe(true);
    k.reset();
    expect(await k.publish(sink)).toBe(true);
    expect(sent).toEqual([[{ name: "a", sha256: "h-a", pool: null }], [{ name: "a", sha256: "h-other", pool: null }], [{ name: "a", sha256: "h-other", pool: "p" }], [], []]);
  });

  test("an older read finishing after a newer one sends nothing: a revoked key is never handed back", async () => {
    const reads: ((r: ApiKeyRow[]) => void)[] = [];
    const k = new KeyPublisher(() => new Promise((resolve) => reads.push((keys) => resolve({ keys, teams: [] }))));
    const sent: string[][] = [];
    const sink = { setApiKeys: (e: ApiKeyEntry[]) => sent.push(e.map((x) => x.name)) };
    const tick = k.publish(sink);
    const revoke = k.publish(sink);
    reads[1]!([]);
    expect(await revoke).toBe(true);
    reads[0]!([row("revoked")]);
    expect(await tick).toBe(false);
    expect(sent).toEqual([[]]);
  });

  test("each key goes with its team, models, expiry, tier (its team's when it names none), limits and its team's limits; a team's change alone is sent", async () => {
    const keys: ApiKeyRow[] = [
      { ...row("a"), team: "t", models: ["m1"], expiresAt: 99, limits: { rpm: 5 } },
      { ...row("b"), tier: "interactive", team: "t" },
      row("c"),
    ];
    let teams: TeamRow[] = [{ name: "t", tier: "batch", limits: { tpm: 100, budgetGpuHours: 2 }, createdAt: 1, updatedAt: 1 }];
    const k = new KeyPublisher(async () => ({ keys, teams }));
    const sent: ApiKeyEntry[][] = [];
    const sink = { setApiKeys: (e: ApiKeyEntry[]) => sent.push(e) };
    expect(await k.publish(sink)).toBe(true);
    expect(sent[0]).toEqual([
      { name: "a", sha256: "h-a", pool: null, team: "t", models: ["m1"], expiresAt: 99, tier: "batch", limits: { rpm: 5 }, teamLimits: { tpm: 100, budgetGpuHours: 2 } },
      { name: "b", sha256: "h-b", pool: null, team: "t", tier: "interactive", teamLimits: { tpm: 100, budgetGpuHours: 2 } },
      { name: "c", sha256: "h-c", pool: null },
    ]);
    expect(await k.publish(sink)).toBe(false);
    teams = [{ ...teams[0]!, limits: { tpm: 50 } }];
    expect(await k.publish(sink)).toBe(true);
    expect(sent[1]![0]!.teamLimits).toEqual({ tpm: 50 });
  });
});
