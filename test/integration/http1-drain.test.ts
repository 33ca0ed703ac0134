// The router's listener stopping gracefully (Http1Server.drain, what a restarted `serve` runs):
// the port is free at once, an idle keep-alive connection is closed, a streamed answer under way
// goes out whole and its connection is closed after it, and only what outlives the drain timeout is cut.

import { afterEach, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { type ClientExchange, Http1Server } from "../../src/http/server";
import { until } from "../helpers/until";

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const errorBody = (status: number, message: string, code: string) => JSON.stringify({ error: { status, message, code } });

/** A server whose /stream answers a chunk now and the rest when the test says; anything else at once. */
function serve() {
  const streams: ClientExchange[] = [];
  const server = new Http1Server({
    hostname: "127.0.0.1",
    port: 0,
    maxBodyBytes: 1024,
    errorBody,
    handler: (ex) => {
      if (ex.path !== "/stream") return ex.respond(200, { "content-type": "text/plain" }, "ok");
      ex.stream(200, { "content-type": "text/event-stream" }, new TextEncoder().encode("data: first\n\n"));
      streams.push(ex);
    },
  });
  const port = server.listen();
  cleanups.push(() => server.stop());
  return { server, port, streams };
}

/** A raw connection that keeps every byte it reads and whether the server closed it. */
function client(port: number): Promise<{ socket: Socket; text: () => string; closed: () => boolean }> {
  return new Promise((resolve, reject) => {
    let got = "";
    let ended = false;
    const socket = connect({ host: "127.0.0.1", port }, () => resolve({ socket, text: () => got, closed: () => ended }));
    socket.on("data", (d) => (got += d.toString("latin1")));
    socket.on("close", () => (ended = true));
    socket.on("error", reject);
    cleanups.push(() => socket.destroy());
  });
}

const refused = (port: number) =>
  new Promise<boolean>((resolve) => {
    const s = connect({ host: "127.0.0.1", port });
    s.on("connect", () => (s.destroy(), resolve(false)));
    s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code === "ECONNREFUSED"));
  });

test("drain: new connections are refused at once, an idle keep-alive connection is closed, a stream under way is answered whole, then its connection closed", async () => {
  const { server, port, streams } = serve();
  const idle = await client(port);
  idle.socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  await until("the first answer", () => idle.text().endsWith("ok"), 5000);
  const streaming = await client(port);
  streaming.socket.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  await until("the stream's first chunk", () => streams.length === 1 && streaming.text().includes("data: first"), 5000);

  const drained = server.drain(10_000, 10);
  await until("the idle connection closed", () => idle.closed(), 5000);
  expect(await refused(port)).toBe(true);
  expect(streaming.closed()).toBe(false);

  streams[0]!.write(new TextEncoder().encode("data: second\n\n"));
  streams[0]!.end();
  expect(await drained).toBe(0);
  await until("the streaming connection closed", () => streaming.closed(), 5000);
  const text = streaming.text();
  expect(text).toContain("data: second");
  expect(text).toEndWith("0\r\n\r\n");
});

test("drain: what is still in flight when the timeout passes is cut, and counted", async () => {
  const { server, port, streams } = serve();
  const streaming = await client(port);
  streaming.socket.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  await until("the stream under way", () => streams.length === 1, 5000);
  expect(await server.drain(100, 10)).toBe(1);
  await until("the streaming connection closed", () => streaming.closed(), 5000);
  expect(streaming.text()).not.toContain("0\r\n\r\n");
});
