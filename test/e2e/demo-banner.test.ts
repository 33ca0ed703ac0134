// The demo's banner names the binary the way the user ran it: started as ./dist/llmgw (what
// `npm run demo` does), it says `./dist/llmgw status`, not `llmgw status`, which no shell finds
// on a fresh clone; and the command it prints runs as printed, from the same directory. The
// demo's tiny-llm has no weights on any node: its node fetches them from the demo's stand-in
// Hub (the replica shown fetching meanwhile), then starts it.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import type { ReplicaView } from "../../src/protocol/views";
import { scratchWithBinary, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";

let demo: Bun.Subprocess<"ignore", "pipe", "ignore"> | undefined;
let dir = "";
let banner = "";
const adminPort = freePort();
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

beforeAll(async () => {
  const scratch = scratchWithBinary();
  dir = scratch.dir;
  mkdirSync(join(dir, "dist"));
  renameSync(scratch.bin, join(dir, "dist", "llmgw"));
  demo = Bun.spawn(["./dist/llmgw", "demo", "--admin-listen", `127.0.0.1:${adminPort}`, "--listen", `127.0.0.1:${freePort()}`, "--engine-base-port", String(freePort(900))], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "ignore",
  });
  banner = await readUntil(demo.stdout, (t) => t.includes("Ctrl-C stops"), 30_000);
}, 40_000);

test("started as ./dist/llmgw, the banner says ./dist/llmgw, and its status command runs as printed", async () => {
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

test("tiny-llm's node fetches its weights from the demo's stand-in Hub, shown as fetching, then the replica is ready", async () => {
  const hubUrl = /^ {2}Hub +(http:\/\/\S+)/m.exec(banner)?.[1];
  expect(hubUrl).toBeDefined();
  const data = join(dir, "llmgw-data");
  const token = readFileSync(join(data, "admin.token"), "utf8").trim();
  const replicas = async () => (await (await fetch(`http://127.0.0.1:${adminPort}/api/v1/replicas`, { headers: { authorization: `Bearer ${token}` } })).json()) as ReplicaView[];
  const notes = new Set<string>();
  const ready = await until("tiny-llm's replica ready", async () => {
    const r = (await replicas()).find((x) => x.model === "tiny-llm");
    if (r?.state === "fetching" && r.error) notes.add(r.error);
    return r?.state === "ready" ? r : undefined;
  }, { timeoutMs: 40_000, everyMs: 50 });
  // Seen waiting for its weights, with how far and from where.
  expect([...notes].some((n) => /^fetching weights: \d+ % \(.+\) from hub/.test(n))).toBe(true);
  // Its bytes came from the stand-in Hub, each once, into the node's own models directory.
  const file = join(data, "hub", "demo", "tiny-llm", "model.safetensors");
  const served = (await (await fetch(`${hubUrl}/_fake/served`)).json()) as { byFile: Record<string, number> };
  expect(served.byFile["demo/tiny-llm/model.safetensors"]).toBe(readFileSync(file).length);
  const commit = ((await (await fetch(`${hubUrl}/_fake/commit?repo=demo/tiny-llm&ref=main`)).json()) as { sha: string }).sha;
  const node = ready.shards[0]!.node;
  const copy = join(data, "agents", node, "models", "models--demo--tiny-llm", "snapshots", commit, "model.safetensors");
  expect(readFileSync(copy)).toEqual(readFileSync(file));
}, 60_000);
