// Fair admission to a saturated model through a real Router on 127.0.0.1: a replica with
// max_inflight is never sent more than that at once; the requests past it wait in the router and
// get the slots as they free, fairly across teams (a team flooding does not push a light team's
// requests behind its flood), and the last slot of the replica is kept for interactive keys.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import type { ApiKeyEntry, EndpointInfo } from "../../src/protocol/routing";
import { Router, type RouterOptions } from "../../src/router/router";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { until } from "../helpers/until";

const BOUND = 4;
let fake: FakeEngine;
/**
 * The engine the router sees: passes each request on to the fake engine (5 tokens 4 ms apart)
 * and counts exactly how many it holds at once, in all and per the body's `user`.
 */
let front: { url: string; stop(): void; now: number; max: number; requests: number; byUser: Map<string, { now: number; max: number }> };
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  fake = await startFakeEngine({ models: ["m"], ttftMs: 0, tokenDelayMs: 4, tokens: 5 });
  const state = { now: 0, max: 0, requests: 0, byUser: new Map<string, { now: number; max: number }>() };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const text = await req.text();
      const user = (JSON.parse(text) as { user?: string }).user ?? "";
      let u = state.byUser.get(user);
      if (u === undefined) state.byUser.set(user, (u = { now: 0, max: 0 }));
      state.requests++;
      state.max = Math.max(state.max, ++state.now);
      u.max = Math.max(u.max, ++u.now);
      try {
        const res = await fetch(`${fake.url}${new URL(req.url).pathname}`, { method: "POST", headers: { "content-type": "application/json" }, body: text });
        const body = await res.arrayBuffer();
        return new Response(body, { status: res.status, headers: { "content-type": res.headers.get("content-type") ?? "application/json" } });
      } finally {
        state.now--;
        u.now--;
      }
    },
  });
  front = Object.assign(state, { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) });
});
afterAll(async () => {
  front.stop();
  await fake.stop();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
  front.max = 0;
  front.requests = 0;
  front.byUser.clear();
});

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const apiKey = (name: string, extra: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name, sha256: sha(`sk-${name}`), pool: null, ...extra });
const ep = (extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id: "r1", url: front.url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });

function router(keys: ApiKeyEntry[], endpoint: EndpointInfo, opts: Partial<RouterOptions> = {}) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, requireApiKey: true, maxHeldPerModel: 1000, ...opts });
  r.setCatalog([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 1 }]);
  r.setEndpoints([endpoint]);
  r.setApiKeys(keys);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url };
}

/** One chat completion; resolves with its status and its time from send to the end of its answer (ms). */
async function timed(url: string, key: string, user: string, extra: object = {}, signal?: AbortSignal): Promise<{ status: number; ms: number; res: Response; text: string }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer sk-${key}` },
    body: JSON.stringify({ model: "m", user, messages: [{ role: "user", content: "hi" }], ...extra }),
    signal,
  });
  const text = await res.text();
  return { status: res.status, ms: performance.now() - t0, res, text };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

describe("fair admission to a replica at its max_inflight", () => {
  test("team A floods with 200 requests, team B sends 10: B's finish far sooner than A's, and the engine never holds more than max_inflight", async () => {
    const { r, url } = router([apiKey("a", { team: "A" }), apiKey("b", { team: "B" })], ep({ max_inflight: BOUND }));
    const flood = Array.from({ length: 200 }, () => timed(url, "a", "A"));
    // The flood is in: at the engine, or waiting in the router.
    await until("team A's 200 requests to reach the router", () => (r.waitingForSlots().get("m") ?? 0) + front.requests >= 200);
    const light = Array.from({ length: 10 }, () => timed(url, "b", "B"));
    const a = await Promise.all(flood);
    const b = await Promise.all(light);
    expect([...a, ...b].every((x) => x.status === 200)).toBe(true);
    const ma = median(a.map((x) => x.ms));
    const mb = median(b.map((x) => x.ms));
    console.log(`median latency: team A (200 requests) ${ma.toFixed(0)} ms, team B (10 requests) ${mb.toFixed(0)} ms; engine at most ${front.max} at once`);
    expect(front.max).toBeLessThanOrEqual(BOUND);
    expect(front.max).toBe(BOUND);
    // B's ten are served in the slots that free up next, alternating with A's: about 20 slots,
    // 5 rounds of the engine, against the 50 rounds A's flood needs.
    expect(mb * 3).toBeLessThan(ma);
    expect(r.waitingForSlots().size).toBe(0);
  }, 60_000);

  test("a batch key flooding never takes the last slot: the interactive key finds it free every time", async () => {
    const { url } = router([apiKey("bulk", { tier: "batch" }), apiKey("chat", { tier: "interactive" })], ep({ max_inflight: BOUND }));
    const flood = Array.from({ length: 120 }, () => timed(url, "bulk", "bulk"));
    await until("the batch flood to fill the replica", () => (front.byUser.get("bulk")?.now ?? 0) >= BOUND - 1);
    // One request on its own takes one engine round; the batch queue behind would take ~40.
    const alone: number[] = [];
    for (let i = 0; i < 8; i++) {
      const x = await timed(url, "chat", "chat");
      expect(x.status).toBe(200);
      alone.push(x.ms);
    }
    const bulk = await Promise.all(flood);
    expect(bulk.every((x) => x.status === 200)).toBe(true);
    const slowestChat = Math.max(...alone);
    const medianBulk = median(bulk.map((x) => x.ms));
    console.log(`interactive: slowest of 8 ${slowestChat.toFixed(0)} ms; batch median ${medianBulk.toFixed(0)} ms; batch at most ${front.byUser.get("bulk")!.max} at once, engine at most ${front.max}`);
    expect(front.byUser.get("bulk")!.max).toBe(BOUND - 1);
    expect(front.max).toBeLessThanOrEqual(BOUND);
    expect(slowestChat * 3).toBeLessThan(medianBulk);
  }, 60_000);

  test("the wait is bounded: past --max-held-per-model 503 too_many_waiting, past the cold-start timeout 503 model_not_ready, and a client that leaves is gone from the queue at once", async () => {
    const { r, url } = router([apiKey("k")], ep({ max_inflight: 1 }), { maxHeldPerModel: 2, coldStartTimeoutMs: 400, adminToken: "admin-secret" });
    const waiting = () => r.waitingForSlots().get("m") ?? 0;
    // 300 tokens 4 ms apart: the one slot stays taken for well over a second.
    const occupant = timed(url, "k", "occupant", { max_tokens: 300 });
    await until("the occupant at the engine", () => front.byUser.get("occupant")?.now === 1);
    const first = timed(url, "k", "first");
    const leaver = new AbortController();
    const left = timed(url, "k", "leaver", {}, leaver.signal).catch((e: Error) => e.name);
    await until("two waiting", () => waiting() === 2);
    expect(await (await fetch(`${url}/metrics`, { headers: { authorization: "Bearer admin-secret" } })).text()).toContain('llmgw_router_waiting_requests{model="m"} 2');
    const full = await timed(url, "k", "third");
    expect(full.status).toBe(503);
    expect(full.res.headers.get("retry-after")).toBe("10");
    expect(JSON.parse(full.text).error.code).toBe("too_many_waiting");
    leaver.abort();
    expect(await left).toBe("AbortError");
    await until("the leaver out of the queue", () => waiting() === 1);
    const late = await first;
    expect(late.status).toBe(503);
    expect(JSON.parse(late.text).error).toMatchObject({ code: "model_not_ready" });
    expect(JSON.parse(late.text).error.message).toContain("max_inflight");
    expect(waiting()).toBe(0);
    expect((await occupant).status).toBe(200);
    // Neither the leaver nor the ones refused ever reached the engine.
    expect(front.requests).toBe(1);
  }, 30_000);
});
