// The HA bench's heartbeat part in process, on whatever store it is handed: the control plane on
// the in-memory image (StoreImage) on real time, ticking every second and on wake as serve does
// (app/head.ts startLoop), 1,000 nodes of 8 GPUs joined, then NodeIntake.heartbeat() calls
// back to back, CONCURRENCY in flight, node after node, for SECONDS: unchanged (`steady`) and
// with other weights each time (`changing`: a store write each). What the store costs a
// heartbeat without HTTP, parsing and credentials (lib/ha-heartbeat.ts measures through serve).

import { StoreImage } from "../../../src/control/image";
import type { StorePort } from "../../../src/control/store-port";
import { realScheduler } from "../../../src/lib/scheduler";
import type { HeartbeatRequest } from "../../../src/protocol/heartbeat";
import { testControl } from "../../helpers/control";
import { heartbeat } from "../../helpers/fleet";
import { fleetNodes } from "./fleet";

export interface InprocRate {
  rate: number;
  p50: number;
  p99: number;
  errors: number;
}

export async function heartbeatInproc(store: StorePort, o: { nodes: number; seconds: number; concurrency: number }): Promise<{ steady: InprocRate; changing: InprocRate }> {
  const model = new StoreImage(store, realScheduler);
  const control = testControl({ store: model, scheduler: realScheduler, nodeTimeoutMs: 30_000, heartbeatIntervalMs: 5000, router: false });
  let ticking = false;
  const tick = async () => {
    if (ticking) return;
    ticking = true;
    try {
      await control.loop.tick();
    } catch {
      // counted by the heartbeats that fail with it
    } finally {
      ticking = false;
    }
  };
  control.wakeups.listen(() => void tick());
  const timer = setInterval(() => void tick(), 1000);
  try {
    const hbs: HeartbeatRequest[] = fleetNodes({ nodes: o.nodes, mig: true, fabrics: 4, weights: (i) => [`m${i % 500}`] }).map(heartbeat);
    for (const hb of hbs) await control.intake.heartbeat(hb);
    const run = async (changing: boolean): Promise<InprocRate> => {
      const lat: number[] = [];
      let errors = 0;
      let i = 0;
      const until = performance.now() + o.seconds * 1000;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: o.concurrency }, async () => {
          while (performance.now() < until) {
            const k = i++;
            const hb = hbs[k % hbs.length]!;
            if (changing) hb.models = Math.floor(k / hbs.length) % 2 === 0 ? [hb.models[0]!, "extra-weights"] : [hb.models[0]!];
            const s = performance.now();
            try {
              await control.intake.heartbeat(hb);
              lat.push(performance.now() - s);
            } catch {
              errors++;
            }
          }
        }),
      );
      const secs = (performance.now() - t0) / 1000;
      lat.sort((a, b) => a - b);
      const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] ?? NaN;
      return { rate: lat.length / secs, p50: q(50), p99: q(99), errors };
    };
    const steady = await run(false);
    const changing = await run(true);
    return { steady, changing };
  } finally {
    clearInterval(timer);
    while (ticking) await Bun.sleep(10);
    await model.flush().catch(() => undefined);
  }
}
