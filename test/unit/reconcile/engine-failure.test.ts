// An engine's failure as the head node says it: the agent's cause once, on one line, with the
// command that shows the rest of the run's log; an older agent's "cause, then the last lines
// (ending with the cause again)" says the cause once too, and so does the router's answer for
// a model parked by it.

import { describe, expect, test } from "bun:test";
import { FAILURE_TEXT_MAX, causeOf, failureText } from "../../../src/control/reconcile/engine-failure";
import { processReports } from "../../../src/control/reconcile/reports";
import { parkedReason } from "../../../src/control/projections";
import { model, snapshot } from "../../helpers/fleet";
import { H, T0 } from "./fixture";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";

const LINE = "RuntimeError: CUDA error: no kernel image is available for execution on the device";
const NOW = `exited with code 1: ${LINE}`;
/** What an agent before this release sent for the same failure: the line, then the last lines, which end with it. */
const OLD = `exited with code 1: ${LINE}\nlast lines:\nloading weights\n${LINE}`;

const times = (s: string, part: string) => s.split(part).length - 1;

describe("causeOf and failureText", () => {
  test("the agent's line as it is; an older agent's last lines dropped; anything else flattened to one line", () => {
    expect(causeOf(NOW)).toBe(NOW);
    expect(causeOf(OLD)).toBe(NOW);
    expect(causeOf("exited with code 1: a\nb\n\tc")).toBe("exited with code 1: a b c");
  });
  test("the cause once, then where the rest is", () => {
    for (const error of [NOW, OLD]) {
      const said = failureText(error, "r-1a2b3c4d");
      expect(said).toBe(`${NOW} (log: llmgw logs --previous r-1a2b3c4d)`);
      expect(times(said, LINE)).toBe(1);
    }
  });
  test("a long cause is cut before the pointer, which stays", () => {
    const said = failureText(`exited with code 1: ${"x".repeat(5000)}`, "r-1a2b3c4d");
    expect(said.length).toBeLessThanOrEqual(FAILURE_TEXT_MAX);
    expect(said).toEndWith("… (log: llmgw logs --previous r-1a2b3c4d)");
  });
});

describe("a failed start reported (processReports)", () => {
  const CFG = { ...RECONCILE_DEFAULTS, maxFailures: 1 };
  const fleet = () =>
    snapshot({ nodes: [{ name: "a", gpus: [H] }], models: [model({ name: "m" })], replicas: [{ id: "r1", model: "m", state: "starting", shards: [{ node: "a", gpus: [0] }] }] });

  for (const [who, error] of [
    ["this release's agent", NOW],
    ["an older agent", OLD],
  ] as const) {
    test(`from ${who}: the replica, the model's parked reason and the events say the cause once, on one line`, () => {
      const plan = processReports({ snapshot: fleet(), node: "a", reports: [{ id: "r1", state: "failed", port: 8100, error }], now: T0, config: CFG });
      expect(plan.update).toEqual([{ id: "r1", patch: { state: "failed", error: NOW, failures: 1 } }]);
      const reason = plan.modelState.get("m")!.reason!;
      expect(reason).toBe(`${NOW} (log: llmgw logs --previous r1)`);
      expect(plan.events.map((e) => e.kind)).toEqual(["model.parked", "replica.failed"]);
      for (const text of [reason, ...plan.events.map((e) => e.message)]) {
        expect(text).not.toContain("\n");
        expect(text).not.toContain("last lines");
        expect(times(text, LINE)).toBe(1);
      }
      expect(plan.events.find((e) => e.kind === "replica.failed")!.message).toBe(`replica r1 of m failed on a: ${NOW} (log: llmgw logs --previous r1)`);
    });
  }

  test("a failure that is not the engine's (not reported after placement) points at no log", () => {
    const plan = processReports({ snapshot: fleet(), node: "a", reports: [], now: T0 + 3_600_000, config: CFG });
    expect(plan.modelState.get("m")!.reason).not.toContain("llmgw logs");
  });
});

describe("the router's answer for a parked model (parkedReason)", () => {
  test("one line, the cause once, whatever an older release stored", () => {
    for (const stored of [`${NOW} (log: llmgw logs --previous r1)`, OLD]) {
      const said = parkedReason("m", { failures: 5, crashes: 0 }, stored);
      expect(said).toStartWith(`'m' is parked after 5 failed starts: ${NOW}`);
      expect(said).toEndWith("; it is not retried until an operator runs `llmgw models unpark m`");
      expect(said).not.toContain("\n");
      expect(said).not.toContain("last lines");
      expect(times(said, LINE)).toBe(1);
    }
    expect(parkedReason("m", { failures: 5, crashes: 0 }, `${NOW} (log: llmgw logs --previous r1)`)).toContain("(log: llmgw logs --previous r1)");
  });
});
