// Runs the compiled binary (dist/llmgw) from a scratch directory holding nothing else, the way
// an operator runs it after copying it to a head node.

import { copyFileSync, existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { newNodeCredential } from "../../src/protocol/heartbeat";
import { until } from "./until";
import { scratchDir } from "./tmp";

export const BINARY = join(import.meta.dir, "../../dist/llmgw");

export function scratchWithBinary(): { dir: string; bin: string } {
  if (!existsSync(BINARY)) throw new Error(`${BINARY} is missing: run \`bun build.ts\` (npm test does) before the end-to-end tests`);
  const dir = scratchDir("llmgw-e2e-");
  const bin = join(dir, "llmgw");
  copyFileSync(BINARY, bin);
  Bun.spawnSync(["chmod", "755", bin]);
  return { dir, bin };
}

/** Fake engines this binary runs that are alive (not zombies), from `ps`, with their port. */
export function fakeEnginesOf(bin: string): { pid: number; port: number }[] {
  const ps = Bun.spawnSync(["ps", "-eo", "pid=,stat=,args="], { stdout: "pipe" }).stdout.toString();
  const out: { pid: number; port: number }[] = [];
  for (const line of ps.split("\n")) {
    const m = /^\s*(\d+)\s+(\S+)\s+(.*)$/.exec(line);
    if (!m || m[2]!.startsWith("Z") || !m[3]!.startsWith(`${bin} fake-engine `)) continue;
    out.push({ pid: Number(m[1]), port: Number(/--port (\d+)/.exec(m[3]!)?.[1] ?? -1) });
  }
  return out;
}

export function run(bin: string, args: string[], opts: { cwd: string; env?: Record<string, string> }) {
  const p = Bun.spawnSync([bin, ...args], { cwd: opts.cwd, env: { PATH: process.env.PATH ?? "", NO_COLOR: "1", ...opts.env }, stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

/** Polls for real child processes, which no clock can hurry: the one helper, re-exported for the end-to-end tests. */
export { until } from "./until";

let serveStarts = 0;

export async function startServe(bin: string, dir: string, extra: string[] = []) {
  // Output goes to files, never to pipes nobody reads: a full pipe (64 KiB of logs, soon reached
  // through a failover's warnings) would block serve's next log line, and with it serve.
  const n = ++serveStarts;
  const logFile = join(dir, `serve-${n}.log`);
  const stderrFile = join(dir, `serve-${n}.stderr`);
  const proc = Bun.spawn([bin, "serve", "--admin-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--node-timeout", "15s", ...extra], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdout: Bun.file(logFile),
    stderr: Bun.file(stderrFile),
  });
  /** What serve wrote to stderr so far (all of it once it has exited). */
  const stderr = (): string => {
    try {
      return readFileSync(stderrFile, "utf8");
    } catch {
      return "";
    }
  };
  let exited = false;
  void proc.exited.then(() => (exited = true));
  const spawnedAt = Date.now() - 1000;
  // serve starts itself again (to lift Bun's fetch limit), so the pid in server.json is the
  // child's: recognise this start by its time instead.
  const info = await until("server.json", async () => {
    if (exited) throw new Error(`serve exited with ${proc.exitCode}: ${stderr()}`);
    try {
      const i = JSON.parse(readFileSync(join(dir, "llmgw-data", "server.json"), "utf8")) as { admin_url: string; router_url: string; pid: number; started_at: string };
      return Date.parse(i.started_at) >= spawnedAt ? i : undefined;
    } catch {
      return undefined;
    }
  }).catch((e) => {
    proc.kill("SIGKILL");
    throw e;
  });
  const joinToken = readFileSync(join(dir, "llmgw-data", "join.token"), "utf8").trim();
  const adminToken = readFileSync(join(dir, "llmgw-data", "admin.token"), "utf8").trim();
  return { proc, adminUrl: info.admin_url, routerUrl: info.router_url, servePid: info.pid, joinToken, adminToken, stderr };
}

/**
 * Heartbeats to a running serve the way agents send them: the join token the first time, the
 * node's own credential after; a made-up address (tests send 10.0.0.x from 127.0.0.1) is first
 * allowed for the node through the admin API, as an operator would with `nodes allow-address`.
 */
export function heartbeatSender(serve: { adminUrl: string; joinToken: string; adminToken: string }) {
  const credentials = new Map<string, string>();
  const chosen = new Map<string, string>();
  const allowed = new Map<string, string>();
  return async (body: { node: string; address: string }): Promise<Response> => {
    if (body.address !== "127.0.0.1" && allowed.get(body.node) !== body.address) {
      const r = await fetch(`${serve.adminUrl}/api/v1/nodes/${encodeURIComponent(body.node)}/address`, {
        method: "PUT",
        headers: { authorization: `Bearer ${serve.adminToken}`, "content-type": "application/json" },
        body: JSON.stringify({ address: body.address }),
      });
      if (r.status !== 200) throw new Error(`allowing ${body.address} for ${body.node}: ${r.status} ${await r.text()}`);
      allowed.set(body.node, body.address);
    }
    // Joining, it sends the credential it chose, as the agent does: a join whose answer was lost
    // (a store failover after the commit) is answered when sent again.
    const credential = credentials.get(body.node);
    if (credential === undefined && !chosen.has(body.node)) chosen.set(body.node, newNodeCredential());
    const res = await fetch(`${serve.adminUrl}/agent/v1/heartbeat`, {
      method: "POST",
      headers: { authorization: `Bearer ${credential ?? serve.joinToken}`, "content-type": "application/json" },
      body: JSON.stringify(credential === undefined ? { ...body, join_credential: chosen.get(body.node) } : body),
    });
    if (res.ok) {
      const answer = (await res.clone().json()) as { credential?: string };
      if (answer.credential) credentials.set(body.node, answer.credential);
    }
    return res;
  };
}
