// Compiles dist/llmgw: one self-contained executable for this machine's platform, minified,
// with the version and commit stamped in and .env/bunfig autoloading off (a binary copied onto
// a head node must not change behaviour because of files in whatever directory it is started
// from). Bytecode with ESM output cuts start-up, which `llmgw status` pays on every call.
// release.ts builds the release binaries for other platforms through the same buildBinary().

import { realpathSync } from "node:fs";
import { join } from "node:path";
import pkg from "./package.json";

/** What a binary says it is: the release and the commit it was built from. */
export interface Stamp {
  version: string;
  commit: string;
}

/** The outcome of running a command: its exit code and stdout. */
export type Exec = (cmd: string[]) => { code: number; stdout: string };

function execSync(cmd: string[]): { code: number; stdout: string } {
  try {
    const p = Bun.spawnSync(cmd, { cwd: import.meta.dir, stdout: "pipe", stderr: "ignore" });
    return { code: p.exitCode ?? 1, stdout: p.stdout.toString() };
  } catch {
    // git not installed at all: the same as not a checkout.
    return { code: 127, stdout: "" };
  }
}

/**
 * The commit HEAD names, "-dirty" when the work tree differs from it (a binary built from
 * uncommitted changes must not pass for the commit), "unknown" outside a git checkout. A source
 * tarball unpacked inside some other repository (a home directory kept in git) is not a
 * checkout of llmgw: the repository's top level must be this directory.
 */
export function gitCommit(exec: Exec = execSync, dir: string = realpathSync(import.meta.dir)): string {
  const head = exec(["git", "rev-parse", "--show-toplevel", "HEAD"]);
  const [top, sha] = head.stdout.trim().split("\n");
  if (head.code !== 0 || top !== dir || sha === undefined || !/^[0-9a-f]{40,64}$/.test(sha)) return "unknown";
  const status = exec(["git", "status", "--porcelain", "--untracked-files=no"]);
  return status.code === 0 && status.stdout.trim() === "" ? sha : `${sha}-dirty`;
}

/**
 * The stamp for a build here: LLMGW_VERSION overrides package.json's version. It is checked
 * here, where it comes in, because every binary prints it to terminals and scripts parse it.
 */
export function stampFor(env: Record<string, string | undefined> = process.env, exec: Exec = execSync, dir?: string): Stamp {
  const version = env.LLMGW_VERSION || pkg.version;
  if (!/^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/.test(version)) {
    throw new Error(`LLMGW_VERSION ${JSON.stringify(version)} is not a version: use letters, digits and . + _ - (at most 64, starting with a letter or digit), e.g. 1.2.0 or 1.2.0-rc.1`);
  }
  return { version, commit: gitCommit(exec, dir) };
}

export interface BuildOptions {
  outfile: string;
  stamp: Stamp;
  /** Bun's compile target ("bun-linux-arm64"); absent builds for the running Bun's platform. */
  target?: Bun.Build.CompileTarget;
  /** A Bun runtime of the target's platform to embed, instead of Bun's own download. */
  executablePath?: string;
}

/** Compiles the binary; throws with Bun's messages when the build fails. */
export async function buildBinary(o: BuildOptions): Promise<void> {
  const result = await Bun.build({
    // The router thread's module and its body worker's are entrypoints of their own: a compiled
    // binary starts Workers only from those.
    entrypoints: ["src/main.ts", "src/app/router-worker.ts", "src/router/body-worker.ts"].map((f) => join(import.meta.dir, f)),
    compile: {
      outfile: o.outfile,
      ...(o.target !== undefined ? { target: o.target } : {}),
      ...(o.executablePath !== undefined ? { executablePath: o.executablePath } : {}),
      autoloadDotenv: false,
      autoloadBunfig: false,
    },
    minify: true,
    bytecode: true,
    format: "esm",
    sourcemap: "none",
    define: { __LLMGW_VERSION__: JSON.stringify(o.stamp.version), __LLMGW_COMMIT__: JSON.stringify(o.stamp.commit) },
  });
  if (!result.success) throw new Error(`building ${o.outfile} failed:\n${result.logs.map(String).join("\n")}`);
}

if (import.meta.main) {
  const outfile = process.argv[2] ?? "dist/llmgw";
  try {
    const stamp = stampFor();
    await buildBinary({ outfile, stamp });
    console.log(`built ${outfile} (llmgw ${stamp.version}, commit ${stamp.commit})`);
  } catch (e) {
    console.error((e as Error).message);
    process.exit(1);
  }
}
