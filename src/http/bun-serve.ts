// The same server interface (Http1Server, ClientExchange) on Bun.serve instead of the wire
// module's own server: a reference, switched on with LLMGW_HTTP_SERVER=bun (or the `backend`
// option), so test/bench/proxy.ts can keep measuring what the own server on Bun.listen is worth.
// Bun.serve builds a Request and a Response per request; the handler's pre-rendered headers
// are parsed back into a Headers object. Not for production: no connection caps, no per-body
// deadlines (Bun's idle timeout only), Bun's own parser and limits instead of wire.ts's.

import type { Server } from "bun";
import { ClientExchange, type ExchangeConn, isBlock, RequestHeaders } from "./exchange";
import { type HeaderBlock, Pieces } from "./wire";

/** What of the server's options (server.ts's Http1Options) Bun.serve can honour. */
export interface BunServeOptions {
  hostname: string;
  port: number;
  tls?: { cert: string | Bun.BunFile; key: string | Bun.BunFile };
  maxBodyBytes: number;
  idleTimeoutMs?: number;
  errorBody: (status: number, message: string, code: string) => string;
  handler: (ex: ClientExchange) => void;
  onHandlerError?: (err: unknown) => void;
}

/** Bun.serve's exchanges answer through a Response, not a connection of the server's: nothing is written to this one. */
const NO_CONN: ExchangeConn = {
  keepAlive: true,
  address: "",
  socket: { remotePort: 0, remoteFamily: "IPv4" },
  write: () => false,
  writeString: () => false,
  done() {},
  kill() {},
  authenticate() {},
};

/** Pieces as one array of their own: the Response may read it after the call. */
function own<T extends string | Uint8Array | undefined>(b: T | Pieces): T | Uint8Array {
  return b instanceof Pieces ? b.bytes() : b;
}

const EMPTY = new Uint8Array(0);

function toHeaders(h: Record<string, string> | HeaderBlock): Headers {
  if (!isBlock(h)) return new Headers(h);
  const out = new Headers();
  for (const line of h.text.split("\r\n")) {
    const colon = line.indexOf(":");
    if (colon > 0) out.append(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return out;
}

/** An exchange answered through a Response. */
class BunExchange extends ClientExchange {
  private ctrl: ReadableStreamDefaultController<Uint8Array> | undefined;

  constructor(
    private readonly resolve: (r: Response) => void,
    private readonly address: { address: string; port: number; family: string } | null,
    method: string,
    target: string,
    path: string,
    headers: RequestHeaders,
    body: Uint8Array,
  ) {
    super(NO_CONN, method, target, path, headers, body, false);
  }

  override get remoteAddress(): string {
    return this.address?.address ?? "";
  }
  override get remotePort(): number {
    return this.address?.port ?? 0;
  }
  override get remoteFamily(): "IPv4" | "IPv6" {
    return this.address?.family === "IPv6" ? "IPv6" : "IPv4";
  }

  override respond(status: number, headers: Record<string, string> | HeaderBlock, bodyBytes: string | Uint8Array | Pieces): void {
    if (this.state !== 0 || this.aborted) return;
    this.state = 2;
    if (this.holder !== undefined) this.over();
    const bodiless = status === 204 || status === 304;
    const body = own(bodyBytes);
    this.resolve(new Response(bodiless ? null : body, { status, headers: toHeaders(headers) }));
  }

  override stream(status: number, headers: Record<string, string> | HeaderBlock, firstBytes?: Uint8Array | Pieces): boolean {
    if (this.state !== 0 || this.aborted) return false;
    this.state = 1;
    const first = own(firstBytes);
    const stream = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.ctrl = c;
        if (first !== undefined && first.byteLength > 0) c.enqueue(first);
      },
      pull: () => this.onDrain?.(),
      cancel: () => this.abort(),
    });
    this.resolve(new Response(stream, { status, headers: toHeaders(headers) }));
    return true;
  }

  override write(chunkBytes: Uint8Array | Pieces): boolean {
    const chunk = own(chunkBytes);
    if (this.state !== 1 || this.aborted || chunk.byteLength === 0) return !this.aborted;
    this.ctrl!.enqueue(chunk);
    return (this.ctrl!.desiredSize ?? 1) > 0;
  }

  override end(lastBytes?: Uint8Array | Pieces): void {
    const last = own(lastBytes);
    if (this.state !== 1) return;
    this.state = 2;
    if (this.holder !== undefined) this.over();
    if (this.aborted) return;
    if (last !== undefined && last.byteLength > 0) this.ctrl!.enqueue(last);
    this.ctrl!.close();
  }

  override destroy(): void {
    if (this.state === 2) return;
    const streaming = this.state === 1;
    this.state = 2;
    if (this.holder !== undefined) this.over();
    if (streaming) this.ctrl!.error(new Error("answer cut"));
    else this.resolve(Response.error());
  }
}

/** Serves `o.handler` on Bun.serve; returns the server. */
export function listenOnBunServe(o: BunServeOptions): Server<undefined> {
  return Bun.serve({
    hostname: o.hostname,
    port: o.port,
    ...(o.tls ? { tls: o.tls } : {}),
    maxRequestBodySize: o.maxBodyBytes,
    idleTimeout: Math.min(255, Math.ceil((o.idleTimeoutMs ?? 10_000) / 1000)),
    async fetch(req, srv) {
      const url = req.url;
      const start = url.indexOf("/", url.indexOf("//") + 2);
      const target = start < 0 ? "/" : url.slice(start);
      const q = target.indexOf("?");
      const names: string[] = [];
      const values: string[] = [];
      req.headers.forEach((v, k) => {
        names.push(k);
        values.push(v);
      });
      const body = req.body === null ? EMPTY : new Uint8Array(await req.arrayBuffer());
      const address = srv.requestIP(req);
      return new Promise<Response>((resolve) => {
        const ex = new BunExchange(resolve, address, req.method, target, q < 0 ? target : target.slice(0, q), new RequestHeaders(names, values), body);
        req.signal.addEventListener("abort", () => ex.abort());
        try {
          o.handler(ex);
        } catch (e) {
          o.onHandlerError?.(e);
          if (!ex.answered) ex.respond(500, { "content-type": "application/json" }, o.errorBody(500, "internal error in the router; see the server log", "internal_error"));
          else ex.destroy();
        }
      });
    },
  });
}
