// Finding which engine versions a node has: running each engine's own version command (with a
// timeout, since a broken Python environment can hang on import), reading the version out of
// what it prints, and comparing versions so launch templates can be chosen by range. The
// parsers and comparisons are pure; only probeEngines runs anything.

import { realScheduler, type Scheduler } from "../lib/scheduler";
import { safeText } from "../lib/text";
import { PEP440 } from "../lib/versions";
import { ENGINES, type Engine } from "../protocol/catalog";
import type { EngineReport } from "../protocol/heartbeat";

export { compareVersions } from "../lib/versions";

/** The engines a node has installed (or not): every catalog engine but the built-in fake one. */
export type RealEngine = Exclude<Engine, "fake">;
export const REAL_ENGINES: readonly RealEngine[] = ENGINES.filter((e): e is RealEngine => e !== "fake");

/** The executables the agent runs for each engine (LaunchOptions.bin uses the same names). */
export type EngineBins = { vllm?: string; python?: string; llamaServer?: string };

/** How each engine is asked for its version. */
export function versionCommand(engine: RealEngine, bin: EngineBins = {}): string[] {
  switch (engine) {
    case "vllm":
      // vllm/entrypoints/cli/main.py: `-v/--version` prints importlib's vllm.__version__ alone.
      return [bin.vllm ?? "vllm", "--version"];
    case "sglang":
      // SGLang has no version flag on launch_server; sglang/version.py defines __version__.
      return [bin.python ?? "python3", "-c", "import sglang; print(sglang.__version__)"];
    case "llama.cpp":
      // common/arg.cpp: --version prints the build info and exits 0 (on stderr).
      return [bin.llamaServer ?? "llama-server", "--version"];
  }
}

/** The last line of `vllm --version` that is a version (warnings from imports may come before it). */
export function parseVllmVersion(output: string): string | null {
  return lastVersionLine(output);
}

/** SGLang prints sglang.__version__, e.g. "0.4.3.post4" or "0.5.2". */
export function parseSglangVersion(output: string): string | null {
  return lastVersionLine(output);
}

/**
 * llama-server's build number as "b<N>" (the release tags are named so). Builds print
 * `version: 6869 (abc1234)` then `built with …`; newer ones `version: 0.4.1-dev (build 10991,
 * commit 930e2fa59)` (common/build-info.cpp.in, llama_print_build_info).
 */
export function parseLlamaServerVersion(output: string): string | null {
  const newer = /^version:\s*\S+\s*\(build\s+(\d+)\b/im.exec(output);
  if (newer) return `b${Number(newer[1])}`;
  const older = /^version:\s*(\d+)\s*\(/im.exec(output);
  if (older) return `b${Number(older[1])}`;
  return null;
}

function lastVersionLine(output: string): string | null {
  const lines = output.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== "");
  for (let i = lines.length - 1; i >= 0; i--) if (PEP440.test(lines[i]!) && lines[i]!.length <= 64) return lines[i]!;
  return null;
}

/** "b6869" (or "6869") → 6869; null when it is not a build number. */
export function llamaBuild(v: string): number | null {
  const m = /^b?(\d+)$/.exec(v.trim());
  return m ? Number(m[1]) : null;
}

export type ProbeResult = { exitCode: number; stdout: string; stderr: string };
/** Runs argv within timeoutMs; rejects (code ENOENT when the executable is missing) when it cannot. */
export type ProbeRunner = (argv: string[], timeoutMs: number) => Promise<ProbeResult>;

export type ProbeOptions = {
  bin?: EngineBins;
  /** Versions the operator set (--vllm-version …): used as they are, nothing is run for them. */
  overrides?: Partial<Record<RealEngine, string>>;
  /** Per command; a Python import of a large package can take many seconds on a cold disk. */
  timeoutMs: number;
  run?: ProbeRunner;
  /** Times the built-in runner's timeout; realScheduler unless a test drives time. */
  scheduler?: Scheduler;
};

const PARSERS: Record<RealEngine, (out: string) => string | null> = {
  vllm: parseVllmVersion,
  sglang: parseSglangVersion,
  "llama.cpp": parseLlamaServerVersion,
};

/** One engine's report. Never throws: a missing or broken engine is reported with the reason. */
export async function probeEngine(engine: RealEngine, opts: ProbeOptions): Promise<EngineReport> {
  const override = opts.overrides?.[engine];
  if (override !== undefined && override !== "") return { engine, version: clip(override, 64), error: null };
  const argv = versionCommand(engine, opts.bin);
  const run = opts.run ?? spawnProbe(opts.scheduler ?? realScheduler);
  let r: ProbeResult;
  try {
    r = await run(argv, opts.timeoutMs);
  } catch (e) {
    const err = e as { code?: unknown; message?: unknown };
    const why = err.code === "ENOENT" ? `not installed: ${argv[0]} not found` : String(err.message ?? e);
    return { engine, version: null, error: clip(why, 512) };
  }
  const out = `${r.stdout}\n${r.stderr}`;
  const version = r.exitCode === 0 ? PARSERS[engine](out) : null;
  if (version !== null) return { engine, version, error: null };
  const last = out.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== "").at(-1) ?? "no output";
  const why = r.exitCode === 0 ? `\`${argv.join(" ")}\` printed no version: ${last}` : `\`${argv.join(" ")}\` exited ${r.exitCode}: ${last}`;
  return { engine, version: null, error: clip(why, 512) };
}

/** Every real engine's report, probed side by side. */
export function probeEngines(opts: ProbeOptions): Promise<EngineReport[]> {
  return Promise.all(REAL_ENGINES.map((e) => probeEngine(e, opts)));
}

function clip(s: string, max: number): string {
  const t = safeText(s);
  return t.length > max ? `${t.slice(0, max - 1)}…` : t;
}

const spawnProbe = (scheduler: Scheduler): ProbeRunner => async (argv, timeoutMs) => {
  // The environment as it is now (PATH included), as the engines themselves will get it.
  const proc = Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { ...process.env } });
  let timedOut = false;
  const timer = scheduler.after(timeoutMs, () => {
    timedOut = true;
    proc.kill("SIGKILL");
  });
  try {
    const [stdout, stderr, exitCode] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
    if (timedOut) throw new Error(`\`${argv.join(" ")}\` did not finish within ${Math.round(timeoutMs / 1000)}s`);
    return { exitCode, stdout, stderr };
  } finally {
    timer.cancel();
  }
};
