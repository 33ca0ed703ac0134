// `npm run release`: the release files, dist/llmgw-linux-x64 and dist/llmgw-linux-arm64 with
// dist/SHA256SUMS (`cd dist && sha256sum -c SHA256SUMS` checks them), each binary stamped with
// the version and commit like build.ts's.
//
// Bun cross-compiles by embedding a Bun runtime of the target platform. Bun's own download of
// one goes to registry.npmjs.org whatever npm is configured with and checks nothing but TLS, so
// each runtime is instead fetched with `npm pack` (the project's registry, mirror and proxy
// settings) as the @oven/bun-linux-* package package-lock.json pins, checked against the
// lockfile's integrity, kept under node_modules/.cache, and handed to Bun as executablePath.
// The runtime must be the running Bun's own version: the bytecode compiled here is only valid
// for it.

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { buildBinary, stampFor } from "./build";

export interface ReleaseTarget {
  /** How the file and `llmgw version` name the platform. */
  platform: string;
  bunTarget: Bun.Build.CompileTarget;
  /** The npm package holding that platform's Bun runtime (bin/bun). */
  runtimePackage: string;
}

export const RELEASE_TARGETS: readonly ReleaseTarget[] = [
  { platform: "linux-x64", bunTarget: "bun-linux-x64", runtimePackage: "@oven/bun-linux-x64" },
  { platform: "linux-arm64", bunTarget: "bun-linux-arm64", runtimePackage: "@oven/bun-linux-aarch64" },
];

/** The release file of a target, under dist/. */
export const releaseFile = (t: ReleaseTarget): string => `llmgw-${t.platform}`;

/** A SHA256SUMS file in `sha256sum`'s own format, so `sha256sum -c` reads it. */
export function sha256sums(files: readonly { name: string; bytes: Uint8Array }[]): string {
  return files.map((f) => `${createHash("sha256").update(f.bytes).digest("hex")}  ${f.name}\n`).join("");
}

/** The version and integrity package-lock.json pins for a runtime package. */
export function lockedRuntime(lock: unknown, pkg: string): { version: string; integrity: string } {
  const entry = (lock as { packages?: Record<string, { version?: unknown; integrity?: unknown }> }).packages?.[`node_modules/${pkg}`];
  if (typeof entry?.version !== "string" || typeof entry.integrity !== "string" || !entry.integrity.startsWith("sha512-")) {
    throw new Error(`package-lock.json pins no version and sha512 integrity for ${pkg}: run \`npm install\` so the lockfile lists bun's platform packages`);
  }
  return { version: entry.version, integrity: entry.integrity };
}

/** Whether bytes are what an npm `sha512-…` integrity string says. */
export function matchesIntegrity(bytes: Uint8Array, integrity: string): boolean {
  return `sha512-${createHash("sha512").update(bytes).digest("base64")}` === integrity;
}

function sh(cmd: string[], cwd: string): string {
  const p = Bun.spawnSync(cmd, { cwd, stdout: "pipe", stderr: "pipe" });
  if (p.exitCode !== 0) throw new Error(`\`${cmd.join(" ")}\` failed (exit ${p.exitCode}):\n${p.stderr.toString().trim()}`);
  return p.stdout.toString();
}

/** Where fetched runtimes are kept between builds. */
export const RUNTIME_CACHE = join(import.meta.dir, "node_modules/.cache/llmgw-release");

const readLock = (): unknown => JSON.parse(readFileSync(join(import.meta.dir, "package-lock.json"), "utf8"));

/** The runtime's bin/bun, from the cache or fetched with `npm pack` and checked against the lockfile. */
export function runtimeFor(t: ReleaseTarget, cacheDir: string = RUNTIME_CACHE, lock: unknown = readLock()): string {
  const { version, integrity } = lockedRuntime(lock, t.runtimePackage);
  if (version !== Bun.version) {
    throw new Error(`package-lock.json pins ${t.runtimePackage}@${version} but this is Bun ${Bun.version}: build with the Bun the lockfile pins (node_modules/.bin/bun) so the bytecode matches the runtime`);
  }
  const dir = join(cacheDir, `${basename(t.runtimePackage)}-${version}`);
  const exe = join(dir, "bun");
  if (existsSync(exe)) return exe;
  mkdirSync(cacheDir, { recursive: true });
  const tmp = mkdtempSync(join(cacheDir, ".fetch-"));
  try {
    const packed = JSON.parse(sh(["npm", "pack", "--json", "--silent", "--prefer-offline", `${t.runtimePackage}@${version}`], tmp)) as { filename: string }[];
    const tgz = join(tmp, packed[0]!.filename);
    if (!matchesIntegrity(readFileSync(tgz), integrity)) throw new Error(`${t.runtimePackage}@${version} from the registry does not match package-lock.json's integrity ${integrity}`);
    sh(["tar", "-xzf", tgz, "package/bin/bun"], tmp);
    mkdirSync(join(tmp, "out"));
    renameSync(join(tmp, "package/bin/bun"), join(tmp, "out/bun"));
    // Renamed whole so a fetch cut short never leaves a half-written runtime in the cache; a
    // build beside this one that got there first has put the same checked bytes in place.
    try {
      renameSync(join(tmp, "out"), dir);
    } catch (e) {
      if (!existsSync(exe)) throw e;
    }
    return exe;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** Builds every target into outDir and writes outDir/SHA256SUMS; returns the files written. */
export async function release(opts: { outDir: string; cacheDir?: string; targets?: readonly ReleaseTarget[]; log?: (line: string) => void }): Promise<string[]> {
  const log = opts.log ?? (() => {});
  const lock = readLock();
  const stamp = stampFor();
  const names: string[] = [];
  for (const t of opts.targets ?? RELEASE_TARGETS) {
    const t0 = performance.now();
    const executablePath = runtimeFor(t, opts.cacheDir, lock);
    const name = releaseFile(t);
    await buildBinary({ outfile: join(opts.outDir, name), stamp, target: t.bunTarget, executablePath });
    names.push(name);
    log(`built ${join(opts.outDir, name)} (llmgw ${stamp.version}, commit ${stamp.commit}) in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  }
  writeFileSync(join(opts.outDir, "SHA256SUMS"), sha256sums(names.map((name) => ({ name, bytes: readFileSync(join(opts.outDir, name)) }))));
  log(`wrote ${join(opts.outDir, "SHA256SUMS")}: check with \`cd ${opts.outDir} && sha256sum -c SHA256SUMS\``);
  return [...names, "SHA256SUMS"];
}

if (import.meta.main) {
  try {
    await release({ outDir: "dist", log: (l) => console.log(l) });
  } catch (e) {
    console.error(`release: ${(e as Error).message}`);
    process.exit(1);
  }
}
