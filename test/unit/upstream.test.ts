// The router's HTTP/1.1 client (src/http/client.ts) against real servers on 127.0.0.1:
// Bun.serve for the ordinary cases, and raw Bun.listen servers that send exactly the bytes a
// test needs — split anywhere, chunked with extensions and trailers, close-delimited, broken —
// for the parser's edge cases. Checks keep-alive reuse, the stale-socket retry, backpressure,
// aborts and protocol errors.

import { afterEach, describe, expect, test } from "bun:test";
import type { Socket, TCPSocketListener } from "bun";
import { type ExchangeHandler, type UpstreamHead, UpstreamError, UpstreamPool } from "../../src/http/client";
import { ManualScheduler } from "../../src/lib/scheduler";
import { rawEngine } from "../helpers/raw-http";
import { until } from "../helpers/until";

/** Lets the event loop turn n times (I/O callbacks run; no time is waited for). */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function pool(o: ConstructorParameters<typeof UpstreamPool>[0] = {}): UpstreamPool {
  const p = new UpstreamPool(o);
  cleanups.push(() => p.close());
  return p;
}

interface Result {
  head: UpstreamHead | undefined;
  body: string;
  chunks: number;
  error: UpstreamError | undefined;
  received: boolean | undefined;
  ended: boolean;
}

/** Sends one POST and resolves when the exchange ends or fails. */
function send(p: UpstreamPool, url: string, body = '{"model":"m"}', extra: [string, string][] = [], hooks: Partial<ExchangeHandler> = {}): Promise<Result> & { abort(): void } {
  const r: Result = { head: undefined, body: "", chunks: 0, error: undefined, received: undefined, ended: false };
  const dec = new TextDecoder();
  let ex: ReturnType<UpstreamPool["post"]> | undefined;
  const done = new Promise<Result>((resolve) => {
    ex = p.post(url, "/v1/chat/completions", new TextEncoder().encode(body), extra, {
      onHead: (h) => {
        r.head = h;
        hooks.onHead?.(h);
      },
      onData: (d) => {
        r.body += dec.decode(d, { stream: true });
        r.chunks++;
        hooks.onData?.(d);
      },
      onEnd: () => {
        r.ended = true;
        resolve(r);
      },
      onError: (e, received) => {
        r.error = e;
        r.received = received;
        resolve(r);
      },
    });
  });
  return Object.assign(done, { abort: () => ex!.abort() });
}

/** A raw TCP server: `onRequest` gets each request's text (head and body) and the socket. */
function rawServer(onRequest: (s: Socket<{ buf: string }>, req: string, n: number) => void): { url: string; server: TCPSocketListener<{ buf: string }>; connections: () => number; requests: string[] } {
  let connections = 0;
  const requests: string[] = [];
  const server = Bun.listen<{ buf: string }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        connections++;
        s.data = { buf: "" };
      },
      data(s, d) {
        s.data.buf += new TextDecoder().decode(d);
        for (;;) {
          const end = s.data.buf.indexOf("\r\n\r\n");
          if (end < 0) return;
          const len = Number(/content-length: (\d+)/i.exec(s.data.buf.slice(0, end))?.[1] ?? 0);
          if (s.data.buf.length < end + 4 + len) return;
          const req = s.data.buf.slice(0, end + 4 + len);
          s.data.buf = s.data.buf.slice(end + 4 + len);
          requests.push(req);
          onRequest(s, req, requests.length);
        }
      },
    },
  });
  cleanups.push(() => server.stop(true));
  return { url: `http://127.0.0.1:${server.port}`, server, connections: () => connections, requests };
}

/** Writes `text` in pieces of `size` bytes, each in its own turn of the event loop. */
async function dribble(s: Socket<unknown>, text: string, size: number): Promise<void> {
  const bytes = new TextEncoder().encode(text);
  for (let i = 0; i < bytes.length; i += size) {
    s.write(bytes.subarray(i, i + size));
    s.flush();
    // Real: a millisecond apart, the pieces reach the client in reads of their own (what a
    // split at every byte means); no clock of the client's decides it.
    await Bun.sleep(1);
  }
}

describe("requests and framing", () => {
  test("a POST goes out with Host, Content-Type, Content-Length and the extra headers; a Content-Length body comes back whole", async () => {
    const seen: { method: string; path: string; headers: Record<string, string>; body: string }[] = [];
    const server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      async fetch(req) {
        seen.push({ method: req.method, path: new URL(req.url).pathname, headers: Object.fromEntries(req.headers), body: await req.text() });
        return new Response('{"ok":true}', { headers: { "content-type": "application/json", "x-request-id": "abc" } });
      },
    });
    cleanups.push(() => server.stop(true));
    const r = await send(pool(), `http://127.0.0.1:${server.port}`, '{"model":"m","x":"é"}', [["x-request-id", "abc"], ["user-agent", "ua/1"]]);
    expect(r.error).toBeUndefined();
    expect(r.head!.status).toBe(200);
    expect(r.head!.contentLength).toBe(11);
    expect(r.head!.headers).toContainEqual(["x-request-id", "abc"]);
    expect(r.body).toBe('{"ok":true}');
    expect(seen).toHaveLength(1);
    expect(seen[0]!.method).toBe("POST");
    expect(seen[0]!.path).toBe("/v1/chat/completions");
    expect(seen[0]!.body).toBe('{"model":"m","x":"é"}');
    expect(seen[0]!.headers["content-length"]).toBe(String(new TextEncoder().encode('{"model":"m","x":"é"}').length));
    expect(seen[0]!.headers["content-type"]).toBe("application/json");
    expect(seen[0]!.headers["host"]).toBe(`127.0.0.1:${server.port}`);
    expect(seen[0]!.headers["x-request-id"]).toBe("abc");
    expect(seen[0]!.headers["user-agent"]).toBe("ua/1");
  });

  test("the request head is latin1: header values with bytes >= 0x80 go out as those bytes, and a key as Authorization: Bearer", async () => {
    const srv = rawEngine(() => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-V: caf\xe9\r\n\r\nok");
    cleanups.push(() => srv.stop());
    const p = pool();
    // A body longer than the head: the head's UTF-8 size once overran the buffer sized for it.
    const r = await new Promise<Result>((resolve) => {
      const out: Result = { head: undefined, body: "", chunks: 0, error: undefined, received: undefined, ended: false };
      p.post(srv.url, "/v1/chat/completions", new TextEncoder().encode("x".repeat(5000)), [["user-agent", "caf\xe9\xff"]], {
        onHead: (h) => (out.head = h),
        onData: () => {},
        onEnd: () => resolve(out),
        onError: (e) => resolve({ ...out, error: e }),
      }, "engine-key-1");
    });
    expect(r.error).toBeUndefined();
    expect(srv.requests[0]!.headers).toContainEqual(["user-agent", " caf\xe9\xff"]);
    expect(srv.requests[0]!.headers.filter(([n]) => n === "authorization")).toEqual([["authorization", " Bearer engine-key-1"]]);
    expect(srv.requests[0]!.body).toBe("x".repeat(5000));
    // The engine's value comes back as latin1 text: one character per byte.
    expect(r.head!.headers).toContainEqual(["x-v", "caf\xe9"]);
  });

  test("a path in the endpoint URL prefixes every request path", async () => {
    const srv = rawServer((s) => s.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    const r = await send(pool(), `${srv.url}/engine/`);
    expect(r.ended).toBe(true);
    expect(srv.requests[0]!.startsWith("POST /engine/v1/chat/completions HTTP/1.1\r\n")).toBe(true);
  });

  test("a chunked response split every few bytes, with chunk extensions, upper-case hex and trailers, decodes exactly", async () => {
    const payload = "data: one\n\n" + "x".repeat(300) + "data: [DONE]\n\n";
    const chunked = `${(11).toString(16)};ext=1\r\ndata: one\n\n\r\n12C\r\n${"x".repeat(300)}\r\nE\r\ndata: [DONE]\n\n\r\n0\r\nx-trailer: yes\r\n\r\n`;
    const srv = rawServer((s) => void dribble(s, `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`, 3));
    const p = pool();
    const r = await send(p, srv.url);
    expect(r.error).toBeUndefined();
    expect(r.head!.contentLength).toBe(-1);
    expect(r.body).toBe(payload);
    // The socket went back to the pool and carries the next request.
    expect(p.stats().idle).toBe(1);
    const again = await send(p, srv.url);
    expect(again.body).toBe(payload);
    expect(srv.connections()).toBe(1);
  });

  test("a head split in two at every possible byte (mid-line, between CR and LF, at the blank line) parses the same", async () => {
    const head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: r1\r\nTransfer-Encoding: chunked\r\n\r\n";
    const msg = `${head}5\r\nhello\r\n0\r\n\r\n`;
    let split = 0;
    const srv = rawServer((s) => {
      const at = split;
      s.write(msg.slice(0, at));
      s.flush();
      // Real: a millisecond apart, the halves reach the client in reads of their own.
      setTimeout(() => s.write(msg.slice(at)), 1);
    });
    const p = pool();
    for (split = 1; split < head.length + 3; split++) {
      const r = await send(p, srv.url);
      expect({ split, error: r.error?.message, status: r.head?.status, body: r.body }).toEqual({ split, error: undefined, status: 200, body: "hello" });
      expect(r.head!.headers).toEqual([
        ["content-type", "text/event-stream"],
        ["x-request-id", "r1"],
        ["transfer-encoding", "chunked"],
      ]);
    }
    expect(srv.connections()).toBe(1);
  });

  test("a whole response in one packet, and a Content-Length body split in pieces", async () => {
    const srv = rawServer((s, _req, n) => {
      const body = '{"n":' + n + ',"pad":"' + "p".repeat(5000) + '"}';
      const msg = `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
      if (n === 1) s.write(msg);
      else void dribble(s, msg, 777);
    });
    const p = pool();
    const a = await send(p, srv.url);
    const b = await send(p, srv.url);
    expect(JSON.parse(a.body).n).toBe(1);
    expect(JSON.parse(b.body).n).toBe(2);
    expect(b.body.length).toBe(5000 + '{"n":2,"pad":""}'.length);
    expect(srv.connections()).toBe(1);
  });

  test("interim 1xx responses are skipped; 204 has no body; a body without length runs to the close and the socket is not reused", async () => {
    const srv = rawServer((s, _req, n) => {
      if (n === 1) s.write("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
      else if (n === 2) s.write("HTTP/1.1 204 No Content\r\n\r\n");
      else {
        s.write("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end");
        s.end();
      }
    });
    const p = pool();
    const a = await send(p, srv.url);
    expect([a.head!.status, a.body]).toEqual([200, "ok"]);
    const b = await send(p, srv.url);
    expect([b.head!.status, b.body, b.ended]).toEqual([204, "", true]);
    const c = await send(p, srv.url);
    expect([c.head!.status, c.body, c.ended, c.error]).toEqual([200, "until the end", true, undefined]);
    expect(p.stats().idle).toBe(0);
  });

  test("Connection: close and HTTP/1.0 answers are not pooled", async () => {
    const srv = rawServer((s, _req, n) => {
      if (n === 1) s.write("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na");
      else s.write("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nb");
    });
    const p = pool();
    expect((await send(p, srv.url)).body).toBe("a");
    expect(p.stats().idle).toBe(0);
    expect((await send(p, srv.url)).body).toBe("b");
    expect(p.stats().idle).toBe(0);
    expect(srv.connections()).toBe(2);
  });
});

describe("errors", () => {
  test("nothing listening: a connect error, nothing received", async () => {
    const srv = rawServer(() => {});
    const url = srv.url;
    srv.server.stop(true);
    const r = await send(pool(), url);
    expect(r.error?.kind).toBe("connect");
    expect(r.received).toBe(false);
  });

  test("an endpoint URL we cannot speak to is a connect error through the handler, never a throw", async () => {
    const p = pool();
    for (const url of ["ftp://127.0.0.1:21", "not a url"]) {
      const r = await send(p, url);
      expect(r.error?.kind).toBe("connect");
      expect(r.received).toBe(false);
    }
  });

  test("not HTTP, a bad Content-Length, a bad chunk size, a head too large: protocol errors, socket dropped", async () => {
    const answers = [
      "SSH-2.0-OpenSSH\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      `HTTP/1.1 200 OK\r\nX-Big: ${"b".repeat(2000)}\r\n`,
    ];
    const srv = rawServer((s, _req, n) => s.write(answers[n - 1]!));
    const p = pool({ maxHeadBytes: 1024 });
    const msgs: string[] = [];
    for (let i = 0; i < answers.length; i++) {
      const r = await send(p, srv.url);
      expect(r.error?.kind).toBe("protocol");
      msgs.push(r.error!.message);
    }
    expect(msgs[0]).toContain("status line");
    expect(msgs[1]!.toLowerCase()).toContain("content-length");
    expect(msgs[2]).toContain("chunk");
    expect(msgs[3]).toContain("1024");
    expect(p.stats().open).toBe(0);
  });

  test("as strict as the server: a bare LF, obs-fold, a bad name, TE with CL, a chunk-size line without CR: protocol errors, socket dropped", async () => {
    const answers = [
      "HTTP/1.1 200 OK\r\nX-A: a\nSet-Cookie: x=y\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nX A: a\r\nContent-Length: 0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\nok\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
    ];
    const srv = rawServer((s, _req, n) => s.write(answers[n - 1]!));
    const p = pool();
    for (let i = 0; i < answers.length; i++) {
      const r = await send(p, srv.url);
      expect({ i, kind: r.error?.kind }).toEqual({ i, kind: "protocol" });
      expect(r.error!.message).not.toContain("127.0.0.1");
    }
    expect(p.stats().open).toBe(0);
  });

  test("the engine dies mid-body: a reset error that says bytes were received", async () => {
    const srv = rawServer((s) => {
      s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n");
      s.flush();
      setImmediate(() => s.terminate());
    });
    const r = await send(pool(), srv.url);
    expect(r.body).toBe("hello");
    expect(r.error?.kind).toBe("reset");
    expect(r.received).toBe(true);
  });

  test("a pooled socket the engine closed before a request is answered goes again on a fresh one", async () => {
    // The engine answers, then closes each connection as soon as the next request arrives on
    // it, without answering: what a keep-alive timeout racing our request looks like.
    const srv = rawServer((s, _req, n) => {
      if (n === 2) s.terminate();
      else s.write(`HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n${n}`);
    });
    const p = pool();
    expect((await send(p, srv.url)).body).toBe("1");
    const r = await send(p, srv.url);
    expect(r.error).toBeUndefined();
    expect(r.body).toBe("3");
    expect(srv.connections()).toBe(2);
  });

  test("a fresh socket closed before answering is an error, not a retry", async () => {
    const srv = rawServer((s) => s.terminate());
    const r = await send(pool(), srv.url);
    expect(r.error?.kind).toBe("reset");
    expect(r.received).toBe(false);
    expect(srv.requests).toHaveLength(1);
  });
});

describe("pool, aborts and backpressure", () => {
  test("concurrent exchanges each get a socket; afterwards the pool keeps them up to its limit, and idle ones expire", async () => {
    const t = new ManualScheduler(0);
    // The engine answers only once all five requests are in, so each needs a socket of its own.
    const held: (() => void)[] = [];
    const srv = rawServer((s) => {
      held.push(() => s.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"));
      if (held.length === 5) for (const h of held) h();
    });
    const p = pool({ maxIdlePerOrigin: 3, idleTimeoutMs: 1000, scheduler: t });
    const rs = await Promise.all(Array.from({ length: 5 }, () => send(p, srv.url)));
    expect(rs.map((r) => r.body)).toEqual(["ok", "ok", "ok", "ok", "ok"]);
    expect(srv.connections()).toBe(5);
    expect(p.stats().idle).toBe(3);
    t.advance(500);
    p.sweep();
    expect(p.stats().idle).toBe(3);
    t.advance(501);
    p.sweep();
    expect(p.stats().idle).toBe(0);
  });

  test("abort mid-response closes the socket (the engine sees it) and no callback follows", async () => {
    let closed = false;
    const server = Bun.listen<{ buf: string }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(s) {
          s.data = { buf: "" };
        },
        data(s) {
          s.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n");
        },
        close() {
          closed = true;
        },
      },
    });
    cleanups.push(() => server.stop(true));
    const p = pool();
    let calls = 0;
    const r = send(p, `http://127.0.0.1:${server.port}`, "{}", [], {
      onData: () => {
        calls++;
        r.abort();
      },
    });
    // The engine sees the socket close; by then, any callback the abort failed to stop would have come.
    await until("the engine to see the socket close", () => closed);
    let settled = false;
    void r.then(() => {
      settled = true;
    });
    await turns(10);
    expect(settled).toBe(false);
    expect(calls).toBe(1);
    expect(p.stats().open).toBe(0);
  });

  test("pause stops reading (the engine's writes back up); resume delivers everything, in order", async () => {
    const total = 8 * 1024 * 1024;
    const piece = "0123456789abcdef".repeat(4096); // 64 KiB
    let wroteAll = false;
    let backedUp = false;
    const server = Bun.listen<{ left: number; started: boolean }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(s) {
          s.data = { left: total, started: false };
        },
        data(s) {
          if (s.data.started) return;
          s.data.started = true;
          s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${total}\r\n\r\n`);
          pump(s);
        },
        drain(s) {
          pump(s);
        },
      },
    });
    const pump = (s: Socket<{ left: number }>) => {
      while (s.data.left > 0) {
        // Continue the pattern where the last (possibly short) write stopped.
        const at = (total - s.data.left) % piece.length;
        const want = Math.min(piece.length - at, s.data.left);
        const n = s.write(piece, at, want);
        s.data.left -= Math.max(0, n);
        if (n < want) {
          backedUp = true;
          return;
        }
      }
      wroteAll = true;
    };
    cleanups.push(() => server.stop(true));
    const p = pool();
    let got = 0;
    let ok = true;
    let exRef: { pause(): void; resume(): void } | undefined;
    const dec = new TextDecoder();
    const done = new Promise<void>((resolve, reject) => {
      exRef = p.post(`http://127.0.0.1:${server.port}`, "/x", new Uint8Array(0), [], {
        onHead: () => {},
        onData: (d) => {
          // Every byte is where the repeating pattern says it must be.
          const s = dec.decode(d);
          for (let i = 0; i < s.length; i += 997) if (s[i] !== "0123456789abcdef"[(got + i) % 16]) ok = false;
          got += d.length;
        },
        onEnd: () => resolve(),
        onError: (e) => reject(e),
      });
    });
    exRef!.pause();
    // Paused from the start: the engine writes until the kernel's buffers are full, then waits.
    await until("the engine's writes to back up", () => backedUp);
    await turns(20);
    // Paused: far less than the whole body arrived, and the engine could not write it all.
    expect(got).toBeLessThan(total / 2);
    expect(wroteAll).toBe(false);
    exRef!.resume();
    await done;
    expect(got).toBe(total);
    expect(ok).toBe(true);
  });

  test("close() fails exchanges in flight and refuses new ones", async () => {
    const srv = rawServer(() => {});
    const p = new UpstreamPool();
    const inflight = send(p, srv.url);
    await until("the request to reach the engine", () => srv.requests.length > 0);
    p.close();
    const r = await inflight;
    expect(r.error).toBeInstanceOf(UpstreamError);
    const later = await send(p, srv.url);
    expect(later.error?.message).toContain("shutting down");
  });
});
