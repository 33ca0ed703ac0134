// The arm64 release binary, smoke-tested on this x64 machine under QEMU's user-mode emulation
// (see test/helpers/qemu.ts): it says it is linux-arm64, and an arm64 simulated agent joins an
// x64 `serve` (dist/llmgw), runs a replica of its fake engine (the arm64 binary again) to
// ready, and answers a chat completion through the router. The arm64 binary is built here from
// this checkout as `npm run release` builds it, so it is never a stale one left in dist/.
// Emulation is slow (the binary's start-up alone takes seconds), hence the generous intervals.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildBinary, stampFor } from "../../build";
import { RELEASE_TARGETS, releaseFile, runtimeFor } from "../../release";
import type { NodeView, ReplicaView } from "../../src/protocol/views";
import { enginePidsIn } from "../helpers/agent-state";
import { run, scratchWithBinary, startServe, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";
import { AARCH64_ENV, AARCH64_SYSROOT, QEMU, ensureAarch64Binfmt } from "../helpers/qemu";

const ARM64 = RELEASE_TARGETS.find((t) => t.platform === "linux-arm64")!;

let dir: string;
let bin: string;
let arm: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let agent: Bun.Subprocess | undefined;

const api = async <T>(path: string): Promise<T> => (await (await fetch(`${serve.adminUrl}${path}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).json()) as T;

beforeAll(async () => {
  ensureAarch64Binfmt();
  ({ dir, bin } = scratchWithBinary());
  arm = join(dir, releaseFile(ARM64));
  const t0 = performance.now();
  await buildBinary({ outfile: arm, stamp: stampFor(), target: ARM64.bunTarget, executablePath: runtimeFor(ARM64) });
  console.log(`arm64 smoke: built ${releaseFile(ARM64)} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}, 120_000);

afterAll(async () => {
  const pids = dir ? [...enginePidsIn(join(dir, "agent")).values()] : [];
  agent?.kill("SIGTERM");
  await agent?.exited;
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("the arm64 release binary under user-mode emulation", () => {
  test("`version -o json` says linux-arm64, run by qemu and through binfmt_misc alike", () => {
    const viaQemu = Bun.spawnSync([QEMU, "-L", AARCH64_SYSROOT, arm, "version", "-o", "json"], { cwd: dir, stdout: "pipe", stderr: "pipe" });
    expect(viaQemu.stderr.toString()).toBe("");
    const info = JSON.parse(viaQemu.stdout.toString()) as { version: string; commit: string; platform: string; protocol: number };
    expect(info.platform).toBe("linux-arm64");
    const direct = run(arm, ["version", "-o", "json"], { cwd: dir, env: AARCH64_ENV });
    expect(direct.code).toBe(0);
    expect(JSON.parse(direct.stdout)).toEqual(info);
    // The same release as the x64 binary beside it, built from the same commit.
    const x64 = JSON.parse(run(bin, ["version", "-o", "json"], { cwd: dir }).stdout) as typeof info;
    expect({ ...info, platform: "linux-x64" }).toEqual({ ...x64, commit: info.commit });
    expect(x64.platform).toBe("linux-x64");
  }, 60_000);

  test("an arm64 simulated agent joins an x64 serve, runs a replica to ready, and answers through the router", async () => {
    const t0 = performance.now();
    serve = await startServe(bin, dir, ["--heartbeat-interval", "500ms", "--reconcile-interval", "300ms", "--engine-base-port", String(freePort(900)), "--log-level", "warn"]);
    agent = Bun.spawn(
      [arm, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", "gh200-1", "--address", "127.0.0.1", "--engine-host", "127.0.0.1",
        "--simulate", "H100-80GB:1", "--logs-listen", "off", "--state-dir", join(dir, "agent"), "--stop-grace", "1s", "--log-level", "warn"],
      { cwd: dir, env: { PATH: process.env.PATH ?? "", ...AARCH64_ENV }, stdout: "ignore", stderr: "pipe" },
    );
    await until("the arm64 agent registered", async () => (await api<NodeView[]>("/api/v1/nodes")).some((n) => n.name === "gh200-1" && n.state === "ready"), { timeoutMs: 60_000 });
    writeFileSync(join(dir, "catalog.yaml"), "models:\n  - name: qwen2.5-0.5b\n    replicas: {min: 1}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n");
    const applied = run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir });
    expect(applied.stderr).toBe("");
    expect(applied.code).toBe(0);
    let seen: ReplicaView[] = [];
    const engineLog = () => {
      try {
        return readdirSync(join(dir, "agent", "logs")).map((f) => readFileSync(join(dir, "agent", "logs", f), "utf8")).join("\n");
      } catch {
        return "(no engine log)";
      }
    };
    await until(
      () => `its replica ready (replicas: ${JSON.stringify(seen)}; engine log: ${engineLog()})`,
      async () => (seen = await api<ReplicaView[]>("/api/v1/replicas")).some((r) => r.model === "qwen2.5-0.5b" && r.shards[0]?.node === "gh200-1" && r.state === "ready"),
      { timeoutMs: 60_000, everyMs: 200 },
    );
    const res = await fetch(`${serve.routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "qwen2.5-0.5b", messages: [{ role: "user", content: "hello from x64" }] }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; choices: { message: { content: string } }[] };
    expect(body.object).toBe("chat.completion");
    expect(body.choices[0]!.message.content.length).toBeGreaterThan(0);
    // The engine that answered is the arm64 binary itself, started again by the agent, emulated.
    const pids = [...enginePidsIn(join(dir, "agent")).values()];
    expect(pids.length).toBe(1);
    const cmdline = readFileSync(`/proc/${pids[0]}/cmdline`, "utf8").split("\0");
    expect(cmdline).toContain(arm);
    expect(cmdline).toContain("fake-engine");
    console.log(`arm64 smoke: agent joined, replica ready and answered in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }, 150_000);

  test("an arm64 serve: its router thread and body worker, entrypoints of their own in the binary, start and answer", async () => {
    const t0 = performance.now();
    const head = join(dir, "arm-head");
    const log = join(dir, "arm-serve.log");
    const proc = Bun.spawn([arm, "serve", "--data-dir", head, "--admin-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--log-level", "warn"], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "", ...AARCH64_ENV },
      stdout: Bun.file(log),
      stderr: "pipe",
    });
    try {
      const info = await until("the arm64 serve's server.json", () => {
        if (proc.exitCode !== null) throw new Error(`the arm64 serve exited with ${proc.exitCode}`);
        try {
          return JSON.parse(readFileSync(join(head, "server.json"), "utf8")) as { router_url: string };
        } catch {
          return undefined;
        }
      }, { timeoutMs: 60_000, everyMs: 100 });
      // /v1/models is answered by the router thread (router-worker.ts's bundle).
      const models = await fetch(`${info.router_url}/v1/models`);
      expect(models.status).toBe(200);
      expect(((await models.json()) as { data: unknown[] }).data).toEqual([]);
      // A body over 16 KiB is read by the body worker (body-worker.ts's bundle), which must find
      // the model named in it; one it could not start would be logged and the body read inline.
      const res = await fetch(`${info.router_url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "not-in-the-catalog", messages: [{ role: "user", content: "x".repeat(32 * 1024) }] }),
      });
      expect(res.status).toBe(404);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("model_not_found");
    } finally {
      proc.kill("SIGTERM");
      await proc.exited;
    }
    expect(readFileSync(log, "utf8")).not.toContain("worker");
    expect(await new Response(proc.stderr).text()).not.toContain("worker");
    console.log(`arm64 smoke: arm64 serve started and answered in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }, 90_000);
});
