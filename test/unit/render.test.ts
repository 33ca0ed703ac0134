// CLI rendering: plain characters when piped or under NO_COLOR, colour on a terminal, bars
// that never round a broken card away, and `-` for unknown idleness.

import { describe, expect, test } from "bun:test";
import { renderStatus } from "../../src/cli/status";
import { renderReplicas } from "../../src/cli/replicas";
import { renderModels } from "../../src/cli/models";
import { renderNodes } from "../../src/cli/nodes";
import { renderExplanation } from "../../src/cli/explain";
import { LIST_CELL_MAX, clip, detectStyle, listCell, table, usageBar } from "../../src/cli/render";
import { explainModel } from "../../src/control/explain";
import { human } from "../../src/lib/format";
import { renderModelDetail } from "../../src/cli/describe";
import type { GpuView, ModelView, NodeView, ReplicaView, Summary } from "../../src/protocol/views";
import { T0, model, snapshot } from "../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../helpers/control-settings";

const plain = { color: false };
const color = { color: true };

describe("style detection", () => {
  test("NO_COLOR wins over a terminal; piped output is plain; FORCE_COLOR forces", () => {
    expect(detectStyle({ isTTY: true }, { NO_COLOR: "1" })).toEqual(plain);
    expect(detectStyle({ isTTY: true }, {})).toEqual(color);
    expect(detectStyle({ isTTY: false }, {})).toEqual(plain);
    expect(detectStyle({ isTTY: true }, { TERM: "dumb" })).toEqual(plain);
    expect(detectStyle({ isTTY: false }, { FORCE_COLOR: "1" })).toEqual(color);
  });
});

describe("usage bar", () => {
  test("plain: # used, x unhealthy, . free, fixed width", () => {
    expect(usageBar(plain, 4, 2, 8, 8)).toBe("[####xx..]");
    expect(usageBar(plain, 0, 0, 8, 8)).toBe("[........]");
    expect(usageBar(plain, 8, 0, 8, 8)).toBe("[########]");
  });
  test("one unhealthy card in a thousand still shows", () => {
    expect(usageBar(plain, 0, 1, 1000, 10)).toBe("[x.........]");
    expect(usageBar(plain, 999, 1, 1000, 10)).toBe("[#########x]");
  });
  test("colour uses escapes and blocks", () => {
    const b = usageBar(color, 1, 1, 4, 4);
    expect(b).toContain("\x1b[36m");
    expect(b).toContain("█");
  });
});

const summary: Summary = {
  version: "1.2.3",
  nodes: { total: 200, ready: 190, cordoned: 4, draining: 2, unreachable: 4 },
  gpus: [
    { class: "A100-80GB/3g.40gb", total: 40, used: 10, unhealthy: 0 },
    { class: "H100-80GB", total: 800, used: 600, unhealthy: 3 },
  ],
  fabrics: [{ fabric: "ib-a", nodes: 120, nodes_with_weights: 100, models_present: 12, largest_free_block: 7 }],
  replicas: { ready: 120, starting: 3, draining: 1, failed: 2 },
  models: { total: 40, satisfied: 37, short: 3 },
  unplaceable: ["huge"],
  unplaceable_reasons: { huge: "needs 2 whole H100-80GB nodes in one fabric; ib-a has 1, ib-b has 0" },
  parked: [{ model: "broken", failures: 5, reason: "exited with code 1:\nCUDA out of memory" }],
  idle_replicas: [{ id: "r-1", model: "llama", idle_seconds: 7500, gpus: 8 }],
  evictions: [{ at: "2026-01-01T12:34:56.000Z", replica: "r-9", model: "mistral", for_model: "qwen", idle_seconds: 2700 }],
  store: [],
  control_planes: {},
};

describe("status view", () => {
  test("every section, plain text", () => {
    const out = renderStatus(summary, plain);
    expect(out).not.toContain("\x1b[");
    expect(out).toContain("llmgw 1.2.3");
    expect(out).toContain("200 nodes: 190 ready, 4 cordoned, 2 draining, 4 unreachable");
    expect(out).toMatch(/H100-80GB\s+\[#+x?\.+\]\s+600\s+197\s+3\s+800/);
    expect(out).toMatch(/ib-a\s+120\s+7\s+100\s+12/);
    expect(out).toContain("120 ready · 3 starting · 1 draining · 2 failed");
    expect(out).toContain("40 total · 37 satisfied · 3 short");
    expect(out).toContain("huge  needs 2 whole H100-80GB nodes in one fabric");
    expect(out).toMatch(/broken\s+5\s+exited with code 1: CUDA out of memory/);
    expect(out).toMatch(/r-1\s+llama\s+2h05m\s+8/);
    expect(out).toContain("8 GPUs to reclaim");
    expect(out).toMatch(/r-9\s+mistral\s+45m\s+qwen\s+12:34:56/);
  });
  test("an empty fleet says so instead of printing empty tables", () => {
    const out = renderStatus({ ...summary, nodes: { total: 0, ready: 0, cordoned: 0, draining: 0, unreachable: 0 }, gpus: [], fabrics: [], unplaceable: [], parked: [], idle_replicas: [] }, plain);
    expect(out).toContain("none reported yet");
    expect(out).not.toContain("Fabrics");
    expect(out).not.toContain("Idle");
  });
  test("colour on a terminal", () => {
    expect(renderStatus(summary, color)).toContain("\x1b[31m4 unreachable");
  });
  test("nodes that need a person are named: the first five, then how many more; -o wide names all the summary holds", () => {
    const unreachable = ["g01", "g02", "g03", "g04", "g05", "g06", "g07"];
    const named = { ...summary, nodes: { ...summary.nodes, unreachable: 9, ready: 185 }, node_names: { unreachable, cordoned: ["c1", "c2", "c3", "c4"], draining: ["d1", "d2"], pending: [] } };
    const out = renderStatus(named, plain);
    expect(out).toContain("200 nodes: 185 ready, 4 cordoned (c1, c2, c3, c4), 2 draining (d1, d2), 9 unreachable (g01, g02, g03, g04, g05, and 4 more)");
    expect(renderStatus(named, plain, { wide: true })).toContain("9 unreachable (g01, g02, g03, g04, g05, g06, g07, and 2 more)");
  });
  test("a head node that gives new nodes work without approval says so under Attention; with approval, or on loopback, nothing", () => {
    const open = renderStatus({ ...summary, node_admission: { listen: "0.0.0.0:8001", approve_nodes: false, open: true } }, plain);
    expect(open).toContain(
      "Attention\n  nodes join without approval: anyone who holds the join token and reaches 0.0.0.0:8001 is given replicas, prompts and the catalog's env (serve --approve-nodes)\n",
    );
    for (const a of [{ listen: "0.0.0.0:8001", approve_nodes: true, open: false }, { listen: "127.0.0.1:8001", approve_nodes: false, open: false }])
      expect(renderStatus({ ...summary, node_admission: a }, plain)).not.toContain("without approval");
  });
});

describe("tables", () => {
  test("unknown idleness is '-'; known is a duration", () => {
    const r = (id: string, idle: number): ReplicaView => ({
      id, model: "m", profile: "p", state: "ready", shards: [{ node: "n1", gpus: [0, 1] }], endpoint: null, idle_seconds: idle, failures: 0, error: null, created_at: "", ready_at: null,
    });
    const out = renderReplicas([r("a", -1), r("b", 45), r("c", 3700)], plain, false);
    expect(out).toMatch(/a\s+m\s+p\s+ready\s+n1:0,1\s+-\s+0/);
    expect(out).toMatch(/b\s+.*\s45s\s/);
    expect(out).toMatch(/c\s+.*\s1h01m\s/);
    expect(human(-5)).toBe("-");
  });
  test("columns align and numeric columns right-align", () => {
    expect(table(["A", "NUM"], [["x", "1"], ["long", "100"]], { right: [1] })).toBe("A     NUM\nx       1\nlong  100");
  });
});

describe("cells that hold lists stop at a width and say what they left out", () => {
  test("listCell: whole when it fits; otherwise the items that fit whole, then +N more; one item too long is cut with …", () => {
    expect(listCell([])).toBe("-");
    expect(listCell(["8xH100-80GB", "2xA100-80GB/3g.40gb"])).toBe("8xH100-80GB,2xA100-80GB/3g.40gb");
    expect(listCell(["aaaa", "bbbb", "cccc", "dddd"], 17)).toBe("aaaa,bbbb,+2 more");
    expect(listCell(["aaaa", "bbbb", "cccc", "dddd"], 16)).toBe("aaaa,+3 more");
    expect(listCell(["x".repeat(100), "y"], 20)).toBe(`${"x".repeat(11)}…,+1 more`);
    expect(listCell(["a", "b", "c"], 20, " ")).toBe("a b c");
    for (let n = 1; n <= 300; n += 7) {
      const items = Array.from({ length: n }, (_, i) => `${i % 3}xCLASS-${i}`);
      const cell = listCell(items);
      expect(cell.length).toBeLessThanOrEqual(LIST_CELL_MAX);
      const shown = cell.endsWith(" more") ? Number(/\+(\d+) more$/.exec(cell)![1]) : 0;
      // What is shown plus what is counted is every item.
      expect(cell.split(",").filter((x) => !x.startsWith("+")).length + shown).toBe(n);
    }
    expect(clip("short")).toBe("short");
    expect(clip("x".repeat(70), 10)).toBe(`${"x".repeat(9)}…`);
  });

  const gpu = (i: number, cls: string): GpuView => ({ index: i, uuid: `GPU-${i}`, name: "NVIDIA X", class: cls, memory_mib: 1024, healthy: true, parent: null, in_use_by: null, reason: null });
  const node = (name: string, gpus: GpuView[], extra: Partial<NodeView> = {}): NodeView => ({
    name, state: "ready", admin_state: "none", address: "10.0.0.1", fabrics: [], labels: {}, agent_version: "0.1.0", gpus, models: [],
    last_heartbeat: "2026-01-01T12:00:00.000Z", gpu_total: gpus.length, gpu_free: gpus.length, gpu_unhealthy: 0, gpu_memory_mib: 0, discovery_error: null, engines: [], ...extra,
  });
  // The issue's node: 256 GPUs of 256 classes, beside an ordinary one.
  const classes = Array.from({ length: 256 }, (_, i) => `VENDOR-ACCELERATOR-CLASS-${String(i).padStart(3, "0")}`);
  const wide256 = node("gpu-wide", classes.map((c, i) => gpu(i, c)), {
    fabrics: Array.from({ length: 16 }, (_, i) => `fabric-${i}-${"f".repeat(100)}`),
    labels: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`label-${i}`, "v".repeat(200)])),
    address: `${"h".repeat(200)}.example`,
  });
  const plainNode = node("gpu-01", [gpu(0, "H100-80GB"), gpu(1, "H100-80GB")]);

  test("llmgw nodes: a node reporting 256 classes, 16 long fabrics and 64 labels pads no row to kilobytes", () => {
    for (const wide of [false, true]) {
      const out = renderNodes([wide256, plainNode], plain, wide, Date.parse("2026-01-01T12:00:10.000Z"));
      const lines = out.trimEnd().split("\n");
      // -o wide cuts no free text (the 210-character address is whole); its lists still stop at 60.
      for (const l of lines) expect(l.length).toBeLessThan(wide ? 620 : 200);
      const row = lines.find((l) => l.startsWith("gpu-wide"))!;
      expect(row).toContain("1xVENDOR-ACCELERATOR-CLASS-000,");
      expect(row).toContain("1xVENDOR-ACCELERATOR-CLASS-000,+255 more");
      expect(row).toContain("…,+15 more");
      if (wide) expect(row).toMatch(/ h{200}\.example .* label-0=v+…,\+63 more$/);
      expect(lines.find((l) => l.startsWith("gpu-01"))).toContain("2xH100-80GB");
    }
  });

  test("llmgw explain: a node ruled out by class names its first classes and counts the rest", () => {
    const s = snapshot({ nodes: [{ name: "gpu-wide", gpus: classes }, { name: "gpu-01", gpus: ["H100-80GB"] }], models: [model({ name: "m" })] });
    const e = explainModel({ snapshot: s, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS }, "m")!;
    const detail = e.profiles[0]!.outcomes.find((o) => o.outcome === "class")!.nodes[0]!.detail;
    expect(detail).toStartWith("has 1× VENDOR-ACCELERATOR-CLASS-000, 1× VENDOR-ACCELERATOR-CLASS-001,");
    expect(detail).toEndWith(", and 248 more classes (llmgw nodes gpu-wide)");
    const out = renderExplanation(e, plain);
    for (const l of out.split("\n")) expect(l.length).toBeLessThan(420);
    // An older server's detail, unbounded: cut in the view.
    const old = structuredClone(e);
    old.profiles[0]!.outcomes.find((o) => o.outcome === "class")!.nodes[0]!.detail = `has ${classes.map((c) => `1× ${c}`).join(", ")}`;
    for (const l of renderExplanation(old, plain).split("\n")) expect(l.length).toBeLessThan(420);
    expect(renderExplanation(old, plain)).toContain("…");
  });

  test("llmgw models -o wide and llmgw replicas: 32 long aliases and a 64-node placement stay one short cell", () => {
    const m: ModelView = {
      name: "m", aliases: Array.from({ length: 32 }, (_, i) => `alias-${i}-${"a".repeat(100)}`), desired: 1, ready: 1, total: 1, min: 1, max: 1,
      on_demand: false, parked: false, unplaceable: false, failures: 0, reason: null, revision: 1,
    } as ModelView;
    const mo = renderModels([m], plain, true);
    for (const l of mo.split("\n")) expect(l.length).toBeLessThan(200);
    expect(mo).toContain("+31 more");
    const r: ReplicaView = {
      id: "r-1", model: "m", profile: "p", state: "ready", shards: Array.from({ length: 64 }, (_, i) => ({ node: `node-${i}-${"n".repeat(60)}`, gpus: [0, 1, 2, 3, 4, 5, 6, 7] })),
      endpoint: null, idle_seconds: -1, failures: 0, error: null, created_at: "", ready_at: null,
    };
    const ro = renderReplicas([r], plain, false);
    for (const l of ro.split("\n")) expect(l.length).toBeLessThan(200);
    expect(ro).toContain("+63 more");
  });
});

describe("describe model", () => {
  type Detail = Parameters<typeof renderModelDetail>[0];
  const m = (extra: Partial<Detail>): Detail => ({
    name: "m", aliases: [], desired: 1, ready: 0, total: 1, min: 1, max: 1, on_demand: false, parked: false, failures: 0, crashes: 0, reason: null, unplaceable: false, never_fits: false, revision: 1, spec: { profiles: [] },
    ...extra,
  });
  test("a model parked for crashing says how many crashes in a row and why; one parked for failed starts says those", () => {
    const reason = "crashed within 10m of becoming ready, 5 times in a row; last: exited with code 1: boom";
    const crashed = renderModelDetail(m({ parked: true, crashes: 5, reason }), [], [], plain);
    expect(crashed).toContain("Crashes:    5 soon after becoming ready, in a row, parked (`llmgw models unpark m` tries again)");
    expect(crashed).not.toContain("Failures:");
    expect(crashed).toContain(`Reason:     ${reason}`);
    const failed = renderModelDetail(m({ parked: true, failures: 5, crashes: 1, reason: "exited with code 1" }), [], [], plain);
    expect(failed).toContain("Failures:   5 failed starts in a row, parked");
    expect(failed).toContain("Crashes:    1 soon after becoming ready, in a row\n");
    expect(renderModelDetail(m({}), [], [], plain)).not.toMatch(/Failures:|Crashes:/);
  });
  test("the catalog's revision is called so, and the Hugging Face revision, when the spec pins one, is its own line", () => {
    const out = renderModelDetail(m({ revision: 3, spec: { profiles: [], pool: "default", placement: "binpack" } }), [], [], plain);
    expect(out).toContain("\nCatalog:    revision 3, pool default, binpack\n");
    expect(out).not.toMatch(/^Revision:/m);
    expect(out).not.toContain("Hugging Face");
    const sha = "0123456789abcdef0123456789abcdef01234567";
    expect(renderModelDetail(m({ revision: 3, spec: { profiles: [], revision: sha } }), [], [], plain)).toContain(`\nCatalog:    revision 3\nWeights:    Hugging Face revision ${sha}\n`);
  });
  test("a model being rolled: describe has a Rollout line, the models table its progress as the reason", () => {
    const text = "1 of 2 replaced, old replica r-1 draining (4 requests in flight, 22 s left)";
    const rollout = { replaced: 1, of: 2, starting: 0, old: 1, draining: [{ id: "r-1", inflight: 4, seconds_left: 22 }], waiting: null, text };
    expect(renderModelDetail(m({ ready: 2, desired: 2, rollout }), [], [], plain)).toContain(`\nRollout:    ${text}\n`);
    expect(renderModelDetail(m({}), [], [], plain)).not.toContain("Rollout:");
    expect(renderModels([m({ ready: 2, desired: 2, rollout })], plain, true)).toContain(`rollout: ${text}`);
    // `models NAME` says it on a line of its own instead.
    expect(renderModels([m({ ready: 2, desired: 2, rollout })], plain, true, Number.POSITIVE_INFINITY, true)).not.toContain("rollout:");
  });
  test("a failed replica's GPUs are said to be released: a ready replica may hold them now", () => {
    const r = (id: string, state: ReplicaView["state"]): ReplicaView => ({
      id, model: "m", profile: "p", state, shards: [{ node: "gpu-01", gpus: [0] }], endpoint: null, idle_seconds: -1, failures: 0, error: state === "failed" ? "exited with code 1: boom" : null, created_at: "", ready_at: null,
    });
    for (const wide of [false, true]) {
      const out = renderReplicas([r("r-old", "failed"), r("r-new", "ready")], plain, wide);
      expect(out).toMatch(/r-old\s+m\s+p\s+failed\s+released gpu-01:0\s/);
      expect(out).toMatch(/r-new\s+m\s+p\s+ready\s+gpu-01:0\s/);
    }
    expect(renderModelDetail(m({}), [r("r-old", "failed")], [], plain)).toMatch(/r-old\s+m\s+p\s+failed\s+released gpu-01:0\s/);
  });
  test("models -o wide counts failed starts and crashes apart", () => {
    const out = renderModels([m({ parked: true, crashes: 5, reason: "crashed within 10m of becoming ready, 5 times in a row; last: boom" })], plain, true);
    expect(out).toMatch(/FAILURES\s+CRASHES\s+CATALOG REV/);
    expect(out).toMatch(/parked\s+-\s+1\s+0\s+5\s+1\s+crashed within 10m/);
  });
});
