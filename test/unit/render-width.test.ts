// How wide the CLI's views are: the default fits the terminal (80, 120, 200 columns here), cutting
// free text with "…", shortening lists ("+3 more") and wrapping sentences; `-o wide` cuts no
// reason, error or message. Before, status cut reasons at about 110 characters whatever the
// terminal and -o wide printed the same.

import { describe, expect, test } from "bun:test";
import { renderEvent } from "../../src/cli/events";
import { renderModels } from "../../src/cli/models";
import { renderNodes } from "../../src/cli/nodes";
import { renderReplicas } from "../../src/cli/replicas";
import { DEFAULT_COLUMNS, table, terminalWidth, width, wrap } from "../../src/cli/render";
import { renderStatus } from "../../src/cli/status";
import type { EventView, GpuView, ModelView, NodeView, ReplicaView, Summary } from "../../src/protocol/views";

const plain = { color: false };
const color = { color: true };
const NOW = Date.parse("2026-01-01T12:00:10.000Z");
const WIDTHS = [80, 120, 200] as const;

// The reasons: longer than 120 characters, shorter than a 200-column line.
const UNPLACEABLE =
  "not now: needs 2 whole H100-80GB nodes in one fabric; ib-a has 1 (gpu-02 runs llama-3.1-70b), ib-b has 0 (no H100-80GB nodes there at all)";
const PARKED = "exited with code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (log: llmgw logs --previous r-1a2b3c4d)";
const LONG = `exited with code 1: ValueError: ${"the engine said a great deal about why, ".repeat(12)}the end`;

const summary: Summary = {
  version: "1.2.3",
  nodes: { total: 12, ready: 9, cordoned: 1, draining: 0, unreachable: 2 },
  node_names: { unreachable: ["gpu-07", "gpu-09"], cordoned: ["gpu-03"], draining: [], pending: [] },
  gpus: [
    { class: "H100-80GB", total: 64, used: 40, unhealthy: 1 },
    { class: "A100-80GB/3g.40gb", total: 14, used: 2, unhealthy: 0 },
  ],
  fabrics: [{ fabric: "ib-a", nodes: 8, nodes_with_weights: 6, models_present: 4, largest_free_block: 1 }],
  replicas: { ready: 12, starting: 1, draining: 0, failed: 1 },
  models: { total: 6, satisfied: 4, short: 2 },
  unplaceable: ["llama-3.1-405b", "deepseek-v3"],
  unplaceable_reasons: { "llama-3.1-405b": UNPLACEABLE, "deepseek-v3": LONG },
  parked: [
    { model: "mistral-7b-broken", failures: 5, reason: PARKED },
    { model: "qwen-long", failures: 5, reason: LONG },
  ],
  idle_replicas: [{ id: "r-1", model: "llama", idle_seconds: 7500, gpus: 8 }],
  evictions: [],
  store: [],
  control_planes: {},
  router: { listen: "0.0.0.0:8000", api_key_required: false, open: true },
  node_admission: { listen: "0.0.0.0:8001", approve_nodes: false, open: true },
  stuck_drains: [{ node: "gpu-03", never: true, remaining: 1, reason: LONG }],
};

/** The lines of a view and the widest of them, colour escapes not counted. */
const widest = (out: string) => Math.max(...out.trimEnd().split("\n").map(width));
const oneLineOf = (s: string) => s.replace(/\n/g, " ");

describe("terminalWidth", () => {
  test("COLUMNS first (a person may set it for a pipe), then the terminal's own, then 80", () => {
    expect(terminalWidth({ isTTY: true, columns: 132 }, { COLUMNS: "200" })).toBe(200);
    expect(terminalWidth({ isTTY: true, columns: 132 }, {})).toBe(132);
    expect(terminalWidth({ isTTY: false }, {})).toBe(DEFAULT_COLUMNS);
    expect(terminalWidth({ isTTY: false }, { COLUMNS: "120" })).toBe(120);
    for (const bad of ["", "0", "-5", "wide", "80.5"]) expect(terminalWidth({ isTTY: false }, { COLUMNS: bad })).toBe(80);
  });
});

describe("llmgw status", () => {
  for (const w of WIDTHS)
    for (const style of [plain, color])
      test(`at ${w} columns${style.color ? ", in colour" : ""}: every line fits`, () => {
        const out = renderStatus(summary, style, { width: w });
        expect(widest(out)).toBeLessThanOrEqual(w);
        // Sentences wrap instead of being cut: the fix an open router needs is still there.
        expect(oneLineOf(out).replace(/ {2,}/g, " ")).toContain("(serve --require-api-key)");
        expect(oneLineOf(out).replace(/ {2,}/g, " ")).toContain("(serve --approve-nodes)");
      });

  test("at 200 columns a reason that fits is whole (it was cut at about 110: '…H100-80…', 'last lin…')", () => {
    const out = renderStatus(summary, plain, { width: 200 });
    expect(out).toContain(`  llama-3.1-405b  ${UNPLACEABLE}\n`);
    expect(out).toMatch(new RegExp(`mistral-7b-broken\\s+5\\s+${PARKED.replace(/[().]/g, "\\$&")}\n`));
  });

  test("at 80 columns reasons are cut with … and the view says where they are whole", () => {
    const out = renderStatus(summary, plain, { width: 80 });
    const line = (start: string) => out.split("\n").find((l) => l.startsWith(start))!;
    expect(line("  llama-3.1-405b  ")).toBe(`  llama-3.1-405b  ${UNPLACEABLE.slice(0, 61)}…`);
    expect(line("  mistral-7b-broken ")).toMatch(/^ {2}mistral-7b-broken\s+5\s+exited with code 1: torch\.OutOfMemoryError: CUDA…$/);
    expect(width(line("  mistral-7b-broken "))).toBe(80);
    expect(out).toContain("Reasons cut to fit 80 columns: llmgw status -o wide shows them whole.");
    expect(renderStatus({ ...summary, unplaceable: [], parked: [], stuck_drains: [] }, plain, { width: 80 })).not.toContain("Reasons cut");
  });

  test("-o wide cuts nothing, whatever the terminal", () => {
    for (const w of [undefined, 80, 200]) {
      const out = renderStatus(summary, plain, { wide: true, width: w });
      expect(out).toContain(`  llama-3.1-405b  ${UNPLACEABLE}\n`);
      expect(out).toContain(`  deepseek-v3  ${LONG}\n`);
      expect(out).toMatch(new RegExp(`qwen-long\\s+5\\s+${LONG}\n`));
      expect(out).toContain(`(1 replica left): ${LONG}\n`);
      expect(out).not.toContain("…");
      expect(out).not.toContain("Reasons cut");
    }
  });
});

const model = (name: string, reason: string | null, extra: Partial<ModelView> = {}): ModelView => ({
  name, aliases: [], desired: 1, ready: 0, total: 0, min: 1, max: 1, on_demand: false, parked: reason !== null, failures: 5, crashes: 0, reason, unplaceable: false, never_fits: false, revision: 3, ...extra,
});

describe("llmgw models", () => {
  const models = [model("mistral-7b-broken", PARKED), model("qwen-long", LONG, { aliases: Array.from({ length: 20 }, (_, i) => `alias-${i}`) }), model("llama", null, { ready: 1, parked: false, failures: 0 })];
  for (const w of WIDTHS)
    test(`at ${w} columns every row fits; a reason that fits is whole`, () => {
      const out = renderModels(models, plain, false, w);
      expect(widest(out)).toBeLessThanOrEqual(w);
      expect(out).toContain("qwen-long");
      if (w === 200) expect(out).toContain(PARKED);
      else expect(out).not.toContain(PARKED);
    });
  test("-o wide: every reason whole; the aliases list still stops at 60 characters and counts the rest", () => {
    const out = renderModels(models, plain, true, 80);
    expect(out).toContain(`${PARKED}\n`);
    expect(out).toContain(`${LONG}\n`);
    expect(out).toMatch(/alias-0,alias-1,.*,\+\d+ more/);
  });
});

describe("llmgw replicas", () => {
  const replica = (id: string, state: ReplicaView["state"], nodes: number, error: string | null): ReplicaView => ({
    id, model: "llama-3.1-405b", profile: "h100x8", state, shards: Array.from({ length: nodes }, (_, i) => ({ node: `gpu-${String(i).padStart(2, "0")}`, gpus: [0, 1, 2, 3, 4, 5, 6, 7] })),
    endpoint: "http://10.0.0.1:8100", idle_seconds: -1, failures: 0, error, created_at: "", ready_at: null,
  });
  const list = [replica("r-1a2b3c4d", "ready", 4, null), replica("r-5e6f7a8b", "failed", 1, LONG)];
  for (const w of WIDTHS)
    test(`at ${w} columns every row fits: a long placement counts what it leaves out`, () => {
      const out = renderReplicas(list, plain, false, w);
      expect(widest(out)).toBeLessThanOrEqual(w);
      // A failed replica's cards went back to the pool: it says so, even cut short.
      if (w === 80) expect(out).toMatch(/ready {3}gpu-00:0,1… \+3 more .*\n.*failed  released \+1 more /);
      if (w === 200) expect(out).toContain("gpu-00:0,1,2,3,4,5,6,7 gpu-01:0,1,2,3,4,5,6,7 +2 more");
    });
  test("-o wide: the error whole", () => {
    expect(renderReplicas(list, plain, true, 80)).toContain(`${LONG}\n`);
  });
});

describe("llmgw nodes", () => {
  const gpu = (index: number, cls: string, extra: Partial<GpuView> = {}): GpuView => ({ index, uuid: `GPU-${index}`, name: "NVIDIA", class: cls, memory_mib: 81559, healthy: true, parent: null, in_use_by: null, reason: null, ...extra });
  const node = (name: string, gpus: GpuView[], extra: Partial<NodeView> = {}): NodeView => ({
    name, state: "ready", admin_state: "none", address: "10.0.0.1", fabrics: ["ib-a", "ib-b", "ethernet-rack-7"], labels: { rack: "r7", zone: "eu-west" }, agent_version: "0.1.0", gpus, models: [],
    last_heartbeat: "2026-01-01T12:00:00.000Z", gpu_total: gpus.length, gpu_free: gpus.length, gpu_unhealthy: 0, gpu_memory_mib: 0, discovery_error: null, engines: [], ...extra,
  });
  const classes = ["H100-80GB", "A100-80GB", "A100-80GB/3g.40gb", "A100-80GB/1g.10gb", "L40S", "RTX-6000-Ada"];
  const nodes = [
    node("gpu-01", classes.map((c, i) => gpu(i, c, i === 0 ? { healthy: false, reason: LONG } : {}))),
    node("gpu-07", [], { discovery_error: LONG }),
  ];
  for (const w of WIDTHS)
    test(`at ${w} columns the table and the problems below it fit`, () => {
      const out = renderNodes(nodes, plain, false, NOW, w);
      expect(widest(out)).toBeLessThanOrEqual(w);
      expect(out).toContain("gpu-07: exited with code 1");
    });
  test("-o wide: the problems' reasons whole", () => {
    const out = renderNodes(nodes, plain, true, NOW, 80);
    expect(out).toContain(`gpu-07: ${LONG}\n`);
    expect(out).toContain(`gpu-01: GPU 0 ${LONG}\n`);
  });
});

describe("llmgw events", () => {
  const event: EventView = { id: 7, at: "2026-01-01T12:00:00.000Z", kind: "replica.failed", subject: "replica/r-5e6f7a8b", message: `replica r-5e6f7a8b of qwen-long failed on gpu-01: ${LONG}` };
  for (const w of WIDTHS)
    for (const style of [plain, color])
      test(`at ${w} columns${style.color ? ", in colour" : ""} one line that fits`, () => {
        const out = renderEvent(event, style, { now: NOW, width: w });
        expect(out.split("\n").length).toBe(2);
        expect(widest(out)).toBe(w);
        expect(out).toEndWith("…\n");
      });
  test("-o wide: the message whole; without a width (describe), whole too", () => {
    expect(renderEvent(event, plain, { wide: true, now: NOW, width: 80 })).toEndWith(`${event.message}\n`);
    expect(renderEvent(event, plain, { now: NOW })).toEndWith(`${event.message}\n`);
  });
});

describe("fitting helpers", () => {
  test("a table narrows its free text and lists, widest first, never its plain columns", () => {
    const rows = [["alpha", { text: "x".repeat(100) }, { items: ["a1", "a2", "a3", "a4", "a5", "a6"] }]];
    const t = table(["NAME", "REASON", "LIST"], rows, { width: 40 });
    expect(widest(t)).toBeLessThanOrEqual(40);
    expect(t).toContain("alpha");
    expect(t).toContain("…");
    expect(table(["NAME", "REASON"], [["alpha", { text: "x".repeat(100) }]])).toContain("x".repeat(100));
  });
  test("wrap: lines within the width, continuations indented, the words all there; colour closed and opened again", () => {
    const line = `Nodes     ${"\u001b[31m9 unreachable (g01, g02, g03, g04, g05, and 4 more)\u001b[0m"} and some more words after the colour`;
    const lines = wrap(line, 30, 10);
    for (const l of lines) expect(width(l)).toBeLessThanOrEqual(30);
    for (const l of lines.slice(1)) expect(l).toStartWith("          ");
    const words = (s: string) => s.replace(/\u001b\[[0-9;]*m/g, "").split(/\s+/).filter(Boolean);
    expect(lines.flatMap(words)).toEqual(words(line));
    // No line leaves its colour on for the next: each line's last escape is a reset.
    for (const l of lines) if (l.includes("\u001b[")) expect(l.match(/\u001b\[[0-9;]*m/g)!.at(-1)).toBe("\u001b[0m");
    expect(lines[2]).toStartWith("          \u001b[31m");
    expect(wrap(line, undefined, 10)).toEqual([line]);
  });
});
