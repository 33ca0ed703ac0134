// The router over real HTTP: real fake engines and small misbehaving upstreams on 127.0.0.1.
// Forwarding, OpenAI-shaped errors, retries only before the first byte, mid-stream failures
// that end in an error event, client aborts that reach the engine, timeouts, cold starts, and
// last-used stamps that are absent (unknown) until a request is sent. Timeouts and cold-start
// holds run on a ManualScheduler the test advances; what is waited for in real time (until())
// is a request or an answer crossing a real socket.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { Router, type RouterOptions } from "../../src/router/router";
import type { CatalogEntry, EndpointInfo } from "../../src/protocol/routing";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { join } from "node:path";
import { ManualScheduler } from "../../src/lib/scheduler";
import { until } from "../helpers/until";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

const FAKE_ENGINE = join(import.meta.dir, "../../src/sim/fake-engine.ts");
const engines: FakeEngine[] = [];

/** The URL a fake-engine child process prints when it listens. */
async function engineUrlOf(proc: Bun.Subprocess<"ignore", "pipe", "pipe">): Promise<string> {
  const reader = proc.stdout.getReader();
  let out = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`fake engine exited: ${await new Response(proc.stderr).text()}`);
    out += new TextDecoder().decode(value);
    const m = /http:\/\/127\.0\.0\.1:\d+/.exec(out);
    if (m) {
      reader.releaseLock();
      return m[0];
    }
  }
}
const cleanups: (() => unknown)[] = [];
let e1: FakeEngine;
let e2: FakeEngine;

beforeAll(async () => {
  e1 = await startFakeEngine({ models: ["m", "m-alias"], ttftMs: 1, tokenDelayMs: 1, tokens: 4 });
  e2 = await startFakeEngine({ models: ["m", "m-alias"], ttftMs: 1, tokenDelayMs: 1, tokens: 4 });
  engines.push(e1, e2);
});
afterAll(async () => {
  await Promise.all(engines.map((e) => e.stop()));
});
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const ep = (id: string, url: string, extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id, url, models: ["m", "m-alias"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });
const cat = (extra: Partial<CatalogEntry> = {}): CatalogEntry[] => [{ name: "m", aliases: ["m-alias"], on_demand: false, pool: "default", created: 1, ...extra }];

function router(opts: Partial<RouterOptions> = {}, endpoints: EndpointInfo[] = [], catalog = cat()) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, ...opts });
  r.setCatalog(catalog);
  r.setEndpoints(endpoints);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  return { r, url };
}

const chat = (model = "m", extra: Record<string, unknown> = {}) => JSON.stringify({ model, messages: [{ role: "user", content: "hello there" }], ...extra });
const post = (url: string, body: string, init: RequestInit = {}) => fetch(`${url}/v1/chat/completions`, { method: "POST", body, headers: { "content-type": "application/json" }, ...init });

/** An upstream that answers with whatever the test wants. */
function upstream(handler: (req: Request) => Response | Promise<Response>) {
  const s = Bun.serve({ hostname: "127.0.0.1", port: 0, idleTimeout: 0, fetch: handler });
  cleanups.push(() => s.stop(true));
  return `http://127.0.0.1:${s.port}`;
}
/** A handler that never answers until the test's cleanup; counts the requests it got. */
function hanging(): { handler: () => Promise<Response>; arrived: () => number } {
  let n = 0;
  let release: (() => void) | undefined;
  const gate = new Promise<void>((r) => (release = r));
  cleanups.push(() => release!());
  return {
    handler: async () => {
      n++;
      await gate;
      return new Response("late");
    },
    arrived: () => n,
  };
}
function closedPort(): string {
  const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const url = `http://127.0.0.1:${s.port}`;
  void s.stop(true);
  return url;
}
const sseChunk = (text: string) => `data: ${JSON.stringify({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: text } }] })}\n\n`;

describe("forwarding", () => {
  test("chat, non-streamed and streamed, by name and alias; bodies pass through", async () => {
    const { url } = router({}, [ep("a", e1.url)]);
    const r = await post(url, chat("m-alias"));
    expect(r.status).toBe(200);
    const j = (await r.json()) as { object: string; model: string; usage: { completion_tokens: number } };
    expect(j.object).toBe("chat.completion");
    expect(j.model).toBe("m-alias");
    expect(r.headers.get("x-llmgw-replica")).toBe("a");
    const s = await post(url, chat("m", { stream: true, stream_options: { include_usage: true } }));
    expect(s.headers.get("content-type")).toContain("text/event-stream");
    const text = await s.text();
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
    expect(text).toContain('"usage"');
  });

  test("completions and embeddings are forwarded; GET /v1/models lists the catalog with aliases", async () => {
    const { url } = router({}, [ep("a", e1.url)], cat({ on_demand: true }));
    const c = await fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "m", prompt: "x", max_tokens: 2 }) });
    expect(((await c.json()) as { object: string }).object).toBe("text_completion");
    const e = await fetch(`${url}/v1/embeddings`, { method: "POST", body: JSON.stringify({ model: "m", input: ["a", "b"] }) });
    expect(((await e.json()) as { data: unknown[] }).data.length).toBe(2);
    const list = (await (await fetch(`${url}/v1/models`)).json()) as { object: string; data: { id: string }[] };
    expect(list.object).toBe("list");
    expect(list.data.map((d) => d.id)).toEqual(["m", "m-alias"]);
  });

  test("an SGLang replica gets the model's own name for an alias (it serves one name)", async () => {
    let seen = "";
    const up = upstream(async (req) => {
      seen = ((await req.json()) as { model: string }).model;
      return Response.json({ ok: true });
    });
    const { url } = router({}, [ep("s", up, { engine: "sglang" })]);
    await post(url, chat("m-alias"));
    expect(seen).toBe("m");
  });
});

describe("errors in OpenAI's shape", () => {
  test("malformed JSON and a missing model are 400; an unknown model 404 model_not_found", async () => {
    const { url } = router({}, [ep("a", e1.url)]);
    const bad = await post(url, "{nope");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string; type: string } }).error).toMatchObject({ code: "invalid_json", type: "invalid_request_error" });
    const nomodel = await post(url, JSON.stringify({ messages: [] }));
    expect(nomodel.status).toBe(400);
    expect(((await nomodel.json()) as { error: { param: string } }).error.param).toBe("model");
    const unknown = await post(url, chat("other"));
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
  });

  test("the body is read as TextDecoder reads it: one leading BOM dropped, bytes not UTF-8 as U+FFFD", async () => {
    const { url } = router({}, [ep("a", e1.url)]);
    const bytes = (pre: number[], text: string) => new Uint8Array([...pre, ...new TextEncoder().encode(text)]);
    // One BOM: JSON after it, answered.
    const bom = await post(url, bytes([0xef, 0xbb, 0xbf], chat("m")) as unknown as string);
    expect(bom.status).toBe(200);
    // Two: the second is text JSON cannot start with.
    const two = await post(url, bytes([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf], chat("m")) as unknown as string);
    expect(two.status).toBe(400);
    expect(((await two.json()) as { error: { code: string } }).error.code).toBe("invalid_json");
    // A model name with a byte that is not UTF-8: read as U+FFFD, an unknown model named so.
    const body = new Uint8Array([...new TextEncoder().encode('{"model":"m'), 0xff, ...new TextEncoder().encode('","messages":[]}')]);
    const odd = await post(url, body as unknown as string);
    expect(odd.status).toBe(404);
    expect(((await odd.json()) as { error: { message: string } }).error.message).toContain("'m\ufffd'");
  });

  test("a body over the limit is 413", async () => {
    const { url } = router({ maxBodyBytes: 1024 }, [ep("a", e1.url)]);
    const r = await post(url, chat("m", { pad: "x".repeat(5000) }));
    expect(r.status).toBe(413);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
  });

  test("a known model with no replica and none coming is 503 with Retry-After, and demand is signalled", async () => {
    const asked: string[] = [];
    const { url } = router({ demand: { requestModel: (m) => void asked.push(m) } }, []);
    const r = await post(url, chat());
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("10");
    expect(asked).toEqual(["m"]);
  });

  test("every replica unreachable: 502 after trying each, and they are cooled down", async () => {
    const { url, r } = router({ cooldownMs: 60_000 }, [ep("x", closedPort()), ep("y", closedPort())]);
    const res = await post(url, chat());
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("upstream_error");
    expect(r.balancer.endpoints().every((e) => e.cooldownUntil > Date.now())).toBe(true);
    expect(r.balancer.endpoints().every((e) => e.inflight === 0)).toBe(true);
  });
});

describe("retries and failures", () => {
  test("a refused connection is retried on another replica before any byte reached the client", async () => {
    const { url, r } = router({ maxAttempts: 3 }, [ep("dead", closedPort()), ep("live", e1.url)]);
    for (let i = 0; i < 5; i++) {
      const res = await post(url, chat("m", { messages: [{ role: "user", content: `q${i}` }] }));
      expect(res.status).toBe(200);
      expect(res.headers.get("x-llmgw-replica")).toBe("live");
    }
    expect(r.balancer.endpoints().find((e) => e.id === "dead")!.cooldownUntil).toBeGreaterThan(Date.now());
  });

  test("503 and 429 are retried elsewhere; a client's 4xx passes through and never cools the replica", async () => {
    const busy = upstream(() => new Response("busy", { status: 429 }));
    const { url, r } = router({}, [ep("busy", busy), ep("ok", e1.url)]);
    for (let i = 0; i < 4; i++) expect((await post(url, chat("m", { messages: [{ role: "user", content: `z${i}` }] }))).status).toBe(200);
    expect(r.balancer.endpoints().find((e) => e.id === "busy")!.cooldownUntil).toBe(0);
    const picky = upstream(() => Response.json({ error: { message: "max_tokens too large", type: "invalid_request_error", param: "max_tokens", code: null } }, { status: 400 }));
    const second = router({}, [ep("picky", picky)]);
    const res = await post(second.url, chat());
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe("max_tokens");
    expect(second.r.balancer.endpoints()[0]!.cooldownUntil).toBe(0);
  });

  test("an engine killed mid-stream ends the client's stream with an error event within 1 s, and the lease is released", async () => {
    // A real engine process, killed with SIGKILL while it streams: the 1 s is real time, since
    // what ends the stream is the socket's close, not a deadline of the router's.
    const proc = Bun.spawn([process.execPath, FAKE_ENGINE, "--port", "0", "--model", "m", "--ttft-ms", "1", "--token-delay-ms", "50", "--tokens", "500"], { stdout: "pipe", stderr: "pipe" });
    cleanups.push(() => proc.kill("SIGKILL"));
    const engineUrl = await engineUrlOf(proc);
    const { url, r } = router({}, [ep("d", engineUrl, { models: ["m"] })]);
    const res = await post(url, chat("m", { stream: true }));
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = dec.decode((await reader.read()).value);
    proc.kill("SIGKILL");
    const killedAt = performance.now();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    expect(performance.now() - killedAt).toBeLessThan(1000);
    const last = text.trim().split("\n\n").at(-1)!;
    expect(JSON.parse(last.slice("data: ".length))).toMatchObject({ error: { type: "server_error", code: "upstream_error" } });
    await until("lease released", () => r.balancer.endpoints()[0]!.inflight === 0);
    expect(r.balancer.endpoints()[0]!.cooldownUntil).toBeGreaterThan(Date.now());
  });

  test("a client that disconnects mid-stream aborts the engine's request and releases the lease", async () => {
    const slow = await startFakeEngine({ models: ["m"], ttftMs: 1, tokenDelayMs: 50, tokens: 200 });
    engines.push(slow);
    const { url, r } = router({}, [ep("slow", slow.url, { models: ["m"] })]);
    const ac = new AbortController();
    const res = await post(url, chat("m", { stream: true }), { signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read();
    expect(r.balancer.endpoints()[0]!.inflight).toBe(1);
    ac.abort();
    await until("the engine saw the abort", () => slow.stats().aborted >= 1);
    await until("lease released", () => r.balancer.endpoints()[0]!.inflight === 0);
  });

  test("a stream quiet longer than the idle timeout ends with an error event; no first byte in time is retried", async () => {
    let release: (() => void) | undefined;
    const gate = new Promise<void>((r) => (release = r));
    cleanups.push(() => release!());
    const stall = upstream(
      () =>
        new Response(
          new ReadableStream({
            async start(c) {
              c.enqueue(new TextEncoder().encode(sseChunk("hi")));
              await gate;
            },
          }),
          { headers: { "content-type": "text/event-stream" } },
        ),
    );
    const sa = new ManualScheduler();
    const a = router({ idleTimeoutMs: 200, scheduler: sa }, [ep("stall", stall)]);
    const res = await post(a.url, chat("m", { stream: true }));
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    // The first chunk reached the client (a real socket); then the stream goes quiet.
    let text = dec.decode((await reader.read()).value);
    expect(text).toContain('"hi"');
    // Past the idle timeout, and the sweep that acts on it (a quarter of it later at most).
    sa.advance(200 + 2 * 50);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    expect(text).toContain("no data from replica stall for 0.2s");

    const mute = hanging();
    const sb = new ManualScheduler();
    const b = router({ firstByteTimeoutMs: 200, scheduler: sb }, [ep("mute", upstream(mute.handler)), ep("ok", e2.url)]);
    const pending = post(b.url, chat("m", { messages: [{ role: "user", content: "first-byte" }] }));
    await until("the request to reach the mute replica", () => mute.arrived() === 1);
    sb.advance(200 + 2 * 50);
    const second = await pending;
    expect(second.status).toBe(200);
    expect(second.headers.get("x-llmgw-replica")).toBe("ok");
  });

  test("a long stream is not cut by the server's idle timeout", async () => {
    const slow = await startFakeEngine({ models: ["m"], ttftMs: 1, tokenDelayMs: 300, tokens: 5 });
    engines.push(slow);
    // The listener's idle timeout, lowered to 1 s here, must not apply while a request is being
    // answered. Real time, on purpose: the fake engine's token delays and the listener's own
    // idle timer are real, and the test is that the two do not meet.
    const { url } = router({ serverIdleTimeoutSec: 1 }, [ep("slow", slow.url, { models: ["m"] })]);
    const text = await (await post(url, chat("m", { stream: true }))).text();
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  });
});

describe("cold start and usage", () => {
  /** A router for an on-demand model with no replica yet, on a manual scheduler; `asked` counts the demand signals. */
  function coldRouter(opts: Partial<RouterOptions>, entry: Partial<CatalogEntry>) {
    const scheduler = new ManualScheduler();
    const asked: string[] = [];
    const { url, r } = router({ ...opts, scheduler, demand: { requestModel: (m) => void asked.push(m) } }, [], cat({ on_demand: true, ...entry }));
    /** Sends a request and returns once it is held (the demand signal comes just before the hold), with its answer to come. */
    const held = async (): Promise<{ res: Promise<Response> }> => {
      const n = asked.length;
      const res = post(url, chat());
      await until("the request to be held", () => asked.length === n + 1);
      return { res };
    };
    return { r, scheduler, asked, held };
  }

  test("an on-demand model with no replica signals demand and waits for one to appear, then proceeds", async () => {
    const { r, scheduler, asked, held } = coldRouter({}, {});
    const { res } = await held();
    expect(asked).toEqual(["m"]);
    scheduler.advance(100);
    r.setEndpoints([ep("late", e1.url)]);
    expect((await res).status).toBe(200);
  });

  test("…and gives up with 503 after the cold-start deadline", async () => {
    const { scheduler, held } = coldRouter({ coldStartTimeoutMs: 100 }, {});
    const { res } = await held();
    scheduler.advance(100);
    const r = await res;
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("30");
  });

  test("a model whose start timeout is longer than --cold-start-timeout is waited for that long; never less than --cold-start-timeout", async () => {
    const a = coldRouter({ coldStartTimeoutMs: 100 }, { start_timeout_ms: 3_000 });
    const ra = await a.held();
    a.scheduler.advance(2_999);
    a.r.setEndpoints([ep("late", e1.url)]);
    expect((await ra.res).status).toBe(200);
    // A start timeout shorter than the cold-start hold does not shorten it.
    const b = coldRouter({ coldStartTimeoutMs: 3_000 }, { start_timeout_ms: 50 });
    const rb = await b.held();
    b.scheduler.advance(2_999);
    b.r.setEndpoints([ep("late", e1.url)]);
    expect((await rb.res).status).toBe(200);
    // The 503 after the hold says how long it waited.
    const c = coldRouter({ coldStartTimeoutMs: 100 }, { start_timeout_ms: 1_500 });
    const { res } = await c.held();
    c.scheduler.advance(1_499);
    // Still held: the hold's timer is pending beside the router's deadline sweep and its
    // listener's sweep.
    expect(c.scheduler.pending).toBe(3);
    c.scheduler.advance(1);
    const r = await res;
    expect(r.status).toBe(503);
    expect(((await r.json()) as { error: { message: string } }).error.message).toContain("after waiting 2s");
  });

  test("a parked model, or one that can never run, is answered at once: 400 with its reason and code, x-should-retry: false, no Retry-After, no demand; left out of /v1/models", async () => {
    const cases = [
      { kind: "parked" as const, reason: "'m' is parked after 5 failed starts: CUDA out of memory; it is not retried until an operator runs `llmgw models unpark m`", code: "model_parked" },
      { kind: "never" as const, reason: "'m' can never fit on this fleet: no node has H200-141GB GPUs", code: "model_cannot_run" },
    ];
    for (const { kind, reason, code } of cases) {
      const wanted: string[] = [];
      const { url } = router({ scheduler: new ManualScheduler(), demand: { requestModel: (m) => void wanted.push(m) } }, [], cat({ on_demand: true, unavailable: { kind, reason } }));
      const res = await post(url, chat());
      expect(res.status).toBe(400);
      expect(res.headers.get("x-should-retry")).toBe("false");
      expect(res.headers.get("retry-after")).toBeNull();
      const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string } };
      expect(body.error).toEqual({ message: reason, type: "invalid_request_error", param: "model", code });
      expect(wanted).toEqual([]);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
      expect(models.data.map((m) => m.id)).not.toContain("m");
      expect(models.data.map((m) => m.id)).not.toContain("m-alias");
    }
  });

  test("the official SDK with its default retries gives up on a parked model after one request; a model only starting still says Retry-After", async () => {
    const { default: OpenAI } = await import("openai");
    const { url, r } = router({ scheduler: new ManualScheduler() }, [], cat({ unavailable: { kind: "parked", reason: "'m' is parked after 5 failed starts: exit 1" } }));
    let sent = 0;
    const counting: typeof fetch = Object.assign((input: string | URL | Request, init?: RequestInit) => (sent++, fetch(input, init)), { preconnect: fetch.preconnect });
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", fetch: counting });
    const err = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as Error).message).toContain("parked after 5 failed starts");
    expect(sent).toBe(1);
    // Not parked, just nothing ready yet: a plain 503 with Retry-After, which the SDK retries.
    r.setCatalog(cat());
    const starting = await post(url, chat());
    expect(starting.status).toBe(503);
    expect(starting.headers.get("x-should-retry")).toBeNull();
    expect(starting.headers.get("retry-after")).toBe("10");
  }, 30_000);

  test("a request held for a cold start is answered as soon as the model is parked, not at the deadline", async () => {
    const { r, scheduler, held } = coldRouter({ coldStartTimeoutMs: 60_000 }, {});
    const { res } = await held();
    scheduler.advance(10);
    r.setCatalog(cat({ on_demand: true, unavailable: { kind: "parked", reason: "'m' is parked after 1 failed start: exit 1" } }));
    const answer = await res;
    expect(answer.status).toBe(400);
    expect(answer.headers.get("x-should-retry")).toBe("false");
    const e = ((await answer.json()) as { error: { message: string; code: string } }).error;
    expect(e.code).toBe("model_parked");
    expect(e.message).toContain("parked");
  });

  test("last-used is absent until a request is sent (unknown, not idle), stamped by the injected clock", async () => {
    const s = new ManualScheduler(1_000_000);
    const { url, r } = router({ scheduler: s }, [ep("a", e1.url), ep("b", e2.url)]);
    expect(r.lastUsed().size).toBe(0);
    s.set(2_000_000);
    const res = await post(url, chat());
    const used = res.headers.get("x-llmgw-replica")!;
    expect([...r.lastUsed()]).toEqual([[used, 2_000_000]]);
    expect(r.inflightByModel().get("m") ?? 0).toBe(0);
    // A new router (a restart) knows nothing.
    const again = router({}, [ep("a", e1.url), ep("b", e2.url)]);
    expect(again.r.lastUsed().size).toBe(0);
  });
});

describe("router metrics", () => {
  test("/metrics has requests by model and status, latency histograms, in-flight, retries, upstream errors", async () => {
    const { url } = router({ adminToken: "admin-token-0123456789" }, [ep("dead", closedPort()), ep("a", e1.url)]);
    await post(url, chat());
    await post(url, chat("m", { messages: [{ role: "user", content: "other" }] }));
    expect((await fetch(`${url}/metrics`)).status).toBe(401);
    const text = await (await fetch(`${url}/metrics`, { headers: { authorization: "Bearer admin-token-0123456789" } })).text();
    expect(text).toContain('llmgw_router_requests_total{model="m",status="200"} 2');
    expect(text).toContain("llmgw_router_time_to_first_byte_seconds_bucket");
    expect(text).toContain("llmgw_router_request_duration_seconds_count");
    expect(text).toContain('llmgw_router_inflight_requests{endpoint="a",model="m"} 0');
    const promtool = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(text) });
    expect(promtool.stderr.toString() + promtool.stdout.toString()).toBe("");
    expect(promtool.exitCode).toBe(0);
  });
});
