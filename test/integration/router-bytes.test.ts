// The router against raw-socket engines and raw-socket clients, byte for byte: header bytes
// 0x00-0xFF in every position of a request and of an engine's answer (forwarded exactly, or
// refused with a 4xx, or the engine's answer failed as an engine error; never a 5xx of the
// router's own, never a lease left taken), the table of malformed engine responses, the
// inference-path allow-list and dot segments, errors that name replicas and not addresses,
// engine keys, and throws that stay inside the request that met them.

import { afterEach, describe, expect, test } from "bun:test";
import { Router, type RouterOptions } from "../../src/router/router";
import { INFERENCE_PATHS } from "../../src/router/dispatch";
import type { CatalogEntry, EndpointInfo } from "../../src/protocol/routing";
import { TCHAR } from "../../src/http/wire";
import { MALFORMED, type RawEngine, chatRequest, engineAnswer, rawEngine, rawRequest } from "../helpers/raw-http";
import { until } from "../helpers/until";
import { createHash } from "node:crypto";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const ep = (id: string, url: string, extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id, url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });
const cat = (extra: Partial<CatalogEntry> = {}): CatalogEntry[] => [{ name: "m", aliases: [], on_demand: false, pool: "default", created: 1, ...extra }];

function router(endpoints: EndpointInfo[], opts: Partial<RouterOptions> = {}, catalog = cat()) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, cooldownMs: 60_000, ...opts });
  r.setCatalog(catalog);
  r.setEndpoints(endpoints);
  const { port, url } = r.start();
  cleanups.push(() => r.stop());
  return { r, port, url };
}

function engine(answer: Parameters<typeof rawEngine>[0]): RawEngine {
  const e = rawEngine(answer);
  cleanups.push(() => e.stop());
  return e;
}

const inflight = (r: Router) => r.balancer.endpoints().reduce((n, e) => n + e.inflight, 0);
const errorOf = (body: string) => (JSON.parse(body) as { error: { message: string; type: string; code: string | null } }).error;

/**
 * Whether a header line (latin1) is one the router's server accepts, by RFC 9112's rules: no
 * control but HTAB, no CR or LF of its own, no leading whitespace (obs-fold), a name of token
 * characters up to the first colon. The reference the byte tests judge answers by.
 */
function validLine(line: string): boolean {
  for (let i = 0; i < line.length; i++) {
    const c = line.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return false;
  }
  const colon = line.indexOf(":");
  if (colon <= 0) return false;
  for (let i = 0; i < colon; i++) if (TCHAR[line.charCodeAt(i)] !== 1) return false;
  return true;
}
const trimOws = (s: string) => s.replace(/^[ \t]+|[ \t]+$/g, "");

/** The six places a byte goes in "Name: value": name start, middle, end; value start, middle, end. */
function positions(name: string, value: string): { where: string; line: (b: string) => string; inValue: boolean }[] {
  const mid = (s: string) => Math.floor(s.length / 2);
  return [
    { where: "name start", line: (b) => `${b}${name}: ${value}`, inValue: false },
    { where: "name middle", line: (b) => `${name.slice(0, mid(name))}${b}${name.slice(mid(name))}: ${value}`, inValue: false },
    { where: "name end", line: (b) => `${name}${b}: ${value}`, inValue: false },
    { where: "value start", line: (b) => `${name}: ${b}${value}`, inValue: true },
    { where: "value middle", line: (b) => `${name}: ${value.slice(0, mid(value))}${b}${value.slice(mid(value))}`, inValue: true },
    { where: "value end", line: (b) => `${name}: ${value}${b}`, inValue: true },
  ];
}

describe("header bytes >= 0x80", () => {
  test("User-Agent: caf\\xe9 on a chat request: 200, the engine gets the very byte 0xE9, and the lease is released", async () => {
    const e = engine(() => engineAnswer());
    const { r, port } = router([ep("a", e.url)]);
    const res = await rawRequest(port, chatRequest(["User-Agent: caf\xe9"]));
    expect(res.status).toBe(200);
    expect(e.requests[0]!.headers).toContainEqual(["user-agent", " caf\xe9"]);
    expect(inflight(r)).toBe(0);
  });

  test("an engine's header value with bytes >= 0x80 reaches the client as those bytes, not their UTF-8", async () => {
    const e = engine(() => engineAnswer(["Content-Type: text/plain; charset=caf\xe9", "X-Request-Id: r\xff\x80"]));
    const { port } = router([ep("a", e.url)]);
    const res = await rawRequest(port, chatRequest());
    expect(res.status).toBe(200);
    expect(res.headers).toContainEqual(["content-type", "text/plain; charset=caf\xe9"]);
    expect(res.headers).toContainEqual(["x-request-id", "r\xff\x80"]);
    // Streamed too (the head of a stream is written by another path).
    const s = engine(() => `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; x=\xe9\r\nTransfer-Encoding: chunked\r\n\r\n5\r\ndata:\r\n0\r\n\r\n`);
    const b = router([ep("b", s.url)]);
    const res2 = await rawRequest(b.port, chatRequest([], { body: JSON.stringify({ model: "m", stream: true, messages: [] }) }));
    expect(res2.status).toBe(200);
    expect(res2.headers).toContainEqual(["content-type", "text/event-stream; x=\xe9"]);
  });

  test("the headers a replica passes on are its own for each answer: a request id that changes, one that goes away, one more header", async () => {
    const heads = [
      ["Content-Type: application/json", "X-Request-Id: one"],
      ["Content-Type: application/json", "X-Request-Id: one"],
      ["Content-Type: application/json", "X-Request-Id: two"],
      ["Content-Type: application/json", "X-Request-Id: two", "Cache-Control: no-store"],
      ["Content-Type: application/json", "Cache-Control: no-store"],
      ["Content-Type: text/plain", "Cache-Control: no-store"],
      ["Content-Type: application/json"],
      ["Content-Type: application/json", "X-Request-Id: one"],
      ["Content-Type: application/json", "X-Request-Id: one", "Cache-Control: no-store"],
      // The last answer's headers less its last one.
      ["Content-Type: application/json", "X-Request-Id: one"],
    ];
    const e = engine((_req, n) => engineAnswer(heads[(n - 1) % heads.length]));
    const { port } = router([ep("a", e.url)]);
    for (const h of heads) {
      const res = await rawRequest(port, chatRequest());
      expect(res.status).toBe(200);
      const passed = res.headers.filter(([n]) => n === "x-request-id" || n === "cache-control" || n === "content-type");
      expect(passed).toEqual(h.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 2)] as [string, string]));
    }
  });

  test("every byte 0x00-0xFF in every position of a request header line: forwarded byte-exact or refused with 400; never a 5xx; in-flight back to 0; the next request served", async () => {
    const e = engine(() => engineAnswer());
    const { r, port } = router([ep("a", e.url)]);
    const failures: string[] = [];
    let cases = 0;
    for (const p of positions("User-Agent", "caf-ua")) {
      for (let b = 0; b < 256; b++) {
        cases++;
        const line = p.line(String.fromCharCode(b));
        const before = e.requests.length;
        const res = await rawRequest(port, chatRequest([line]));
        const want = validLine(line) ? 200 : 400;
        const label = `byte 0x${b.toString(16).padStart(2, "0")} at ${p.where}`;
        if (res.status !== want) failures.push(`${label}: ${res.status}, expected ${want}`);
        if (want === 200 && p.inValue) {
          const got = e.requests.at(-1)!.headers.filter(([n]) => n === "user-agent").map(([, v]) => v);
          const sent = ` ${trimOws(line.slice(line.indexOf(":") + 1))}`;
          if (got.length !== 1 || got[0] !== sent) failures.push(`${label}: engine got ${JSON.stringify(got)}, expected ${JSON.stringify(sent)}`);
        }
        if (want === 400 && e.requests.length !== before) failures.push(`${label}: refused, yet the engine was asked`);
        if (inflight(r) !== 0) failures.push(`${label}: in-flight ${inflight(r)} after the answer`);
        const next = await rawRequest(port, chatRequest());
        if (next.status !== 200) failures.push(`${label}: the next request got ${next.status}`);
        if (failures.length > 10) break;
      }
    }
    expect(failures).toEqual([]);
    expect(cases).toBe(6 * 256);
  }, 120_000);

  test("every byte 0x00-0xFF in every position of an engine's header line: passed on byte-exact, or the answer fails as an engine error (502); never a 500; in-flight back to 0; the next request served", async () => {
    let answer = engineAnswer();
    const e = engine(() => answer);
    const { r, port } = router([ep("a", e.url)]);
    const failures: string[] = [];
    let cases = 0;
    for (const [name, value] of [["X-Request-Id", "req-42"], ["Content-Type", "application/json"]] as const) {
      for (const p of positions(name, value)) {
        for (let b = 0; b < 256; b++) {
          cases++;
          const line = p.line(String.fromCharCode(b));
          answer = engineAnswer(name === "Content-Type" ? [line] : ["Content-Type: application/json", line]);
          const res = await rawRequest(port, chatRequest());
          answer = engineAnswer();
          const label = `${name}: byte 0x${b.toString(16).padStart(2, "0")} at ${p.where}`;
          const valid = validLine(line);
          if (res.status !== (valid ? 200 : 502)) failures.push(`${label}: ${res.status}, expected ${valid ? 200 : 502}`);
          if (!valid && res.status === 502 && errorOf(res.body).code !== "upstream_error") failures.push(`${label}: 502 without code upstream_error`);
          if (valid && p.inValue) {
            const got = res.headers.filter(([n]) => n === name.toLowerCase()).map(([, v]) => v);
            const sent = trimOws(line.slice(line.indexOf(":") + 1));
            if (got.length !== 1 || got[0] !== sent) failures.push(`${label}: client got ${JSON.stringify(got)}, expected ${JSON.stringify(sent)}`);
          }
          if (inflight(r) !== 0) failures.push(`${label}: in-flight ${inflight(r)} after the answer`);
          const next = await rawRequest(port, chatRequest());
          if (next.status !== 200) failures.push(`${label}: the next request got ${next.status}`);
          if (failures.length > 10) break;
        }
      }
    }
    expect(failures).toEqual([]);
    expect(cases).toBe(2 * 6 * 256);
  }, 120_000);
});

describe("malformed engine responses", () => {
  test.each(MALFORMED)("%s: 502 upstream_error naming the replica, no injected header, the connection closed, the replica cooled down", async (_what, answer) => {
    const e = engine(() => answer);
    const { r, port } = router([ep("rep-1", e.url)], { maxAttempts: 1 });
    const res = await rawRequest(port, chatRequest());
    expect(res.status).toBe(502);
    const err = errorOf(res.body);
    expect(err.code).toBe("upstream_error");
    expect(err.message).toContain("replica rep-1");
    expect(err.message).not.toContain("127.0.0.1");
    expect(err.message).not.toContain(String(e.port));
    // Nothing of the engine's head reaches the client.
    expect(res.headers.map(([n]) => n)).not.toContain("set-cookie");
    expect(res.headers.filter(([n]) => n === "content-length")).toHaveLength(1);
    expect(res.headers.map(([n]) => n)).not.toContain("x-request-id");
    await until("the engine's connection closed", () => e.open() === 0 || undefined, 3000);
    expect(r.balancer.endpoints()[0]!.cooldownUntil).toBeGreaterThan(Date.now());
    expect(inflight(r)).toBe(0);
  });

  test("malformed framing after the stream started: the client's SSE stream ends with an error event naming the replica; the replica is cooled down", async () => {
    for (const bad of ["2\nzz\r\n", "5\r\nhelloXX", "zz\r\n", "4;\x00\r\nabcd\r\n"]) {
      const e = engine(() => (s) => {
        s.write(Buffer.from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nf\r\ndata: {\"a\":1}\n\n\r\n", "latin1"));
        // Real: the good chunk reaches the client (the stream has started) before the bad bytes
        // come; the router has no timer of its own in between to drive instead.
        setTimeout(() => s.write(Buffer.from(bad, "latin1")), 20);
      });
      const { r, port } = router([ep("rep-s", e.url)]);
      const res = await rawRequest(port, chatRequest([], { body: JSON.stringify({ model: "m", stream: true, messages: [] }) }));
      expect(res.status).toBe(200);
      expect(res.body).toContain('data: {"a":1}');
      const frame = /data: (\{"error".*\})\n\n/.exec(res.body);
      expect(frame).not.toBeNull();
      const err = (JSON.parse(frame![1]!) as { error: { message: string; code: string } }).error;
      expect(err.code).toBe("upstream_error");
      expect(err.message).toContain("replica rep-s");
      expect(err.message).not.toContain("127.0.0.1");
      expect(r.balancer.endpoints()[0]!.cooldownUntil).toBeGreaterThan(Date.now());
      await until("the engine's connection closed", () => e.open() === 0 || undefined, 3000);
      expect(inflight(r)).toBe(0);
    }
  });

  test("a well-formed answer after the malformed ones is served from a fresh connection", async () => {
    let n = 0;
    const e = engine(() => (++n === 1 ? MALFORMED[0]![1] : engineAnswer()));
    const { port } = router([ep("a", e.url)], { maxAttempts: 1 });
    expect((await rawRequest(port, chatRequest())).status).toBe(502);
    expect((await rawRequest(port, chatRequest())).status).toBe(200);
    expect(e.connections()).toBe(2);
  });
});

describe("answers split over several reads", () => {
  test("a whole answer whose body comes in several reads reaches the client whole, with its Content-Length, not cut after the first read", async () => {
    const body = JSON.stringify({ id: "x", object: "chat.completion", choices: [{ message: { content: "y".repeat(3000) } }], usage: { completion_tokens: 3 } });
    const sockets: { write(d: string): number }[] = [];
    const e = engine(() => (s) => {
      // The head and a third of the body now; the rest once the test says (another read).
      s.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 1000)}`);
      sockets.push(s);
    });
    const { r, port } = router([ep("a", e.url)]);
    const answer = rawRequest(port, chatRequest(), 5_000);
    await until("the engine to answer in part", () => sockets.length === 1 || undefined);
    // Turns of the event loop (no timer): the router reads the first part before the rest is sent.
    for (let i = 0; i < 20; i++) await new Promise((done) => setImmediate(done));
    sockets[0]!.write(body.slice(1000));
    const res = await answer;
    expect(res.status).toBe(200);
    expect(res.headers).toContainEqual(["content-length", String(body.length)]);
    expect(res.body).toBe(body);
    expect(inflight(r)).toBe(0);
  });
});

describe("inference paths only", () => {
  test("each inference endpoint is forwarded to the engine as sent", async () => {
    const e = engine(() => engineAnswer());
    const { port } = router([ep("a", e.url)]);
    for (const path of INFERENCE_PATHS) {
      const res = await rawRequest(port, chatRequest([], { path }));
      expect({ path, status: res.status }).toEqual({ path, status: 200 });
      expect(e.requests.at(-1)!.head.split("\r\n")[0]).toBe(`POST ${path} HTTP/1.1`);
    }
  });

  test("engine admin paths and unknown /v1 paths are 404 in OpenAI's shape without touching an engine", async () => {
    const e = engine(() => engineAnswer());
    const { port } = router([ep("a", e.url)]);
    for (const path of ["/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/anything", "/v1/chat/completions/batch", "/v1/chat/completions/", "/update_weights", "/slots", "/generate", "/score", "/v2/rerank", "/invocations", "/v1/models/x"]) {
      const res = await rawRequest(port, chatRequest([], { path }));
      expect({ path, status: res.status }).toEqual({ path, status: 404 });
      const err = errorOf(res.body);
      expect(err.type).toBe("invalid_request_error");
      expect(err.code).toBe("not_found");
    }
    expect(e.requests).toHaveLength(0);
  });

  test("dot segments, plain or percent-encoded, and encoded slashes are refused with 400", async () => {
    const e = engine(() => engineAnswer());
    const { port } = router([ep("a", e.url)]);
    for (const path of ["/v1/../v1/chat/completions", "/v1/./chat/completions", "/v1/chat/completions/..", "/v1/%2e%2e/load_lora_adapter", "/v1/%2E/chat/completions", "/v1/.%2e/x", "/v1/chat%2fcompletions", "/v1%2F..%2Fslots", "/v1/%5c../x", "/v1\\..\\x"]) {
      const res = await rawRequest(port, chatRequest([], { path }));
      expect({ path, status: res.status }).toEqual({ path, status: 400 });
      expect(errorOf(res.body).code).toBe("invalid_path");
    }
    // GET dot segments too; a model id with an encoded slash is still looked up.
    expect((await rawRequest(port, "GET /v1/models/../metrics HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")).status).toBe(400);
    expect((await rawRequest(port, "GET /v1/models/org%2Fx HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")).status).toBe(404);
    expect((await rawRequest(port, "GET /v1/models/m HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")).status).toBe(200);
    expect((await rawRequest(port, "GET /v1/models HTTP/1.1\r\nHost: r\r\nConnection: close\r\n\r\n")).status).toBe(200);
    // Dots that are not segments are fine.
    expect((await rawRequest(port, chatRequest([], { path: "/v1/chat/completions?v=1.2" }))).status).toBe(200);
    expect(e.requests).toHaveLength(1);
  });
});

describe("errors name the replica, never its address", () => {
  test("unreachable, invalid URL, no first byte, a 5xx: messages name replica ids, no host, port or URL", async () => {
    const closed = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const closedPort = closed.port;
    closed.stop(true);
    const mute = engine(() => () => {});
    const busy = engine(() => "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy");
    const cases: [EndpointInfo, string][] = [
      [ep("dead", `http://127.0.0.1:${closedPort}`), "replica dead"],
      [ep("bad-url", "http://[::1"), "replica bad-url"],
      [ep("mute", mute.url), "replica mute"],
      [ep("busy", busy.url), "replica busy"],
    ];
    for (const [endpoint, says] of cases) {
      const { port } = router([endpoint], { maxAttempts: 1, firstByteTimeoutMs: 100 });
      const res = await rawRequest(port, chatRequest());
      expect(res.status).toBe(502);
      const msg = errorOf(res.body).message;
      expect(msg).toContain(says);
      for (const leak of ["127.0.0.1", "::1", "http:", String(closedPort), String(mute.port), String(busy.port)]) expect({ msg, leak: msg.includes(leak) }).toEqual({ msg, leak: false });
    }
  });

  test("an engine killed mid-stream: the SSE error frame names the replica, not its address", async () => {
    const e = engine(() => (s) => {
      s.write(Buffer.from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:\n\r\n", "latin1"));
      // Real: the first chunk reaches the client before the engine dies (as in the case above).
      setTimeout(() => s.terminate(), 20);
    });
    const { port } = router([ep("rep-k", e.url)]);
    const res = await rawRequest(port, chatRequest([], { body: JSON.stringify({ model: "m", stream: true, messages: [] }) }));
    const frame = /data: (\{"error".*\})\n\n/.exec(res.body)![1]!;
    expect(frame).toContain("replica rep-k");
    expect(frame).not.toContain("127.0.0.1");
    expect(frame).not.toContain(String(e.port));
  });
});

describe("engine keys", () => {
  const KEY = "sk-engine-0123456789abcdef";

  test("an endpoint with a key: the engine gets Authorization: Bearer <key>, once; the client's own Authorization never reaches it", async () => {
    const e = engine(() => engineAnswer());
    const { r, port } = router([ep("a", e.url, { key: KEY })], { requireApiKey: true });
    const clientKey = "sk-llmgw-client-key-abcdef";
    r.setApiKeys([{ name: "c", sha256: createHash("sha256").update(clientKey).digest("hex"), pool: null }]);
    const res = await rawRequest(port, chatRequest([`Authorization: Bearer ${clientKey}`]));
    expect(res.status).toBe(200);
    const auth = e.requests[0]!.headers.filter(([n]) => n === "authorization");
    expect(auth).toEqual([["authorization", ` Bearer ${KEY}`]]);
    expect(e.requests[0]!.head).not.toContain(clientKey);
  });

  test("an endpoint without a key: no Authorization goes to the engine, whatever the client sent", async () => {
    const e = engine(() => engineAnswer());
    const { port } = router([ep("a", e.url)]);
    expect((await rawRequest(port, chatRequest(["Authorization: Bearer sk-llmgw-whatever"]))).status).toBe(200);
    expect(e.requests[0]!.headers.map(([n]) => n)).not.toContain("authorization");
    expect(e.requests[0]!.head).not.toContain("sk-llmgw-whatever");
  });

  test("a key that could break the request head (CR, LF, space) leaves its endpoint out instead of being sent", async () => {
    const e = engine(() => engineAnswer());
    const { port, r } = router([ep("bad", e.url, { key: "k\r\nX-Injected: 1" }), ep("bad2", e.url, { key: "a b" }), ep("good", e.url, { key: KEY })]);
    expect(r.balancer.endpoints().map((x) => x.id)).toEqual(["good"]);
    expect((await rawRequest(port, chatRequest())).status).toBe(200);
    expect(e.requests.every((q) => !q.head.includes("X-Injected"))).toBe(true);
  });
});

describe("a throw stays inside its request", () => {
  test("a throw while starting an attempt: that request is answered 500, its lease released; the next request is served", async () => {
    const e = engine(() => engineAnswer());
    const { r, port } = router([ep("a", e.url)]);
    const post = r.upstream.post.bind(r.upstream);
    let once = true;
    r.upstream.post = (...args: Parameters<typeof post>) => {
      if (once) {
        once = false;
        throw new Error("boom");
      }
      return post(...args);
    };
    expect((await rawRequest(port, chatRequest())).status).toBe(500);
    expect(inflight(r)).toBe(0);
    expect((await rawRequest(port, chatRequest())).status).toBe(200);
  });

  test("a throw in one cold-start waiter's callback: the other waiting clients still get their replica", async () => {
    const e = engine(() => engineAnswer());
    const catalog = [...cat({ on_demand: true }), { name: "m2", aliases: [], on_demand: true, pool: "default", created: 1 }];
    const { r, port } = router([], { coldStartTimeoutMs: 5_000 }, catalog);
    const a = rawRequest(port, chatRequest());
    const b = rawRequest(port, chatRequest([], { body: JSON.stringify({ model: "m2", messages: [] }) }));
    // Both clients are waiting (a real cold start takes seconds).
    await until("both clients to wait for a replica", () => r.coldStart.waiting === 2 || undefined);
    const acquire = r.balancer.acquire.bind(r.balancer);
    r.balancer.acquire = (model, ...rest) => {
      if (model === "m") throw new Error("boom");
      return acquire(model, ...rest);
    };
    r.setEndpoints([ep("a", e.url), ep("b", e.url, { models: ["m2"] })]);
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(500);
    expect(rb.status).toBe(200);
    expect(inflight(r)).toBe(0);
  });

  test("a throw while one attempt's deadline expires: the other attempts due in the same sweep still expire, every lease is released", async () => {
    const mute = engine(() => () => {});
    const { r, port } = router([ep("a", mute.url)], { firstByteTimeoutMs: 100, maxAttempts: 1 });
    const post = r.upstream.post.bind(r.upstream);
    let n = 0;
    r.upstream.post = (...args: Parameters<typeof post>) => {
      const x = post(...args);
      if (++n === 1) {
        const abort = x.abort.bind(x);
        x.abort = () => {
          abort();
          throw new Error("boom");
        };
      }
      return x;
    };
    const answers = await Promise.all([rawRequest(port, chatRequest()), rawRequest(port, chatRequest()), rawRequest(port, chatRequest())]);
    expect(answers.map((x) => x.status).sort()).toEqual([500, 502, 502]);
    expect(inflight(r)).toBe(0);
  });
});
