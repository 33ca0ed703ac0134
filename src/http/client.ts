// The HTTP/1.1 client of the wire module (see wire.ts for the rules it shares with the server):
// the router's client for talking to engines: keep-alive sockets pooled per origin,
// over Bun.connect. It replaces fetch on the hot path. Bun's fetch runs on a separate HTTP
// thread, caps concurrent requests (BUN_CONFIG_MAX_HTTP_REQUESTS) and builds Response and
// Headers objects for every answer; test/bench/proxy.ts measured a Bun.serve proxy at 0.59 of
// nginx's throughput with fetch and 0.74 with a client like this one. (The router's listener
// is its own too, server.ts, for the same reason.)
//
// Deliberately small: the router sends POSTs (and nothing else) to engines. It writes a request
// in one go, and parses the answer as it arrives: the status line, the headers the router
// passes on, then a body framed by Content-Length, chunked transfer coding, or the end of the
// connection. The parser is the server's (server.ts): the same tokenizer, chunked decoder and
// limits from wire.ts, since an engine is a program the router does not control, and a header
// value holding a bare LF would otherwise become a header line of the client's answer; what
// the wire refuses is a protocol error and the socket is closed. Decoded body bytes go to the caller as they
// come, with pause/resume for backpressure. A socket goes back to the pool only after a whole
// response on a connection both sides keep alive; one aborted or broken mid-way is closed.

import type { Socket } from "bun";
import { realScheduler, type Scheduler } from "../lib/scheduler";
import { bareLf, ChunkedDecoder, checkHeadText, HeaderFields, hasToken, headEnd, headerLines, latin1Slice, latin1Write, WIRE_LIMITS, WireError } from "./wire";

/**
 * Why an exchange failed. "connect": never reached the engine; "reset": the connection broke;
 * "protocol": the engine sent something that is not HTTP/1.1. Messages never name the
 * engine's address: the router passes them on to clients.
 */
export type UpstreamErrorKind = "connect" | "reset" | "protocol";

export class UpstreamError extends Error {
  constructor(
    readonly kind: UpstreamErrorKind,
    message: string,
  ) {
    super(message);
  }
}

/** The parts of a response head the router uses. Header names are lower case. */
export class UpstreamHead {
  constructor(
    readonly status: number,
    /** Header names in arrival order (lower case); repeated names appear repeatedly. */
    readonly names: readonly string[],
    /** Their values, in the same order. */
    readonly values: readonly string[],
    /** Content-Length, or -1 when the body is chunked or runs to the end of the connection. */
    readonly contentLength: number,
  ) {}

  /** Headers in arrival order as [name, value], made when asked for (the router reads names and values). */
  get headers(): [string, string][] {
    const out: [string, string][] = new Array(this.names.length);
    for (let i = 0; i < this.names.length; i++) out[i] = [this.names[i]!, this.values[i]!];
    return out;
  }
}

export interface ExchangeHandler {
  /** The head of the final (non-1xx) response. */
  onHead(head: UpstreamHead): void;
  /** Decoded body bytes. The view may be kept: every socket read arrives in a fresh buffer (Bun does not reuse them; the tests check). */
  onData(chunk: Uint8Array): void;
  /**
   * Decoded body bytes as d[a, b) of the socket read they came in; when given, called instead
   * of onData, with no array made for them. d may be kept for as long as the range is needed
   * (a fresh buffer per read, as for onData), and its other bytes are not the body's.
   */
  onBytes?(d: Uint8Array, a: number, b: number): void;
  /** The body is complete. */
  onEnd(): void;
  /** Called after each read from the socket whose bytes went to onData, unless the exchange ended: a place to flush once per read instead of once per chunk. */
  onReadEnd?(): void;
  /** The exchange failed; `received` tells whether any byte of the response had arrived. */
  onError(err: UpstreamError, received: boolean): void;
}

export interface UpstreamOptions {
  /** Idle keep-alive sockets kept per origin (default 512). */
  maxIdlePerOrigin?: number;
  /** An idle socket unused this long is closed (default 4 s: engines behind uvicorn close theirs after 5). */
  idleTimeoutMs?: number;
  /** Response heads larger than this are a protocol error (default: the wire's, 16 KiB). */
  maxHeadBytes?: number;
  /** Header lines in a response head at most (default: the wire's, 100). */
  maxHeaders?: number;
  /** Time for idle expiry: its mono() (default realScheduler). */
  scheduler?: Scheduler;
}

interface Origin {
  readonly key: string;
  readonly hostname: string;
  readonly port: number;
  readonly tls: boolean;
  /** The Host header value. */
  readonly host: string;
  /** The fixed request header lines: Host and Content-Type. */
  readonly hostLine: string;
  /** The URL's path without a trailing slash ("" for none), prefixed to every request path. */
  readonly base: string;
  readonly idle: Conn[];
}

const DEAD_ORIGIN: Origin = { key: "", hostname: "", port: 0, tls: false, host: "", hostLine: "", base: "", idle: [] };

/**
 * Bytes [a, b) of a socket read. Small parts are copied: the first view of an array fresh from
 * the socket costs more than copying a few KiB out of it. Big ones are views.
 */
function part(d: Uint8Array, a: number, b: number): Uint8Array {
  return a === 0 && b === d.length ? d : b - a <= 16384 ? d.slice(a, b) : d.subarray(a, b);
}
const EMPTY = new Uint8Array(0);

// Parser states.
const HEAD = 0;
const BODY_LENGTH = 1;
const BODY_CLOSE = 2;
const CHUNKED = 3;
const DONE = 4;

/** One keep-alive connection to an origin; carries one exchange at a time. */
class Conn {
  socket: Socket<Conn> | undefined;
  ex: Exchange | undefined;
  /** Requests this socket has carried, the current one included. */
  uses = 0;
  idleSince = 0;
  closed = false;
  /** Unparsed bytes carried over between data events (a partial head, chunk-size line or CRLF). */
  private rest: Uint8Array = EMPTY;
  private state: number = HEAD;
  private remaining = 0;
  private keepAlive = true;
  private received = false;
  private paused = false;
  // The response head as parsed so far (lines arrive over several reads).
  private headBytes = 0;
  private hStatus = 0;
  private hFields: HeaderFields;
  private hHttp11 = true;
  private decoder: ChunkedDecoder | undefined;
  private pending: Uint8Array | undefined;

  constructor(
    readonly origin: Origin,
    private readonly pool: UpstreamPool,
  ) {
    this.hFields = new HeaderFields("response", pool.maxHeaders);
  }

  /** Starts an exchange on this (connected, idle) socket. */
  start(ex: Exchange): void {
    this.ex = ex;
    ex.conn = this;
    this.uses++;
    this.state = HEAD;
    this.rest = EMPTY;
    this.keepAlive = true;
    this.received = false;
    this.resetHead();
    if (ex.paused) this.pause();
    this.write(ex.msg, ex.msgLength);
  }

  private write(msg: Uint8Array, length: number): void {
    const n = this.socket!.write(msg, 0, length);
    if (n < 0) return; // closed: the close handler reports it
    this.pending = n < length ? msg.slice(n, length) : undefined;
  }

  onDrain(): void {
    const p = this.pending;
    if (p !== undefined) this.write(p, p.length);
  }

  onData(d: Uint8Array): void {
    const ex = this.ex;
    if (ex === undefined) {
      // Bytes on an idle socket: the engine is not speaking HTTP/1.1 as we do. Never reuse it.
      this.destroy();
      return;
    }
    this.received = true;
    let data = d;
    if (this.rest.length > 0) {
      const joined = new Uint8Array(this.rest.length + d.length);
      joined.set(this.rest);
      joined.set(d, this.rest.length);
      data = joined;
      this.rest = EMPTY;
    }
    try {
      this.parse(data, ex);
    } catch (e) {
      this.fail(e instanceof UpstreamError ? e : new UpstreamError("protocol", (e as WireError | Error).message));
      return;
    }
    // Everything this read brought is handed over: the caller may now flush it in one write.
    if (this.ex === ex && ex.handler.onReadEnd !== undefined) ex.handler.onReadEnd();
  }

  private parse(data: Uint8Array, ex: Exchange): void {
    let p = 0;
    const n = data.length;
    while (p < n) {
      // An exchange can be aborted from inside a callback.
      if (this.ex !== ex) return;
      switch (this.state) {
        case HEAD: {
          // Lines are parsed as they arrive: engines often send the status line and some
          // headers before the first token, and the rest with it, so little is left to do on
          // the first token's arrival (the moment time to first byte is measured from).
          let end: number;
          if (this.headBytes > 0 && data[p] === 13 && data[p + 1] === 10) end = p; // the blank line, at a read boundary
          else end = headEnd(data, p);
          if (end < 0) {
            // A line ending in a bare LF never ends the head the way it is read: refused now, not at the timeout.
            if (bareLf(data, p, p) >= 0) throw new UpstreamError("protocol", "a line of the response head does not end in CRLF");
            const cr = lastLineEnd(data, p);
            this.headBytes += n - p;
            if (this.headBytes > this.pool.maxHeadBytes) throw new UpstreamError("protocol", `response head over ${this.pool.maxHeadBytes} bytes`);
            if (cr > p) {
              this.headLines(latin1Slice.call(data, p, cr));
              p = cr + 2;
            }
            this.rest = data.slice(p);
            return;
          }
          // The limit holds however the head arrives: in one read or in many.
          if (this.headBytes + (end - p) > this.pool.maxHeadBytes) throw new UpstreamError("protocol", `response head over ${this.pool.maxHeadBytes} bytes`);
          if (end > p) this.headLines(latin1Slice.call(data, p, end));
          p = end + (end === p && this.headBytes > 0 ? 2 : 4);
          const head = this.headDone();
          if (head === undefined) continue; // a 1xx interim response: the real one follows
          ex.handler.onHead(head);
          if (this.ex !== ex) return;
          // headDone set the body state (narrowing does not see through the call).
          if ((this.state as number) === DONE) {
            this.finish();
            return;
          }
          break;
        }
        case BODY_LENGTH: {
          const take = Math.min(this.remaining, n - p);
          const h = ex.handler;
          if (h.onBytes !== undefined) h.onBytes(data, p, p + take);
          else h.onData(part(data, p, p + take));
          p += take;
          this.remaining -= take;
          if (this.ex !== ex) return;
          if (this.remaining === 0) {
            if (p < n) this.keepAlive = false; // bytes past the body: do not trust this socket again
            this.finish();
          }
          return;
        }
        case BODY_CLOSE: {
          const h = ex.handler;
          if (h.onBytes !== undefined) h.onBytes(data, p, data.length);
          else h.onData(part(data, p, data.length));
          return;
        }
        case CHUNKED: {
          const d = this.decoder!;
          const at = d.decode(data, p, this.emit);
          if (at < 0) return; // the exchange was dropped from inside onData
          if (d.done) {
            if (at < n) this.keepAlive = false; // bytes past the body: do not trust this socket again
            this.finish();
          } else if (at < n) this.rest = data.slice(at); // a line not yet whole
          return;
        }
        default:
          // DONE with bytes left: nothing may follow a response we did not ask for.
          this.keepAlive = false;
          return;
      }
    }
  }

  /** Complete lines of a response head, CRLF-separated, the status line first. */
  private headLines(text: string): void {
    // Controls, bare CR and bare LF, anywhere: with them gone, lines split on CRLF alone.
    checkHeadText(text, "response");
    const n = text.length;
    let at = 0;
    if (this.hStatus === 0) {
      // "HTTP/1.x NNN", then a space and a reason phrase, or the end of the line.
      let eol = text.indexOf("\r\n");
      if (eol < 0) eol = n;
      const minor = text.charCodeAt(7);
      const d0 = text.charCodeAt(9) - 48;
      const d1 = text.charCodeAt(10) - 48;
      const d2 = text.charCodeAt(11) - 48;
      if (
        eol < 12 || !text.startsWith("HTTP/1.") || (minor !== 48 && minor !== 49) || text.charCodeAt(8) !== 32 ||
        !(d0 >= 0 && d0 <= 9 && d1 >= 0 && d1 <= 9 && d2 >= 0 && d2 <= 9) || (eol > 12 && text.charCodeAt(12) !== 32)
      )
        throw new UpstreamError("protocol", `not an HTTP/1.x status line: ${JSON.stringify(text.slice(0, Math.min(eol, 80)))}`);
      this.hStatus = d0 * 100 + d1 * 10 + d2;
      if (this.hStatus === 101) throw new UpstreamError("protocol", "the engine switched protocols");
      this.hHttp11 = minor === 49;
      at = eol + 2;
    }
    // Header lines through the wire's tokenizer.
    if (at < n) this.hFields.lines(text, at);
  }

  /** Body bytes from the chunked decoder, to the exchange it started for; false once that exchange is gone. */
  private readonly emit = (d: Uint8Array, a: number, b: number): boolean => {
    const ex = this.ex;
    if (ex === undefined) return false;
    const h = ex.handler;
    if (h.onBytes !== undefined) h.onBytes(d, a, b);
    else h.onData(part(d, a, b));
    return this.ex === ex;
  };

  /** The blank line ending a head: undefined for a 1xx interim response (the real one follows). Sets the body state. */
  private headDone(): UpstreamHead | undefined {
    const status = this.hStatus;
    if (status === 0) throw new UpstreamError("protocol", "empty response head");
    const f = this.hFields;
    // Both framings at once is how responses are smuggled (RFC 9112 §6.3): refused, not resolved.
    const framing = f.bodyFraming();
    const conn = f.connection;
    this.keepAlive = conn === undefined ? this.hHttp11 : this.hHttp11 ? !hasToken(conn.toLowerCase(), "close") : hasToken(conn.toLowerCase(), "keep-alive");
    const names = f.names;
    const values = f.values;
    this.resetHead();
    if (status < 200) return undefined;
    let length: number;
    if (status === 204 || status === 304) {
      this.state = DONE;
      length = 0;
    } else if (framing === "chunked") {
      this.state = CHUNKED;
      this.decoder = new ChunkedDecoder("response", Number.POSITIVE_INFINITY, this.pool.maxHeadBytes);
      length = -1;
    } else if (framing >= 0) {
      length = framing;
      this.remaining = length;
      this.state = length === 0 ? DONE : BODY_LENGTH;
    } else {
      length = -1;
      this.keepAlive = false;
      this.state = BODY_CLOSE;
    }
    return new UpstreamHead(status, names, values, length);
  }

  private resetHead(): void {
    this.headBytes = 0;
    this.hStatus = 0;
    // The names and values went out with the head: the next head gets arrays of its own.
    this.hFields.reset();
    this.hHttp11 = true;
  }

  /** The response is complete: tell the caller, then pool or close the socket. */
  private finish(): void {
    const ex = this.ex!;
    this.ex = undefined;
    ex.conn = undefined;
    ex.done = true;
    this.state = DONE;
    if (this.keepAlive && !this.closed && this.socket !== undefined) {
      this.resume();
      this.pool.release(this);
    } else this.destroy();
    ex.handler.onEnd();
  }

  private fail(err: UpstreamError): void {
    const ex = this.ex;
    this.ex = undefined;
    this.destroy();
    if (ex === undefined || ex.done) return;
    ex.conn = undefined;
    ex.done = true;
    ex.handler.onError(err, this.received);
  }

  /** The socket closed (by the engine, by an error, or by us). */
  onClose(err?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.pool.forget(this);
    const ex = this.ex;
    if (ex === undefined || ex.done) return;
    if (this.state === BODY_CLOSE) {
      // A body delimited by the end of the connection ends here, normally.
      this.ex = undefined;
      ex.conn = undefined;
      ex.done = true;
      ex.handler.onEnd();
      return;
    }
    // A reused socket the engine closed before answering a byte: its keep-alive timeout raced
    // our request. Nothing was processed, so the request goes again on a fresh connection.
    if (!this.received && this.uses > 1 && !ex.retried) {
      this.ex = undefined;
      ex.conn = undefined;
      ex.retried = true;
      this.pool.dispatch(ex, true);
      return;
    }
    this.ex = undefined;
    ex.conn = undefined;
    ex.done = true;
    const why = err !== undefined ? `connection error ${errorCode(err)}` : "connection closed by the engine";
    ex.handler.onError(new UpstreamError("reset", this.received ? `${why} mid-response` : `${why} before answering`), this.received);
  }

  destroy(): void {
    const s = this.socket;
    if (s !== undefined && !this.closed) {
      this.closed = true;
      this.pool.forget(this);
      s.terminate();
    }
  }

  pause(): void {
    if (this.paused || this.socket === undefined) return;
    this.paused = true;
    this.socket.pause();
  }

  resume(): void {
    if (!this.paused || this.socket === undefined) return;
    this.paused = false;
    this.socket.resume();
  }
}

/** One request and its response; abort() drops it (and its socket) at any point. */
export class Exchange {
  conn: Conn | undefined;
  done = false;
  retried = false;
  /** Paused by the caller, possibly before a socket was assigned. */
  paused = false;
  constructor(
    readonly origin: Origin,
    /** The request as sent: head and body, the first msgLength bytes. */
    readonly msg: Uint8Array,
    readonly msgLength: number,
    readonly handler: ExchangeHandler,
  ) {}

  /** Stops reading from the engine (backpressure) until resume(). */
  pause(): void {
    this.paused = true;
    this.conn?.pause();
  }

  resume(): void {
    this.paused = false;
    this.conn?.resume();
  }

  /** Drops the exchange: the socket is closed (the engine sees the client go away); no callback follows. */
  abort(): void {
    if (this.done) return;
    this.done = true;
    const c = this.conn;
    this.conn = undefined;
    if (c !== undefined) {
      c.ex = undefined;
      c.destroy();
    }
  }
}

/** Request head lines passed on to the engine, besides Host, Content-Type and Content-Length. */
export type ExtraHeaders = readonly (readonly [string, string])[];

export class UpstreamPool {
  readonly maxHeadBytes: number;
  readonly maxHeaders: number;
  private readonly maxIdle: number;
  private readonly idleMs: number;
  private readonly now: () => number;
  private readonly origins = new Map<string, Origin>();
  /** Live connections, idle or busy, for close(). */
  private readonly conns = new Set<Conn>();
  private closing = false;

  constructor(o: UpstreamOptions = {}) {
    this.maxIdle = o.maxIdlePerOrigin ?? 512;
    this.idleMs = o.idleTimeoutMs ?? 4_000;
    this.maxHeadBytes = o.maxHeadBytes ?? WIRE_LIMITS.maxHeadBytes;
    this.maxHeaders = o.maxHeaders ?? WIRE_LIMITS.maxHeaders;
    const scheduler = o.scheduler ?? realScheduler;
    this.now = () => scheduler.mono();
  }

  /**
   * Sends `POST path` with `body` to the engine at baseUrl (http or https) and streams the answer
   * to `handler`. Errors arrive through handler.onError, never as exceptions.
   */
  post(baseUrl: string, path: string, body: Uint8Array, extra: ExtraHeaders, handler: ExchangeHandler, key?: string): Exchange {
    let origin: Origin;
    try {
      origin = this.origin(baseUrl);
    } catch (e) {
      // Not a URL we can reach: reported like any connect error, never thrown at the caller.
      const ex = new Exchange(DEAD_ORIGIN, EMPTY, 0, handler);
      queueMicrotask(() => {
        if (ex.done) return;
        ex.done = true;
        handler.onError(e instanceof UpstreamError ? e : new UpstreamError("connect", "the endpoint URL is not valid"), false);
      });
      return ex;
    }
    let head = `POST ${origin.base}${path} HTTP/1.1\r\n${origin.hostLine}content-length: ${body.length}\r\n`;
    if (key !== undefined) head += `authorization: Bearer ${key}\r\n`;
    head += `${headerLines(extra)}\r\n`;
    // One buffer, one write: head and body in the same packet. The head is latin1, a byte per
    // character: header values are the client's bytes as the server read them (latin1Slice),
    // and go out as those same bytes.
    const msg = new Uint8Array(head.length + body.length);
    latin1Write.call(msg, head, 0);
    msg.set(body, head.length);
    const ex = new Exchange(origin, msg, msg.length, handler);
    this.dispatch(ex, false);
    return ex;
  }

  /** @internal Puts an exchange on an idle socket, or on a new one. */
  dispatch(ex: Exchange, fresh: boolean): void {
    const origin = ex.origin;
    if (this.closing) {
      ex.done = true;
      ex.handler.onError(new UpstreamError("connect", "the router is shutting down"), false);
      return;
    }
    if (!fresh) {
      const c = origin.idle.pop();
      if (c !== undefined) {
        c.start(ex);
        return;
      }
    }
    const c = new Conn(origin, this);
    this.conns.add(c);
    Bun.connect<Conn>({
      hostname: origin.hostname,
      port: origin.port,
      data: c,
      ...(origin.tls ? { tls: true } : {}),
      socket: SOCKET_HANDLER,
    }).then(
      (s) => {
        c.socket = s;
        s.setNoDelay(true);
        if (ex.done || c.closed) {
          // Aborted while connecting: the new socket is still good for the next request.
          if (!c.closed) this.release(c);
          return;
        }
        c.start(ex);
      },
      (e: Error) => {
        c.closed = true;
        this.conns.delete(c);
        if (ex.done) return;
        ex.done = true;
        ex.handler.onError(new UpstreamError("connect", `cannot connect: ${errorCode(e)}`), false);
      },
    );
  }

  /** @internal A socket done with its exchange: keep it for the next one, or close it. */
  release(c: Conn): void {
    const idle = c.origin.idle;
    if (this.closing || idle.length >= this.maxIdle) {
      c.destroy();
      return;
    }
    c.idleSince = this.now();
    idle.push(c);
  }

  /** @internal A socket closed: drop it from the pool. */
  forget(c: Conn): void {
    this.conns.delete(c);
    const idle = c.origin.idle;
    const i = idle.lastIndexOf(c);
    if (i >= 0) idle.splice(i, 1);
  }

  /** Closes sockets idle longer than the idle timeout; call now and then (the router's sweep does). */
  sweep(): void {
    const cutoff = this.now() - this.idleMs;
    for (const o of this.origins.values()) {
      // The stack's bottom is the longest idle; it is reused last.
      while (o.idle.length > 0 && o.idle[0]!.idleSince < cutoff) o.idle.shift()!.destroy();
    }
  }

  /** Idle and busy socket counts, for tests and metrics. */
  stats(): { idle: number; open: number } {
    let idle = 0;
    for (const o of this.origins.values()) idle += o.idle.length;
    return { idle, open: this.conns.size };
  }

  /** Closes every socket; exchanges in flight fail with "reset". */
  close(): void {
    this.closing = true;
    for (const c of [...this.conns]) {
      if (c.socket) c.socket.terminate();
    }
  }

  private origin(baseUrl: string): Origin {
    let o = this.origins.get(baseUrl);
    if (o !== undefined) return o;
    const u = new URL(baseUrl);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new UpstreamError("connect", `unsupported endpoint URL ${baseUrl}`);
    const tls = u.protocol === "https:";
    const hostname = u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname;
    const port = u.port ? Number(u.port) : tls ? 443 : 80;
    o = { key: `${u.protocol}//${u.host}`, hostname, port, tls, host: u.host, hostLine: `host: ${u.host}\r\ncontent-type: application/json\r\n`, base: u.pathname.replace(/\/+$/, ""), idle: [] };
    this.origins.set(baseUrl, o);
    return o;
  }
}

const SOCKET_HANDLER = {
  // Plain Uint8Arrays: Buffer's subarray goes through its species constructor, measurably slower.
  binaryType: "uint8array" as const,
  data(s: Socket<Conn>, d: Uint8Array) {
    s.data.onData(d);
  },
  drain(s: Socket<Conn>) {
    s.data.onDrain();
  },
  close(s: Socket<Conn>, err?: Error) {
    s.data.onClose(err);
  },
  end(s: Socket<Conn>) {
    // The engine half-closed: for a close-delimited body this is its end; otherwise the socket is done.
    s.end();
  },
  error(s: Socket<Conn>, err: Error) {
    s.data.onClose(err);
  },
};

/** A socket error as its code (ECONNREFUSED, ENOTFOUND, ...): Bun's messages may name the host. */
function errorCode(e: Error): string {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && /^[A-Z0-9_]{1,40}$/.test(code) ? code : "(no code)";
}


/** Where the last complete line in d[from..] ends (the index of its CR); -1 if there is none. */
function lastLineEnd(d: Uint8Array, from: number): number {
  let i = d.lastIndexOf(10);
  while (i > from && d[i - 1] !== 13) i = d.lastIndexOf(10, i - 1);
  return i > from ? i - 1 : -1;
}
