// The fleet gauges' text as Prometheus reads it: promtool check metrics accepts a leader's. What
// the text holds is tested in test/unit/fleet-metrics.test.ts.

import { expect, test } from "bun:test";
import { fleetMetrics } from "../../src/control/fleet-metrics";
import { gaugeTables } from "../helpers/fleet-gauges";

test("promtool check metrics accepts the text", () => {
  const text = fleetMetrics(gaugeTables(), { leading: true });
  const p = Bun.spawnSync(["promtool", "check", "metrics"], { stdin: new TextEncoder().encode(text) });
  expect(p.stdout.toString() + p.stderr.toString()).toBe("");
  expect(p.exitCode).toBe(0);
});
