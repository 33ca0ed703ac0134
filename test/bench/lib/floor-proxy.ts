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
//   bun test/bench/lib/floor-proxy.ts UPSTREAM_URL

import type { Socket } from "bun";

const up = new URL(process.argv[2]!);
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
  private remaining = 0;
  /** The chunk-size or trailer line being read, when a read ends inside it. */
  private line = "";

  start(c: Client, req: Uint8Array): void {
    this.client = c;
    this.state = R_HEAD;
    this.out.write(req);
  }

  onData(d: Uint8Array): void {
    const c = this.client;
    if (c === undefined) return;
    c.out.write(d);
    let p = 0;
    if (this.state === R_HEAD) {
      const all = this.head.length ? join(this.head, d) : d;
      const i = headEnd(all, Math.max(0, this.head.length - 3));
      if (i < 0) {
        this.head = all.slice();
        return;
      }
      const text = latin1Slice.call(all, 0, i + 2);
      p = i + 4 - this.head.length;
      this.head = EMPTY;
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
    const b = this.buf;
    const i = headEnd(b, 0);
    if (i < 0) return;
    const m = CONTENT_LENGTH.exec(latin1Slice.call(b, 0, i + 2));
    const total = i + 4 + (m ? Number(m[1]) : 0);
    if (b.length < total) return;
    const req = total === b.length ? b : b.subarray(0, total);
    this.buf = total === b.length ? EMPTY : b.subarray(total);
    this.busy = true;
    const u = idle.pop();
    if (u !== undefined) u.start(this, req);
    else
      connect().then(
        (n) => n.start(this, req),
        () => this.socket.terminate(),
      );
  }

  answered(): void {
    this.busy = false;
    if (this.buf.length) this.next();
  }
}

const server = Bun.listen<Client>({
  hostname: "127.0.0.1",
  port: 0,
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
console.log(`floor proxy listening on http://127.0.0.1:${server.port}`);
const stop = () => {
  server.stop(true);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
