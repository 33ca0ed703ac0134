// The release end to end: release.ts builds both binaries and SHA256SUMS into a scratch
// directory, `sha256sum -c` accepts them, and the x64 one (run here) says what it is with
// `version -o json`, stamped like dist/llmgw, which `npm test` built just before.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { gitCommit } from "../../build";
import pkg from "../../package.json";
import { release } from "../../release";
import { PROTOCOL_VERSION } from "../../src/protocol/version";
import { run, scratchWithBinary } from "../helpers/binary";
import { scratchDir } from "../helpers/tmp";

const HOST = `${process.platform}-${process.arch}`;
const COMMIT = /^([0-9a-f]{40}(-dirty)?|unknown)$/;

let out: string;
let files: string[];
let built: string;

beforeAll(async () => {
  out = scratchDir("llmgw-release-");
  const t0 = performance.now();
  built = gitCommit();
  files = await release({ outDir: out });
  console.log(`release: both binaries and SHA256SUMS in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}, 180_000);

afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

describe("npm run release", () => {
  test("builds llmgw-linux-x64 and llmgw-linux-arm64 with a SHA256SUMS that sha256sum -c accepts", () => {
    expect(files).toEqual(["llmgw-linux-x64", "llmgw-linux-arm64", "SHA256SUMS"]);
    expect(readFileSync(join(out, "SHA256SUMS"), "utf8")).toMatch(/^[0-9a-f]{64} {2}llmgw-linux-x64\n[0-9a-f]{64} {2}llmgw-linux-arm64\n$/);
    const check = Bun.spawnSync(["sha256sum", "-c", "SHA256SUMS"], { cwd: out, stdout: "pipe", stderr: "pipe" });
    expect(check.stdout.toString()).toBe("llmgw-linux-x64: OK\nllmgw-linux-arm64: OK\n");
    expect(check.exitCode).toBe(0);
  });

  test("the binary for this machine is stamped with the version, the commit and its platform", () => {
    const own = join(out, `llmgw-${HOST}`);
    const r = run(own, ["version", "-o", "json"], { cwd: out });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ version: pkg.version, commit: built, platform: HOST, protocol: PROTOCOL_VERSION });
  });
});

describe("llmgw version through the compiled binary", () => {
  test("-o json: version, commit, platform and protocol", () => {
    const { dir, bin } = scratchWithBinary();
    try {
      const r = run(bin, ["version", "-o", "json"], { cwd: dir });
      expect(r.stderr).toBe("");
      const info = JSON.parse(r.stdout) as Record<string, unknown>;
      expect(Object.keys(info)).toEqual(["version", "commit", "platform", "protocol"]);
      expect(info.version).toBe(process.env.LLMGW_VERSION || pkg.version);
      expect(info.commit).toMatch(COMMIT);
      expect(info.platform).toBe(HOST);
      expect(info.protocol).toBe(PROTOCOL_VERSION);
      // The line for people still starts `llmgw VERSION`, and names the same commit.
      const text = run(bin, ["version"], { cwd: dir });
      expect(text.stdout).toBe(`llmgw ${info.version} (commit ${info.commit}, ${HOST}, protocol ${PROTOCOL_VERSION})\n`);
      expect(run(bin, ["--version"], { cwd: dir }).stdout).toBe(text.stdout);
      const bad = run(bin, ["version", "-o", "yaml"], { cwd: dir });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('-o/--output must be one of text, json, not "yaml"');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
