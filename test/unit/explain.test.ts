// `llmgw explain`'s pure function, rule by rule: each bucket a node can fall in, never against
// not now, the suggestions (evicting named idle replicas, known idle only; uncordoning,
// approving, waiting), a multi-node profile within one fabric, and a model that is fine.
// And apply's dry run: what would change and where, with the input untouched.

import { describe, expect, test } from "bun:test";
import { renderDryRun } from "../../src/cli/apply";
import { renderExplanation } from "../../src/cli/explain";
import { dryRunApply } from "../../src/control/dry-run";
import { type ExplainInput, explainModel } from "../../src/control/explain";
import type { Snapshot } from "../../src/control/types";
import type { EngineReport } from "../../src/protocol/heartbeat";
import type { Explanation, NodeOutcome } from "../../src/protocol/views";
import { T0, model, snapshot } from "../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const h100 = (n: number) => Array.from({ length: n }, () => H);
const all8 = [0, 1, 2, 3, 4, 5, 6, 7];
const big = (extra: Parameters<typeof model>[0] = { name: "big" }) => model({ profiles: [{ name: "h100x8", engine: "vllm", gpu_class: H, gpus: 8 }], ...extra });
const qwen = model({ name: "qwen", replicas: { min: 0, max: 2 } });

function input(s: Snapshot, extra: Partial<ExplainInput> = {}): ExplainInput {
  return { snapshot: s, now: T0, lastUsed: new Map(), config: RECONCILE_DEFAULTS, ...extra };
}
const explain = (s: Snapshot, name: string, extra: Partial<ExplainInput> = {}) => explainModel(input(s, extra), name)!;
const bucketOf = (e: Explanation, outcome: NodeOutcome, profile = 0) => e.profiles[profile]!.outcomes.find((o) => o.outcome === outcome);
const HOUR_AGO = new Map([["r-1", T0 - 3_600_000]]);

/** One node in each bucket for an 8-GPU H100 profile. */
const mixed = snapshot({
  nodes: [
    { name: "a-busy", gpus: h100(8) },
    { name: "b-cordoned", gpus: h100(8), admin: "cordoned" },
    { name: "c-a100", gpus: ["A100-80GB", "A100-80GB"] },
    { name: "d-small", gpus: h100(4) },
    { name: "e-gone", gpus: h100(8), lastHeartbeat: T0 - 3_600_000 },
    { name: "f-sick", gpus: h100(8), unhealthy: [0, 1, 2] },
  ],
  models: [big(), qwen],
  replicas: [{ id: "r-1", model: "qwen", shards: [{ node: "a-busy", gpus: all8 }] }],
});

describe("each node in the first bucket that rules it out", () => {
  const e = explain(mixed, "big");
  const p = e.profiles[0]!;

  test("class, GPU count, state, unhealthy cards and exhausted, with what each node has", () => {
    expect(bucketOf(e, "class")).toEqual({ outcome: "class", count: 1, nodes: [{ name: "c-a100", detail: "has 2× A100-80GB" }] });
    expect(bucketOf(e, "gpus")!.nodes).toEqual([{ name: "d-small", detail: "has 4 H100-80GB, needs 8" }]);
    expect(bucketOf(e, "cordoned")!.nodes.map((n) => n.name)).toEqual(["b-cordoned"]);
    expect(bucketOf(e, "unreachable")!.nodes.map((n) => n.name)).toEqual(["e-gone"]);
    expect(bucketOf(e, "unhealthy")!.nodes).toEqual([{ name: "f-sick", detail: "3/8 H100-80GB unhealthy" }]);
    expect(bucketOf(e, "exhausted")!.nodes).toEqual([{ name: "a-busy", detail: "8/8 H100-80GB used by r-1 (qwen)" }]);
    expect(bucketOf(e, "fits")).toBeUndefined();
    expect(p.outcomes.reduce((s, o) => s + o.count, 0)).toBe(6);
  });

  test("one Nomad-style line per profile", () => {
    expect(p.line).toBe("1 node filtered by class; 1 filtered by GPU count; 2 not ready: 1 unreachable, 1 cordoned; 1 with unhealthy cards: 3/8 H100-80GB unhealthy; 1 exhausted: 8/8 H100-80GB used; 0 fit");
  });

  test("the GPUs exist but are busy or held back: not now, never said to be never", () => {
    expect(e.status).toBe("not_now");
    expect(p.verdict).toBe("not_now");
    expect(p.reason).toContain("no H100-80GB node has 8 free GPUs");
    expect(e.summary).toStartWith("big wants 1 more replica; not now: h100x8: ");
    expect(p.would_place).toBeNull();
  });

  test("suggestions: evict the named idle replica, uncordon the cordoned node, wait for the unreachable one", () => {
    const s = explain(mixed, "big", { lastUsed: HOUR_AGO }).suggestions;
    const evict = s.find((x) => x.kind === "evict")!;
    expect(evict.replicas).toEqual(["r-1"]);
    expect(evict.message).toBe("evicting idle replica r-1 of qwen (idle 60m) would make room on a-busy GPU 0,1,2,3,4,5,6,7; llmgw evicts only for on-demand models: lower the replicas of qwen to free them");
    const unc = s.find((x) => x.kind === "uncordon")!;
    expect(unc.nodes).toEqual(["b-cordoned"]);
    expect(unc.message).toBe("uncordon b-cordoned (`llmgw uncordon b-cordoned`): it would go to b-cordoned GPU 0,1,2,3,4,5,6,7");
    expect(s.find((x) => x.kind === "wait")!.nodes).toEqual(["e-gone"]);
  });
});

describe("idle means known idle", () => {
  const one = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [big({ name: "big", on_demand: true }), qwen], replicas: [{ id: "r-1", model: "qwen", shards: [{ node: "a", gpus: all8 }] }] });

  test("a replica no router has reported is not offered for eviction, and the answer says why", () => {
    const e = explain(one, "big");
    expect(e.status).toBe("not_now");
    expect(e.suggestions.map((s) => s.kind)).toEqual(["none"]);
    expect(e.suggestions[0]!.message).toContain("1 replica is of unknown idleness, not reported by any router, so not counted as idle");
  });

  test("idle for less than its model's idle_timeout is not idle enough; an hour is, and an on-demand model says llmgw does it itself", () => {
    expect(explain(one, "big", { lastUsed: new Map([["r-1", T0 - 60_000]]) }).suggestions.map((s) => s.kind)).toEqual(["none"]);
    const evict = explain(one, "big", { lastUsed: HOUR_AGO }).suggestions[0]!;
    expect(evict.kind).toBe("evict");
    expect(evict.message).toEndWith("llmgw does this by itself when a request for it arrives");
  });

  test("the fewest replicas that free enough are named, and a model of higher priority is never evicted", () => {
    const two = snapshot({
      nodes: [{ name: "a", gpus: h100(8) }],
      models: [big(), qwen, model({ name: "vip", replicas: { min: 0, max: 2 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 2, priority: 0 }] })],
      replicas: [
        { id: "r-1", model: "qwen", shards: [{ node: "a", gpus: [0, 1, 2] }] },
        { id: "r-2", model: "qwen", shards: [{ node: "a", gpus: [3, 4, 5] }] },
        { id: "r-3", model: "qwen", shards: [{ node: "a", gpus: [6, 7] }] },
      ],
    });
    const lastUsed = new Map([["r-1", T0 - 3_600_000], ["r-2", T0 - 7_200_000], ["r-3", T0 - 5_400_000]]);
    // qwen's min is 0 but it has 3 replicas: all three are needed, longest idle first.
    expect(explain(two, "big", { lastUsed }).suggestions[0]!.replicas).toEqual(["r-2", "r-3", "r-1"]);
    // A model that asks with a lower priority (a higher number) may not take a priority-0 model's GPUs.
    const low = { ...two, models: two.models.map((m) => (m.name === "big" ? { ...m, spec: big({ name: "big", profiles: [{ name: "h100x8", engine: "vllm", gpu_class: H, gpus: 8, priority: 5 }] }) } : m)) };
    expect(explain(low, "big", { lastUsed }).suggestions.map((s) => s.kind)).toEqual(["none"]);
  });

  test("a replica whose model would drop below its min is not offered", () => {
    const atMin = { ...one, models: one.models.map((m) => (m.name === "qwen" ? { ...m, spec: model({ name: "qwen", replicas: { min: 1, max: 2 } }) } : m)) };
    expect(explain(atMin, "big", { lastUsed: HOUR_AGO }).suggestions.map((s) => s.kind)).toEqual(["none"]);
  });
});

describe("nodes held back", () => {
  test("a pending node is to be approved, a draining one uncordoned", () => {
    const s = snapshot({ nodes: [{ name: "p", gpus: h100(8), admin: "pending" }, { name: "d", gpus: h100(8), admin: "draining" }], models: [big()] });
    const e = explain(s, "big");
    expect(e.profiles[0]!.line).toBe("2 nodes not ready: 1 pending, 1 draining; 0 fit");
    expect(e.suggestions.map((x) => [x.kind, x.nodes])).toEqual([
      ["approve", ["p"]],
      ["uncordon", ["d"]],
    ]);
    expect(e.suggestions[0]!.message).toBe("approve p (`llmgw nodes approve p`): it would go to p GPU 0,1,2,3,4,5,6,7");
    expect(e.suggestions[1]!.message).toStartWith("d is draining: `llmgw uncordon d` stops the drain; it would go to d GPU");
  });

  test("a replica being stopped holds its GPUs until it has: waiting for it is the way", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [big(), qwen], replicas: [{ id: "r-1", model: "qwen", state: "draining", shards: [{ node: "a", gpus: all8 }] }] });
    const e = explain(s, "big");
    expect(e.status).toBe("not_now");
    expect(bucketOf(e, "exhausted")!.nodes).toEqual([{ name: "a", detail: "8/8 H100-80GB used by r-1 (qwen, draining)" }]);
    expect(e.suggestions).toEqual([{ kind: "wait", message: "wait: replica r-1 is stopping; once stopped it would go to a GPU 0,1,2,3,4,5,6,7", replicas: ["r-1"] }]);
  });

  test("a node without the profile's engine is ruled out with its agent's reason", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [big()] });
    const engines = new Map<string, EngineReport[]>([["a", [{ engine: "vllm", version: null, error: "vllm not found on PATH" }]]]);
    const e = explain(s, "big", { engines });
    expect(bucketOf(e, "engine")!.nodes).toEqual([{ name: "a", detail: "no vllm: vllm not found on PATH" }]);
    expect(e.profiles[0]!.line).toBe("1 node without vllm; 0 fit");
    expect(e.status).toBe("not_now");
  });
});

describe("never against not now", () => {
  test("more GPUs than any node has is never, whatever is busy, with the never reason and no eviction offered", () => {
    const huge = big({ name: "huge", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 16 }] });
    const s = { ...mixed, models: [...mixed.models, { ...mixed.models[0]!, name: "huge", spec: huge }] };
    const e = explain(s, "huge", { lastUsed: HOUR_AGO });
    expect(e.status).toBe("never");
    expect(e.profiles[0]!.verdict).toBe("never");
    expect(e.profiles[0]!.reason).toBe("can never fit on this fleet: no node has 16 H100-80GB GPUs (the largest has 8); waiting will not help (add such nodes, or change the model's profiles)");
    expect(bucketOf(e, "gpus")!.count).toBe(5);
    expect(e.suggestions.map((x) => x.kind)).toEqual(["change"]);
  });

  test("one profile that fits now wins over one that never can", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [model({ name: "m", profiles: [{ name: "h200", engine: "vllm", gpu_class: "H200-141GB", gpus: 1 }, { name: "h100", engine: "vllm", gpu_class: H, gpus: 2, priority: 1 }] })] });
    const e = explain(s, "m");
    expect(e.profiles.map((p) => [p.name, p.verdict])).toEqual([
      ["h200", "never"],
      ["h100", "fits"],
    ]);
    expect(e.status).toBe("fits");
    expect(e.summary).toBe("m wants 1 more replica; the next reconcile places one with profile h100 on a GPU 0,1");
    expect(bucketOf(e, "fits", 1)!.nodes).toEqual([{ name: "a", detail: "8 H100-80GB free" }]);
  });
});

describe("an engine version that cannot serve the profile: never, said before capacity", () => {
  // vLLM 0.10.2 on every node, two nodes in one fabric, one of them busy: a `nodes: 2` vLLM profile.
  const twoNode = model({ name: "big2", profiles: [{ name: "ib", engine: "vllm", gpu_class: H, gpus: 8, nodes: 2 }] });
  const s = snapshot({
    nodes: [{ name: "node-a", fabrics: ["ib-a"], gpus: h100(8) }, { name: "node-b", fabrics: ["ib-a"], gpus: h100(8) }],
    models: [twoNode, qwen],
    replicas: [{ id: "r-1", model: "qwen", shards: [{ node: "node-b", gpus: [0] }] }],
  });
  const at = (version: string) => new Map<string, EngineReport[]>(["node-a", "node-b"].map((n) => [n, [{ engine: "vllm", version, error: null }]]));
  const NEVER = "vLLM 0.10.2 on node-a, node-b has no multi-node serving (needs 0.12 or newer)";

  test("the summary and the profile's reason start with never, naming the version, the nodes and what is needed", () => {
    const e = explain(s, "big2", { engines: at("0.10.2"), lastUsed: HOUR_AGO });
    expect(e.status).toBe("never");
    expect(e.summary).toBe(`big2 can never fit on this fleet: ${NEVER}; waiting will not help (add such nodes, or change the model's profiles)`);
    expect(e.profiles[0]!.verdict).toBe("never");
    expect(e.profiles[0]!.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
    // Every node is ruled out by its version first, the busy one too.
    expect(bucketOf(e, "engine")!.nodes).toEqual([
      { name: "node-a", detail: "vLLM 0.10.2 has no multi-node serving (needs 0.12 or newer)" },
      { name: "node-b", detail: "vLLM 0.10.2 has no multi-node serving (needs 0.12 or newer)" },
    ]);
    expect(e.profiles[0]!.line).toBe("2 nodes whose vllm cannot serve it: vLLM 0.10.2 has no multi-node serving (needs 0.12 or newer); 0 fit");
    expect(e.suggestions).toEqual([{ kind: "change", message: `${NEVER}: upgrade it there (each agent asks for its engines' versions every 10 minutes), or change the model's profiles (nodes, engine) to what the fleet can serve` }]);
  });

  test("on 0.12 the same fleet is not now (one node busy), and on an unknown version too", () => {
    for (const engines of [at("0.12.0"), undefined]) {
      const e = explain(s, "big2", { engines });
      expect(e.status).toBe("not_now");
      expect(e.summary).toContain("not now: ib: needs 2 whole H100-80GB nodes (8 GPUs each) in one fabric; ib-a has 1");
    }
  });

  test("one node new enough is still never, the old one named first, then what the others lack", () => {
    const engines = new Map<string, EngineReport[]>([
      ["node-a", [{ engine: "vllm", version: "0.10.2", error: null }]],
      ["node-b", [{ engine: "vllm", version: "0.12.0", error: null }]],
    ]);
    expect(explain(s, "big2", { engines }).summary).toStartWith(
      "big2 can never fit on this fleet: vLLM 0.10.2 on node-a has no multi-node serving (needs 0.12 or newer); of the other nodes, it needs 2 H100-80GB nodes with 8 GPUs each in one fabric, and no fabric has more than 1",
    );
  });

  test("apply's dry run says never with the same reason, and places nothing", () => {
    const res = dryRunApply(input(s, { engines: at("0.10.2") }), [twoNode]).results[0]!;
    expect(res.verdict).toBe("never");
    expect(res.placements).toEqual([]);
    expect(res.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
  });

  test("status: the model's reason says never first, and the router's catalog tells clients the same", async () => {
    const { buildTables } = await import("../../src/control/views");
    const { catalog } = await import("../../src/control/projections");
    const v = buildTables({ snapshot: s, now: T0, lastUsed: new Map(), nodeTimeoutMs: 15_000, engines: at("0.10.2") }).models.find((m) => m.name === "big2")!;
    expect(v.never_fits).toBe(true);
    expect(v.reason).toStartWith(`can never fit on this fleet: ${NEVER}`);
    expect(catalog(s, RECONCILE_DEFAULTS, at("0.10.2")).find((m) => m.name === "big2")!.unavailable?.reason).toStartWith(`'big2' can never fit on this fleet: ${NEVER}`);
  });
});

describe("a multi-node profile needs its nodes in one fabric", () => {
  const multi = model({ name: "ds", profiles: [{ name: "x3", engine: "vllm", gpu_class: H, gpus: 8, nodes: 3 }] });

  test("free nodes split over fabrics: never, each ruled out by the fabric rule", () => {
    const s = snapshot({ nodes: [{ name: "x1", fabrics: ["ib-a"], gpus: h100(8) }, { name: "x2", fabrics: ["ib-a"], gpus: h100(8) }, { name: "y1", fabrics: ["ib-b"], gpus: h100(8) }, { name: "z", gpus: h100(8) }], models: [multi] });
    const e = explain(s, "ds");
    expect(e.status).toBe("never");
    expect(bucketOf(e, "fabric")!.nodes).toEqual([
      { name: "x1", detail: "its fabric ib-a has 2 such nodes, needs 3" },
      { name: "x2", detail: "its fabric ib-a has 2 such nodes, needs 3" },
      { name: "y1", detail: "its fabric ib-b has 1 such node, needs 3" },
      { name: "z", detail: "in no fabric" },
    ]);
    expect(e.profiles[0]!.line).toBe("4 nodes not in a fabric with 3 such nodes; 0 fit");
  });

  test("a node partly used is not whole; a cordoned third in the fabric is the one to uncordon", () => {
    const s = snapshot({
      nodes: [{ name: "x1", fabrics: ["ib-a"], gpus: h100(8) }, { name: "x2", fabrics: ["ib-a"], gpus: h100(8) }, { name: "x3", fabrics: ["ib-a"], gpus: h100(8), admin: "cordoned" }, { name: "x4", fabrics: ["ib-a"], gpus: [...h100(8), "A100-80GB"] }],
      models: [multi, qwen],
      replicas: [{ id: "r-9", model: "qwen", shards: [{ node: "x4", gpus: [8] }] }],
    });
    const e = explain(s, "ds");
    expect(e.status).toBe("not_now");
    expect(bucketOf(e, "exhausted")!.nodes).toEqual([{ name: "x4", detail: "0/8 H100-80GB used, 1 other GPU used or unhealthy by r-9 (qwen); a multi-node replica needs the whole node" }]);
    expect(bucketOf(e, "fabric")!.count).toBe(2);
    const unc = e.suggestions.find((x) => x.kind === "uncordon")!;
    expect(unc.nodes).toEqual(["x3"]);
    expect(unc.message).toContain("x1 GPU 0,1,2,3,4,5,6,7 + x2 GPU 0,1,2,3,4,5,6,7 + x3 GPU 0,1,2,3,4,5,6,7");
  });

  test("three whole nodes in one fabric fit, and the answer says where", () => {
    const s = snapshot({ nodes: ["x1", "x2", "x3"].map((name) => ({ name, fabrics: ["ib-a"], gpus: h100(8) })), models: [multi] });
    const e = explain(s, "ds");
    expect(e.status).toBe("fits");
    expect(e.profiles[0]!.would_place!.map((x) => x.node)).toEqual(["x1", "x2", "x3"]);
    expect(e.profiles[0]!.line).toBe("3 nodes fit");
  });
});

describe("a model that is fine, parked, or on demand", () => {
  test("running: where its replicas are, and that nothing is needed", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [model({ name: "m" })], replicas: [{ id: "r-5", model: "m", shards: [{ node: "a", gpus: [3] }] }] });
    const e = explain(s, "m");
    expect(e.status).toBe("running");
    expect(e.summary).toBe("m has what it wants: 1 of 1 ready (r-5 on a GPU 3); nothing is needed");
    expect(e.replicas).toEqual([{ id: "r-5", profile: "default", state: "ready", shards: [{ node: "a", gpus: [3] }] }]);
    expect(e.suggestions).toEqual([{ kind: "none", message: "nothing is needed" }]);
  });

  test("parked: the reason and unpark", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [model({ name: "m" })], modelState: [{ model: "m", parked: true, failures: 5, reason: "CUDA out of memory" }] });
    const e = explain(s, "m");
    expect(e.status).toBe("parked");
    expect(e.summary).toBe("m is parked after 5 failed starts: CUDA out of memory");
    expect(e.suggestions[0]!.message).toContain("llmgw models unpark m");
  });

  test("on demand with no replica: where a request would start one, and the nodes holding the weights", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }, { name: "b", gpus: h100(8), models: ["m"] }], models: [model({ name: "m", on_demand: true })] });
    const e = explain(s, "m");
    expect(e.status).toBe("fits");
    expect(e.summary).toBe("m is on demand with no replica now; a request would start one with profile default on b GPU 0");
    expect(e.profiles[0]!.weights_on).toEqual(["b"]);
    expect(bucketOf(e, "fits")!.nodes[1]).toEqual({ name: "b", detail: "8 H100-80GB free, has the weights" });
  });

  test("on demand with only a failed replica left is not running: it says where a request would go", () => {
    const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [model({ name: "m", on_demand: true })], replicas: [{ id: "r-7", model: "m", state: "failed", shards: [{ node: "a", gpus: [0] }] }] });
    const e = explain(s, "m");
    expect(e.status).toBe("fits");
    expect(e.replicas.map((r) => r.state)).toEqual(["failed"]);
  });

  test("an unknown model is undefined", () => {
    expect(explainModel(input(mixed), "nope")).toBeUndefined();
  });
});

describe("apply's dry run", () => {
  const s = snapshot({ nodes: [{ name: "a", gpus: h100(8) }], models: [model({ name: "m" })], replicas: [{ id: "r-5", model: "m", shards: [{ node: "a", gpus: [0] }] }] });

  test("created, changed and unchanged, where the new replicas go and why not, with the input untouched", () => {
    const before = JSON.stringify(s);
    const out = dryRunApply(input(s), [
      model({ name: "m" }),
      model({ name: "new", replicas: { min: 2, max: 2 }, profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 4 }] }),
      big({ name: "huge", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 16 }] }),
    ]);
    expect(JSON.stringify(s)).toBe(before);
    expect(out.dry_run).toBe(true);
    const [m, n, h] = out.results;
    expect([m!.result, m!.verdict, m!.placements, m!.reason]).toEqual(["unchanged", "running", [], null]);
    expect(n!.result).toBe("created");
    expect(n!.message).toBe("model/new created (dry run)");
    // 7 GPUs free: one replica of 4 fits, the second does not.
    expect(n!.placements).toEqual([{ profile: "p", shards: [{ node: "a", gpus: [1, 2, 3, 4] }] }]);
    expect(n!.verdict).toBe("not_now");
    expect(n!.reason).toBe("not now: placed 1 of 2; no H100-80GB node has 4 free GPUs (1 node has 3)");
    expect(h!.verdict).toBe("never");
    expect(h!.placements).toEqual([]);
    expect(h!.reason).toStartWith("can never fit on this fleet: no node has 16 H100-80GB GPUs");
  });

  test("a changed model is configured with its next revision", () => {
    const out = dryRunApply(input(s), [model({ name: "m", replicas: { min: 2, max: 2 } })]);
    expect(out.results[0]).toMatchObject({ name: "m", result: "configured", revision: 2, verdict: "fits", placements: [{ profile: "default", shards: [{ node: "a", gpus: [1] }] }] });
  });
});

describe("the terminal rendering", () => {
  // Past the edge (which refuses such strings), as data from before it would be.
  const evil = "H100\u001b[2J";
  const spec = big({ name: "m" });
  const hostile = snapshot({ nodes: [{ name: "n\u001b[2J", gpus: [evil] }], models: [{ ...spec, profiles: [{ ...spec.profiles[0]!, gpu_class: evil, gpus: 1 }] }], replicas: [{ id: "r-\u001b[31m", model: "m", shards: [{ node: "n\u001b[2J", gpus: [0] }] }] });

  test("what nodes and the catalog wrote is spelled out, never sent raw; no colour without a terminal", () => {
    const text = renderExplanation(explain(hostile, "m"), { color: false });
    expect(text).not.toContain("\u001b");
    expect(text).not.toContain("\u0007");
    expect(text).toContain("\\x1b[2J");
    const coloured = renderExplanation(explain(hostile, "m"), { color: true });
    expect(coloured).toContain("\u001b[1m");
    expect(coloured.replace(/\u001b\[[0-9;]*m/g, "")).not.toContain("\u001b");
    const dry = renderDryRun(dryRunApply(input(hostile), [{ ...spec, name: "x", profiles: [{ ...spec.profiles[0]!, gpu_class: evil, gpus: 1 }] }]));
    expect(dry).toContain("\\x1b[2J");
    expect(dry).not.toContain("\u001b");
    expect(dry).toEndWith("dry run: nothing was changed\n");
  });

  test("a profile's buckets list the nodes they name, and say how many more there are", () => {
    const many = snapshot({ nodes: Array.from({ length: 7 }, (_, i) => ({ name: `s${i}`, gpus: h100(2) })), models: [big()] });
    const text = renderExplanation(explain(many, "big"), { color: false });
    expect(text).toContain("  7 nodes filtered by GPU count; 0 fit\n");
    expect(text).toMatch(/filtered by GPU count\s+7  s0: has 2 H100-80GB, needs 8\n/);
    expect(text).toContain("… and 2 more\n");
  });
});
