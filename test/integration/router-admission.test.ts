// A key's and its team's rate and concurrency limits through a real Router on 127.0.0.1: 429
// with OpenAI's error, Retry-After and x-ratelimit-* headers before any engine is touched, the
// same headers on every answer to a limited key (streamed too), tokens counted from the
// engine's own usage, and requests in flight given back however a request ends.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { ManualScheduler, type Scheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry, CatalogEntry, EndpointInfo } from "../../src/protocol/routing";
import { Router, type RouterOptions } from "../../src/router/router";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { freePort } from "../helpers/ports";
import { type RawEngine, bytes, rawEngine } from "../helpers/raw-http";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { until } from "../helpers/until";

const TOKENS = 5;
let engine: FakeEngine;
let slow: FakeEngine;
/** An engine of the test's own: counts the requests it holds at once, or answers 500. */
let odd: { url: string; stop(): void; now: number; max: number; requests: number };
/** An engine that starts a stream and dies: one chunk, then its connection closed. */
let cut: RawEngine;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  engine = await startFakeEngine({ models: ["m"], ttftMs: 0, tokenDelayMs: 0, tokens: TOKENS });
  slow = await startFakeEngine({ models: ["slow"], ttftMs: 0, tokenDelayMs: 40, tokens: 10 });
  const state = { now: 0, max: 0, requests: 0 };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(req) {
      const body = (await req.json()) as { model: string };
      if (body.model === "e500") return new Response(JSON.stringify({ error: { message: "boom", type: "server_error" } }), { status: 500, headers: { "content-type": "application/json" } });
      state.requests++;
      state.now++;
      state.max = Math.max(state.max, state.now);
      await Bun.sleep(body.model === "think" ? 1000 : 20);
      state.now--;
      return Response.json({ id: "x", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 } });
    },
  });
  const chunk = 'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n';
  cut = rawEngine(() => (s) => {
    s.write(bytes(`HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${chunk.length.toString(16)}\r\n${chunk}\r\n`));
    setTimeout(() => s.end(), 20);
  });
  odd = Object.assign(state, { url: `http://127.0.0.1:${server.port}`, stop: () => server.stop(true) });
});
afterAll(async () => {
  await engine.stop();
  await slow.stop();
  odd.stop();
  cut.stop();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const ep = (id: string, url: string, models: string[]): EndpointInfo => ({ id, url, models, engine: "vllm", pool: "default", weight: 1, priority: 0 });
const entry = (name: string, extra: Partial<CatalogEntry> = {}): CatalogEntry => ({ name, aliases: [], on_demand: false, pool: "default", created: 1, ...extra });
const apiKey = (name: string, extra: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name, sha256: sha(`sk-${name}`), pool: null, ...extra });

function router(keys: ApiKeyEntry[], opts: Partial<RouterOptions> = {}, scheduler?: Scheduler) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, requireApiKey: true, ...(scheduler ? { scheduler } : {}), ...opts });
  r.setCatalog([entry("m"), entry("slow"), entry("count"), entry("think"), entry("e500"), entry("cut"), entry("dead"), entry("cold", { on_demand: true })]);
  r.setEndpoints([
    ep("r1", engine.url, ["m"]),
    ep("r2", slow.url, ["slow"]),
    // One replica each: a 500 or a cut stream passes a replica over for a while.
    ep("r3", odd.url, ["count", "think"]),
    ep("r5", odd.url, ["e500"]),
    ep("r6", cut.url, ["cut"]),
    ep("r4", `http://127.0.0.1:${freePort()}`, ["dead"]),
  ]);
  r.setApiKeys(keys);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url };
}

const msgs = [{ role: "user", content: "hello there" }];
function post(url: string, key: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer sk-${key}` }, body: JSON.stringify({ messages: msgs, ...body }), signal });
}
const rl = (res: Response, what: "requests" | "tokens") => [res.headers.get(`x-ratelimit-limit-${what}`), res.headers.get(`x-ratelimit-remaining-${what}`), res.headers.get(`x-ratelimit-reset-${what}`)];
const use = (r: Router, key: string) => r.keyUse().find((u) => u.key === key)!;

describe("router admission", () => {
  test("over its rpm a key is answered 429 (OpenAI's error, Retry-After, x-should-retry) before any engine is touched; every answer carries x-ratelimit-*, streamed ones too", async () => {
    const { r, url } = router([apiKey("alice", { limits: { rpm: 3, tpm: 100_000 } }), apiKey("free")], {}, new ManualScheduler());
    const before = engine.stats().requests;
    const a = await post(url, "alice", { model: "m" });
    expect(a.status).toBe(200);
    await a.text();
    expect(rl(a, "requests")).toEqual(["3", "2", "20s"]);
    expect(a.headers.get("x-ratelimit-limit-tokens")).toBe("100000");
    const b = await post(url, "alice", { model: "m", stream: true });
    expect(b.status).toBe(200);
    expect(b.headers.get("content-type")).toContain("text/event-stream");
    expect(rl(b, "requests")).toEqual(["3", "1", "40s"]);
    expect(await b.text()).toContain("[DONE]");
    expect((await post(url, "alice", { model: "m" })).headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const no = await post(url, "alice", { model: "m" });
    expect(no.status).toBe(429);
    expect(no.headers.get("retry-after")).toBe("20");
    expect(no.headers.get("x-should-retry")).toBe("true");
    expect(rl(no, "requests")).toEqual(["3", "0", "1m0s"]);
    const err = ((await no.json()) as { error: { message: string; type: string; code: string } }).error;
    expect(err).toMatchObject({ type: "rate_limit_exceeded", code: "rate_limit_exceeded" });
    expect(err.message).toBe("Rate limit reached for key 'alice' on requests per minute (RPM): limit 3, 0 left; try again in 20s.");
    expect(engine.stats().requests - before).toBe(3);
    // The ledger counts the refusal beside the three answered, under the key and the model.
    expect(r.takeLedger().filter((row) => row.key === "alice")).toMatchObject([{ model: "m", requests: 4, errors: 1, refused: 1, errors_4xx: 0 }]);
    // A key without limits: no admission, no headers.
    const f = await post(url, "free", { model: "m" });
    expect(f.status).toBe(200);
    expect(f.headers.get("x-ratelimit-limit-requests")).toBeNull();
  });

  test("a team's rpm is shared by its keys: the refusal names the team", async () => {
    const team = { team: "research", teamLimits: { rpm: 2 } };
    const { url } = router([apiKey("k1", team), apiKey("k2", team)], {}, new ManualScheduler());
    expect((await post(url, "k1", { model: "m" })).status).toBe(200);
    const two = await post(url, "k2", { model: "m" });
    expect(rl(two, "requests")).toEqual(["2", "0", "1m0s"]);
    const no = await post(url, "k1", { model: "m" });
    expect(no.status).toBe(429);
    expect(((await no.json()) as { error: { message: string } }).error.message).toStartWith("Rate limit reached for team 'research' (shared by its keys) on requests per minute (RPM): limit 2");
  });

  test("tokens per minute count the engine's real usage, the prompt's size estimate replaced by it, for a stream too whether or not its client asked for the usage", async () => {
    const { r, url } = router([apiKey("t", { limits: { tpm: 100_000 } })], {}, new ManualScheduler());
    // A body much larger than its prompt: the estimate (bytes / 4) is far above the real count.
    const padding = { user: "x".repeat(8000) };
    const a = await post(url, "t", { model: "m", ...padding });
    const usage = ((await a.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    expect(usage.completion_tokens).toBe(TOKENS);
    expect(use(r, "t").tokensLeft).toBe(100_000 - usage.prompt_tokens - TOKENS);
    const b = await post(url, "t", { model: "m", stream: true, stream_options: { include_usage: true }, ...padding });
    await b.text();
    expect(use(r, "t").tokensLeft).toBe(100_000 - 2 * (usage.prompt_tokens + TOKENS));
    const body = { model: "m", stream: true, ...padding };
    const c = await post(url, "t", body);
    await c.text();
    // The router asked the engine for the usage the client did not: it settles this one too.
    expect(use(r, "t").tokensLeft).toBe(100_000 - 3 * (usage.prompt_tokens + TOKENS));
  });

  test("max concurrent: a key's slow streams hold their slots until they end; one more is refused meanwhile", async () => {
    const { r, url } = router([apiKey("c", { limits: { maxConcurrent: 2 } })]);
    const s1 = await post(url, "c", { model: "slow", stream: true });
    const s2 = await post(url, "c", { model: "slow", stream: true });
    expect([s1.status, s2.status]).toEqual([200, 200]);
    expect(use(r, "c").inflight).toBe(2);
    const no = await post(url, "c", { model: "slow", stream: true });
    expect(no.status).toBe(429);
    expect(((await no.json()) as { error: { message: string } }).error.message).toBe("Rate limit reached for key 'c' on 2 requests in flight, the most it may have at once; try again when one of them has ended.");
    expect(no.headers.get("retry-after")).toBe("1");
    await Promise.all([s1.text(), s2.text()]);
    await until("in flight back to 0", () => use(r, "c").inflight === 0);
    const again = await post(url, "c", { model: "slow", stream: true });
    expect(again.status).toBe(200);
    await again.text();
  });

  test("200 requests at once on a key with max_concurrent 5: never more than 5 at the engine, the rest refused, none left in flight", async () => {
    const { r, url } = router([apiKey("burst", { limits: { maxConcurrent: 5 } })]);
    odd.max = 0;
    const before = odd.requests;
    const statuses = await Promise.all(
      Array.from({ length: 200 }, async () => {
        const res = await post(url, "burst", { model: "count" });
        await res.text();
        return res.status;
      }),
    );
    expect(statuses.filter((s) => s !== 200 && s !== 429)).toEqual([]);
    const ok = statuses.filter((s) => s === 200).length;
    expect(ok).toBeGreaterThanOrEqual(5);
    expect(odd.requests - before).toBe(ok);
    expect(odd.max).toBeLessThanOrEqual(5);
    await until("in flight back to 0", () => use(r, "burst").inflight === 0);
  });

  test("in flight goes back to 0 however a request ends: answered, streamed, cut by its client, engine 500, engine gone mid-stream, retries exhausted, cold-start hold timed out or left, unknown model", async () => {
    const team = { team: "ops", teamLimits: { maxConcurrent: 100 } };
    const { r, url } = router([apiKey("k", { ...team, limits: { maxConcurrent: 100, rpm: 10_000 } })], { coldStartTimeoutMs: 300 });
    const settled = async (what: string) => {
      await until(`in flight back to 0 after ${what}`, () => {
        const u = use(r, "k");
        return u.inflight === 0 && u.teamInflight === 0;
      });
    };
    const done = async (what: string, status: number, res: Promise<Response>) => {
      const x = await res;
      await x.text().catch(() => "");
      expect(`${what}: ${x.status}`).toBe(`${what}: ${status}`);
      // Every answer to a key with an rpm limit carries the x-ratelimit-* headers, the router's own errors too.
      expect(`${what}: ${x.headers.get("x-ratelimit-limit-requests")}`).toBe(`${what}: 10000`);
      await settled(what);
    };
    await done("answered", 200, post(url, "k", { model: "m" }));
    await done("streamed", 200, post(url, "k", { model: "m", stream: true }));
    await done("engine 500", 500, post(url, "k", { model: "e500" }));
    // The client sees the stream's head, then an error event at its end.
    await done("engine gone mid-stream", 200, post(url, "k", { model: "cut", stream: true }));
    await done("retries exhausted", 502, post(url, "k", { model: "dead" }));
    await done("cold-start hold timed out", 503, post(url, "k", { model: "cold" }));
    await done("unknown model", 404, post(url, "k", { model: "nope" }));
    // Cut by the client mid-stream, many times over.
    for (let i = 0; i < 10; i++) {
      const ctl = new AbortController();
      const res = await post(url, "k", { model: "slow", stream: true }, ctl.signal);
      const reader = res.body!.getReader();
      await reader.read();
      ctl.abort();
      await reader.read().catch(() => undefined);
    }
    await settled("streams cut by their client");
    // Left by its client while held for a cold start (streamed: answered 200 at once).
    const ctl = new AbortController();
    const held = await post(url, "k", { model: "cold", stream: true }, ctl.signal);
    expect(held.status).toBe(200);
    expect(held.headers.get("x-ratelimit-limit-requests")).toBe("10000");
    expect(use(r, "k").inflight).toBe(1);
    ctl.abort();
    await settled("a cold-start hold left by its client");
    // Aborted before the answer's head, while the engine is still thinking.
    const early = new AbortController();
    const pending = post(url, "k", { model: "think" }, early.signal).catch(() => undefined);
    await until("the request reaches the router", () => use(r, "k").inflight === 1);
    early.abort();
    await pending;
    await settled("a request left before its answer");
  });
});

describe("a router open to anyone", () => {
  test("a request presenting a key of ours is that key's: held to its limits and its team's; no key, an unknown or an expired one is anonymous and unlimited", async () => {
    const { r, url } = router(
      [apiKey("alice", { team: "t", limits: { rpm: 2 }, teamLimits: { rpm: 100 } }), apiKey("gone", { limits: { rpm: 1 }, expiresAt: 1 })],
      { requireApiKey: false },
      new ManualScheduler(),
    );
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await post(url, "alice", { model: "m" });
      statuses.push(res.status);
      await res.text();
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(r.limitUse().find((u) => u.of === "team" && u.name === "t")).toMatchObject({ rpm: 2 });
    // Without a key, with one we do not know, with an expired one: served, never refused.
    for (const key of ["nobody", "gone", "gone"]) {
      const res = await post(url, key, { model: "m" });
      expect(res.status).toBe(200);
      expect(res.headers.get("x-ratelimit-limit-requests")).toBeNull();
      await res.text();
    }
    const anon = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: msgs }) });
    expect(anon.status).toBe(200);
    await anon.text();
  });
});
