// test/setup.ts, which `npm test` runs first: on a PATH made here, with apt-get stood in for,
// so that what it does when commands are missing is checked without touching the machine.

import { describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NEEDS, type SetupEnv, fileMatches, missing, setup } from "../setup";
import { scratchDir } from "../helpers/tmp";

/** Per stand-in PATH directory, the absolute paths/globs of NEEDS that "exist" beside it. */
const files = new Map<string, Set<string>>();
const existsFor = (dir: string) => (pattern: string) => files.get(dir)?.has(pattern) ?? false;
const missingOn = (dir: string) => missing(dir, NEEDS, existsFor(dir));

/** A PATH directory holding a stand-in for each of `commands` (absolute ones are recorded as present). */
function pathWith(commands: string[]): string {
  const dir = scratchDir("llmgw-setup-");
  files.set(dir, new Set());
  for (const c of commands) provide(dir, c);
  return dir;
}

function provide(dir: string, command: string) {
  if (command.startsWith("/")) {
    files.get(dir)!.add(command);
    return;
  }
  writeFileSync(join(dir, command), "#!/bin/sh\n");
  chmodSync(join(dir, command), 0o755);
}

const ALL_PKGS = "chromium prometheus systemd openssl procps postgresql util-linux patroni etcd-server python3-etcd keepalived iproute2 zsh bsdutils qemu-user-static libc6-arm64-cross";

function env(path: string, over: Partial<SetupEnv> = {}): SetupEnv & { lines: string[]; ran: string[][] } {
  const lines: string[] = [];
  const ran: string[][] = [];
  return {
    path,
    exists: existsFor(path),
    isRoot: true,
    aptGet: "/usr/bin/apt-get",
    log: (l) => lines.push(l),
    exec: (cmd) => {
      ran.push(cmd);
      return { code: 0, output: "" };
    },
    ...over,
    lines,
    ran,
  };
}

const ALL = NEEDS.map((n) => n.command);

describe("test/setup.ts", () => {
  test("with every command on PATH it runs nothing and says nothing", () => {
    const e = env(pathWith(ALL));
    expect(setup(e)).toBe(0);
    expect(e.ran).toEqual([]);
    expect(e.lines).toEqual([]);
  });

  test("as root it updates apt's lists, installs the missing commands' packages, and says so", () => {
    const dir = pathWith(ALL.filter((c) => c !== "promtool" && c !== "chromium"));
    const e = env(dir, {
      exec: (cmd) => {
        e.ran.push(cmd);
        if (cmd[1] === "install") for (const c of ["promtool", "chromium"]) provide(dir, c);
        return { code: 0, output: "" };
      },
    });
    expect(setup(e)).toBe(0);
    expect(e.ran).toEqual([
      ["/usr/bin/apt-get", "update", "-qq"],
      ["/usr/bin/apt-get", "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", "chromium", "prometheus"],
    ]);
    expect(e.lines[0]).toContain("installing chromium, prometheus with apt-get");
    expect(e.lines[0]).toContain("promtool (Debian package prometheus), for test/integration/router.test.ts");
    expect(e.lines.at(-1)).toMatch(/^test setup: installed chromium, prometheus in \d+\.\d s$/);
    expect(missingOn(dir)).toEqual([]);
  });

  test("not root, it installs nothing and fails naming what is missing and the command to run", () => {
    const e = env(pathWith(ALL.filter((c) => c !== "systemd-analyze")), { isRoot: false });
    expect(setup(e)).toBe(1);
    expect(e.ran).toEqual([]);
    expect(e.lines.join("\n")).toBe(
      [
        "test setup: the tests need commands this machine lacks (not root, so not installing them):",
        "  systemd-analyze (Debian package systemd), for test/integration/install.test.ts (verifies the units)",
        "install them with:",
        "  sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends systemd'",
      ].join("\n"),
    );
  });

  test("without apt-get, or with --check, it fails the same way", () => {
    const noApt = env(pathWith([]), { aptGet: null });
    expect(setup(noApt)).toBe(1);
    expect(noApt.lines[0]).toStartWith("test setup: the tests need commands this machine lacks (no apt-get here to install them with):");
    expect(noApt.lines[0]).toEndWith(`apt-get install -y --no-install-recommends ${ALL_PKGS}'`);
    const check = env(pathWith(["chromium"]));
    expect(setup(check, { install: false })).toBe(1);
    expect(check.ran).toEqual([]);
    expect(check.lines[0]).toStartWith("test setup: the tests need commands this machine lacks:\n  promtool");
  });

  test("a failing apt-get, or one that leaves a command off PATH, fails with what it printed", () => {
    const tries: string[] = [];
    const failing = env(pathWith([]), {
      exec: (cmd) => {
        tries.push(cmd[1]!);
        return { code: cmd[1] === "install" ? 100 : 0, output: "E: Unable to locate package prometheus\n" };
      },
    });
    expect(setup(failing)).toBe(1);
    expect(tries).toEqual(["update", "install", "install"]); // tried twice
    expect(failing.lines.at(-1)).toContain(
      `E: Unable to locate package prometheus\ntest setup: \`/usr/bin/apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 ${ALL_PKGS}\` failed with exit code 100`,
    );
    const dir = pathWith(ALL.filter((c) => c !== "ps" && c !== "pgrep"));
    const useless = env(dir);
    expect(setup(useless)).toBe(1);
    expect(useless.lines.at(-1)).toBe(
      `test setup: apt-get installed procps, but these are still not on PATH (${dir}):\n  ps (Debian package procps), for test/e2e/faults.test.ts (finds leftover processes)\n  pgrep (Debian package procps), for test/helpers/postgres.ts (waits for every server process to end)`,
    );
  });

  test("PostgreSQL's server binaries, not on PATH, are checked by their glob; missing, the package postgresql is installed", () => {
    const initdb = NEEDS.find((n) => n.command.endsWith("/bin/initdb"))!;
    expect(initdb).toMatchObject({ command: "/usr/lib/postgresql/*/bin/initdb", pkg: "postgresql" });
    for (const pkg of ["postgresql", "patroni", "etcd-server", "python3-etcd", "keepalived", "iproute2", "util-linux"]) expect(NEEDS.map((n) => n.pkg)).toContain(pkg);
    const dir = pathWith(ALL.filter((c) => !c.startsWith("/usr/lib/postgresql/")));
    // On PATH under the same name does not count: the helper looks under /usr/lib/postgresql.
    provide(dir, "initdb");
    const e = env(dir, {
      exec: (cmd) => {
        e.ran.push(cmd);
        if (cmd[1] === "install") for (const c of ALL) provide(dir, c);
        return { code: 0, output: "" };
      },
    });
    expect(missingOn(dir).map((n) => n.command)).toEqual(["/usr/lib/postgresql/*/bin/initdb", "/usr/lib/postgresql/*/bin/postgres"]);
    expect(setup(e)).toBe(0);
    expect(e.ran[1]!.at(-1)).toBe("postgresql");
    expect(e.ran[1]!.filter((a) => a === "postgresql")).toHaveLength(1);
    expect(e.lines[0]).toContain("/usr/lib/postgresql/*/bin/initdb (Debian package postgresql), for test/helpers/postgres.ts");
  });

  test("fileMatches finds a file by absolute path, glob or {a,b} alternatives, and nothing where there is none", () => {
    const root = scratchDir("llmgw-setup-glob-");
    mkdirSync(join(root, "lib/pg/15/bin"), { recursive: true });
    writeFileSync(join(root, "lib/pg/15/bin/initdb"), "");
    expect(fileMatches(join(root, "lib/pg/15/bin/initdb"))).toBe(true);
    expect(fileMatches(join(root, "lib/pg/*/bin/initdb"))).toBe(true);
    expect(fileMatches(join(root, "{nope,lib}/pg/*/bin/initdb"))).toBe(true);
    expect(fileMatches(join(root, "lib/pg/*/bin/postgres"))).toBe(false);
    expect(fileMatches(join(root, "{x,y}/pg/15/bin/initdb"))).toBe(false);
  });
});
