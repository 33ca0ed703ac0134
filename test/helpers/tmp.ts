// Scratch directories for tests and benchmarks, removed when the run ends. `bun test` runs every
// file in one process and emits no "exit": test/preload.ts (bunfig.toml) removes them after the
// last file. A script (a benchmark) removes them at its exit. End-to-end scratch directories
// hold a copy of the binary each: left behind, a few runs fill the disk.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const key = Symbol.for("llmgw.test.scratch");
const made: Set<string> = ((globalThis as Record<symbol, unknown>)[key] ??= new Set<string>()) as Set<string>;

/** A new directory under the system's temporary directory, its name starting with `prefix`. */
export function scratchDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.add(dir);
  return dir;
}

/** Removes every scratch directory made so far (what a test removed itself is skipped). */
export function removeScratch(): void {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
  made.clear();
}

process.once("exit", removeScratch);
