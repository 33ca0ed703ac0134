// Placement and explain with weights from the Hub: a node holding a model's revision before one
// that does not, a node whose fabric holds it before one of another fabric, as a preference
// among the nodes that fit (never a requirement); a node whose disk cannot take the revision
// passed over with that reason; binpack and spread unchanged for models without a source; and
// explain naming per node which preference applies and what getting the weights there costs.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { renderExplanation } from "../../src/cli/explain";
import { type ExplainInput, explainModel } from "../../src/control/explain";
import { type PlacementNode, type PlacementRequest, type PlacementResult, place } from "../../src/control/placement";
import { reconcile } from "../../src/control/reconciler";
import type { TransferNode } from "../../src/control/transfers";
import { type NodeWeights, explainWeights, weightsStanding } from "../../src/control/weights-placement";
import { WeightsPlanner } from "../../src/control/weights-planner";
import type { Profile } from "../../src/protocol/catalog";
import type { WeightsManifest } from "../../src/protocol/weights";
import { RECONCILE_DEFAULTS } from "../helpers/control-settings";
import { T0, model, snapshot } from "../helpers/fleet";

const H = "H100-80GB";
const GiB = 1024 ** 3;
const REPO = "meta-llama/Llama-3.1-70B";
const REV = "c".repeat(40);
const cards = (n: number) => Array<string>(n).fill(H);

function pnode(name: string, o: { fabrics?: string[]; used?: number[]; weights?: string[]; hub?: Record<string, NodeWeights> } = {}): PlacementNode {
  return {
    name,
    state: "ready",
    fabrics: o.fabrics ?? [],
    gpus: cards(8).map((c, i) => ({ index: i, uuid: `GPU-${name}-${i}`, class: c, healthy: true, used: o.used?.includes(i) ?? false })),
    weights: new Set(o.weights ?? []),
    ...(o.hub ? { hubWeights: new Map(Object.entries(o.hub)) } : {}),
  };
}

const prof = (gpus = 1, nodes = 1): Profile => ({ name: "p", engine: "vllm", gpu_class: H, gpus, nodes, priority: 0, args: [], env: {} });
const req = (model: string, o: { count?: number; placement?: "binpack" | "spread"; gpus?: number; nodes?: number } = {}): PlacementRequest => ({
  model,
  count: o.count ?? 1,
  profiles: [prof(o.gpus, o.nodes)],
  placement: o.placement ?? "binpack",
  nodesInUse: new Set(),
});
const where = (r: PlacementResult) => r.placed.map((p) => p.shards.map((s) => `${s.node}:${s.gpus.join(",")}`).join("+"));

const HELD: NodeWeights = { rank: 2, cost: "present" };
const FABRIC: NodeWeights = { rank: 1, cost: "copy 134 GiB from b in fabric f1" };
const HUB: NodeWeights = { rank: 0, cost: "fetch 134 GiB from the Hub" };
const FULL: NodeWeights = { rank: 0, cost: "fetch 134 GiB from the Hub", noRoom: "disk: needs 134 GiB, 20 GiB free" };

describe("placement prefers where the Hub weights are", () => {
  test("a node holding the revision before one without it, the same GPUs free", () => {
    const nodes = [pnode("a", { hub: { m: HUB } }), pnode("b", { hub: { m: HELD } })];
    expect(where(place(nodes, [req("m")]))).toEqual(["b:0"]);
    expect(where(place(nodes, [req("m", { placement: "spread" })]))).toEqual(["b:0"]);
  });

  test("a node whose fabric holds it before a node of another fabric, and before binpack's partly used node", () => {
    const nodes = [pnode("a", { fabrics: ["f2"], used: [0], hub: { m: HUB } }), pnode("b", { fabrics: ["f1"], hub: { m: HELD } }), pnode("c", { fabrics: ["f1"], hub: { m: FABRIC } })];
    // b holds it but its GPUs go to another model first.
    const full = nodes.map((n) => (n.name === "b" ? { ...n, gpus: n.gpus.map((g) => ({ ...g, used: true })) } : n));
    expect(where(place(full, [req("m")]))).toEqual(["c:0"]);
    expect(where(place(full, [req("m", { placement: "spread" })]))).toEqual(["c:0"]);
  });

  test("a preference, never a requirement: with no room where the weights are, any node that fits", () => {
    const nodes = [pnode("a", { hub: { m: HUB } }), pnode("b", { used: [0, 1, 2, 3, 4, 5, 6, 7], hub: { m: HELD } })];
    expect(where(place(nodes, [req("m", { gpus: 2 })]))).toEqual(["a:0,1"]);
  });

  test("a multi-node replica goes to the fabric holding the weights", () => {
    const nodes = [
      pnode("a1", { fabrics: ["f1"], hub: { m: HUB } }),
      pnode("a2", { fabrics: ["f1"], hub: { m: HUB } }),
      pnode("b1", { fabrics: ["f2"], hub: { m: FABRIC } }),
      pnode("b2", { fabrics: ["f2"], hub: { m: HELD } }),
    ];
    // The leader is the node holding them.
    expect(where(place(nodes, [req("m", { gpus: 8, nodes: 2 })]))).toEqual(["b2:0,1,2,3,4,5,6,7+b1:0,1,2,3,4,5,6,7"]);
  });

  test("a Hub standing replaces the weights a heartbeat lists for that model only", () => {
    // a lists m on disk (an operator's copy of another revision): the Hub standing says b holds the pinned one.
    const nodes = [pnode("a", { weights: ["m", "other"], hub: { m: HUB } }), pnode("b", { hub: { m: HELD } })];
    expect(where(place(nodes, [req("m")]))).toEqual(["b:0"]);
    expect(where(place(nodes, [req("other")]))).toEqual(["a:0"]);
  });
});

describe("binpack and spread unchanged for models without a source", () => {
  test("binpack: the partly used node, then name order; spread: the emptiest", () => {
    const nodes = [pnode("a"), pnode("b", { used: [0] }), pnode("c", { hub: { other: HELD } })];
    expect(where(place(nodes, [req("m", { count: 2 })]))).toEqual(["b:1", "b:2"]);
    expect(where(place(nodes, [req("m", { count: 2, placement: "spread" })]))).toEqual(["a:0", "c:0"]);
  });

  test("weights on disk still come first", () => {
    const nodes = [pnode("a", { used: [0] }), pnode("b", { weights: ["m"] })];
    expect(where(place(nodes, [req("m")]))).toEqual(["b:0"]);
  });
});

describe("a node whose disk cannot take the revision", () => {
  test("is passed over though it comes first by name (binpack) and has the most free GPUs (spread)", () => {
    const nodes = [pnode("h100-1", { hub: { m: FULL } }), pnode("h100-2", { used: [0, 1, 2, 3], hub: { m: HUB } }), pnode("h100-3", { used: [0], hub: { m: HUB } })];
    expect(where(place(nodes.filter((n) => n.name !== "h100-3"), [req("m"), req("m", { placement: "spread" })]))).toEqual(["h100-2:4", "h100-2:5"]);
    expect(where(place(nodes, [req("m", { placement: "spread" })]))).toEqual(["h100-3:1"]);
  });

  test("when it was the only one, the reason names it and what its disk lacks", () => {
    const nodes = [pnode("h100-1", { used: [0, 1, 2, 3, 4, 5, 6, 7], hub: { m: HUB } }), pnode("h100-2", { hub: { m: FULL } })];
    const r = place(nodes, [req("m")]);
    expect(r.placed).toEqual([]);
    expect(r.unplaceable.get("m")).toBe("h100-2: disk: needs 134 GiB, 20 GiB free; no H100-80GB node has 1 free GPU (1 node has 0)");
    const alone = place([pnode("h100-2", { hub: { m: FULL } })], [req("m")]);
    expect(alone.unplaceable.get("m")).toBe("h100-2: disk: needs 134 GiB, 20 GiB free");
  });

  test("another model is placed there as before", () => {
    const nodes = [pnode("h100-2", { hub: { m: FULL } })];
    expect(where(place(nodes, [req("m"), req("other")]))).toEqual(["h100-2:0"]);
  });
});

// ---- the standing, from what the nodes report -------------------------------------------------

const manifest: WeightsManifest = { repo: REPO, revision: REV, files: [{ path: "model.safetensors", size: 134 * GiB, sha256: "0".repeat(64), oid: "0".repeat(40) }] };

function tnode(name: string, fabric: string, o: { held?: boolean; free?: number } = {}): TransferNode {
  return {
    name,
    fabrics: [fabric],
    peerUrl: `http://${name}.example:8002`,
    credentialSha256: "1".repeat(64),
    held: o.held ? [{ repo: REPO, revision: REV, files: ["model.safetensors"], bytes: 134 * GiB, fetched: true, last_used: null }] : [],
    transfers: [],
    disk: o.free === undefined ? undefined : { free_bytes: o.free, kept_bytes: 0, max_bytes: null },
  };
}

describe("weightsStanding", () => {
  const models = [{ name: "llama", spec: { source: `hf://${REPO}`, revision: REV } }, { name: "local", spec: {} }];
  const nodes = [tnode("h100-1", "f1"), tnode("h100-2", "f2", { free: 20 * GiB }), tnode("h100-3", "f1", { held: true }), tnode("h100-4", "f2", { free: 500 * GiB })];
  const s = weightsStanding(models, nodes, (repo, rev) => (repo === REPO && rev === REV ? manifest : undefined), () => new Set());

  test("per node: held, its fabric holds, from the Hub; a full disk said; models without a Hub source left out", () => {
    expect(s.get("h100-3")!.get("llama")).toEqual({ rank: 2, cost: "present" });
    expect(s.get("h100-1")!.get("llama")).toEqual({ rank: 1, cost: "copy 134 GiB from h100-3 in fabric f1" });
    expect(s.get("h100-4")!.get("llama")).toEqual({ rank: 0, cost: "fetch 134 GiB from the Hub" });
    expect(s.get("h100-2")!.get("llama")).toEqual({ rank: 0, cost: "fetch 134 GiB from the Hub", noRoom: "disk: needs 134 GiB, 20 GiB free" });
    expect([...s.values()].every((m) => !m.has("local"))).toBe(true);
  });

  test("a node whose fabric is still receiving the weights copies them from there as they arrive (pipelined), and explain says so", () => {
    const getting: TransferNode = { ...tnode("h100-3", "f1"), transfers: [{ repo: REPO, revision: REV, path: "model.safetensors", size: 134 * GiB, done: 40 * GiB, rate: 1e9, from: "hub", error: null }] };
    const st = weightsStanding(models, [tnode("h100-1", "f1"), getting], (repo, rev) => (repo === REPO && rev === REV ? manifest : undefined), () => new Set());
    const w = st.get("h100-1")!.get("llama")!;
    expect(w).toEqual({ rank: 1, cost: "copy 134 GiB from h100-3 in fabric f1 as it arrives there", arriving: true });
    expect(explainWeights(w)).toBe("its fabric holds or is receiving the weights (copy 134 GiB from h100-3 in fabric f1 as it arrives there)");
  });

  test("nothing while the file list is not known", () => {
    expect(weightsStanding(models, nodes, () => undefined, () => new Set()).size).toBe(0);
  });

  test("the reconcile step places on the fabric of the weights and passes over the full disk", () => {
    // h100-1 would win by name, h100-2 by its free GPUs; h100-4 holds the weights but has one GPU.
    const snap = snapshot({
      nodes: [
        { name: "h100-1", gpus: cards(2), fabrics: ["f2"] },
        { name: "h100-2", gpus: cards(8), fabrics: ["f2"] },
        { name: "h100-3", gpus: cards(2), fabrics: ["f1"] },
        { name: "h100-4", gpus: cards(1), fabrics: ["f1"] },
      ],
      models: [model({ name: "llama", source: `hf://${REPO}`, revision: REV, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2 }] })],
    });
    const weights = weightsStanding(
      models,
      [tnode("h100-1", "f2"), tnode("h100-2", "f2", { free: 20 * GiB }), tnode("h100-3", "f1"), tnode("h100-4", "f1", { held: true })],
      () => manifest,
      () => new Set(),
    );
    let n = 0;
    const plan = reconcile({ snapshot: snap, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS, newId: () => `r-${++n}`, weights });
    expect(plan.create.map((r) => r.shards.map((x) => x.node))).toEqual([["h100-3"]]);
  });
});

describe("explain", () => {
  const snap = snapshot({
    nodes: [
      { name: "h100-1", gpus: cards(2), fabrics: ["f1"] },
      { name: "h100-2", gpus: cards(2), fabrics: ["f2"] },
      { name: "h100-3", gpus: cards(2), fabrics: ["f1"] },
      { name: "h100-4", gpus: cards(2), fabrics: ["f2"] },
    ],
    models: [model({ name: "llama", source: `hf://${REPO}`, revision: REV, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2 }] })],
  });
  const standing = weightsStanding(
    [{ name: "llama", spec: { source: `hf://${REPO}`, revision: REV } }],
    [tnode("h100-1", "f1"), tnode("h100-2", "f2", { free: 20 * GiB }), tnode("h100-3", "f1", { held: true }), tnode("h100-4", "f2")],
    () => manifest,
    () => new Set(),
  );
  const input: ExplainInput = { snapshot: snap, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS, weights: standing };
  const e = explainModel(input, "llama")!;
  const p = e.profiles[0]!;

  test("per node which preference applies and what it costs; the full disk in a bucket of its own", () => {
    expect(p.outcomes.find((o) => o.outcome === "fits")!.nodes).toEqual([
      { name: "h100-1", detail: "2 H100-80GB free; its fabric holds the weights (copy 134 GiB from h100-3 in fabric f1)" },
      { name: "h100-3", detail: "2 H100-80GB free; holds the weights (present)" },
      { name: "h100-4", detail: "2 H100-80GB free; weights from the Hub (fetch 134 GiB from the Hub)" },
    ]);
    expect(p.outcomes.find((o) => o.outcome === "disk")!.nodes).toEqual([{ name: "h100-2", detail: "disk: needs 134 GiB, 20 GiB free" }]);
    expect(p.weights_on).toEqual(["h100-3"]);
    expect(p.would_place).toEqual([{ node: "h100-3", gpus: [0, 1] }]);
    expect(e.summary).toBe("llama wants 1 more replica; the next reconcile places one with profile p on h100-3 GPU 0,1; h100-3: holds the weights (present)");
  });

  test("rendered for the terminal", () => {
    const out = renderExplanation(e, { color: false, width: 200 } as Parameters<typeof renderExplanation>[1]);
    expect(out).toContain("h100-1: 2 H100-80GB free; its fabric holds the weights (copy 134 GiB from h100-3 in fabric f1)");
    expect(out).toContain("h100-4: 2 H100-80GB free; weights from the Hub (fetch 134 GiB from the Hub)");
    expect(out).toMatch(/no room for the weights\s+1\s+h100-2: disk: needs 134 GiB, 20 GiB free/);
  });

  test("the words for each standing", () => {
    expect(explainWeights(undefined)).toBe("weights: nothing known of this node's yet (from the Hub)");
    expect(explainWeights(FABRIC)).toBe("its fabric holds the weights (copy 134 GiB from b in fabric f1)");
  });
});

describe("the weights planner's standing for placement", () => {
  test("from the nodes' last heartbeats, gathered before any node has Hub weights to fetch", async () => {
    const now = { t: T0 };
    let snapshots = 0;
    const rows = ["h100-1", "h100-2"].map((name) => ({ name, fabrics: ["f1"], address: "127.0.0.1", adminState: "none" }));
    const planner = new WeightsPlanner({
      manifests: { get: () => manifest, needsToken: () => false },
      hub: { endpoint: "http://hub.example", token: undefined, fileUrl: () => "http://hub.example/x" },
      memory: { snapshot: async () => {
          snapshots++;
          return { nodes: rows } as never;
        }, logsPort: () => 8002, logsCert: () => undefined, unreachable: new Set() },
      store: { credentialHashOf: async () => "2".repeat(64) },
      assignments: () => [],
      scheduler: { now: () => now.t },
      log: pino({ level: "silent" }),
    });
    const held = [{ repo: REPO, revision: REV, files: ["model.safetensors"], bytes: 134 * GiB, fetched: true, last_used: null }];
    planner.note({ node: "h100-2", weights_held: held, transfers: [], disk: { free_bytes: 10 * GiB, kept_bytes: 134 * GiB, max_bytes: null } } as never);
    planner.note({ node: "h100-1", weights_held: [], transfers: [], disk: { free_bytes: 20 * GiB, kept_bytes: 0, max_bytes: null } } as never);
    const models = [{ name: "llama", spec: model({ name: "llama", source: `hf://${REPO}`, revision: REV }) }];
    // The first ask starts gathering the nodes; a later one has them.
    expect(planner.placement(models).size).toBe(0);
    expect(snapshots).toBe(1);
    await planner.gather();
    expect(snapshots).toBe(1);
    now.t += 1_000;
    const s = planner.placement(models);
    expect(s.get("h100-2")!.get("llama")).toEqual({ rank: 2, cost: "present" });
    expect(s.get("h100-1")!.get("llama")).toEqual({ rank: 1, cost: "copy 134 GiB from h100-2 in fabric f1", noRoom: "disk: needs 134 GiB, 20 GiB free" });
  });
});
