// The demo's banner names the binary the way the user ran it: started as ./dist/llmgw (what
// `npm run demo` does), it says `./dist/llmgw status`, not `llmgw status`, which no shell finds
// on a fresh clone; and the command it prints runs as printed, from the same directory.

import { afterAll, expect, test } from "bun:test";
import { mkdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { scratchWithBinary } from "../helpers/binary";
import { freePort } from "../helpers/ports";

let demo: Bun.Subprocess<"ignore", "pipe", "ignore"> | undefined;
afterAll(async () => {
  demo?.kill("SIGTERM");
  await demo?.exited;
});

/** Reads a stream until `done` holds for what came so far. */
async function readUntil(stream: ReadableStream<Uint8Array>, done: (text: string) => boolean, ms: number): Promise<string> {
  const reader = stream.getReader();
  const dec = new TextDecoder();
  let text = "";
  const deadline = Date.now() + ms;
  while (!done(text)) {
    if (Date.now() > deadline) throw new Error(`not within ${ms} ms; so far:\n${text}`);
    const { done: end, value } = await reader.read();
    if (end) throw new Error(`the demo's output ended; so far:\n${text}`);
    text += dec.decode(value, { stream: true });
  }
  reader.releaseLock();
  return text;
}

test("started as ./dist/llmgw, the banner says ./dist/llmgw, and its status command runs as printed", async () => {
  const { dir, bin } = scratchWithBinary();
  mkdirSync(join(dir, "dist"));
  renameSync(bin, join(dir, "dist", "llmgw"));
  demo = Bun.spawn(["./dist/llmgw", "demo", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`, "--engine-base-port", String(freePort(900))], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "ignore",
  });
  const banner = await readUntil(demo.stdout, (t) => t.includes("Ctrl-C stops"), 30_000);
  const tour = banner.slice(banner.indexOf("Try, in another terminal")).split("\n").slice(1).filter((l) => l.startsWith("  "));
  expect(tour.length).toBe(6);
  for (const line of tour) expect(line).toMatch(/^ {2}\.\/dist\/llmgw \S/);
  expect(banner).not.toMatch(/^ {2}llmgw /m);
  // What the user copies: the status line's command, up to its description.
  const status = tour.find((l) => l.includes(" status"))!.trim().split(/ {2,}/)[0]!;
  expect(status).toBe("./dist/llmgw status");
  const p = Bun.spawn(["sh", "-c", status], { cwd: dir, env: { PATH: "/usr/bin:/bin", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  expect({ code, err }).toEqual({ code: 0, err: "" });
  expect(out).toMatch(/^llmgw \S+\nNodes {5}4 nodes/);
}, 60_000);
