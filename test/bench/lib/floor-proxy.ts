// A reference proxy for test/bench/proxy.ts: the floor of ANY Bun proxy. Bun.listen in front,
// Bun.connect behind (a pool of keep-alive upstream sockets), and between them only enough
// HTTP/1.1 to find where each message ends: a request's head and Content-Length, a response's
// head and then its Content-Length or its chunked framing. The bytes are relayed as they came,
// both ways (the request's Host and every header pass unchanged; the response is written to the
// client piece by piece as the upstream's reads bring it, never gathered): no routing, no JSON,
// no header objects, no timers, no limits. What llmgw's router does beyond this (validating the
// request, picking a replica, rewriting heads, framing its own answer, deadlines) is what it
// costs over the floor; if this is below nginx, no Bun proxy can reach nginx on this machine.
// Not a product: no chunked requests, no error recovery, no TLS. A measuring stick only.
// --lean adds, on the same sockets, the work a router cannot skip, done by the router's own
// pieces: both heads checked and tokenized as the wire reads them (src/http/wire.ts), the JSON
// body parsed for its model and stream flag, the prefix key hashed, a replica picked by model
// with its in-flight count kept, the engine's request and the client's answer written with heads
// of our own (the body relayed as it came, chunked framing included), output tokens counted
// (src/router/traffic.ts) and the request timed. What the router spends beyond this is the cost
// of its structure (server, client and router objects, the answer re-framed and copied,
// deadlines, metrics), which a redesign of the request path could hope to cut; what --lean itself
// spends over nginx, no redesign of that structure can.
//   [FLOOR_PORT=N] bun test/bench/lib/floor-proxy.ts UPSTREAM_URL [--lean]
// It listens on a free port unless FLOOR_PORT names one (for a profiler run by hand).

import type { Socket } from "bun";
import { HeaderFields, checkHeadText } from "../../../src/http/wire";
import { prefixKey } from "../../../src/router/prefix-key";
import { TokenCount, contentKey } from "../../../src/router/traffic";

const up = new URL(process.argv[2]!);
const LEAN = process.argv.includes("--lean");
const utf8Slice = (Buffer.prototype as unknown as { utf8Slice(this: Uint8Array, a: number, b: number): string }).utf8Slice;
const enc = new TextEncoder();
/** Buffer's native copy on a plain Uint8Array: no view of a fresh socket read is made (a first view costs more than the copy). */
const copyRange = Buffer.prototype.copy as unknown as (this: Uint8Array, target: Uint8Array, targetStart: number, sourceStart: number, sourceEnd: number) => number;
/** --lean: a replica as a balancer holds it, with what its answers added up to. */
interface Replica {
  inflight: number;
  served: number;
  tokens: number;
  seconds: number;
}
/** --lean: one request on its way: where it went, what it asked, when it started, its tokens. */
interface LeanRequest {
  replica: Replica;
  path: string;
  t0: number;
  tokens: TokenCount;
}
/** --lean: the one model's replica. */
const replicas = new Map<string, Replica>([["m", { inflight: 0, served: 0, tokens: 0, seconds: 0 }]]);
let dateText = `date: ${new Date().toUTCString()}\r\n`;
if (LEAN) setInterval(() => (dateText = `date: ${new Date().toUTCString()}\r\n`), 1000).unref();
const HOST = up.hostname;
const PORT = Number(up.port);
const EMPTY = new Uint8Array(0);
const latin1Slice = (Buffer.prototype as unknown as { latin1Slice(this: Uint8Array, a: number, b: number): string }).latin1Slice;
const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i;
const CHUNKED = /\r\ntransfer-encoding:[^\r]*chunked/i;

function headEnd(d: Uint8Array, from: number): number {
  let i = d.indexOf(13, from);
  while (i >= 0 && i + 3 < d.length) {
    if (d[i + 1] === 10 && d[i + 2] === 13 && d[i + 3] === 10) return i;
    i = d.indexOf(13, i + 1);
  }
  return -1;
}

function join(a: Uint8Array, b: Uint8Array): Uint8Array {
  const o = new Uint8Array(a.length + b.length);
  o.set(a);
  o.set(b, a.length);
  return o;
}

/** Writes now, or queues what the socket did not take until it drains. */
class Out {
  pending: Uint8Array[] | undefined;
  constructor(readonly socket: Socket<unknown>) {}
  write(d: Uint8Array): void {
    if (this.pending !== undefined) {
      this.pending.push(d.slice());
      return;
    }
    const n = this.socket.write(d);
    if (n < d.length && n >= 0) this.pending = [d.slice(n)];
  }
  drain(): void {
    const p = this.pending;
    if (p === undefined) return;
    this.pending = undefined;
    for (let i = 0; i < p.length; i++) {
      const n = this.socket.write(p[i]!);
      if (n < p[i]!.length) {
        this.pending = [p[i]!.subarray(Math.max(0, n)), ...p.slice(i + 1)];
        return;
      }
    }
  }
}

// Response framing states.
const R_HEAD = 0;
const R_LENGTH = 1;
const R_SIZE = 2; // a chunk-size line
const R_DATA = 3; // chunk data
const R_DATA_CRLF = 4; // the CRLF after chunk data
const R_TRAILER = 5; // after the last chunk: trailer lines until an empty one

class Upstream {
  socket!: Socket<Upstream>;
  out!: Out;
  client: Client | undefined;
  private state = R_HEAD;
  private head: Uint8Array = EMPTY;
  /** The read a head was found in, joined to the head's earlier reads (seekHead). */
  private joined: Uint8Array = EMPTY;
  private remaining = 0;
  /** The chunk-size or trailer line being read, when a read ends inside it. */
  private line = "";

  /** --lean: the request being answered. */
  lean: LeanRequest | undefined;
  private fields = LEAN ? new HeaderFields("response", 100) : undefined;

  start(c: Client, req: Uint8Array): void {
    this.client = c;
    this.state = R_HEAD;
    this.out.write(req);
  }

  onData(d: Uint8Array): void {
    const c = this.client;
    if (c === undefined) return;
    if (LEAN) return this.leanData(c, d);
    c.out.write(d);
    this.frame(d, 0);
  }

  /**
   * --lean: the engine's head read as the router's client reads it and replaced by one of our
   * own (status, date, content type, framing), written with the rest of the read; the body then
   * relayed as it comes, its tokens counted.
   */
  private leanData(c: Client, d: Uint8Array): void {
    if (this.state === R_HEAD) {
      const i = this.seekHead(d);
      if (i < 0) return;
      const all = this.joined;
      const text = latin1Slice.call(all, 0, i);
      checkHeadText(text, "response");
      const eol = text.indexOf("\r\n");
      const status = Number(text.slice(9, 12));
      const f = this.fields!;
      f.reset();
      if (eol > 0) f.lines(text, eol + 2);
      const framing = f.bodyFraming();
      let type = "application/json";
      for (let k = 0; k < f.names.length; k++) if (f.names[k] === "content-type") type = f.values[k]!;
      const t = this.lean!.tokens;
      if (type.includes("text/event-stream")) t.key = contentKey(this.lean!.path);
      const head = `HTTP/1.1 ${status} ${status === 200 ? "OK" : "X"}\r\n${dateText}content-type: ${type}\r\n${framing === "chunked" ? "transfer-encoding: chunked" : `content-length: ${framing}`}\r\n\r\n`;
      const rest = all.length - (i + 4);
      const out = new Uint8Array(head.length + rest);
      enc.encodeInto(head, out);
      copyRange.call(all, out, head.length, i + 4, all.length);
      c.out.write(out);
      t.feed(all, i + 4, all.length);
      this.state = framing === "chunked" ? R_SIZE : R_LENGTH;
      this.remaining = framing === "chunked" ? 0 : framing;
      this.frame(all, i + 4);
      return;
    }
    c.out.write(d);
    this.lean!.tokens.feed(d, 0, d.length);
    this.frame(d, 0);
  }

  /**
   * The read joined to a head begun in earlier reads (left in `joined`), and where that head ends
   * in it; -1 while it has not (the bytes are kept for the next read).
   */
  private seekHead(d: Uint8Array): number {
    const prior = this.head.length;
    const all = prior ? join(this.head, d) : d;
    const i = headEnd(all, Math.max(0, prior - 3));
    if (i < 0) {
      this.head = all.slice();
      return -1;
    }
    this.joined = all;
    this.head = EMPTY;
    return i;
  }

  /** Follows the body's framing over d[p..] and finishes the exchange at its end. */
  private frame(d: Uint8Array, p: number): void {
    if (this.state === R_HEAD) {
      const i = this.seekHead(d);
      if (i < 0) return;
      const all = this.joined;
      const text = latin1Slice.call(all, 0, i + 2);
      // Where the body starts in d: the joined bytes hold the earlier reads' head before it.
      p = i + 4 - (all.length - d.length);
      if (CHUNKED.test(text)) this.state = R_SIZE;
      else {
        const m = CONTENT_LENGTH.exec(text);
        this.remaining = m ? Number(m[1]) : 0;
        this.state = R_LENGTH;
      }
    }
    if (this.state === R_LENGTH) {
      this.remaining -= d.length - p;
      if (this.remaining <= 0) this.finish();
      return;
    }
    while (p < d.length) {
      const st = this.state;
      if (st === R_DATA) {
        const n = Math.min(this.remaining, d.length - p);
        p += n;
        this.remaining -= n;
        if (this.remaining === 0) {
          this.state = R_DATA_CRLF;
          this.remaining = 2;
        }
      } else if (st === R_DATA_CRLF) {
        const n = Math.min(this.remaining, d.length - p);
        p += n;
        this.remaining -= n;
        if (this.remaining === 0) this.state = R_SIZE;
      } else {
        // A line: a chunk size, or a trailer line (the empty one ends the message).
        const nl = d.indexOf(10, p);
        if (nl < 0) {
          this.line += latin1Slice.call(d, p, d.length);
          return;
        }
        const line = this.line + latin1Slice.call(d, p, nl);
        this.line = "";
        p = nl + 1;
        if (st === R_SIZE) {
          const size = parseInt(line, 16);
          if (size === 0) this.state = R_TRAILER;
          else {
            this.state = R_DATA;
            this.remaining = size;
          }
        } else if (line === "\r" || line === "") {
          this.finish();
          return;
        }
      }
    }
  }

  private finish(): void {
    const c = this.client!;
    this.client = undefined;
    const l = this.lean;
    if (l !== undefined) {
      this.lean = undefined;
      const r = l.replica;
      r.inflight--;
      r.served++;
      r.tokens += l.tokens.total();
      r.seconds += (performance.now() - l.t0) / 1000;
    }
    idle.push(this);
    c.answered();
  }

  onClose(): void {
    const i = idle.indexOf(this);
    if (i >= 0) idle.splice(i, 1);
    const c = this.client;
    this.client = undefined;
    c?.socket.terminate();
  }
}

const idle: Upstream[] = [];

function connect(): Promise<Upstream> {
  const u = new Upstream();
  return Bun.connect<Upstream>({
    hostname: HOST,
    port: PORT,
    data: u,
    socket: {
      binaryType: "uint8array",
      data: (s, d) => s.data.onData(d),
      drain: (s) => s.data.out.drain(),
      close: (s) => s.data.onClose(),
      error: (s) => s.data.onClose(),
    },
  }).then((s) => {
    s.setNoDelay(true);
    u.socket = s;
    u.out = new Out(s as Socket<unknown>);
    return u;
  });
}

class Client {
  out: Out;
  private buf: Uint8Array = EMPTY;
  private busy = false;
  constructor(readonly socket: Socket<Client>) {
    this.out = new Out(socket as Socket<unknown>);
  }

  onData(d: Uint8Array): void {
    this.buf = this.buf.length ? join(this.buf, d) : d;
    if (!this.busy) this.next();
  }

  /** Relays the next whole request, if one is here. */
  private next(): void {
    if (LEAN) return this.leanNext();
    const b = this.buf;
    const i = headEnd(b, 0);
    if (i < 0) return;
    const m = CONTENT_LENGTH.exec(latin1Slice.call(b, 0, i + 2));
    const total = i + 4 + (m ? Number(m[1]) : 0);
    if (b.length < total) return;
    const req = total === b.length ? b : b.subarray(0, total);
    this.buf = total === b.length ? EMPTY : b.subarray(total);
    this.relay(req, undefined);
  }

  /** Sends req on an idle upstream socket, or a new one; `lean` is the request's record in --lean. */
  private relay(req: Uint8Array, lean: LeanRequest | undefined): void {
    this.busy = true;
    const u = idle.pop();
    if (u !== undefined) {
      u.lean = lean;
      u.start(this, req);
    } else
      connect().then(
        (n) => {
          n.lean = lean;
          n.start(this, req);
        },
        () => this.socket.terminate(),
      );
  }

  private fields = LEAN ? new HeaderFields("request", 100) : undefined;

  /**
   * --lean: the head checked and tokenized as the router's server does, the body parsed for its
   * model and stream flag, the prefix key hashed, the replica picked by model, and the request
   * written to the engine with a head of our own and the body as it came, in one buffer.
   */
  private leanNext(): void {
    const b = this.buf;
    const i = headEnd(b, 0);
    if (i < 0) return;
    const t0 = performance.now();
    const text = latin1Slice.call(b, 0, i);
    checkHeadText(text, "request");
    const eol = text.indexOf("\r\n");
    const sp1 = text.indexOf(" ");
    const sp2 = text.indexOf(" ", sp1 + 1);
    const method = text.slice(0, sp1);
    const path = text.slice(sp1 + 1, sp2);
    const f = this.fields!;
    f.reset();
    f.lines(text, eol + 2);
    const length = f.bodyFraming();
    const n = length === "chunked" ? 0 : Math.max(0, length);
    const total = i + 4 + n;
    if (b.length < total) return;
    this.buf = total === b.length ? EMPTY : b.subarray(total);
    const body = JSON.parse(utf8Slice.call(b, i + 4, total)) as { model?: unknown; stream?: unknown };
    const replica = typeof body.model === "string" ? replicas.get(body.model) : undefined;
    if (method !== "POST" || replica === undefined) {
      this.socket.terminate();
      return;
    }
    replica.inflight++;
    prefixKey(body);
    let pass = "";
    for (let k = 0; k < f.names.length; k++) if (f.names[k] === "user-agent" || f.names[k] === "x-request-id") pass += `${f.names[k]}: ${f.values[k]}\r\n`;
    const head = `POST ${path} HTTP/1.1\r\nhost: ${HOST}:${PORT}\r\ncontent-type: application/json\r\ncontent-length: ${n}\r\n${pass}\r\n`;
    const req = new Uint8Array(head.length + n);
    enc.encodeInto(head, req);
    copyRange.call(b, req, head.length, i + 4, total);
    this.relay(req, { replica, path, t0, tokens: new TokenCount() });
  }

  answered(): void {
    this.busy = false;
    if (this.buf.length) this.next();
  }
}

const server = Bun.listen<Client>({
  hostname: "127.0.0.1",
  port: Number(process.env.FLOOR_PORT ?? 0),
  socket: {
    binaryType: "uint8array",
    open(s) {
      s.setNoDelay(true);
      s.data = new Client(s);
    },
    data: (s, d) => s.data.onData(d),
    drain: (s) => s.data.out.drain(),
    close() {},
    error() {},
  },
});
console.log(`floor proxy${LEAN ? " (lean)" : ""} listening on http://127.0.0.1:${server.port}`);
const stop = () => {
  server.stop(true);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
