import { describe, expect, test } from "bun:test";
import { WeightsRemover } from "../../src/agent/weights-remove";
import { copyCell, renderWeights, weightsLine } from "../../src/cli/weights";
import type { WeightsStatus } from "../../src/control/transfers";
import { WeightsAdmin } from "../../src/control/weights-admin";
import { weightsFor } from "../../src/control/weights-orders";
import { transferEvents, weightsInFlight, weightsRows } from "../../src/control/weights-views";
import pino from "pino";
import { ManualScheduler } from "../../src/lib/scheduler";
import { MemoryWeightsOrders } from "../helpers/weights-orders";
import type { TransferReport, WeightsHeld, WeightsManifest } from "../../src/protocol/weights";

const REV = "a".repeat(40);
const MANIFEST: WeightsManifest = {
  repo: "org/m",
  revision: REV,
  files: [
    { path: "config.json", size: 100, sha256: null, oid: "b".repeat(40) },
    { path: "model.safetensors", size: 900, sha256: "c".repeat(64), oid: "d".repeat(40) },
  ],
};
const manifest = (repo: string, revision: string) => (repo === "org/m" && revision === REV ? MANIFEST : undefined);
const held = (files: string[], fetched = true, last_used: number | null = null): WeightsHeld => ({ repo: "org/m", revision: REV, files, bytes: files.length === 2 ? 1000 : 100, fetched, last_used });
const transfer = (over: Partial<TransferReport> = {}): TransferReport => ({ repo: "org/m", revision: REV, path: "model.safetensors", size: 900, done: 300, rate: 100, from: "hub", error: null, ...over });
const status = (node: string, over: Partial<WeightsStatus>): WeightsStatus => ({
  node,
  repo: "org/m",
  revision: REV,
  state: "fetching",
  files_total: 2,
  files_present: 1,
  bytes_total: 1000,
  bytes_present: 100,
  fetching: { files: 1, bytes_done: 300, bytes_total: 900, rate: 100, from: ["hub"] },
  estimate_seconds: 6,
  reason: null,
  ...over,
});

describe("weightsRows", () => {
  const nodes = [
    { name: "b", fabrics: ["f1"] },
    { name: "a", fabrics: ["f1"] },
    { name: "c", fabrics: ["f2"] },
  ];

  test("per revision every node: present from the report, fetching from the plan with percent, absent; fabrics holding it whole; last used", () => {
    const rows = weightsRows({
      nodes,
      models: [{ name: "m", repo: "org/m", revision: REV }],
      status: [status("b", {})],
      held: new Map([["a", [held(["config.json", "model.safetensors"], true, Date.UTC(2026, 0, 1))]], ["b", [held(["config.json"])]]]),
      manifest,
      seeded: new Set([`b\u0000org/m@${REV}`]),
    });
    expect(rows).toHaveLength(1);
    const [r] = rows;
    expect(r!.models).toEqual(["m"]);
    expect(r!.size).toBe(1000);
    expect(r!.fabrics).toEqual(["f1"]);
    expect(r!.last_used).toBe("2026-01-01T00:00:00.000Z");
    expect(r!.nodes.map((n) => [n.node, n.state, n.percent, n.rate, n.from, n.seeded])).toEqual([
      ["a", "present", 100, null, [], false],
      ["b", "fetching", 40, 100, ["hub"], true],
      ["c", "absent", 0, null, [], false],
    ]);
  });

  test("a revision no model names, known from a node's report only, is listed with no model", () => {
    const rows = weightsRows({ nodes, models: [], status: [], held: new Map([["c", [{ ...held(["x"]), repo: "org/gone" }]]]), manifest, seeded: new Set() });
    expect(rows.map((r) => [r.repo, r.models, r.size, r.nodes.find((n) => n.node === "c")!.state])).toEqual([["org/gone", [], null, "present"]]);
  });
});

describe("weightsInFlight", () => {
  test("files, bytes and rate summed; the slowest estimate; a node that does not move is the slowest", () => {
    expect(weightsInFlight([status("a", {}), status("b", { estimate_seconds: 20, fetching: { files: 2, bytes_done: 10, bytes_total: 1000, rate: 50, from: ["a"] } })])).toEqual({
      files: 3,
      bytes_done: 310,
      bytes_total: 1900,
      rate: 150,
      slowest_seconds: 20,
      slowest: { node: "b", repo: "org/m", revision: REV },
    });
    expect(weightsInFlight([status("a", {}), status("b", { estimate_seconds: null })])?.slowest_seconds).toBeNull();
    expect(weightsInFlight([status("a", { state: "present", fetching: null })])).toBeNull();
  });
});

describe("transferEvents", () => {
  const empty = { held: [], transfers: [] };
  test("started once, finished once, per revision not per file", () => {
    const started = transferEvents("n1", empty, { held: [], transfers: [transfer(), transfer({ path: "config.json" })] }, manifest);
    expect(started.map((e) => [e.kind, e.message])).toEqual([["weights.fetching", `n1 fetching org/m@${REV.slice(0, 12)} from hub`]]);
    const going = { held: [held(["config.json"])], transfers: [transfer({ done: 600 })] };
    expect(transferEvents("n1", { held: [], transfers: [transfer()] }, going, manifest)).toEqual([]);
    const done = transferEvents("n1", going, { held: [held(["config.json", "model.safetensors"])], transfers: [] }, manifest);
    expect(done.map((e) => e.kind)).toEqual(["weights.fetched"]);
  });

  test("a failure is told once with its file and reason", () => {
    const failing = { held: [], transfers: [transfer({ error: "model.safetensors: checksum mismatch" })] };
    const ev = transferEvents("n1", { held: [], transfers: [transfer()] }, failing, manifest);
    expect(ev.map((e) => [e.kind, e.message])).toEqual([["weights.failed", `n1 failed to fetch model.safetensors of org/m@${REV.slice(0, 12)} from hub: model.safetensors: checksum mismatch`]]);
    expect(transferEvents("n1", failing, failing, manifest)).toEqual([]);
  });

  test("nothing for what a node held before, for the first report, or for an operator's folder", () => {
    const whole = { held: [held(["config.json", "model.safetensors"])], transfers: [] };
    expect(transferEvents("n1", undefined, whole, manifest)).toEqual([]);
    expect(transferEvents("n1", whole, whole, manifest)).toEqual([]);
    expect(transferEvents("n1", empty, { held: [held(["config.json", "model.safetensors"], false)], transfers: [] }, manifest)).toEqual([]);
  });

  test("a copy that started and ended between two reports: both events", () => {
    expect(transferEvents("n1", empty, { held: [held(["config.json", "model.safetensors"])], transfers: [] }, manifest).map((e) => e.kind)).toEqual(["weights.fetching", "weights.fetched"]);
  });
});

describe("weightsFor with pulled revisions", () => {
  test("a pulled revision is sent with its files and orders, with no assignment", () => {
    const hub = { fileUrl: (r: string, v: string, p: string) => `http://hub/${r}/resolve/${v}/${p}`, token: undefined };
    const w = weightsFor([], { get: manifest, needsToken: () => false }, hub, [{ repo: "org/m", revision: REV }]);
    expect(w.weights).toEqual([MANIFEST]);
    expect(w.fetches.map((f) => f.file.path)).toEqual(["config.json", "model.safetensors"]);
    expect(weightsFor([], { get: manifest, needsToken: () => false }, hub).weights).toEqual([]);
  });
});

describe("WeightsRemover", () => {
  test("each removal runs once and is reported, refusals with their reason, until the head node stops asking", async () => {
    const calls: string[] = [];
    const removed: string[] = [];
    const r = new WeightsRemover({
      disk: {
        remove: async (repo, revision) => {
          calls.push(repo);
          if (repo === "org/theirs") throw new Error(`${repo}@${revision} was not fetched by llmgw: its files are left alone`);
          return 10;
        },
      },
      removed: (repo) => removed.push(repo),
      log: pino({ level: "silent" }),
    });
    const asked = [{ repo: "org/m", revision: REV }, { repo: "org/theirs", revision: REV }];
    r.apply(asked);
    r.apply(asked);
    await Bun.sleep(0);
    expect(calls).toEqual(["org/m", "org/theirs"]);
    expect(removed).toEqual(["org/m", "org/theirs"]);
    expect(r.report().weights_removed).toEqual([
      { repo: "org/m", revision: REV, error: null },
      { repo: "org/theirs", revision: REV, error: `org/theirs@${REV} was not fetched by llmgw: its files are left alone` },
    ]);
    r.apply([]);
    expect(r.report()).toEqual({});
  });
});

describe("weights on the terminal", () => {
  test("a copy in a few words; the status line", () => {
    const v = { node: "w1", fabrics: ["f1"], state: "fetching" as const, percent: 42, bytes_present: 0, rate: 2 * 1024 * 1024, from: ["hub"], estimate_seconds: 30, reason: null, seeded: false };
    expect(copyCell(v, false)).toBe("w1 fetching 42 % 2 MiB/s from hub");
    expect(copyCell({ ...v, state: "blocked", reason: "disk full", rate: null, from: [] }, true)).toBe("w1 blocked 42 % (disk full)");
    expect(weightsLine({ files: 2, bytes_done: 1024, bytes_total: 4096, rate: 512, slowest_seconds: 6, slowest: { node: "w2", repo: "org/m", revision: REV } })).toBe(
      "Weights   2 files in flight · 1 KiB of 4 KiB · 512 B/s · slowest: w2 org/m ~6s",
    );
    expect(weightsLine(undefined)).toBeUndefined();
  });

  test("the table fits the width: the nodes' cell gives way", () => {
    const nodes = Array.from({ length: 8 }, (_, i) => ({ node: `node-${i}`, fabrics: [], state: "present" as const, percent: 100, bytes_present: 1, rate: null, from: [], estimate_seconds: null, reason: null, seeded: false }));
    const out = renderWeights([{ models: ["m"], repo: "org/m", revision: REV, size: 1000, fabrics: [], last_used: null, nodes }], false, 80);
    for (const line of out.trimEnd().split("\n")) expect(line.length).toBeLessThanOrEqual(80);
    expect(renderWeights([{ models: ["m"], repo: "org/m", revision: REV, size: 1000, fabrics: [], last_used: null, nodes }], true, 80)).toContain("node-7 present");
  });
});

describe("WeightsAdmin: pull and rm", () => {
  const snap = {
    nodes: [
      { name: "n1", fabrics: ["f1"] },
      { name: "n2", fabrics: ["f1"] },
      { name: "n3", fabrics: ["f2"] },
    ],
    models: [
      { name: "m", spec: { source: "hf://org/m", revision: REV } },
      { name: "plain", spec: {} },
    ],
  };
  const make = (assignments: Record<string, { id: string; source?: string; revision: string | null }[]>, heldBy: Record<string, WeightsHeld[]>) => {
    const events: string[] = [];
    const admin = new WeightsAdmin({
      planner: { latest: () => undefined, reportOf: (n) => (heldBy[n] ? { held: heldBy[n]!, transfers: [], disk: undefined } : undefined), remake: async () => {} },
      manifests: { known: manifest },
      memory: { snapshot: async () => snap as never },
      assignments: (n) => assignments[n] ?? [],
      events: { event: async (kind, subject) => void events.push(`${kind} ${subject}`) },
      store: new MemoryWeightsOrders(),
      scheduler: new ManualScheduler(),
      log: pino({ level: "silent" }),
    });
    return { admin, events };
  };

  test("pull: a fabric's nodes or the nodes named become wants; unknown nodes and models without a Hub source are refused", async () => {
    const { admin } = make({}, {});
    expect((await admin.pull({ model: "m", fabric: "f1" })).nodes).toEqual(["n1", "n2"]);
    expect(admin.allSeeds()).toEqual([
      { node: "n1", repo: "org/m", revision: REV },
      { node: "n2", repo: "org/m", revision: REV },
    ]);
    expect(admin.seedsOf("n3")).toEqual([]);
    await expect(admin.pull({ model: "m", nodes: ["n9"] })).rejects.toThrow('no node named "n9"');
    await expect(admin.pull({ model: "m", fabric: "f9" })).rejects.toThrow('no node is in fabric "f9"');
    await expect(admin.pull({ model: "plain", nodes: ["n1"] })).rejects.toThrow("has no source: hf://ORG/NAME");
  });

  test("rm: refused while a replica there uses it (naming it) and for an operator's weights; else the node is asked, the pull dropped, the answer an event", async () => {
    const { admin, events } = make({ n1: [{ id: "r-1", source: "hf://org/m", revision: REV }] }, { n1: [held(["config.json", "model.safetensors"])], n2: [held(["config.json", "model.safetensors"])], n3: [held(["config.json"], false)] });
    await expect(admin.remove({ model: "m", node: "n1" })).rejects.toThrow(`replica r-1 on n1 uses org/m@${REV.slice(0, 12)}`);
    await expect(admin.remove({ model: "m", node: "n3" })).rejects.toThrow("llmgw did not fetch it");
    await admin.pull({ model: "m", nodes: ["n2"] });
    const res = await admin.remove({ model: "org/m", node: "n2" });
    expect(res.revisions).toEqual([REV]);
    expect(admin.removalsOf("n2")).toEqual([{ repo: "org/m", revision: REV }]);
    expect(admin.seedsOf("n2")).toEqual([]);
    const report = { held: [], transfers: [], disk: undefined };
    admin.observe({ node: "n2", weights_removed: [{ repo: "org/m", revision: REV, error: null }] } as never, undefined, report);
    expect(admin.removalsOf("n2")).toEqual([]);
    await Bun.sleep(0);
    expect(events).toContain("weights.removed node/n2");
  });
});
