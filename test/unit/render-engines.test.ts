// The engines a node reported, as `llmgw nodes NAME` shows them: each with the version its launch
// templates are chosen by, or "-" with the reason none was found.

import { describe, expect, test } from "bun:test";
import { engineList, renderNode } from "../../src/cli/nodes";
import type { NodeView } from "../../src/protocol/views";

const plain = { color: false };
const NOW = Date.parse("2026-01-01T12:00:10.000Z");

function nodeView(n: Partial<NodeView>): NodeView {
  return {
    name: "gpu-01",
    state: "ready",
    admin_state: "none",
    address: "10.0.0.1",
    fabrics: [],
    labels: {},
    agent_version: "0.1.0",
    gpus: [],
    models: [],
    last_heartbeat: "2026-01-01T12:00:00.000Z",
    gpu_total: 0,
    gpu_free: 0,
    gpu_unhealthy: 0,
    gpu_memory_mib: 0,
    discovery_error: null,
    engines: [],
    ...n,
  };
}

describe("nodes NAME: engines", () => {
  test("each engine with its version; one not found with its reason", () => {
    const out = renderNode(
      nodeView({
        engines: [
          { engine: "vllm", version: "0.10.1.1", error: null },
          { engine: "sglang", version: null, error: "not installed: python3 not found" },
          { engine: "llama.cpp", version: "b6869", error: null },
        ],
      }),
      plain,
      NOW,
    );
    expect(out).toContain("Engines:    vllm 0.10.1.1, sglang - (not installed: python3 not found), llama.cpp b6869\n");
  });

  test("a node that reported no engines (an older or simulated agent) shows no Engines line", () => {
    expect(renderNode(nodeView({}), plain, NOW)).not.toContain("Engines:");
    expect(engineList([], plain)).toBe("-");
  });

  test("a reason with control characters or newlines stays on one clean line", () => {
    const out = engineList([{ engine: "sglang", version: null, error: "exited 1:\n\x1b[31mboom\x1b[0m" }], plain);
    expect(out).not.toContain("\n");
    expect(out).not.toContain("\x1b");
  });
});
