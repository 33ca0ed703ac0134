// What GPU discovery reported, as `llmgw status`, `llmgw nodes` and `llmgw nodes NAME` show it:
// a node whose driver failed says so instead of looking like an empty ready node, and a card
// that cannot be scheduled is listed with its reason.

import { describe, expect, test } from "bun:test";
import { renderNode, renderNodes } from "../../src/cli/nodes";
import { renderStatus } from "../../src/cli/status";
import type { GpuView, NodeView, Summary } from "../../src/protocol/views";

const plain = { color: false };
const NOW = Date.parse("2026-01-01T12:00:10.000Z");
// The driver failure of test/fixtures/nvidia-smi/unhealthy-gpu-outputs.txt
// (ci-for-research/self-hosted-runners#40) as the agent words it.
const DRIVER =
  "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running: this node reports no GPUs";

function gpu(g: Partial<GpuView> & { index: number }): GpuView {
  return { uuid: `GPU-${g.index}`, name: "NVIDIA H200", class: "H200-141GB", memory_mib: 143771, healthy: true, parent: null, in_use_by: null, reason: null, ...g };
}

function nodeView(n: Partial<NodeView> & { name: string }): NodeView {
  const gpus = n.gpus ?? [];
  return {
    state: "ready",
    admin_state: "none",
    address: "10.0.0.1",
    fabrics: [],
    labels: {},
    agent_version: "0.1.0",
    gpus,
    models: [],
    last_heartbeat: "2026-01-01T12:00:00.000Z",
    gpu_total: gpus.length,
    gpu_free: gpus.filter((g) => g.healthy && g.in_use_by === null).length,
    gpu_unhealthy: gpus.filter((g) => !g.healthy).length,
    gpu_memory_mib: gpus.reduce((a, g) => a + g.memory_mib, 0),
    discovery_error: null,
    engines: [],
    ...n,
  };
}

const broken = nodeView({ name: "gpu-07", discovery_error: DRIVER });
const migNoInstances = nodeView({
  name: "gpu-02",
  gpus: [gpu({ index: 0 }), gpu({ index: 1, uuid: "GPU-mig", healthy: false, reason: "MIG mode with no GPU instances" })],
});

const summary: Summary = {
  version: "1.2.3",
  nodes: { total: 3, ready: 3, cordoned: 0, draining: 0, unreachable: 0 },
  gpus: [{ class: "H200-141GB", total: 2, used: 0, unhealthy: 1 }],
  fabrics: [],
  replicas: { ready: 0, starting: 0, draining: 0, failed: 0 },
  models: { total: 0, satisfied: 0, short: 0 },
  unplaceable: [],
  unplaceable_reasons: {},
  parked: [],
  idle_replicas: [],
  evictions: [],
  store: [],
  control_planes: {},
  unhealthy_gpus: [{ reason: "MIG mode with no GPU instances", gpus: 1, nodes: ["gpu-02"] }],
  gpu_discovery: [
    { node: "gpu-07", gpus: 0, error: DRIVER },
    { node: "gpu-09", gpus: 3, error: "nvidia-smi -L exited with status 15: Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error (kept the 3 GPUs it could list, 1 marked unhealthy)" },
  ],
};

describe("status", () => {
  test("a node whose driver failed is named with nvidia-smi's words; an unschedulable card with its reason", () => {
    const out = renderStatus(summary, plain);
    expect(out).toContain(
      "1 node reports no GPUs: gpu-07: nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    );
    expect(out).toContain("1 node reports incomplete GPU discovery: gpu-09: nvidia-smi -L exited with status 15: Unable to determine the device handle");
    expect(out).toMatch(/1 unhealthy GPU: MIG mode with no GPU instances \(gpu-02\)/);
    expect(out).not.toContain("\x1b[");
  });

  test("nothing extra when discovery went well (and from a server that does not send the fields)", () => {
    const { unhealthy_gpus: _u, gpu_discovery: _d, ...old } = summary;
    for (const s of [old, { ...summary, unhealthy_gpus: [], gpu_discovery: [] }]) {
      const out = renderStatus(s, plain);
      expect(out).not.toContain("reports no GPUs");
      expect(out).not.toContain("unhealthy GPU:");
    }
  });
});

describe("nodes", () => {
  test("the table says which node reports no GPUs and why", () => {
    const out = renderNodes([migNoInstances, broken], plain, false, NOW);
    expect(out).toMatch(/gpu-07\s+ready\s+0\/0/);
    expect(out).toContain("gpu-07: nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.");
    expect(out).toContain("gpu-02: GPU 1 MIG mode with no GPU instances");
  });

  test("one node: its discovery error, and each unhealthy GPU's reason", () => {
    expect(renderNode(broken, plain, NOW)).toContain(`Discovery:  ${DRIVER}`);
    const out = renderNode(migNoInstances, plain, NOW);
    expect(out).toMatch(/1\s+H200-141GB\s+NVIDIA H200\s+140GiB\s+unhealthy\s+-\s+GPU-mig\s+MIG mode with no GPU instances/);
    expect(out).not.toContain("Discovery:");
  });
});

describe("a node whose GPUs are kept from before its discovery failed", () => {
  const reason = `GPU discovery fails: ${DRIVER.replace(": this node reports no GPUs", "")}`;
  const kept = nodeView({
    name: "gpu-05",
    discovery_error: DRIVER,
    gpus_last_known: true,
    gpus: [0, 1].map((index) => gpu({ index, healthy: false, reason })),
  });
  const s: Summary = {
    ...summary,
    gpus: [{ class: "H200-141GB", total: 4, used: 0, unhealthy: 3 }],
    unhealthy_gpus: [{ reason, gpus: 2, nodes: ["gpu-05"] }, ...summary.unhealthy_gpus!],
    gpu_discovery: [{ node: "gpu-05", gpus: 2, error: DRIVER, last_known: true }, ...summary.gpu_discovery!],
  };

  test("status names it under Attention, once, with what happens to its GPUs and the driver's words", () => {
    const out = renderStatus(s, plain);
    const attention = out.slice(out.indexOf("Attention"));
    expect(attention).toContain(
      "GPU discovery fails on gpu-05: its 2 GPUs last reported are counted unhealthy until it answers again (or llmgw nodes delete gpu-05): nvidia-smi exited with status 9: NVIDIA-SMI has failed",
    );
    expect(attention).not.toContain("reports no GPUs");
    // Not again beside the node totals, neither as a node without GPUs nor as its GPUs' reason.
    expect(out.slice(0, out.indexOf("Attention"))).not.toContain("gpu-05");
    expect(out).toContain("1 node reports no GPUs: gpu-07");
    expect(out).toMatch(/1 unhealthy GPU: MIG mode with no GPU instances \(gpu-02\)/);
  });

  test("nodes says the error once, with what happens to the GPUs; the node's GPU table gives each one's reason", () => {
    const table = renderNodes([kept], plain, false, NOW);
    expect(table).toContain("gpu-05: its 2 GPUs last reported are kept, counted unhealthy until it answers again (or llmgw nodes delete gpu-05): nvidia-smi exited with status 9: NVIDIA-SMI has failed");
    expect(table).not.toContain("gpu-05: GPU 0");
    const one = renderNode(kept, plain, NOW);
    expect(one).toContain("Discovery:  its 2 GPUs last reported are kept, counted unhealthy until it answers again (or llmgw nodes delete gpu-05): nvidia-smi exited with status 9");
    expect(one).not.toContain("reports no GPUs");
    expect(one).toMatch(/0\s+H200-141GB\s+NVIDIA H200\s+140GiB\s+unhealthy\s+-\s+GPU-0\s+GPU discovery fails: nvidia-smi exited with status 9/);
  });
});
