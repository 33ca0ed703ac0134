// The release's stamp and files: which commit a binary says it was built from (dirty, or not a
// checkout at all), the SHA256SUMS format `sha256sum -c` reads, the runtimes the lockfile pins
// for each target, and what `llmgw version` prints from the stamp.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type Exec, gitCommit, stampFor } from "../../build";
import pkg from "../../package.json";
import { RELEASE_TARGETS, lockedRuntime, matchesIntegrity, releaseFile, sha256sums } from "../../release";
import { renderVersion, versionInfo } from "../../src/cli/version";
import { PROTOCOL_VERSION } from "../../src/protocol/version";

const SHA = "6cb51fd967fa4dcbbeb1d569ccb2044fb8f89424";
const DIR = "/src/llmgw";
/** What `git rev-parse --show-toplevel HEAD` prints in a checkout of DIR. */
const head = (sha = SHA, top = DIR) => ({ code: 0, stdout: `${top}\n${sha}\n` });

/** A git that answers rev-parse and status as given, and records what it was asked. */
function git(answers: { head?: { code: number; stdout: string }; status?: { code: number; stdout: string } }): Exec & { asked: string[][] } {
  const asked: string[][] = [];
  const exec = ((cmd: string[]) => {
    asked.push(cmd);
    if (cmd[1] === "rev-parse") return answers.head ?? { code: 128, stdout: "" };
    if (cmd[1] === "status") return answers.status ?? { code: 128, stdout: "" };
    throw new Error(`unexpected ${cmd.join(" ")}`);
  }) as Exec & { asked: string[][] };
  exec.asked = asked;
  return exec;
}

describe("the commit a build is stamped with", () => {
  test("a clean checkout: HEAD's full hash", () => {
    expect(gitCommit(git({ head: head(), status: { code: 0, stdout: "" } }), DIR)).toBe(SHA);
  });

  test("changes to tracked files: the hash with -dirty (untracked files, as in git describe --dirty, do not count)", () => {
    const exec = git({ head: head(), status: { code: 0, stdout: " M src/main.ts\n" } });
    expect(gitCommit(exec, DIR)).toBe(`${SHA}-dirty`);
    expect(exec.asked[1]).toEqual(["git", "status", "--porcelain", "--untracked-files=no"]);
  });

  test("status failing after rev-parse worked: -dirty, never a clean claim it cannot back", () => {
    expect(gitCommit(git({ head: head(), status: { code: 1, stdout: "" } }), DIR)).toBe(`${SHA}-dirty`);
  });

  test("not a git checkout (a source tarball) or no git at all: unknown", () => {
    expect(gitCommit(git({ head: { code: 128, stdout: "" } }), DIR)).toBe("unknown");
    expect(gitCommit(git({ head: { code: 127, stdout: "" } }), DIR)).toBe("unknown");
    // Something on stdout that is not a hash (a wrapper's chatter) is not taken for one.
    expect(gitCommit(git({ head: { code: 0, stdout: "HEAD\n" } }), DIR)).toBe("unknown");
    // A tarball unpacked inside another repository (a home directory kept in git): not its commit.
    expect(gitCommit(git({ head: head(SHA, "/home/ops"), status: { code: 0, stdout: "" } }), DIR)).toBe("unknown");
  });

  test("the version is package.json's unless LLMGW_VERSION says otherwise", () => {
    const clean = git({ head: head(), status: { code: 0, stdout: "" } });
    expect(stampFor({}, clean, DIR)).toEqual({ version: pkg.version, commit: SHA });
    expect(stampFor({ LLMGW_VERSION: "1.2.3-rc.1" }, clean, DIR)).toEqual({ version: "1.2.3-rc.1", commit: SHA });
    expect(stampFor({ LLMGW_VERSION: "" }, clean, DIR).version).toBe(pkg.version);
  });

  test("an LLMGW_VERSION that is no version (spaces, escapes, too long) stops the build, saying what a version may hold", () => {
    const clean = git({ head: head(), status: { code: 0, stdout: "" } });
    for (const bad of ["1.2 beta", "1.2\x1b[31m", "-rc", "v".repeat(65)]) {
      expect(() => stampFor({ LLMGW_VERSION: bad }, clean, DIR)).toThrow("is not a version: use letters, digits and . + _ -");
    }
    expect(stampFor({ LLMGW_VERSION: "2.0.0+build_7" }, clean, DIR).version).toBe("2.0.0+build_7");
  });
});

describe("SHA256SUMS", () => {
  test("one line per file in sha256sum's format: hex digest, two spaces, name", () => {
    const text = sha256sums([
      { name: "llmgw-linux-x64", bytes: new TextEncoder().encode("abc") },
      { name: "llmgw-linux-arm64", bytes: new Uint8Array() },
    ]);
    expect(text).toBe(
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  llmgw-linux-x64\n" +
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  llmgw-linux-arm64\n",
    );
  });
});

describe("the targets and their runtimes", () => {
  test("x64 and arm64 Linux, named as `llmgw version` names the platform", () => {
    expect(RELEASE_TARGETS.map(releaseFile)).toEqual(["llmgw-linux-x64", "llmgw-linux-arm64"]);
    expect(RELEASE_TARGETS.map((t) => t.runtimePackage)).toEqual(["@oven/bun-linux-x64", "@oven/bun-linux-aarch64"]);
  });

  test("package-lock.json pins each target's runtime at the Bun the project builds with", () => {
    const lock = JSON.parse(readFileSync(join(import.meta.dir, "../../package-lock.json"), "utf8")) as unknown;
    for (const t of RELEASE_TARGETS) {
      const r = lockedRuntime(lock, t.runtimePackage);
      expect(r.version).toBe(Bun.version);
      expect(r.integrity).toStartWith("sha512-");
    }
  });

  test("a lockfile without the runtime says what to do", () => {
    expect(() => lockedRuntime({ packages: {} }, "@oven/bun-linux-aarch64")).toThrow("package-lock.json pins no version and sha512 integrity for @oven/bun-linux-aarch64: run `npm install`");
    expect(() => lockedRuntime({ packages: { "node_modules/@oven/bun-linux-aarch64": { version: "1.4.5", integrity: "sha1-abc" } } }, "@oven/bun-linux-aarch64")).toThrow("sha512");
  });

  test("a tarball is checked against the lockfile's sha512 integrity", () => {
    const bytes = new TextEncoder().encode("abc");
    const integrity = "sha512-3a81oZNherrMQXNJriBBMRLm+k6JqX6iCp7u5ktV05ohkpkqJ0/BqDa6PCOj/uu9RU1EI2Q86A4qmslPpUyknw==";
    expect(matchesIntegrity(bytes, integrity)).toBe(true);
    expect(matchesIntegrity(new TextEncoder().encode("abd"), integrity)).toBe(false);
  });
});

describe("llmgw version", () => {
  test("the platform as release files name it, and the protocol version", () => {
    expect(versionInfo("linux", "arm64")).toEqual({ version: expect.any(String), commit: expect.any(String), platform: "linux-arm64", protocol: PROTOCOL_VERSION });
    expect(versionInfo("linux", "x64").platform).toBe("linux-x64");
  });

  test("text keeps `llmgw VERSION` first, then the commit; json has exactly the four fields", () => {
    const info = { version: "0.2.0", commit: `${SHA}-dirty`, platform: "linux-arm64", protocol: 2 };
    expect(renderVersion(info, "text")).toBe(`llmgw 0.2.0 (commit ${SHA}-dirty, linux-arm64, protocol 2)\n`);
    expect(JSON.parse(renderVersion(info, "json"))).toEqual(info);
    expect(renderVersion(info, "json").endsWith("}\n")).toBe(true);
  });
});
