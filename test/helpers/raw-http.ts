// Raw-socket HTTP/1.1 for router tests: an engine that records the exact bytes of each request
// it gets and answers with exactly the bytes a test gives it, and a client that sends exact
// bytes and reads the answer whole. Text is latin1 both ways (one character per byte), so a
// test can write and read any byte 0x00-0xFF where a header goes.

import type { Socket, TCPSocketListener } from "bun";

/** A string as its latin1 bytes. */
export const bytes = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "latin1"));
/** Bytes as latin1 text. */
export const text = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("latin1");

export interface RawRequest {
  /** The head, request line to the last header line, latin1. */
  head: string;
  /** Lower-case header names and raw (untrimmed) values, in order. */
  headers: [string, string][];
  body: string;
}

export interface RawEngine {
  url: string;
  port: number;
  requests: RawRequest[];
  /** Connections accepted, and those still open. */
  connections(): number;
  open(): number;
  stop(): void;
}

type Answer = string | Uint8Array | ((s: Socket<{ buf: string }>) => void);

/**
 * An engine on 127.0.0.1 answering request n (1-based) with `answer(req, n)`: bytes written as
 * given (a string is latin1), or a function that writes to the socket itself. Requests are
 * framed by Content-Length, as the router sends them.
 */
export function rawEngine(answer: (req: RawRequest, n: number) => Answer): RawEngine {
  const requests: RawRequest[] = [];
  let connections = 0;
  const live = new Set<Socket<{ buf: string }>>();
  const server: TCPSocketListener<{ buf: string }> = Bun.listen<{ buf: string }>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(s) {
        connections++;
        live.add(s);
        s.data = { buf: "" };
      },
      data(s, d) {
        s.data.buf += text(d);
        for (;;) {
          const end = s.data.buf.indexOf("\r\n\r\n");
          if (end < 0) return;
          const head = s.data.buf.slice(0, end);
          const len = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (s.data.buf.length < end + 4 + len) return;
          const body = s.data.buf.slice(end + 4, end + 4 + len);
          s.data.buf = s.data.buf.slice(end + 4 + len);
          const headers = head
            .split("\r\n")
            .slice(1)
            .map((l): [string, string] => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1)]);
          const req = { head, headers, body };
          requests.push(req);
          const a = answer(req, requests.length);
          if (typeof a === "function") a(s);
          else s.write(typeof a === "string" ? bytes(a) : a);
        }
      },
      close(s) {
        live.delete(s);
      },
      error(s) {
        live.delete(s);
      },
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port,
    requests,
    connections: () => connections,
    open: () => live.size,
    stop: () => server.stop(true),
  };
}

export interface RawAnswer {
  status: number;
  /** The head as received, latin1, without the blank line. */
  head: string;
  /** Header lines as [lower-case name, value as received after ": "]. */
  headers: [string, string][];
  /** The body as sent on the wire (chunk framing included), latin1. */
  body: string;
}

/** Sends `req` (bytes, or latin1 text) to 127.0.0.1:port and reads until the server closes (send Connection: close). */
export function rawRequest(port: number, req: string | Uint8Array, timeoutMs = 10_000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    let acc = "";
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      const end = acc.indexOf("\r\n\r\n");
      const head = end < 0 ? acc : acc.slice(0, end);
      const lines = head.split("\r\n");
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? "")?.[1] ?? 0);
      const headers = lines.slice(1).map((l): [string, string] => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 2)]);
      resolve({ status, head, headers, body: end < 0 ? "" : acc.slice(end + 4) });
    };
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      reject(new Error(`no answer within ${timeoutMs} ms; got ${JSON.stringify(acc.slice(0, 200))}`));
    }, timeoutMs);
    Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        open(s) {
          s.write(typeof req === "string" ? bytes(req) : req);
        },
        data(_s, d) {
          acc += text(d);
        },
        close: finish,
        end(s) {
          s.end();
          finish();
        },
        error: finish,
      },
    }).catch(reject);
  });
}

/** A chat request's bytes with the given extra header lines (each "Name: value", latin1), closing the connection after. */
export function chatRequest(headerLines: string[] = [], opts: { path?: string; body?: string } = {}): Uint8Array {
  const body = opts.body ?? JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
  const head = [`POST ${opts.path ?? "/v1/chat/completions"} HTTP/1.1`, "Host: router", "Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`, "Connection: close", ...headerLines].join("\r\n");
  const h = bytes(`${head}\r\n\r\n`);
  const b = new TextEncoder().encode(body);
  const out = new Uint8Array(h.length + b.length);
  out.set(h);
  out.set(b, h.length);
  return out;
}

/** An engine's answer: status 200, the given header lines, a JSON body framed by Content-Length. */
export function engineAnswer(headerLines: string[] = ["Content-Type: application/json"], body = '{"id":"x","object":"chat.completion","choices":[]}'): string {
  return `HTTP/1.1 200 OK\r\n${[...headerLines, `Content-Length: ${Buffer.byteLength(body)}`].join("\r\n")}\r\n\r\n${body}`;
}

/**
 * Engine answers that are not HTTP/1.1 as the router's own server reads it. Each fails the
 * attempt as an engine error: 502 before the client saw a byte. Shared by the integration
 * tests and the fuzz suite, which splits them at random read boundaries.
 */
export const MALFORMED: [string, string][] = [
  ["a bare LF in a header value smuggling Set-Cookie", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: a\nSet-Cookie: x=y\r\nContent-Length: 2\r\n\r\n{}"],
  ["a bare LF smuggling a second Content-Length", "HTTP/1.1 200 OK\r\nX-Request-Id: a\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}"],
  ["a bare CR in a header value", "HTTP/1.1 200 OK\r\nX-Request-Id: a\rSet-Cookie: x=y\r\nContent-Length: 2\r\n\r\n{}"],
  ["lines ending in bare LF", "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 2\n\n{}"],
  ["a bare LF ending one header line", "HTTP/1.1 200 OK\r\nContent-Type: application/json\nContent-Length: 2\r\n\r\n{}"],
  ["a NUL in a header value", "HTTP/1.1 200 OK\r\nX-Request-Id: a\x00b\r\nContent-Length: 2\r\n\r\n{}"],
  ["a NUL in a header name", "HTTP/1.1 200 OK\r\nX-Req\x00uest-Id: a\r\nContent-Length: 2\r\n\r\n{}"],
  ["a control character (0x01) in a value", "HTTP/1.1 200 OK\r\nContent-Type: application/\x01json\r\nContent-Length: 2\r\n\r\n{}"],
  ["DEL in a value", "HTTP/1.1 200 OK\r\nX-Request-Id: a\x7f\r\nContent-Length: 2\r\n\r\n{}"],
  ["ESC in the reason phrase", "HTTP/1.1 200 O\x1bK\r\nContent-Length: 2\r\n\r\n{}"],
  ["obs-fold", "HTTP/1.1 200 OK\r\nX-Request-Id: a\r\n Set-Cookie: x=y\r\nContent-Length: 2\r\n\r\n{}"],
  ["obs-fold with a tab", "HTTP/1.1 200 OK\r\nX-Request-Id: a\r\n\tb\r\nContent-Length: 2\r\n\r\n{}"],
  ["a space in a header name", "HTTP/1.1 200 OK\r\nX Request: a\r\nContent-Length: 2\r\n\r\n{}"],
  ["whitespace before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}"],
  ["a non-token header name", "HTTP/1.1 200 OK\r\nX(a): b\r\nContent-Length: 2\r\n\r\n{}"],
  ["a byte >= 0x80 in a header name", "HTTP/1.1 200 OK\r\nX-\xe9: b\r\nContent-Length: 2\r\n\r\n{}"],
  ["a header line without a colon", "HTTP/1.1 200 OK\r\nX-Request-Id\r\nContent-Length: 2\r\n\r\n{}"],
  ["conflicting Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}x"],
  ["a Content-Length list", "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\n{}"],
  ["a signed Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}"],
  ["a hex Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 0x2\r\n\r\n{}"],
  ["an empty Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n{}"],
  ["Transfer-Encoding and Content-Length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
  ["Transfer-Encoding other than chunked alone", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
  ["Transfer-Encoding: chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
  ["a chunk-size line ending in bare LF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n"],
  ["a chunk not followed by CRLF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n"],
  ["a chunk size that is not hex", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"],
  ["a negative chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n"],
  ["a control character in a chunk extension", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;a=\x01\r\n{}\r\n0\r\n\r\n"],
  ["a trailer line ending in bare LF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: 1\n\r\n"],
  ["a trailer line that is not a header", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nnot a trailer\r\n\r\n"],
  ["the last chunk ended by a bare LF", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\n"],
  ["not HTTP at all", "SSH-2.0-OpenSSH_9.6\r\n\r\n"],
];
