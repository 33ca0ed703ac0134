// The HTTP/1.1 server of the wire module (see wire.ts for the rules it shares with the engine
// client): the router's public listener, and through src/api/listener.ts the admin/agent
// listener. A strict HTTP/1.1 server on Bun.listen. The router reads every
// request body whole before it picks a replica, then either answers in one write or passes an
// engine's stream on chunk by chunk, so a server that hands it (method, target, headers, body)
// and takes back bytes is all it needs. Bun.serve builds a Request and a Response per request
// and costs about 40% more CPU per small request here; on a head node where the proxy may share
// cores with an engine, that is throughput (see test/bench/proxy.ts).
//
// Parsing is strict because the bytes come from anyone who can reach the port, possibly through
// another proxy that frames requests differently. The rules shared with the client are wire.ts's
// (tokenizer, chunked decoder, limits); on top of them, for requests:
// - one Host on HTTP/1.1; Transfer-Encoding (chunked alone, anything else: 501) never on
//   HTTP/1.0 (400);
// - heads over maxHeadBytes get 431, bodies over maxBodyBytes 413 (from Content-Length before
//   reading, or while reading chunks), a head not whole within headTimeoutMs gets 408;
// - `Expect: 100-continue` is answered when the body is wanted; other expectations get 417.
// Every refusal closes the connection: after a framing error nothing that follows can be trusted.
// Pipelined requests are answered one at a time, in order.
//
// Slow and greedy clients are bounded, since anyone can open connections:
// - a head has headTimeoutMs from its first byte; a body bodyTimeoutMs from the end of its head
//   plus a second per bodyMinRate bytes received (a minimum rate after a grace), so a body
//   trickled a byte per idle period is cut with 408 however often it moves;
// - while a request is in flight, reading stops as soon as anything pipelined behind it arrives
//   (one read is kept), and resumes when it is answered: the rest waits in the kernel;
// - caps on open connections, in total and per source address: one over either is shed at
//   once, never left waiting: a short 503 with the write side shut behind it, dropped when the
//   client closes or 2 s later (TLS, or many shed at once: just closed), so a flood costs the
//   process at most the caps' descriptors and a few (see src/config/limits.ts for fitting them
//   under the open-file limit);
// - with `unauthenticated` (the admin listener), a connection counts as unauthenticated until
//   the handler says one of its requests authenticated (ClientExchange.authenticated()): until
//   then each head must arrive whole within a short deadline of its own, at most a share of the
//   connections may be such, and a new connection that finds that share (or the whole cap) full
//   closes the oldest unauthenticated one not being answered instead of being shed, so slow
//   heads that nobody can vouch for never lock out an operator or a joining agent.

import type { Socket, TCPSocketListener } from "bun";
import { realScheduler, type Scheduler, type Timer } from "../lib/scheduler";
import {
  byteLength,
  checkHeadText,
  ChunkedDecoder,
  concat,
  type HeaderBlock,
  headerBlock,
  HeaderFields,
  hasToken,
  headEnd,
  isToken,
  join,
  latin1Bytes,
  latin1Slice,
  latin1Write,
  Pieces,
  WIRE_LIMITS,
  WireError,
} from "./wire";

import { listenOnBunServe } from "./bun-serve";

export { type HeaderBlock, headerBlock, Pieces } from "./wire";

export interface Http1Options {
  hostname: string;
  port: number;
  tls?: { cert: string | Bun.BunFile; key: string | Bun.BunFile };
  /** Request line and headers together (default 16 KiB): over it, 431. */
  maxHeadBytes?: number;
  /** Header lines per request (default 100): over it, 431. */
  maxHeaders?: number;
  /** Request body limit: over it, 413. */
  maxBodyBytes: number;
  /** A connection with no request under way is closed after this long; so is one whose request stops arriving for this long. Default 10 s. */
  idleTimeoutMs?: number;
  /** A request's head must arrive whole within this of its first byte (slow-header clients). Default 30 s. */
  headTimeoutMs?: number;
  /**
   * A request body must arrive within this of the end of its head, plus one second for every
   * bodyMinRate bytes of it received so far (default 30 s): a body trickled in a byte at a
   * time is cut however often it moves, and a big one on a slow link is not.
   */
  bodyTimeoutMs?: number;
  /** Bytes per second that earn a body one more second past bodyTimeoutMs (default 8 KiB/s); 0: bodyTimeoutMs is the whole budget. */
  bodyMinRate?: number;
  /** Open connections at most (default: no cap). One more is shed at once: a short 503, then closed (TLS: closed). */
  maxConnections?: number;
  /** Open connections from one source address at most (default: no cap); shed as over maxConnections. */
  maxConnectionsPerAddress?: number;
  /**
   * Connections that have not authenticated yet: how long each may take over its next head
   * (from its accept, or the end of its last answer), and how many may be open at once.
   * Absent (the router): every connection is treated alike.
   */
  unauthenticated?: { headTimeoutMs: number; maxConnections: number };
  /**
   * A connection was shed; `cap` says which cap it hit ("unauthenticated": the unauthenticated
   * share, with none of them to close), or "evicted": an unauthenticated connection (from
   * `address`) was closed to make room for a new one.
   */
  onShed?: (cap: ShedCap, address: string) => void;
  /**
   * Time: deadlines are set from its mono() and checked at each sweep, which runs on its
   * every(); the Date header reads its now(). Default realScheduler; tests pass a
   * ManualScheduler and advance it.
   */
  scheduler?: Scheduler;
  /** Older form: monotonic milliseconds for the deadlines only (the sweep timer stays on `scheduler`); tests with it call sweep() by hand. */
  clock?: { now(): number };
  /**
   * An answer still going out is cut if the socket takes none of it for this long (default
   * 60 s, as nginx's send_timeout). Longer than the idle timeout: a client reading slowly
   * leaves the kernel's buffers full, and the server sees no progress until they empty.
   */
  sendTimeoutMs?: number;
  /** The body of an error the server answers by itself (bad framing, limits): the router's own shape. */
  errorBody: (status: number, message: string, code: string) => string;
  /** Called once per request, with its body read; the handler answers through the Exchange. */
  handler: (ex: ClientExchange) => void;
  /**
   * "own" (default): this server, on Bun.listen. "bun": Bun.serve (bun-serve.ts), a reference
   * for the proxy bench, without the caps and deadlines. Default from LLMGW_HTTP_SERVER.
   */
  backend?: "own" | "bun";
  /** A handler threw before answering: the client got 500, this gets the error. */
  onHandlerError?: (err: unknown) => void;
}

/** Why a connection was shed or closed at accept (see Http1Options.onShed). */
export type ShedCap = "total" | "address" | "unauthenticated" | "evicted";

const REASONS: Record<number, string> = {
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
const EMPTY = new Uint8Array(0);
const LAST_CHUNK = enc.encode("0\r\n\r\n");
const CRLF = enc.encode("\r\n");
/** The CRLF ending a chunk, then the last chunk. */
const CRLF_LAST = enc.encode("\r\n0\r\n\r\n");
const CONTINUE = enc.encode("HTTP/1.1 100 Continue\r\n\r\n");
// Connection states.
const HEAD = 0;
const BODY_LENGTH = 1;
const BODY_CHUNKED = 2;
const BUSY = 3;
const CLOSED = 4;

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
function statusLine(status: number): string {
  let l = STATUS_LINES.get(status);
  if (l === undefined) {
    l = `HTTP/1.1 ${status} ${REASONS[status] ?? "Status"}\r\n`;
    STATUS_LINES.set(status, l);
  }
  return l;
}

/** Thrown by the parser: answered with this status, and the connection closed. */
const Refusal = WireError;
type Refusal = WireError;

let dateLine = "";
let dateSecond = 0;
/** "date: <IMF-fixdate>\r\n", kept current by each server's sweep (so the hot path reads no clock). */
function date(): string {
  return dateLine;
}

function refreshDate(now: number): void {
  const second = now - (now % 1000);
  if (second === dateSecond) return;
  dateSecond = second;
  dateLine = `date: ${new Date(second).toUTCString()}\r\n`;
}
refreshDate(realScheduler.now());

/**
 * One request and its answer. Read the request from the fields; answer with respond() (whole),
 * or with stream() then write() … end(). `onAbort` is called once if the client goes away
 * before the answer is done; `onDrain` when a write() that returned false has gone out.
 */
export class ClientExchange {
  aborted = false;
  onAbort: (() => void) | undefined;
  onDrain: (() => void) | undefined;
  /** 0: not answered, 1: streaming, 2: done. */
  protected state = 0;
  private chunked = true;

  constructor(
    private readonly conn: Conn,
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
    this.conn.done(this);
  }

  /**
   * Cuts the connection without ending the answer: a streamed body stops short of its last
   * chunk, which every HTTP client reports as an error rather than a complete answer.
   */
  destroy(): void {
    if (this.state === 2) return;
    this.state = 2;
    this.conn.kill();
  }

  /** @internal The client is gone. */
  abort(): void {
    if (this.aborted || this.state === 2) return;
    this.aborted = true;
    this.state = 2;
    const f = this.onAbort;
    this.onAbort = undefined;
    f?.();
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

function isBlock(h: Record<string, string> | HeaderBlock): h is HeaderBlock {
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


const TARGET = /^[\x21-\x7e]+$/;

/** The request target text[sp1+1, sp2): origin-form as sent, absolute-form reduced to its path and query (RFC 9112 §3.2.2). */
function requestTarget(text: string, sp1: number, sp2: number): string {
  const target = text.slice(sp1 + 1, sp2);
  if (!TARGET.test(target) || target.includes("#")) throw new Refusal(400, "malformed request target", "bad_request");
  if (text.charCodeAt(sp1 + 1) === 47) return target;
  const m = /^https?:\/\/[^/?#]+(.*)$/i.exec(target);
  if (m === null) throw new Refusal(400, "the request target must be a path", "bad_request");
  return m[1] === "" || m[1]![0] === "?" ? `/${m[1]}` : m[1]!;
}

/** One client connection: parses requests off it and writes their answers, one at a time. @internal (exported for micro-benchmarks) */
export class Conn {
  state = HEAD;
  keepAlive = true;
  /** Bytes received and not yet consumed. */
  private buf: Uint8Array = EMPTY;
  /** Where the unconsumed bytes of buf start. Tracked as an offset: a view per request costs more than the parse. */
  private pos = 0;
  /** Where the search for the end of the head resumes. */
  private scanned = 0;
  /** Empty lines skipped before the request line being read. */
  private emptyLines = 0;
  /** When the connection is dropped unless something happens first (on the server's coarse clock). */
  deadline: number;
  private headDeadline = Number.POSITIVE_INFINITY;
  private current: ClientExchange | undefined;
  private pending: Uint8Array[] | undefined;
  private closing = false;
  private processing = false;
  // The request whose body is being read.
  private req: { method: string; target: string; path: string; headers: RequestHeaders; http10: boolean; expect: boolean } | undefined;
  private need = 0;
  private chunks: Uint8Array[] = [];
  private bodySize = 0;
  /** The chunked body being read. */
  private decoder: ChunkedDecoder | undefined;
  /** The header fields of the head being read, reused from head to head. */
  private fields: HeaderFields | undefined;
  /** Reads are paused: bytes pipelined behind the request in flight wait in the kernel, not here. */
  private paused = false;
  /** Bytes received on the connection in all. @internal */
  bytesIn = 0;
  /** When the body being read started (server clock), and bytesIn at its first byte. */
  private bodyStart = 0;
  private bodyFrom = 0;
  /** No request on it has authenticated yet (only where the server has an unauthenticated share). */
  unauthenticated = false;
  /** While unauthenticated: when the next head must be whole (set at accept and after each answer). */
  private unauthUntil = Number.POSITIVE_INFINITY;

  constructor(
    readonly socket: Socket<Conn>,
    readonly server: Http1Server,
    /** The peer's address, as counted against maxConnectionsPerAddress. */
    readonly address: string,
  ) {
    this.deadline = server.time() + server.idleTimeoutMs;
  }

  /** @internal Counted as unauthenticated from its accept on: its first head has the short deadline. */
  distrust(): void {
    this.unauthenticated = true;
    this.unauthUntil = this.server.time() + this.server.unauthHeadTimeoutMs;
    this.deadline = Math.min(this.deadline, this.unauthUntil);
  }

  /** See ClientExchange.authenticated(). */
  authenticate(): void {
    if (!this.unauthenticated) return;
    this.unauthenticated = false;
    this.unauthUntil = Number.POSITIVE_INFINITY;
    this.server.vouch(this);
  }

  /**
   * @internal Which unauthenticated connection to close first for a new one: 0 no request past
   * its head (idle, a head arriving, or closing), 1 a body arriving, 2 being answered (never).
   */
  get evictRank(): number {
    if (this.closing || this.state === HEAD) return 0;
    return this.state === BODY_LENGTH || this.state === BODY_CHUNKED ? 1 : 2;
  }

  /** An idle connection's deadline from `now`: the idle timeout, or sooner an unauthenticated one's next head. */
  private idleDeadline(now: number): number {
    return Math.min(now + this.server.idleTimeoutMs, this.unauthUntil);
  }

  onData(d: Uint8Array): void {
    if (this.state === CLOSED || this.closing) return;
    this.bytesIn += d.byteLength;
    if (this.pos >= this.buf.byteLength) {
      this.buf = d;
      this.scanned = 0;
    } else {
      this.buf = join(this.buf.subarray(this.pos), d);
      this.scanned = Math.max(0, this.scanned - this.pos);
    }
    this.pos = 0;
    if (this.state === BUSY) {
      // Pipelined behind the request in flight: this read is kept, and no more is read until
      // that request is answered. What a client pipelines beyond waits in its socket buffers.
      this.pauseReads();
      return;
    }
    this.process();
  }

  private pauseReads(): void {
    if (this.paused) return;
    this.paused = true;
    this.socket.pause();
  }

  /** Parses and dispatches what has arrived, until it runs out or a request is under way. */
  private process(): void {
    if (this.processing) return;
    this.processing = true;
    try {
      while (this.state !== CLOSED && !this.closing && this.state !== BUSY) {
        if (this.state === HEAD) {
          if (!this.parseHead()) break;
        } else if (this.state === BODY_LENGTH) {
          if (!this.readLength()) break;
        } else if (!this.readChunked()) break;
      }
    } catch (e) {
      if (!(e instanceof Refusal)) throw e;
      this.refuse(e);
    } finally {
      this.processing = false;
    }
    // A request under way (part of a head, or of a body) has a deadline from now; an idle
    // connection keeps the one its last answer (or its accept) set.
    const st = this.state;
    if (st === HEAD) {
      if (this.headDeadline !== Number.POSITIVE_INFINITY) this.deadline = Math.min(this.idleDeadline(this.server.time()), this.headDeadline);
    } else if (st === BODY_LENGTH || st === BODY_CHUNKED) {
      const now = this.server.time();
      if (Number.isNaN(this.bodyStart)) this.bodyStart = now;
      this.deadline = Math.min(now + this.server.idleTimeoutMs, this.bodyDeadline());
    }
  }

  /** The body's deadline: its grace, and one second more per bodyMinRate bytes that came. */
  private bodyDeadline(): number {
    const s = this.server;
    const earned = s.bodyMinRate > 0 ? ((this.bytesIn - this.bodyFrom) * 1000) / s.bodyMinRate : 0;
    return this.bodyStart + s.bodyTimeoutMs + earned;
  }

  /**
   * The head is read and a body follows: its deadline starts now, counting the bytes of it
   * already here. The clock is read only if the body is not all here (at the end of process()).
   */
  private beginBody(): void {
    this.bodyStart = Number.NaN;
    this.bodyFrom = this.bytesIn - (this.buf.byteLength - this.pos);
  }

  /**
   * From the first byte of a request on, its head has headTimeoutMs to arrive, empty lines
   * included. Set when a read ends inside a head: a head that arrives whole in one read never
   * needs it, nor a clock reading for it.
   */
  private headStarted(): void {
    if (this.headDeadline === Number.POSITIVE_INFINITY) this.headDeadline = this.server.time() + this.server.headTimeoutMs;
  }

  private parseHead(): boolean {
    const r = this.buf;
    let start = this.pos;
    if (start >= r.byteLength) return false;
    // Empty lines before a request line are ignored (RFC 9112 §2.2), a few of them.
    while (start + 1 < r.byteLength && r[start] === 13 && r[start + 1] === 10) {
      start += 2;
      if (++this.emptyLines > 8) throw new Refusal(400, "too many empty lines before the request line", "bad_request");
    }
    if (start !== this.pos) {
      this.pos = start;
      this.scanned = start;
    }
    if (start >= r.byteLength) {
      this.headStarted();
      return false;
    }
    const end = headEnd(r, Math.max(start, this.scanned - 3));
    const max = this.server.maxHeadBytes;
    if (end < 0) {
      this.headStarted();
      // A line ending in a bare LF will never end the head the way we read it: refused now, not at the timeout.
      for (let i = Math.max(start, this.scanned); i < r.byteLength; i++) if (r[i] === 10 && (i === start || r[i - 1] !== 13)) throw new Refusal(400, "a line of the request head does not end in CRLF", "bad_request");
      this.scanned = r.byteLength;
      if (r.byteLength - start > max) throw new Refusal(431, `the request head is over ${max} bytes`, "request_header_fields_too_large");
      return false;
    }
    if (end - start > max) throw new Refusal(431, `the request head is over ${max} bytes`, "request_header_fields_too_large");
    const text = latin1Slice.call(r, start, end);
    this.pos = end + 4;
    this.scanned = 0;
    this.emptyLines = 0;
    this.headDeadline = Number.POSITIVE_INFINITY;
    this.startRequest(text);
    return true;
  }

  private startRequest(text: string): void {
    checkHeadText(text, "request");
    let eol = text.indexOf("\r\n");
    if (eol < 0) eol = text.length;
    const sp1 = text.indexOf(" ");
    const sp2 = text.indexOf(" ", sp1 + 1);
    if (sp1 <= 0 || sp2 < 0 || sp2 >= eol || text.lastIndexOf(" ", eol) !== sp2) throw new Refusal(400, "malformed request line", "bad_request");
    const method = text.slice(0, sp1);
    const version = text.slice(sp2 + 1, eol);
    if (!isToken(text, 0, sp1)) throw new Refusal(400, "malformed request method", "bad_request");
    if (version !== "HTTP/1.1" && version !== "HTTP/1.0") {
      if (/^HTTP\/\d\.\d$/.test(version)) throw new Refusal(505, `${version} is not supported; use HTTP/1.1`, "http_version_not_supported");
      throw new Refusal(400, "malformed request line", "bad_request");
    }
    const http10 = version === "HTTP/1.0";
    const target = requestTarget(text, sp1, sp2);
    // Header lines, with the few that frame the request picked out on the way (wire.ts).
    // One HeaderFields per connection, emptied for each head (its arrays go to the request's headers).
    const f = (this.fields ??= new HeaderFields("request", this.server.maxHeaders));
    f.reset();
    if (eol + 2 < text.length) f.lines(text, eol + 2);
    const hosts = f.hosts;
    if (hosts > 1 || (!http10 && hosts === 0)) throw new Refusal(400, hosts > 1 ? "more than one Host header" : "HTTP/1.1 requests need a Host header", "bad_request");
    const headers = new RequestHeaders(f.names, f.values);
    const conn = f.connection;
    this.keepAlive = http10 ? conn !== undefined && hasToken(conn.toLowerCase(), "keep-alive") : !(conn !== undefined && hasToken(conn.toLowerCase(), "close"));
    let expect = false;
    const ex = f.expect;
    if (ex !== undefined) {
      if (ex.toLowerCase() !== "100-continue") throw new Refusal(417, `Expect: ${ex.slice(0, 40)} is not supported`, "expectation_failed");
      expect = !http10;
    }
    const q = target.indexOf("?");
    const path = q < 0 ? target : target.slice(0, q);
    this.req = { method, target, path, headers, http10, expect };
    if (f.transferEncoding !== undefined && http10) throw new Refusal(400, "Transfer-Encoding is not allowed in HTTP/1.0", "bad_request");
    const framing = f.bodyFraming();
    const max = this.server.maxBodyBytes;
    if (framing === "chunked") {
      this.state = BODY_CHUNKED;
      this.chunks = [];
      this.decoder = new ChunkedDecoder("request", max, this.server.maxHeadBytes);
      this.beginBody();
      this.continue_();
      return;
    }
    if (framing > max) throw new Refusal(413, `request body is ${framing} bytes; the limit is ${max}`, "request_too_large");
    if (framing > 0) {
      this.need = framing;
      this.chunks = [];
      this.bodySize = 0;
      this.state = BODY_LENGTH;
      this.beginBody();
      this.continue_();
      return;
    }
    this.dispatch(EMPTY);
  }

  /** `Expect: 100-continue` is answered once the body is wanted and has not started arriving. */
  private continue_(): void {
    if (this.req!.expect && this.pos >= this.buf.byteLength) this.write(CONTINUE);
  }

  private readLength(): boolean {
    const r = this.buf;
    const at = this.pos;
    const avail = r.byteLength - at;
    if (avail < this.need) {
      // A big body is gathered read by read, not joined again at every read.
      if (avail > 0 && this.bodySize + this.need > 65536) {
        this.chunks.push(at === 0 ? r : r.subarray(at));
        this.bodySize += avail;
        this.need -= avail;
        this.buf = EMPTY;
        this.pos = 0;
      }
      return false;
    }
    const end = at + this.need;
    let body: Uint8Array;
    if (this.chunks.length > 0) {
      this.chunks.push(r.subarray(at, end));
      body = concat(this.chunks);
      this.chunks = [];
      this.bodySize = 0;
    } else {
      // A small body is copied: cheaper than a view of a buffer fresh from the socket. A big
      // one is a view (each read arrives in a buffer of its own).
      body = at === 0 && end === r.byteLength ? r : this.need <= 65536 ? r.slice(at, end) : r.subarray(at, end);
    }
    this.pos = end;
    this.dispatch(body);
    return true;
  }

  /** A chunked request body, through the wire's decoder; its pieces are gathered and handed over whole. */
  private readChunked(): boolean {
    const d = this.decoder!;
    const r = this.buf;
    const at = d.decode(r, this.pos, this.collect);
    this.pos = at;
    if (!d.done) {
      // A line not yet whole stays in buf: the next read is joined to it.
      return false;
    }
    const body = concat(this.chunks);
    this.chunks = [];
    this.decoder = undefined;
    this.dispatch(body);
    return true;
  }

  /** The decoder's body bytes: views kept until the body is whole (each read is a buffer of its own). */
  private readonly collect = (d: Uint8Array, a: number, b: number): void => {
    this.chunks.push(d.subarray(a, b));
  };

  private dispatch(body: Uint8Array): void {
    const q = this.req!;
    this.req = undefined;
    this.state = BUSY;
    this.deadline = Number.POSITIVE_INFINITY;
    const ex = new ClientExchange(this, q.method, q.target, q.path, q.headers, body, q.http10);
    this.current = ex;
    // The next request is already here: read no more until this one is answered.
    if (this.pos < this.buf.byteLength) this.pauseReads();
    try {
      this.server.handler(ex);
    } catch (e) {
      this.server.onHandlerError?.(e);
      if (!ex.answered) ex.respond(500, { "content-type": "application/json" }, this.server.errorBody(500, "internal error in the router; see the server log", "internal_error"));
      else ex.destroy();
    }
  }

  /** The exchange is answered: on to the next request, or close. */
  done(ex: ClientExchange): void {
    if (ex !== this.current) return;
    this.current = undefined;
    if (this.state === CLOSED) return;
    if (!this.keepAlive) {
      this.close();
      return;
    }
    this.state = HEAD;
    this.headDeadline = Number.POSITIVE_INFINITY;
    // From the clock as it is now: the last sweep may be long past if the loop was busy (a big
    // heartbeat on the admin listener), and a deadline set from it would come that much early.
    const now = this.server.time();
    if (this.unauthenticated) this.unauthUntil = now + this.server.unauthHeadTimeoutMs;
    this.deadline = this.pending === undefined ? this.idleDeadline(now) : now + this.server.sendTimeoutMs;
    if (this.paused) {
      this.paused = false;
      this.socket.resume();
    }
    if (this.pos < this.buf.byteLength) {
      // Later, not inside the handler that answered: pipelined requests are handled in turn.
      if (!this.processing) queueMicrotask(() => this.process());
    } else {
      // Nothing left of the last read: let it go rather than hold it while idle.
      this.buf = EMPTY;
      this.pos = 0;
    }
  }

  /** Answers a request the server refuses by itself, and closes the connection. */
  private refuse(e: Refusal): void {
    this.keepAlive = false;
    this.buf = EMPTY;
    this.pos = 0;
    const body = enc.encode(this.server.errorBody(e.status, e.message, e.code));
    const head = `HTTP/1.1 ${e.status} ${REASONS[e.status] ?? "Error"}\r\n${date()}content-type: application/json\r\ncontent-length: ${body.byteLength}\r\nconnection: close\r\n\r\n`;
    this.write(join(enc.encode(head), body));
    this.close();
  }

  /** Writes now, or queues behind what the socket has not taken yet. */
  write(data: Uint8Array): boolean {
    if (this.state === CLOSED) return false;
    if (this.pending !== undefined) {
      this.pending.push(data);
      return false;
    }
    const n = this.socket.write(data);
    if (n === data.byteLength) return true;
    if (n < 0) return false; // closed: the close handler says so
    this.pending = [data.subarray(n)];
    return false;
  }

  /** write() for text: the socket encodes it; only a partial write makes bytes of our own. */
  writeString(text: string, size: number): boolean {
    if (this.state === CLOSED) return false;
    if (this.pending !== undefined) {
      this.pending.push(enc.encode(text));
      return false;
    }
    const n = this.socket.write(text);
    if (n === size) return true;
    if (n < 0) return false; // closed: the close handler says so
    this.pending = [enc.encode(text).subarray(n)];
    return false;
  }

  onDrain(): void {
    const p = this.pending;
    if (p === undefined) return;
    this.pending = undefined;
    // The client is reading: an answer it takes slowly is not cut, only one it stops taking.
    if (this.current === undefined) this.deadline = this.server.time() + this.server.sendTimeoutMs;
    for (let i = 0; i < p.length; i++) {
      const d = p[i]!;
      const n = this.socket.write(d);
      if (n < 0) return;
      if (n < d.byteLength) {
        this.pending = [d.subarray(n), ...p.slice(i + 1)];
        return;
      }
    }
    if (this.current === undefined) this.deadline = this.idleDeadline(this.server.time());
    if (this.closing) {
      this.socket.end();
      return;
    }
    this.current?.onDrain?.();
  }

  /** Graceful: once what is queued has gone out, the write side is shut; the client closes. */
  close(): void {
    if (this.closing || this.state === CLOSED) return;
    this.closing = true;
    this.buf = EMPTY;
    this.pos = 0;
    // A client that never closes its side is cut after the idle timeout.
    this.deadline = this.server.time() + (this.pending === undefined ? this.server.idleTimeoutMs : this.server.sendTimeoutMs);
    if (this.pending === undefined) this.socket.end();
  }

  /** Abrupt: the socket is dropped now. */
  kill(): void {
    if (this.state === CLOSED) return;
    this.socket.terminate();
  }

  onClose(): void {
    if (this.state === CLOSED) return;
    this.state = CLOSED;
    this.server.release(this);
    this.buf = EMPTY;
    this.pos = 0;
    this.pending = undefined;
    const ex = this.current;
    this.current = undefined;
    ex?.abort();
  }

  /** The deadline passed: a request that stopped arriving gets 408; an idle connection just closes. */
  expire(): void {
    if (this.closing || (this.state === HEAD && this.pos >= this.buf.byteLength)) {
      this.socket.terminate();
      return;
    }
    const s = this.server;
    if (this.state === HEAD && this.unauthenticated)
      this.refuse(new Refusal(408, `the request head did not arrive in time (${s.unauthHeadTimeoutMs} ms at most before a connection has authenticated)`, "request_timeout"));
    else if (this.state === HEAD) this.refuse(new Refusal(408, `the request head did not arrive in time (idle ${s.idleTimeoutMs} ms at most, ${s.headTimeoutMs} ms in all)`, "request_timeout"));
    else if (this.state === BODY_LENGTH || this.state === BODY_CHUNKED)
      this.refuse(
        new Refusal(408, `the request body did not arrive in time (idle ${s.idleTimeoutMs} ms at most; ${s.bodyTimeoutMs} ms in all${s.bodyMinRate > 0 ? `, plus 1 s per ${s.bodyMinRate} bytes received` : ""})`, "request_timeout"),
      );
  }
}

export class Http1Server {
  readonly conns = new Set<Conn>();
  /** Open connections by source address. */
  readonly perAddress = new Map<string, number>();
  /** Connections shed at a cap since the start, by cap; `evicted`: unauthenticated ones closed for a new one. */
  readonly shed = { total: 0, address: 0, unauthenticated: 0, evicted: 0 };
  /** Open connections that have not authenticated, oldest first (with Http1Options.unauthenticated only). */
  readonly unauth = new Set<Conn>();
  /** Shed connections whose 503 is going out, with when they are cut regardless. */
  private readonly lingering = new Map<Socket<Conn>, number>();
  private readonly clock: { now(): number };
  private readonly scheduler: Scheduler;
  readonly maxHeadBytes: number;
  readonly maxHeaders: number;
  readonly maxBodyBytes: number;
  readonly idleTimeoutMs: number;
  readonly headTimeoutMs: number;
  readonly bodyTimeoutMs: number;
  readonly bodyMinRate: number;
  readonly sendTimeoutMs: number;
  readonly maxConnections: number;
  readonly maxConnectionsPerAddress: number;
  /** Unauthenticated connections at most, and the time each has for its next head (Infinity: not tracked). */
  readonly maxUnauthenticated: number;
  readonly unauthHeadTimeoutMs: number;
  /** The answer to a connection shed at a cap after its status and date lines, made once. */
  private readonly shedTotal: string;
  private readonly shedAddress: string;
  private readonly shedUnauthenticated: string;
  readonly handler: (ex: ClientExchange) => void;
  readonly errorBody: Http1Options["errorBody"];
  readonly onHandlerError: Http1Options["onHandlerError"];
  private listener: TCPSocketListener<Conn> | undefined;
  private bunServer: { stop(close?: boolean): unknown } | undefined;
  private sweeper: Timer | undefined;
  /** The clock at the timer's last sweep: the next one expires what was already overdue then. */
  private lastTimerSweep = Number.NEGATIVE_INFINITY;

  constructor(private readonly o: Http1Options) {
    this.maxHeadBytes = o.maxHeadBytes ?? WIRE_LIMITS.maxHeadBytes;
    this.maxHeaders = o.maxHeaders ?? WIRE_LIMITS.maxHeaders;
    this.maxBodyBytes = o.maxBodyBytes;
    this.idleTimeoutMs = o.idleTimeoutMs ?? 10_000;
    this.headTimeoutMs = o.headTimeoutMs ?? 30_000;
    this.bodyTimeoutMs = o.bodyTimeoutMs ?? 30_000;
    this.bodyMinRate = o.bodyMinRate ?? 8192;
    this.sendTimeoutMs = o.sendTimeoutMs ?? 60_000;
    this.maxConnections = o.maxConnections ?? Number.POSITIVE_INFINITY;
    this.maxConnectionsPerAddress = o.maxConnectionsPerAddress ?? Number.POSITIVE_INFINITY;
    this.maxUnauthenticated = o.unauthenticated?.maxConnections ?? Number.POSITIVE_INFINITY;
    this.unauthHeadTimeoutMs = o.unauthenticated?.headTimeoutMs ?? Number.POSITIVE_INFINITY;
    this.handler = o.handler;
    this.errorBody = o.errorBody;
    this.onHandlerError = o.onHandlerError;
    const scheduler = o.scheduler ?? realScheduler;
    this.scheduler = scheduler;
    this.clock = o.clock ?? { now: () => scheduler.mono() };
    const shedAnswer = (message: string) => {
      const body = o.errorBody(503, message, "overloaded");
      return `content-type: application/json\r\ncontent-length: ${byteLength(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n${body}`;
    };
    this.shedTotal = shedAnswer(`the server is at its cap of ${this.maxConnections} open connections; try again shortly`);
    this.shedAddress = shedAnswer(`your address is at its cap of ${this.maxConnectionsPerAddress} open connections; close some or try again shortly`);
    this.shedUnauthenticated = shedAnswer(`the server is at its cap of ${this.maxUnauthenticated} connections that have not authenticated; try again shortly`);
  }

  /**
   * A new connection: taken, or shed at once when a cap is reached: a short 503, the write side
   * shut behind it, and the socket dropped when the client closes or after SHED_LINGER_MS.
   * Dropping it at once would reset the connection and lose the 503 on the way. At most
   * MAX_LINGERING such sockets wait at a time; past that, and on TLS (where nothing can be said
   * before a handshake), a shed connection is just closed. So a flood holds at most the caps'
   * descriptors plus MAX_LINGERING.
   */
  private admit(s: Socket<Conn>): void {
    const address = s.remoteAddress ?? "";
    const n = this.perAddress.get(address) ?? 0;
    const full = this.conns.size >= this.maxConnections;
    const overAddress = n >= this.maxConnectionsPerAddress;
    let cap: ShedCap | undefined = full ? "total" : overAddress ? "address" : undefined;
    const tracked = this.o.unauthenticated !== undefined;
    if (tracked && !overAddress && (full || this.unauth.size >= this.maxUnauthenticated)) {
      // Room is made by closing a connection nobody has vouched for, not by refusing the new
      // one: slow heads must not lock out the operator or an agent that is about to authenticate.
      const victim = this.evictable();
      if (victim !== undefined) {
        this.shed.evicted++;
        this.o.onShed?.("evicted", victim.address);
        victim.kill();
        victim.onClose();
        cap = undefined;
      } else cap = full ? "total" : "unauthenticated";
    }
    if (cap !== undefined) {
      this.shed[cap]++;
      this.o.onShed?.(cap, address);
      if (this.o.tls !== undefined || this.lingering.size >= MAX_LINGERING) {
        s.terminate();
        return;
      }
      s.write(statusLine(503) + date() + (cap === "total" ? this.shedTotal : cap === "address" ? this.shedAddress : this.shedUnauthenticated));
      s.end();
      this.lingering.set(s, this.time() + SHED_LINGER_MS);
      return;
    }
    // Answers go out as written, not held back for more (Nagle).
    s.setNoDelay(true);
    const c = new Conn(s, this, address);
    s.data = c;
    this.conns.add(c);
    this.perAddress.set(address, n + 1);
    if (tracked) {
      c.distrust();
      this.unauth.add(c);
    }
  }

  /** The oldest unauthenticated connection with no request past its head, else the oldest reading a body. */
  private evictable(): Conn | undefined {
    let body: Conn | undefined;
    for (const c of this.unauth) {
      const rank = c.evictRank;
      if (rank === 0) return c;
      if (rank === 1 && body === undefined) body = c;
    }
    return body;
  }

  /** @internal A request on `c` authenticated: it leaves the unauthenticated share. */
  vouch(c: Conn): void {
    this.unauth.delete(c);
  }

  /** @internal A connection is gone: it no longer counts against the caps. */
  release(c: Conn): void {
    this.unauth.delete(c);
    if (!this.conns.delete(c)) return;
    const n = this.perAddress.get(c.address) ?? 1;
    if (n <= 1) this.perAddress.delete(c.address);
    else this.perAddress.set(c.address, n - 1);
  }

  /** Starts listening; returns the port (useful with port 0). */
  listen(): number {
    if ((this.o.backend ?? (process.env.LLMGW_HTTP_SERVER === "bun" ? "bun" : "own")) === "bun") {
      const b = listenOnBunServe(this.o);
      this.bunServer = b;
      return b.port ?? 0;
    }
    const server = this;
    this.listener = Bun.listen<Conn>({
      hostname: this.o.hostname,
      port: this.o.port,
      ...(this.o.tls ? { tls: this.o.tls } : {}),
      socket: {
        binaryType: "uint8array",
        open(s) {
          server.admit(s);
        },
        data(s, d) {
          s.data?.onData(d);
        },
        drain(s) {
          s.data?.onDrain();
        },
        close(s) {
          if (s.data === undefined) server.lingering.delete(s);
          else s.data.onClose();
        },
        end(s) {
          // The client shut its side: whatever it asked for, it can no longer be told.
          s.data?.onClose();
          s.terminate();
        },
        error(s) {
          if (s.data === undefined) server.lingering.delete(s);
          else s.data.onClose();
        },
        handshake(s, ok) {
          if (!ok) s.terminate();
        },
      },
    });
    // Deadlines (idle, slow heads) are checked by one sweep over every connection, at a quarter
    // of the shortest timeout (at most once a second).
    const tick = Math.max(10, Math.min(1000, Math.min(this.idleTimeoutMs, this.headTimeoutMs, this.bodyTimeoutMs, this.unauthHeadTimeoutMs) / 4));
    this.lastTimerSweep = this.clock.now();
    this.sweeper = this.scheduler.every(tick, () => this.timerSweep()).unref();
    return this.listener.port;
  }

  /**
   * The timer's sweep expires a connection only if it was past its deadline at the timer's
   * previous sweep already: the sockets have been read since. A timer runs before the reads
   * that came in while the loop was busy (handlers holding it, as a big heartbeat on the admin
   * listener of the same process does, one after another): judged at once, a connection whose
   * request reached it in time, but is still in the kernel, would look idle and be dropped
   * unanswered. So a deadline is acted on one to two sweep intervals after it passes.
   */
  private timerSweep(): void {
    const asOf = this.lastTimerSweep;
    this.lastTimerSweep = this.clock.now();
    this.sweep(asOf);
  }

  /**
   * @internal The clock now. Every deadline is set from it when it is set (one reading per
   * answer): set from the last sweep's reading, one would come early by however long the loop
   * was busy since.
   */
  time(): number {
    return this.clock.now();
  }

  /**
   * Reads the clock and expires every connection past its deadline as of `asOf` (default: now).
   * The timer passes its previous sweep's time; tests with a manual clock call it as it is.
   */
  sweep(asOf?: number): void {
    const now = this.clock.now();
    refreshDate(this.scheduler.now());
    const t = asOf ?? now;
    for (const c of this.conns) if (t > c.deadline) c.expire();
    if (this.lingering.size > 0) for (const [s, until] of this.lingering) if (now > until) s.terminate();
  }

  /** Stops listening and drops every connection. */
  stop(): void {
    this.bunServer?.stop(true);
    this.sweeper?.cancel();
    this.listener?.stop(true);
    for (const c of [...this.conns]) c.kill();
    for (const s of [...this.lingering.keys()]) s.terminate();
  }
}

/** How long a shed connection's 503 may take to go out before the socket is dropped anyway. */
const SHED_LINGER_MS = 2000;
/** Shed connections waiting for their 503 to go out, at most (src/config/limits.ts reserves descriptors for them). */
const MAX_LINGERING = 16;


