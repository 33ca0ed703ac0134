// Benchmark: time to first byte the router adds. A fake engine whose first token comes after
// 5 ms (then 9 more, 1 ms apart) is reached directly, through llmgw's router (its own process)
// and through nginx (one worker, keep-alive upstream, unbuffered) at 1 and 4 concurrent streams,
// 1,000 streamed requests per target and level; prints p50/p99 TTFB of each and what the router
// and nginx add over direct (targets for the router: < 0.3 ms at p50, < 1 ms at p99).
//
// The client is this program, pinned to core 0; engine, router and nginx are child processes
// on core 1. It speaks HTTP/1.1 itself over Bun.connect, one keep-alive socket per concurrent
// stream, with the request pre-serialised: TTFB is from the write to the data callback that
// carries the first byte after the response headers, with no fetch machinery, promise hops or
// header objects in between, so client overhead is a few µs and the same for every target.
// Targets are interleaved in rounds so drift (thermal, noisy neighbours) hits all alike. For
// reference, a bare Bun.serve+fetch proxy (lib/bare-proxy.ts, Bun's floor with fetch) and a
// Bun.serve proxy with a hand-rolled upstream client over Bun.connect (lib/raw-proxy.ts) are
// measured too. TTFB_EXTRA_ROUTER_ARGS="--metrics-ms 0" (any router-main flags) adds a second
// router built that way, for A/B diagnosis. The share of core 1 taken by other people's
// processes is printed: the machine is shared. Under 2 minutes:
//   bun test/bench/ttfb.ts [requests-per-level, default 1000]

import type { Socket } from "bun";
import { othersMeter } from "./lib/cpu";
import { BUN, cleanupOnExit, fakeEngineProc, killAll, nginxProc, pct, routerProc, spawnChild, table } from "./lib/procs";

const PER_LEVEL = Number(process.argv[2] ?? 1000);
const LEVELS = [1, 4];
const ROUNDS = 10;
const WARMUP = 50;
const MODEL = "m";

const enc = new TextEncoder();
const dec = new TextDecoder();
const HEADER_END = enc.encode("\r\n\r\n");

function indexOf(hay: Uint8Array, needle: Uint8Array, from = 0): number {
  outer: for (let i = from; i <= hay.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

interface Pending {
  t0: number;
  ttfb: number;
  head: Uint8Array | undefined;
  headerLen: number;
  chunked: boolean;
  contentLength: number;
  bodySeen: number;
  tail: string;
  resolve: (r: { ttfb: number; total: number }) => void;
  reject: (e: Error) => void;
}

/** One keep-alive HTTP/1.1 connection that runs one request at a time. */
class Conn {
  private socket!: Socket<undefined>;
  private p: Pending | undefined;

  static async open(url: string): Promise<Conn> {
    const u = new URL(url);
    const c = new Conn();
    c.socket = await Bun.connect({
      hostname: u.hostname,
      port: Number(u.port),
      socket: {
        data: (_s, d) => c.onData(d),
        close: () => c.p?.reject(new Error(`${url} closed the connection`)),
        error: (_s, e) => c.p?.reject(e),
      },
    });
    c.socket.setNoDelay(true);
    return c;
  }

  request(raw: Uint8Array): Promise<{ ttfb: number; total: number }> {
    return new Promise((resolve, reject) => {
      this.p = { t0: 0, ttfb: -1, head: undefined, headerLen: -1, chunked: false, contentLength: -1, bodySeen: 0, tail: "", resolve, reject };
      this.p.t0 = performance.now();
      this.socket.write(raw);
    });
  }

  private onData(d: Uint8Array): void {
    const now = performance.now();
    const p = this.p;
    if (!p) return;
    let body: Uint8Array;
    if (p.headerLen < 0) {
      const head = p.head ? concat(p.head, d) : d;
      const i = indexOf(head, HEADER_END);
      if (i < 0) {
        p.head = head;
        return;
      }
      const text = dec.decode(head.subarray(0, i));
      const status = Number(text.slice(9, 12));
      if (status !== 200) {
        this.p = undefined;
        p.reject(new Error(`status ${status}: ${dec.decode(head).slice(0, 300)}`));
        return;
      }
      p.headerLen = i + 4;
      p.chunked = /\r\ntransfer-encoding:\s*chunked/i.test(text);
      const cl = /\r\ncontent-length:\s*(\d+)/i.exec(text);
      p.contentLength = cl ? Number(cl[1]) : -1;
      body = head.subarray(i + 4);
    } else body = d;
    if (body.length === 0) return;
    if (p.ttfb < 0) p.ttfb = now - p.t0;
    p.bodySeen += body.length;
    // The response ends with the zero-length chunk; the SSE payload can never contain it.
    const done = p.chunked ? (p.tail + dec.decode(body.subarray(Math.max(0, body.length - 16)))).endsWith("\r\n0\r\n\r\n") : p.bodySeen >= p.contentLength;
    if (p.chunked) p.tail = dec.decode(body.subarray(Math.max(0, body.length - 8)));
    if (done) {
      this.p = undefined;
      p.resolve({ ttfb: p.ttfb, total: now - p.t0 });
    }
  }

  close(): void {
    this.socket.end();
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function rawRequest(url: string): Uint8Array {
  const u = new URL(url);
  const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Measure the first byte." }], stream: true });
  return enc.encode(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: ${enc.encode(body).length}\r\n\r\n${body}`,
  );
}

/** n requests spread over the given connections, each connection sequential; TTFBs in ms. */
async function run(conns: Conn[], raw: Uint8Array, n: number): Promise<number[]> {
  const out: number[] = [];
  let left = n;
  await Promise.all(
    conns.map(async (c) => {
      while (left > 0) {
        left--;
        out.push((await c.request(raw)).ttfb);
      }
    }),
  );
  return out;
}

cleanupOnExit();
// The client on core 0 alone, all its threads; the children are pinned to core 1 explicitly.
await Bun.$`taskset -a -cp 0 ${process.pid}`.quiet();
try {
  const engine = await fakeEngineProc("engine", { model: MODEL, ttftMs: 5, tokenDelayMs: 1, tokens: 10, slots: 256 }, { cpus: "1" });
  const router = await routerProc("router", MODEL, [engine.url], { cpus: "1" });
  const nginx = await nginxProc("nginx", engine.url, { cpus: "1" });
  const bare = await spawnChild("bare", [BUN, "test/bench/lib/bare-proxy.ts", engine.url], { cpus: "1", env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" } });
  const raw = await spawnChild("raw", [BUN, "test/bench/lib/raw-proxy.ts", engine.url], { cpus: "1" });
  const extra = process.env.TTFB_EXTRA_ROUTER_ARGS;
  // Flags given later win in router-main, so these override the defaults routerProc passes.
  const router2 = extra ? await routerProc("router2", MODEL, [engine.url], { cpus: "1", extraArgs: extra.split(/\s+/).filter(Boolean) }) : undefined;
  const targets: [string, string][] = [
    ["direct", engine.url],
    ["llmgw router", router.url],
    ["nginx (1 worker)", nginx.url],
    ["bare Bun proxy (reference)", bare.url],
    ["Bun.serve + raw-socket client (ref.)", raw.url],
  ];
  if (router2) targets.push([`llmgw router ${extra}`, router2.url]);
  console.log(`TTFB: engine ttft 5 ms, 10 tokens 1 ms apart; client (Bun.connect, raw HTTP/1.1) on core 0, engine/router/nginx on core 1; ${PER_LEVEL} requests per target and level`);

  const core1 = [engine.pid, router.pid, nginx.pid, bare.pid, raw.pid, ...(router2 ? [router2.pid] : [])];
  const others = othersMeter(() => core1, 1);
  const results = new Map<string, number[]>();
  for (const c of LEVELS) {
    const conns = new Map<string, Conn[]>();
    for (const [name, url] of targets) {
      const list = await Promise.all(Array.from({ length: c }, () => Conn.open(url)));
      conns.set(name, list);
      await run(list, rawRequest(url), WARMUP);
      results.set(`${name}@${c}`, []);
    }
    for (let r = 0; r < ROUNDS; r++) {
      for (const [name, url] of targets) {
        const n = Math.floor(PER_LEVEL / ROUNDS) + (r < PER_LEVEL % ROUNDS ? 1 : 0);
        results.get(`${name}@${c}`)!.push(...(await run(conns.get(name)!, rawRequest(url), n)));
      }
    }
    for (const list of conns.values()) for (const k of list) k.close();
  }

  const rows: (string | number)[][] = [["concurrency", "target", "n", "p50 ms", "p99 ms", "max ms", "added p50 ms", "added p99 ms"]];
  const verdicts: string[] = [];
  for (const c of LEVELS) {
    const d = results.get(`direct@${c}`)!.sort((a, b) => a - b);
    const d50 = pct(d, 50);
    const d99 = pct(d, 99);
    for (const [name] of targets) {
      const s = results.get(`${name}@${c}`)!.sort((a, b) => a - b);
      const p50 = pct(s, 50);
      const p99 = pct(s, 99);
      const direct = name === "direct";
      rows.push([c, name, s.length, p50.toFixed(3), p99.toFixed(3), s[s.length - 1]!.toFixed(3), direct ? "-" : (p50 - d50).toFixed(3), direct ? "-" : (p99 - d99).toFixed(3)]);
      if (name === "llmgw router") {
        const ok50 = p50 - d50 < 0.3;
        const ok99 = p99 - d99 < 1;
        verdicts.push(`c=${c}: router adds ${(p50 - d50).toFixed(3)} ms at p50 (${ok50 ? "meets" : "misses"} < 0.3) and ${(p99 - d99).toFixed(3)} ms at p99 (${ok99 ? "meets" : "misses"} < 1)`);
      }
    }
  }
  console.log(table(rows));
  for (const v of verdicts) console.log(v);
  console.log(`other people's processes used ${(others() * 100).toFixed(0)}% of core 1 during the measurements (shared machine: above a few %, p99 is noise)`);
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
} finally {
  await killAll();
}
// Nothing of ours may outlive the bench, and no stray timer may hold it open.
process.exit();
