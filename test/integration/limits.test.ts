// Limits on every listener: body size, header size, and slow clients. A slowloris-style crowd
// of connections that never finish their headers must not stop real requests from being
// served, on the admin listener or the router.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { HEARTBEAT_LIMITS } from "../../src/protocol/heartbeat";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
beforeAll(async () => {
  s = await testServer({ max_body_bytes: 64 * 1024 });
});
afterAll(() => s.stop());

function port(url: string): number {
  return Number(new URL(url).port);
}

/** Opens `n` connections that send a request line and then one header byte at a time, slowly. */
async function slowClients(p: number, n: number): Promise<{ sockets: Socket[]; stop: () => void }> {
  const sockets: Socket[] = [];
  await Promise.all(
    Array.from({ length: n }, () =>
      new Promise<void>((resolve) => {
        const sock = connect(p, "127.0.0.1", () => {
          sock.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ");
          resolve();
        });
        sock.on("error", () => resolve());
        sockets.push(sock);
      }),
    ),
  );
  // Real: the crowd is load on real sockets, each a byte every 200 ms, while real requests are timed.
  const drip = setInterval(() => {
    for (const s of sockets) if (!s.destroyed) s.write("a");
  }, 200);
  return { sockets, stop: () => (clearInterval(drip), sockets.forEach((s) => s.destroy())) };
}

describe("limits", () => {
  test("request bodies over the limit are refused on every listener with 413", async () => {
    const big = "x".repeat(9 * 1024 * 1024);
    expect((await s.admin("/api/v1/apply", { method: "POST", body: big })).status).toBe(413);
    expect((await fetch(`${s.adminUrl}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${s.joinToken}` }, body: big })).status).toBe(413);
    const r = await fetch(`${s.routerUrl}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "m", pad: "x".repeat(100 * 1024) }) });
    expect(r.status).toBe(413);
  });

  test("heartbeats over the per-message limits are refused naming the list", async () => {
    const many = heartbeat({ name: "n", gpus: Array(HEARTBEAT_LIMITS.gpus + 1).fill("H100-80GB") });
    const res = await s.agent(many);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain("gpus");
    const models = { ...heartbeat({ name: "n" }), models: Array.from({ length: HEARTBEAT_LIMITS.models + 1 }, (_, i) => `m${i}`) };
    expect((await s.agent(models)).status).toBe(400);
  });

  test("oversized headers are refused with 431, not buffered without end", async () => {
    for (const url of [s.adminUrl, s.routerUrl]) {
      // A raw socket and a head over the 16 KiB limit that arrives in one read (20 KiB, one
      // loopback segment): nothing follows the 431, so no reset can overtake the answer.
      const text = await new Promise<string>((resolve, reject) => {
        let got = "";
        const sock = connect(port(url), "127.0.0.1", () => sock.write(`GET /healthz HTTP/1.1\r\nHost: h\r\nX-Big: ${"y".repeat(20 * 1024)}`));
        sock.on("data", (d: Buffer) => {
          got += d.toString("latin1");
        });
        sock.on("end", () => {
          sock.destroy();
          resolve(got);
        });
        sock.on("error", reject);
      });
      expect(text).toStartWith("HTTP/1.1 431 ");
    }
  });

  test("a crowd of slow clients does not stop real requests on either listener", async () => {
    const crowd = 400;
    const a = await slowClients(port(s.adminUrl), crowd);
    const b = await slowClients(port(s.routerUrl), crowd);
    try {
      for (let i = 0; i < 5; i++) {
        const t = performance.now();
        expect((await fetch(`${s.adminUrl}/healthz`)).status).toBe(200);
        expect((await fetch(`${s.routerUrl}/v1/models`)).status).toBe(200);
        expect((await s.admin("/api/v1/summary")).status).toBe(200);
        expect(performance.now() - t).toBeLessThan(1000);
      }
      expect(a.sockets.filter((x) => !x.destroyed).length + b.sockets.filter((x) => !x.destroyed).length).toBeGreaterThan(crowd);
    } finally {
      a.stop();
      b.stop();
    }
  });
});
