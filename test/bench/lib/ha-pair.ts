// Control planes on one store for the HA bench: `dist/llmgw serve --store … --ha --name cp-i`,
// each with its own data dir and ports on 127.0.0.1, the same admin and join tokens, and
// whether it leads read from its /healthz (`?leader=1` answers 200 only on the leader).

import { join } from "node:path";
import { type Child, freePort, spawnChild } from "./procs";
import { BIN } from "./scale-head";

export const ADMIN_TOKEN = "bench-admin-token-0123456789abcdef";
export const JOIN_TOKEN = "bench-join-token-0123456789abcdef";

export interface ControlPlane {
  name: string;
  admin: string;
  router: string;
  child: Child | undefined;
  /** (Re)starts it on the same ports and data dir. */
  start(): Promise<void>;
  /** SIGKILL to its process group, as a crash would. */
  kill9(): Promise<void>;
  stop(): Promise<void>;
  api<T>(path: string, init?: RequestInit): Promise<T>;
}

export interface PairOptions {
  dir: string;
  store: string;
  leaseTtl: string;
  leaseRenew: string;
  cpus?: string;
  logLevel?: string;
}

export function controlPlane(i: number, o: PairOptions): ControlPlane {
  const adminPort = freePort();
  const routerPort = freePort();
  const name = `cp-${i}`;
  const admin = `http://127.0.0.1:${adminPort}`;
  const auth = { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" };
  const cp: ControlPlane = {
    name,
    admin,
    router: `http://127.0.0.1:${routerPort}`,
    child: undefined,
    async start() {
      cp.child = await spawnChild(
        name,
        [BIN, "serve", "--data-dir", join(o.dir, name), "--store", o.store, "--ha", "--name", name, "--advertise-url", admin, "--listen", `127.0.0.1:${routerPort}`, "--admin-listen", `127.0.0.1:${adminPort}`,
          "--admin-token", ADMIN_TOKEN, "--join-token", JOIN_TOKEN, "--lease-ttl", o.leaseTtl, "--lease-renew", o.leaseRenew, "--log-level", o.logLevel ?? "info"],
        { waitUrl: false, cpus: o.cpus, nofile: 20000 },
      );
      for (let k = 0; ; k++) {
        try {
          const r = await fetch(`${admin}/healthz`, { signal: AbortSignal.timeout(2000) });
          await r.arrayBuffer();
          return;
        } catch {
          if (k > 300 || cp.child.proc.exitCode !== null) throw new Error(`${name} did not answer /healthz: ${cp.child.stderr().slice(-2000)}`);
          await Bun.sleep(50);
        }
      }
    },
    async kill9() {
      const c = cp.child;
      if (!c) return;
      try {
        process.kill(-c.pid, "SIGKILL");
      } catch {
        // gone already
      }
      await c.proc.exited;
      await c.kill();
      cp.child = undefined;
    },
    async stop() {
      await cp.child?.kill();
      cp.child = undefined;
    },
    async api<T>(path: string, init: RequestInit = {}): Promise<T> {
      const r = await fetch(`${admin}/api/v1${path}`, { ...init, headers: auth, signal: AbortSignal.timeout(30_000) });
      const t = await r.text();
      if (!r.ok) throw new Error(`${name} ${path}: ${r.status} ${t.slice(0, 300)}`);
      return JSON.parse(t) as T;
    },
  };
  return cp;
}

/** Whether it answers as the leader (`/healthz?leader=1` 200); false when it does not answer. */
export async function leads(cp: ControlPlane): Promise<boolean> {
  try {
    const r = await fetch(`${cp.admin}/healthz?leader=1`, { signal: AbortSignal.timeout(1000) });
    await r.arrayBuffer();
    return r.status === 200;
  } catch {
    return false;
  }
}

/** Waits until exactly one of them leads; answers it (throws after timeoutMs, saying who led). */
export async function oneLeader(cps: ControlPlane[], timeoutMs: number): Promise<ControlPlane> {
  const until = performance.now() + timeoutMs;
  let seen: boolean[] = [];
  while (performance.now() < until) {
    seen = await Promise.all(cps.map(leads));
    if (seen.filter(Boolean).length === 1) return cps[seen.indexOf(true)]!;
    await Bun.sleep(50);
  }
  throw new Error(`no single leader within ${timeoutMs} ms: ${cps.map((c, i) => `${c.name} ${seen[i] ? "leads" : "does not lead"}`).join(", ")}`);
}

/** Starts them one after another (the first leads), then checks that only one leads a renewal later. */
export async function startPair(cps: ControlPlane[], renewMs: number): Promise<ControlPlane> {
  await cps[0]!.start();
  await oneLeader([cps[0]!], 30_000);
  for (const cp of cps.slice(1)) await cp.start();
  await Bun.sleep(renewMs + 500);
  if ((await Promise.all(cps.map(leads))).filter(Boolean).length > 1) throw new Error("several control planes lead at once: this branch has no leader lease yet");
  return oneLeader(cps, 30_000);
}
