// `llmgw agent --server A,B` through the compiled binary, A down from the start: the agent
// registers with B, its log names the one switch, and `join-command --server-list` prints the
// list form for an operator to copy.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
const spawned: Array<{ kill(sig?: string | number): void; exited: Promise<number> }> = [];

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir);
});
afterAll(async () => {
  for (const p of spawned) {
    p.kill("SIGKILL");
    await p.exited;
  }
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
});

/** A port nothing listens on (asked of the OS, then let go). */
async function deadPort(): Promise<number> {
  const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const port = s.port!;
  await s.stop(true);
  return port;
}

describe("agent with a list of servers", () => {
  test("--help shows the list form", () => {
    const help = run(bin, ["agent", "--help"], { cwd: dir });
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("--server URL[,URL…]");
    expect(help.stdout).toContain("leader.epoch");
  });

  test("the first server down from the start: registers with the second, one switch in the log, a clean stop", async () => {
    const dead = `http://127.0.0.1:${await deadPort()}`;
    const p = Bun.spawn(
      [bin, "agent", "--server", `${dead},${serve.adminUrl}`, "--token-file", join(dir, "llmgw-data", "join.token"), "--name", "sim-e2e", "--address", "127.0.0.1", "--simulate", "H100-80GB:2", "--logs-listen", "off", "--state-dir", join(dir, "agent-e2e")],
      { cwd: dir, env: { PATH: process.env.PATH ?? "" }, stdout: "pipe", stderr: "pipe" },
    );
    spawned.push(p);
    let err = "";
    const reader = p.stderr.getReader();
    const registered = `llmgw agent: node sim-e2e (127.0.0.1) registered with ${serve.adminUrl}`;
    await until("the agent registered", async () => {
      const { value, done } = await reader.read();
      if (done) throw new Error(`the agent exited: ${err}`);
      err += new TextDecoder().decode(value);
      return err.includes(registered);
    }, 20_000);
    const node = await until("the node ready on the head node", async () => {
      const res = await fetch(`${serve.adminUrl}/api/v1/nodes/sim-e2e`, { headers: { authorization: `Bearer ${serve.adminToken}` } });
      const n = res.status === 200 ? ((await res.json()) as { state: string; gpu_total: number }) : undefined;
      return n?.state === "ready" ? n : undefined;
    });
    expect(node.gpu_total).toBe(2);
    p.kill("SIGTERM");
    expect(await p.exited).toBe(0);
    const lines = (await new Response(p.stdout).text()).split("\n").filter(Boolean).map((l) => JSON.parse(l) as { level: number; msg: string; from?: string; to?: string; reason?: string });
    const switched = lines.filter((l) => l.msg.startsWith("switching to"));
    expect(switched).toHaveLength(1);
    expect(switched[0]).toMatchObject({ level: 40, from: dead, to: serve.adminUrl });
    expect(switched[0]!.reason).toStartWith("did not answer");
  });

  test("join-command --server-list prints the list form, and names a bad URL", () => {
    const ok = run(bin, ["join-command", "--server-list", "http://10.0.0.1:8001,http://10.0.0.2:8001/"], { cwd: dir });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`llmgw agent --server http://10.0.0.1:8001,http://10.0.0.2:8001 --token-file ${join(dir, "llmgw-data", "join.token")}`);
    const bad = run(bin, ["join-command", "--server-list", "http://10.0.0.1:8001,10.0.0.2"], { cwd: dir });
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--server-list: "10.0.0.2" (URL 2 of 2) is not a URL like http://10.0.0.1:8001');
  });
});
