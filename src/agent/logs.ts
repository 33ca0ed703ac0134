// The agent's engine-log listener: the head node fetches a replica's log from here for
// `llmgw logs`, optionally following it as the engine writes. Bearer-protected with a token
// derived from this node's credential (compared in constant time), over TLS when the head
// node's agent API is; serves only files of replicas this agent runs or ran.

import { bearerToken, sameSecret } from "../lib/digest";
import { closeSync, existsSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { realScheduler, type Scheduler } from "../lib/scheduler";
import type { AgentLogger } from "./log";

/** Whether an Authorization header carries `token`: constant time over digests, so neither content nor length leaks. */
export function bearerMatches(header: string | null, token: string | undefined): boolean {
  const presented = bearerToken(header);
  // Compared even when absent, so a missing header costs what a wrong one does.
  const ok = sameSecret(presented ?? "", token ?? "");
  return ok && presented !== undefined && token !== undefined && token !== "";
}

export interface LogServerOptions {
  host: string;
  port: number;
  /** The token the head node presents; undefined until the node has its credential (then all is refused). */
  token: string | (() => string | undefined);
  /** Serve HTTPS with this certificate and key (PEM). */
  tls?: { cert: string; key: string };
  /** The log file of a replica id, or undefined when this agent has none. */
  fileFor: (id: string) => string | undefined;
  /**
   * The log of a replica's past run (?previous=1): the run before the one going on now, or the
   * last run of a replica whose engine is not running; undefined when there is none.
   */
  previousFor?: (id: string) => string | undefined;
  /** This node's name, for the answer when there is no such log. */
  node?: string;
  pollMs?: number;
  log?: AgentLogger;
  /** Paces a followed log's polling; realScheduler unless a test drives time. */
  scheduler?: Scheduler;
  /** Requests below `prefix` go to `handle` (weights served to peers: weights-serve.ts), with their own authorisation. */
  also?: { prefix: string; handle(req: Request): Response | Promise<Response> };
}

/** The last `n` lines of a file (reading at most the last few MB). */
export function tailLines(path: string, n: number): { text: string; end: number } {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    if (n === 0) return { text: "", end: size };
    const want = Math.min(size, 4 * 1024 * 1024);
    const buf = Buffer.alloc(want);
    readSync(fd, buf, 0, want, size - want);
    const lines = buf.toString("utf8").split("\n");
    if (lines.at(-1) === "") lines.pop();
    return { text: lines.slice(-n).map((l) => `${l}\n`).join(""), end: size };
  } finally {
    closeSync(fd);
  }
}

function readFrom(path: string, from: number): { chunk: Uint8Array; end: number } {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    if (size <= from) return { chunk: new Uint8Array(0), end: size < from ? 0 : from };
    const buf = Buffer.alloc(Math.min(size - from, 1024 * 1024));
    const got = readSync(fd, buf, 0, buf.length, from);
    return { chunk: buf.subarray(0, got), end: from + got };
  } finally {
    closeSync(fd);
  }
}

export function startLogServer(o: LogServerOptions): { port: number; stop(): void } {
  const pollMs = o.pollMs ?? 250;
  const scheduler = o.scheduler ?? realScheduler;
  const server = Bun.serve({
    hostname: o.host,
    port: o.port,
    ...(o.tls ? { tls: o.tls } : {}),
    fetch(req, srv) {
      const url = new URL(req.url);
      if (o.also && url.pathname.startsWith(o.also.prefix)) return o.also.handle(req);
      const m = /^\/logs\/([^/]+)$/.exec(url.pathname);
      if (req.method !== "GET" || !m) return new Response("not found\n", { status: 404 });
      const token = typeof o.token === "function" ? o.token() : o.token;
      if (!bearerMatches(req.headers.get("authorization"), token)) return new Response("unauthorized\n", { status: 401 });
      const id = decodeURIComponent(m[1]!);
      const previous = url.searchParams.get("previous") === "1";
      if (previous && url.searchParams.get("follow") === "1") return new Response("previous: a past run's log is complete; it cannot be followed\n", { status: 400 });
      const where = o.node ? `on ${o.node}` : "on this node";
      const path = previous ? o.previousFor?.(id) : o.fileFor(id);
      if (!path || !existsSync(path)) return new Response(previous ? `replica ${id} has no previous run ${where}\n` : `no log for replica ${id} ${where}\n`, { status: 404 });
      const tail = Math.max(0, Math.min(100_000, Number(url.searchParams.get("tail") ?? 200) || 0));
      const first = tailLines(path, tail);
      if (url.searchParams.get("follow") !== "1") return new Response(first.text, { headers: { "content-type": "text/plain; charset=utf-8" } });
      srv.timeout(req, 0);
      let pos = first.end;
      let sentFirst = false;
      const enc = new TextEncoder();
      return new Response(
        new ReadableStream<Uint8Array>({
          async pull(c) {
            if (!sentFirst) {
              sentFirst = true;
              if (first.text) return c.enqueue(enc.encode(first.text));
            }
            // Poll for growth: the engine writes the file, not us. A replaced (truncated)
            // file is read again from its start.
            for (;;) {
              if (req.signal.aborted) return c.close();
              if (!existsSync(path)) return c.close();
              if (statSync(path).size !== pos) {
                const { chunk, end } = readFrom(path, pos);
                pos = end;
                if (chunk.length > 0) return c.enqueue(chunk);
              }
              await new Promise<void>((r) => scheduler.after(pollMs, r));
            }
          },
        }),
        { headers: { "content-type": "text/plain; charset=utf-8", "cache-control": "no-cache" } },
      );
    },
  });
  return { port: server.port!, stop: () => void server.stop(true) };
}
