// Benchmark: does control-plane load reach inference? One `llmgw serve` (router and admin/agent
// API in one process, as deployed) with one simulated agent serving a fake-engine model. In
// one run, three phases, each measured the same way:
//   idle     nothing else happens;
//   flood    8 clients send maximum-size (≈600 KB) heartbeats back to back, each as its own
//            node, to the admin listener;
//   cap      the router listener holds its whole connection cap in idle sockets (the bench
//            sets the cap with --max-connections); new router connections are shed,
//            heartbeats must still be answered.
// In each phase: small non-streamed chat requests through the router and straight to the
// engine, one keep-alive connection each, interleaved (added latency = router − direct at the
// same percentile), and the router's /healthz. Prints p50/p99 of each and the ratio to idle.
//   bun test/bench/isolation.ts [requests-per-phase, default 2000]

import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Socket } from "bun";
import { maxHeartbeat } from "./lib/fleet";
import { cleanupOnExit, freePort, killAll, pct, ROOT, spawnChild, table } from "./lib/procs";
import { scratchDir } from "../helpers/tmp";

const N = Number(process.argv[2] ?? 2000);
const FLOODERS = 8;
const ROUTER_CAP = 256;
const BIN = join(ROOT, "dist/llmgw");
const MODEL = "m";

cleanupOnExit();

/** One keep-alive HTTP/1.1 connection, one request at a time, answers framed by Content-Length or chunked. */
class Conn {
  private socket!: Socket<undefined>;
  private buf = Buffer.alloc(0);
  private waiting: { resolve: (status: number) => void; reject: (e: Error) => void } | undefined;

  static async open(host: string, port: number): Promise<Conn> {
    const c = new Conn();
    c.socket = await Bun.connect({
      hostname: host,
      port,
      socket: {
        data: (_s, d) => c.onData(d),
        close: () => c.waiting?.reject(new Error("connection closed")),
        error: (_s, e) => c.waiting?.reject(e),
      },
    });
    c.socket.setNoDelay(true);
    return c;
  }

  private onData(d: Uint8Array): void {
    this.buf = this.buf.length === 0 ? Buffer.from(d) : Buffer.concat([this.buf, d]);
    const end = this.buf.indexOf("\r\n\r\n");
    if (end < 0 || !this.waiting) return;
    const head = this.buf.subarray(0, end).toString("latin1");
    const status = Number(head.slice(9, 12));
    const cl = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    let total: number;
    if (cl) total = end + 4 + Number(cl[1]);
    else if (/\r\ntransfer-encoding:\s*chunked/i.test(head)) {
      const z = this.buf.indexOf("\r\n0\r\n\r\n", end);
      if (z < 0) return;
      total = z + 7;
    } else total = end + 4;
    if (this.buf.length < total) return;
    this.buf = this.buf.subarray(total);
    const w = this.waiting;
    this.waiting = undefined;
    w.resolve(status);
  }

  /** Sends one request and resolves with its status and time in ms. */
  request(bytes: Uint8Array): Promise<{ status: number; ms: number }> {
    return new Promise((resolve, reject) => {
      const t0 = performance.now();
      // An answer that never comes is a finding, not a hang of the bench.
      const timer = setTimeout(() => {
        this.waiting = undefined;
        this.socket.terminate();
        reject(new Error("no answer within 10 s"));
      }, 10_000);
      this.waiting = {
        resolve: (status) => {
          clearTimeout(timer);
          resolve({ status, ms: performance.now() - t0 });
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.socket.write(bytes);
    });
  }

  /** Bytes of an answer received but not complete (for error messages). */
  partial(): string {
    return this.buf.subarray(0, 200).toString("latin1");
  }

  close(): void {
    this.socket.end();
  }
}

function hostPort(url: string): [string, number] {
  const u = new URL(url);
  return [u.hostname, Number(u.port)];
}

const chatBody = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
const chatReq = (host: string, extra = "") =>
  new TextEncoder().encode(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${host}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(chatBody)}${extra}\r\n\r\n${chatBody}`,
  );
const healthReq = (host: string) => new TextEncoder().encode(`GET /healthz HTTP/1.1\r\nHost: ${host}\r\n\r\n`);

interface Phase {
  name: string;
  /** Keep-alive connections the server closed with a request unanswered (reopened, the request sent again). */
  dropped: number;
  router: number[];
  direct: number[];
  health: number[];
  shed: number;
  heartbeats: number;
  heartbeatMs: number[];
}

async function measure(name: string, routerUrl: string, engineUrl: string, engineAuth: string): Promise<Phase> {
  const [rh, rp] = hostPort(routerUrl);
  const [eh, ep] = hostPort(engineUrl);
  let router = await Conn.open(rh, rp);
  let direct = await Conn.open(eh, ep);
  let health = await Conn.open(rh, rp);
  const rq = chatReq(`${rh}:${rp}`);
  const dq = chatReq(`${eh}:${ep}`, engineAuth);
  const hq = healthReq(`${rh}:${rp}`);
  const out: Phase = { name, dropped: 0, router: [], direct: [], health: [], shed: 0, heartbeats: 0, heartbeatMs: [] };
  // A request on a connection the server closed is counted and sent again on a new one.
  const send = async (which: "router" | "direct" | "health", i: number): Promise<{ status: number; ms: number }> => {
    const conn = which === "router" ? router : which === "direct" ? direct : health;
    const bytes = which === "router" ? rq : which === "direct" ? dq : hq;
    try {
      return await conn.request(bytes);
    } catch (e) {
      out.dropped++;
      console.log(`${name}: ${which} request ${i}: ${(e as Error).message}; reconnecting`);
      const [h, p] = which === "direct" ? [eh, ep] : [rh, rp];
      const fresh = await Conn.open(h, p);
      if (which === "router") router = fresh;
      else if (which === "direct") direct = fresh;
      else health = fresh;
      return fresh.request(bytes);
    }
  };
  for (let i = 0; i < N; i++) {
    const a = await send("router", i);
    const b = await send("direct", i);
    const h = await send("health", i);
    if (a.status !== 200 || b.status !== 200 || h.status !== 200) throw new Error(`${name}: status router ${a.status}, direct ${b.status}, healthz ${h.status}`);
    out.router.push(a.ms);
    out.direct.push(b.ms);
    out.health.push(h.ms);
  }
  router.close();
  direct.close();
  health.close();
  return out;
}

async function main(): Promise<void> {
  const dir = scratchDir("llmgw-bench-iso-");
  const routerPort = freePort();
  const adminPort = freePort();
  const serve = await spawnChild(
    "serve",
    [BIN, "serve", "--data-dir", join(dir, "head"), "--listen", `127.0.0.1:${routerPort}`, "--admin-listen", `127.0.0.1:${adminPort}`, "--log-level", process.env.ISO_LOG ?? "warn", "--max-connections", String(ROUTER_CAP),
      // The worst case: every flood heartbeat is parsed and applied, none turned away by the
      // per-node rate limit (which, at its defaults, answers most of a flood with a cheap 429).
      "--heartbeat-rate", "100000", "--heartbeat-burst", "100000",
      // ISO_ROUTER_THREAD=false measures the router in the main thread, as before it had its own.
      `--router-thread=${process.env.ISO_ROUTER_THREAD ?? "true"}`],
    { waitUrl: false, cpus: "1" },
  );
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const routerUrl = `http://127.0.0.1:${routerPort}`;
  const headDir = join(dir, "head");
  for (let i = 0; i < 200; i++) {
    try {
      readFileSync(join(headDir, "server.json"));
      break;
    } catch {
      await Bun.sleep(50);
    }
  }
  const adminToken = readFileSync(join(headDir, "admin.token"), "utf8").trim();
  const joinTokenFile = join(headDir, "join.token");
  const joinToken = readFileSync(joinTokenFile, "utf8").trim();
  await spawnChild(
    "agent",
    [BIN, "agent", "--server", adminUrl, "--token-file", joinTokenFile, "--name", "sim-1", "--address", "127.0.0.1", "--engine-host", "127.0.0.1", "--simulate", "H100-80GB:1", "--simulate-models", MODEL, "--state-dir", join(dir, "agent"), "--logs-listen", "off", "--engine-auth", "off", "--log-level", "warn"],
    { waitUrl: false, cpus: "1" },
  );
  const put = await fetch(`${adminUrl}/api/v1/models/${MODEL}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
    body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }),
  });
  if (!put.ok) throw new Error(`PUT model: ${put.status} ${await put.text()}`);
  let engineUrl = "";
  for (let i = 0; i < 600 && !engineUrl; i++) {
    const r = await fetch(`${adminUrl}/api/v1/replicas`, { headers: { authorization: `Bearer ${adminToken}` } });
    const body = (await r.json()) as { replicas?: { state: string; endpoint: string | null }[] } | { state: string; endpoint: string | null }[];
    const list = Array.isArray(body) ? body : (body.replicas ?? []);
    const ready = list.find((x) => x.state === "ready" && x.endpoint);
    if (ready) engineUrl = ready.endpoint!;
    else await Bun.sleep(100);
  }
  if (!engineUrl) throw new Error(`no ready replica; serve stderr:\n${serve.stderr()}`);
  // The router learns endpoints on its tick: wait until it serves the model.
  for (let i = 0; i < 100; i++) {
    const r = await fetch(`${routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody });
    await r.arrayBuffer();
    if (r.status === 200) break;
    await Bun.sleep(100);
  }

  console.log(`isolation bench: ${N} requests per phase; router ${routerUrl}, engine ${engineUrl}, admin ${adminUrl}`);
  const phases: Phase[] = [];
  await measure("warmup", routerUrl, engineUrl, "");
  phases.push(await measure("idle", routerUrl, engineUrl, ""));

  // Flood: 8 nodes, each sending its heartbeat again as soon as the last one was answered.
  let flooding = true;
  const hbCount = { ok: 0, limited: 0, other: 0, bytes: 0 };
  const flooders = Array.from({ length: FLOODERS }, async (_, i) => {
    const node = `flood-${i}`;
    const body = maxHeartbeat(node);
    hbCount.bytes = body.length;
    let token = joinToken;
    let k = 0;
    while (flooding) {
      // Each one differs (its agent version), so the head node parses and writes every one: a
      // repeated body would be answered from the previous parse.
      const varied = body.replace('"agent_version":"bench"', `"agent_version":"bench-${k++}"`);
      const r = await fetch(`${adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: varied });
      const text = await r.text();
      if (r.status === 200) {
        hbCount.ok++;
        const cred = (JSON.parse(text) as { credential?: string }).credential;
        if (cred) token = cred;
      } else if (r.status === 429) hbCount.limited++;
      else hbCount.other++;
    }
  });
  await Bun.sleep(500);
  const flood = await measure("flood", routerUrl, engineUrl, "").catch((e: Error) => {
    throw new Error(`${e.message}\nserve exit ${serve.proc.exitCode ?? "-"} ${serve.proc.signalCode ?? ""}; stderr:\n${serve.stderr().slice(-3000)}`);
  });
  flooding = false;
  await Promise.all(flooders);
  flood.heartbeats = hbCount.ok + hbCount.limited;
  phases.push(flood);
  console.log(`flood: ${hbCount.ok} heartbeats answered 200, ${hbCount.limited} answered 429, ${hbCount.other} other; ${(hbCount.bytes / 1024).toFixed(0)} KB each`);

  // Cap: fill the router listener with idle connections up to its cap (the measuring
  // connections are opened by measure() first... so open them before filling).
  const [rh, rp] = hostPort(routerUrl);
  const capPhase = measureCap(rh, rp, routerUrl, engineUrl, adminUrl, joinToken);
  phases.push(await capPhase);

  const idle = phases[0]!;
  const rows: (string | number)[][] = [["phase", "dropped", "router p50", "router p99", "direct p50", "direct p99", "added p50", "added p99", "/healthz p50", "/healthz p99", "added p99 / idle", "/healthz p99 / idle"]];
  for (const p of phases) {
    const r = [...p.router].sort((a, b) => a - b);
    const d = [...p.direct].sort((a, b) => a - b);
    const h = [...p.health].sort((a, b) => a - b);
    const ir = [...idle.router].sort((a, b) => a - b);
    const id = [...idle.direct].sort((a, b) => a - b);
    const ih = [...idle.health].sort((a, b) => a - b);
    const added50 = pct(r, 50) - pct(d, 50);
    const added99 = pct(r, 99) - pct(d, 99);
    const iadded99 = pct(ir, 99) - pct(id, 99);
    rows.push([
      p.name,
      p.dropped,
      pct(r, 50).toFixed(3),
      pct(r, 99).toFixed(3),
      pct(d, 50).toFixed(3),
      pct(d, 99).toFixed(3),
      added50.toFixed(3),
      added99.toFixed(3),
      pct(h, 50).toFixed(3),
      pct(h, 99).toFixed(3),
      (added99 / iadded99).toFixed(2),
      (pct(h, 99) / pct(ih, 99)).toFixed(2),
    ]);
  }
  console.log("times in ms");
  console.log(table(rows));
  const cap = phases[2]!;
  const hb = [...cap.heartbeatMs].sort((a, b) => a - b);
  console.log(`cap: ${cap.shed} of ${ROUTER_CAP + 20} extra router connections shed; ${cap.heartbeats} heartbeats answered while at the cap, p50 ${pct(hb, 50).toFixed(2)} ms, p99 ${pct(hb, 99).toFixed(2)} ms`);
  await killAll();
}

/** The cap phase: measuring connections first, then idle sockets up to the cap, then measure. */
async function measureCap(rh: string, rp: number, routerUrl: string, engineUrl: string, adminUrl: string, joinToken: string): Promise<Phase> {
  const [eh, ep] = hostPort(engineUrl);
  const router = await Conn.open(rh, rp);
  const direct = await Conn.open(eh, ep);
  const health = await Conn.open(rh, rp);
  const idleSockets: Socket<undefined>[] = [];
  let shed = 0;
  // The measuring connections count against the cap; fill the rest and try some beyond.
  for (let i = 0; i < ROUTER_CAP + 20; i++) {
    const s = await Bun.connect({
      hostname: rh,
      port: rp,
      socket: {
        data(_s, d) {
          if (Buffer.from(d).toString("latin1").startsWith("HTTP/1.1 503")) shed++;
        },
      },
    }).catch(() => undefined);
    if (!s) shed++;
    else idleSockets.push(s);
  }
  await Bun.sleep(300);
  const out: Phase = { name: "cap", dropped: 0, router: [], direct: [], health: [], shed, heartbeats: 0, heartbeatMs: [] };
  const rq = chatReq(`${rh}:${rp}`);
  const dq = chatReq(`${eh}:${ep}`);
  const hq = healthReq(`${rh}:${rp}`);
  let hbToken = joinToken;
  const hbBody = JSON.stringify({ node: "cap-probe", address: "127.0.0.1", agent_version: "bench", gpus: [], replicas: [] });
  let running = true;
  const heartbeats = (async () => {
    while (running) {
      const t0 = performance.now();
      const r = await fetch(`${adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${hbToken}`, "content-type": "application/json" }, body: hbBody });
      const text = await r.text();
      if (r.status === 200) {
        out.heartbeats++;
        out.heartbeatMs.push(performance.now() - t0);
        const cred = (JSON.parse(text) as { credential?: string }).credential;
        if (cred) hbToken = cred;
      }
      await Bun.sleep(20);
    }
  })();
  for (let i = 0; i < N; i++) {
    const a = await router.request(rq);
    const b = await direct.request(dq);
    const h = await health.request(hq);
    if (a.status !== 200 || b.status !== 200 || h.status !== 200) throw new Error(`cap: status router ${a.status}, direct ${b.status}, healthz ${h.status}`);
    out.router.push(a.ms);
    out.direct.push(b.ms);
    out.health.push(h.ms);
  }
  running = false;
  await heartbeats;
  for (const s of idleSockets) s.end();
  router.close();
  direct.close();
  health.close();
  return out;
}

await main().catch(async (e) => {
  console.error(e instanceof Error ? e.message : e);
  await killAll();
  process.exit(1);
});
