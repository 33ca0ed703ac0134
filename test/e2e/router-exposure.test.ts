// A router listening beyond loopback with no API key required serves every model to anyone who
// reaches it: `serve` says so when it starts and `status` says so for as long as it lasts. The
// same for an agent API beyond loopback without --approve-nodes: the join token alone gets a
// node replicas, prompts and the catalog's env.

import { afterEach, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { run, scratchWithBinary, until } from "../helpers/binary";

const procs: Bun.Subprocess[] = [];
afterEach(async () => {
  for (const p of procs.splice(0)) {
    p.kill("SIGTERM");
    await p.exited;
  }
});

async function serve(listenHost: string, extra: string[] = [], adminHost = "127.0.0.1") {
  const { dir, bin } = scratchWithBinary();
  const p = Bun.spawn([bin, "serve", "--admin-listen", `${adminHost}:0`, "--listen", `${listenHost}:0`, "--log-level", "warn", ...extra], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "", NO_COLOR: "1" },
    stdout: "pipe",
    stderr: "pipe",
  });
  procs.push(p);
  let stderr = "";
  let stdout = "";
  void (async () => {
    for await (const chunk of p.stderr) stderr += new TextDecoder().decode(chunk);
  })();
  void (async () => {
    for await (const chunk of p.stdout) stdout += new TextDecoder().decode(chunk);
  })();
  await until("server.json", () => {
    try {
      return JSON.parse(readFileSync(join(dir, "llmgw-data", "server.json"), "utf8")) as object;
    } catch {
      return undefined;
    }
  });
  await until("the start lines", () => (stderr.includes("llmgw serve: admin API on") ? true : undefined));
  return { dir, bin, stderr: () => stderr, stdout: () => stdout };
}

describe("an open router is said out loud", () => {
  test("on 0.0.0.0 with no API key required: at start and in status", async () => {
    const s = await serve("0.0.0.0");
    await until("the warning", () => (s.stderr().includes("router: open, no API key required") ? true : undefined));
    const status = run(s.bin, ["status"], { cwd: s.dir });
    expect(status.code).toBe(0);
    // Piped: 80 columns, the line's continuation under its text.
    expect(status.stdout.replace(/\n {10}/g, " ")).toMatch(/Router +open, no API key required: anyone who reaches 0\.0\.0\.0:\d+ can use every model/);
    const json = JSON.parse(run(s.bin, ["status", "-o", "json"], { cwd: s.dir }).stdout) as { router: { open: boolean; api_key_required: boolean } };
    expect(json.router).toMatchObject({ open: true, api_key_required: false });
  }, 30_000);

  test("with --require-api-key, or on loopback only, nothing is said", async () => {
    for (const s of [await serve("0.0.0.0", ["--require-api-key"]), await serve("127.0.0.1")]) {
      const status = run(s.bin, ["status"], { cwd: s.dir });
      expect(status.code).toBe(0);
      expect(status.stdout).not.toContain("Router ");
      expect(s.stderr()).not.toContain("router: open");
      expect((JSON.parse(run(s.bin, ["status", "-o", "json"], { cwd: s.dir }).stdout) as { router: { open: boolean } }).router.open).toBe(false);
    }
  }, 30_000);
});

describe("nodes joining without approval are said out loud", () => {
  // The admin listener on 0.0.0.0 is what is being tested: only there does the warning apply.
  test("an agent API beyond loopback without --approve-nodes: a warning at start and in status's attention list", async () => {
    const s = await serve("127.0.0.1", [], "0.0.0.0");
    await until("the warning", () => (s.stderr().includes("nodes join without approval") ? true : undefined));
    expect(s.stderr()).toMatch(/llmgw serve: nodes join without approval: anyone who holds the join token and reaches 0\.0\.0\.0:\d+ is given replicas, prompts and the catalog's env \(--approve-nodes/);
    // The log line too (warn level, what journald keeps).
    await until("the log line", () => (s.stdout().includes('"msg":"nodes join without approval') ? true : undefined));
    const status = run(s.bin, ["status"], { cwd: s.dir });
    expect(status.code).toBe(0);
    // Piped: 80 columns, an attention line's continuations indented by 4.
    expect(status.stdout.replace(/\n {4}/g, " ")).toMatch(/Attention\n(?: {2}.*\n)* {2}nodes join without approval: anyone who holds the join token and reaches 0\.0\.0\.0:\d+ is given replicas, prompts and the catalog's env \(serve --approve-nodes\)/);
    const json = JSON.parse(run(s.bin, ["status", "-o", "json"], { cwd: s.dir }).stdout) as { node_admission: { open: boolean; approve_nodes: boolean } };
    expect(json.node_admission).toMatchObject({ open: true, approve_nodes: false });
  }, 30_000);

  test("with --approve-nodes, or on loopback only, nothing is said", async () => {
    for (const s of [await serve("127.0.0.1", ["--approve-nodes"], "0.0.0.0"), await serve("127.0.0.1")]) {
      const status = run(s.bin, ["status"], { cwd: s.dir });
      expect(status.code).toBe(0);
      expect(status.stdout).not.toContain("without approval");
      expect(s.stderr()).not.toContain("without approval");
      expect((JSON.parse(run(s.bin, ["status", "-o", "json"], { cwd: s.dir }).stdout) as { node_admission: { open: boolean } }).node_admission.open).toBe(false);
    }
  }, 30_000);
});
