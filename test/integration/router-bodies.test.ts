// Request bodies through the router over real sockets: a body over the size cap, too deep or
// holding too many values is refused before it is parsed, in OpenAI's shape, naming the limit
// and its flag; a large body is read off the router thread and reaches the engine byte for byte
// (or with only its model replaced, for an engine that serves one name); and while a costly body
// is being read the router keeps answering everyone else.

import { afterEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { Router, type RouterOptions } from "../../src/router/router";
import type { EndpointInfo } from "../../src/protocol/routing";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { deepArrays, deepChat, imageChat, wideObject } from "../helpers/json-bodies";
import { rawEngine, text } from "../helpers/raw-http";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const ep = (id: string, url: string, extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id, url, models: ["m", "m-alias"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });

function router(opts: Partial<RouterOptions> = {}, endpoints: EndpointInfo[] = []) {
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, ...opts });
  r.setCatalog([{ name: "m", aliases: ["m-alias"], on_demand: false, pool: "default", created: 1 }]);
  r.setEndpoints(endpoints);
  const { port } = r.start();
  cleanups.push(() => r.stop());
  return { r, port };
}

const enc = new TextEncoder();

/**
 * POSTs `body` on a connection of its own, writing as fast as the socket takes it; resolves with
 * the answer (read until the router closes) and when the last byte was handed to the socket.
 */
function post(port: number, body: Uint8Array, path = "/v1/chat/completions"): { written: Promise<void>; answer: Promise<{ status: number; body: string }> } {
  const head = enc.encode(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.byteLength}\r\nConnection: close\r\n\r\n`);
  const req = new Uint8Array(head.byteLength + body.byteLength);
  req.set(head);
  req.set(body, head.byteLength);
  let wrote!: () => void;
  const written = new Promise<void>((r) => (wrote = r));
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    let off = 0;
    let acc = "";
    const done = () => {
      const end = acc.indexOf("\r\n\r\n");
      resolve({ status: Number(acc.slice(9, 12)), body: end < 0 ? "" : acc.slice(end + 4) });
    };
    const pump = (s: Socket<undefined>) => {
      while (off < req.byteLength) {
        const n = s.write(req.subarray(off));
        if (n <= 0) return;
        off += n;
      }
      wrote();
    };
    Bun.connect({ hostname: "127.0.0.1", port, socket: { open: pump, drain: pump, data: (_s, d) => void (acc += text(d)), close: done, end: (s) => void s.end(), error: done } }).catch(reject);
  });
  return { written, answer };
}

const errorOf = (a: { body: string }) => (JSON.parse(a.body) as { error: { message: string; code: string; type: string } }).error;

describe("limits, before parsing", () => {
  test("a body over --max-body-bytes (the default 4 MiB) is refused 413, naming the flag", async () => {
    const { port } = router();
    expect(ROUTER_DEFAULTS.maxBodyBytes).toBe(4 * 1024 * 1024);
    const a = await post(port, deepArrays(4_000_000)).answer;
    expect(a.status).toBe(413);
    expect(errorOf(a).code).toBe("request_too_large");
    expect(errorOf(a).message).toContain("--max-body-bytes");
  });

  test("nested deeper than --max-json-depth: 400 json_too_deep, naming the limit and the flag", async () => {
    const { port } = router();
    const a = await post(port, deepChat(500_000)).answer;
    expect(a.status).toBe(400);
    expect(errorOf(a)).toMatchObject({ code: "json_too_deep", type: "invalid_request_error" });
    expect(errorOf(a).message).toContain(`--max-json-depth ${ROUTER_DEFAULTS.maxJsonDepth}`);
  });

  test("more values than --max-json-values: 413 json_too_many_values, naming the limit and the flag", async () => {
    const { port } = router();
    const a = await post(port, wideObject(ROUTER_DEFAULTS.maxJsonValues + 1, 8, "m")).answer;
    expect(a.status).toBe(413);
    expect(errorOf(a).code).toBe("json_too_many_values");
    expect(errorOf(a).message).toContain(`--max-json-values ${ROUTER_DEFAULTS.maxJsonValues}`);
  });

  test("a small body over a limit is refused the same way (read on the router thread)", async () => {
    const { port } = router();
    const a = await post(port, deepChat(80)).answer;
    expect(a.status).toBe(400);
    expect(errorOf(a).code).toBe("json_too_deep");
  });
});

describe("large bodies", () => {
  test("reach the engine byte for byte; for an engine serving one name, only the model changes", async () => {
    const e = rawEngine(() => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
    cleanups.push(() => e.stop());
    const { port } = router({}, [ep("a", e.url)]);
    const body = imageChat(1024 * 1024);
    expect((await post(port, body).answer).status).toBe(200);
    expect(e.requests.at(-1)!.body).toBe(text(body));

    const s = rawEngine(() => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
    cleanups.push(() => s.stop());
    const { port: sport } = router({}, [ep("s", s.url, { engine: "sglang" })]);
    const aliased = imageChat(1024 * 1024, "m-alias");
    expect((await post(sport, aliased).answer).status).toBe(200);
    expect(s.requests.at(-1)!.body).toBe(text(aliased).replace('"model":"m-alias"', '"model":"m"'));
  });
});

/** One keep-alive connection sending GET /v1/models one after another until stopped; counts the answers. */
async function ordinaryClient(port: number): Promise<{ answered: () => number; stop: () => void }> {
  let answered = 0;
  let stopped = false;
  let acc = "";
  const req = enc.encode("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
  const s = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(sock, d) {
        acc += text(d);
        for (;;) {
          const end = acc.indexOf("\r\n\r\n");
          if (end < 0) return;
          const len = Number(/\r\ncontent-length: *(\d+)/i.exec(acc.slice(0, end))?.[1] ?? 0);
          if (acc.length < end + 4 + len) return;
          acc = acc.slice(end + 4 + len);
          answered++;
          if (!stopped) sock.write(req);
        }
      },
    },
  });
  s.write(req);
  cleanups.push(() => s.end());
  return { answered: () => answered, stop: () => void (stopped = true) };
}

describe("a costly body does not stall the router", () => {
  test("while one is read, other clients' requests are answered: many, not one", async () => {
    // The value limit raised so that the body is read whole and costs its full parse: 150,000
    // distinct keys, 50-100 ms of JSON.parse on an idle machine, more on a busy one.
    const { port } = router({ maxJsonValues: 10_000_000 });
    const costly = wideObject(150_000, 12, "nobody-serves-this");
    const ordinary = await ordinaryClient(port);
    const p = post(port, costly);
    await p.written;
    const before = ordinary.answered();
    const a = await p.answer;
    const during = ordinary.answered() - before;
    ordinary.stop();
    expect(a.status).toBe(404);
    // Read on the router thread, the parse holds every other client until it ends: at most the
    // request already in flight is answered in between.
    expect(during).toBeGreaterThanOrEqual(20);
  });
});
