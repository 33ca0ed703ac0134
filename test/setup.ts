// What the test suite needs from the machine beyond Node.js, npm and the Bun that `npm ci`
// brings: a few commands from Debian's packages (PostgreSQL, Patroni, etcd and keepalived among
// them, for the store's and the failover tests, which fail, not skip, without them). `npm test` runs this first. When everything is
// there it only looks each command up on PATH (milliseconds). When something is missing and we
// are root with apt-get, it installs the packages (`apt-get update` first) and says what it
// installed; otherwise it fails, naming what is missing and the command that installs it.
//
//   bun test/setup.ts          check, install what is missing
//   bun test/setup.ts --check  check only: exit 1 naming what is missing, install nothing
//
// The browser is Debian's chromium, not one from an npm package: the suite already needs apt
// for promtool, and Debian's build is the one the dashboard test is written and run against.

import { existsSync } from "node:fs";

export interface Need {
  /**
   * The command the tests run, looked up on PATH as they look it up; or, for binaries that are
   * not on PATH (PostgreSQL's server, sbin for non-root users), an absolute path or glob
   * (`/usr/lib/postgresql/* /bin/initdb`, `{a,b}` alternatives) that must match a file.
   */
  command: string;
  /** The Debian package that provides it. */
  pkg: string;
  /** Which tests use it. */
  usedBy: string;
}

export const NEEDS: readonly Need[] = [
  { command: "chromium", pkg: "chromium", usedBy: "test/e2e/dashboard.test.ts (headless browser)" },
  { command: "promtool", pkg: "prometheus", usedBy: "test/integration/router.test.ts, test/e2e/metrics.test.ts, test/integration/fleet-metrics-promtool.test.ts (checks /metrics and the Prometheus configuration)" },
  { command: "systemd-analyze", pkg: "systemd", usedBy: "test/integration/install.test.ts (verifies the units)" },
  { command: "openssl", pkg: "openssl", usedBy: "test/integration/tls.test.ts, ui-session.test.ts (makes certificates)" },
  { command: "ps", pkg: "procps", usedBy: "test/e2e/faults.test.ts (finds leftover processes)" },
  { command: "/usr/lib/postgresql/*/bin/initdb", pkg: "postgresql", usedBy: "test/helpers/postgres.ts (a real PostgreSQL for the store's tests)" },
  { command: "/usr/lib/postgresql/*/bin/postgres", pkg: "postgresql", usedBy: "test/helpers/postgres.ts (a real PostgreSQL for the store's tests)" },
  { command: "/{usr/sbin,sbin,usr/bin}/runuser", pkg: "util-linux", usedBy: "test/helpers/postgres.ts (PostgreSQL runs as the user postgres)" },
  { command: "pgrep", pkg: "procps", usedBy: "test/helpers/postgres.ts (waits for every server process to end)" },
  { command: "patroni", pkg: "patroni", usedBy: "the PostgreSQL failover tests (replication and failover)" },
  { command: "etcd", pkg: "etcd-server", usedBy: "the PostgreSQL failover tests (Patroni's configuration store)" },
  { command: "/usr/lib/python3/dist-packages/etcd/__init__.py", pkg: "python3-etcd", usedBy: "the PostgreSQL failover tests (Patroni's etcd client: patroni depends on it or on consul, kazoo or kubernetes)" },
  { command: "/usr/sbin/keepalived", pkg: "keepalived", usedBy: "the floating address test" },
  { command: "ip", pkg: "iproute2", usedBy: "the floating address test (network namespaces, veth pairs)" },
  { command: "zsh", pkg: "zsh", usedBy: "test/integration/completion.test.ts (the zsh completion script, driven in a real zsh)" },
  { command: "script", pkg: "bsdutils", usedBy: "test/e2e/log-format.test.ts (serve on a pseudo-terminal)" },
  { command: "qemu-aarch64-static", pkg: "qemu-user-static", usedBy: "test/e2e/arm64-smoke.test.ts (runs the arm64 release binary under user-mode emulation)" },
  { command: "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1", pkg: "libc6-arm64-cross", usedBy: "test/e2e/arm64-smoke.test.ts (the arm64 loader and C library the emulated binary is linked against)" },
];

export interface SetupEnv {
  /** The PATH the tests will run with. */
  path: string;
  /** Whether a file matches an absolute path or glob (default: looks on this machine's disk). */
  exists?: (pattern: string) => boolean;
  isRoot: boolean;
  /** apt-get's path, or null where there is none. */
  aptGet: string | null;
  log: (line: string) => void;
  /** Runs a command; returns its exit code and output (stdout and stderr together). */
  exec: (cmd: string[]) => { code: number; output: string };
}

/** Whether a file matches an absolute path or glob. */
export function fileMatches(pattern: string): boolean {
  const brace = /\{([^{}]*)\}/.exec(pattern);
  if (brace) return brace[1]!.split(",").some((alt) => fileMatches(pattern.slice(0, brace.index) + alt + pattern.slice(brace.index + brace[0].length)));
  if (!/[*?[]/.test(pattern)) return existsSync(pattern);
  for (const _ of new Bun.Glob(pattern.slice(1)).scanSync({ cwd: "/", onlyFiles: true, followSymlinks: true })) return true;
  return false;
}

/** What of `needs` this machine lacks: commands not on `path`, absolute paths or globs matching no file. */
export function missing(path: string, needs: readonly Need[] = NEEDS, exists: (pattern: string) => boolean = fileMatches): Need[] {
  return needs.filter((n) => (n.command.startsWith("/") ? !exists(n.command) : !Bun.which(n.command, { PATH: path })));
}

function installCommand(pkgs: string[]): string {
  return `apt-get update && apt-get install -y --no-install-recommends ${pkgs.join(" ")}`;
}

function listing(list: Need[]): string {
  return list.map((n) => `  ${n.command} (Debian package ${n.pkg}), for ${n.usedBy}`).join("\n");
}

/** Returns the process's exit code: 0 when every command the tests need is on PATH afterwards. */
export function setup(env: SetupEnv, opts: { install: boolean } = { install: true }): number {
  const absent = missing(env.path, NEEDS, env.exists);
  if (absent.length === 0) return 0;
  const pkgs = [...new Set(absent.map((n) => n.pkg))];
  if (!opts.install || !env.isRoot || env.aptGet === null) {
    const why = !opts.install ? "" : env.aptGet === null ? " (no apt-get here to install them with)" : " (not root, so not installing them)";
    env.log(`test setup: the tests need commands this machine lacks${why}:\n${listing(absent)}\ninstall them with:\n  sudo sh -c '${installCommand(pkgs)}'`);
    return 1;
  }
  env.log(`test setup: installing ${pkgs.join(", ")} with apt-get, for:\n${listing(absent)}`);
  const t0 = performance.now();
  for (const cmd of [
    [env.aptGet, "update", "-qq"],
    // Waits for another apt (an unattended upgrade, say) to let go of the lock instead of failing.
    [env.aptGet, "install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", ...pkgs],
  ]) {
    // Once more after a failure: a mirror's hiccup should not fail the test run.
    let r = env.exec(cmd);
    if (r.code !== 0) r = env.exec(cmd);
    if (r.code !== 0) {
      env.log(`${r.output.trimEnd()}\ntest setup: \`${cmd.join(" ")}\` failed with exit code ${r.code}; install by hand:\n  ${installCommand(pkgs)}`);
      return 1;
    }
  }
  const still = missing(env.path, NEEDS, env.exists);
  if (still.length > 0) {
    env.log(`test setup: apt-get installed ${pkgs.join(", ")}, but these are still not on PATH (${env.path}):\n${listing(still)}`);
    return 1;
  }
  env.log(`test setup: installed ${pkgs.join(", ")} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return 0;
}

if (import.meta.main) {
  const path = process.env.PATH ?? "";
  const code = setup(
    {
      path,
      isRoot: process.getuid?.() === 0,
      aptGet: Bun.which("apt-get", { PATH: `${path}:/usr/sbin:/usr/bin:/sbin:/bin` }),
      log: (line) => process.stderr.write(`${line}\n`),
      exec: (cmd) => {
        const p = Bun.spawnSync(cmd, { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }, stdout: "pipe", stderr: "pipe" });
        return { code: p.exitCode ?? 1, output: p.stdout.toString() + p.stderr.toString() };
      },
    },
    { install: !process.argv.includes("--check") },
  );
  process.exit(code);
}
