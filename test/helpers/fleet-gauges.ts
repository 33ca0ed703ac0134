// The fleet the fleet gauges' tests render (test/unit/fleet-metrics.test.ts, and promtool's check
// of the same text in test/integration/fleet-metrics-promtool.test.ts).

import { buildTables } from "../../src/control/views";
import { T0, model, snapshot } from "./fleet";

const TIMEOUT = 15_000;

/** Nodes ready, cordoned and unreachable, a class name that needs escaping, a parked model, a replica last asked for 42 s ago. */
export function gaugeTables() {
  const snap = snapshot({
    nodes: [
      { name: "a", gpus: ["H100-80GB", "H100-80GB", "H100-80GB"], unhealthy: [2] },
      { name: "b", admin: "cordoned", gpus: ["L40S"] },
      { name: "c", lastHeartbeat: T0 - 10 * TIMEOUT, gpus: ["L40S", 'we"ird\\class'] },
    ],
    models: [model({ name: "llama", replicas: { min: 2 } }), model({ name: "broken", replicas: { min: 1 } }), model({ name: "huge", replicas: { min: 1 }, profiles: [{ name: "default", engine: "vllm", gpu_class: "H200", gpus: 8 }] })],
    replicas: [
      { id: "llama-1", model: "llama", shards: [{ node: "a", gpus: [0] }] },
      { id: "llama-2", model: "llama", state: "starting", shards: [{ node: "a", gpus: [1] }] },
    ],
    modelState: [{ model: "broken", parked: true, reason: "failed every start" }],
  });
  // llama-1 was last sent a request 42 s ago; llama-2's last request is unknown.
  return buildTables({ snapshot: snap, now: T0, lastUsed: new Map([["llama-1", T0 - 42_000]]), nodeTimeoutMs: TIMEOUT, watchedSince: T0 - 3_600_000 });
}
