// Benchmark: can costly request bodies stall the router for everyone else? The router alone in
// its own process (test/bench/lib/router-main.ts, the config's default settings) on 127.0.0.1,
// and one ordinary client sending GET /v1/models on a keep-alive connection, one request at a
// time. Phases, each measured the same way:
//   idle        nothing else happens;
//   small       four clients send a short chat on a new connection each, back to back: what any
//               flood of requests costs the router, whatever their bodies;
//   red team    four clients (another process: test/bench/lib/body-flooder.ts) send 8,000,000-
//               byte bodies back to back, two of deep nesting and two of one very wide object;
//   at limits   four clients send the costliest bodies the router accepts: a chat with a base64
//               image as large as the size cap allows, an object of as many distinct keys as
//               the value limit allows (padded to the cap), and arrays nested as deep as allowed,
//               repeated up to the value limit (flood bodies name a model nobody serves: the
//               router must read the body to find that out, and no engine shares the CPU);
//   … at a sink the same two floods sent to test/bench/lib/body-sink.ts instead, which takes
//               the bytes as the router's listener does and does nothing with them, while the
//               ordinary client still asks the router: what the flood costs the machine (CPU,
//               the kernel's loopback path) whatever the router does. On a 2-core machine this,
//               not idle, is the floor under the flood phases' figures.
// The ordinary client sends a request every GAP_MS (an open loop: a stall shows in the requests
// that wait behind it, not as fewer requests) for PHASE seconds; the phases run ROUNDS times in
// turn and each phase's figures pool its rounds, so a neighbour's burst on a shared machine lands
// in every phase alike. The router and this process run at nice −10 when allowed (root), ahead of
// other people's work; the flooder at the default. Prints the ordinary client's p50/p99 in each
// phase, the ratio of p99 to idle's, and what the flood's bodies were answered. Stops by itself.
//   bun test/bench/body-flood.ts [seconds-per-phase, default 5] [rounds, default 3]

import { getPriority, setPriority } from "node:os";
import type { Socket } from "bun";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { BUN, type Child, cleanupOnExit, killAll, pct, routerProc, spawnChild, table } from "./lib/procs";

const PHASE_MS = Number(process.argv[2] ?? 5) * 1000;
const ROUNDS = Number(process.argv[3] ?? 3);
const GAP_MS = 1;
const NICE = -10;

cleanupOnExit();

/** One keep-alive connection, one request at a time; an answer is framed by Content-Length. */
class Conn {
  private socket!: Socket<undefined>;
  private buf = Buffer.alloc(0);
  private waiting: ((status: number) => void) | undefined;

  static async open(host: string, port: number): Promise<Conn> {
    const c = new Conn();
    c.socket = await Bun.connect({ hostname: host, port, socket: { data: (_s, d) => c.onData(d), close: () => c.waiting?.(-1) } });
    c.socket.setNoDelay(true);
    return c;
  }

  private onData(d: Uint8Array): void {
    this.buf = this.buf.length === 0 ? Buffer.from(d) : Buffer.concat([this.buf, d]);
    const end = this.buf.indexOf("\r\n\r\n");
    if (end < 0 || !this.waiting) return;
    const head = this.buf.subarray(0, end).toString("latin1");
    const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const total = end + 4 + (cl ? Number(cl[1]) : 0);
    if (this.buf.length < total) return;
    this.buf = this.buf.subarray(total);
    const w = this.waiting;
    this.waiting = undefined;
    w(Number(head.slice(9, 12)));
  }

  request(bytes: Uint8Array): Promise<{ status: number; ms: number }> {
    return new Promise((resolve) => {
      const t0 = performance.now();
      this.waiting = (status) => resolve({ status, ms: performance.now() - t0 });
      this.socket.write(bytes);
    });
  }

  close(): void {
    this.socket.end();
  }
}

/** GET /v1/models every GAP_MS for `forMs`; the time of each answer. */
async function ordinary(routerUrl: string, forMs = PHASE_MS): Promise<number[]> {
  const { hostname, port } = new URL(routerUrl);
  const conn = await Conn.open(hostname, Number(port));
  const req = new TextEncoder().encode(`GET /v1/models HTTP/1.1\r\nHost: ${hostname}:${port}\r\n\r\n`);
  const ms: number[] = [];
  const until = performance.now() + forMs;
  while (performance.now() < until) {
    const r = await conn.request(req);
    if (r.status !== 200) throw new Error(`GET /v1/models answered ${r.status}`);
    ms.push(r.ms);
    await Bun.sleep(GAP_MS);
  }
  conn.close();
  return ms;
}

const limits = ROUTER_DEFAULTS as typeof ROUTER_DEFAULTS & { maxJsonDepth?: number; maxJsonValues?: number };
const cap = limits.maxBodyBytes;
const depth = limits.maxJsonDepth ?? 64;
const values = limits.maxJsonValues ?? 100_000;

/** The ordinary client's times while four clients send `kinds` of bodies to `target` (the router, or the sink). */
async function flood(routerUrl: string, target: string, kinds: string, answered: Record<string, number>): Promise<number[]> {
  const f: Child = await spawnChild("flooder", [BUN, "test/bench/lib/body-flooder.ts", target, kinds, "--cap", String(cap), "--depth", String(depth), "--values", String(values)], { waitUrl: false });
  await f.waitLine(/^flooding/, 60_000);
  // Let every client have a body in flight before measuring.
  await Bun.sleep(500);
  const times = await ordinary(routerUrl);
  await f.kill();
  await f.outputDone;
  const counts = JSON.parse(f.lines.find((l) => l.startsWith("{")) ?? "{}") as Record<string, number>;
  for (const [k, n] of Object.entries(counts)) answered[k] = (answered[k] ?? 0) + n;
  return times;
}

/** Runs at NICE if allowed; says so either way. */
function raise(): string {
  try {
    setPriority(0, NICE);
    return `nice ${getPriority(0)}`;
  } catch {
    return `nice ${getPriority(0)} (raising it needs root)`;
  }
}

async function main(): Promise<void> {
  const nice = raise();
  const router = await routerProc("router", "m", ["http://127.0.0.1:9"], { metricsIntervalMs: 0, nice: NICE });
  const sink = await spawnChild("sink", [BUN, "test/bench/lib/body-sink.ts", "--cap", String(cap)], { nice: NICE });
  console.log(
    `router ${router.url}: body cap ${cap} bytes, depth ${limits.maxJsonDepth ?? "unlimited"}, values ${limits.maxJsonValues ?? "unlimited"}; ${ROUNDS} rounds of ${PHASE_MS / 1000} s a phase; this process at ${nice}`,
  );
  // Warm the router's code paths before the idle figures.
  await ordinary(router.url, 1000);
  const RED = "deep8m,wide8m";
  const AT = "image,widemax,deepmax,widemax";
  const t = { idle: [] as number[], small: [] as number[], red: [] as number[], redSink: [] as number[], at: [] as number[], atSink: [] as number[] };
  const smallAnswered: Record<string, number> = {};
  const redAnswered: Record<string, number> = {};
  const atAnswered: Record<string, number> = {};
  const sinkAnswered: Record<string, number> = {};
  for (let r = 0; r < ROUNDS; r++) {
    t.idle.push(...(await ordinary(router.url)));
    t.small.push(...(await flood(router.url, router.url, "small", smallAnswered)));
    t.red.push(...(await flood(router.url, router.url, RED, redAnswered)));
    t.redSink.push(...(await flood(router.url, sink.url, RED, sinkAnswered)));
    t.at.push(...(await flood(router.url, router.url, AT, atAnswered)));
    t.atSink.push(...(await flood(router.url, sink.url, AT, sinkAnswered)));
  }
  for (const list of Object.values(t)) list.sort((a, b) => a - b);
  const idle99 = pct(t.idle, 99);
  const row = (name: string, l: number[], floor?: number[]) => [
    name,
    l.length,
    pct(l, 50).toFixed(2),
    pct(l, 99).toFixed(2),
    l[l.length - 1]!.toFixed(1),
    (pct(l, 99) / idle99).toFixed(2),
    floor ? (pct(l, 99) / pct(floor, 99)).toFixed(2) : "-",
  ];
  console.log(
    table([
      ["phase", "requests", "p50 ms", "p99 ms", "max ms", "p99 / idle p99", "p99 / at-a-sink p99"],
      row("idle", t.idle),
      row("small (4 clients, short chats)", t.small),
      row("red team (8 MB deep, wide)", t.red, t.redSink),
      row("red team at a sink", t.redSink),
      row("at limits (image, wide, deep)", t.at, t.atSink),
      row("at limits at a sink", t.atSink),
    ]),
  );
  const list = (a: Record<string, number>) => Object.entries(a).map(([k, n]) => `${n}× ${k}`).join(", ");
  console.log(`small bodies answered: ${list(smallAnswered)}`);
  console.log(`red team bodies answered: ${list(redAnswered)}`);
  console.log(`at-limits bodies answered: ${list(atAnswered)}`);
  console.log(`sink bodies answered: ${list(sinkAnswered)}`);
  await killAll();
}

await main();
process.exit(0);
