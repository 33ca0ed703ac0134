// `llmgw demo` killed with SIGKILL cannot stop its fake engines: they must go by themselves, and
// the next demo must stop whatever a previous one left and take its ports again. The compiled
// binary, real processes: polling for process exits is the only honest wait here.

import { afterEach, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, scratchWithBinary, until } from "../helpers/binary";
import { freePort } from "../helpers/ports";

const spawned: Bun.Subprocess[] = [];
afterEach(() => {
  for (const p of spawned.splice(0)) p.kill("SIGKILL");
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Pids recorded in the simulated agents' replica state files. */
function enginePids(dataDir: string): number[] {
  const out: number[] = [];
  const agents = join(dataDir, "agents");
  for (const node of readdirSync(agents)) {
    let files: string[] = [];
    try {
      files = readdirSync(join(agents, node, "replicas")).filter((f) => f.endsWith(".json"));
    } catch {
      continue;
    }
    for (const f of files) out.push((JSON.parse(readFileSync(join(agents, node, "replicas", f), "utf8")) as { pid: number }).pid);
  }
  return out;
}

function startDemo(bin: string, dir: string, base: number) {
  const p = Bun.spawn([bin, "demo", "--admin-listen", `127.0.0.1:${freePort()}`, "--listen", `127.0.0.1:${freePort()}`, "--engine-base-port", String(base)], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? "" },
    stdout: "pipe",
    stderr: "pipe",
  });
  spawned.push(p);
  return p;
}

describe("demo killed with SIGKILL", () => {
  test("its fake engines exit by themselves, and the next demo starts on the same ports", async () => {
    const { dir, bin } = scratchWithBinary();
    const base = freePort(900);
    const dataDir = join(dir, "llmgw-data");
    const first = startDemo(bin, dir, base);
    const pids = await until("engines of the first demo", () => {
      try {
        const p = enginePids(dataDir).filter(alive);
        return p.length >= 3 ? p : undefined;
      } catch {
        return undefined;
      }
    }, 30_000);
    first.kill("SIGKILL");
    await first.exited;
    await until("every engine of the killed demo to exit", () => pids.every((p) => !alive(p)) || undefined, 10_000);

    const second = startDemo(bin, dir, base);
    await until("the second demo's engines", () => {
      try {
        const p = enginePids(dataDir).filter(alive);
        return p.length >= 3 && p.every((x) => !pids.includes(x)) ? p : undefined;
      } catch {
        return undefined;
      }
    }, 30_000);
    // Ready means the engines listen on the ports the killed demo's engines had.
    await until("three ready replicas in the second demo", () => {
      const status = run(bin, ["status", "-o", "json"], { cwd: dir });
      return status.code === 0 && (JSON.parse(status.stdout) as { replicas: { ready: number } }).replicas.ready >= 3 ? true : undefined;
    }, 30_000);
    second.kill("SIGTERM");
    await second.exited;
  }, 90_000);

  test("an engine a previous demo left running is stopped by the next demo", async () => {
    const { dir, bin } = scratchWithBinary();
    const dataDir = join(dir, "llmgw-data");
    const port = freePort();
    // An engine as a demo's simulated agent starts it (its own session), with no parent watch,
    // recorded in a replica state file where that agent keeps them.
    const engine = Bun.spawn([bin, "fake-engine", "--model", "m", "--port", String(port)], { cwd: dir, stdout: "pipe", stderr: "pipe", detached: true, env: { PATH: process.env.PATH ?? "" } });
    spawned.push(engine);
    await until("the leftover engine to listen", async () => {
      try {
        return (await fetch(`http://127.0.0.1:${port}/health`)).ok || undefined;
      } catch {
        return undefined;
      }
    });
    const replicas = join(dataDir, "agents", "h100-1", "replicas");
    mkdirSync(replicas, { recursive: true });
    writeFileSync(join(replicas, "r1.json"), JSON.stringify({ pid: engine.pid, port }));
    // Not an engine: a pid whose command line is not a fake engine is left alone.
    const bystander = Bun.spawn(["sleep", "60"], { stdout: "ignore" });
    spawned.push(bystander);
    writeFileSync(join(replicas, "r2.json"), JSON.stringify({ pid: bystander.pid, port: 1 }));

    const demo = startDemo(bin, dir, freePort(900));
    await until("the leftover engine to be stopped", () => engine.exitCode !== null || engine.signalCode !== null || undefined, 20_000);
    expect(alive(bystander.pid)).toBe(true);
    demo.kill("SIGTERM");
    await demo.exited;
    const stderr = await new Response(demo.stderr).text();
    expect(stderr).toContain("stopped 1 fake engine(s) a previous demo left running");
  }, 60_000);
});
