// Starts a real PostgreSQL cluster replicated by Patroni for a test: one etcd 3.4 (Patroni talks
// to its v3 API, `etcd3:` in the configuration) and three Patroni members, each with its own
// REST API port, PostgreSQL port and data directory, all on 127.0.0.1 and free ports. Short
// timings (ttl 8 s, loop_wait 1 s, retry_timeout 3 s, primary_start_timeout 0) so a failover
// takes seconds and a crashed primary is failed over rather than restarted in place.
// synchronous_mode: a commit is acknowledged only once the sync standby has it, so a failover
// (which Patroni makes only to that standby) loses no acknowledged write: without it, what the
// old primary acknowledged in its last moments may be gone on the new one.
//
// PostgreSQL refuses to run as root, so when the test runs as root Patroni (which starts
// PostgreSQL) runs as the `postgres` user through runuser, with every directory owned by it.
// Debian packages needed: patroni (3.0.2 with python3-etcd), etcd-server (3.4), postgresql (15).

import { chownSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "./ports";
import { until } from "./until";
import { scratchDir } from "./tmp";

export const ETCD = "/usr/bin/etcd";
export const PATRONI = "/usr/bin/patroni";
export const PG_BIN = "/usr/lib/postgresql/15/bin";
const RUNUSER = Bun.which("runuser") ?? "/usr/sbin/runuser";
export const SUPERUSER_PASSWORD = "s3cret-pg-pass";

export interface PatroniMember {
  name: string;
  restUrl: string;
  pgPort: number;
  /** The Patroni process (its PostgreSQL is a child of it). */
  pid: number;
  dataDir: string;
}

/** One member as `GET /cluster` lists it, only the fields the helper itself needs. */
interface ClusterMember {
  name: string;
  role: string;
  state: string;
  lag?: number | string;
  timeline?: number;
}

export interface PatroniCluster {
  members: PatroniMember[];
  /** postgres:// URL naming all three members, target_session_attrs=primary, database `llmgw`. */
  url: string;
  etcdUrl: string;
  /** Milliseconds from start to the first leader with its replicas streaming. */
  startMs: number;
  /**
   * Resolves with the leader's name once a leader (other than `not`) runs and, unless
   * `replicas: false`, every other member runs as a replica with a known lag.
   */
  waitForLeader(opts?: { timeoutMs?: number; not?: string; replicas?: boolean }): Promise<string>;
  /** The current leader's member, as `GET /cluster` of any answering member says; undefined when none. */
  leader(): Promise<PatroniMember | undefined>;
  /** `GET /cluster` as the first answering member reports it (raw JSON). */
  cluster(): Promise<unknown>;
  /** kill -9 of the member's postmaster (the primary's, when no member is given); returns its pid. */
  killPostgres(member?: PatroniMember): Promise<number>;
  /** A planned switchover through Patroni's REST API (POST /switchover); resolves with the new leader's name. */
  switchover(to?: string): Promise<string>;
  stop(): Promise<void>;
}

const isRoot = process.getuid?.() === 0;
let postgresIds: { uid: number; gid: number } | undefined;

function ids(): { uid: number; gid: number } {
  if (postgresIds) return postgresIds;
  const r = Bun.spawnSync(["id", "-u", "postgres"]);
  const g = Bun.spawnSync(["id", "-g", "postgres"]);
  if (r.exitCode !== 0) throw new Error("the `postgres` user does not exist: install Debian's postgresql package (apt-get install postgresql)");
  postgresIds = { uid: Number(r.stdout.toString().trim()), gid: Number(g.stdout.toString().trim()) };
  return postgresIds;
}

function asPostgres(cmd: string[]): string[] {
  return isRoot ? [RUNUSER, "-u", "postgres", "--", ...cmd] : cmd;
}

function ownedDir(path: string): string {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  if (isRoot) chownSync(path, ids().uid, ids().gid);
  return path;
}

export function requireBinaries(): void {
  const missing = [
    [ETCD, "etcd-server"],
    [PATRONI, "patroni"],
    [join(PG_BIN, "postgres"), "postgresql-15"],
  ].filter(([path]) => !existsSync(path!));
  if (missing.length > 0) {
    throw new Error(`the Patroni tests need ${missing.map(([p, pkg]) => `${p} (Debian package ${pkg})`).join(", ")}: install them with apt-get install -y etcd-server patroni postgresql (bun test/setup.ts does)`);
  }
  const etcdLib = Bun.spawnSync(["/usr/bin/python3", "-c", "import etcd"]);
  if (etcdLib.exitCode !== 0) throw new Error("Patroni's etcd support needs the python3-etcd Debian package (apt-get install -y python3-etcd)");
}

function memberYaml(o: { scope: string; name: string; restPort: number; pgPort: number; etcdPort: number; dataDir: string; dir: string }): string {
  return `scope: ${o.scope}
name: ${o.name}
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:${o.restPort}
  connect_address: 127.0.0.1:${o.restPort}
etcd3:
  hosts: 127.0.0.1:${o.etcdPort}
bootstrap:
  dcs:
    ttl: 8
    loop_wait: 1
    retry_timeout: 3
    maximum_lag_on_failover: 16777216
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 64MB
  initdb:
    - encoding: UTF8
    - auth-local: trust
    - auth-host: scram-sha-256
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: 127.0.0.1:${o.pgPort}
  connect_address: 127.0.0.1:${o.pgPort}
  data_dir: ${o.dataDir}
  bin_dir: ${PG_BIN}
  pgpass: ${join(o.dir, `pgpass-${o.name}`)}
  authentication:
    superuser:
      username: postgres
      password: ${SUPERUSER_PASSWORD}
    replication:
      username: replicator
      password: repl-pass
  parameters:
    unix_socket_directories: ${o.dir}
    shared_buffers: 16MB
    max_connections: 100
    fsync: "off"
    synchronous_commit: "on"
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
`;
}

async function getJson(url: string, timeoutMs = 1000): Promise<unknown> {
  const r = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  return r.json();
}

function postmasterPid(dataDir: string): number | undefined {
  try {
    const pid = Number(readFileSync(join(dataDir, "postmaster.pid"), "utf8").split("\n")[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Starts etcd and three Patroni members and waits for a leader with two streaming replicas. */
export async function startPatroni(opts: { members?: number; log?: (line: string) => void } = {}): Promise<PatroniCluster> {
  requireBinaries();
  const t0 = performance.now();
  const n = opts.members ?? 3;
  const dir = scratchDir("llmgw-patroni-");
  ownedDir(dir);
  const procs: Bun.Subprocess[] = [];
  const members: PatroniMember[] = [];
  const logs = new Map<string, string[]>();
  const collect = (name: string, stream: ReadableStream<Uint8Array> | null | number | undefined) => {
    if (!stream || typeof stream === "number") return;
    const lines: string[] = [];
    logs.set(name, lines);
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of stream) {
        lines.push(...dec.decode(chunk).split("\n").filter(Boolean));
        if (lines.length > 400) lines.splice(0, lines.length - 400);
      }
    })().catch(() => {});
  };

  let stopped = false;
  const hardKill = () => {
    for (const m of members) {
      const pm = postmasterPid(m.dataDir);
      if (pm && alive(pm)) try { process.kill(pm, "SIGKILL"); } catch {}
    }
    for (const p of procs) if (p.exitCode === null) p.kill("SIGKILL");
  };
  const onExit = () => {
    if (!stopped) {
      hardKill();
      rmSync(dir, { recursive: true, force: true });
    }
  };
  process.on("exit", onExit);

  const stop = async () => {
    if (stopped) return;
    // Patroni stops its PostgreSQL on SIGTERM (fast shutdown); give it a few seconds, then kill.
    for (const p of procs.slice(1)) if (p.exitCode === null) p.kill("SIGTERM");
    await Promise.race([Promise.all(procs.slice(1).map((p) => p.exited)), Bun.sleep(8000)]);
    hardKill();
    await Promise.all(procs.map((p) => p.exited));
    for (const m of members) {
      const pm = postmasterPid(m.dataDir);
      if (pm && alive(pm)) try { process.kill(pm, "SIGKILL"); } catch {}
    }
    stopped = true;
    process.off("exit", onExit);
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const etcdPort = freePort();
    const peerPort = freePort();
    const etcd = Bun.spawn(
      [ETCD, "--name", "llmgw-test", "--data-dir", join(dir, "etcd"), "--listen-client-urls", `http://127.0.0.1:${etcdPort}`, "--advertise-client-urls", `http://127.0.0.1:${etcdPort}`,
        "--listen-peer-urls", `http://127.0.0.1:${peerPort}`, "--initial-advertise-peer-urls", `http://127.0.0.1:${peerPort}`, "--initial-cluster", `llmgw-test=http://127.0.0.1:${peerPort}`,
        "--heartbeat-interval", "100", "--election-timeout", "500", "--log-level", "warn"],
      // stdout read too: a pipe nobody reads fills (64 KiB) and then blocks the process writing to it.
      { stdout: "pipe", stderr: "pipe" },
    );
    procs.push(etcd);
    collect("etcd", etcd.stderr);
    collect("etcd stdout", etcd.stdout);
    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    await until("etcd to answer /health", async () => {
      if (etcd.exitCode !== null) throw new Error(`etcd exited with ${etcd.exitCode}: ${(logs.get("etcd") ?? []).slice(-10).join("\n")}`);
      try {
        return ((await getJson(`${etcdUrl}/health`, 500)) as { health?: string }).health === "true";
      } catch {
        return false;
      }
    }, { timeoutMs: 20_000, everyMs: 50 });

    const scope = `llmgw-${process.pid}`;
    for (let i = 1; i <= n; i++) {
      const name = `pg${i}`;
      const restPort = freePort();
      const pgPort = freePort();
      const dataDir = join(dir, name);
      const yaml = join(dir, `${name}.yml`);
      writeFileSync(yaml, memberYaml({ scope, name, restPort, pgPort, etcdPort, dataDir, dir }), { mode: 0o600 });
      if (isRoot) chownSync(yaml, ids().uid, ids().gid);
      const p = Bun.spawn(asPostgres([PATRONI, yaml]), { cwd: dir, env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", HOME: dir, LANG: "C.UTF-8" }, stdout: "pipe", stderr: "pipe" });
      procs.push(p);
      collect(name, p.stderr);
      collect(`${name} stdout`, p.stdout);
      members.push({ name, restUrl: `http://127.0.0.1:${restPort}`, pgPort, pid: p.pid, dataDir });
      // The first member bootstraps alone; the others clone from it once it leads.
      if (i === 1) await waitLeader(members, procs, logs, { timeoutMs: 60_000, replicas: false });
    }

    const url = `postgres://postgres:${SUPERUSER_PASSWORD}@${members.map((m) => `127.0.0.1:${m.pgPort}`).join(",")}/llmgw?target_session_attrs=primary`;
    const leaderName = await waitLeader(members, procs, logs, { timeoutMs: 90_000, replicas: true });
    await createDatabase(members.find((m) => m.name === leaderName)!);
    const startMs = Math.round(performance.now() - t0);
    opts.log?.(`patroni: leader ${leaderName} with ${n - 1} streaming replicas after ${startMs} ms`);

    const cluster = async () => {
      for (const m of members) {
        try {
          return await getJson(`${m.restUrl}/cluster`);
        } catch {
          /* next member */
        }
      }
      throw new Error("no Patroni member answered GET /cluster");
    };
    const leader = async () => {
      try {
        const c = (await cluster()) as { members: ClusterMember[] };
        const l = c.members.find((m) => m.role === "leader" && m.state === "running");
        return l && members.find((m) => m.name === l.name);
      } catch {
        return undefined;
      }
    };
    return {
      members,
      url,
      etcdUrl,
      startMs,
      cluster,
      leader,
      waitForLeader: (o = {}) => waitLeader(members, procs, logs, { timeoutMs: o.timeoutMs ?? 60_000, replicas: o.replicas ?? true, not: o.not }),
      async killPostgres(member) {
        const m = member ?? (await leader());
        if (!m) throw new Error("no leader to kill the postgres of");
        const pid = postmasterPid(m.dataDir);
        if (!pid) throw new Error(`${m.name}: no postmaster.pid in ${m.dataDir}`);
        process.kill(pid, "SIGKILL");
        return pid;
      },
      async switchover(to) {
        // In synchronous mode Patroni switches over only to the sync standby, which it names
        // a loop or two after the replicas run (and may rename): wait for one, retry a 412.
        let last = "";
        for (let attempt = 0; attempt < 10; attempt++) {
          await waitLeader(members, procs, logs, { timeoutMs: 60_000, replicas: true });
          const c = (await cluster()) as { members: ClusterMember[] };
          const from = c.members.find((m) => m.role === "leader" && m.state === "running");
          const candidate = to ?? c.members.find((m) => m.role === "sync_standby")?.name;
          if (!from || !candidate) continue;
          const r = await fetch(`${members.find((m) => m.name === from.name)!.restUrl}/switchover`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ leader: from.name, candidate }),
            signal: AbortSignal.timeout(30_000),
          });
          last = `switchover ${from.name} → ${candidate}: ${r.status} ${await r.text()}`;
          if (r.status === 200) return candidate;
          if (r.status !== 412) break;
          await Bun.sleep(500);
        }
        throw new Error(last || "no leader and sync standby to switch over between");
      },
      stop,
    };
  } catch (e) {
    const tail = [...logs].map(([k, v]) => `--- ${k}\n${v.slice(-15).join("\n")}`).join("\n");
    await stop();
    throw new Error(`${(e as Error).message}\n${tail}`);
  }
}

async function waitLeader(members: PatroniMember[], procs: Bun.Subprocess[], logs: Map<string, string[]>, o: { timeoutMs: number; replicas: boolean; not?: string }): Promise<string> {
  let last = "";
  return until(() => `a Patroni leader${o.replicas ? " with running replicas" : ""}${o.not ? ` other than ${o.not}` : ""} (last /cluster: ${last})`, async () => {
    const dead = procs.find((p) => p.exitCode !== null);
    if (dead) throw new Error(`a cluster process exited with ${dead.exitCode}: ${[...logs].map(([k, v]) => `--- ${k}\n${v.slice(-10).join("\n")}`).join("\n")}`);
    for (const m of members) {
      try {
        const c = (await getJson(`${m.restUrl}/cluster`)) as { members: ClusterMember[] };
        last = JSON.stringify(c.members.map((x) => [x.name, x.role, x.state, x.lag]));
        const l = c.members.find((x) => x.role === "leader" && x.state === "running");
        if (!l || l.name === o.not) return false;
        if (!o.replicas) return l.name;
        const others = c.members.filter((x) => x !== l);
        // synchronous_mode: acknowledged writes are safe only once a sync standby is named.
        const ok = others.length === members.length - 1 && others.every((x) => (x.state === "running" || x.state === "streaming") && typeof x.lag === "number") && others.some((x) => x.role === "sync_standby");
        return ok ? l.name : false;
      } catch {
        /* next member */
      }
    }
    return false;
  }, { timeoutMs: o.timeoutMs, everyMs: 100 });
}

/** The llmgw database, on the leader (replicas follow). */
async function createDatabase(m: PatroniMember): Promise<void> {
  const { default: postgres } = await import("postgres");
  const sql = postgres({ host: "127.0.0.1", port: m.pgPort, user: "postgres", password: SUPERUSER_PASSWORD, database: "postgres", max: 1, onnotice: () => {} });
  try {
    await sql.unsafe("CREATE DATABASE llmgw");
  } finally {
    await sql.end();
  }
}
