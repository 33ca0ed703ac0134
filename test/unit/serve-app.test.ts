// The adapter that serves a Hono app on the HTTP/1.1 server (src/api/listener.ts), as the
// admin/agent listener does: the peer's address for getConnInfo, whole and streamed answers,
// the Request's signal aborted when the client leaves, and what it refuses by itself.

import { afterEach, describe, expect, test } from "bun:test";
import { Hono } from "hono";
import { getConnInfo } from "hono/bun";
import { connect } from "node:net";
import { serveApp } from "../../src/api/listener";
import { Http1Server } from "../../src/http/server";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const errorBody = (_status: number, message: string, code: string) => JSON.stringify({ error: { code, message } });

function serve(app: Hono): number {
  const server = new Http1Server({ hostname: "127.0.0.1", port: 0, maxBodyBytes: 1024 * 1024, errorBody, handler: serveApp(app, { scheme: "http", errorBody }) });
  const port = server.listen();
  cleanups.push(() => server.stop());
  return port;
}

/** Waits for I/O (not time) until f() holds. */
async function settle(f: () => boolean, what: string, ms = 3000): Promise<void> {
  const t0 = performance.now();
  while (!f()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

async function raw(port: number, localAddress = "127.0.0.1") {
  let got = "";
  let closed = false;
  const sock = connect({ host: "127.0.0.1", port, localAddress });
  sock.on("data", (d) => void (got += d.toString("latin1")));
  sock.on("close", () => void (closed = true));
  sock.on("error", () => {});
  await new Promise<void>((resolve) => sock.once("connect", () => resolve()));
  cleanups.push(() => sock.destroy());
  return { sock, text: () => got, closed: () => closed };
}

describe("serving a Hono app on the HTTP/1.1 server", () => {
  test("getConnInfo from 'hono/bun' sees the peer's address, family and port", async () => {
    const app = new Hono();
    app.get("/who", (c) => c.json(getConnInfo(c).remote));
    const port = serve(app);
    const c = await raw(port, "127.0.0.2");
    const localPort = c.sock.localPort;
    c.sock.write("GET /who HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    await settle(() => c.closed(), "the answer");
    const body = JSON.parse(c.text().slice(c.text().indexOf("\r\n\r\n") + 4)) as { address: string; addressType: string; port: number };
    expect(body.address).toBe("127.0.0.2");
    expect(body.addressType).toBe("IPv4");
    expect(body.port).toBe(localPort!);
  });

  test("a whole answer goes out with its length, headers as set (two Set-Cookie lines), a body and query as sent", async () => {
    const app = new Hono();
    app.post("/echo", async (c) => {
      c.header("set-cookie", "a=1", { append: true });
      c.header("set-cookie", "b=2", { append: true });
      return c.json({ body: await c.req.text(), q: c.req.query("q"), url: c.req.url });
    });
    const port = serve(app);
    const r = await fetch(`http://127.0.0.1:${port}/echo?q=x%20y`, { method: "POST", body: "héllo" });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-length")).not.toBeNull();
    expect(r.headers.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect(await r.json()).toEqual({ body: "héllo", q: "x y", url: `http://127.0.0.1:${port}/echo?q=x%20y` });
  });

  test("a streamed answer goes out chunk by chunk as it is produced", async () => {
    let push: ((s: string) => void) | undefined;
    let close: (() => void) | undefined;
    const app = new Hono();
    app.get("/follow", () => {
      const enc = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        start(ctl) {
          push = (s) => ctl.enqueue(enc.encode(s));
          close = () => ctl.close();
        },
      });
      return new Response(body, { headers: { "content-type": "text/plain" } });
    });
    const port = serve(app);
    const c = await raw(port);
    c.sock.write("GET /follow HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => push !== undefined, "the handler");
    push!("line 1\n");
    await settle(() => c.text().includes("line 1"), "the first chunk before the stream ends");
    expect(c.text()).toContain("transfer-encoding: chunked");
    push!("line 2\n");
    await settle(() => c.text().includes("line 2"), "the second chunk");
    close!();
    await settle(() => c.text().endsWith("0\r\n\r\n"), "the last chunk");
  });

  test("the Request's signal is aborted when the client leaves a long poll", async () => {
    let aborted = false;
    let waiting = false;
    const app = new Hono();
    app.get("/poll", async (c) => {
      waiting = true;
      await new Promise<void>((resolve) => c.req.raw.signal.addEventListener("abort", () => resolve()));
      aborted = true;
      return c.json({});
    });
    const port = serve(app);
    const c = await raw(port);
    c.sock.write("GET /poll HTTP/1.1\r\nHost: h\r\n\r\n");
    await settle(() => waiting, "the long poll to wait");
    c.sock.destroy();
    await settle(() => aborted, "the signal to abort");
  });

  test("made-up and lower-case methods are 405 (a Request would turn them into GET); a malformed Host is 400", async () => {
    const app = new Hono();
    app.get("/x", (c) => c.text("got"));
    const port = serve(app);
    for (const m of ["FOO", "get"]) {
      const c = await raw(port);
      c.sock.write(`${m} /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n`);
      await settle(() => c.closed(), `the answer to ${m}`);
      expect(c.text()).toStartWith("HTTP/1.1 405 ");
      expect(c.text()).toContain("allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH");
    }
    const c = await raw(port);
    c.sock.write("GET /x HTTP/1.1\r\nHost: a/b@c\r\nConnection: close\r\n\r\n");
    await settle(() => c.closed(), "the answer to a bad Host");
    expect(c.text()).toStartWith("HTTP/1.1 400 ");
  });

  test("a handler that throws is a 500 in the given error shape, and the connection goes on", async () => {
    const app = new Hono();
    app.get("/boom", () => {
      throw new Error("boom");
    });
    app.onError((_e, c) => c.json({ error: { code: "internal", message: "x" } }, 500));
    app.get("/ok", (c) => c.text("ok"));
    const port = serve(app);
    expect((await fetch(`http://127.0.0.1:${port}/boom`)).status).toBe(500);
    expect(await (await fetch(`http://127.0.0.1:${port}/ok`)).text()).toBe("ok");
  });
});
