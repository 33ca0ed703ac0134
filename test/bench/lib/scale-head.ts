// What the scale benches (scale.ts, scale-router.ts) share: one `dist/llmgw serve` sized for a
// simulated fleet of N nodes (caps, rate limits and open files raised), its admin API, the
// per-node addresses the fleet reports, and the catalog of N/2 models applied to it.

import { join } from "node:path";
import { CLASSES, simAddress } from "./fleet";
import { type Child, freePort, ROOT, spawnChild } from "./procs";

export const BIN = join(ROOT, "dist/llmgw");

export interface ScaleHead {
  serve: Child;
  admin: string;
  routerUrl: string;
  adminToken: string;
  joinToken: string;
  /** An admin API call; a non-2xx answer throws with its body. */
  api<T>(path: string, init?: RequestInit): Promise<T>;
}

/**
 * The nice value of the processes a scale bench measures (serve, the fleet): a shared machine's
 * other work then waits for them, not they for it, so a latency tail is theirs. Root only; as
 * another user they run at 0, and the "others on core" figure says how much that cost.
 */
export const BENCH_NICE = -10;

/** Starts serve in `dir` for N nodes and waits until its admin API answers. */
export async function startScaleHead(dir: string, N: number, o: { cpus: string; extraArgs?: string[]; nice?: number }): Promise<ScaleHead> {
  const adminPort = freePort();
  const routerPort = freePort();
  const adminToken = "bench-admin-token-0123456789abcdef";
  const joinToken = "bench-join-token-0123456789abcdef";
  const serve = await spawnChild(
    "serve",
    [...(process.env.SCALE_PROF ? [join(ROOT, "node_modules/.bin/bun"), "--cpu-prof", "--cpu-prof-md", `--cpu-prof-dir=${process.env.SCALE_PROF}`, join(ROOT, "src/main.ts")] : [BIN]), "serve", "--data-dir", join(dir, "head"), "--listen", `127.0.0.1:${routerPort}`, "--admin-listen", `127.0.0.1:${adminPort}`, "--admin-token", adminToken, "--join-token", joinToken,
      "--log-level", process.env.SCALE_LOG ?? "warn", "--max-nodes", String(N + 100), "--admin-max-connections", "8192", "--admin-max-connections-per-address", "8192",
      "--heartbeat-rate", "1000", "--heartbeat-burst", "1000", ...(o.extraArgs ?? [])],
    { waitUrl: false, cpus: o.cpus, nofile: 20000, nice: o.nice ?? BENCH_NICE },
  );
  const admin = `http://127.0.0.1:${adminPort}`;
  const auth = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };
  const api = async <T>(path: string, init: RequestInit = {}): Promise<T> => {
    const r = await fetch(`${admin}/api/v1${path}`, { ...init, headers: auth, signal: AbortSignal.timeout(60_000) });
    const t = await r.text();
    if (!r.ok) throw new Error(`${path}: ${r.status} ${t.slice(0, 300)}`);
    return JSON.parse(t) as T;
  };
  for (let i = 0; ; i++) {
    try {
      await api("/summary");
      break;
    } catch (e) {
      if (i > 200) throw new Error(`serve did not answer: ${(e as Error).message}\n${serve.stderr()}`);
      await Bun.sleep(100);
    }
  }
  return { serve, admin, routerUrl: `http://127.0.0.1:${routerPort}`, adminToken, joinToken, api };
}

/** Lets each simulated node report its own loopback address (see simAddress), 32 requests at a time. */
export async function allowAddresses(h: ScaleHead, n: number): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (next < n) {
        const i = next++;
        await h.api(`/nodes/sim-${i}/address`, { method: "PUT", body: JSON.stringify({ address: simAddress(i) }) });
      }
    }),
  );
}

/** The fleet's catalog: m0 … m(count-1), min 1 replica, one profile per class (whole cards and the MIG instance), one GPU each. */
export function scaleModels(count: number) {
  const classes = [...CLASSES, "A100-80GB/3g.40gb"];
  return Array.from({ length: count }, (_, j) => ({ name: `m${j}`, replicas: { min: 1 }, profiles: classes.map((c, k) => ({ name: `p${k}`, engine: "vllm", gpu_class: c, gpus: 1 })) }));
}

/** Applies models; the apply API takes at most 2,000 a request, so larger catalogs go in consecutive parts. */
export async function applyModels(h: ScaleHead, models: ReturnType<typeof scaleModels>): Promise<void> {
  for (let k = 0; k < models.length; k += 2000) await h.api("/apply", { method: "POST", body: JSON.stringify({ models: models.slice(k, k + 2000) }) });
}
