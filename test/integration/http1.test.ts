// The router's public HTTP/1.1 server (src/http/server.ts) against real clients on 127.0.0.1:
// raw TCP sockets that send exactly the bytes a test needs (split anywhere, pipelined, broken,
// slow) and read back every byte the server sends, and `fetch` for the ordinary cases. Checks
// framing, keep-alive, pipelining, chunked bodies, the request-smuggling refusals, limits,
// Expect, timeouts, streamed answers with backpressure, aborts, a seeded fuzz run, and slow and
// greedy clients (head and body deadlines on an injected clock, a pipelining flood's memory,
// connection caps in total and per source address).

import { afterEach, describe, expect, test } from "bun:test";
import type { Socket } from "bun";
import { connect as netConnect, type Socket as NetSocket } from "node:net";
import { ManualScheduler } from "../../src/lib/scheduler";
import { type ClientExchange, type Conn, type Http1Options, Http1Server } from "../../src/http/server";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

// ---- events: everything that happens (bytes in, closes, handler calls, aborts, drains) wakes waiters

const wakers = new Set<() => void>();
function fire(): void {
  for (const w of [...wakers]) w();
}

/**
 * Resolves with f()'s first defined, non-false value, re-checked on every event; fails after `ms`.
 * Not the poll-until helper (test/helpers/until.ts): it wakes on the events above, not on a
 * timer, so a check is never late and never spins.
 */
async function whenFired<T>(f: () => T | undefined | false, ms: number, what: () => string): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = f();
    if (v !== undefined && v !== false) return v;
    const left = deadline - performance.now();
    if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for ${what()}`);
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(t);
        wakers.delete(done);
        resolve();
      };
      const t = setTimeout(done, left);
      wakers.add(done);
    });
  }
}

// ---- servers

const errorBody = (status: number, message: string, code: string) => JSON.stringify({ error: { status, message, code } });

interface Served {
  port: number;
  url: string;
  server: Http1Server;
  /** Every exchange the handler was given, in order. */
  calls: ClientExchange[];
  handlerErrors: unknown[];
}

/** Every header the request carries, by lower-case name, as the handler reads it with get(). */
function headersOf(ex: ClientExchange): Record<string, string> {
  const names = new Set<string>();
  for (const [name] of ex.headers.entries()) names.add(name);
  const out: Record<string, string> = {};
  for (const name of names) out[name] = ex.headers.get(name)!;
  return out;
}

/** The default handler: answers 200 with what it saw, as JSON. */
function echo(ex: ClientExchange): void {
  ex.respond(
    200,
    { "content-type": "application/json" },
    JSON.stringify({ method: ex.method, target: ex.target, path: ex.path, headers: headersOf(ex), body: Buffer.from(ex.body).toString("latin1") }),
  );
}

function serve(handler: (ex: ClientExchange) => void = echo, o: Partial<Http1Options> = {}): Served {
  const calls: ClientExchange[] = [];
  const handlerErrors: unknown[] = [];
  const server = new Http1Server({
    hostname: "127.0.0.1",
    port: 0,
    maxBodyBytes: 1024,
    maxHeadBytes: 1024,
    maxHeaders: 20,
    idleTimeoutMs: 5000,
    headTimeoutMs: 5000,
    errorBody,
    onHandlerError: (e) => {
      handlerErrors.push(e);
      fire();
    },
    ...o,
    handler: (ex) => {
      calls.push(ex);
      fire();
      handler(ex);
    },
  });
  const port = server.listen();
  cleanups.push(() => server.stop());
  return { port, url: `http://127.0.0.1:${port}`, server, calls, handlerErrors };
}

// ---- a raw client and a strict response parser

interface Res {
  status: number;
  reason: string;
  head: string;
  headers: Map<string, string>;
  body: Uint8Array;
  text: string;
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const IMF_DATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;

function latin1(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("latin1");
}

function crlfAt(b: Uint8Array, i: number): boolean {
  return b[i] === 13 && b[i + 1] === 10;
}

function indexOfCrlf(b: Uint8Array, from: number, double: boolean): number {
  let i = b.indexOf(13, from);
  while (i >= 0) {
    if (crlfAt(b, i) && (!double || crlfAt(b, i + 2))) return i;
    i = b.indexOf(13, i + 1);
  }
  return -1;
}

function concat(parts: Uint8Array[]): Uint8Array {
  return parts.length === 1 ? parts[0]! : new Uint8Array(Buffer.concat(parts));
}

/**
 * One response starting at `at`, checked strictly (the status line, header syntax, a date,
 * exactly one framing); undefined while it is not all there; throws when it is malformed or
 * the connection closed in the middle of it.
 */
function parseResponse(b: Uint8Array, at: number, closed: boolean, noBody: boolean): { res: Res; end: number } | undefined {
  const incomplete = (why: string) => {
    if (closed) throw new Error(`connection closed in the middle of a response (${why}): ${JSON.stringify(latin1(b.subarray(at, at + 300)))}`);
    return undefined;
  };
  const he = indexOfCrlf(b, at, true);
  if (he < 0) return incomplete("head");
  const head = latin1(b.subarray(at, he));
  const lines = head.split("\r\n");
  const m = /^HTTP\/1\.1 ([1-5]\d\d) ([\x20-\x7e]*)$/.exec(lines[0]!);
  if (m === null) throw new Error(`malformed status line ${JSON.stringify(lines[0])}`);
  const status = Number(m[1]);
  const headers = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const hm = /^([^:]+): ([\x20-\x7e\x80-\xff]*)$/.exec(line);
    if (hm === null || !TOKEN.test(hm[1]!)) throw new Error(`malformed header line ${JSON.stringify(line)}`);
    const name = hm[1]!.toLowerCase();
    if (headers.has(name)) throw new Error(`header ${name} sent twice`);
    headers.set(name, hm[2]!);
  }
  if (status >= 200 && !IMF_DATE.test(headers.get("date") ?? "")) throw new Error(`missing or malformed date header in ${JSON.stringify(head)}`);
  let p = he + 4;
  const te = headers.get("transfer-encoding");
  const cl = headers.get("content-length");
  if (te !== undefined && cl !== undefined) throw new Error("both transfer-encoding and content-length");
  let body: Uint8Array = new Uint8Array(0);
  if (status < 200 || noBody) {
    // no body
  } else if (te !== undefined) {
    if (te !== "chunked") throw new Error(`transfer-encoding ${te}`);
    const parts: Uint8Array[] = [];
    for (;;) {
      const le = indexOfCrlf(b, p, false);
      if (le < 0) return incomplete("chunk size");
      const sizeLine = latin1(b.subarray(p, le));
      if (!/^[0-9a-f]+$/.test(sizeLine)) throw new Error(`malformed chunk size ${JSON.stringify(sizeLine)}`);
      const size = parseInt(sizeLine, 16);
      p = le + 2;
      if (size === 0) {
        if (b.length < p + 2) return incomplete("last chunk");
        if (!crlfAt(b, p)) throw new Error("no CRLF after the last chunk");
        p += 2;
        break;
      }
      if (b.length < p + size + 2) return incomplete("chunk data");
      parts.push(b.subarray(p, p + size));
      if (!crlfAt(b, p + size)) throw new Error("chunk data not followed by CRLF");
      p += size + 2;
    }
    body = parts.length === 0 ? body : concat(parts);
  } else if (cl !== undefined) {
    if (!/^\d+$/.test(cl)) throw new Error(`malformed content-length ${cl}`);
    const n = Number(cl);
    if (b.length < p + n) return incomplete("content-length body");
    body = b.subarray(p, p + n);
    p += n;
  } else {
    // Close-delimited: only whole once the server has closed.
    if (!closed) return undefined;
    body = b.subarray(p);
    p = b.length;
  }
  return { res: { status, reason: m[2]!, head, headers, body, text: new TextDecoder().decode(body) }, end: p };
}

/** Parses everything a connection received as a sequence of whole, well-formed responses. */
function parseAll(b: Uint8Array): Res[] {
  const out: Res[] = [];
  let at = 0;
  while (at < b.length) {
    const r = parseResponse(b, at, true, false);
    if (r === undefined) throw new Error("incomplete response");
    out.push(r.res);
    at = r.end;
  }
  return out;
}

class Client {
  socket!: Socket<undefined>;
  received = 0;
  /** Bytes already returned as responses. */
  consumed = 0;
  /** The server shut its side (FIN) or the connection is gone. */
  closed = false;
  private parts: Uint8Array[] = [];
  private cache: Uint8Array | undefined;

  static async open(port: number): Promise<Client> {
    const c = new Client();
    c.socket = await Bun.connect<undefined>({
      hostname: "127.0.0.1",
      port,
      socket: {
        data(_s, d) {
          c.parts.push(new Uint8Array(d));
          c.received += d.byteLength;
          c.cache = undefined;
          fire();
        },
        end() {
          c.closed = true;
          fire();
        },
        close() {
          c.closed = true;
          fire();
        },
        error() {
          c.closed = true;
          fire();
        },
      },
    });
    cleanups.push(() => c.socket.terminate());
    return c;
  }

  bytes(): Uint8Array {
    if (this.cache === undefined) this.cache = this.parts.length === 0 ? new Uint8Array(0) : concat(this.parts);
    return this.cache;
  }

  text(): string {
    return latin1(this.bytes());
  }

  /** Writes a string as latin1 bytes (so "\x00" or "\xff" are single bytes), or bytes as they are. */
  write(data: string | Uint8Array): void {
    this.socket.write(typeof data === "string" ? Buffer.from(data, "latin1") : data);
    this.socket.flush();
  }

  /** The next whole response; fails on a malformed one, a close before it, or after `ms`. */
  response(o: { head?: boolean; ms?: number } = {}): Promise<Res> {
    return whenFired(
      () => {
        const r = parseResponse(this.bytes(), this.consumed, this.closed, o.head === true);
        if (r === undefined) {
          if (this.closed && this.consumed >= this.received) throw new Error("connection closed without a response");
          return undefined;
        }
        this.consumed = r.end;
        return r.res;
      },
      o.ms ?? 2000,
      () => `a response; received ${JSON.stringify(this.text().slice(this.consumed, this.consumed + 300))}, closed=${this.closed}`,
    );
  }

  /** Waits for the server to close; returns how long that took. */
  async waitClosed(ms = 2000): Promise<number> {
    const t0 = performance.now();
    await whenFired(() => this.closed, ms, () => "the server to close the connection");
    return performance.now() - t0;
  }
}

/** Writes the bytes of `data` one write per `size` bytes, each in its own turn of the event loop. */
async function dribble(c: Client, data: string, size = 1): Promise<void> {
  const bytes = Buffer.from(data, "latin1");
  for (let i = 0; i < bytes.length; i += size) {
    c.write(bytes.subarray(i, i + size));
    // Real: a millisecond apart, the pieces reach the server in reads of their own (what a split
    // at every byte means); no clock of the server's decides it.
    await Bun.sleep(1);
  }
}

/** Sends `request` on a fresh connection and checks it is refused: `status`, the JSON error, then the close. */
async function refused(s: Served, request: string, status: number, code: string): Promise<Res> {
  const c = await Client.open(s.port);
  c.write(request);
  const r = await c.response();
  expect(r.status).toBe(status);
  expect(r.headers.get("connection")).toBe("close");
  expect(r.headers.get("content-type")).toBe("application/json");
  const j = JSON.parse(r.text) as { error: { status: number; message: string; code: string } };
  expect(j.error.status).toBe(status);
  expect(j.error.code).toBe(code);
  expect(j.error.message.length).toBeGreaterThan(0);
  await c.waitClosed();
  // Nothing after the refusal, and the handler never saw the request.
  expect(c.received).toBe(c.consumed);
  expect(s.calls).toHaveLength(0);
  return r;
}

interface Echoed {
  method: string;
  target: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

const echoed = (r: Res) => JSON.parse(r.text) as Echoed;

// ---------------------------------------------------------------------------------------------

describe("requests and answers", () => {
  test("GET: the handler sees method, target, path without the query, lower-case headers (repeats joined, OWS trimmed); the answer has a status line, date and content-length", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET /v1/models?a=1&b=%20 HTTP/1.1\r\nHost: example.test\r\nX-Multi: one\r\nx-multi: two\r\nX-Pad: \t padded value \t\r\nUser-Agent: t/1\r\n\r\n");
    const r = await c.response();
    expect(r.head.split("\r\n")[0]).toBe("HTTP/1.1 200 OK");
    expect(r.headers.get("content-length")).toBe(String(r.body.byteLength));
    expect(r.headers.get("content-type")).toBe("application/json");
    expect(r.headers.has("connection")).toBe(false);
    const e = echoed(r);
    expect(e.method).toBe("GET");
    expect(e.target).toBe("/v1/models?a=1&b=%20");
    expect(e.path).toBe("/v1/models");
    expect(e.headers).toEqual({ host: "example.test", "x-multi": "one, two", "x-pad": "padded value", "user-agent": "t/1" });
    expect(e.body).toBe("");
    expect(s.calls).toHaveLength(1);
    expect(s.calls[0]!.body.byteLength).toBe(0);
  });

  test("POST with Content-Length: the body bytes arrive exactly (binary included)", async () => {
    const payload = Buffer.concat([Buffer.from('{"model":"m","x":"é"}'), Buffer.from([0, 255, 13, 10, 13, 10])]);
    const s = serve();
    const c = await Client.open(s.port);
    c.write(Buffer.concat([Buffer.from(`POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n`), payload]));
    const r = await c.response();
    expect(r.status).toBe(200);
    const e = echoed(r);
    expect(e.method).toBe("POST");
    expect(e.path).toBe("/v1/chat/completions");
    expect(e.headers["content-length"]).toBe(String(payload.length));
    expect(Buffer.from(s.calls[0]!.body).equals(payload)).toBe(true);
  });

  test("respond(): custom status and headers, a byte body, and an empty body", async () => {
    const s = serve((ex) => {
      if (ex.path === "/bytes") ex.respond(201, { "x-one": "1", "x-two": "2" }, new Uint8Array([104, 105]));
      else ex.respond(404, {}, "");
    });
    const c = await Client.open(s.port);
    c.write("GET /bytes HTTP/1.1\r\nHost: h\r\n\r\nGET /none HTTP/1.1\r\nHost: h\r\n\r\n");
    const a = await c.response();
    expect(a.head).toMatch(/^HTTP\/1\.1 201 Created\r\ndate: [^\r]+\r\nx-one: 1\r\nx-two: 2\r\ncontent-length: 2$/);
    expect(a.text).toBe("hi");
    const b = await c.response();
    expect(b.status).toBe(404);
    expect(b.reason).toBe("Not Found");
    expect(b.headers.get("content-length")).toBe("0");
    expect(b.body.byteLength).toBe(0);
  });

  test("respond() with a non-ASCII string: content-length counts UTF-8 bytes", async () => {
    const text = "héllo wörld — ✓ 🚀";
    const s = serve((ex) => ex.respond(200, { "content-type": "text/plain; charset=utf-8" }, text));
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n");
    const r = await c.response();
    expect(r.headers.get("content-length")).toBe(String(Buffer.byteLength(text)));
    expect(r.text).toBe(text);
    expect((await c.response()).text).toBe(text);
  });

  test("large answers (string and bytes) that do not fit the socket at once arrive whole, in order, on one connection", async () => {
    const str = "0123456789abcdé\n".repeat(256 * 1024); // 4 MiB of text, some of it multi-byte
    const bytes = new Uint8Array(3 * 1024 * 1024);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) & 0xff;
    const s = serve((ex) => (ex.path === "/str" ? ex.respond(200, {}, str) : ex.path === "/bytes" ? ex.respond(200, {}, bytes) : ex.respond(200, {}, "small")));
    const c = await Client.open(s.port);
    c.socket.pause();
    c.write("GET /str HTTP/1.1\r\nHost: h\r\n\r\nGET /bytes HTTP/1.1\r\nHost: h\r\n\r\nGET /small HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => s.calls.length >= 1, 2000, () => "the first answer to be under way");
    c.socket.resume();
    const a = await c.response({ ms: 5000 });
    expect(a.body.byteLength).toBe(Buffer.byteLength(str));
    expect(a.text === str).toBe(true);
    const b = await c.response({ ms: 5000 });
    expect(Buffer.from(b.body).equals(Buffer.from(bytes))).toBe(true);
    expect((await c.response()).text).toBe("small");
  });

  test("fetch: a POST through Bun's client, and a second one on the same server", async () => {
    const s = serve();
    const r1 = await fetch(`${s.url}/v1/embeddings?x=1`, { method: "POST", body: "abc", headers: { "x-test": "yes" } });
    expect(r1.status).toBe(200);
    expect(r1.headers.get("date")).toMatch(IMF_DATE);
    const e1 = (await r1.json()) as Echoed;
    expect([e1.method, e1.target, e1.path, e1.body, e1.headers["x-test"]]).toEqual(["POST", "/v1/embeddings?x=1", "/v1/embeddings", "abc", "yes"]);
    const r2 = await fetch(`${s.url}/v1/models`);
    expect(((await r2.json()) as Echoed).path).toBe("/v1/models");
    expect(s.calls).toHaveLength(2);
  });

  test("empty lines before a request line are ignored", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("\r\n\r\nGET /a HTTP/1.1\r\nHost: h\r\n\r\n\r\nGET /b HTTP/1.1\r\nHost: h\r\n\r\n");
    expect(echoed(await c.response()).path).toBe("/a");
    expect(echoed(await c.response()).path).toBe("/b");
  });
});

describe("keep-alive and close", () => {
  test("two requests on one connection are both answered; Connection: close is answered with connection: close, then the server closes", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET /1 HTTP/1.1\r\nHost: h\r\n\r\n");
    expect(echoed(await c.response()).path).toBe("/1");
    c.write("GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    const r2 = await c.response();
    expect(echoed(r2).path).toBe("/2");
    expect(r2.headers.has("connection")).toBe(false);
    expect(c.closed).toBe(false);
    c.write("GET /3 HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    const r3 = await c.response();
    expect(echoed(r3).path).toBe("/3");
    expect(r3.headers.get("connection")).toBe("close");
    await c.waitClosed();
    expect(c.received).toBe(c.consumed);
    expect(s.calls).toHaveLength(3);
  });

  test("HTTP/1.0 without keep-alive: connection: close and the server closes (no Host needed)", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET /old HTTP/1.0\r\n\r\n");
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(r.headers.get("connection")).toBe("close");
    await c.waitClosed();
    expect(c.received).toBe(c.consumed);
  });

  test("HTTP/1.0 with Connection: keep-alive: answered with connection: keep-alive, and the connection carries the next request", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    const a = await c.response();
    expect(a.headers.get("connection")).toBe("keep-alive");
    expect(c.closed).toBe(false);
    c.write("GET /b HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    const b = await c.response();
    expect(echoed(b).path).toBe("/b");
    expect(b.headers.get("connection")).toBe("keep-alive");
    expect(c.closed).toBe(false);
  });
});

describe("pipelining and split input", () => {
  test("three requests in one write (sync, setTimeout, promise answers) are answered in order, each once", async () => {
    const s = serve((ex) => {
      const answer = () => ex.respond(200, {}, `${ex.method} ${ex.target} ${Buffer.from(ex.body).toString()}`);
      if (ex.path === "/timer") setTimeout(answer, 0);
      else if (ex.path === "/promise") void Promise.resolve().then(answer);
      else answer();
    });
    const c = await Client.open(s.port);
    c.write("POST /timer HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /sync HTTP/1.1\r\nHost: h\r\n\r\nPOST /promise HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n");
    const got = [await c.response(), await c.response(), await c.response()].map((r) => r.text);
    expect(got).toEqual(["POST /timer abc", "GET /sync ", "POST /promise xy"]);
    // A fourth request: its answer is the next thing on the wire (no duplicate answer came in between).
    c.write("GET /sync4 HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).text).toBe("GET /sync4 ");
    expect(c.received).toBe(c.consumed);
    expect(s.calls.map((x) => x.target)).toEqual(["/timer", "/sync", "/promise", "/sync4"]);
  });

  test("a request body stays intact while more bytes arrive behind it during an asynchronous answer", async () => {
    let release: (() => void) | undefined;
    const s = serve((ex) => {
      if (ex.path === "/slow") release = () => ex.respond(200, {}, Buffer.from(ex.body).toString());
      else ex.respond(200, {}, Buffer.from(ex.body).toString());
    });
    const c = await Client.open(s.port);
    const first = "A".repeat(200);
    c.write(`POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 200\r\n\r\n${first}`);
    await whenFired(() => release !== undefined, 2000, () => "the first request to reach the handler");
    // The next request arrives in reads of its own while the first is still being handled.
    const second = `POST /fast HTTP/1.1\r\nHost: h\r\nContent-Length: 200\r\n\r\n${"B".repeat(100)}`;
    const firstBytes = onlyConn(s).bytesIn;
    c.write(second);
    await settle(() => onlyConn(s).bytesIn === firstBytes + second.length, "the second request's first read");
    // Reading is paused now (a request is in flight): the rest waits in the kernel.
    c.write("B".repeat(100));
    await turns(5);
    expect(Buffer.from(s.calls[0]!.body).toString()).toBe(first);
    release!();
    expect((await c.response()).text).toBe(first);
    expect((await c.response()).text).toBe("B".repeat(200));
  });

  test("more pipelined bytes than maxHeadBytes + maxBodyBytes behind slow answers: reading pauses and resumes, all answered in order", async () => {
    const s = serve((ex) => setTimeout(() => ex.respond(200, {}, `${ex.path}:${ex.body.byteLength}:${Buffer.from(ex.body).toString().slice(0, 1)}`), 2));
    const c = await Client.open(s.port);
    const n = 12;
    let all = "";
    for (let i = 0; i < n; i++) all += `POST /${i} HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\n${String.fromCharCode(97 + i).repeat(1000)}`;
    expect(all.length).toBeGreaterThan(4 * (1024 + 1024));
    c.write(all);
    for (let i = 0; i < n; i++) expect((await c.response()).text).toBe(`/${i}:1000:${String.fromCharCode(97 + i)}`);
    expect(s.calls).toHaveLength(n);
  });

  test("a request, an extra CRLF, then the next request in a later write: answered at once", async () => {
    // Some clients send a CRLF after a body; the empty line is skipped (RFC 9112 §2.2), and the
    // next request, arriving in a read of its own, must still be found.
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi\r\n");
    expect(echoed(await c.response()).path).toBe("/a");
    c.write("GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
    const b = await c.response({ ms: 1000 });
    expect(b.status).toBe(200);
    expect(echoed(b).path).toBe("/b");
  });

  test("a whole request and the start of the next in one write, the rest of the next later: both answered at once", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET /a HTTP/1.1\r\nHost: h\r\n\r\nGET /b HTTP/1.1\r\nHo");
    expect(echoed(await c.response()).path).toBe("/a");
    c.write("st: h\r\n\r\n");
    const b = await c.response({ ms: 1000 });
    expect(b.status).toBe(200);
    expect(echoed(b).path).toBe("/b");
  });

  test("two pipelined requests split in two at every byte: both answered, in order", async () => {
    const s = serve();
    const pair = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\r\nGET /b?x HTTP/1.1\r\nHost: h\r\n\r\n";
    const failures: string[] = [];
    await Promise.all(
      Array.from({ length: pair.length - 1 }, async (_, k) => {
        const at = k + 1;
        const c = await Client.open(s.port);
        c.write(pair.slice(0, at));
        // Real: the two halves must reach the server in separate reads, among many connections
        // at once (no one connection of the server's to watch); 5 ms apart on loopback they do.
        await Bun.sleep(5);
        c.write(pair.slice(at));
        try {
          const a = echoed(await c.response({ ms: 1000 }));
          const b = echoed(await c.response({ ms: 1000 }));
          if (`${a.path} ${a.body} ${b.target}` !== "/a abc /b?x") failures.push(`split at ${at}: ${a.path} ${a.body} ${b.target}`);
        } catch (e) {
          failures.push(`split at ${at} (${JSON.stringify(pair.slice(0, at).slice(-12))}|...): ${(e as Error).message.slice(0, 160)}`);
        }
      }),
    );
    expect(failures).toEqual([]);
  });

  test("a client that pipelines without end while an answer is pending cannot make the server buffer without bound", async () => {
    let pending: ClientExchange | undefined;
    const s = serve((ex) => {
      if (pending === undefined) pending = ex;
      else ex.respond(200, {}, "");
    });
    const c = await Client.open(s.port);
    c.write("GET /first HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => pending !== undefined, 2000, () => "the first request");
    // 32 MiB of small pipelined requests, pushed for 300 ms: the server stops reading past its
    // bound (maxHeadBytes + maxBodyBytes = 2 KiB), so the client's writes back up in the kernel.
    const data = Buffer.from("GET / HTTP/1.1\r\nHost: h\r\n\r\n".repeat(4096));
    const cap = 32 * 1024 * 1024;
    let accepted = 0;
    const t0 = performance.now();
    while (accepted < cap && performance.now() - t0 < 300) {
      const at = accepted % data.length;
      const n = c.socket.write(data.subarray(at));
      accepted += Math.max(0, n);
      // Real: the kernel's buffers are full; wait for the server to take some (I/O, not a deadline).
      if (n < data.length - at) await Bun.sleep(5);
    }
    expect(accepted).toBeLessThan(16 * 1024 * 1024);
    expect(s.calls).toHaveLength(1);
  });

  test("a request sent one byte per write (head and body) parses the same", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    await dribble(c, "POST /v1/x?q=1 HTTP/1.1\r\nHost: h\r\nX-A: b\r\nContent-Length: 11\r\n\r\nhello world");
    const e = echoed(await c.response());
    expect([e.method, e.target, e.path, e.headers["x-a"], e.body]).toEqual(["POST", "/v1/x?q=1", "/v1/x", "b", "hello world"]);
  });
});

describe("chunked request bodies", () => {
  const head = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";

  test("plain chunks, upper-case hex", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`${head}5\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\n\r\n`);
    const e = echoed(await c.response());
    expect(e.body).toBe("hello 0123456789");
    expect(e.headers["transfer-encoding"]).toBe("chunked");
  });

  test("chunk extensions are ignored", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`${head}5;name=value\r\nhello\r\n6 ;a;b="q"\r\n world\r\n0;last\r\n\r\n`);
    expect(echoed(await c.response()).body).toBe("hello world");
  });

  test("trailers are read and dropped, and the next request on the connection parses", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`${head}3\r\nabc\r\n0\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\nGET /next HTTP/1.1\r\nHost: h\r\n\r\n`);
    const a = echoed(await c.response());
    expect(a.body).toBe("abc");
    expect(a.headers["x-trailer"]).toBeUndefined();
    expect(echoed(await c.response()).path).toBe("/next");
  });

  test("an empty chunked body", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`${head}0\r\n\r\n`);
    expect(echoed(await c.response()).body).toBe("");
    expect(s.calls[0]!.body.byteLength).toBe(0);
  });

  test("split at every byte (size lines, data, CRLFs, trailers)", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    await dribble(c, `${head}5;x=y\r\nhello\r\nb\r\n, chunked!!\r\n0\r\nT: v\r\n\r\n`);
    expect(echoed(await c.response()).body).toBe("hello, chunked!!");
  });

  test("a chunked body of exactly maxBodyBytes is accepted", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`${head}200\r\n${"a".repeat(512)}\r\n200\r\n${"b".repeat(512)}\r\n0\r\n\r\n`);
    expect(echoed(await c.response()).body).toBe("a".repeat(512) + "b".repeat(512));
  });

  for (const [name, body] of [
    ["a non-hex chunk size", "zz\r\nhello\r\n0\r\n\r\n"],
    ["a chunk size with junk after it", "5x\r\nhello\r\n0\r\n\r\n"],
    ["a negative chunk size", "-5\r\nhello\r\n0\r\n\r\n"],
    ["an empty chunk-size line", "\r\nhello\r\n0\r\n\r\n"],
    ["a chunk size of 16 hex digits", "10000000000000000\r\n"],
    ["a chunk-size line ending in a bare LF", "5\nhello\r\n0\r\n\r\n"],
    ["chunk data not followed by CRLF", "5\r\nhelloX\r\n0\r\n\r\n"],
    ["chunk data followed by a bare LF", "5\r\nhello\n0\r\n\r\n"],
    ["chunk data followed by two stray bytes instead of CRLF", "5\r\nhelloXY0\r\n\r\n"],
    ["chunk data longer than its size", "3\r\nhello\r\n0\r\n\r\n"],
    ["a malformed trailer line", "5\r\nhello\r\n0\r\nno colon here\r\n\r\n"],
  ] as const) {
    test(`${name}: 400 and closed`, async () => {
      const s = serve();
      await refused(s, head + body, 400, "bad_request");
    });
  }

  test("chunks adding up to more than maxBodyBytes: 413 as soon as the size line says so, and closed", async () => {
    const s = serve();
    // 600 + 600 > 1024: the second size line is refused before its data is sent.
    await refused(s, `${head}258\r\n${"a".repeat(600)}\r\n258\r\n`, 413, "request_too_large");
  });

  test("one huge chunk size: 413", async () => {
    const s = serve();
    await refused(s, `${head}fffffffffffffff\r\n`, 413, "request_too_large");
  });
});

describe("framing refusals (request smuggling and malformed heads)", () => {
  const cases: [string, string, number, string][] = [
    ["Transfer-Encoding and Content-Length together", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"],
    ["Content-Length before Transfer-Encoding, different case", "POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding: chunked\r\ncontent-length: 0\r\n\r\n", 400, "bad_request"],
    ["Transfer-Encoding: gzip, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, "not_implemented"],
    ["Transfer-Encoding: chunked, chunked", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 501, "not_implemented"],
    ["two Transfer-Encoding: chunked headers", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501, "not_implemented"],
    ["Transfer-Encoding: identity", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: identity\r\n\r\n", 501, "not_implemented"],
    ["Transfer-Encoding on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"],
    ["two different Content-Length values", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, "bad_request"],
    ["Content-Length +5", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello", 400, "bad_request"],
    ["Content-Length 5 5", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5 5\r\n\r\nhello", 400, "bad_request"],
    ["Content-Length 5,5", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5,5\r\n\r\nhello", 400, "bad_request"],
    ["Content-Length 0x10", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n0123456789abcdef", 400, "bad_request"],
    ["Content-Length -1", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400, "bad_request"],
    ["Content-Length empty", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n", 400, "bad_request"],
    ["Content-Length 1e3", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1e3\r\n\r\n", 400, "bad_request"],
    ["an obs-fold header line", "GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n two\r\n\r\n", 400, "bad_request"],
    ["an obs-fold line with a tab", "GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n\tTransfer-Encoding: chunked\r\n\r\n", 400, "bad_request"],
    ["a space before the colon", "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400, "bad_request"],
    ["a tab before the colon", "POST / HTTP/1.1\r\nHost: h\r\nContent-Length\t: 5\r\n\r\nhello", 400, "bad_request"],
    ["a header line without a colon", "GET / HTTP/1.1\r\nHost: h\r\nno colon\r\n\r\n", 400, "bad_request"],
    ["a header line starting with a colon", "GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n", 400, "bad_request"],
    ["a header name with a non-token character", "GET / HTTP/1.1\r\nHost: h\r\nX(A): v\r\n\r\n", 400, "bad_request"],
    ["a bare LF inside an otherwise CRLF head", "GET / HTTP/1.1\r\nHost: h\nX-A: b\r\n\r\n", 400, "bad_request"],
    ["a bare CR inside a head", "GET / HTTP/1.1\r\nHost: h\rX-A: b\r\n\r\n", 400, "bad_request"],
    ["a bare LF after the request line", "GET / HTTP/1.1\nHost: h\r\n\r\n", 400, "bad_request"],
    ["NUL in a header value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x00b\r\n\r\n", 400, "bad_request"],
    ["\\x01 in a header value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01b\r\n\r\n", 400, "bad_request"],
    ["ESC in a header value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x1b[31mb\r\n\r\n", 400, "bad_request"],
    ["DEL in a header value", "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7fb\r\n\r\n", 400, "bad_request"],
    ["a control character in the target", "GET /a\x01b HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["no Host on HTTP/1.1", "GET / HTTP/1.1\r\nX-A: b\r\n\r\n", 400, "bad_request"],
    ["two Host headers", "GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400, "bad_request"],
    ["HTTP/2.0", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505, "http_version_not_supported"],
    ["HTTP/1.2", "GET / HTTP/1.2\r\nHost: h\r\n\r\n", 505, "http_version_not_supported"],
    ["HTTP/0.9-style request line", "GET /\r\n\r\n", 400, "bad_request"],
    ["garbage request line", "HELLO\r\n\r\n", 400, "bad_request"],
    ["binary garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "bad_request"],
    ["two spaces in the request line", "GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["a trailing space in the request line", "GET / HTTP/1.1 \r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["a lower-case version", "GET / http/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["a method with a non-token character", "GE(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["a target that is not a path", "GET v1/models HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["a target with a non-ASCII byte", "GET /caf\xe9 HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["an absolute-form target with no authority", "GET http:///v1/models HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
    ["an absolute-form target of another scheme", "GET ftp://x/v1/models HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request"],
  ];
  for (const [name, request, status, code] of cases) {
    test(`${name}: ${status}, the JSON error, closed, handler not called`, async () => {
      await refused(serve(), request, status, code);
    });
  }

  test("bare LF line endings throughout: 400 at once (not a wait for a CRLFCRLF that never comes)", async () => {
    // headTimeoutMs and idleTimeoutMs are long here: a 408 after a timeout is not the answer.
    const s = serve(echo, { headTimeoutMs: 5000, idleTimeoutMs: 5000 });
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\nHost: h\n\n");
    const r = await c.response({ ms: 1000 });
    expect(r.status).toBe(400);
    expect(r.headers.get("connection")).toBe("close");
    await c.waitClosed();
    expect(s.calls).toHaveLength(0);
  });

  test("bytes pipelined after a refused request are never handled", async () => {
    const s = serve();
    await refused(s, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n", 400, "bad_request");
  });

  test("two identical Content-Length headers are accepted: the body is read once, the next request parses", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhelloGET /next HTTP/1.1\r\nHost: h\r\n\r\n");
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(echoed(r).body).toBe("hello");
    expect(echoed(await c.response()).path).toBe("/next");
  });

  test("two identical Content-Length headers: the handler sees one valid value (RFC 9110 §8.6), not a list", async () => {
    // A recipient that accepts duplicated Content-Length values "MUST ... replace the duplicated
    // field values with a single valid Content-Length field".
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\nhello");
    const r = await c.response();
    expect(echoed(r).headers["content-length"]).toBe("5");
    expect(s.calls[0]!.headers.get("content-length")).toBe("5");
  });

  test("absolute-form targets are reduced to path and query", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("GET http://x/v1/models?a=1 HTTP/1.1\r\nHost: x\r\n\r\nGET HTTPS://example.test:8443 HTTP/1.1\r\nHost: x\r\n\r\nGET http://x?q HTTP/1.1\r\nHost: x\r\n\r\n");
    const a = echoed(await c.response());
    expect([a.target, a.path]).toEqual(["/v1/models?a=1", "/v1/models"]);
    const b = echoed(await c.response());
    expect([b.target, b.path]).toEqual(["/", "/"]);
    const d = echoed(await c.response());
    expect([d.target, d.path]).toEqual(["/?q", "/"]);
  });

  test("a fragment in the target (never sent by a real client) is refused, absolute-form or not", async () => {
    const s = serve();
    await refused(s, "GET http://x#f HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request");
    await refused(s, "GET /v1/models#f HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request");
  });

  test("a few empty lines before a request are skipped; a flood of them is refused", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\n\r\n");
    expect(echoed(await c.response()).path).toBe("/ok");
    await refused(serve(), `${"\r\n".repeat(20)}GET / HTTP/1.1\r\nHost: x\r\n\r\n`, 400, "bad_request");
  });

  test("chunk extensions and trailers count against a limit (maxHeadBytes), however many chunks carry them", async () => {
    const s = serve();
    // 40 one-byte chunks, each with a 100-byte extension: 4 KiB of metadata for 40 bytes of body.
    const ext = `;x=${"e".repeat(96)}`;
    const body = `${Array.from({ length: 40 }, () => `1${ext}\r\na\r\n`).join("")}0\r\n\r\n`;
    await refused(s, `POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n${body}`, 400, "bad_request");
  });
});

describe("limits", () => {
  test("Content-Length over maxBodyBytes: 413 before the body is sent, and closed", async () => {
    const s = serve();
    // Only the head goes out: the answer must not wait for 2000 body bytes.
    await refused(s, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000\r\n\r\n", 413, "request_too_large");
  });

  test("Content-Length of exactly maxBodyBytes is accepted", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write(`POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1024\r\n\r\n${"z".repeat(1024)}`);
    expect(echoed(await c.response()).body).toBe("z".repeat(1024));
  });

  test("a head over maxHeadBytes whose end never arrives: 431", async () => {
    const s = serve();
    await refused(s, `GET / HTTP/1.1\r\nHost: h\r\nX-Big: ${"a".repeat(1100)}`, 431, "request_header_fields_too_large");
  });

  test("a whole head over maxHeadBytes: 431", async () => {
    const s = serve();
    await refused(s, `GET / HTTP/1.1\r\nHost: h\r\nX-Big: ${"a".repeat(1100)}\r\n\r\n`, 431, "request_header_fields_too_large");
  });

  test("a head over maxHeadBytes that arrives in small pieces: 431", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    const text = `GET / HTTP/1.1\r\nHost: h\r\nX-Big: ${"a".repeat(1100)}\r\n\r\n`;
    const sending = dribble(c, text, 100);
    const r = await c.response();
    expect(r.status).toBe(431);
    await c.waitClosed();
    await sending;
    expect(s.calls).toHaveLength(0);
  });

  test("more header lines than maxHeaders: 431; exactly maxHeaders is fine", async () => {
    const s = serve(echo, { maxHeaders: 5 });
    const lines = (n: number) => Array.from({ length: n - 1 }, (_, i) => `X-${i}: v\r\n`).join("");
    const c = await Client.open(s.port);
    c.write(`GET /ok HTTP/1.1\r\nHost: h\r\n${lines(5)}\r\n`);
    expect(echoed(await c.response()).path).toBe("/ok");
    const callsBefore = s.calls.length;
    const d = await Client.open(s.port);
    d.write(`GET /no HTTP/1.1\r\nHost: h\r\n${lines(6)}\r\n`);
    const r = await d.response();
    expect(r.status).toBe(431);
    expect((JSON.parse(r.text) as { error: { code: string } }).error.code).toBe("request_header_fields_too_large");
    await d.waitClosed();
    expect(s.calls.length).toBe(callsBefore);
  });
});

describe("Expect", () => {
  test("Expect: 100-continue: 100 Continue before the body, the final answer after it", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 10\r\n\r\n");
    const cont = await c.response();
    expect(cont.head).toBe("HTTP/1.1 100 Continue");
    expect(s.calls).toHaveLength(0);
    c.write("0123456789");
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(echoed(r).body).toBe("0123456789");
    expect(c.received).toBe(c.consumed);
  });

  test("Expect: 100-continue with a chunked body", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n");
    expect((await c.response()).status).toBe(100);
    c.write("3\r\nabc\r\n0\r\n\r\n");
    expect(echoed(await c.response()).body).toBe("abc");
  });

  test("Expect: 100-continue with a body already sent along: no 100, just the answer", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    c.write("POST /e HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc");
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(echoed(r).body).toBe("abc");
  });

  test("Expect: 100-continue with Content-Length over the limit: 413, no 100", async () => {
    const s = serve();
    const r = await refused(s, "POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n", 413, "request_too_large");
    expect(r.status).toBe(413);
  });

  test("HTTP/1.0 with Expect: 100-continue: no 100 (an HTTP/1.0 client would not understand it)", async () => {
    const s = serve();
    const c = await Client.open(s.port);
    const head = "POST /e HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
    c.write(head);
    await settle(() => s.server.conns.size === 1 && onlyConn(s).bytesIn === head.length, "the head to be read");
    await turns(5);
    expect(c.received).toBe(0);
    c.write("abc");
    const r = await c.response();
    expect(r.status).toBe(200);
    expect(echoed(r).body).toBe("abc");
  });

  test("Expect: something-else: 417", async () => {
    const s = serve();
    await refused(s, "POST / HTTP/1.1\r\nHost: h\r\nExpect: something-else\r\nContent-Length: 1\r\n\r\nx", 417, "expectation_failed");
  });
});

describe("timeouts", () => {
  // Deadlines on a ManualScheduler: time moves only by t.run(ms), which fires the server's sweep
  // timer on the way; the sockets are real, so each step waits for the bytes it depends on.
  // A deadline is acted on at the second sweep after it passes (sweep interval here: 75 ms).
  const quick = { idleTimeoutMs: 300, headTimeoutMs: 300 };
  const timed = (handler: (ex: ClientExchange) => void = echo, o: Partial<Http1Options> = {}) => {
    const t = new ManualScheduler(0);
    return { t, s: serve(handler, { ...quick, ...o, scheduler: t }) };
  };
  /** Waits until the server has read `n` bytes in all on its connections. */
  const readBy = (s: Served, n: number) => settle(() => [...s.server.conns].reduce((sum, c) => sum + c.bytesIn, 0) >= n, `the server to read ${n} bytes`);

  test("a partial head that stops arriving: 408, then closed", async () => {
    const { t, s } = timed();
    const c = await Client.open(s.port);
    const partial = "GET / HTTP/1.1\r\nHost: h\r\nX-A: ";
    c.write(partial);
    await readBy(s, partial.length);
    await t.run(250);
    expect(c.received).toBe(0);
    await t.run(250);
    const r = await c.response();
    expect(r.status).toBe(408);
    expect((JSON.parse(r.text) as { error: { code: string } }).error.code).toBe("request_timeout");
    expect(r.headers.get("connection")).toBe("close");
    await c.waitClosed();
    expect(s.calls).toHaveLength(0);
  });

  test("a body that stops arriving: 408, then closed", async () => {
    const { t, s } = timed();
    const c = await Client.open(s.port);
    const partial = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc";
    c.write(partial);
    await readBy(s, partial.length);
    await t.run(250);
    expect(c.received).toBe(0);
    await t.run(250);
    expect((await c.response()).status).toBe(408);
    await c.waitClosed();
    expect(s.calls).toHaveLength(0);
  });

  test("slowloris: a head dribbled one byte per 50 ms is cut by headTimeoutMs though it never goes idle", async () => {
    const { t, s } = timed(echo, { idleTimeoutMs: 1000, headTimeoutMs: 300 });
    const c = await Client.open(s.port);
    const bytes = Buffer.from(`GET / HTTP/1.1\r\nHost: h\r\nX-Slow: ${"a".repeat(200)}\r\n\r\n`, "latin1");
    let sent = 0;
    while (!c.closed && c.received === 0 && sent < bytes.length) {
      c.write(bytes.subarray(sent, sent + 1));
      sent++;
      await readBy(s, sent);
      await t.run(50);
    }
    const r = await c.response();
    expect(r.status).toBe(408);
    // Cut by the head deadline, well before the idle one could matter and before the head was whole.
    expect(t.mono()).toBeGreaterThanOrEqual(300);
    expect(t.mono()).toBeLessThan(900);
    expect(sent).toBeLessThan(bytes.length);
    await c.waitClosed();
    expect(s.calls).toHaveLength(0);
  });

  test("an idle keep-alive connection is closed after idleTimeoutMs, with nothing sent", async () => {
    const { t, s } = timed();
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).status).toBe(200);
    await t.run(250);
    expect(c.closed).toBe(false);
    await t.run(250);
    await c.waitClosed();
    expect(c.received).toBe(c.consumed);
    await whenFired(() => s.server.conns.size === 0, 1000, () => "the server to forget the connection");
  });

  test("a connection that sends nothing at all is closed after idleTimeoutMs", async () => {
    const { t, s } = timed();
    const c = await Client.open(s.port);
    await settle(() => s.server.conns.size === 1, "the connection to be accepted");
    await t.run(250);
    expect(c.closed).toBe(false);
    await t.run(250);
    await c.waitClosed();
    expect(c.received).toBe(0);
  });

  test("a handler slower than idleTimeoutMs is not cut, and the connection goes on", async () => {
    const { t, s } = timed(
      (ex) => {
        if (ex.path === "/slow") t.after(700, () => ex.respond(200, {}, "late"));
        else ex.respond(200, {}, "quick");
      },
      { idleTimeoutMs: 200, headTimeoutMs: 200 },
    );
    const c = await Client.open(s.port);
    c.write("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => s.calls.length === 1, 2000, () => "the handler");
    await t.run(700);
    const r = await c.response();
    expect([r.status, r.text]).toEqual([200, "late"]);
    expect(c.closed).toBe(false);
    c.write("GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).text).toBe("quick");
  });

  test("a slowly streamed answer (gaps longer than idleTimeoutMs) is not cut", async () => {
    const { t, s } = timed(
      (ex) => {
        ex.stream(200, {}, Buffer.from("a"));
        t.after(350, () => ex.write(Buffer.from("b")));
        t.after(700, () => ex.end());
      },
      { idleTimeoutMs: 200, headTimeoutMs: 200 },
    );
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => s.calls.length === 1, 2000, () => "the handler");
    await t.run(700);
    expect((await c.response()).text).toBe("ab");
  });

  test("empty lines alone do not keep a connection open past idleTimeoutMs", async () => {
    // "\r\n" before a request line is ignored (RFC 9112 §2.2), but it is not a request under
    // way: a client sending one every 60 ms must not hold the connection forever.
    const { t, s } = timed();
    const c = await Client.open(s.port);
    let sent = 0;
    while (!c.closed && t.mono() < 1800) {
      c.write("\r\n");
      sent += 2;
      await readBy(s, sent);
      await t.run(60);
      // The sweep's cut reaches the client over the real socket.
      if (s.server.conns.size === 0) await c.waitClosed();
    }
    expect(c.closed).toBe(true);
    expect(t.mono()).toBeLessThan(1800);
    expect(s.calls).toHaveLength(0);
  });

  test("a large answer taken slowly is not cut by the idle timeout; one the client stops taking for sendTimeoutMs is", async () => {
    const total = 8 * 1024 * 1024;
    const big = new Uint8Array(total);
    for (let i = 0; i < total; i++) big[i] = (i % 251) ^ ((i >> 16) & 0xff);
    const { t, s } = timed((ex) => ex.respond(200, { "content-type": "application/octet-stream" }, big), { sendTimeoutMs: 1000 });

    // Steady: after every read, 50 ms pass (on the server's clock) before the next.
    const parts: Uint8Array[] = [];
    let reads = 0;
    const done = Promise.withResolvers<void>();
    const steady = await Bun.connect({
      hostname: "127.0.0.1",
      port: s.port,
      socket: {
        data(sock, d) {
          parts.push(new Uint8Array(d));
          reads++;
          sock.pause();
          setImmediate(() => {
            t.advance(50);
            sock.resume();
          });
        },
        close() {
          done.resolve();
        },
        end() {
          done.resolve();
        },
      },
    });
    cleanups.push(() => steady.terminate());
    steady.write("GET /steady HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    await done.promise;
    const got = latin1(concat(parts));
    const bodyAt = got.indexOf("\r\n\r\n") + 4;
    // It took longer than the idle timeout in all, so only the per-read progress kept it alive.
    expect(reads).toBeGreaterThanOrEqual(3);
    expect(t.mono()).toBeGreaterThan(quick.idleTimeoutMs);
    expect(got.startsWith("HTTP/1.1 200 ")).toBe(true);
    expect(Buffer.from(concat(parts).subarray(bodyAt)).equals(Buffer.from(big))).toBe(true);

    // Stalled: reads nothing for twice the send timeout: cut, the answer incomplete.
    const stalled = await Client.open(s.port);
    stalled.socket.pause();
    stalled.write("GET /stalled HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => [...s.server.conns].some((c) => (c as unknown as { pending?: unknown }).pending !== undefined), "the answer to back up");
    await t.run(2000);
    stalled.socket.resume();
    await whenFired(() => (stalled.closed ? true : undefined), 3000, () => "the stalled client to be cut");
    expect(stalled.received).toBeLessThan(total);
  });
});

describe("streamed answers", () => {
  test("stream() then write()s then end(): a chunked body that fetch reads whole", async () => {
    const s = serve((ex) => {
      ex.stream(200, { "content-type": "text/event-stream" }, Buffer.from("data: 1\n\n"));
      let n = 2;
      const tick = () => {
        if (n > 4) {
          ex.end();
          return;
        }
        ex.write(Buffer.from(`data: ${n++}\n\n`));
        setTimeout(tick, 0);
      };
      setTimeout(tick, 0);
    });
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("text/event-stream");
    expect(await r.text()).toBe("data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  });

  test("on the wire: transfer-encoding chunked, one chunk per write, the last chunk, and the connection carries the next request", async () => {
    const s = serve((ex) => {
      if (ex.path === "/plain") return ex.respond(200, {}, "plain");
      ex.stream(200, { "x-s": "1" });
      ex.write(Buffer.from("hello"));
      ex.write(new Uint8Array(0));
      ex.write(Buffer.from(" world!"));
      ex.end();
      ex.end();
    });
    const c = await Client.open(s.port);
    c.write("GET /s HTTP/1.1\r\nHost: h\r\n\r\nGET /plain HTTP/1.1\r\nHost: h\r\n\r\n");
    const r = await c.response();
    expect(r.headers.get("transfer-encoding")).toBe("chunked");
    expect(r.headers.has("content-length")).toBe(false);
    expect(r.headers.get("x-s")).toBe("1");
    expect(r.text).toBe("hello world!");
    expect(c.text()).toContain("\r\n\r\n5\r\nhello\r\n7\r\n world!\r\n0\r\n\r\n");
    expect((await c.response()).text).toBe("plain");
  });

  test("Connection: close with a streamed answer: chunked with connection: close, then closed", async () => {
    const s = serve((ex) => {
      ex.stream(200, {}, Buffer.from("x"));
      ex.end();
    });
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    const r = await c.response();
    expect(r.headers.get("transfer-encoding")).toBe("chunked");
    expect(r.headers.get("connection")).toBe("close");
    expect(r.text).toBe("x");
    await c.waitClosed();
  });

  test("HTTP/1.0: the streamed body is close-delimited, without chunk framing, even with keep-alive asked", async () => {
    const s = serve((ex) => {
      ex.stream(200, { "content-type": "text/plain" }, Buffer.from("one,"));
      setTimeout(() => {
        ex.write(Buffer.from("two,"));
        ex.write(Buffer.from("three"));
        ex.end();
      }, 0);
    });
    for (const extra of ["", "Connection: keep-alive\r\n"]) {
      const c = await Client.open(s.port);
      c.write(`GET /s HTTP/1.0\r\n${extra}\r\n`);
      await c.waitClosed();
      const r = await c.response();
      expect(r.headers.has("transfer-encoding")).toBe(false);
      expect(r.headers.has("content-length")).toBe(false);
      expect(r.headers.get("connection")).toBe("close");
      expect(r.text).toBe("one,two,three");
    }
  });

  test("destroy() mid-stream: fetch's body read rejects, and the raw stream lacks its last chunk", async () => {
    let current: ClientExchange | undefined;
    const s = serve((ex) => {
      current = ex;
      ex.stream(200, {}, Buffer.from("partial "));
    });
    const r = await fetch(`${s.url}/x`);
    expect(r.status).toBe(200);
    current!.destroy();
    let err: unknown;
    try {
      await r.text();
    } catch (e) {
      err = e;
    }
    expect(err).toBeDefined();

    current = undefined;
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => current !== undefined && c.received > 0, 2000, () => "the stream to start");
    current!.destroy();
    await c.waitClosed();
    await expect(c.response()).rejects.toThrow(/closed in the middle/);
  });

  test("backpressure: with a client that does not read, write() returns false; onDrain fires once it reads; 8 MiB arrive intact, in order", async () => {
    const total = 8 * 1024 * 1024;
    const piece = 64 * 1024;
    const expected = new Uint8Array(total);
    for (let i = 0; i < total; i++) expected[i] = (i % 251) ^ ((i >> 16) & 0xff);
    let sent = 0;
    let falses = 0;
    let drains = 0;
    let ended = false;
    const s = serve((ex) => {
      const next = () => {
        const p = expected.subarray(sent, sent + piece);
        sent += p.byteLength;
        return p;
      };
      const pump = () => {
        while (sent < total) {
          if (!ex.write(next())) {
            falses++;
            fire();
            return;
          }
        }
        ended = true;
        ex.end();
        fire();
      };
      ex.onDrain = () => {
        drains++;
        pump();
      };
      if (ex.stream(200, { "content-type": "application/octet-stream" }, next())) pump();
      else falses++;
    });
    const c = await Client.open(s.port);
    c.socket.pause();
    c.write("GET /big HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    await whenFired(() => falses > 0, 3000, () => "write() to return false");
    // Stalled while the client reads nothing: most of the body has not gone out.
    await turns(10);
    expect(ended).toBe(false);
    expect(sent).toBeLessThan(total);
    expect(c.received).toBeLessThan(total / 2);
    const drainsBefore = drains;
    c.socket.resume();
    await c.waitClosed(5000);
    expect(ended).toBe(true);
    expect(drains).toBeGreaterThan(drainsBefore);
    const r = await c.response();
    expect(r.headers.get("transfer-encoding")).toBe("chunked");
    expect(r.body.byteLength).toBe(total);
    expect(Buffer.from(r.body).equals(Buffer.from(expected))).toBe(true);
  });
});

describe("aborts and handler errors", () => {
  test("the client goes away before the answer: onAbort once, aborted set; a later respond() is a harmless no-op", async () => {
    let aborts = 0;
    const s = serve((ex) => {
      if (ex.path === "/after") return ex.respond(200, {}, "fine");
      ex.onAbort = () => {
        aborts++;
        fire();
      };
    });
    const c = await Client.open(s.port);
    c.write("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi");
    await whenFired(() => s.calls.length === 1, 2000, () => "the handler");
    const ex = s.calls[0]!;
    expect(ex.aborted).toBe(false);
    c.socket.terminate();
    await whenFired(() => aborts > 0, 2000, () => "onAbort");
    expect(ex.aborted).toBe(true);
    expect(ex.answered).toBe(true);
    expect(() => ex.respond(200, {}, "too late")).not.toThrow();
    expect(ex.stream(200, {})).toBe(false);
    expect(ex.write(Buffer.from("x"))).toBe(false);
    expect(() => ex.end()).not.toThrow();
    expect(() => ex.destroy()).not.toThrow();
    await whenFired(() => s.server.conns.size === 0, 1000, () => "the server to forget the connection");
    expect(aborts).toBe(1);
    // The server is unharmed.
    const d = await Client.open(s.port);
    d.write("GET /after HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await d.response()).text).toBe("fine");
    expect(aborts).toBe(1);
  });

  test("the client goes away mid-stream: onAbort once, write() returns false", async () => {
    let aborts = 0;
    const s = serve((ex) => {
      ex.onAbort = () => {
        aborts++;
        fire();
      };
      ex.stream(200, {}, Buffer.from("first"));
    });
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => c.received > 0, 2000, () => "the stream to start");
    c.socket.terminate();
    await whenFired(() => aborts > 0, 2000, () => "onAbort");
    const ex = s.calls[0]!;
    expect(ex.aborted).toBe(true);
    expect(ex.write(Buffer.from("more"))).toBe(false);
    ex.end();
    expect(aborts).toBe(1);
  });

  test("a handler that throws before answering: 500 with the errorBody, onHandlerError gets the error, and the connection goes on", async () => {
    const boom = new Error("boom");
    const s = serve((ex) => {
      if (ex.path === "/throw") throw boom;
      echo(ex);
    });
    const c = await Client.open(s.port);
    c.write("GET /throw HTTP/1.1\r\nHost: h\r\n\r\n");
    const r = await c.response();
    expect(r.status).toBe(500);
    expect(r.headers.get("content-type")).toBe("application/json");
    const j = JSON.parse(r.text) as { error: { status: number; code: string } };
    expect(j.error.status).toBe(500);
    expect(j.error.code).toBe("internal_error");
    expect(s.handlerErrors).toEqual([boom]);
    expect(r.headers.has("connection")).toBe(false);
    c.write("GET /fine HTTP/1.1\r\nHost: h\r\n\r\n");
    expect(echoed(await c.response()).path).toBe("/fine");
  });

  test("a handler that throws after starting a stream: the connection is cut (the client sees an incomplete body), onHandlerError gets the error", async () => {
    const s = serve((ex) => {
      ex.stream(200, {}, Buffer.from("begun"));
      throw new Error("mid-stream");
    });
    const c = await Client.open(s.port);
    c.write("GET / HTTP/1.1\r\nHost: h\r\n\r\n");
    await c.waitClosed();
    await expect(c.response()).rejects.toThrow(/closed in the middle/);
    expect(c.text()).toContain("5\r\nbegun\r\n");
    expect(s.handlerErrors).toHaveLength(1);
  });

  test("a handler that throws after answering: its answer stands, onHandlerError gets the error", async () => {
    const s = serve((ex) => {
      ex.respond(200, {}, "answered");
      if (ex.path === "/throw") throw new Error("after");
    });
    const c = await Client.open(s.port);
    c.write("GET /throw HTTP/1.1\r\nHost: h\r\n\r\nGET /next HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).text).toBe("answered");
    expect((await c.response()).text).toBe("answered");
    expect(s.handlerErrors).toHaveLength(1);
  });
});

describe("bodiless statuses", () => {
  test("204 and 304 go out without Content-Length or body, and the connection carries on", async () => {
    const s = serve((ex) => ex.respond(ex.path === "/204" ? 204 : ex.path === "/304" ? 304 : 200, {}, ex.path === "/200" ? "ok" : ""));
    const c = await Client.open(s.port);
    c.write("GET /204 HTTP/1.1\r\nHost: h\r\n\r\nGET /304 HTTP/1.1\r\nHost: h\r\n\r\nGET /200 HTTP/1.1\r\nHost: h\r\n\r\n");
    const a = await c.response({ head: true });
    expect(a.status).toBe(204);
    expect(a.headers.get("content-length")).toBeUndefined();
    const b = await c.response({ head: true });
    expect(b.status).toBe(304);
    expect(b.headers.get("content-length")).toBeUndefined();
    const d = await c.response();
    expect([d.status, d.text]).toEqual([200, "ok"]);
  });
});

describe("HEAD", () => {
  test("a HEAD answer has content-length but no body, and the next request on the connection parses", async () => {
    const s = serve((ex) => ex.respond(200, { "content-type": "text/plain" }, ex.path === "/h" ? "hello head" : `${ex.method} ${ex.path}`));
    const c = await Client.open(s.port);
    c.write("HEAD /h HTTP/1.1\r\nHost: h\r\n\r\nGET /g HTTP/1.1\r\nHost: h\r\n\r\n");
    const h = await c.response({ head: true });
    expect(h.status).toBe(200);
    expect(h.headers.get("content-length")).toBe("10");
    const g = await c.response();
    expect(g.text).toBe("GET /g");
    expect(c.received).toBe(c.consumed);
  });
});

describe("fuzz", () => {
  /** mulberry32: a small seeded PRNG. */
  function prng(seed: number): () => number {
    let a = seed >>> 0;
    return () => {
      a = (a + 0x6d2b79f5) >>> 0;
      let t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  test("500 seeded byte mutations of valid requests: each gets well-formed HTTP/1.1 answers or a close; the server keeps serving", async () => {
    const rand = prng(0x5eed1);
    const int = (n: number) => Math.floor(rand() * n);
    const bases = [
      Buffer.from('POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{"model":"m"}', "latin1"),
      Buffer.from("POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n", "latin1"),
      Buffer.from("GET /v1/models HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n", "latin1"),
    ];
    const palette = [0, 9, 10, 13, 32, 58, 44, 59, 48, 49, 53, 57, 97, 70, 0x7f, 0x80, 0xff];
    const mutate = (b: Buffer): Buffer => {
      let out = Buffer.from(b);
      const n = 1 + int(3);
      for (let k = 0; k < n; k++) {
        const at = int(out.length);
        const byte = rand() < 0.6 ? palette[int(palette.length)]! : int(256);
        const op = int(4);
        if (op === 0) out = Buffer.concat([out.subarray(0, at), out.subarray(at + 1)]);
        else if (op === 1) out = Buffer.concat([out.subarray(0, at), Buffer.from([byte]), out.subarray(at)]);
        else out[at] = byte;
      }
      return out;
    };
    const s = serve((ex) => ex.respond(200, { "x-len": String(ex.body.byteLength) }, ex.method === "HEAD" ? "" : "ok"), { idleTimeoutMs: 300, headTimeoutMs: 300 });
    const statuses = new Map<number, number>();
    let closedWithoutAnswer = 0;
    const one = async (req: Buffer, i: number) => {
      const c = await Client.open(s.port);
      c.write(req);
      await c.waitClosed(3000);
      let rs: Res[];
      try {
        rs = parseAll(c.bytes());
      } catch (e) {
        throw new Error(`mutation ${i}: ${(e as Error).message}; request ${JSON.stringify(req.toString("latin1"))}; received ${JSON.stringify(c.text().slice(0, 400))}`);
      }
      if (rs.length === 0) closedWithoutAnswer++;
      for (const r of rs) statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      // Every answer is one the server gives: the handler's, or a refusal with its JSON error.
      for (const r of rs) {
        if (r.status === 200 || r.status === 100) continue;
        expect({ i, status: r.status, valid: [400, 408, 413, 417, 431, 501, 505].includes(r.status) }).toEqual({ i, status: r.status, valid: true });
        expect((JSON.parse(r.text) as { error: { status: number } }).error.status).toBe(r.status);
      }
    };
    const batch = 100;
    for (let i = 0; i < 500; i += batch) {
      await Promise.all(Array.from({ length: batch }, (_, k) => one(mutate(bases[(i + k) % bases.length]!), i + k)));
    }
    // The run reached both sides of the parser.
    expect(statuses.get(200) ?? 0).toBeGreaterThan(20);
    expect(statuses.get(400) ?? 0).toBeGreaterThan(20);
    expect(closedWithoutAnswer).toBeLessThan(50);
    // No connection left behind, and an ordinary request still works.
    await whenFired(() => s.server.conns.size === 0, 2000, () => `the server's connections to drain (${s.server.conns.size} left)`);
    const c = await Client.open(s.port);
    c.write('POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 13\r\n\r\n{"model":"m"}');
    const r = await c.response();
    expect([r.status, r.text, r.headers.get("x-len")]).toEqual([200, "ok", "13"]);
  }, 20000);
});

// ---- slow and greedy clients: deadlines on the injected clock, pipelining, connection caps

/** Lets the event loop turn n times (I/O callbacks run; no time is waited for). */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

/** Waits for I/O (not time) until f() holds: the event loop turns, the clock stands still. */
async function settle(f: () => boolean, what: string, ms = 3000): Promise<void> {
  const t0 = performance.now();
  while (!f()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Bytes a connection holds unparsed (read from its fields, so it reads the same on any version of the server). */
function unparsed(c: Conn): number {
  const f = c as unknown as { buf: Uint8Array; pos: number };
  return f.buf.byteLength - f.pos;
}

function onlyConn(s: Served): Conn {
  expect(s.server.conns.size).toBe(1);
  return [...s.server.conns][0]!;
}

/** A raw client from a chosen source address (127.0.0.x are all loopback on Linux). */
async function fromAddress(port: number, localAddress: string): Promise<{ sock: NetSocket; text: () => string; closed: () => boolean }> {
  let got = "";
  let closed = false;
  const sock = netConnect({ host: "127.0.0.1", port, localAddress });
  sock.on("data", (d) => {
    got += d.toString("latin1");
    fire();
  });
  sock.on("close", () => {
    closed = true;
    fire();
  });
  sock.on("error", () => {});
  await new Promise<void>((resolve, reject) => {
    sock.once("connect", () => resolve());
    sock.once("error", reject);
  });
  cleanups.push(() => sock.destroy());
  return { sock, text: () => got, closed: () => closed };
}

describe("slow and greedy clients", () => {
  test("a body trickled one byte per idle period is cut at its deadline with 408 (body_timeout, then the minimum rate)", async () => {
    const clock = new ManualScheduler(0);
    const s = serve(echo, { clock, idleTimeoutMs: 10_000, headTimeoutMs: 30_000, bodyTimeoutMs: 30_000, bodyMinRate: 1024 });
    const c = await Client.open(s.port);
    const head = "POST /slow HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n";
    c.write(head);
    await settle(() => s.server.conns.size === 1 && (onlyConn(s) as unknown as { state: number }).state === 1, "the head to be read");
    // One byte every 9 s: never idle for 10 s, so only the body's own deadline can cut it.
    for (let i = 1; i <= 3; i++) {
      c.write("x");
      await settle(() => unparsed(onlyConn(s)) === i, `byte ${i}`);
      clock.advance(9_000);
      s.server.sweep();
    }
    // 27 s in, 3 bytes: within the 30 s (and the 3 ms those bytes earned).
    expect(c.received).toBe(0);
    expect(s.server.conns.size).toBe(1);
    c.write("x");
    await settle(() => unparsed(onlyConn(s)) === 4, "byte 4");
    clock.advance(9_000);
    s.server.sweep();
    const r = await c.response();
    expect(r.status).toBe(408);
    expect(r.headers.get("connection")).toBe("close");
    const j = JSON.parse(r.text) as { error: { code: string; message: string } };
    expect(j.error.code).toBe("request_timeout");
    expect(j.error.message).toContain("body");
    await c.waitClosed();
    expect(s.calls).toHaveLength(0);
  });

  test("a big body at a steady rate above bodyMinRate goes on past bodyTimeoutMs and is served", async () => {
    const clock = new ManualScheduler(0);
    const s = serve((ex) => ex.respond(200, {}, String(ex.body.byteLength)), { clock, maxBodyBytes: 256 * 1024, idleTimeoutMs: 10_000, bodyTimeoutMs: 30_000, bodyMinRate: 1024 });
    const c = await Client.open(s.port);
    const total = 80 * 2048;
    const head = `POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: ${total}\r\n\r\n`;
    c.write(head);
    await settle(() => s.server.conns.size === 1 && onlyConn(s).bytesIn === head.length, "the head to be read");
    // 2 KiB a second for 80 s: twice the minimum rate, well past the 30 s grace.
    const chunk = "y".repeat(2048);
    for (let i = 1; i < 80; i++) {
      c.write(chunk);
      await settle(() => onlyConn(s).bytesIn === head.length + i * 2048, `second ${i}`);
      clock.advance(1_000);
      s.server.sweep();
    }
    expect(c.received).toBe(0);
    c.write(chunk);
    const r = await c.response();
    expect([r.status, r.text]).toEqual([200, String(total)]);
  });

  test("a head trickled one byte per idle period is cut at headTimeoutMs on the injected clock", async () => {
    const clock = new ManualScheduler(0);
    const s = serve(echo, { clock, idleTimeoutMs: 10_000, headTimeoutMs: 30_000 });
    const c = await Client.open(s.port);
    const head = "GET / HTTP/1.1\r\nHost: h\r\nX-Slow: abcdefgh\r\n\r\n";
    for (let i = 0; i < 3; i++) {
      c.write(head[i]!);
      await settle(() => s.server.conns.size === 1 && unparsed(onlyConn(s)) === i + 1, `byte ${i}`);
      clock.advance(9_000);
      s.server.sweep();
    }
    expect(c.received).toBe(0);
    c.write(head[3]!);
    await settle(() => unparsed(onlyConn(s)) === 4, "byte 3");
    clock.advance(9_000);
    s.server.sweep();
    const r = await c.response();
    expect(r.status).toBe(408);
    expect((JSON.parse(r.text) as { error: { message: string } }).error.message).toContain("head");
  });

  // A busy event loop (a big heartbeat being parsed and applied, on the admin listener of the
  // same process) delays the sweep timer. The keep-alive deadline of a connection must count
  // from when its answer went out, not from the last sweep before that; and a request that
  // reached the server while the loop was busy must be read before its connection is judged
  // idle, though the late timer runs before the reads that queued up meanwhile.
  test("a keep-alive deadline counts from the answer, not from a sweep the loop was too busy to run since", async () => {
    const clock = new ManualScheduler(0);
    const s = serve(echo, { clock, idleTimeoutMs: 10_000, headTimeoutMs: 30_000 });
    s.server.sweep();
    const c = await Client.open(s.port);
    // 9 s with no sweep (the loop was busy), then a request arrives and is answered.
    clock.advance(9_000);
    c.write("GET /1 HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).status).toBe(200);
    // 2 s idle since the answer: well within the 10 s.
    clock.advance(2_000);
    s.server.sweep();
    await turns(10);
    expect(c.closed).toBe(false);
    c.write("GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
    const r = await c.response();
    expect([r.status, (JSON.parse(r.text) as { path: string }).path]).toEqual([200, "/2"]);
    // Idle past 10 s since that answer, it is closed, with nothing sent.
    clock.advance(10_001);
    s.server.sweep();
    await c.waitClosed();
    expect(c.received).toBe(c.consumed);
  });

  test("a request that arrives while another request's handler holds the event loop is answered, not dropped as idle by the sweep that runs first", async () => {
    const clock = new ManualScheduler(0);
    let c: Client | undefined;
    // Short timeouts make the sweep timer (real time) run every 10 ms; the deadlines follow the manual clock.
    const s = serve(
      (ex) => {
        if (ex.path === "/busy") {
          // While this handler holds the loop, the keep-alive connection's next request
          // arrives, and then its idle deadline passes. When the loop comes back, the overdue
          // sweep timer runs before that request is read.
          c!.write("GET /2 HTTP/1.1\r\nHost: h\r\n\r\n");
          clock.advance(1_000);
          const busyUntil = performance.now() + 60;
          while (performance.now() < busyUntil) {
            // Held, as by parsing and applying a big heartbeat.
          }
        }
        echo(ex);
      },
      { clock, idleTimeoutMs: 40, headTimeoutMs: 40, bodyTimeoutMs: 40 },
    );
    c = await Client.open(s.port);
    c.write("GET /1 HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await c.response()).status).toBe(200);
    const busy = await Client.open(s.port);
    busy.write("GET /busy HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await busy.response()).status).toBe(200);
    const r = await c.response();
    expect([r.status, (JSON.parse(r.text) as { path: string }).path]).toEqual([200, "/2"]);
    expect(c.closed).toBe(false);
  });

  test("a pipelining flood behind a busy request stays within one read per connection, and memory goes back after the sockets close", async () => {
    const held: ClientExchange[] = [];
    // The router's own limits: 8 MiB bodies, 16 KiB heads.
    const s = serve((ex) => void held.push(ex), { maxBodyBytes: 8 * 1024 * 1024, maxHeadBytes: 16 * 1024 });
    Bun.gc(true);
    const rss0 = process.memoryUsage().rss;
    const n = 16;
    const clients = await Promise.all(Array.from({ length: n }, () => Client.open(s.port)));
    for (const c of clients) c.write("GET /busy HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => held.length === n, 3000, () => `${n} requests in flight (${held.length})`);
    // Each pushes pipelined requests for as long as the server takes them (or 12 MiB).
    const data = Buffer.from("GET / HTTP/1.1\r\nHost: h\r\n\r\n".repeat(16 * 1024));
    const pushed = new Array<number>(n).fill(0);
    const t0 = performance.now();
    while (performance.now() - t0 < 1500) {
      let moved = 0;
      for (let i = 0; i < n; i++) {
        if (pushed[i]! >= 12 * 1024 * 1024) continue;
        const w = clients[i]!.socket.write(data);
        if (w > 0) moved += w;
        pushed[i]! += Math.max(0, w);
      }
      // Real: every socket is full; wait for the server to take some (I/O, not a deadline).
      if (moved === 0) await Bun.sleep(5);
      else await new Promise((r) => setImmediate(r));
    }
    const buffered = [...s.server.conns].map(unparsed);
    const rssPeak = process.memoryUsage().rss;
    // One read (Bun hands at most 512 KiB) behind the request in flight, per connection.
    for (const b of buffered) expect(b).toBeLessThanOrEqual(512 * 1024 + 16 * 1024);
    expect(held).toHaveLength(n);
    expect(rssPeak - rss0).toBeLessThan(n * 2 * 1024 * 1024 + 64 * 1024 * 1024);
    for (const c of clients) c.socket.terminate();
    await settle(() => s.server.conns.size === 0, "the connections to close");
    held.length = 0;
    Bun.gc(true);
    const rssAfter = process.memoryUsage().rss;
    expect(rssAfter - rss0).toBeLessThan(64 * 1024 * 1024);
  }, 20000);

  test("pipelined requests are still all answered in order once the busy one finishes", async () => {
    let first: ClientExchange | undefined;
    const s = serve((ex) => {
      if (ex.path === "/busy") first = ex;
      else ex.respond(200, {}, ex.path);
    });
    const c = await Client.open(s.port);
    c.write("GET /busy HTTP/1.1\r\nHost: h\r\n\r\n");
    await whenFired(() => first !== undefined, 2000, () => "the busy request");
    c.write("GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => unparsed(onlyConn(s)) > 0, "the pipelined request");
    c.write("GET /b HTTP/1.1\r\nHost: h\r\n\r\n");
    first!.respond(200, {}, "busy");
    expect((await c.response()).text).toBe("busy");
    expect((await c.response()).text).toBe("/a");
    expect((await c.response()).text).toBe("/b");
  });

  test("a busy request with Connection: close and one pipelined behind it: answered, closed, and the server sees the client go at once", async () => {
    let first: ClientExchange | undefined;
    const s = serve((ex) => {
      if (ex.path === "/busy") first = ex;
      else ex.respond(200, {}, ex.path);
    });
    const c = await Client.open(s.port);
    c.write("GET /busy HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    await whenFired(() => first !== undefined, 2000, () => "the busy request");
    c.write("GET /a HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => unparsed(onlyConn(s)) > 0, "the pipelined request");
    first!.respond(200, {}, "busy");
    expect((await c.response()).text).toBe("busy");
    await c.waitClosed();
    c.socket.end();
    // Well before the idle timeout (5 s here): a socket paused for pipelining still sees the close.
    await settle(() => s.server.conns.size === 0, "the server to forget the connection", 1000);
  });

  test("past maxConnections a new connection gets a short 503 and is closed at once; a freed slot is taken again", async () => {
    const shed: string[] = [];
    const s = serve(echo, { maxConnections: 3, onShed: (cap) => void shed.push(cap) });
    const open: Client[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await Client.open(s.port);
      c.write(`GET /${i} HTTP/1.1\r\nHost: h\r\n\r\n`);
      expect((await c.response()).status).toBe(200);
      open.push(c);
    }
    const over = await Client.open(s.port);
    const r = await over.response();
    expect(r.status).toBe(503);
    expect(r.headers.get("connection")).toBe("close");
    expect(r.headers.get("retry-after")).toBe("1");
    expect((JSON.parse(r.text) as { error: { code: string } }).error.code).toBe("overloaded");
    await over.waitClosed();
    expect(shed).toEqual(["total"]);
    expect(s.server.conns.size).toBe(3);
    // The ones admitted are served on.
    open[0]!.write("GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await open[0]!.response()).status).toBe(200);
    open[1]!.socket.terminate();
    await settle(() => s.server.conns.size === 2, "a slot to free");
    const next = await Client.open(s.port);
    next.write("GET /next HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await next.response()).status).toBe(200);
  });

  /** Answers /auth as an authenticated request, holds /hold unanswered, echoes the rest. */
  const vouching = (held: ClientExchange[]) => (ex: ClientExchange) => {
    if (ex.path === "/auth") ex.authenticated();
    if (ex.path === "/hold") held.push(ex);
    else echo(ex);
  };

  test("until a request on it authenticates, a connection has the short deadline for each head; then the usual idle and head timeouts", async () => {
    const clock = new ManualScheduler(0);
    const s = serve(vouching([]), { clock, idleTimeoutMs: 10_000, headTimeoutMs: 30_000, unauthenticated: { headTimeoutMs: 2_000, maxConnections: 10 } });
    s.server.sweep();
    const idle = await Client.open(s.port);
    const slow = await Client.open(s.port);
    const answered = await Client.open(s.port);
    const vouched = await Client.open(s.port);
    slow.write("GET / HTTP/1.1\r\nHost: h\r\n");
    answered.write("GET /open HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await answered.response()).status).toBe(200);
    vouched.write("GET /auth HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await vouched.response()).status).toBe(200);
    await settle(() => s.server.conns.size === 4 && s.server.unauth.size === 3, "three unauthenticated connections and one authenticated");
    clock.advance(1_500);
    s.server.sweep();
    await turns(10);
    expect([idle.closed, slow.closed, answered.closed, vouched.closed]).toEqual([false, false, false, false]);
    clock.advance(1_000);
    s.server.sweep();
    // Past 2 s: a slow head gets 408 saying why; idle ones are closed, answered or not.
    const r = await slow.response();
    expect(r.status).toBe(408);
    expect((JSON.parse(r.text) as { error: { message: string } }).error.message).toContain("2000 ms at most before a connection has authenticated");
    await idle.waitClosed();
    await answered.waitClosed();
    // The authenticated one keeps the idle timeout, and a head on it the head timeout.
    clock.advance(7_000);
    s.server.sweep();
    await turns(10);
    expect(vouched.closed).toBe(false);
    vouched.write("GET /again HTTP/1.1\r\nHost: h\r\n");
    await settle(() => unparsed(onlyConn(s)) > 0, "part of a head");
    clock.advance(9_000);
    s.server.sweep();
    await turns(10);
    expect(vouched.closed).toBe(false);
    vouched.write("\r\n");
    expect((await vouched.response()).status).toBe(200);
  });

  test("a new connection that finds the unauthenticated share full closes the oldest one with no request past its head, then one reading a body; never one being answered or one that authenticated", async () => {
    const held: ClientExchange[] = [];
    const shed: string[] = [];
    const s = serve(vouching(held), { maxConnections: 10, unauthenticated: { headTimeoutMs: 60_000, maxConnections: 3 }, onShed: (cap) => void shed.push(cap) });
    const vouched = await Client.open(s.port);
    vouched.write("GET /auth HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await vouched.response()).status).toBe(200);
    const busy = await Client.open(s.port);
    busy.write("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => held.length === 1, "the held request");
    const body = await Client.open(s.port);
    body.write("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nab");
    const head = await Client.open(s.port);
    head.write("GET / HTTP/1.1\r\n");
    await settle(() => s.server.conns.size === 4 && s.server.unauth.size === 3 && [...s.server.conns].every((c) => c.bytesIn > 0), "three unauthenticated connections at work");
    // The share is full: the slow head goes (the oldest with nothing past its head), not the
    // older ones reading a body or being answered.
    const first = await Client.open(s.port);
    await head.waitClosed();
    expect([busy.closed, body.closed, vouched.closed]).toEqual([false, false, false]);
    first.write("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => held.length === 2, "the second held request");
    // Now only the body is left to close.
    const second = await Client.open(s.port);
    await body.waitClosed();
    second.write("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => held.length === 3, "the third held request");
    // Every unauthenticated connection is being answered: a new one is shed with a 503.
    const third = await Client.open(s.port);
    const r = await third.response();
    expect(r.status).toBe(503);
    expect(r.text).toContain("connections that have not authenticated");
    expect(shed).toEqual(["evicted", "evicted", "unauthenticated"]);
    expect(s.server.shed).toMatchObject({ evicted: 2, unauthenticated: 1, total: 0 });
    // The authenticated connection was never a candidate, and is served on.
    vouched.write("GET /again HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await vouched.response()).status).toBe(200);
    for (const ex of held) ex.respond(200, {}, "done");
    expect((await busy.response()).status).toBe(200);
  });

  test("at the total cap, a new connection closes an unauthenticated one; with none left it is shed as before", async () => {
    const shed: string[] = [];
    const s = serve(vouching([]), { maxConnections: 3, unauthenticated: { headTimeoutMs: 60_000, maxConnections: 3 }, onShed: (cap) => void shed.push(cap) });
    const vouched: Client[] = [];
    for (let i = 0; i < 2; i++) {
      const c = await Client.open(s.port);
      c.write("GET /auth HTTP/1.1\r\nHost: h\r\n\r\n");
      expect((await c.response()).status).toBe(200);
      vouched.push(c);
    }
    const idle = await Client.open(s.port);
    await settle(() => s.server.conns.size === 3, "three connections");
    const next = await Client.open(s.port);
    await idle.waitClosed();
    next.write("GET /auth HTTP/1.1\r\nHost: h\r\n\r\n");
    expect((await next.response()).status).toBe(200);
    const over = await Client.open(s.port);
    expect((await over.response()).status).toBe(503);
    expect(shed).toEqual(["evicted", "total"]);
    expect(vouched.every((c) => !c.closed)).toBe(true);
  });

  test("the per-address cap sheds a third connection from 127.0.0.2 while 127.0.0.1 is still served", async () => {
    const s = serve(echo, { maxConnectionsPerAddress: 2 });
    const req = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    const a = [await fromAddress(s.port, "127.0.0.2"), await fromAddress(s.port, "127.0.0.2")];
    for (const c of a) {
      c.sock.write(req);
      await whenFired(() => c.text().startsWith("HTTP/1.1 200 "), 2000, () => "an answer from 127.0.0.2");
    }
    expect(s.server.perAddress.get("127.0.0.2")).toBe(2);
    const third = await fromAddress(s.port, "127.0.0.2");
    await whenFired(() => third.closed(), 2000, () => "the third connection to be shed");
    expect(third.text()).toStartWith("HTTP/1.1 503 ");
    expect(s.server.shed.address).toBe(1);
    const other = await fromAddress(s.port, "127.0.0.1");
    other.sock.write(req);
    await whenFired(() => other.text().startsWith("HTTP/1.1 200 "), 2000, () => "an answer to 127.0.0.1");
    expect(s.server.perAddress.get("127.0.0.2")).toBe(2);
    expect(s.server.perAddress.get("127.0.0.1")).toBe(1);
  });
});
