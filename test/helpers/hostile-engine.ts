// An engine whose /metrics is an attack on the router's poller, for tests and test/bench: a
// huge exposition (hundreds of thousands of series that all read as "no load"), or a gzip
// bomb. Bodies are made as they are read (pull by pull), so one that the poller cuts short is
// never made whole, and /stats says how far each got. /v1/* is not served: the replica's model
// is never asked for, only polled. Runs in-process (startHostileEngine) or as its own process:
//   bun test/helpers/hostile-engine.ts --mode series|bomb|gzip-always [--series N] [--bomb-mb N]
// which prints its URL, as the fake engine does.

import { createGzip } from "node:zlib";

/**
 * series: N lines `vllm:num_requests_running{engine="i"} 0`, as plain text.
 * bomb: a gzip bomb to a client that accepts gzip (the content: bombMb MiB of BOMB_LINE, each
 *   reading "no load"); the same content as plain text to one that asks for identity.
 * gzip-always: the gzip bomb whatever the client accepts.
 */
export type HostileMode = "series" | "bomb" | "gzip-always";

export interface HostileOptions {
  mode: HostileMode;
  /** Series in the "series" mode (default 300,000). */
  series?: number;
  /** Decompressed size of the bomb, MiB (default 512). */
  bombMb?: number;
  port?: number;
}

export interface HostileStats {
  requests: number;
  /** Accept-Encoding of each /metrics request, in order ("" when absent). */
  acceptEncodings: string[];
  /** Body bytes handed to the socket, over every request (the compressed ones for gzip). */
  bytesSent: number;
  /** Bodies sent to their end. */
  finished: number;
  /** Bodies the client stopped reading before their end. */
  cancelled: number;
  /** One body's full size, as it would go out: plain, and gzip (0 when the mode has none). */
  fullPlainBytes: number;
  fullGzipBytes: number;
}

export interface HostileEngine {
  url: string;
  stats(): HostileStats;
  stop(): void;
}

const CHUNK = 64 * 1024;
const enc = new TextEncoder();
/** Long enough that the bomb's plain text reaches the poller's byte cap before its line cap. */
const BOMB_LINE = `vllm:num_requests_running{model_name="bomb",padding="${"x".repeat(120)}"} 0\n`;

/** The series text, line `from` on, about CHUNK bytes of it; returns the next line too. */
function seriesChunk(from: number, total: number): { text: string; next: number } {
  let text = from === 0 ? "# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n" : "";
  let i = from;
  while (i < total && text.length < CHUNK) text += `vllm:num_requests_running{engine="${i++}",model_name="hostile"} 0\n`;
  return { text, next: i };
}

/** The bomb, gzip-compressed: `mb` MiB of BOMB_LINE, fed through zlib a MiB at a time. */
async function gzipBomb(mb: number): Promise<Uint8Array> {
  const block = Buffer.from(BOMB_LINE.repeat(Math.ceil((1024 * 1024) / BOMB_LINE.length)).slice(0, 1024 * 1024));
  const gz = createGzip({ level: 9 });
  const parts: Buffer[] = [];
  gz.on("data", (d: Buffer) => parts.push(d));
  const done = new Promise<void>((resolve, reject) => {
    gz.on("end", resolve);
    gz.on("error", reject);
  });
  for (let i = 0; i < mb; i++) if (!gz.write(block)) await new Promise<void>((r) => gz.once("drain", r));
  gz.end();
  await done;
  return new Uint8Array(Buffer.concat(parts));
}

export async function startHostileEngine(o: HostileOptions): Promise<HostileEngine> {
  const series = o.series ?? 300_000;
  const bombBytes = (o.bombMb ?? 512) * 1024 * 1024;
  const bomb = o.mode === "series" ? new Uint8Array(0) : await gzipBomb(o.bombMb ?? 512);
  const stats: HostileStats = { requests: 0, acceptEncodings: [], bytesSent: 0, finished: 0, cancelled: 0, fullPlainBytes: 0, fullGzipBytes: bomb.byteLength };
  stats.fullPlainBytes = o.mode === "series" ? 0 : bombBytes;
  if (o.mode === "series") for (let i = 0; ; ) {
    const c = seriesChunk(i, series);
    stats.fullPlainBytes += c.text.length;
    if (c.next >= series) break;
    i = c.next;
  }

  /** A body pulled a chunk at a time from `next` (undefined: the end), counted as it goes. */
  const counted = (next: () => Uint8Array | undefined): ReadableStream<Uint8Array> => {
    let over = false;
    return new ReadableStream<Uint8Array>(
      {
        pull(controller) {
          const chunk = next();
          if (chunk === undefined) {
            over = true;
            stats.finished++;
            controller.close();
            return;
          }
          stats.bytesSent += chunk.byteLength;
          controller.enqueue(chunk);
        },
        cancel() {
          if (!over) stats.cancelled++;
          over = true;
        },
      },
      { highWaterMark: 0 },
    );
  };
  const plainSeries = () => {
    let line = 0;
    return counted(() => {
      if (line >= series) return undefined;
      const c = seriesChunk(line, series);
      line = c.next;
      return enc.encode(c.text);
    });
  };
  const plainBomb = () => {
    const block = enc.encode(BOMB_LINE.repeat(Math.ceil(CHUNK / BOMB_LINE.length)));
    let sent = 0;
    return counted(() => {
      if (sent >= bombBytes) return undefined;
      const b = block.subarray(0, Math.min(block.byteLength, bombBytes - sent));
      sent += b.byteLength;
      return b;
    });
  };
  const gzipped = () => {
    let at = 0;
    return counted(() => {
      if (at >= bomb.byteLength) return undefined;
      const b = bomb.subarray(at, at + CHUNK);
      at += b.byteLength;
      return b;
    });
  };

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: o.port ?? 0,
    idleTimeout: 0,
    fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/stats") return Response.json(stats);
      if (path !== "/metrics") return new Response("not served", { status: 404 });
      stats.requests++;
      const ae = req.headers.get("accept-encoding") ?? "";
      stats.acceptEncodings.push(ae);
      const text = { "content-type": "text/plain; version=0.0.4; charset=utf-8" };
      if (o.mode === "series") return new Response(plainSeries(), { headers: text });
      if (o.mode === "gzip-always" || /\bgzip\b/i.test(ae)) return new Response(gzipped(), { headers: { ...text, "content-encoding": "gzip" } });
      return new Response(plainBomb(), { headers: text });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    stats: () => structuredClone(stats),
    stop: () => void server.stop(true),
  };
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const flag = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const mode = (flag("--mode") ?? "series") as HostileMode;
  if (!["series", "bomb", "gzip-always"].includes(mode)) {
    console.error(`hostile-engine: --mode must be series, bomb or gzip-always, got ${mode}`);
    process.exit(2);
  }
  const e = await startHostileEngine({
    mode,
    ...(flag("--series") ? { series: Number(flag("--series")) } : {}),
    ...(flag("--bomb-mb") ? { bombMb: Number(flag("--bomb-mb")) } : {}),
    port: Number(flag("--port") ?? 0),
  });
  console.log(`hostile engine (${mode}) listening on ${e.url}`);
  const stop = () => {
    e.stop();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
