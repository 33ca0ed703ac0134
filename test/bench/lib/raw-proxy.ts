// A reference proxy for test/bench/proxy.ts and ttfb.ts: Bun.serve in front, and instead of
// fetch a minimal HTTP/1.1 client of its own over Bun.connect (a pool of keep-alive sockets,
// Content-Length and chunked responses, no redirects, no TLS, no error recovery). It answers
// one question: how much of the gap between a Bun proxy and nginx is Bun's fetch (which runs on
// its own HTTP thread and builds Response/Headers objects) rather than Bun.serve or JS itself.
// Not a product: a prototype, kept only as a measuring stick.
//   bun test/bench/lib/raw-proxy.ts UPSTREAM_URL

import type { Socket } from "bun";

const up = new URL(process.argv[2]!);
const HOST = up.hostname;
const PORT = Number(up.port);
const enc = new TextEncoder();
const dec = new TextDecoder();
const CRLFCRLF = 0x0d0a0d0a;

interface Exchange {
  resolve(r: Response): void;
  reject(e: Error): void;
}

class Conn {
  socket!: Socket<undefined>;
  private ex: Exchange | undefined;
  private buf: Uint8Array = new Uint8Array(0);
  private inBody = false;
  private status = 0;
  private ctype = "application/json";
  private chunked = false;
  private remaining = 0; // Content-Length bytes left, or bytes left in the current chunk
  private parts: Uint8Array[] = [];
  private ctrl: ReadableStreamDefaultController<Uint8Array> | undefined;
  private chunkState: "size" | "data" | "crlf" | "trailer" = "size";

  constructor(private readonly pool: Conn[]) {}

  send(head: Uint8Array, body: Uint8Array, ex: Exchange): void {
    this.ex = ex;
    this.inBody = false;
    this.buf = new Uint8Array(0);
    const msg = new Uint8Array(head.length + body.length);
    msg.set(head);
    msg.set(body, head.length);
    const n = this.socket.write(msg);
    if (n !== msg.length) ex.reject(new Error("short write (prototype does not queue)"));
  }

  onData(d: Uint8Array): void {
    let data = this.buf.length ? concat(this.buf, d) : d;
    this.buf = new Uint8Array(0);
    if (!this.inBody) {
      const i = findHeadEnd(data);
      if (i < 0) {
        this.buf = data;
        return;
      }
      const head = dec.decode(data.subarray(0, i));
      this.status = Number(head.slice(9, 12));
      const lower = head.toLowerCase();
      const ct = /\r\ncontent-type:\s*([^\r]*)/.exec(lower);
      this.ctype = ct ? ct[1]! : "application/json";
      this.chunked = lower.includes("\r\ntransfer-encoding: chunked");
      const cl = /\r\ncontent-length:\s*(\d+)/.exec(lower);
      this.remaining = this.chunked ? 0 : cl ? Number(cl[1]) : 0;
      this.inBody = true;
      this.parts = [];
      this.chunkState = "size";
      data = data.subarray(i + 4);
      if (this.chunked) {
        const ex = this.ex!;
        const body = new ReadableStream<Uint8Array>({ start: (c) => void (this.ctrl = c) });
        ex.resolve(new Response(body, { status: this.status, headers: { "content-type": this.ctype } }));
      }
    }
    if (!this.chunked) {
      this.parts.push(data);
      this.remaining -= data.length;
      if (this.remaining <= 0) {
        const body = this.parts.length === 1 ? this.parts[0]! : concatAll(this.parts);
        const ex = this.ex!;
        this.done();
        ex.resolve(new Response(body, { status: this.status, headers: { "content-type": this.ctype } }));
      }
      return;
    }
    this.chunks(data);
  }

  /** Chunked transfer decoding; hands each chunk's data to the client stream as it comes. */
  private chunks(data: Uint8Array): void {
    let p = 0;
    while (p < data.length) {
      if (this.chunkState === "size") {
        const nl = data.indexOf(0x0a, p);
        if (nl < 0) {
          this.buf = data.slice(p);
          return;
        }
        this.remaining = parseInt(dec.decode(data.subarray(p, nl)), 16);
        p = nl + 1;
        this.chunkState = this.remaining === 0 ? "trailer" : "data";
      } else if (this.chunkState === "data") {
        const n = Math.min(this.remaining, data.length - p);
        this.ctrl!.enqueue(data.slice(p, p + n));
        this.remaining -= n;
        p += n;
        if (this.remaining === 0) this.chunkState = "crlf";
      } else if (this.chunkState === "crlf") {
        if (data.length - p < 2) {
          this.buf = data.slice(p);
          return;
        }
        p += 2;
        this.chunkState = "size";
      } else {
        // "0\r\n" seen: the final CRLF (no trailers from our engines) ends the response.
        if (data.length - p < 2) {
          this.buf = data.slice(p);
          return;
        }
        const c = this.ctrl!;
        this.done();
        c.close();
        return;
      }
    }
  }

  private done(): void {
    this.ex = undefined;
    this.ctrl = undefined;
    this.pool.push(this);
  }

  onClose(): void {
    const i = this.pool.indexOf(this);
    if (i >= 0) this.pool.splice(i, 1);
    this.ex?.reject(new Error("upstream closed"));
    try {
      this.ctrl?.error(new Error("upstream closed"));
    } catch {}
  }
}

function findHeadEnd(d: Uint8Array): number {
  for (let i = 0; i + 3 < d.length; i++) if (((d[i]! << 24) | (d[i + 1]! << 16) | (d[i + 2]! << 8) | d[i + 3]!) === CRLFCRLF) return i;
  return -1;
}
function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const o = new Uint8Array(a.length + b.length);
  o.set(a);
  o.set(b, a.length);
  return o;
}
function concatAll(parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const o = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    o.set(p, at);
    at += p.length;
  }
  return o;
}

const idle: Conn[] = [];
async function conn(): Promise<Conn> {
  const c = idle.pop();
  if (c) return c;
  const n = new Conn(idle);
  n.socket = await Bun.connect({
    hostname: HOST,
    port: PORT,
    socket: { data: (_s, d) => n.onData(d), close: () => n.onClose(), error: () => n.onClose() },
  });
  n.socket.setNoDelay(true);
  return n;
}

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(req, srv) {
    srv.timeout(req, 0);
    const u = req.url;
    const path = u.slice(u.indexOf("/", u.indexOf("//") + 2));
    const body = new Uint8Array(await req.arrayBuffer());
    const head = enc.encode(`${req.method} ${path} HTTP/1.1\r\nHost: ${up.host}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    const c = await conn();
    return new Promise<Response>((resolve, reject) => c.send(head, body, { resolve, reject }));
  },
});
console.log(`raw proxy listening on http://127.0.0.1:${server.port}`);
const stop = () => {
  server.stop(true);
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
