// The proxy (src/router/proxy.ts) on its own, over the small context it declares: a real
// balancer and real metrics, a scripted engine client and a client exchange on a connection that
// only records what is written. No socket and no timer: each answer's bytes are what the client
// would read, and each lease, retry and count is checked as it happens.

import { describe, expect, test } from "bun:test";
import type { ExchangeHandler, ExtraHeaders } from "../../src/http/client";
import { UpstreamError, UpstreamHead } from "../../src/http/client";
import { ClientExchange, type ExchangeConn, RequestHeaders } from "../../src/http/exchange";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { EndpointInfo } from "../../src/protocol/routing";
import { Admission } from "../../src/router/admission";
import { Balancer } from "../../src/router/balancer";
import { Catalog } from "../../src/router/catalog";
import { Deadlines } from "../../src/router/deadlines";
import { Ledger } from "../../src/router/ledger";
import { AnswerHeaders } from "../../src/router/headers";
import { RouterMetrics } from "../../src/router/metrics";
import { type ProxyContext, type ProxyRequest, proxy } from "../../src/router/proxy";
import { readBody } from "../../src/router/request-body";
import { ResponseIds } from "../../src/router/response-ids";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A connection that keeps what the exchange writes. */
class Recorder implements ExchangeConn {
  keepAlive = true;
  readonly address = "127.0.0.1";
  readonly socket = { remotePort: 1, remoteFamily: "IPv4" as const };
  out = "";
  /** The exchange said its answer is done. */
  finished = false;
  killed = false;
  write(data: Uint8Array): boolean {
    this.out += dec.decode(data);
    return true;
  }
  writeString(text: string): boolean {
    this.out += text;
    return true;
  }
  done(): void {
    this.finished = true;
  }
  kill(): void {
    this.killed = true;
  }
  authenticate(): void {}
}

/** One request to the engine, as the proxy sent it; the test plays the engine's part. */
interface Sent {
  url: string;
  path: string;
  body: string;
  extra: ExtraHeaders;
  key: string | undefined;
  handler: ExchangeHandler;
  aborted: boolean;
}

function setup(endpoints: EndpointInfo[], settings: Partial<ProxyContext["settings"]> = {}) {
  const time = new ManualScheduler();
  const balancer = new Balancer({ ...BALANCER_DEFAULTS, now: () => time.now() });
  balancer.setEndpoints(endpoints);
  const catalog = new Catalog();
  catalog.set([{ name: "m", aliases: ["alias"], on_demand: false, pool: "default", created: 0 }]);
  const metrics = new RouterMetrics({ inflightByEndpoint: () => [], inflightByModel: () => balancer.inflightByModel(), heldByModel: () => new Map() });
  const sent: Sent[] = [];
  const errors: unknown[] = [];
  const cooled: string[] = [];
  const deadlines = new Deadlines(0);
  const ctx: ProxyContext = {
    settings: { maxAttempts: 3, firstByteTimeoutMs: 1000, idleTimeoutMs: 1000, cooldownMs: 5000, ...settings },
    balancer: {
      acquire: (...a) => balancer.acquire(...a),
      acquireOn: (...a) => balancer.acquireOn(...a),
      cooldown: (id, ms) => {
        cooled.push(id);
        balancer.cooldown(id, ms);
      },
    },
    upstream: {
      post: (url, path, body, extra, handler, key) => {
        const s: Sent = { url, path, body: dec.decode(body), extra, key, handler, aborted: false };
        sent.push(s);
        return { abort: () => (s.aborted = true), pause() {}, resume() {} } as never;
      },
    },
    deadlines,
    time,
    metrics,
    headers: new AnswerHeaders(),
    responses: new ResponseIds(),
    catalog,
    admission: new Admission(time),
    ledger: new Ledger(time),
    internalError: (_ex, e) => errors.push(e),
  };
  const request = (body: object, names: string[] = [], values: string[] = []) => {
    const conn = new Recorder();
    const bytes = enc.encode(JSON.stringify(body));
    const ex = new ClientExchange(conn, "POST", "/v1/chat/completions", "/v1/chat/completions", new RequestHeaders(names, values), bytes, false);
    const read = readBody(bytes, { maxDepth: 64, maxValues: 1000 });
    const req: ProxyRequest = { ex, facts: read.facts!, pool: undefined, owner: "", pin: undefined, t0: time.mono() };
    proxy(ctx, req);
    return { conn, ex };
  };
  return { time, deadlines, balancer, metrics, sent, errors, cooled, request };
}

/** A replica of m, published under its name and its alias as the control plane does. */
const ep = (id: string): EndpointInfo => ({ id, url: `http://10.0.0.1:${id === "a" ? 8001 : 8002}`, models: ["m", "alias"], engine: "vllm", pool: "default", weight: 1, priority: 0, key: `key-${id}` });
const head = (status: number, names: string[], values: string[], length: number) => new UpstreamHead(status, names, values, length);
const inflight = (b: Balancer) => b.endpoints().reduce((n, e) => n + e.inflight, 0);

/** An engine answer in one read: its head, its body, the end. */
function answer(h: ExchangeHandler, status: number, type: string, body: string, chunked = false): void {
  const bytes = enc.encode(body);
  h.onHead(head(status, ["content-type", "date"], [type, "x"], chunked ? -1 : bytes.length));
  h.onBytes!(bytes, 0, bytes.length);
  h.onReadEnd?.();
  h.onEnd();
}

describe("proxy over its context", () => {
  test("a whole answer over several reads is sent whole once it ends, not streamed from its first read", () => {
    const s = setup([ep("a")]);
    const { conn } = s.request({ model: "m", messages: [] });
    const h = s.sent[0]!.handler;
    const body = enc.encode('{"choices":[],"usage":{"completion_tokens":2}}');
    h.onHead(head(200, ["content-type"], ["application/json"], body.length));
    h.onBytes!(body, 0, 10);
    h.onReadEnd!();
    expect(conn.out).toBe("");
    h.onBytes!(body, 10, body.length);
    h.onEnd();
    expect(conn.out).toContain(`content-length: ${body.length}\r\n`);
    expect(conn.out).toEndWith(`\r\n\r\n${dec.decode(body)}`);
    expect(inflight(s.balancer)).toBe(0);
  });


  test("a whole answer: one write to the client with the replica's head; the engine gets the body, its key and the traced headers; the lease goes back", () => {
    const s = setup([ep("a")]);
    const { conn } = s.request({ model: "m", messages: [{ role: "user", content: "hi" }] }, ["x-request-id", "cookie"], ["r-1", "secret"]);
    expect(s.sent).toHaveLength(1);
    const up = s.sent[0]!;
    expect([up.url, up.path, up.key, up.extra]).toEqual(["http://10.0.0.1:8001", "/v1/chat/completions", "key-a", [["x-request-id", "r-1"]]]);
    expect(JSON.parse(up.body).model).toBe("m");
    expect(inflight(s.balancer)).toBe(1);
    answer(up.handler, 200, "application/json", '{"choices":[],"usage":{"completion_tokens":7}}');
    expect(conn.out).toStartWith("HTTP/1.1 200 OK\r\n");
    expect(conn.out).toContain("x-llmgw-replica: a\r\ncontent-type: application/json\r\ncontent-length: 46\r\n");
    expect(conn.out).toEndWith('\r\n\r\n{"choices":[],"usage":{"completion_tokens":7}}');
    expect(conn.finished).toBe(true);
    expect(inflight(s.balancer)).toBe(0);
    expect(s.metrics.traffic(["m"])[0]).toMatchObject({ model: "m", requests: 1, errors: 0, output_tokens: 7 });
  });

  test("a replica that answers 503 before any byte is passed over: the next one answers, the retry is counted, the first cools down", () => {
    const s = setup([ep("a"), ep("b")]);
    const { conn } = s.request({ model: "m", messages: [] });
    const first = s.sent[0]!;
    answer(first.handler, 503, "application/json", '{"error":"busy"}');
    expect(s.sent).toHaveLength(2);
    const second = s.sent[1]!;
    expect(second.url).not.toBe(first.url);
    expect(s.cooled).toEqual([first.url.endsWith("8001") ? "a" : "b"]);
    answer(second.handler, 200, "application/json", "{}");
    expect(conn.out).toStartWith("HTTP/1.1 200 OK\r\n");
    expect(s.metrics.render()).toContain('llmgw_router_retries_total{model="m",reason="http_503"} 1');
    expect(inflight(s.balancer)).toBe(0);
  });

  test("every attempt failing ends in a 502 counted under the model's own name, even when asked by an alias", () => {
    const s = setup([ep("a"), ep("b")], { maxAttempts: 2 });
    const { conn } = s.request({ model: "alias", messages: [] });
    s.sent[0]!.handler.onError(new UpstreamError("connect", "cannot connect: ECONNREFUSED"), false);
    s.sent[1]!.handler.onError(new UpstreamError("reset", "connection closed by the engine before answering"), false);
    expect(s.sent).toHaveLength(2);
    expect(conn.out).toStartWith("HTTP/1.1 502 Bad Gateway\r\n");
    expect(conn.out).toContain("upstream failure for model 'alias'");
    expect(s.metrics.render()).toContain('llmgw_router_requests_total{model="m",status="502"} 1');
    expect(inflight(s.balancer)).toBe(0);
  });

  test("a stream cut mid-way ends with an SSE error event and the last chunk; 502, and the replica cools down", () => {
    const s = setup([ep("a")]);
    const { conn } = s.request({ model: "m", stream: true, messages: [] });
    const h = s.sent[0]!.handler;
    h.onHead(head(200, ["content-type"], ["text/event-stream"], -1));
    const ev = enc.encode('data: {"choices":[{"delta":{"content":"hi"}}]}\n\n');
    h.onBytes!(ev, 0, ev.length);
    h.onReadEnd!();
    expect(conn.out).toContain("transfer-encoding: chunked\r\n\r\n");
    h.onError(new UpstreamError("reset", "connection closed by the engine mid-response"), true);
    expect(conn.out).toContain("replica a failed mid-stream");
    expect(conn.out).toEndWith("\r\n0\r\n\r\n");
    expect(s.cooled).toEqual(["a"]);
    expect(s.metrics.render()).toContain('llmgw_router_requests_total{model="m",status="502"} 1');
    expect(s.metrics.traffic(["m"])[0]!.output_tokens).toBe(1);
  });

  test("a client that goes away mid-stream drops the engine's request: 499, the lease back, nothing more written", () => {
    const s = setup([ep("a")]);
    const { conn, ex } = s.request({ model: "m", stream: true, messages: [] });
    const up = s.sent[0]!;
    up.handler.onHead(head(200, ["content-type"], ["text/event-stream"], -1));
    const ev = enc.encode("data: {}\n\n");
    up.handler.onBytes!(ev, 0, ev.length);
    up.handler.onReadEnd!();
    const written = conn.out;
    ex.abort();
    expect(up.aborted).toBe(true);
    expect(conn.out).toBe(written);
    expect(inflight(s.balancer)).toBe(0);
    expect(s.metrics.render()).toContain('llmgw_router_requests_total{model="m",status="499"} 1');
  });

  test("no first byte within the deadline: the sweep drops the attempt and the request goes to another replica", () => {
    const s = setup([ep("a"), ep("b")], { firstByteTimeoutMs: 1000 });
    const { conn } = s.request({ model: "m", messages: [] });
    const first = s.sent[0]!;
    // The router's sweep, as it runs every tick: nothing is due yet, then the deadline has passed.
    s.deadlines.sweep(999, 10, (e) => s.errors.push(e));
    expect(s.sent).toHaveLength(1);
    s.deadlines.sweep(1001, 10, (e) => s.errors.push(e));
    expect(first.aborted).toBe(true);
    expect(s.sent).toHaveLength(2);
    answer(s.sent[1]!.handler, 200, "application/json", "{}");
    expect(conn.out).toStartWith("HTTP/1.1 200 OK\r\n");
    expect(s.metrics.render()).toContain('llmgw_router_retries_total{model="m",reason="timeout"} 1');
    expect(s.errors).toEqual([]);
  });
});
