// The compiled binary's CLI against a real head node on 127.0.0.1 holding hostile strings (put
// there past the edge's check, as data from before it would be): with NO_COLOR and a pipe,
// status, nodes, nodes NAME, events, replicas and models print no control character but
// newline, and no ESC at all; `llmgw logs` passes an engine's log through with its newlines and
// nothing that drives a terminal; an error quoting the server is sanitised too.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { ModelSpec } from "../../src/protocol/catalog";
import { scratchWithBinary } from "../helpers/binary";
import { type TestServer, testServer } from "../helpers/server";

// eslint-disable-next-line no-control-regex
const CONTROL_BUT_NL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

let s: TestServer;
let bin: string;
let dir: string;
let fake: ReturnType<typeof Bun.serve>;

beforeAll(async () => {
  ({ bin, dir } = scratchWithBinary());
  s = await testServer();
  // Past the edge (which refuses this class) straight to the controller.
  const spec = ModelSpec.parse({ name: "m", profiles: [{ name: "p", engine: "fake", gpu_class: "H100" }] });
  await s.seed.models([{ ...spec, pool: "team\u001b[2J", profiles: [{ ...spec.profiles[0]!, gpu_class: "\u001b[2J\u001b[41m FAKE BANNER" }] }]);
  await s.seed.heartbeat({
    node: "evil",
    address: "10.0.0.9\u001b]8;;http://x/\u001b\\",
    agent_version: "\u001b]0;pwned\u0007",
    labels: { "rack\u001b[31m": "r1\u009b2J", zone: "\u202eeu" },
    fabrics: [],
    gpus: [{ index: 0, uuid: "GPU-\r\u001b[1A", name: "NVIDIA\u0000H100", class: "\u001b[2J\u001b[41m FAKE BANNER", memory_mib: 81559, healthy: true, parent: null }],
    models: [],
    replicas: [],
    logs_port: null,
  });
  await s.tick();
  // An admin API stand-in for what only an agent could serve: an engine log, and an error.
  fake = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      const u = new URL(req.url);
      if (u.pathname.endsWith("/logs")) return new Response("INFO loading\r\n 50%\r 100%\n\u001b[31mERROR\u001b[0m \u001b]0;pwned\u0007done\tok\n");
      return Response.json({ error: { code: "invalid_request", message: "gpus.0.class: \u001b[2Jbad" } }, { status: 400 });
    },
  });
});

afterAll(async () => {
  await s?.stop();
  fake?.stop(true);
});

/** Runs the binary without blocking this process, which serves the head node it talks to. */
async function cli(server: string, ...args: string[]) {
  const p = Bun.spawn([bin, ...args, "--server", server, "--token", s.adminToken], { cwd: dir, env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, stdout, stderr };
}

test("status, nodes, nodes NAME, events, replicas and models print no control character but newline, and no ESC", async () => {
  const views: [string, string[]][] = [
    ["status", ["status"]],
    ["nodes", ["nodes"]],
    ["nodes -o wide", ["nodes", "-o", "wide"]],
    ["nodes evil", ["nodes", "evil"]],
    ["events", ["events"]],
    ["replicas -o wide", ["replicas", "-o", "wide"]],
    ["models -o wide", ["models", "-o", "wide"]],
    ["models m", ["models", "m"]],
  ];
  for (const [what, args] of views) {
    const r = await cli(s.adminUrl, ...args);
    expect({ what, code: r.code, stderr: r.stderr }).toEqual({ what, code: 0, stderr: "" });
    expect({ what, control: CONTROL_BUT_NL.exec(r.stdout)?.[0] ?? null }).toEqual({ what, control: null });
    expect(r.stdout).not.toContain("\u001b");
  }
  // What the node claimed is shown, spelled out.
  expect((await cli(s.adminUrl, "nodes", "evil")).stdout).toContain("Agent:      \\x1b]0;pwned\\x07");
  expect((await cli(s.adminUrl, "status")).stdout).toContain("\\x1b[2J\\x1b[41m FAKE BANNER");
  // JSON stays faithful: the same strings, JSON-escaped.
  const json = await cli(s.adminUrl, "nodes", "evil", "-o", "json");
  expect(json.stdout).not.toContain("\u001b");
  expect((JSON.parse(json.stdout) as { agent_version: string }).agent_version).toBe("\u001b]0;pwned\u0007");
});

test("llmgw logs keeps an engine's lines and tabs, makes CR a newline, and spells out escapes", async () => {
  const r = await cli(`http://127.0.0.1:${fake.port}`, "logs", "r-1");
  expect(r.code).toBe(0);
  expect(r.stdout).toBe("INFO loading\n 50%\n 100%\n\\x1b[31mERROR\\x1b[0m \\x1b]0;pwned\\x07done\tok\n");
});

test("an error message quoting the server is sanitised", async () => {
  const r = await cli(`http://127.0.0.1:${fake.port}`, "status");
  expect(r.code).not.toBe(0);
  expect(r.stderr).toContain("gpus.0.class: \\x1b[2Jbad");
  expect(r.stderr).not.toContain("\u001b");
});
