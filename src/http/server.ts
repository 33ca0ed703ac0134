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
//
// This file: the listener, its caps and its sweep of deadlines; each connection's parser is
// connection.ts's, each request and its answer exchange.ts's.

import type { Socket, TCPSocketListener } from "bun";
import { realScheduler, type Scheduler, type Timer } from "../lib/scheduler";
import { listenOnBunServe } from "./bun-serve";
import { Conn, type ConnHost } from "./connection";
import { type ClientExchange, date, refreshDate, statusLine } from "./exchange";
import { byteLength, WIRE_LIMITS } from "./wire";

export { type HeaderBlock, headerBlock, Pieces } from "./wire";
export { ClientExchange, RequestHeaders } from "./exchange";
export { Conn } from "./connection";

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

export class Http1Server implements ConnHost {
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

  /** Set by drain(): no connection is kept open past its answer. */
  draining = false;

  /**
   * A graceful stop: no new connections (the port is free at once, for a new process), every
   * connection closed as soon as nothing is under way on it, and the requests in flight answered
   * until they end or `timeoutMs` passes; then stop() cuts what is left. Resolves with how many
   * connections were cut.
   */
  async drain(timeoutMs: number, everyMs = 50): Promise<number> {
    this.draining = true;
    this.bunServer?.stop(false);
    this.listener?.stop(false);
    for (const c of this.conns) c.keepAlive = false;
    const end = this.scheduler.mono() + timeoutMs;
    for (;;) {
      for (const c of [...this.conns]) if (c.quiet) c.close();
      // Closed by the server with every byte handed over: nothing is left to wait for on those.
      if ([...this.conns].every((c) => c.closed) || this.scheduler.mono() >= end) break;
      await new Promise<void>((resolve) => this.scheduler.after(Math.min(everyMs, Math.max(1, end - this.scheduler.mono())), resolve));
    }
    const cut = this.conns.size;
    this.stop();
    return cut;
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
