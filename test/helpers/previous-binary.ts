// The binary of the release before this one, for upgrade tests: built once from another commit
// of this repository (LLMGW_UPGRADE_FROM, else PREVIOUS_RELEASE when HEAD descends from it, else
// where this branch left main, else the commit before HEAD) into dist/previous-<commit>/llmgw and
// kept there, so later runs skip the build.
// The commit's files come out of git (git archive, no second worktree), built with this
// checkout's node_modules: it works in any clone that has the history.

import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { scratchDir } from "./tmp";

const ROOT = join(import.meta.dir, "../..");

function git(args: string[]): string | undefined {
  const p = Bun.spawnSync(["git", "-C", ROOT, ...args], { stdout: "pipe", stderr: "pipe" });
  return p.exitCode === 0 ? p.stdout.toString().trim() : undefined;
}

/**
 * The release this one upgrades from: what the upgrade test starts on. Raised at each release,
 * so the test crosses what changed since (on main, HEAD~1 would be this release already).
 */
export const PREVIOUS_RELEASE = "6cb51fd967fa4dcbbeb1d569ccb2044fb8f89424";

/** The commit the previous binary is built from, as a full hash. */
export function previousCommit(): string {
  const named = process.env.LLMGW_UPGRADE_FROM;
  if (named) {
    const c = git(["rev-parse", "--verify", `${named}^{commit}`]);
    if (!c) throw new Error(`LLMGW_UPGRADE_FROM=${named}: no such commit in this clone (fetch its history)`);
    return c;
  }
  const head = git(["rev-parse", "HEAD"]);
  if (!head) throw new Error("not a git checkout: the upgrade test builds the previous binary from this repository's history");
  if (head !== PREVIOUS_RELEASE && git(["merge-base", "--is-ancestor", PREVIOUS_RELEASE, "HEAD"]) !== undefined) return PREVIOUS_RELEASE;
  // A branch: where it left main. On main itself (merge base = HEAD): the commit before.
  const base = git(["merge-base", "HEAD", "main"]) ?? git(["merge-base", "HEAD", "origin/main"]);
  if (base && base !== head) return base;
  const parent = git(["rev-parse", "HEAD~1"]);
  if (!parent) throw new Error("no commit before HEAD: a shallow clone? The upgrade test needs the history (fetch-depth: 0)");
  return parent;
}

/** The protocol a binary speaks: its `version -o json`, or 1 for a release from before it said. */
function protocolOf(bin: string): number {
  const p = Bun.spawnSync([bin, "version", "-o", "json"], { stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0) return 1;
  const said = (JSON.parse(p.stdout.toString()) as { protocol?: unknown }).protocol;
  return typeof said === "number" ? said : 1;
}

/** Path of the previous binary (built now if it is not cached), the version it reports and its protocol. */
export function previousBinary(): { bin: string; commit: string; version: string; protocol: number } {
  const commit = previousCommit();
  const short = commit.slice(0, 7);
  const version = `0.0.0-previous.${short}`;
  const dir = join(ROOT, "dist", `previous-${short}`);
  const bin = join(dir, "llmgw");
  if (existsSync(bin)) return { bin, commit, version, protocol: protocolOf(bin) };
  const src = scratchDir("llmgw-previous-src-");
  const archive = Bun.spawnSync(["sh", "-c", `git -C "$0" archive --format=tar "$1" | tar -x -C "$2"`, ROOT, commit, src], { stderr: "pipe" });
  if (archive.exitCode !== 0) throw new Error(`git archive ${commit}: ${archive.stderr.toString()}`);
  symlinkSync(join(ROOT, "node_modules"), join(src, "node_modules"));
  mkdirSync(dir, { recursive: true });
  const tmp = join(dir, `llmgw.${process.pid}.tmp`);
  const build = Bun.spawnSync([process.execPath, "build.ts", tmp], { cwd: src, env: { ...process.env, LLMGW_VERSION: version }, stdout: "pipe", stderr: "pipe" });
  rmSync(src, { recursive: true, force: true });
  if (build.exitCode !== 0) throw new Error(`building the previous binary (${commit}) failed: ${build.stderr.toString()}${build.stdout.toString()}`);
  // Whole or not at all: a build cut short never passes for the cached binary.
  renameSync(tmp, bin);
  return { bin, commit, version, protocol: protocolOf(bin) };
}
