// A streamed request held for a cold start, over real HTTP on a ManualScheduler: at once it gets
// 200 and text/event-stream, then an SSE comment line every --cold-start-progress-interval (and
// when the node becomes known) naming the model, the node its replica starts on
// (CatalogEntry.starting) and the seconds waited; then the engine's stream is piped into it. Failing while held (timeout, the model
// turning unavailable, the engine's own error) ends it with an OpenAI-shaped error event. And
// the number of requests held per model is bounded: the overflow is 503 with Retry-After.

import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { Router, type RouterOptions } from "../../src/router/router";
import type { CatalogEntry, EndpointInfo } from "../../src/protocol/routing";
import { type FakeEngine, startFakeEngine } from "../../src/sim/fake-engine";
import { ManualScheduler } from "../../src/lib/scheduler";
import { until } from "../helpers/until";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

let engine: FakeEngine;
const cleanups: (() => unknown)[] = [];
beforeAll(async () => {
  engine = await startFakeEngine({ models: ["m", "m-alias"], ttftMs: 1, tokenDelayMs: 1, tokens: 3 });
});
afterAll(() => engine.stop());
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const ep = (id: string, url: string): EndpointInfo => ({ id, url, models: ["m", "m-alias"], engine: "vllm", pool: "default", weight: 1, priority: 0 });
const cat = (extra: Partial<CatalogEntry> = {}): CatalogEntry[] => [{ name: "m", aliases: ["m-alias"], on_demand: true, pool: "default", created: 1, ...extra }];
const chat = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello" }], ...extra });

/** A router for a cold on-demand model on a manual scheduler; `held()` sends a request and returns once it is held. */
function cold(opts: Partial<RouterOptions> = {}, catalog = cat()) {
  const scheduler = new ManualScheduler();
  const asked: string[] = [];
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, adminToken: "admin-token-0123456789", scheduler, demand: { requestModel: (m) => void asked.push(m) }, ...opts });
  r.setCatalog(catalog);
  const { url } = r.start();
  cleanups.push(() => r.stop());
  const held = async (body = chat({ stream: true }), path = "/v1/chat/completions", signal?: AbortSignal) => {
    const n = asked.length;
    const res = fetch(`${url}${path}`, { method: "POST", body, headers: { "content-type": "application/json" }, ...(signal ? { signal } : {}) });
    await until("the request to be held", () => asked.length === n + 1);
    return { res };
  };
  return { r, url, scheduler, held };
}

/** Reads a streamed body as it comes: `text()` is what arrived so far, `done` settles at its end. */
function reader(res: Response) {
  let text = "";
  let ended = false;
  const dec = new TextDecoder();
  // A stream the test leaves unread to its end is cut when the router stops: not a failure.
  const done = (async () => {
    for await (const chunk of res.body!) text += dec.decode(chunk as Uint8Array, { stream: true });
    ended = true;
  })().catch(() => {});
  return { text: () => text, ended: () => ended, done };
}

const data = (text: string) => text.split("\n").filter((l) => l.startsWith("data: "));

describe("a streamed request held for a cold start", () => {
  test("gets 200 + text/event-stream at once, a comment line at each interval and when the node becomes known, then the engine's stream", async () => {
    const { r, scheduler, held } = cold({ coldStartProgressMs: 5_000 });
    const { res } = await held();
    const answer = await res;
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toBe("text/event-stream");
    expect(answer.headers.get("cache-control")).toBe("no-cache");
    // The hold's deadline and the comment interval, beside the router's sweep and the listener's.
    expect(scheduler.pending).toBe(4);
    const body = reader(answer);
    await until("the first comment", () => body.text().length > 0);
    expect(body.text()).toBe(": starting m, 0 s\n\n");
    scheduler.advance(4_999);
    expect(body.text()).toBe(": starting m, 0 s\n\n");
    scheduler.advance(1);
    await until("the second comment", () => body.text().includes("5 s"));
    expect(body.text()).toBe(": starting m, 0 s\n\n: starting m, 5 s\n\n");
    // The control plane says where the replica starts: a comment names the node at once.
    scheduler.advance(2_000);
    r.setCatalog(cat({ starting: { node: "h100-2", since: 0 } }));
    await until("the comment naming the node", () => body.text().includes("h100-2"));
    expect(body.text().endsWith(": starting m on h100-2, 7 s\n\n")).toBe(true);
    // An unchanged catalog or endpoint list says nothing new.
    r.setCatalog(cat({ starting: { node: "h100-2", since: 0 } }));
    scheduler.advance(3_000);
    await until("the third interval's comment", () => body.text().includes("10 s"));
    // Ready: the engine's stream follows in the same response, whole.
    r.setEndpoints([ep("late", engine.url)]);
    await body.done;
    const text = body.text();
    const firstData = text.indexOf("data: ");
    expect(text.slice(0, firstData).split("\n\n").filter(Boolean)).toEqual([": starting m, 0 s", ": starting m, 5 s", ": starting m on h100-2, 7 s", ": starting m on h100-2, 10 s"]);
    const events = data(text);
    expect(events.at(-1)).toBe("data: [DONE]");
    const chunks = events.slice(0, -1).map((l) => JSON.parse(l.slice(6)) as { object: string; choices: { delta: { content?: string } }[] });
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("").length).toBeGreaterThan(0);
    // Nothing is held any more: no timer of the hold is left.
    expect(r.heldByModel().size).toBe(0);
    expect(scheduler.pending).toBe(2);
  });

  test("while the replica's node fetches its weights, the comments say how far, from where", async () => {
    const { r, scheduler, held } = cold({ coldStartProgressMs: 5_000 });
    const { res } = await held();
    const body = reader(await res);
    await until("the first comment", () => body.text().length > 0);
    scheduler.advance(3_000);
    r.setCatalog(cat({ starting: { node: "h100-2", since: 0, fetching: "42 % (56 GiB/134 GiB) from h100-3, 1.1 GiB/s, about 70s left" } }));
    scheduler.advance(2_000);
    await until("the fetching comment", () => body.text().includes("fetching"));
    expect(body.text().split("\n\n").filter(Boolean).at(-1)).toBe(": fetching weights of m on h100-2: 42 % (56 GiB/134 GiB) from h100-3, 1.1 GiB/s, about 70s left, 5 s");
    r.setEndpoints([ep("late", engine.url)]);
    await body.done;
  });

  test("a request not streamed, or to a path that does not stream SSE, waits silently as before", async () => {
    const { r, scheduler, held } = cold();
    const plain = await held(chat());
    const embed = await held(JSON.stringify({ model: "m", input: "x", stream: true }), "/v1/embeddings");
    // Two holds, no grace timers.
    expect(scheduler.pending).toBe(4);
    scheduler.advance(30_000);
    r.setEndpoints([ep("late", engine.url)]);
    const a = await plain.res;
    expect(a.status).toBe(200);
    expect(((await a.json()) as { object: string }).object).toBe("chat.completion");
    expect((await embed.res).headers.get("x-llmgw-replica")).toBe("late");
  });

  test("the model turning unavailable while held ends the stream with an OpenAI-shaped error event; the official SDK raises it", async () => {
    const { default: OpenAI } = await import("openai");
    const { r, url } = cold();
    const reason = "'m' can never fit on this fleet: no node has H200-141GB GPUs";
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", maxRetries: 0 });
    const created = client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true });
    await until("the request to be held", () => r.heldByModel().get("m") === 1);
    const stream = await created;
    r.setCatalog(cat({ unavailable: { kind: "never", reason } }));
    const err = await (async () => {
      for await (const _ of stream) {
        // no chunk comes
      }
    })().catch((e: unknown) => e);
    expect((err as Error).message).toContain(reason);
    // The same over plain HTTP: one error event with the reason and its code, then the end.
    r.setCatalog(cat());
    const res = fetch(`${url}/v1/completions`, { method: "POST", body: JSON.stringify({ model: "m-alias", prompt: "x", stream: true }) });
    await until("the second request to be held", () => r.heldByModel().get("m") === 1);
    const body = reader(await res);
    await until("the comment", () => body.text().length > 0);
    r.setCatalog(cat({ unavailable: { kind: "never", reason } }));
    await body.done;
    const events = data(body.text());
    expect(events).toHaveLength(1);
    expect(JSON.parse(events[0]!.slice(6))).toEqual({ error: { message: reason, type: "invalid_request_error", param: "model", code: "model_cannot_run" } });
    expect(body.text().startsWith(": starting m, 0 s\n\n")).toBe(true);
  }, 30_000);

  test("the hold timing out ends the stream with an error event saying how long it waited", async () => {
    const { scheduler, held } = cold({ coldStartTimeoutMs: 12_000, coldStartProgressMs: 5_000 });
    const { res } = await held(chat({ stream: true }), "/v1/responses");
    const body = reader(await res);
    scheduler.advance(12_000);
    await body.done;
    expect(body.text().split("\n\n").filter((l) => l.startsWith(":"))).toEqual([": starting m, 0 s", ": starting m, 5 s", ": starting m, 10 s"]);
    const events = data(body.text());
    expect(events).toHaveLength(1);
    const e = JSON.parse(events[0]!.slice(6)) as { error: { message: string; code: string } };
    expect(e.error.code).toBe("model_not_ready");
    expect(e.error.message).toContain("after waiting 12s");
  });

  test("an engine that answers an error once the stream is open: its error becomes the event", async () => {
    const up = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => Response.json({ error: { message: "max_tokens is too large", type: "invalid_request_error", param: "max_tokens", code: null } }, { status: 400 }) });
    cleanups.push(() => up.stop(true));
    const { r, held } = cold();
    const { res } = await held();
    const body = reader(await res);
    r.setEndpoints([ep("e", `http://127.0.0.1:${up.port}`)]);
    await body.done;
    expect(data(body.text())).toEqual([`data: ${JSON.stringify({ error: { message: "max_tokens is too large", type: "invalid_request_error", param: "max_tokens", code: null } })}`]);
  });

  test("a replica that cannot be reached once the stream is open: every attempt failed, said as an error event", async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
    const dead = `http://127.0.0.1:${closed.port}`;
    await closed.stop(true);
    const { r, held } = cold();
    const { res } = await held();
    const body = reader(await res);
    r.setEndpoints([ep("dead", dead)]);
    await body.done;
    const events = data(body.text());
    expect(events).toHaveLength(1);
    const e = JSON.parse(events[0]!.slice(6)) as { error: { message: string; code: string } };
    expect(e.error.code).toBe("upstream_error");
    expect(e.error.message).toContain("cannot reach replica dead");
  });

  test("a node name that would break the line stays on one line", async () => {
    const { held } = cold({}, cat({ starting: { node: "n1\n\ndata: {\"forged\":1}\r", since: 0 } }));
    const { res } = await held();
    const body = reader(await res);
    await until("the comment", () => body.text().endsWith("\n\n"));
    const lines = body.text().split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    expect(lines[0]!.startsWith(": starting m on n1")).toBe(true);
    expect(lines[0]!.endsWith(", 0 s")).toBe(true);
  });
});

describe("held requests per model are bounded", () => {
  test("past --max-held-per-model a request is refused 503 with Retry-After, naming the model and the cap, and counted", async () => {
    const { r, url, scheduler, held } = cold({ maxHeldPerModel: 2, coldStartTimeoutMs: 60_000 });
    const ac = new AbortController();
    const a = await held(chat({ stream: true }), "/v1/chat/completions", ac.signal);
    const b = await held(chat());
    expect(r.heldByModel().get("m")).toBe(2);
    const over = await fetch(`${url}/v1/chat/completions`, { method: "POST", body: chat({ model: "m-alias", stream: true }) });
    expect(over.status).toBe(503);
    expect(over.headers.get("retry-after")).toBe("10");
    expect(over.headers.get("x-should-retry")).toBeNull();
    const e = ((await over.json()) as { error: { message: string; code: string } }).error;
    expect(e.code).toBe("too_many_waiting");
    expect(e.message).toContain("'m'");
    expect(e.message).toContain("--max-held-per-model 2");
    const metrics = await (await fetch(`${url}/metrics`, { headers: { authorization: "Bearer admin-token-0123456789" } })).text();
    expect(metrics).toContain('llmgw_router_requests_total{model="m",status="503"} 1');
    expect(metrics).toContain('llmgw_router_held_requests{model="m"} 2');
    const promtool = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(metrics) });
    expect(promtool.stderr.toString() + promtool.stdout.toString()).toBe("");
    // A held request ending (its client gone) frees its place.
    ac.abort();
    await a.res.catch(() => {});
    await until("the aborted hold to end", () => r.heldByModel().get("m") === 1);
    const c = await held(chat());
    expect(r.heldByModel().get("m")).toBe(2);
    scheduler.advance(100);
    r.setEndpoints([ep("late", engine.url)]);
    expect((await b.res).status).toBe(200);
    expect((await c.res).status).toBe(200);
    expect(r.heldByModel().size).toBe(0);
  });
});
