// GET /api/v1/usage over real HTTP: the usage ledger's rows since a time, grouped per team, key,
// model or pool, and a bad query named.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { UsageRow } from "../../src/protocol/routing";
import type { UsageRowView } from "../../src/protocol/views";
import { type TestServer, testServer } from "../helpers/server";
import { usageRow } from "../helpers/usage-row";

let s: TestServer;
beforeAll(async () => {
  s = await testServer();
});
afterAll(() => s.stop());

const HOUR = 3_600_000;
const row = (over: Partial<UsageRow> = {}): UsageRow => usageRow({ team: "search", key: "svc", model: "llama", prompt_tokens: 10, completion_tokens: 5, ...over });

describe("GET /api/v1/usage", () => {
  test("rows of the last 24h by default; grouped per team, key, model or pool; an older hour only with a longer since", async () => {
    const now = s.clock.now();
    const h = now - (now % HOUR);
    const put = await s.admin("/api/v1/models/llama", { method: "PUT", headers: { "content-type": "application/json" }, body: JSON.stringify({ pool: "gold", replicas: { min: 0, max: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }) });
    expect(put.status).toBeLessThan(300);
    await s.parts.image.addUsage([
      row({ hour: h }),
      row({ hour: h, key: "batch", team: "research", prompt_tokens: 1000 }),
      row({ hour: h - HOUR, model: "qwen" }),
      row({ hour: h - 3 * 24 * HOUR, prompt_tokens: 7 }),
    ]);
    const all = (await (await s.admin("/api/v1/usage")).json()) as UsageRowView[];
    expect(all.map((r) => [r.hour, r.team, r.key, r.model, r.prompt_tokens])).toEqual([
      [h - HOUR, "search", "svc", "qwen", 10],
      [h, "research", "batch", "llama", 1000],
      [h, "search", "svc", "llama", 10],
    ]);
    expect(all[0]).toEqual({ ...row({ hour: h - HOUR, model: "qwen" }) });
    const teams = (await (await s.admin("/api/v1/usage?by=team")).json()) as UsageRowView[];
    expect(teams.map((r) => [r.team, r.key, r.requests, r.prompt_tokens])).toEqual([
      ["research", "", 1, 1000],
      ["search", "", 2, 20],
    ]);
    const pools = (await (await s.admin("/api/v1/usage?by=pool")).json()) as UsageRowView[];
    expect(pools.map((r) => [r.pool, r.requests])).toEqual([
      ["gold", 2],
      ["", 1],
    ]);
    const week = (await (await s.admin("/api/v1/usage?since=7d&by=model")).json()) as UsageRowView[];
    expect(week.map((r) => [r.model, r.prompt_tokens])).toEqual([
      ["llama", 1017],
      ["qwen", 10],
    ]);
  });

  test("a since that is not a duration, or an unknown grouping, is a 400 naming the field", async () => {
    const bad = await s.admin("/api/v1/usage?since=yesterday");
    expect(bad.status).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain("since");
    const by = await s.admin("/api/v1/usage?by=node");
    expect(by.status).toBe(400);
    expect(JSON.stringify(await by.json())).toContain("by");
  });
});
