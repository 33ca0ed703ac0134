// The router's traffic figures per model (TrafficSource): requests and errors, output tokens
// from the engine's usage or the streamed chunks counted, time to first token in buckets, and
// requests in flight and held for a cold start; in the caller's thread (Router.traffic()) and
// on the router's own thread (RouterLink.traffic()), and as Prometheus series on /metrics.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync, rmSync } from "node:fs";
import pino from "pino";
import { RouterLink, TABLE_BURST, TABLE_EVERY_MS } from "../../src/app/router-thread";
import type { ToRouter } from "../../src/protocol/router-link";
import { ManualScheduler, type Scheduler, realScheduler } from "../../src/lib/scheduler";
import { type CatalogEntry, type EndpointInfo, type ModelTraffic, TTFT_BUCKETS_MS } from "../../src/protocol/routing";
import { Router, type RouterOptions } from "../../src/router/router";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { heartbeat, model } from "../helpers/fleet";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { testServer } from "../helpers/server";
import { until } from "../helpers/until";

const TOKENS = 5;
let engine: FakeEngine;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  engine = await startFakeEngine({ models: ["m", "m-alias"], ttftMs: 0, tokenDelayMs: 1, tokens: TOKENS });
});
afterAll(async () => {
  await engine.stop();
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ep = (id: string, url: string): EndpointInfo => ({ id, url, models: ["m", "m-alias"], engine: "vllm", pool: "default", weight: 1, priority: 0 });
const catalog = (extra: Partial<CatalogEntry> = {}): CatalogEntry[] => [
  { name: "m", aliases: ["m-alias"], on_demand: false, pool: "default", created: 1, ...extra },
  { name: "idle", aliases: [], on_demand: false, pool: "default", created: 1 },
];

function router(opts: Partial<RouterOptions> = {}, endpoints: EndpointInfo[] = [ep("r1", "")], cat = catalog()) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, adminToken: "admin-secret", ...opts });
  r.setCatalog(cat);
  r.setEndpoints(endpoints.map((e) => (e.url ? e : { ...e, url: engine.url })));
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url };
}

async function call(url: string, path: string, body: Record<string, unknown>): Promise<Response> {
  const res = await fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  await res.text();
  return res;
}
const msgs = [{ role: "user", content: "hello there" }];

/** A RouterLink with the router on its own thread, started, stopped after the test. */
async function threadLink(scheduler: Scheduler = realScheduler): Promise<{ link: RouterLink; port: number }> {
  const link = new RouterLink({
    data: { ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, logLevel: "silent", logOutput: { format: "json", color: false }, listener: {} },
    demand: { requestModel: () => undefined },
    log: pino({ level: "silent" }),
    scheduler,
  });
  const { port } = await link.start();
  cleanups.push(() => link.stop());
  return { link, port };
}
const of = (t: ModelTraffic[], model: string) => t.find((x) => x.model === model)!;
const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

describe("Router.traffic()", () => {
  test("counts output tokens from usage (whole answers, final usage chunks) and from streamed content chunks, per canonical model", async () => {
    const { r, url } = router();
    expect(of(await r.traffic(), "m")).toEqual({ model: "m", requests: 0, errors: 0, output_tokens: 0, ttft_counts: new Array(TTFT_BUCKETS_MS.length + 1).fill(0), inflight: 0, queued: 0 });

    expect((await call(url, "/v1/chat/completions", { model: "m", messages: msgs })).status).toBe(200);
    expect(of(await r.traffic(), "m").output_tokens).toBe(TOKENS);
    // Streamed, no usage asked for: the content chunks are counted (not the role chunk, not the finish chunk).
    await call(url, "/v1/chat/completions", { model: "m-alias", messages: msgs, stream: true });
    expect(of(await r.traffic(), "m").output_tokens).toBe(2 * TOKENS);
    // The final usage chunk's count wins: n=2 choices stream 2 × 3 tokens.
    await call(url, "/v1/chat/completions", { model: "m", messages: msgs, stream: true, max_tokens: 3, n: 2, stream_options: { include_usage: true } });
    expect(of(await r.traffic(), "m").output_tokens).toBe(2 * TOKENS + 6);
    // Completions streamed ("text" chunks) and the Responses API (output_tokens of its usage), whole and streamed.
    await call(url, "/v1/completions", { model: "m", prompt: "hi", stream: true, max_tokens: 2 });
    await call(url, "/v1/responses", { model: "m", input: "hi", max_output_tokens: 4 });
    await call(url, "/v1/responses", { model: "m", input: "hi", stream: true, max_output_tokens: 1 });
    const t = of(await r.traffic(), "m");
    expect(t.output_tokens).toBe(2 * TOKENS + 6 + 2 + 4 + 1);
    expect(t.requests).toBe(6);
    expect(t.errors).toBe(0);
    // Every answer has a time to first token, in some bucket.
    expect(sum(t.ttft_counts)).toBe(6);
    expect(t.inflight).toBe(0);
    // A catalog model nothing asked for is listed with zeros; an alias never gets a line of its own.
    expect(of(await r.traffic(), "idle").requests).toBe(0);
    expect((await r.traffic()).map((x) => x.model)).toEqual(["idle", "m"]);
  });

  test("errors are the answers of status 500 and above; a client's 4xx is a request, not an error", async () => {
    const dead = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("no") });
    const deadUrl = `http://127.0.0.1:${dead.port}`;
    dead.stop(true);
    const { r, url } = router({ maxAttempts: 1 }, [ep("gone", deadUrl)]);
    expect((await call(url, "/v1/chat/completions", { model: "m", messages: msgs })).status).toBe(502);
    const bad = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => Response.json({ error: { message: "bad" } }, { status: 400 }) });
    cleanups.push(() => bad.stop(true));
    r.setEndpoints([ep("bad", `http://127.0.0.1:${bad.port}`)]);
    expect((await call(url, "/v1/chat/completions", { model: "m", messages: msgs })).status).toBe(400);
    const t = of(await r.traffic(), "m");
    expect([t.requests, t.errors, t.output_tokens]).toEqual([2, 1, 0]);
  });

  test("a request held for a cold start is queued, then its time to first token includes the hold", async () => {
    const scheduler = new ManualScheduler();
    const asked: string[] = [];
    const { r, url } = router({ scheduler, demand: { requestModel: (m) => void asked.push(m) } }, [], catalog({ on_demand: true }));
    const res = call(url, "/v1/chat/completions", { model: "m-alias", messages: msgs });
    await until("the request to be held", () => asked.length === 1);
    expect(of(await r.traffic(), "m").queued).toBe(1);
    expect(await (await fetch(`${url}/metrics`, { headers: { authorization: "Bearer admin-secret" } })).text()).toContain('llmgw_model_requests_queued{model="m"} 1');
    scheduler.advance(300);
    r.setEndpoints([{ ...ep("late", engine.url) }]);
    expect((await res).status).toBe(200);
    const t = of(await r.traffic(), "m");
    expect(t.queued).toBe(0);
    // 300 ms: in the bucket up to 500 ms, and no other.
    const at = TTFT_BUCKETS_MS.indexOf(500);
    expect(t.ttft_counts[at]).toBe(1);
    expect(sum(t.ttft_counts)).toBe(1);
  });

  test("/metrics carries the per-model series under Prometheus names", async () => {
    const { url } = router();
    await call(url, "/v1/chat/completions", { model: "m", messages: msgs });
    await call(url, "/v1/chat/completions", { model: "m", messages: msgs, stream: true });
    const text = await (await fetch(`${url}/metrics`, { headers: { authorization: "Bearer admin-secret" } })).text();
    expect(text).toContain('llmgw_model_requests_total{model="m",code="200"} 2');
    expect(text).toContain(`llmgw_model_output_tokens_total{model="m"} ${2 * TOKENS}`);
    expect(text).toContain('llmgw_model_ttft_seconds_bucket{model="m",le="+Inf"} 2');
    expect(text).toContain('llmgw_model_ttft_seconds_count{model="m"} 2');
    expect(text).toContain('llmgw_model_ttft_seconds_bucket{model="m",le="0.025"}');
    expect(text).toContain("# TYPE llmgw_model_ttft_seconds histogram");
    expect(text).toContain("# TYPE llmgw_model_output_tokens_total counter");
  });
});

describe("RouterLink.traffic() (the router on its own thread)", () => {
  test("answers with the router thread's figures, validated, and with the last ones once the thread is gone", async () => {
    const { link, port } = await threadLink();
    link.setCatalog(catalog());
    link.setEndpoints([ep("r1", engine.url)]);
    const url = `http://127.0.0.1:${port}`;
    // The tables arrive by message: the first request may race them.
    await until("the router thread to have the endpoint", async () => (await call(url, "/v1/chat/completions", { model: "m", messages: msgs })).status === 200);
    const before = of(await link.traffic(), "m");
    expect(before.output_tokens).toBe(TOKENS);
    await call(url, "/v1/chat/completions", { model: "m", messages: msgs, stream: true });
    const t = of(await link.traffic(), "m");
    expect(t.requests).toBe(before.requests + 1);
    expect(t.output_tokens).toBe(2 * TOKENS);
    expect(sum(t.ttft_counts)).toBe(sum(before.ttft_counts) + 1);
    expect(t.ttft_counts).toHaveLength(TTFT_BUCKETS_MS.length + 1);
    await link.stop();
    // Gone: the last figures, at once.
    expect(of(await link.traffic(), "m")).toEqual(t);
  });
});

describe("RouterLink usage (the router on its own thread)", () => {
  test("refresh() reports requests in flight per model, and nothing for a model with none in flight", async () => {
    const slow = await startFakeEngine({ models: ["m"], ttftMs: 1_500, tokenDelayMs: 0, tokens: 1 });
    cleanups.push(() => slow.stop());
    const { link, port } = await threadLink();
    link.setCatalog(catalog());
    link.setEndpoints([ep("r1", slow.url)]);
    await until("the router thread to have the endpoint", async () => {
      await link.refresh();
      return link.watchingSince() > 0 && (await fetch(`http://127.0.0.1:${port}/v1/models`)).ok;
    });
    await link.refresh();
    // Idle: the model has an endpoint but nothing in flight, and is left out (read as 0).
    expect(link.inflightByModel().has("m")).toBe(false);
    // The engine takes 1.5 s to its first token: long enough to see the request in flight.
    const pending = call(`http://127.0.0.1:${port}`, "/v1/chat/completions", { model: "m", messages: msgs });
    await until("the request to be in flight", async () => {
      await link.refresh();
      return link.inflightByModel().get("m") === 1;
    });
    expect([...link.inflightByModel().keys()]).toEqual(["m"]);
    expect((await pending).status).toBe(200);
    await link.refresh();
    expect(link.inflightByModel().has("m")).toBe(false);
  });
});

describe("RouterLink tables (the router on its own thread)", () => {
  test("a router thread that dies is replaced on its port and sent the whole tables again, not the changes since the dead one's", async () => {
    const { link, port } = await threadLink();
    link.setCatalog(catalog());
    link.setEndpoints([ep("r1", engine.url)]);
    const url = `http://127.0.0.1:${port}`;
    await until("the router thread to serve the model", async () => (await call(url, "/v1/chat/completions", { model: "m", messages: msgs })).status === 200);
    const first = (link as unknown as { worker: { threadId: number; terminate(): Promise<number> } }).worker;
    const firstId = first.threadId;
    await first.terminate();
    // The tables are unchanged since the dead thread had them: the new one must still get all of them.
    await until(
      "a new router thread to serve the model on the same port",
      async () => {
        const w = (link as unknown as { worker?: { threadId: number } }).worker;
        if (w === undefined || w.threadId === firstId) return false;
        return (await call(url, "/v1/chat/completions", { model: "m", messages: msgs }).catch(() => undefined))?.status === 200;
      },
      15_000,
    );
  });

  test("endpoint lists and catalogs go at once at the everyday rate; a long burst is paced to one per TABLE_EVERY_MS, the latest one sent", async () => {
    const s = new ManualScheduler();
    const { link, port } = await threadLink(s);
    const posted: ToRouter[] = [];
    const spy = link as unknown as { post(m: ToRouter): void };
    const post = spy.post.bind(link);
    spy.post = (m) => {
      posted.push(m);
      post(m);
    };
    const kinds = () => posted.map((m) => (m.type === "endpoints" ? `endpoints:${m.keys.join(",")}` : m.type === "catalog" ? `catalog:${m.keys.length}` : m.type));
    const eps = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => `endpoints:r${from + i}`);
    link.setCatalog(catalog());
    // Twenty lists in a row, as heartbeats reporting replicas ready make them: the last one names the engine.
    for (let i = 1; i <= 20; i++) link.setEndpoints([ep(`r${i}`, i === 20 ? engine.url : "http://127.0.0.1:9")]);
    link.setCatalog(catalog({ on_demand: true }));
    // The first TABLE_BURST lists go at once; the catalog has its own allowance.
    expect(kinds()).toEqual(["catalog:2", ...eps(1, TABLE_BURST), "catalog:2"]);
    s.advance(TABLE_EVERY_MS - 1);
    expect(posted).toHaveLength(TABLE_BURST + 2);
    s.advance(1);
    expect(kinds().slice(TABLE_BURST + 2)).toEqual(["endpoints:r20"]);
    // Still in the burst: the next list waits its period too, and only the latest is sent.
    link.setEndpoints([ep("r21", "http://127.0.0.1:9")]);
    link.setEndpoints([ep("r20", engine.url)]);
    expect(posted).toHaveLength(TABLE_BURST + 3);
    s.advance(TABLE_EVERY_MS);
    expect(kinds().at(-1)).toBe("endpoints:r20");
    expect(posted).toHaveLength(TABLE_BURST + 4);
    // Nothing new: nothing more is sent; after a quiet spell a burst goes at once again.
    s.advance(TABLE_BURST * TABLE_EVERY_MS);
    expect(posted).toHaveLength(TABLE_BURST + 4);
    for (let i = 0; i < TABLE_BURST; i++) link.setEndpoints([ep("r20", engine.url)]);
    expect(posted).toHaveLength(2 * TABLE_BURST + 4);
    expect(kinds().at(-1)).toBe("endpoints:r20");
    // The thread has the latest list: a request reaches the engine.
    await until("the router thread to route to the last list", async () => (await call(`http://127.0.0.1:${port}`, "/v1/chat/completions", { model: "m", messages: msgs })).status === 200);
    await link.stop();
    expect(s.pending).toBe(0);
  });
});

describe("the router thread's CPU priority", () => {
  test("with CAP_SYS_NICE (root here) the router thread runs 5 nicer than the process, the control plane's thread keeps its own", async () => {
    const { getPriority } = await import("node:os");
    const niceOf = (task: string) => {
      const st = readFileSync(`/proc/self/task/${task}/stat`, "utf8");
      return Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[16]);
    };
    const before = new Set(readdirSync("/proc/self/task"));
    const { link } = await threadLink();
    const base = getPriority(0);
    const fresh = readdirSync("/proc/self/task").filter((t) => !before.has(t));
    const boosted = fresh.filter((t) => niceOf(t) === base - 5);
    if (process.getuid?.() === 0) expect(boosted.length).toBeGreaterThan(0);
    else expect(boosted).toEqual([]);
    expect(niceOf(String(process.pid))).toBe(base);
  });
});

describe("a head node", () => {
  test("hands its router the fleet gauges after a tick, and its TrafficSource lists the catalog; a standby exports no fleet", async () => {
    const s = await testServer();
    cleanups.push(async () => {
      await s.stop();
      rmSync(s.dataDir, { recursive: true, force: true });
    });
    expect((await s.agent(heartbeat({ name: "gpu-01", gpus: ["H100-80GB", "H100-80GB"], unhealthy: [1] }))).status).toBe(200);
    await s.seed.models([model({ name: "llama", replicas: { min: 1 } })]);
    await s.tick();
    const scrape = async () => (await fetch(`${s.routerUrl}/metrics`, { headers: { authorization: `Bearer ${s.adminToken}` } })).text();
    const text = await scrape();
    expect(text).toContain('llmgw_nodes{state="ready"} 1');
    expect(text).toContain('llmgw_gpus{class="H100-80GB",state="unhealthy"} 1');
    expect(text).toContain('llmgw_model_replicas_desired{model="llama"} 1');
    expect(text).toContain("llmgw_control_plane_leading 1");
    // The router's own series come first, the fleet after: one exposition, each family once.
    const types = [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
    expect(new Set(types).size).toBe(types.length);
    expect((await s.traffic.traffic()).map((t) => t.model)).toEqual(["llama"]);

    s.parts.control.leadership.set({ leading: false, epoch: 1, name: "other" });
    await s.tick();
    const standby = await scrape();
    expect(standby).toContain("llmgw_control_plane_leading 0");
    expect(standby).not.toContain("llmgw_nodes{");
    // Its router still counts its own traffic.
    expect(standby).toContain("# TYPE llmgw_model_requests_total counter");
  });
});
