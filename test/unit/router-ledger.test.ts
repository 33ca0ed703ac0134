// The router's usage ledger (src/router/ledger.ts) as the proxy fills it, and the usage the router
// asks engines for (src/router/usage-stream.ts): streamed requests counted from the engine's own
// usage, cached tokens kept, the router's own stream_options invisible to the client and not
// counted twice, a cut stream counted with what it streamed, a retry counted once. The engine is
// scripted (no socket, no timer), with a real OpenAI stream as the model of its chunks.

import { describe, expect, test } from "bun:test";
import type { ExchangeHandler } from "../../src/http/client";
import { UpstreamError, UpstreamHead } from "../../src/http/client";
import { ClientExchange, type ExchangeConn, RequestHeaders } from "../../src/http/exchange";
import { Pieces } from "../../src/http/wire";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { EndpointInfo } from "../../src/protocol/routing";
import { Admission } from "../../src/router/admission";
import { Balancer } from "../../src/router/balancer";
import { Catalog } from "../../src/router/catalog";
import { ColdStart } from "../../src/router/cold-start";
import { Deadlines } from "../../src/router/deadlines";
import { INFERENCE_PATHS } from "../../src/router/dispatch";
import { AnswerHeaders } from "../../src/router/headers";
import { Ledger } from "../../src/router/ledger";
import { RouterMetrics } from "../../src/router/metrics";
import { type ProxyContext, proxy } from "../../src/router/proxy";
import { readBody } from "../../src/router/request-body";
import { ResponseIds } from "../../src/router/response-ids";
import { UsageStrip, withUsage } from "../../src/router/usage-stream";
import { readFixture } from "../fixtures/read";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";

const enc = new TextEncoder();
const dec = new TextDecoder();

class Recorder implements ExchangeConn {
  keepAlive = true;
  readonly address = "127.0.0.1";
  readonly socket = { remotePort: 1, remoteFamily: "IPv4" as const };
  out = "";
  write(data: Uint8Array): boolean {
    this.out += dec.decode(data);
    return true;
  }
  writeString(text: string): boolean {
    this.out += text;
    return true;
  }
  done(): void {}
  kill(): void {}
  authenticate(): void {}
}

interface Sent {
  body: string;
  handler: ExchangeHandler;
}

const ep = (id: string): EndpointInfo => ({ id, url: `http://10.0.0.1:${id === "a" ? 8001 : 8002}`, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0 });
const HOUR = 3_600_000;

function setup() {
  const time = new ManualScheduler();
  // Into an hour, not at its start.
  time.advance(HOUR - (time.now() % HOUR) + 1234);
  const hour = time.now() - 1234;
  const balancer = new Balancer({ ...BALANCER_DEFAULTS, now: () => time.now() });
  balancer.setEndpoints([ep("a"), ep("b")]);
  const catalog = new Catalog();
  catalog.set([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 0 }]);
  const metrics = new RouterMetrics({ inflightByEndpoint: () => [], inflightByModel: () => balancer.inflightByModel(), heldByModel: () => new Map() });
  const sent: Sent[] = [];
  const ledger = new Ledger(time);
  ledger.setKeys([{ name: "svc", sha256: "k1", pool: null, team: "search" }]);
  const ctx: ProxyContext = {
    settings: { maxAttempts: 3, firstByteTimeoutMs: 1000, idleTimeoutMs: 1000, cooldownMs: 5000 },
    balancer,
    upstream: {
      post: (_url, _path, body, _extra, handler) => {
        sent.push({ body: dec.decode(body), handler });
        return { abort() {}, pause() {}, resume() {} } as never;
      },
    },
    deadlines: new Deadlines(0),
    time,
    metrics,
    headers: new AnswerHeaders(),
    responses: new ResponseIds(),
    catalog,
    admission: new Admission(time),
    ledger,
    internalError: (_ex, e) => {
      throw e;
    },
  };
  const request = (body: object, path = "/v1/chat/completions", owner = "k1") => {
    const conn = new Recorder();
    const bytes = enc.encode(JSON.stringify(body));
    const ex = new ClientExchange(conn, "POST", path, path, new RequestHeaders([], []), bytes, false);
    proxy(ctx, { ex, facts: readBody(bytes, { maxDepth: 64, maxValues: 1000 }).facts!, pool: undefined, owner, pin: undefined, t0: time.mono() });
    return { conn, ex };
  };
  return { time, hour, sent, ledger, request };
}

/** The fixture's payloads: a real stream asked with include_usage (every chunk "usage":null, then the usage chunk). */
const WITH_USAGE = readFixture("openai/langchain-openai-OPENAI_STREAM_DATA__gpt-4o-include_usage.jsonl").trim().split("\n");
/** The same stream as the engine sends it to a client that did not ask: no usage anywhere. */
const WITHOUT_USAGE = WITH_USAGE.flatMap((line) => {
  if (line === "[DONE]") return [line];
  const o = JSON.parse(line) as { choices: unknown[]; usage?: unknown };
  if (o.choices.length === 0) return [];
  delete o.usage;
  return [JSON.stringify(o)];
});
const sse = (payloads: string[]) => payloads.map((p) => `data: ${p}\n\n`).join("");
/** The usage chunk with cached tokens, as vLLM reports prefix-cache hits. */
const withCached = (payloads: string[]) => payloads.map((p) => p.replace('"usage":{"prompt_tokens":14,', '"usage":{"prompt_tokens":14,"prompt_tokens_details":{"cached_tokens":9},'));

/** An engine's SSE answer, `text` cut into reads of `size` bytes. */
function stream(h: ExchangeHandler, text: string, size = 1 << 20, end = true): void {
  h.onHead(new UpstreamHead(200, ["content-type"], ["text/event-stream"], -1));
  const bytes = enc.encode(text);
  for (let at = 0; at < bytes.length; at += size) {
    // Each read in a fresh buffer, as the engine client hands them over.
    const read = bytes.slice(at, Math.min(at + size, bytes.length));
    h.onBytes!(read, 0, read.length);
    h.onReadEnd!();
  }
  if (end) h.onEnd();
}

const bodyOf = (out: string) => out.slice(out.indexOf("\r\n\r\n") + 4);
/** A chunked body's payload. */
function unchunk(body: string): string {
  let out = "";
  let rest = body;
  for (;;) {
    const nl = rest.indexOf("\r\n");
    const n = Number.parseInt(rest.slice(0, nl), 16);
    if (!(n > 0)) return out;
    const bytes = enc.encode(rest.slice(nl + 2));
    out += dec.decode(bytes.subarray(0, n));
    rest = dec.decode(bytes.subarray(n + 2));
  }
}

describe("the router's ledger", () => {
  test("a streamed request is counted from the engine's usage, not zero, with its cached tokens; the client sees the stream it would have without the router's stream_options", () => {
    for (const size of [1 << 20, 300, 120]) {
      const s = setup();
      const { conn } = s.request({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });
      const sentBody = JSON.parse(s.sent[0]!.body) as { stream_options?: unknown; messages: unknown };
      expect(sentBody.stream_options).toEqual({ include_usage: true });
      expect(sentBody.messages).toEqual([{ role: "user", content: "hi" }]);
      stream(s.sent[0]!.handler, sse(withCached(WITH_USAGE)), size);
      expect(unchunk(bodyOf(conn.out))).toBe(sse(WITHOUT_USAGE));
      const rows = s.ledger.take();
      expect(rows).toEqual([
        { team: "search", key: "svc", model: "m", hour: s.hour, requests: 1, prompt_tokens: 14, completion_tokens: 3, cached_tokens: 9, errors: 0, errors_4xx: 0, errors_5xx: 0, refused: 0, aborted: 0, gpu_seconds: 0 },
      ]);
    }
  });

  test("a client that asked for include_usage gets the usage chunk, its body goes untouched, and the usage is counted once", () => {
    const s = setup();
    const asked = { model: "m", stream: true, stream_options: { include_usage: true }, messages: [] };
    const { conn } = s.request(asked);
    expect(s.sent[0]!.body).toBe(JSON.stringify(asked));
    stream(s.sent[0]!.handler, sse(WITH_USAGE));
    expect(unchunk(bodyOf(conn.out))).toBe(sse(WITH_USAGE));
    expect(s.ledger.take()).toMatchObject([{ requests: 1, prompt_tokens: 14, completion_tokens: 3 }]);
  });

  test("stream_options of the client's own without include_usage are kept beside it", () => {
    const facts = readBody(enc.encode('{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}'), { maxDepth: 8, maxValues: 100 }).facts!;
    const out = JSON.parse(dec.decode(withUsage(enc.encode('{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}'), facts)));
    expect(out.stream_options).toEqual({ continuous_usage_stats: false, include_usage: true });
    const nulled = readBody(enc.encode('{"model":"m","stream":true,"stream_options":null}'), { maxDepth: 8, maxValues: 100 }).facts!;
    expect(JSON.parse(dec.decode(withUsage(enc.encode('{"model":"m","stream":true,"stream_options":null}'), nulled))).stream_options).toEqual({ include_usage: true });
  });

  test("a stream the client leaves is counted in aborted with the tokens it streamed", () => {
    const s = setup();
    const { ex } = s.request({ model: "m", stream: true, messages: [] });
    // The role chunk and two content chunks, then the client goes.
    stream(s.sent[0]!.handler, sse(WITH_USAGE.slice(0, 3)), 1 << 20, false);
    ex.abort();
    expect(s.ledger.take()).toMatchObject([{ requests: 1, prompt_tokens: 0, completion_tokens: 2, aborted: 1, errors: 0 }]);
  });

  test("a stream the engine cuts is counted in aborted and as a 5xx, with the tokens it streamed; the client gets what was streamed and an error event", () => {
    const s = setup();
    const { conn } = s.request({ model: "m", stream: true, messages: [] });
    stream(s.sent[0]!.handler, sse(WITH_USAGE.slice(0, 4)), 1 << 20, false);
    s.sent[0]!.handler.onError(new UpstreamError("reset", "connection closed by the engine mid-response"), true);
    expect(unchunk(bodyOf(conn.out))).toStartWith(sse(WITHOUT_USAGE.slice(0, 4)));
    expect(conn.out).toContain("failed mid-stream");
    expect(s.ledger.take()).toMatchObject([{ requests: 1, completion_tokens: 3, aborted: 1, errors: 1, errors_5xx: 1 }]);
  });

  test("a retry before the first byte counts once, with the usage of the attempt that answered", () => {
    const s = setup();
    s.request({ model: "m", messages: [] });
    const busy = enc.encode('{"error":"busy"}');
    const first = s.sent[0]!.handler;
    first.onHead(new UpstreamHead(503, ["content-type"], ["application/json"], busy.length));
    first.onBytes!(busy, 0, busy.length);
    first.onEnd();
    expect(s.sent).toHaveLength(2);
    const whole = enc.encode('{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":21,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":16}}}');
    const second = s.sent[1]!.handler;
    second.onHead(new UpstreamHead(200, ["content-type"], ["application/json"], whole.length));
    second.onBytes!(whole, 0, whole.length);
    second.onEnd();
    expect(s.ledger.take()).toMatchObject([{ requests: 1, prompt_tokens: 21, completion_tokens: 4, cached_tokens: 16, errors: 0 }]);
  });

  test("embeddings are counted by their prompt tokens; requests without a key count under key and team ''", () => {
    const s = setup();
    s.request({ model: "m", input: "x" }, "/v1/embeddings", "");
    const body = enc.encode('{"object":"list","data":[],"usage":{"prompt_tokens":5,"total_tokens":5}}');
    const h = s.sent[0]!.handler;
    expect(s.sent[0]!.body).not.toContain("stream_options");
    h.onHead(new UpstreamHead(200, ["content-type"], ["application/json"], body.length));
    h.onBytes!(body, 0, body.length);
    h.onEnd();
    expect(s.ledger.take()).toMatchObject([{ team: "", key: "", model: "m", requests: 1, prompt_tokens: 5, completion_tokens: 0 }]);
  });

  test("every inference path is counted, each request once, with the usage its answer gives", () => {
    const s = setup();
    for (const path of INFERENCE_PATHS) {
      s.request({ model: "m", input: "x" }, path);
      const body = enc.encode('{"usage":{"prompt_tokens":3,"completion_tokens":1}}');
      const h = s.sent.at(-1)!.handler;
      h.onHead(new UpstreamHead(200, ["content-type"], ["application/json"], body.length));
      h.onBytes!(body, 0, body.length);
      h.onEnd();
    }
    expect(s.ledger.take()).toMatchObject([{ requests: INFERENCE_PATHS.length, prompt_tokens: 3 * INFERENCE_PATHS.length, completion_tokens: INFERENCE_PATHS.length }]);
  });

  test("a key using several models in turn keeps a row per model; a renamed key's rows so far keep its old name", () => {
    const s = setup();
    for (const m of ["a", "b", "a", "a", "c", "b"]) s.ledger.answered("k1", m, 200, 1, 1, 0, false);
    s.ledger.setKeys([{ name: "svc2", sha256: "k1", pool: null }]);
    s.ledger.answered("k1", "a", 200, 1, 1, 0, false);
    expect(s.ledger.take().map((r) => [r.key, r.team, r.model, r.requests])).toEqual([
      ["svc", "search", "a", 3],
      ["svc", "search", "b", 2],
      ["svc", "search", "c", 1],
      ["svc2", "", "a", 1],
    ]);
  });

  test("rows are handed over as deltas, and a new hour starts a new row", () => {
    const s = setup();
    s.ledger.answered("k1", "m", 200, 10, 2, 0, false);
    s.ledger.answered("k1", "m", 404, 0, 0, 0, false);
    s.ledger.refused("k1", "m");
    expect(s.ledger.take()).toMatchObject([{ requests: 3, prompt_tokens: 10, errors: 2, errors_4xx: 1, refused: 1 }]);
    expect(s.ledger.take()).toEqual([]);
    s.ledger.answered("k1", "m", 200, 1, 1, 0, false);
    s.time.advance(HOUR);
    s.ledger.answered("k1", "m", 502, 0, 0, 0, true);
    const rows = s.ledger.take();
    expect(rows.map((r) => [r.hour, r.requests, r.errors_5xx, r.aborted])).toEqual([
      [s.hour, 1, 0, 0],
      [s.hour + HOUR, 1, 1, 1],
    ]);
  });

  test("a request cold start answers itself (an unknown model, none ready) is counted once, as an error", () => {
    const s = setup();
    const catalog = new Catalog();
    catalog.set([{ name: "m", aliases: ["alias"], on_demand: false, pool: "default", created: 0 }]);
    const metrics = new RouterMetrics({ inflightByEndpoint: () => [], inflightByModel: () => new Map(), heldByModel: () => new Map() });
    const cold = new ColdStart({
      settings: { coldStartTimeoutMs: 1000, coldStartProgressMs: 1000, maxHeldPerModel: 1 },
      balancer: { has: () => false },
      catalog,
      scheduler: s.time,
      metrics,
      demand: undefined,
      log: undefined,
      ledger: s.ledger,
      serving: () => true,
      proxy: () => {
        throw new Error("no replica here");
      },
      internalError: (_ex, e) => {
        throw e;
      },
    });
    for (const model of ["nope", "alias"]) {
      const bytes = enc.encode(JSON.stringify({ model }));
      const ex = new ClientExchange(new Recorder(), "POST", "/v1/chat/completions", "/v1/chat/completions", new RequestHeaders([], []), bytes, false);
      cold.hold({ ex, facts: readBody(bytes, { maxDepth: 8, maxValues: 100 }).facts!, pool: undefined, owner: "k1", pin: undefined, t0: 0 }, false);
    }
    expect(s.ledger.take().map((r) => [r.model, r.requests, r.errors, r.errors_4xx, r.errors_5xx])).toEqual([
      ["nope", 1, 1, 1, 0],
      ["m", 1, 1, 0, 1],
    ]);
  });

  test("the strip holds a line cut by a read until its end, whatever the reads' sizes, with LF LF or CR LF CR LF between events", () => {
    for (const eol of ["\n\n", "\r\n\r\n"]) {
      const frame = (payloads: string[]) => payloads.map((p) => `data: ${p}${eol}`).join("");
      const bytes = enc.encode(frame(WITH_USAGE));
      for (let size = 1; size <= 9; size++) {
        const strip = new UsageStrip();
        const out = new Pieces();
        for (let at = 0; at < bytes.length; at += size) {
          const read = bytes.slice(at, Math.min(at + size, bytes.length));
          strip.pass(read, 0, read.length, out);
        }
        strip.flush(out);
        expect(dec.decode(out.bytes())).toBe(frame(WITHOUT_USAGE));
      }
    }
  });
});
