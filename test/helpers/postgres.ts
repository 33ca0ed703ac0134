// A real PostgreSQL for one test: Debian's server binaries (package postgresql), a fresh data
// dir in a temp dir, trust authentication on 127.0.0.1 only, a free port, the unix socket inside
// the temp dir, fsync off (commits survive a killed server, not a crashed machine). initdb
// refuses to run as root, so as root everything runs as the `postgres` user (runuser). The
// server runs in a process group of its own: kill9() kills the postmaster and every backend at
// once, as if the server crashed; start() brings it back on the same port and data. stop()
// always kills it and removes the temp dir, and a process that exits without calling stop()
// still does both.
//
//   const pg = await startPostgres();
//   try { ... pg.url ... } finally { await pg.stop(); }

import { chownSync, existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { freePort } from "./ports";
import { scratchDir } from "./tmp";

export interface StartPostgresOptions {
  /** The port to listen on (default: a free one). */
  port?: number;
  /** The database created for the test (default "llmgw"). */
  database?: string;
  /** Extra server settings (`-c name=value`). */
  settings?: Record<string, string | number>;
  /** How long start may take (default 30 s). */
  timeoutMs?: number;
}

export interface Postgres {
  /** postgres://postgres@127.0.0.1:<port>/<database> */
  url: string;
  host: string;
  port: number;
  /** The cluster's data directory (owned by `postgres`). */
  dataDir: string;
  database: string;
  /** Kills the server (if running) and removes the temp dir. Safe to call twice. */
  stop(): Promise<void>;
  /** SIGKILL to the postmaster and every backend at once (keeps the data; start() again). */
  kill9(): Promise<void>;
  /** A fast, clean shutdown (keeps the data; start() again). */
  halt(): Promise<void>;
  /** Starts the server again on the same port and data after kill9() or halt(). */
  start(): Promise<void>;
  /** Runs one query (as superuser, on `database` unless told) and answers its rows. */
  sql(query: string, database?: string): Promise<Record<string, unknown>[]>;
}

const PACKAGE_HINT = "install Debian's package postgresql (apt-get install postgresql), or run `bun test/setup.ts`";

/** The newest PostgreSQL server binaries under /usr/lib/postgresql/<version>/bin. */
export function postgresBinDir(root = "/usr/lib/postgresql"): string {
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => /^\d+(\.\d+)?$/.test(v) && existsSync(join(root, v, "bin", "initdb")) && existsSync(join(root, v, "bin", "postgres")))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL server binaries under ${root}/<version>/bin (initdb, postgres): ${PACKAGE_HINT}`);
  return join(root, versions[0]!, "bin");
}

const isRoot = process.getuid?.() === 0;

function asPostgres(cmd: string[]): string[] {
  if (!isRoot) return cmd;
  const runuser = ["/usr/sbin/runuser", "/sbin/runuser", "/usr/bin/runuser"].find((p) => existsSync(p));
  if (!runuser) throw new Error("running as root, PostgreSQL must run as the user postgres, but runuser is missing: install Debian's package util-linux");
  return [runuser, "-u", "postgres", "--", ...cmd];
}

function postgresUid(): { uid: number; gid: number } {
  const line = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith("postgres:"));
  if (!line) throw new Error(`running as root, PostgreSQL must run as the user postgres, which does not exist: ${PACKAGE_HINT}`);
  const f = line.split(":");
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

const live = new Set<() => void>();
let exitHook = false;
function onExit(fn: () => void): void {
  live.add(fn);
  if (exitHook) return;
  exitHook = true;
  process.on("exit", () => {
    for (const f of live) f();
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const OWNER = "owner.pid";

/**
 * Removes what earlier test processes left behind when they ended without stop() or their exit
 * hook (a runner that exits without an exit event): temp dirs whose owning process is gone,
 * after killing any server still running in them.
 */
function sweepLeftovers(): void {
  for (const name of readdirSync(tmpdir())) {
    if (!name.startsWith("llmgw-pg-")) continue;
    const root = join(tmpdir(), name);
    let owner: number;
    try {
      owner = Number(readFileSync(join(root, OWNER), "utf8"));
    } catch {
      continue; // not one of ours, or still being made
    }
    if (!(owner > 0) || alive(owner)) continue;
    try {
      const pid = Number(readFileSync(join(root, "data", "postmaster.pid"), "utf8").split("\n")[0]);
      if (pid > 0) process.kill(pid, "SIGKILL");
    } catch {
      /* no server ran there */
    }
    rmSync(root, { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as { code?: string }).code === "EPERM";
  }
}

export async function startPostgres(opts: StartPostgresOptions = {}): Promise<Postgres> {
  const bin = postgresBinDir();
  sweepLeftovers();
  const root = scratchDir("llmgw-pg-");
  writeFileSync(join(root, OWNER), String(process.pid));
  const dataDir = join(root, "data");
  const host = "127.0.0.1";
  const database = opts.database ?? "llmgw";
  const timeoutMs = opts.timeoutMs ?? 30_000;
  let proc: ReturnType<typeof Bun.spawn> | undefined;
  let logTail = "";
  let port = opts.port ?? 0;

  const removeDir = () => rmSync(root, { recursive: true, force: true });
  const killGroup = () => {
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      try {
        process.kill(-proc.pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
  };
  const emergency = () => {
    killGroup();
    removeDir();
  };
  onExit(emergency);

  try {
    if (isRoot) {
      const { uid, gid } = postgresUid();
      chownSync(root, uid, gid);
    }
    const init = Bun.spawnSync(asPostgres([join(bin, "initdb"), "-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync", "--no-instructions"]), {
      stdout: "pipe",
      stderr: "pipe",
    });
    if (init.exitCode !== 0) throw new Error(`initdb failed (exit ${init.exitCode}):\n${init.stderr.toString()}${init.stdout.toString()}`);
    // Trust, and only over TCP on 127.0.0.1 (and the private socket in the temp dir).
    writeFileSync(join(dataDir, "pg_hba.conf"), "local all all trust\nhost all all 127.0.0.1/32 trust\n");
  } catch (e) {
    emergency();
    live.delete(emergency);
    throw e;
  }

  const spawnServer = async () => {
    const settings: Record<string, string | number> = {
      listen_addresses: host,
      port,
      unix_socket_directories: root,
      // Off: nothing waits for the disk. Safe against a killed server (the kernel still holds
      // what was written); synchronous_commit stays on, or a kill -9 would lose commits.
      fsync: "off",
      full_page_writes: "off",
      max_connections: 200,
      shared_buffers: "64MB",
      logging_collector: "off",
      ...opts.settings,
    };
    // Left behind by a killed server (none of whose processes live on): it would read as ready.
    rmSync(join(dataDir, "postmaster.pid"), { force: true });
    const args = [join(bin, "postgres"), "-D", dataDir, ...Object.entries(settings).flatMap(([k, v]) => ["-c", `${k}=${v}`])];
    proc = Bun.spawn(asPostgres(args), { stdout: "ignore", stderr: "pipe", detached: true });
    const stderr = proc.stderr as ReadableStream<Uint8Array>;
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stderr) logTail = (logTail + dec.decode(chunk)).slice(-4000);
    })().catch(() => {});
    const deadline = Date.now() + timeoutMs;
    const pidFile = join(dataDir, "postmaster.pid");
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`postgres exited (${proc.exitCode ?? proc.signalCode}) while starting on port ${port}:\n${logTail}`);
      // The postmaster writes "ready" as the pid file's status line once it accepts connections.
      if (existsSync(pidFile) && readFileSync(pidFile, "utf8").split("\n")[7]?.trim() === "ready") return;
      if (Date.now() > deadline) throw new Error(`postgres did not get ready on port ${port} within ${timeoutMs} ms:\n${logTail}`);
      await sleep(20);
    }
  };

  const waitGone = async () => {
    if (!proc) return;
    await proc.exited;
    // Backends notice the postmaster's death by themselves; wait until none holds the data dir.
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const r = Bun.spawnSync(["pgrep", "-g", String(proc.pid)], { stdout: "pipe" });
      if (r.exitCode !== 0) return;
      try {
        process.kill(-proc.pid, "SIGKILL");
      } catch {
        return;
      }
      await sleep(20);
    }
  };

  const query = async (q: string, db = database) => {
    const c = postgres({ host, port, user: "postgres", database: db, max: 1, onnotice: () => {}, connect_timeout: 10 });
    try {
      return [...(await c.unsafe(q))] as Record<string, unknown>[];
    } finally {
      await c.end({ timeout: 1 });
    }
  };

  const startOnce = async () => {
    for (let attempt = 0; ; attempt++) {
      if (opts.port === undefined && attempt > 0) port = freePort();
      if (port === 0) port = freePort();
      try {
        await spawnServer();
        return;
      } catch (e) {
        killGroup();
        await waitGone();
        // Another process took the port between the probe and the listen: try another one.
        if (opts.port === undefined && attempt < 3 && /could not (bind|create listen)|Address already in use/i.test(logTail)) continue;
        throw e;
      }
    }
  };

  try {
    await startOnce();
    await query(`CREATE DATABASE ${database}`, "postgres");
  } catch (e) {
    emergency();
    live.delete(emergency);
    throw e;
  }

  let stopped = false;
  return {
    url: `postgres://postgres@${host}:${port}/${database}`,
    host,
    get port() {
      return port;
    },
    dataDir,
    database,
    sql: query,
    async kill9() {
      killGroup();
      await waitGone();
    },
    async halt() {
      if (proc && proc.exitCode === null && proc.signalCode === null) {
        // SIGINT to the postmaster itself (not runuser above it): its fast shutdown.
        const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
        try {
          process.kill(pid, "SIGINT");
        } catch {
          /* already gone */
        }
        const done = await Promise.race([proc.exited.then(() => true), sleep(10_000).then(() => false)]);
        if (!done) killGroup();
      }
      await waitGone();
    },
    async start() {
      if (stopped) throw new Error("this PostgreSQL was stopped and its data removed");
      if (proc && proc.exitCode === null && proc.signalCode === null) return;
      await spawnServer();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      killGroup();
      await waitGone();
      removeDir();
      live.delete(emergency);
    },
  };
}
