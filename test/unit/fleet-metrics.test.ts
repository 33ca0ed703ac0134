// The fleet gauges' text: every series the issue names, with the values the tables hold (nodes
// by the NodeView states, GPUs used|free|unhealthy per class, replicas desired and ready,
// unplaceable and parked as 0/1, idle seconds only where known), label values escaped, and
// nothing but `llmgw_control_plane_leading 0` from a control plane that stands by. That promtool
// accepts it: test/integration/fleet-metrics-promtool.test.ts.

import { describe, expect, test } from "bun:test";
import { FLEET_METRICS, fleetMetrics, fleetMetricsPaced } from "../../src/control/fleet-metrics";
import { gaugeTables as tables } from "../helpers/fleet-gauges";

/** The samples of one metric, as `labels value` lines. */
function samples(text: string, name: string): string[] {
  return text
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
    .map((l) => l.slice(name.length));
}

describe("fleetMetrics", () => {
  const text = fleetMetrics(tables(), { leading: true });

  test("nodes by every NodeView state, 0 included", () => {
    expect(samples(text, "llmgw_nodes")).toEqual(['{state="ready"} 1', '{state="cordoned"} 1', '{state="draining"} 0', '{state="unreachable"} 1', '{state="pending"} 0']);
  });

  test("GPUs per class as used, free and unhealthy (unhealthy is neither), label values escaped", () => {
    expect(samples(text, "llmgw_gpus")).toEqual([
      '{class="H100-80GB",state="used"} 2',
      '{class="H100-80GB",state="free"} 0',
      '{class="H100-80GB",state="unhealthy"} 1',
      '{class="L40S",state="used"} 0',
      '{class="L40S",state="free"} 2',
      '{class="L40S",state="unhealthy"} 0',
      '{class="we\\"ird\\\\class",state="used"} 0',
      '{class="we\\"ird\\\\class",state="free"} 1',
      '{class="we\\"ird\\\\class",state="unhealthy"} 0',
    ]);
  });

  test("per model: replicas desired and ready, unplaceable and parked as 0/1", () => {
    expect(samples(text, "llmgw_model_replicas_desired")).toEqual(['{model="broken"} 1', '{model="huge"} 1', '{model="llama"} 2']);
    expect(samples(text, "llmgw_model_replicas_ready")).toEqual(['{model="broken"} 0', '{model="huge"} 0', '{model="llama"} 1']);
    expect(samples(text, "llmgw_model_parked")).toEqual(['{model="broken"} 1', '{model="huge"} 0', '{model="llama"} 0']);
    // H200s no node has: can never fit. llama has one starting: not unplaceable.
    expect(samples(text, "llmgw_model_unplaceable")).toEqual(['{model="broken"} 0', '{model="huge"} 1', '{model="llama"} 0']);
  });

  test("idle seconds only for replicas whose idleness is known: unknown is not idle", () => {
    expect(samples(text, "llmgw_replica_idle_seconds")).toEqual(['{replica="llama-1",model="llama"} 42']);
  });

  test("every series has HELP and TYPE gauge", () => {
    for (const name of FLEET_METRICS) {
      expect(text).toContain(`# TYPE ${name} gauge\n`);
      expect(text).toContain(`# HELP ${name} `);
    }
    expect(samples(text, "llmgw_control_plane_leading")).toEqual([" 1"]);
  });

  test("rendered paced (the head node lets heartbeats in between the families), the text is the same", async () => {
    let pauses = 0;
    const paced = await fleetMetricsPaced(tables(), { leading: true }, async () => {
      pauses++;
    });
    expect(paced).toBe(fleetMetrics(tables(), { leading: true }));
    expect(paced).toContain("llmgw_replica_idle_seconds{");
    expect(pauses).toBe(3);
  });

  test("a control plane standing by exports only that it stands by: the leader exports the fleet", () => {
    expect(fleetMetrics(tables(), { leading: false })).toBe("# HELP llmgw_control_plane_leading 1 when this head node's control plane leads (and exports the fleet), 0 when it stands by.\n# TYPE llmgw_control_plane_leading gauge\nllmgw_control_plane_leading 0\n");
  });
});
