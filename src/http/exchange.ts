// One HTTP/1.1 request and its answer, as the server (server.ts, connection.ts) hands it to a
// handler: the request's method, target, headers and whole body, and the calls that answer it
// (respond() whole, or stream() then write() ... end()) with the framing the connection needs.
// The heads are rendered here as text and written with their body in one buffer: status lines
// made once per status, a Date line kept current by the server's sweep, header blocks the
// handler may have rendered once (HeaderBlock) rather than a header object per answer.
// The connection behind it is anything that writes bytes and is told when the answer is done
// (ExchangeConn): the server's own (connection.ts), or Bun.serve's (bun-serve.ts).

import { realScheduler } from "../lib/scheduler";
import { byteLength, type HeaderBlock, headerBlock, latin1Bytes, latin1Write, Pieces } from "./wire";

export const REASONS: Record<number, string> = {
  100: "Continue", 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 206: "Partial Content",
  301: "Moved Permanently", 302: "Found", 304: "Not Modified", 307: "Temporary Redirect", 308: "Permanent Redirect",
  400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
  408: "Request Timeout", 409: "Conflict", 410: "Gone", 411: "Length Required", 413: "Content Too Large", 414: "URI Too Long",
  415: "Unsupported Media Type", 417: "Expectation Failed", 422: "Unprocessable Content", 429: "Too Many Requests",
  431: "Request Header Fields Too Large", 499: "Client Closed Request",
  500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
  505: "HTTP Version Not Supported",
};

const enc = new TextEncoder();
const LAST_CHUNK = enc.encode("0\r\n\r\n");
const CRLF = enc.encode("\r\n");
/** The CRLF ending a chunk, then the last chunk. */
const CRLF_LAST = enc.encode("\r\n0\r\n\r\n");

/** A request's headers in the order sent: lower-case names, values as sent (trimmed). */
export class RequestHeaders {
  /** @internal */
  constructor(
    readonly names: string[],
    readonly values: string[],
  ) {}

  /** The value of a header (repeated ones joined with ", "), or undefined. `name` is lower-case. */
  get(name: string): string | undefined {
    let out: string | undefined;
    const names = this.names;
    for (let i = 0; i < names.length; i++) {
      if (names[i] !== name) continue;
      out = out === undefined ? this.values[i]! : `${out}, ${this.values[i]!}`;
    }
    return out;
  }

  /** [lower-case name, value] for every header line, in order. */
  entries(): [string, string][] {
    return this.names.map((n, i) => [n, this.values[i]!]);
  }
}

const STATUS_LINES = new Map<number, string>();
/** "HTTP/1.1 200 OK\r\n", made once per status. */
export function statusLine(status: number): string {
  let l = STATUS_LINES.get(status);
  if (l === undefined) {
    l = `HTTP/1.1 ${status} ${REASONS[status] ?? "Status"}\r\n`;
    STATUS_LINES.set(status, l);
  }
  return l;
}

let dateLine = "";
let dateSecond = 0;
/** "date: <IMF-fixdate>\r\n", kept current by each server's sweep (so the hot path reads no clock). */
export function date(): string {
  return dateLine;
}

export function refreshDate(now: number): void {
  const second = now - (now % 1000);
  if (second === dateSecond) return;
  dateSecond = second;
  dateLine = `date: ${new Date(second).toUTCString()}\r\n`;
}
refreshDate(realScheduler.now());

/** What an exchange needs of the connection it arrived on (connection.ts's Conn). */
export interface ExchangeConn {
  /** The connection stays open for another request after this answer. */
  keepAlive: boolean;
  /** The peer's address, as counted against the per-address cap. */
  readonly address: string;
  readonly socket: { readonly remotePort: number; readonly remoteFamily: "IPv4" | "IPv6" };
  /** Writes now, or queues; false when it did not all go out yet (onDrain follows). */
  write(data: Uint8Array): boolean;
  /** write() for ASCII text of `size` bytes. */
  writeString(text: string, size: number): boolean;
  /** The exchange is answered: the connection goes on to its next request, or closes. */
  done(ex: ClientExchange): void;
  /** Drops the connection now. */
  kill(): void;
  /** A request on it authenticated (see ClientExchange.authenticated()). */
  authenticate(): void;
}

/**
 * One request and its answer. Read the request from the fields; answer with respond() (whole),
 * or with stream() then write() … end(). `onAbort` is called once if the client goes away
 * before the answer is done; `onDrain` when a write() that returned false has gone out.
 */
export class ClientExchange {
  aborted = false;
  onAbort: (() => void) | undefined;
  onDrain: (() => void) | undefined;
  /**
   * What the request holds until it is over (a key's in-flight slot): released once, when the
   * answer has gone out, been cut, or its client has gone, whichever way that happened.
   */
  holder: { release(): void } | undefined = undefined;
  /** 0: not answered, 1: streaming, 2: done. */
  protected state = 0;
  private chunked = true;

  constructor(
    private readonly conn: ExchangeConn,
    readonly method: string,
    /** The request target as sent: path and query (absolute-form is reduced to them). */
    readonly target: string,
    /** The target's path, before any '?'. */
    readonly path: string,
    readonly headers: RequestHeaders,
    readonly body: Uint8Array,
    private readonly http10: boolean,
  ) {}

  get answered(): boolean {
    return this.state !== 0;
  }

  /**
   * The handler found this request authenticated: its connection leaves the unauthenticated
   * share for good and keeps the listener's usual deadlines (see Http1Options.unauthenticated).
   */
  authenticated(): void {
    this.conn.authenticate();
  }

  /** The client's address (IPv4-mapped IPv6 as the socket reports it). */
  get remoteAddress(): string {
    return this.conn.address;
  }

  get remotePort(): number {
    return this.conn.socket.remotePort;
  }

  get remoteFamily(): "IPv4" | "IPv6" {
    return this.conn.socket.remoteFamily;
  }

  /** The whole answer in one write. A body given as Pieces is copied out during the call. */
  respond(status: number, headers: Record<string, string> | HeaderBlock, body: string | Uint8Array | Pieces): void {
    if (this.state !== 0 || this.aborted) return;
    this.state = 2;
    const c = this.conn;
    const h = isBlock(headers) ? headers : headerBlock(headers);
    const size = typeof body === "string" ? byteLength(body) : body instanceof Pieces ? body.size : body.byteLength;
    // 204 and 304 carry no body and no Content-Length (RFC 9110 §8.6).
    const bodiless = status === 204 || status === 304;
    const tail = `${bodiless ? "" : `content-length: ${size}\r\n`}${c.keepAlive ? (this.http10 ? "connection: keep-alive\r\n" : "") : "connection: close\r\n"}\r\n`;
    const line = statusLine(status);
    const d = date();
    const head = line + d + h.text + tail;
    // All of it ASCII but the header values, whose size the block knows.
    const headBytes = line.length + d.length + h.bytes + tail.length;
    // One write: a string is encoded by the socket itself, with no buffer of ours in between.
    if (body instanceof Pieces) {
      if (this.method === "HEAD" || size === 0 || bodiless) {
        if (h.latin1 === true) c.write(latin1Bytes(head));
        else c.writeString(head, headBytes);
      } else c.write(piecesWithHead(head, headBytes, h.latin1 === true, body));
    } else if (h.latin1 === true) c.write(latin1Bytes(head, this.method === "HEAD" || size === 0 || bodiless ? undefined : typeof body === "string" ? enc.encode(body) : body));
    else if (this.method === "HEAD" || size === 0 || bodiless) c.writeString(head, headBytes);
    else if (typeof body === "string") c.writeString(head + body, headBytes + size);
    else c.write(withHead(head, body, undefined, headBytes));
    if (this.holder !== undefined) this.over();
    c.done(this);
  }

  /** Starts a streamed answer (chunked; close-delimited for HTTP/1.0), optionally with its first bytes (Pieces: copied out during the call). */
  stream(status: number, headers: Record<string, string> | HeaderBlock, firstBytes?: Uint8Array | Pieces): boolean {
    if (this.state !== 0 || this.aborted) return false;
    this.state = 1;
    const c = this.conn;
    if (this.http10) {
      this.chunked = false;
      c.keepAlive = false;
    }
    const h = isBlock(headers) ? headers : headerBlock(headers);
    const line = statusLine(status);
    const d = date();
    const tail = this.chunked ? (c.keepAlive ? "transfer-encoding: chunked\r\n\r\n" : "transfer-encoding: chunked\r\nconnection: close\r\n\r\n") : "connection: close\r\n\r\n";
    const head = line + d + h.text + tail;
    // As in respond(): only the header values may be other than ASCII, and the block knows their size.
    const headBytes = line.length + d.length + h.bytes + tail.length;
    if (firstBytes instanceof Pieces && firstBytes.size > 0 && this.chunked) {
      // The common case of a stream: head, first chunk and its framing copied into one buffer.
      const sizeLine = `${firstBytes.size.toString(16)}\r\n`;
      return c.write(piecesWithHead(head + sizeLine, headBytes + sizeLine.length, h.latin1 === true, firstBytes, CRLF));
    }
    const first = firstBytes instanceof Pieces ? (firstBytes.size > 0 ? firstBytes.bytes() : undefined) : firstBytes;
    if (h.latin1 === true) {
      if (first === undefined || first.byteLength === 0) return c.write(latin1Bytes(head));
      return c.write(this.chunked ? latin1Bytes(`${head}${first.byteLength.toString(16)}\r\n`, first, CRLF) : latin1Bytes(head, first));
    }
    if (first === undefined || first.byteLength === 0) return c.writeString(head, headBytes);
    if (!this.chunked) return c.write(withHead(head, first, undefined, headBytes));
    const size = `${first.byteLength.toString(16)}\r\n`;
    return c.write(withHead(head + size, first, CRLF, headBytes + size.length));
  }

  /** More of a streamed answer (Pieces: copied out during the call); false when it did not all go out yet (wait for onDrain). */
  write(chunk: Uint8Array | Pieces): boolean {
    if (chunk instanceof Pieces) {
      if (this.state !== 1 || this.aborted || chunk.size === 0) return !this.aborted;
      if (!this.chunked) return this.conn.write(chunk.bytes());
      const sizeLine = `${chunk.size.toString(16)}\r\n`;
      return this.conn.write(piecesWithHead(sizeLine, sizeLine.length, false, chunk, CRLF));
    }
    if (this.state !== 1 || this.aborted || chunk.byteLength === 0) return !this.aborted;
    return this.conn.write(this.chunked ? frame(chunk) : chunk);
  }

  /** Ends a streamed answer, with its last bytes if given (Pieces: copied out during the call); the connection goes on to the next request once it is sent. */
  end(lastBytes?: Uint8Array | Pieces): void {
    if (this.state !== 1) return;
    this.state = 2;
    if (lastBytes instanceof Pieces && lastBytes.size > 0 && this.chunked && !this.aborted) {
      // The last bytes, their framing and the end of the body in one buffer, one write.
      const sizeLine = `${lastBytes.size.toString(16)}\r\n`;
      this.conn.write(piecesWithHead(sizeLine, sizeLine.length, false, lastBytes, CRLF_LAST));
      if (this.holder !== undefined) this.over();
      this.conn.done(this);
      return;
    }
    const last = lastBytes instanceof Pieces ? (lastBytes.size > 0 ? lastBytes.bytes() : undefined) : lastBytes;
    if (!this.aborted) {
      const more = last !== undefined && last.byteLength > 0;
      // The last bytes and the end of the body in one write.
      if (!this.chunked) {
        if (more) this.conn.write(last);
      } else if (more) this.conn.write(withHead(`${last.byteLength.toString(16)}\r\n`, last, CRLF_LAST));
      else this.conn.write(LAST_CHUNK);
    }
    if (this.holder !== undefined) this.over();
    this.conn.done(this);
  }

  /**
   * Cuts the connection without ending the answer: a streamed body stops short of its last
   * chunk, which every HTTP client reports as an error rather than a complete answer.
   */
  destroy(): void {
    if (this.state === 2) return;
    this.state = 2;
    if (this.holder !== undefined) this.over();
    this.conn.kill();
  }

  /** @internal The client is gone. */
  abort(): void {
    if (this.aborted || this.state === 2) return;
    this.aborted = true;
    this.state = 2;
    if (this.holder !== undefined) this.over();
    const f = this.onAbort;
    this.onAbort = undefined;
    f?.();
  }

  /** The exchange is over: what it held goes back, once. */
  protected over(): void {
    const h = this.holder!;
    this.holder = undefined;
    h.release();
  }
}

/**
 * `head` (`headBytes` long: ASCII, or latin1 text when `latin1`), then the pieces, then `tail`,
 * in one buffer of exactly that size.
 */
function piecesWithHead(head: string, headBytes: number, latin1: boolean, p: Pieces, tail?: Uint8Array): Uint8Array {
  const out = new Uint8Array(headBytes + p.size + (tail === undefined ? 0 : tail.byteLength));
  if (latin1) latin1Write.call(out, head, 0);
  else enc.encodeInto(head, out);
  const at = p.copyTo(out, headBytes);
  if (tail !== undefined) out.set(tail, at);
  return out;
}

/** A chunk of a chunked body in one buffer. */
function frame(data: Uint8Array): Uint8Array {
  return withHead(`${data.byteLength.toString(16)}\r\n`, data, CRLF);
}

export function isBlock(h: Record<string, string> | HeaderBlock): h is HeaderBlock {
  return typeof h.text === "string" && typeof (h as HeaderBlock).bytes === "number";
}

/** `head` (text, `headBytes` long in UTF-8 when known), then `data`, then `tail`, in one buffer. */
function withHead(head: string, data: Uint8Array, tail?: Uint8Array, headBytes = -1): Uint8Array {
  // Sized exactly: a view of a bigger buffer would cost more than it saves.
  const n = headBytes >= 0 ? headBytes : byteLength(head);
  const out = new Uint8Array(n + data.byteLength + (tail === undefined ? 0 : tail.byteLength));
  enc.encodeInto(head, out);
  out.set(data, n);
  if (tail !== undefined) out.set(tail, n + data.byteLength);
  return out;
}
