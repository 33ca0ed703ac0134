// One table of HTTP/1.1 framing cases, run against both directions of the wire module
// (src/http): each case's header lines and body bytes go to the server (src/http/server.ts) as
// a request, and come back to the engine client (src/http/client.ts) as a response. Both must
// agree: the body read, or a refusal (the server answers its status and closes; the client
// reports a protocol error and drops the socket). Valid and malformed heads, Content-Length,
// Transfer-Encoding, chunk framings, trailers and limits.

import { afterEach, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { Http1Server } from "../../src/http/server";
import { UpstreamPool } from "../../src/http/client";

interface Case {
  name: string;
  /** Header lines, each ending in CRLF (Host is added for the request). */
  headers: string;
  /** What follows the head. */
  body: string;
  /** The body read, or the server's status for a refusal. */
  expect: { body: string } | { refused: number };
}

const CASES: Case[] = [
  // ---- valid
  { name: "Content-Length", headers: "Content-Length: 5\r\n", body: "hello", expect: { body: "hello" } },
  { name: "Content-Length 0", headers: "Content-Length: 0\r\n", body: "", expect: { body: "" } },
  { name: "Content-Length repeated with the same value", headers: "Content-Length: 5\r\nContent-Length: 5\r\n", body: "hello", expect: { body: "hello" } },
  { name: "whitespace around a value", headers: "Content-Length: \t 5 \t\r\n", body: "hello", expect: { body: "hello" } },
  { name: "header names in any case", headers: "cOnTeNt-LeNgTh: 2\r\n", body: "ok", expect: { body: "ok" } },
  { name: "chunked", headers: "Transfer-Encoding: chunked\r\n", body: "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", expect: { body: "hello world" } },
  { name: "chunked, coding in upper case", headers: "Transfer-Encoding: CHUNKED\r\n", body: "2\r\nok\r\n0\r\n\r\n", expect: { body: "ok" } },
  { name: "chunked, hex sizes in both cases", headers: "Transfer-Encoding: chunked\r\n", body: `a\r\n${"x".repeat(10)}\r\nB\r\n${"y".repeat(11)}\r\n0\r\n\r\n`, expect: { body: "x".repeat(10) + "y".repeat(11) } },
  { name: "chunked, leading zeros", headers: "Transfer-Encoding: chunked\r\n", body: "0002\r\nok\r\n000\r\n\r\n", expect: { body: "ok" } },
  { name: "chunked, extensions and whitespace", headers: "Transfer-Encoding: chunked\r\n", body: "2 \t;a=b;c\r\nok\r\n0;last\r\n\r\n", expect: { body: "ok" } },
  { name: "chunked, trailers dropped", headers: "Transfer-Encoding: chunked\r\n", body: "2\r\nok\r\n0\r\nX-T: 1\r\nX-U: two\r\n\r\n", expect: { body: "ok" } },
  { name: "chunked, empty", headers: "Transfer-Encoding: chunked\r\n", body: "0\r\n\r\n", expect: { body: "" } },
  { name: "a value with latin1 bytes", headers: "X-Name: caf\xe9\r\nContent-Length: 2\r\n", body: "ok", expect: { body: "ok" } },
  { name: "exactly maxHeaders lines", headers: `${"X-H: v\r\n".repeat(9)}Content-Length: 2\r\n`, body: "ok", expect: { body: "ok" } },
  // ---- malformed heads
  { name: "a bare LF ending a header line", headers: "X-A: a\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "a bare CR inside a value", headers: "X-A: a\rb\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "a NUL in a value", headers: "X-A: a\x00b\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "a DEL in a value", headers: "X-A: a\x7fb\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "obs-fold", headers: "X-A: a\r\n b\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "whitespace before the colon", headers: "Content-Length : 0\r\n", body: "", expect: { refused: 400 } },
  { name: "a space in a name", headers: "X A: a\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "a line without a colon", headers: "nocolon\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "an empty name", headers: ": v\r\nContent-Length: 0\r\n", body: "", expect: { refused: 400 } },
  { name: "more than maxHeaders lines", headers: `${"X-H: v\r\n".repeat(10)}Content-Length: 0\r\n`, body: "", expect: { refused: 431 } },
  { name: "a head over maxHeadBytes", headers: `X-Big: ${"b".repeat(600)}\r\nContent-Length: 0\r\n`, body: "", expect: { refused: 431 } },
  // ---- Content-Length and Transfer-Encoding (request smuggling)
  { name: "two different Content-Length values", headers: "Content-Length: 5\r\nContent-Length: 6\r\n", body: "hello!", expect: { refused: 400 } },
  { name: "Content-Length copies that differ only in form", headers: "Content-Length: 5\r\nContent-Length: 05\r\n", body: "hello", expect: { refused: 400 } },
  { name: "Content-Length +5", headers: "Content-Length: +5\r\n", body: "hello", expect: { refused: 400 } },
  { name: "Content-Length 5,5", headers: "Content-Length: 5,5\r\n", body: "hello", expect: { refused: 400 } },
  { name: "Content-Length 0x10", headers: "Content-Length: 0x10\r\n", body: "", expect: { refused: 400 } },
  { name: "Content-Length -1", headers: "Content-Length: -1\r\n", body: "", expect: { refused: 400 } },
  { name: "Content-Length of 16 digits", headers: "Content-Length: 0000000000000005\r\n", body: "hello", expect: { refused: 400 } },
  { name: "an empty Content-Length", headers: "Content-Length: \r\n", body: "", expect: { refused: 400 } },
  { name: "Transfer-Encoding with Content-Length", headers: "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n", body: "0\r\n\r\n", expect: { refused: 400 } },
  { name: "Content-Length with Transfer-Encoding", headers: "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n", body: "0\r\n\r\n", expect: { refused: 400 } },
  { name: "Transfer-Encoding: gzip, chunked", headers: "Transfer-Encoding: gzip, chunked\r\n", body: "0\r\n\r\n", expect: { refused: 501 } },
  { name: "Transfer-Encoding: chunked, chunked", headers: "Transfer-Encoding: chunked, chunked\r\n", body: "0\r\n\r\n", expect: { refused: 501 } },
  { name: "two Transfer-Encoding lines", headers: "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", body: "0\r\n\r\n", expect: { refused: 501 } },
  { name: "Transfer-Encoding: identity", headers: "Transfer-Encoding: identity\r\n", body: "", expect: { refused: 501 } },
  // ---- chunk framings
  { name: "a non-hex chunk size", headers: "Transfer-Encoding: chunked\r\n", body: "zz\r\nhello\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "junk after a chunk size", headers: "Transfer-Encoding: chunked\r\n", body: "5x\r\nhello\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a negative chunk size", headers: "Transfer-Encoding: chunked\r\n", body: "-5\r\nhello\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "an empty chunk-size line", headers: "Transfer-Encoding: chunked\r\n", body: "\r\nhello\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a chunk size of 16 hex digits", headers: "Transfer-Encoding: chunked\r\n", body: "0000000000000002\r\nok\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a chunk-size line ending in a bare LF", headers: "Transfer-Encoding: chunked\r\n", body: "2\nok\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a chunk-size line with a bare CR", headers: "Transfer-Encoding: chunked\r\n", body: "2\r;x\r\nok\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a control character in a chunk extension", headers: "Transfer-Encoding: chunked\r\n", body: "2;a=\x01\r\nok\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "chunk data not followed by CRLF", headers: "Transfer-Encoding: chunked\r\n", body: "5\r\nhelloX\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "chunk data followed by a bare LF", headers: "Transfer-Encoding: chunked\r\n", body: "5\r\nhello\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "chunk data longer than its size", headers: "Transfer-Encoding: chunked\r\n", body: "3\r\nhello\r\n0\r\n\r\n", expect: { refused: 400 } },
  { name: "a trailer line without a colon", headers: "Transfer-Encoding: chunked\r\n", body: "2\r\nok\r\n0\r\nno colon here\r\n\r\n", expect: { refused: 400 } },
  { name: "a trailer with a bad name", headers: "Transfer-Encoding: chunked\r\n", body: "2\r\nok\r\n0\r\nX T: 1\r\n\r\n", expect: { refused: 400 } },
  { name: "a trailer line ending in a bare LF", headers: "Transfer-Encoding: chunked\r\n", body: "2\r\nok\r\n0\r\nX-T: 1\n\r\n", expect: { refused: 400 } },
  { name: "a chunk-size line over 1 KiB", headers: "Transfer-Encoding: chunked\r\n", body: `2;${"e".repeat(1100)}\r\nok\r\n0\r\n\r\n`, expect: { refused: 400 } },
  {
    name: "chunk extensions adding up past maxHeadBytes",
    headers: "Transfer-Encoding: chunked\r\n",
    body: `${Array.from({ length: 12 }, () => `1;x=${"e".repeat(96)}\r\na\r\n`).join("")}0\r\n\r\n`,
    expect: { refused: 400 },
  },
  { name: "many plain size lines (a long stream) are not overhead", headers: "Transfer-Encoding: chunked\r\n", body: `${"1\r\na\r\n".repeat(600)}0\r\n\r\n`, expect: { body: "a".repeat(600) } },
];

const MAX_HEAD = 512;
/** Header lines the case may carry (the request adds two of its own). */
const MAX_HEADERS = 10;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** The request through the server: the status it answered and the body its handler read. */
async function throughServer(c: Case): Promise<{ status: number; body?: string }> {
  const server = new Http1Server({
    hostname: "127.0.0.1",
    port: 0,
    maxBodyBytes: 64 * 1024,
    maxHeadBytes: MAX_HEAD,
    maxHeaders: MAX_HEADERS + 2, // the request carries Host and Connection besides the case's lines
    errorBody: (status, message, code) => JSON.stringify({ error: { status, message, code } }),
    handler: (ex) => ex.respond(200, {}, Buffer.from(ex.body).toString("latin1")),
  });
  const port = server.listen();
  cleanups.push(() => server.stop());
  const raw = Buffer.from(`POST / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n${c.headers}\r\n${c.body}`, "latin1");
  // The server closes after a refusal, and after its answer to a request asking it to.
  const text = await new Promise<string>((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => s.write(raw));
    const got: Buffer[] = [];
    s.on("data", (d: Buffer) => got.push(d));
    s.on("close", () => resolve(Buffer.concat(got).toString("latin1")));
    s.on("error", reject);
  });
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  const at = text.indexOf("\r\n\r\n");
  return status === 200 ? { status, body: text.slice(at + 4) } : { status };
}

/** The same bytes as an engine's answer through the client: the body it read, or its error. */
async function throughClient(c: Case): Promise<{ body?: string; error?: string }> {
  const engine = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(s) {
        s.write(Buffer.from(`HTTP/1.1 200 OK\r\n${c.headers}\r\n${c.body}`, "latin1"));
      },
    },
  });
  cleanups.push(() => engine.stop(true));
  const pool = new UpstreamPool({ maxHeadBytes: MAX_HEAD, maxHeaders: MAX_HEADERS });
  cleanups.push(() => pool.close());
  return new Promise((resolve) => {
    const parts: Uint8Array[] = [];
    pool.post(`http://127.0.0.1:${engine.port}`, "/", new Uint8Array(0), [], {
      onHead: () => {},
      onData: (d) => parts.push(d),
      onEnd: () => resolve({ body: Buffer.concat(parts).toString("latin1") }),
      onError: (e) => resolve({ error: `${e.kind}: ${e.message}` }),
    });
  });
}

describe("one table of framing cases, both directions", () => {
  for (const c of CASES) {
    test(c.name, async () => {
      const [srv, cli] = await Promise.all([throughServer(c), throughClient(c)]);
      if ("body" in c.expect) {
        expect(srv).toEqual({ status: 200, body: c.expect.body });
        expect(cli).toEqual({ body: c.expect.body });
      } else {
        expect(srv).toEqual({ status: c.expect.refused });
        expect(cli.error).toStartWith("protocol: ");
      }
    });
  }
});
