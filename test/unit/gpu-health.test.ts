// The head node's GPU health decisions (src/control/gpu-health.ts): a heartbeat whose discovery
// failed with no GPUs keeps the node's stored GPUs, unhealthy with the error as their reason; and
// which changes are events (discovery failing or recovering, a card turning), once per change.

import { describe, expect, test } from "bun:test";
import { healthEvents, keepLastKnownGpus, keptReason, nextHealth, storedHealth } from "../../src/control/gpu-health";
import type { GpuRow } from "../../src/control/types";
import { REASON_MAX } from "../../src/protocol/heartbeat";
import { heartbeat } from "../helpers/fleet";

const H = "H100-80GB";
// The agent's words for the driver failure of test/fixtures/nvidia-smi/unhealthy-gpu-outputs.txt.
const DRIVER =
  "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running: this node reports no GPUs";

const rows = (node: string, n: number, healthy = true): GpuRow[] =>
  heartbeat({ name: node, gpus: Array(n).fill(H) }).gpus.map((g) => ({ node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy, parent: g.parent }));
const failing = (node: string, error = DRIVER) => ({ ...heartbeat({ name: node }), discovery_error: error });

describe("keeping the last known GPUs", () => {
  test("a driver failure with no GPUs keeps the stored ones, each unhealthy with the error as its reason", () => {
    const stored = rows("n1", 8);
    const { hb, kept } = keepLastKnownGpus(failing("n1"), stored);
    expect(kept).toBe(true);
    expect(hb.gpus).toHaveLength(8);
    expect(hb.gpus.map((g) => [g.index, g.uuid, g.class, g.memory_mib, g.healthy])).toEqual(stored.map((g) => [g.index, g.uuid, g.class, g.memoryMib, false]));
    const reason = hb.gpus[0]!.reason!;
    expect(reason).toStartWith("GPU discovery fails: nvidia-smi exited with status 9: NVIDIA-SMI has failed");
    // The agent's "reports no GPUs" would contradict the GPUs shown beside it.
    expect(reason).not.toContain("reports no GPUs");
    expect(hb.discovery_error).toBe(DRIVER);
  });

  test("in index order, MIG parents kept, whatever order the store answered in", () => {
    const stored = rows("n1", 3).reverse();
    stored[0] = { ...stored[0]!, parent: "GPU-card" };
    const { hb } = keepLastKnownGpus(failing("n1"), stored);
    expect(hb.gpus.map((g) => g.index)).toEqual([0, 1, 2]);
    expect(hb.gpus[2]!.parent).toBe("GPU-card");
  });

  test("a reason never longer than a GPU report's bound, however long the error", () => {
    expect(keptReason("x".repeat(1024)).length).toBeLessThanOrEqual(REASON_MAX);
    const { hb } = keepLastKnownGpus(failing("n1", `nvidia-smi exited with status 9:\n${"y".repeat(900)}`), rows("n1", 1));
    expect(hb.gpus[0]!.reason!.length).toBeLessThanOrEqual(REASON_MAX);
    expect(hb.gpus[0]!.reason).not.toContain("\n");
  });

  test("taken as sent: no error, GPUs listed beside an error (incomplete discovery), or nothing stored (a new or deleted node)", () => {
    const fine = heartbeat({ name: "n1", gpus: [H] });
    expect(keepLastKnownGpus(fine, rows("n1", 8))).toEqual({ hb: fine, kept: false });
    const partial = { ...heartbeat({ name: "n1", gpus: [H, H], unhealthy: [1] }), discovery_error: "nvidia-smi -L exited with status 15: Unable to determine the device handle" };
    expect(keepLastKnownGpus(partial, rows("n1", 8))).toEqual({ hb: partial, kept: false });
    const fresh = failing("n1");
    expect(keepLastKnownGpus(fresh, [])).toEqual({ hb: fresh, kept: false });
    const empty = heartbeat({ name: "n1" });
    expect(keepLastKnownGpus(empty, rows("n1", 2))).toEqual({ hb: empty, kept: false });
  });
});

describe("health events", () => {
  const taken = (node: string, stored: GpuRow[]) => keepLastKnownGpus(failing(node), stored);

  test("discovery failing on a node with 2 GPUs: one discovery event and one per card, naming index, uuid and reason", () => {
    const stored = rows("n1", 2);
    const { hb, kept } = taken("n1", stored);
    const events = healthEvents("n1", { gpus: stored, discoveryError: null }, hb, kept);
    expect(events.map((e) => e.kind)).toEqual(["discovery.failed", "gpu.unhealthy", "gpu.unhealthy"]);
    expect(events.every((e) => e.subject === "node/n1")).toBe(true);
    expect(events[0]!.message).toContain("GPU discovery fails on node n1: nvidia-smi exited with status 9");
    expect(events[0]!.message).toContain("its 2 GPUs last reported are kept, counted unhealthy");
    expect(events[1]!.message).toStartWith(`GPU 0 (${stored[0]!.uuid}) of node n1 is unhealthy: GPU discovery fails: nvidia-smi exited with status 9`);
    expect(events[2]!.data).toMatchObject({ node: "n1", index: 1, uuid: stored[1]!.uuid });
  });

  test("the same failure again is no news; recovering is one discovery event and one per card", () => {
    const stored = rows("n1", 2);
    const { hb, kept } = taken("n1", stored);
    const after = rows("n1", 2, false);
    expect(healthEvents("n1", { gpus: after, discoveryError: DRIVER }, keepLastKnownGpus(failing("n1"), after).hb, true)).toEqual([]);
    const back = heartbeat({ name: "n1", gpus: [H, H] });
    const events = healthEvents("n1", { gpus: after, discoveryError: hb.discovery_error! }, back, false);
    expect(events.map((e) => e.kind)).toEqual(["discovery.recovered", "gpu.healthy", "gpu.healthy"]);
    expect(events[0]!.message).toBe("GPU discovery on node n1 works again: 2 GPUs reported");
    expect(events[1]!.message).toBe(`GPU 0 (${stored[0]!.uuid}) of node n1 is healthy again`);
    expect(kept).toBe(true);
  });

  test("a card the agent marks unhealthy, then healthy: one event each, none while it stays so or its reason changes", () => {
    const stored = rows("n1", 2);
    const bad = heartbeat({ name: "n1", gpus: [H, H], unhealthy: [1] });
    bad.gpus[1]!.reason = "GPU requires reset";
    expect(healthEvents("n1", { gpus: stored, discoveryError: null }, bad, false).map((e) => e.message)).toEqual([`GPU 1 (${stored[1]!.uuid}) of node n1 is unhealthy: GPU requires reset`]);
    const still = heartbeat({ name: "n1", gpus: [H, H], unhealthy: [1] });
    still.gpus[1]!.reason = "pending row remapping";
    const badRows = stored.map((g) => ({ ...g, healthy: g.index !== 1 }));
    expect(healthEvents("n1", { gpus: badRows, discoveryError: null }, still, false)).toEqual([]);
    expect(healthEvents("n1", { gpus: badRows, discoveryError: null }, heartbeat({ name: "n1", gpus: [H, H] }), false).map((e) => e.kind)).toEqual(["gpu.healthy"]);
  });

  test("a card that appears, goes or is another card at the same index is not a health change", () => {
    const stored = rows("n1", 2);
    const swapped = heartbeat({ name: "n1", gpus: [H, H, H], unhealthy: [0, 2] });
    swapped.gpus[0]!.uuid = "GPU-another-card";
    expect(healthEvents("n1", { gpus: stored, discoveryError: null }, swapped, false)).toEqual([]);
  });

  test("an unknown discovery error before (a report never seen) tells no discovery change; the cards still do", () => {
    const stored = rows("n1", 1);
    const { hb, kept } = taken("n1", stored);
    expect(healthEvents("n1", { gpus: stored, discoveryError: undefined }, hb, kept).map((e) => e.kind)).toEqual(["gpu.unhealthy"]);
    expect(healthEvents("n1", { gpus: [], discoveryError: undefined }, heartbeat({ name: "n1" }), false)).toEqual([]);
  });

  test("a node with no GPUs whose discovery fails: the discovery event says nothing is kept", () => {
    const events = healthEvents("cpu-1", { gpus: [], discoveryError: null }, failing("cpu-1", "nvidia-smi not found on PATH: this node reports no GPUs"), false);
    expect(events.map((e) => e.message)).toEqual(["GPU discovery fails on node cpu-1: nvidia-smi not found on PATH"]);
  });
});

describe("a group of heartbeats", () => {
  test("a node's second heartbeat in one group is compared with its first, a new node with nothing", () => {
    const stored = rows("n1", 2);
    const health = storedHealth(["n1", "new"], stored, (n) => (n === "n1" ? null : undefined));
    const first = taken("n1", stored);
    expect(nextHealth(health, first.hb, first.kept, false).map((e) => e.kind)).toEqual(["discovery.failed", "gpu.unhealthy", "gpu.unhealthy"]);
    expect(nextHealth(health, first.hb, first.kept, false)).toEqual([]);
    expect(nextHealth(health, heartbeat({ name: "n1", gpus: [H, H] }), false, false).map((e) => e.kind)).toEqual(["discovery.recovered", "gpu.healthy", "gpu.healthy"]);
    // Registered with a failing discovery: that is news; its cards have no before.
    expect(nextHealth(health, failing("new"), false, true).map((e) => e.kind)).toEqual(["discovery.failed"]);
  });

  function taken(node: string, stored: GpuRow[]) {
    return keepLastKnownGpus(failing(node), stored);
  }
});
