// One client connection of the HTTP/1.1 server (server.ts): the strict request parser and the
// connection's life. It reads requests off the socket one at a time (pipelined ones wait, reads
// paused, until the one in flight is answered), refuses what the wire forbids with a status and
// a close, keeps each request's deadlines (head, body, idle, send) for the server's sweep, and
// hands each request with its whole body to the handler as a ClientExchange (exchange.ts).
// The rules it enforces are listed at the top of server.ts; the tokenizer, the chunked decoder
// and the limits are wire.ts's.

import type { Socket } from "bun";
import { ClientExchange, date, type ExchangeConn, REASONS, RequestHeaders } from "./exchange";
import { checkHeadText, ChunkedDecoder, concat, HeaderFields, hasToken, headEnd, isToken, join, latin1Slice, WireError } from "./wire";

const enc = new TextEncoder();
const EMPTY = new Uint8Array(0);
const CONTINUE = enc.encode("HTTP/1.1 100 Continue\r\n\r\n");
// Connection states.
const HEAD = 0;
const BODY_LENGTH = 1;
const BODY_CHUNKED = 2;
const BUSY = 3;
const CLOSED = 4;

/** Thrown by the parser: answered with this status, and the connection closed. */
const Refusal = WireError;
type Refusal = WireError;

/** What a connection needs of its server (server.ts's Http1Server): its limits, clock and handler. */
export interface ConnHost {
  readonly maxHeadBytes: number;
  readonly maxHeaders: number;
  readonly maxBodyBytes: number;
  readonly idleTimeoutMs: number;
  readonly headTimeoutMs: number;
  readonly bodyTimeoutMs: number;
  readonly bodyMinRate: number;
  readonly sendTimeoutMs: number;
  readonly unauthHeadTimeoutMs: number;
  readonly handler: (ex: ClientExchange) => void;
  readonly errorBody: (status: number, message: string, code: string) => string;
  readonly onHandlerError: ((err: unknown) => void) | undefined;
  /** The clock now (see Http1Server.time()). */
  time(): number;
  /** A request on `c` authenticated: it leaves the unauthenticated share. */
  vouch(c: Conn): void;
  /** `c` is gone: it no longer counts against the caps. */
  release(c: Conn): void;
  /** The server is draining (Http1Server.drain): every answer says `connection: close`, and the connection closes after it. */
  readonly draining?: boolean;
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

/** One client connection: parses requests off it and writes their answers, one at a time. */
export class Conn implements ExchangeConn {
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
    readonly server: ConnHost,
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
    this.keepAlive = this.server.draining !== true && (http10 ? conn !== undefined && hasToken(conn.toLowerCase(), "keep-alive") : !(conn !== undefined && hasToken(conn.toLowerCase(), "close")));
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

  /**
   * Nothing under way on it: no request being answered or its body read, nothing left to write.
   * A head still arriving counts as nothing: its client has had no byte of an answer and may send
   * it again elsewhere, and a slow one must not hold a stopping server up.
   */
  get quiet(): boolean {
    return this.current === undefined && this.state === HEAD && this.pending === undefined;
  }

  /** The server closed its side and everything it wrote has gone to the socket: only the client's close is awaited. */
  get closed(): boolean {
    return this.closing && this.pending === undefined;
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
