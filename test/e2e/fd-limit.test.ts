// The compiled binary on a small open-file limit (ulimit -n 256), its router flooded with
// more connections than it has descriptors: the router sheds what is over its cap instead of
// running out, so the admin/agent listener can still accept, and heartbeats are answered.

import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { heartbeat } from "../helpers/fleet";
import { scratchWithBinary, until } from "../helpers/binary";

const procs: Bun.Subprocess[] = [];
const sockets: Socket[] = [];
afterAll(async () => {
  for (const s of sockets) s.destroy();
  for (const p of procs) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
});

test("a router flood past the open-file limit is shed, and heartbeats keep being answered", async () => {
  const { dir, bin } = scratchWithBinary();
  // `ulimit -n` in sh sets the soft and the hard limit: the binary cannot raise it.
  const proc = Bun.spawn(["/bin/sh", "-c", 'ulimit -n 256 && exec "$0" serve --admin-listen 127.0.0.1:0 --listen 127.0.0.1:0', bin], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  procs.push(proc);
  let logs = "";
  const drain = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) logs += new TextDecoder().decode(chunk);
  };
  void drain(proc.stdout);
  void drain(proc.stderr);
  const info = await until("server.json", () => {
    try {
      return JSON.parse(readFileSync(join(dir, "llmgw-data", "server.json"), "utf8")) as { admin_url: string; router_url: string };
    } catch {
      return undefined;
    }
  });
  const joinToken = readFileSync(join(dir, "llmgw-data", "join.token"), "utf8").trim();
  // Told at start that the caps were lowered to fit.
  await until("the caps warning", () => logs.includes("connection caps lowered to fit the open-file limit of 256") || undefined);

  // 400 connections that say nothing, more than the process has descriptors.
  const routerPort = Number(new URL(info.router_url).port);
  let shed = 0;
  let closed = 0;
  await Promise.all(
    Array.from({ length: 400 }, () =>
      new Promise<void>((resolve) => {
        const s = connect(routerPort, "127.0.0.1", () => resolve());
        s.on("data", (d) => {
          if (d.toString("latin1").startsWith("HTTP/1.1 503 ")) shed++;
        });
        s.on("error", () => resolve());
        s.on("close", () => void closed++);
        sockets.push(s);
      }),
    ),
  );
  // Every one over the cap is closed at once, not left waiting; the first of them are told 503.
  await until("connections over the router's cap to be shed", () => closed >= 300 || undefined);
  expect(shed).toBeGreaterThan(0);
  expect(closed).toBeLessThan(400);

  // The admin/agent listener still accepts and answers, on fresh connections each time.
  for (let i = 0; i < 10; i++) {
    const r = await fetch(`${info.admin_url}/agent/v1/heartbeat`, {
      method: "POST",
      headers: { authorization: `Bearer ${joinToken}`, "content-type": "application/json", connection: "close" },
      body: JSON.stringify({ ...heartbeat({ name: `n${i}` }), address: "127.0.0.1" }),
      signal: AbortSignal.timeout(5000),
    });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
  }
}, 60_000);
