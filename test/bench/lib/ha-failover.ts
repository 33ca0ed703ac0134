// The HA bench's failover part: two control planes (lib/ha-pair.ts) on one store, one simulated
// node (8 GPUs) heartbeating every second to each that answers. Each round: wait a random part
// of the renewal interval (so the kill falls anywhere between two renewals), kill -9 the leader,
// at once put a new model (min 1) through the survivor (admin writes are transactions any control
// plane may take), then poll the survivor every 25 ms for:
//   leads       `/healthz?leader=1` answers 200;
//   first plan  the new model has a replica (only a leader places: the new leader's first plan
//               that had anything to do, written to the store).
// The killed one is started again and must rejoin standing by before the next round.

import { rmSync } from "node:fs";
import { type ControlPlane, controlPlane, JOIN_TOKEN, leads, oneLeader, startPair } from "./ha-pair";
import { scratchDir } from "../../helpers/tmp";

export interface FailoverRound {
  leadMs: number;
  planMs: number;
}

export interface FailoverFigures {
  ttlMs: number;
  renewMs: number;
  rounds: FailoverRound[];
}

const durMs = (s: string) => Number(/^(\d+(?:\.\d+)?)/.exec(s)![1]) * (s.endsWith("ms") ? 1 : s.endsWith("m") ? 60_000 : 1000);

/** A node that heartbeats every second to every control plane given, keeping its credential. */
function nodeLoop(cps: () => ControlPlane[]): { stop(): void } {
  let credential: string | undefined;
  let stopped = false;
  const gpus = Array.from({ length: 8 }, (_, g) => ({ index: g, uuid: `GPU-fo-${g}`, name: "NVIDIA H100 80GB HBM3", class: "H100-80GB", memory_mib: 81559, healthy: true, parent: null }));
  const body = JSON.stringify({ node: "fo-node", address: "127.0.0.1", agent_version: "bench", fabrics: [], gpus, models: [], replicas: [] });
  void (async () => {
    while (!stopped) {
      await Promise.all(
        cps()
          .filter((c) => c.child)
          .map(async (c) => {
            try {
              const r = await fetch(`${c.admin}/agent/v1/heartbeat`, { method: "POST", headers: { authorization: `Bearer ${credential ?? JOIN_TOKEN}`, "content-type": "application/json" }, body, signal: AbortSignal.timeout(2000) });
              const t = await r.text();
              if (r.ok) credential = (JSON.parse(t) as { credential?: string }).credential ?? credential;
            } catch {
              // a control plane being killed
            }
          }),
      );
      await Bun.sleep(1000);
    }
  })();
  return { stop: () => void (stopped = true) };
}

export async function failoverBench(o: { store: (dir: string) => string; leaseTtl: string; leaseRenew: string; rounds: number; log?: (s: string) => void }): Promise<FailoverFigures> {
  const say = o.log ?? (() => {});
  const dir = scratchDir("llmgw-bench-ha-fo-");
  const store = o.store(dir);
  const cps = [0, 1].map((i) => controlPlane(i, { dir, store, leaseTtl: o.leaseTtl, leaseRenew: o.leaseRenew, logLevel: "warn" }));
  const ttlMs = durMs(o.leaseTtl);
  const renewMs = durMs(o.leaseRenew);
  const node = nodeLoop(() => cps);
  const rounds: FailoverRound[] = [];
  try {
    await startPair(cps, renewMs);
    for (let r = 0; r < o.rounds; r++) {
      const leader = await oneLeader(cps, ttlMs + 30_000);
      const survivor = cps.find((c) => c !== leader)!;
      await Bun.sleep(Math.random() * renewMs);
      const t0 = performance.now();
      await leader.kill9();
      const model = `fo-${Date.now().toString(36)}-${r}`;
      const put = (async () => {
        for (;;) {
          try {
            await survivor.api(`/models/${model}`, { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }] }) });
            return;
          } catch (e) {
            if (performance.now() - t0 > ttlMs + 30_000) throw e;
            await Bun.sleep(25);
          }
        }
      })();
      let leadMs = NaN;
      let planMs = NaN;
      while (Number.isNaN(planMs) && performance.now() - t0 < ttlMs + 30_000) {
        if (Number.isNaN(leadMs) && (await leads(survivor))) leadMs = performance.now() - t0;
        try {
          const reps = await survivor.api<{ model: string }[]>("/replicas");
          if (reps.some((x) => x.model === model)) planMs = performance.now() - t0;
        } catch {
          // answers again in a moment
        }
        if (Number.isNaN(planMs)) await Bun.sleep(25);
      }
      await put;
      if (Number.isNaN(leadMs) && (await leads(survivor))) leadMs = performance.now() - t0;
      rounds.push({ leadMs, planMs });
      say(`  round ${r + 1}: ${survivor.name} leads after ${(leadMs / 1000).toFixed(2)} s, first plan after ${(planMs / 1000).toFixed(2)} s`);
      await leader.start();
      await Bun.sleep(renewMs);
      const now = await oneLeader(cps, ttlMs + 30_000);
      if (now !== survivor) throw new Error(`${leader.name} took the lead back on restart`);
    }
    return { ttlMs, renewMs, rounds };
  } finally {
    node.stop();
    await Promise.all(cps.map((c) => c.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}
