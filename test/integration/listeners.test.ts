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
  return { sock, text: () => got, closed: () => closed };
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

  test("a head trickled a byte per idle period is cut at head_timeout with 408, on both listeners", async () => {
    const s = await start({ head_timeout: "30s" });
    // The router's listener is its own; read it from the router for the test.
    const routerListener = (s.router as unknown as { server: typeof s.adminListener }).server;
    for (const [url, listener] of [[s.adminUrl, s.adminListener], [s.routerUrl, routerListener]] as const) {
      // Each listener reads the clock at its sweeps: bring this one up to the present first.
      listener.sweep();
      const c = await raw(port(url));
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

  test("the router's caps and the admin listener's are separate, and fitted under the open-file limit", async () => {
    const s = await start({ max_connections: 100, max_connections_per_address: 500, admin_max_connections: 50, admin_max_connections_per_address: 10 });
    expect(s.caps.router).toEqual({ total: 100, perAddress: 100 });
    expect(s.caps.admin).toEqual({ total: 50, perAddress: 10 });
    expect(s.adminListener.maxConnections).toBe(50);
    expect(s.adminListener.maxConnectionsPerAddress).toBe(10);
  });
});
