// Both listeners of a real head node under slow and greedy clients: each has deadlines and
// connection caps of its own, so a flood on the router never stops agents' heartbeats, and
// the admin listener is as strict as the router's (one Host, deadlines on the injected clock).

import { afterEach, describe, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import pino from "pino";
import { type HeadParts, type RunningServer, startHead } from "../../src/app/head";
import { ServeConfig } from "../../src/config";
import { ManualScheduler } from "../../src/lib/scheduler";
import { T0, heartbeat } from "../helpers/fleet";
import { scratchDir } from "../helpers/tmp";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Started extends RunningServer {
  listenerClock: ManualScheduler;
  router: HeadParts["router"];
  heartbeat(name: string): Promise<Response>;
}

async function start(overrides: Record<string, unknown> = {}): Promise<Started> {
  const config = ServeConfig.parse({ data_dir: scratchDir("llmgw-listeners-"), admin_listen: "127.0.0.1:0", listen: "127.0.0.1:0", ...overrides });
  const listenerClock = new ManualScheduler(T0);
  const { server: s, parts } = await startHead({ config, log: pino({ level: "silent" }), scheduler: listenerClock, loop: false });
  cleanups.push(() => s.stop());
  const credentials = new Map<string, string>();
  return Object.assign(s, {
    listenerClock,
    router: parts.router,
    // As an agent does: the join token once, then the node's own credential, from its own address.
    heartbeat: async (name: string) => {
      const res = await fetch(`${s.adminUrl}/agent/v1/heartbeat`, {
        method: "POST",
        headers: { authorization: `Bearer ${credentials.get(name) ?? s.joinToken}`, "content-type": "application/json" },
        body: JSON.stringify({ ...heartbeat({ name }), address: "127.0.0.1" }),
      });
      const credential = res.status === 200 ? ((await res.clone().json()) as { credential?: string }).credential : undefined;
      if (credential) credentials.set(name, credential);
      return res;
    },
  });
}

const port = (url: string) => Number(new URL(url).port);

/** Waits for I/O (not time): the event loop turns until f() holds. */
async function settle(f: () => boolean, what: string, ms = 3000): Promise<void> {
  const t0 = performance.now();
  while (!f()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Bytes a connection holds unparsed: here, the body received so far. */
function unparsed(c: object): number {
  const f = c as { buf: Uint8Array; pos: number };
  return f.buf.byteLength - f.pos;
}

interface Raw {
  sock: Socket;
  text(): string;
  closed(): boolean;
  /** Forgets what was received so far. */
  reset(): void;
}

/** A raw TCP client, from a chosen source address (127.0.0.x are all loopback on Linux). */
async function raw(p: number, localAddress = "127.0.0.1"): Promise<Raw> {
  let got = "";
  let closed = false;
  const sock = connect({ host: "127.0.0.1", port: p, localAddress });
  sock.on("data", (d) => void (got += d.toString("latin1")));
  sock.on("close", () => void (closed = true));
  sock.on("error", () => {});
  await new Promise<void>((resolve, reject) => {
    sock.once("connect", () => resolve());
    sock.once("error", reject);
  });
  cleanups.push(() => sock.destroy());
  return { sock, text: () => got, closed: () => closed, reset: () => void (got = "") };
}

/** Opens a keep-alive connection and has one request answered on it, so it surely counts as open. */
async function held(p: number, localAddress?: string): Promise<Raw> {
  const c = await raw(p, localAddress);
  c.sock.write("GET /healthz HTTP/1.1\r\nHost: h\r\n\r\n");
  await settle(() => /^HTTP\/1\.1 200 [^]*\r\n\r\n/.test(c.text()), "an answer on a held connection");
  return c;
}

describe("admin/agent listener", () => {
  test("a request with two Host headers is 400 in the API's error shape (RFC 9112 §3.2)", async () => {
    const s = await start();
    const c = await raw(port(s.adminUrl));
    c.sock.write("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
    await settle(() => c.closed(), "the connection to close");
    expect(c.text()).toStartWith("HTTP/1.1 400 ");
    const body = JSON.parse(c.text().slice(c.text().indexOf("\r\n\r\n") + 4)) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("bad_request");
    expect(body.error.message).toContain("Host");
    // One Host is served as before.
    expect((await fetch(`${s.adminUrl}/healthz`)).status).toBe(200);
  });

  test("a heartbeat body trickled a byte per idle period is cut at the body deadline with 408", async () => {
    const s = await start({ body_timeout: "30s", body_min_rate: 1024 });
    const c = await raw(port(s.adminUrl));
    const body = JSON.stringify(heartbeat({ name: "slow" }));
    c.sock.write(`POST /agent/v1/heartbeat HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer ${s.joinToken}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    // A byte, then 9 s of the listener's clock: never idle for long, but past 30 s (plus what
    // the bytes earn) on the fourth.
    for (let i = 0; i < 4; i++) {
      c.sock.write(body[i]!);
      await settle(() => s.adminListener.conns.size === 1 && unparsed([...s.adminListener.conns][0]!) === i + 1, `byte ${i} to arrive`);
      // Nothing is answered before the deadline: not after any byte, the last included.
      expect(c.text()).toBe("");
      s.listenerClock.advance(9_000);
      s.adminListener.sweep();
    }
    await settle(() => c.closed(), "the connection to be cut");
    expect(c.text()).toStartWith("HTTP/1.1 408 ");
    expect(c.text()).toContain('"code":"request_timeout"');
  });

  test("a head trickled a byte per idle period is cut at head_timeout with 408, on both listeners (the admin listener's connection authenticated)", async () => {
    const s = await start({ head_timeout: "30s" });
    // The router's listener is its own; read it from the router for the test.
    const routerListener = (s.router as unknown as { server: typeof s.adminListener }).server;
    for (const [url, listener] of [[s.adminUrl, s.adminListener], [s.routerUrl, routerListener]] as const) {
      // Each listener reads the clock at its sweeps: bring this one up to the present first.
      listener.sweep();
      const c = await raw(port(url));
      if (listener === s.adminListener) {
        // Until it authenticates, a connection to the admin listener has a few seconds per head.
        c.sock.write(`GET /api/v1/nodes HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer ${s.adminToken}\r\n\r\n`);
        await settle(() => /^HTTP\/1\.1 200 [^]*\r\n\r\n\[\]$/.test(c.text()), "the authenticated answer");
        c.reset();
      }
      const head = "GET /healthz HTTP/1.1\r\nHost: h\r\n";
      for (let i = 0; i < 4; i++) {
        c.sock.write(head[i]!);
        await settle(() => listener.conns.size === 1 && unparsed([...listener.conns][0]!) === i + 1, `byte ${i} to arrive`);
        expect(c.text()).toBe("");
        s.listenerClock.advance(9_000);
        listener.sweep();
      }
      await settle(() => c.closed(), "the connection to be cut");
      expect(c.text()).toStartWith("HTTP/1.1 408 ");
    }
  });

  test("heartbeats keep being answered while the router listener is at its connection cap", async () => {
    const s = await start({ max_connections: 4 });
    const rp = port(s.routerUrl);
    for (let i = 0; i < 4; i++) await held(rp);
    // The router is full: one more is shed at once with a 503.
    const over = await raw(rp);
    await settle(() => over.closed(), "the router to shed a connection");
    expect(over.text()).toStartWith("HTTP/1.1 503 ");
    // Agents are not: every heartbeat is answered, on fresh connections and reused ones.
    for (let i = 0; i < 20; i++) {
      const r = await s.heartbeat(`n${i % 4}`);
      expect(r.status).toBe(200);
      await r.arrayBuffer();
    }
    const again = await raw(rp);
    await settle(() => again.closed(), "the router to shed another");
    expect(again.text()).toStartWith("HTTP/1.1 503 ");
  });

  test("the admin listener's per-address cap sheds a third connection from 127.0.0.2 while 127.0.0.1 heartbeats", async () => {
    const s = await start({ admin_max_connections_per_address: 2 });
    const ap = port(s.adminUrl);
    await held(ap, "127.0.0.2");
    await held(ap, "127.0.0.2");
    const third = await raw(ap, "127.0.0.2");
    await settle(() => third.closed(), "the third connection from 127.0.0.2 to be shed");
    expect(third.text()).toStartWith("HTTP/1.1 503 ");
    const body = JSON.parse(third.text().slice(third.text().indexOf("\r\n\r\n") + 4)) as { error: { code: string } };
    expect(body.error.code).toBe("overloaded");
    const r = await s.heartbeat("n1");
    expect(r.status).toBe(200);
  });

  test("slow unauthenticated heads from five addresses cannot lock out the operator or a joining agent, nor cut an agent already connected", async () => {
    const s = await start({ admin_max_connections: 40, admin_max_connections_per_address: 10 });
    const ap = port(s.adminUrl);
    // An agent that joined before the flood, on a connection it keeps.
    const agent = await raw(ap);
    const hb = (name: string, token: string) => {
      const body = JSON.stringify({ ...heartbeat({ name }), address: "127.0.0.1" });
      return `POST /agent/v1/heartbeat HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer ${token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    };
    /** The status and body of the answer on the agent's connection, once it is whole. */
    const answered = (): [string, string] | undefined => {
      const t = agent.text();
      const end = t.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)\r\n/i.exec(t.slice(0, end + 2));
      if (end < 0 || length === null || t.length < end + 4 + Number(length[1])) return undefined;
      return [t.slice(9, 12), t.slice(end + 4)];
    };
    agent.sock.write(hb("early", s.joinToken));
    await settle(() => answered() !== undefined, "the early agent's join");
    const credential = (JSON.parse(answered()![1]) as { credential: string }).credential;
    agent.reset();

    // Ten connections from each of 127.0.0.2..6, each sending a head that never ends.
    const slow: Raw[] = [];
    for (let a = 2; a <= 6; a++)
      for (let i = 0; i < 10; i++) {
        const c = await raw(ap, `127.0.0.${a}`);
        c.sock.write("GET /healthz HTTP/1.1\r\nHost: h\r\n");
        slow.push(c);
      }
    const l = s.adminListener;
    const shed = l.shed as Record<string, number>;
    await settle(() => l.conns.size - 1 + (shed.total ?? 0) + (shed.address ?? 0) + (shed.evicted ?? 0) + (shed.unauthenticated ?? 0) >= slow.length, "every slow connection to be taken or shed");

    // The operator, on a new connection: answered at once.
    let t0 = performance.now();
    const nodes = await fetch(`${s.adminUrl}/api/v1/nodes`, { headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(nodes.status).toBe(200);
    expect(((await nodes.json()) as { name: string }[]).map((n) => n.name)).toEqual(["early"]);
    expect(performance.now() - t0).toBeLessThan(1000);
    // A new agent joins.
    t0 = performance.now();
    const joined = await s.heartbeat("late");
    expect(joined.status).toBe(200);
    expect(performance.now() - t0).toBeLessThan(1000);
    // The slow heads hold at most the unauthenticated half of the cap; the rest were closed for newer ones.
    expect(l.unauth.size).toBeLessThanOrEqual(20);
    expect(l.shed.evicted).toBeGreaterThanOrEqual(slow.length - 20);
    // The agent that was there before keeps its connection, and heartbeats on it.
    expect(agent.closed()).toBe(false);
    agent.sock.write(hb("early", credential));
    await settle(() => answered() !== undefined, "the early agent's heartbeat");
    expect(answered()![0]).toBe("200");

    // Past the few seconds an unauthenticated head has, every slow head is cut; the agent stays.
    s.listenerClock.advance(6_000);
    l.sweep();
    await settle(() => slow.every((c) => c.closed()), "the slow heads to be cut");
    expect(slow.filter((c) => c.text().startsWith("HTTP/1.1 408 ")).length).toBeGreaterThan(0);
    expect(agent.closed()).toBe(false);
  });

  test("a connection counts as authenticated after an admin-token, join-token, node-credential or dashboard request; not after a wrong token or an open route", async () => {
    const s = await start();
    const l = s.adminListener;
    const joined = await s.heartbeat("n1");
    const credential = ((await joined.json()) as { credential: string }).credential;
    // Fetch's own keep-alive connections would count too: only the raw ones below are open.
    await settle(() => l.conns.size === 0 || [...l.conns].every((c) => !c.unauthenticated), "no unauthenticated connection left");
    const before = l.unauth.size;
    const body = (name: string) => JSON.stringify({ ...heartbeat({ name }), address: "127.0.0.1" });
    const post = (path: string, token: string | undefined, b: string, type = "application/json") =>
      `POST ${path} HTTP/1.1\r\nHost: h\r\n${token ? `Authorization: Bearer ${token}\r\n` : ""}Content-Type: ${type}\r\nContent-Length: ${b.length}\r\n\r\n${b}`;
    const get = (path: string, token?: string) => `GET ${path} HTTP/1.1\r\nHost: h\r\n${token ? `Authorization: Bearer ${token}\r\n` : ""}\r\n`;
    const cases: [string, string, string, boolean][] = [
      ["admin token", get("/api/v1/nodes", s.adminToken), "200", true],
      ["join token", post("/agent/v1/heartbeat", s.joinToken, body("n2")), "200", true],
      ["node credential", post("/agent/v1/heartbeat", credential, body("n1")), "200", true],
      ["dashboard, bearer", get("/ui", s.adminToken), "200", true],
      ["dashboard, sign-in form", post("/ui/login", undefined, `token=${encodeURIComponent(s.adminToken)}`, "application/x-www-form-urlencoded"), "303", true],
      ["wrong admin token", get("/api/v1/nodes", "nope"), "401", false],
      ["wrong agent token", post("/agent/v1/heartbeat", "nope", body("n3")), "401", false],
      ["open route", get("/healthz"), "200", false],
    ];
    for (const [what, request, status, vouched] of cases) {
      const c = await raw(port(s.adminUrl));
      c.sock.write(request);
      await settle(() => /^HTTP\/1\.1 \d{3} /.test(c.text()), `an answer to the ${what} request`);
      expect({ what, status: c.text().slice(9, 12), unauthenticated: l.unauth.size - before }).toEqual({ what, status, unauthenticated: vouched ? 0 : 1 });
      c.sock.destroy();
      await settle(() => l.unauth.size === before, "the connection to go");
    }
  });

  test("the router's caps and the admin listener's are separate, and fitted under the open-file limit", async () => {
    const s = await start({ max_connections: 100, max_connections_per_address: 500, admin_max_connections: 50, admin_max_connections_per_address: 10 });
    expect(s.caps.router).toEqual({ total: 100, perAddress: 100 });
    expect(s.caps.admin).toEqual({ total: 50, perAddress: 10 });
    expect(s.adminListener.maxConnections).toBe(50);
    expect(s.adminListener.maxConnectionsPerAddress).toBe(10);
  });
});
