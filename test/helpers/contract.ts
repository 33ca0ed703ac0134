// Runs the contract fakes (test/fakes) the way the agent runs real engines: a rendered Launch
// spawned with the fake's bin directory first on PATH, so cmd[0] ("vllm", "python3",
// "llama-server") resolves to the fake of one engine version; plus polling its /health (with
// the one poll-until helper, test/helpers/until.ts).

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { until } from "./until";
import { scratchDir } from "./tmp";

export const FAKES = join(import.meta.dir, "..", "fakes");

/** The contract fakes, by directory name; each holds bin/<the engine's command>. */
export const FAKE_DIRS = ["vllm-0.10", "vllm-0.11", "vllm-0.12", "sglang-0.5", "llama-b6000", "llama-b8500", "nvidia-smi-2xh100"] as const;
export type FakeDir = (typeof FAKE_DIRS)[number];

export function fakeBin(dir: FakeDir): string {
  return join(FAKES, dir, "bin");
}

/**
 * Environment for a process that should find the fake `dir` on PATH: the fakes are Bun scripts
 * run through the bun that runs the tests (LLMGW_CONTRACT_BUN), which needs not be on PATH.
 */
export function fakeEnv(dirs: FakeDir | readonly FakeDir[], extra: Record<string, string> = {}): Record<string, string> {
  const list = typeof dirs === "string" ? [dirs] : dirs;
  return {
    PATH: [...list.map(fakeBin), process.env.PATH ?? "/usr/bin:/bin"].join(":"),
    LLMGW_CONTRACT_BUN: process.execPath,
    LLMGW_CONTRACT_LOAD_MS: "300",
    ...extra,
  };
}

/** A fresh file for the fakes to record their argv and GPU environment in (LLMGW_CONTRACT_RECORD). */
export function recordFile(): string {
  return join(scratchDir("llmgw-contract-"), "record.jsonl");
}

export type Recorded = { engine: string; version: string; argv: string[]; env: Record<string, string>; pid: number };

export function readRecords(file: string): Recorded[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Recorded);
}

export type Running = { proc: Bun.Subprocess<"ignore", "pipe", "pipe">; output: () => Promise<string> };

/** Spawns `cmd` with `env` on top of the fake's environment, resolving cmd[0] in the fake's bin dir only. */
export function spawnFake(dir: FakeDir, cmd: readonly string[], env: Record<string, string>, extra: Record<string, string> = {}): Running {
  const exe = cmd[0]!;
  const resolved = exe.includes("/") ? exe : join(fakeBin(dir), exe);
  if (!existsSync(resolved)) throw new Error(`the rendered command runs "${exe}", which the ${dir} fake does not provide (${resolved})`);
  const proc = Bun.spawn([resolved, ...cmd.slice(1)], { env: { ...fakeEnv(dir, extra), ...env }, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  let text: Promise<string> | null = null;
  return {
    proc,
    output: () => (text ??= Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]).then(([o, e]) => `${o}${e}`)),
  };
}

/** Runs a fake to completion (version commands, argument errors). */
export function runFake(dir: FakeDir, cmd: readonly string[], extra: Record<string, string> = {}) {
  const exe = cmd[0]!;
  const p = Bun.spawnSync([join(fakeBin(dir), exe), ...cmd.slice(1)], { env: fakeEnv(dir, extra), stdout: "pipe", stderr: "pipe" });
  return { code: p.exitCode, stdout: p.stdout.toString(), stderr: p.stderr.toString() };
}

export type Probe = { status: number | "refused"; body: string; ms: number };

export async function probe(url: string, key?: string | null, timeoutMs = 5000): Promise<Probe> {
  const t0 = Date.now();
  try {
    const r = await fetch(url, { headers: key ? { authorization: `Bearer ${key}` } : {}, signal: AbortSignal.timeout(timeoutMs) });
    return { status: r.status, body: await r.text(), ms: Date.now() - t0 };
  } catch {
    return { status: "refused", body: "", ms: Date.now() - t0 };
  }
}

/**
 * Polls `url` until it answers 200 (the statuses seen on the way are returned), or throws with
 * the process's output if it exits first or the deadline passes.
 */
export async function untilHealthy(r: Running, url: string, key?: string | null, timeoutMs = 15_000): Promise<Probe[]> {
  const seen: Probe[] = [];
  let exited: number | null = null;
  void r.proc.exited.then((c) => (exited = c));
  const outcome = await until(
    `${url} to answer 200`,
    async () => {
      if (exited !== null) return "exited" as const;
      const p = await probe(url, key);
      seen.push(p);
      return p.status === 200 && ("healthy" as const);
    },
    { timeoutMs, everyMs: 50 },
  ).catch(async () => {
    r.proc.kill("SIGKILL");
    throw new Error(`${url} did not answer 200 within ${timeoutMs} ms (last: ${seen.at(-1)?.status}):\n${await r.output()}`);
  });
  if (outcome === "exited") throw new Error(`the fake exited with ${exited} before ${url} answered 200:\n${await r.output()}`);
  return seen;
}

/** Waits for the process to exit and returns its code and output. */
export async function exitOf(r: Running, timeoutMs = 15_000): Promise<{ code: number; output: string }> {
  const timer = setTimeout(() => r.proc.kill("SIGKILL"), timeoutMs);
  const code = await r.proc.exited;
  clearTimeout(timer);
  return { code, output: await r.output() };
}

export async function stop(r: Running): Promise<void> {
  r.proc.kill("SIGTERM");
  await r.proc.exited;
}
