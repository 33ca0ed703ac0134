// Placement's rules, each pinned by an example that breaks if the rule does, and properties over
// random small fleets: nothing double-booked, every shard valid, and nothing a brute-force search
// can place left unplaced.

import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import { place, type PlacementNode, type PlacementRequest, type PlacementResult } from "../../src/control/placement";
import type { Profile } from "../../src/protocol/catalog";

const H = "H100-80GB";
const A = "A100-80GB";
const MIG = "A100-80GB/3g.40gb";

interface NodeOpts {
  /** engine → why the node's agent found no version of it */
  missing?: Record<string, string>;
  /** engine → the version the node's agent reported */
  versions?: Record<string, string>;
  state?: PlacementNode["state"];
  fabrics?: string[];
  weights?: string[];
  used?: number[];
  unhealthy?: number[];
}

/** A node whose GPU i has class classes[i]. */
function node(name: string, classes: string[], o: NodeOpts = {}): PlacementNode {
  return {
    name,
    state: o.state ?? "ready",
    fabrics: o.fabrics ?? [],
    gpus: classes.map((c, i) => ({ index: i, uuid: `GPU-${name}-${i}`, class: c, healthy: !o.unhealthy?.includes(i), used: o.used?.includes(i) ?? false })),
    weights: new Set(o.weights ?? []),
    ...(o.missing ? { missingEngines: new Map(Object.entries(o.missing)) } : {}),
    ...(o.versions ? { engineVersions: new Map(Object.entries(o.versions)) } : {}),
  };
}

const cards = (cls: string, n: number) => Array<string>(n).fill(cls);

function prof(name: string, gpu_class: string, gpus = 1, nodes = 1): Profile {
  return { name, engine: "vllm", gpu_class, gpus, nodes, priority: 0, args: [], env: {} };
}

function req(model: string, profiles: Profile[], o: { count?: number; placement?: "binpack" | "spread"; inUse?: string[] } = {}): PlacementRequest {
  return { model, count: o.count ?? 1, profiles, placement: o.placement ?? "binpack", nodesInUse: new Set(o.inUse ?? []) };
}

/** Placements as "profile@node:gpu,gpu+node:gpu" strings, in order, for compact assertions. */
function where(r: PlacementResult, model?: string): string[] {
  return r.placed.filter((p) => model === undefined || p.model === model).map((p) => `${p.profile}@${p.shards.map((s) => `${s.node}:${s.gpus.join(",")}`).join("+")}`);
}

describe("profiles", () => {
  test("the first profile that fits wins; when it runs out the next one takes the rest", () => {
    const nodes = [node("a", cards(H, 1)), node("b", cards(A, 2))];
    const r = place(nodes, [req("m", [prof("h100", H), prof("a100", A)], { count: 3 })]);
    expect(where(r)).toEqual(["h100@a:0", "a100@b:0", "a100@b:1"]);
    expect(r.unplaceable.size).toBe(0);
  });

  test("a profile that fits nowhere is skipped for the next", () => {
    const nodes = [node("a", cards(H, 2)), node("b", cards(A, 4))];
    const r = place(nodes, [req("m", [prof("big", H, 4), prof("small", A, 4)])]);
    expect(where(r)).toEqual(["small@b:0,1,2,3"]);
  });
});

describe("weights", () => {
  test("a node that already holds the model's weights is preferred", () => {
    const nodes = [node("a", cards(H, 8)), node("b", cards(H, 8), { weights: ["m"] }), node("c", cards(H, 8))];
    expect(where(place(nodes, [req("m", [prof("p", H)])]))).toEqual(["p@b:0"]);
    // Another model's weights count for nothing.
    expect(where(place(nodes, [req("other", [prof("p", H)])]))).toEqual(["p@a:0"]);
  });

  test("weights come before binpack's preference for a partly used node", () => {
    const nodes = [node("a", cards(H, 8), { used: [0] }), node("b", cards(H, 8), { weights: ["m"] })];
    expect(where(place(nodes, [req("m", [prof("p", H)])]))).toEqual(["p@b:0"]);
  });

  test("multi-node: the fabric with more weight-holding whole nodes wins, and a weight holder leads", () => {
    const nodes = [
      node("a1", cards(H, 4), { fabrics: ["ib-a"] }),
      node("a2", cards(H, 4), { fabrics: ["ib-a"] }),
      node("b1", cards(H, 4), { fabrics: ["ib-b"] }),
      node("b2", cards(H, 4), { fabrics: ["ib-b"] }),
      node("b3", cards(H, 4), { fabrics: ["ib-b"], weights: ["m"] }),
    ];
    const r = place(nodes, [req("m", [prof("p", H, 4, 2)])]);
    expect(where(r)).toEqual(["p@b3:0,1,2,3+b1:0,1,2,3"]);
  });
});

describe("binpack", () => {
  test("a 1-GPU replica goes to the partly used node, keeping the whole node whole", () => {
    const nodes = [node("a", cards(H, 8)), node("b", cards(H, 8), { used: [0, 1] })];
    expect(where(place(nodes, [req("m", [prof("p", H)])]))).toEqual(["p@b:2"]);
  });

  test("among partly used nodes, the tightest fit", () => {
    const nodes = [node("a", cards(H, 8), { used: [0] }), node("b", cards(H, 8), { used: [0, 1, 2, 3, 4] }), node("c", cards(H, 8), { used: [0, 1, 2, 3, 4, 5, 6] })];
    expect(where(place(nodes, [req("m", [prof("p", H, 2)])]))).toEqual(["p@b:5,6"]);
  });

  test("a node partly used by another class is not whole either", () => {
    const nodes = [node("a", cards(H, 4)), node("b", [...cards(H, 4), ...cards(A, 2)], { used: [4] })];
    expect(where(place(nodes, [req("m", [prof("p", H, 4)])]))).toEqual(["p@b:0,1,2,3"]);
  });

  test("within a node the lowest free indices of the class are taken", () => {
    const nodes = [node("a", [A, H, H, A, H, H], { used: [1, 4] })];
    expect(where(place(nodes, [req("m", [prof("p", H, 2)])]))).toEqual(["p@a:2,5"]);
  });

  test("ties go to the node name, whatever the input order", () => {
    const nodes = [node("c", cards(H, 2)), node("a", cards(H, 2)), node("b", cards(H, 2))];
    expect(where(place(nodes, [req("m", [prof("p", H, 2)])]))).toEqual(["p@a:0,1"]);
  });
});

describe("spread", () => {
  test("two replicas land on different nodes", () => {
    const nodes = [node("a", cards(H, 8)), node("b", cards(H, 8))];
    expect(where(place(nodes, [req("m", [prof("p", H)], { count: 2, placement: "spread" })]))).toEqual(["p@a:0", "p@b:0"]);
    // binpack would have put both on one node
    expect(where(place(nodes, [req("m", [prof("p", H)], { count: 2 })]))).toEqual(["p@a:0", "p@a:1"]);
  });

  test("nodes already running the model are avoided, then the node with most free GPUs wins", () => {
    const nodes = [node("a", cards(H, 8)), node("b", cards(H, 8), { used: [0, 1, 2] }), node("c", cards(H, 8), { used: [0] })];
    const r = place(nodes, [req("m", [prof("p", H)], { count: 3, placement: "spread", inUse: ["a"] })]);
    // c (7 free) before b (5 free); then every node has one, so the emptiest again: a (8 free).
    expect(where(r)).toEqual(["p@c:1", "p@b:3", "p@a:0"]);
  });

  test("when every node runs the model already, it still places: weights first, then the emptiest", () => {
    const nodes = [node("a", cards(H, 2))];
    expect(where(place(nodes, [req("m", [prof("p", H)], { count: 2, placement: "spread", inUse: ["a"] })]))).toEqual(["p@a:0", "p@a:1"]);
    const three = [node("a", cards(H, 4)), node("b", cards(H, 4), { used: [0] }), node("c", cards(H, 4), { used: [0, 1], weights: ["m"] })];
    const r = place(three, [req("m", [prof("p", H)], { count: 4, placement: "spread", inUse: ["a", "b", "c"] })]);
    // Every node is in use, so the tier below: weights (c, both its free cards), then the most
    // free (a with 4), then a and b tie at 3 and the name decides.
    expect(where(r)).toEqual(["p@c:2", "p@c:3", "p@a:0", "p@a:1"]);
  });

  test("weights come after avoiding the model's other replicas", () => {
    const nodes = [node("a", cards(H, 4), { weights: ["m"] }), node("b", cards(H, 4), { used: [0, 1] }), node("c", cards(H, 4), { weights: ["m"], used: [0] })];
    const r = place(nodes, [req("m", [prof("p", H)], { count: 3, placement: "spread", inUse: ["a"] })]);
    expect(where(r)).toEqual(["p@c:1", "p@b:2", "p@a:0"]);
  });
});

describe("multi-node", () => {
  test("stays within one fabric even when another has more free cards in total", () => {
    const nodes = [
      node("a1", cards(H, 4), { fabrics: ["ib-a"] }),
      node("a2", cards(H, 4), { fabrics: ["ib-a"] }),
      node("b1", cards(H, 8), { fabrics: ["ib-b"] }),
      node("b2", cards(H, 8), { fabrics: ["ib-b"], used: [0] }),
      node("b3", cards(H, 8), { fabrics: ["ib-b"], used: [7] }),
    ];
    const r = place(nodes, [req("m", [prof("p", H, 4, 2)])]);
    expect(where(r)).toEqual(["p@a1:0,1,2,3+a2:0,1,2,3"]);
  });

  test("free cards without whole nodes cannot host it, and the reason counts whole nodes per fabric", () => {
    const nodes = [
      node("a1", cards(H, 8), { fabrics: ["ib-a"] }),
      node("a2", cards(H, 8), { fabrics: ["ib-a"], used: [0] }),
      node("b1", cards(H, 8), { fabrics: ["ib-b"], used: [7] }),
      node("b2", cards(H, 8), { fabrics: ["ib-b"], used: [3] }),
    ];
    const r = place(nodes, [req("m", [prof("p", H, 4, 2)])]);
    expect(r.placed).toEqual([]);
    expect(r.unplaceable.get("m")).toBe("needs 2 whole H100-80GB nodes (4 GPUs each) in one fabric; ib-a has 1, ib-b has 0");
  });

  test("an unhealthy GPU makes a node not whole", () => {
    const nodes = [node("a1", cards(H, 4), { fabrics: ["f"] }), node("a2", [...cards(H, 4), A], { fabrics: ["f"], unhealthy: [4] })];
    const r = place(nodes, [req("m", [prof("p", H, 4, 2)])]);
    expect(r.placed).toEqual([]);
    expect(r.unplaceable.get("m")).toBe("needs 2 whole H100-80GB nodes (4 GPUs each) in one fabric; f has 1");
  });

  test("never across two fabrics; a node in two fabrics can join either; a node in none never", () => {
    const split = [node("a", cards(H, 2), { fabrics: ["x"] }), node("b", cards(H, 2), { fabrics: ["y"] }), node("c", cards(H, 2))];
    expect(place(split, [req("m", [prof("p", H, 2, 2)])]).placed).toEqual([]);
    const bridged = [...split, node("d", cards(H, 2), { fabrics: ["y", "x"] })];
    expect(where(place(bridged, [req("m", [prof("p", H, 2, 2)])]))).toEqual(["p@a:0,1+d:0,1"]);
  });

  test("binpack takes the fabric whose whole-free count fits tightest, and its smaller nodes first", () => {
    const nodes = [
      node("a1", cards(H, 8), { fabrics: ["ib-a"] }),
      node("a2", cards(H, 8), { fabrics: ["ib-a"] }),
      node("a3", cards(H, 4), { fabrics: ["ib-a"] }),
      node("b1", cards(H, 8), { fabrics: ["ib-b"] }),
      node("b2", cards(H, 8), { fabrics: ["ib-b"] }),
      node("c1", cards(H, 8), { fabrics: ["ib-c"] }),
    ];
    // ib-b's two whole nodes fit a 2-node replica exactly; ib-a's three are kept for a bigger one.
    expect(where(place(nodes, [req("m", [prof("p", H, 4, 2)])]))).toEqual(["p@b1:0,1,2,3+b2:0,1,2,3"]);
    // Only ib-a has three; the leader is the first by name.
    expect(where(place(nodes, [req("m", [prof("p", H, 4, 3)])]))).toEqual(["p@a1:0,1,2,3+a2:0,1,2,3+a3:0,1,2,3"]);
    // Within a fabric the 4-card node goes before the 8-card ones.
    const oneFabric = nodes.filter((x) => x.name.startsWith("a"));
    expect(where(place(oneFabric, [req("m", [prof("p", H, 4, 2)])]))).toEqual(["p@a1:0,1,2,3+a3:0,1,2,3"]);
  });

  test("spread: whole nodes away from the model's other replicas first", () => {
    const nodes = [node("a", cards(H, 2), { fabrics: ["f"] }), node("b", cards(H, 2), { fabrics: ["f"] }), node("c", cards(H, 2), { fabrics: ["f"] })];
    expect(where(place(nodes, [req("m", [prof("p", H, 2, 2)], { placement: "spread", inUse: ["a"] })]))).toEqual(["p@b:0,1+c:0,1"]);
  });

  test("taking one class's GPUs makes the node not whole for every class", () => {
    const nodes = [node("a", [A, H, H], { fabrics: ["f"] }), node("b", [A, H, H], { fabrics: ["f"] })];
    const r = place(nodes, [req("small", [prof("p", A)]), req("big", [prof("p", H, 2, 2)])]);
    expect(where(r)).toEqual(["p@a:0"]);
    expect(r.unplaceable.get("big")).toBe("needs 2 whole H100-80GB nodes (2 GPUs each) in one fabric; f has 1");
  });

  test("a node needs enough GPUs of the class to be a shard", () => {
    const nodes = [node("a", cards(H, 2), { fabrics: ["f"] }), node("b", cards(H, 4), { fabrics: ["f"] })];
    const r = place(nodes, [req("m", [prof("p", H, 4, 2)])]);
    expect(r.unplaceable.get("m")).toBe("needs 2 whole H100-80GB nodes (4 GPUs each) in one fabric; f has 1");
  });
});

describe("GPU classes and node states", () => {
  test("MIG instances are a class like any other, beside whole cards of the parent's class", () => {
    const nodes = [node("a", [MIG, MIG, A, A])];
    const r = place(nodes, [req("mig", [prof("p", MIG, 2)]), req("whole", [prof("p", A)])]);
    expect(where(r, "mig")).toEqual(["p@a:0,1"]);
    expect(where(r, "whole")).toEqual(["p@a:2"]);
    expect(place(nodes, [req("m", [prof("p", MIG, 3)])]).unplaceable.get("m")).toBe("no A100-80GB/3g.40gb node has 3 free GPUs (1 node has 2)");
  });

  test("cordoned, draining and unreachable nodes are never used", () => {
    const nodes = [
      node("a", cards(H, 8), { state: "cordoned", weights: ["m"] }),
      node("b", cards(H, 8), { state: "draining" }),
      node("c", cards(H, 8), { state: "unreachable" }),
      node("d", cards(H, 8), { used: [0, 1, 2, 3, 4, 5, 6] }),
    ];
    const r = place(nodes, [req("m", [prof("p", H)], { count: 2 })]);
    expect(where(r)).toEqual(["p@d:7"]);
    expect(r.unplaceable.get("m")).toBe("placed 1 of 2; no H100-80GB node has 1 free GPU (1 node has 0; not ready: 1 cordoned, 1 draining, 1 unreachable)");
  });

  test("unhealthy and used GPUs are never taken", () => {
    const nodes = [node("a", cards(H, 4), { used: [0], unhealthy: [1, 3] })];
    const r = place(nodes, [req("m", [prof("p", H)], { count: 2 })]);
    expect(where(r)).toEqual(["p@a:2"]);
    expect(r.unplaceable.get("m")).toBe("placed 1 of 2; no H100-80GB node has 1 free GPU (1 node has 0)");
  });
});

describe("reasons", () => {
  test("not enough free GPUs on any one node: how many nodes have how many", () => {
    const nodes = [
      node("a", cards(A, 4), { used: [0, 1, 2] }),
      node("b", cards(A, 4), { used: [0, 1, 2] }),
      node("c", cards(A, 4), { used: [1, 2, 3] }),
      node("d", cards(A, 4), { used: [0, 1, 2, 3] }),
      node("e", cards(A, 2), { used: [0, 1] }),
    ];
    expect(place(nodes, [req("m", [prof("p", A, 2)])]).unplaceable.get("m")).toBe("no A100-80GB node has 2 free GPUs (3 nodes have 1, 2 have 0)");
  });

  test("the class exists only on nodes that are not ready", () => {
    const nodes = [node("a", cards(H, 8), { state: "cordoned" }), node("b", cards(H, 8), { state: "cordoned" }), node("c", cards(H, 8), { state: "unreachable" }), node("d", cards(A, 8))];
    expect(place(nodes, [req("m", [prof("p", H)])]).unplaceable.get("m")).toBe("no ready node has H100-80GB GPUs (2 cordoned, 1 unreachable)");
  });

  test("no node has the class at all", () => {
    expect(place([node("a", cards(H, 8))], [req("m", [prof("p", "L40S")])]).unplaceable.get("m")).toBe("no node has L40S GPUs");
    expect(place([], [req("m", [prof("p", "L40S")])]).unplaceable.get("m")).toBe("no node has L40S GPUs");
  });

  test("several profiles: each profile's reason, by name", () => {
    const nodes = [node("a", cards(H, 8), { fabrics: ["ib-a"] }), node("b", cards(A, 1), { used: [0] })];
    expect(place(nodes, [req("m", [prof("h100", H, 8, 2), prof("a100", A), prof("l40s", "L40S")])]).unplaceable.get("m")).toBe(
      "h100: needs 2 whole H100-80GB nodes (8 GPUs each) in one fabric; ib-a has 1; a100: no A100-80GB node has 1 free GPU (1 node has 0); l40s: no node has L40S GPUs",
    );
  });

  test("multi-node: ready nodes outside any fabric, and nodes not ready, are named", () => {
    const nodes = [node("a", cards(H, 8)), node("b", cards(H, 8), { fabrics: ["ib-a"], state: "draining" })];
    expect(place(nodes, [req("m", [prof("p", H, 8, 2)])]).unplaceable.get("m")).toBe(
      "needs 2 whole H100-80GB nodes (8 GPUs each) in one fabric; no ready H100-80GB node is in a fabric; not ready: 1 draining",
    );
  });

  test("multi-node: fabrics listed most whole nodes first, at most six of them", () => {
    const nodes = Array.from({ length: 8 }, (_, i) => node(`n${i}`, cards(H, 1), { fabrics: [`f${i}`], used: i < 6 ? [0] : [] }));
    expect(place(nodes, [req("m", [prof("p", H, 1, 2)])]).unplaceable.get("m")).toBe(
      "needs 2 whole H100-80GB nodes (1 GPU each) in one fabric; f6 has 1, f7 has 1, f0 has 0, f1 has 0, f2 has 0, f3 has 0, and 2 more fabrics",
    );
  });

  test("some placed: prefixed with how many of how many", () => {
    const nodes = [node("a", cards(A, 3), { used: [0] })];
    const r = place(nodes, [req("m", [prof("p", A)], { count: 3 })]);
    expect(r.placed.length).toBe(2);
    expect(r.unplaceable.get("m")).toBe("placed 2 of 3; no A100-80GB node has 1 free GPU (1 node has 0)");
  });

  test("the counts are the state after this call's earlier placements", () => {
    const nodes = [node("a", cards(A, 2)), node("b", cards(A, 2))];
    const r = place(nodes, [req("first", [prof("p", A, 2)]), req("second", [prof("p", A)], { count: 3 })]);
    expect(where(r, "first")).toEqual(["p@a:0,1"]);
    expect(r.unplaceable.get("second")).toBe("placed 2 of 3; no A100-80GB node has 1 free GPU (2 nodes have 0)");
  });
});

describe("engines a node cannot run", () => {
  const NO_VLLM = { vllm: "vllm not found on PATH" };
  const eng = (p: Profile, engine: Profile["engine"]): Profile => ({ ...p, engine });

  test("a node without the profile's engine is passed over; a node that said nothing about engines is not", () => {
    // a has the weights and would win; it has no vllm. b never reported engines (unknown ≠ absent).
    const nodes = [node("a", cards(H, 2), { weights: ["m"], missing: NO_VLLM }), node("b", cards(H, 2))];
    expect(where(place(nodes, [req("m", [prof("p", H)])]))).toEqual(["p@b:0"]);
    // The same node runs an SGLang profile: only the engine it lacks is avoided.
    expect(where(place(nodes, [req("m", [eng(prof("p", H), "sglang")])]))).toEqual(["p@a:0"]);
    // The fake engine is built in: always available, whatever a node says.
    const fake = [node("a", cards(H, 1), { missing: { vllm: "vllm not found on PATH", fake: "not found" } })];
    expect(where(place(fake, [req("m", [eng(prof("p", H), "fake")])]))).toEqual(["p@a:0"]);
    expect(where(place(fake, [req("m", [prof("p", H)])]))).toEqual([]);
  });

  test("the next profile takes over, and multi-node replicas avoid such nodes too", () => {
    const nodes = [
      node("a", cards(H, 8), { fabrics: ["ib"], missing: NO_VLLM }),
      node("b", cards(H, 8), { fabrics: ["ib"] }),
      node("c", cards(H, 8), { fabrics: ["ib"] }),
    ];
    expect(where(place(nodes, [req("m", [prof("v", H, 8, 2)])]))).toEqual(["v@b:0,1,2,3,4,5,6,7+c:0,1,2,3,4,5,6,7"]);
    const one = [node("a", cards(H, 2), { missing: NO_VLLM })];
    expect(where(place(one, [req("m", [prof("v", H), eng(prof("s", H), "sglang")])]))).toEqual(["s@a:0"]);
  });

  test("the reason says how many nodes lack the engine, and why", () => {
    const nodes = [
      node("a", cards(H, 2), { missing: NO_VLLM }),
      node("b", cards(H, 2), { missing: NO_VLLM }),
      node("c", cards(H, 2), { used: [0, 1] }),
      node("d", cards(A, 2), { missing: { vllm: "vllm --version exited with status 1" } }),
    ];
    expect(place(nodes, [req("m", [prof("p", H)])]).unplaceable.get("m")).toBe("no H100-80GB node has 1 free GPU (1 node has 0; 2 nodes have no vllm: vllm not found on PATH)");
    const none = [node("a", cards(H, 2), { missing: NO_VLLM }), node("b", cards(H, 2), { missing: { vllm: "vllm --version exited with status 1" } }), node("c", cards(H, 2), { state: "cordoned" })];
    expect(place(none, [req("m", [prof("p", H)])]).unplaceable.get("m")).toBe(
      "no ready H100-80GB node can run vllm (1 node has no vllm: vllm not found on PATH; 1 node has no vllm: vllm --version exited with status 1; not ready: 1 cordoned)",
    );
    expect(place(none, [req("m", [prof("p", H, 2, 2)])]).unplaceable.get("m")).toBe(
      "needs 2 whole H100-80GB nodes (2 GPUs each) in one fabric; no ready H100-80GB node can run vllm (1 node has no vllm: vllm not found on PATH; 1 node has no vllm: vllm --version exited with status 1; not ready: 1 cordoned)",
    );
  });

  test("nodes it passed over keep their GPUs for the next request", () => {
    const nodes = [node("a", cards(H, 1), { missing: NO_VLLM })];
    const r = place(nodes, [req("v", [prof("p", H)]), req("s", [eng(prof("p", H), "sglang")])]);
    expect(where(r)).toEqual(["p@a:0"]);
    expect(r.placed[0]!.model).toBe("s");
    expect(r.unplaceable.get("v")).toBe("no ready H100-80GB node can run vllm (1 node has no vllm: vllm not found on PATH)");
  });
});

describe("engine versions that cannot serve a profile", () => {
  const OLD = { vllm: "0.10.2" };
  const ib = (name: string, o: NodeOpts = {}) => node(name, cards(H, 8), { fabrics: ["ib-a"], ...o });

  test("a multi-node vLLM profile never goes to nodes whose vLLM predates multi-node serving; single-node ones still do", () => {
    const nodes = [ib("node-a", { versions: OLD }), ib("node-b", { versions: { vllm: "0.11.0" } }), ib("node-c", { versions: { vllm: "0.12.0" } }), ib("node-d")];
    // c is new enough and d never said (unknown is never a reason): the two of them.
    expect(where(place(nodes, [req("m", [prof("v", H, 8, 2)])]))).toEqual(["v@node-c:0,1,2,3,4,5,6,7+node-d:0,1,2,3,4,5,6,7"]);
    expect(where(place(nodes, [req("m", [prof("v", H, 8, 1)])]))).toEqual(["v@node-a:0,1,2,3,4,5,6,7"]);
    // Another engine is not judged by vLLM's version.
    expect(where(place([ib("node-a", { versions: OLD }), ib("node-b", { versions: OLD })], [req("m", [{ ...prof("s", H, 8, 2), engine: "sglang" }])]))).toHaveLength(1);
  });

  test("vLLM 0.10.2 on both nodes, one busy: the reason names the version, the nodes and what is needed, before any capacity", () => {
    const nodes = [ib("node-a", { versions: OLD }), ib("node-b", { versions: OLD, used: [0] })];
    expect(place(nodes, [req("m", [prof("v", H, 8, 2)])]).unplaceable.get("m")).toBe("vLLM 0.10.2 on node-a, node-b has no multi-node serving (needs 0.12 or newer)");
    // Versions differ: oldest first; nodes it rules out count for nothing in the capacity after it.
    const mixed = [ib("node-a", { versions: { vllm: "0.11.0" } }), ib("node-b", { versions: OLD }), ib("node-c", { versions: { vllm: "0.12.1" }, used: [0] }), ib("node-d", { state: "cordoned" })];
    expect(place(mixed, [req("m", [prof("v", H, 8, 2)])]).unplaceable.get("m")).toBe(
      "vLLM 0.10.2 on node-b and vLLM 0.11.0 on node-a have no multi-node serving (needs 0.12 or newer); needs 2 whole H100-80GB nodes (8 GPUs each) in one fabric; ib-a has 0; not ready: 1 cordoned",
    );
  });

  test("nodes passed over for their version keep their GPUs for the next request", () => {
    const nodes = [ib("node-a", { versions: OLD }), ib("node-b", { versions: OLD })];
    const r = place(nodes, [req("big", [prof("v", H, 8, 2)]), req("small", [prof("v", H, 8)], { count: 2 })]);
    expect(where(r, "small")).toEqual(["v@node-a:0,1,2,3,4,5,6,7", "v@node-b:0,1,2,3,4,5,6,7"]);
    expect(r.unplaceable.get("big")).toStartWith("vLLM 0.10.2 on node-a, node-b has no multi-node serving");
  });
});

describe("fleets larger than one 32-entry word", () => {
  // The per-class index keeps 32 nodes to a word; these cases cross word boundaries.
  const big = (n: number, o: (i: number) => NodeOpts = () => ({})) => Array.from({ length: n }, (_, i) => node(`n${String(i).padStart(3, "0")}`, cards(H, 4), o(i)));

  test("binpack finds the one partly used node wherever it sits", () => {
    for (const at of [0, 31, 32, 63, 64, 99]) {
      const nodes = big(100, (i) => (i === at ? { used: [0] } : {}));
      expect(where(place(nodes, [req("m", [prof("p", H)])]))).toEqual([`p@n${String(at).padStart(3, "0")}:1`]);
    }
  });

  test("spread visits every node once before any twice", () => {
    const nodes = big(70);
    const r = place(nodes, [req("m", [prof("p", H)], { count: 140, placement: "spread", inUse: ["n033"] })]);
    const order = r.placed.map((p) => p.shards[0]!.node);
    expect(new Set(order.slice(0, 70)).size).toBe(70);
    expect(order.slice(0, 69)).not.toContain("n033");
    expect(order[69]).toBe("n033");
    expect(new Set(order.slice(70)).size).toBe(70);
  });

  test("multi-node finds whole nodes past the first word", () => {
    const nodes = big(96, (i) => ({ fabrics: ["f"], used: i === 40 || i === 90 ? [] : [0] }));
    expect(where(place(nodes, [req("m", [prof("p", H, 4, 2)])]))).toEqual(["p@n040:0,1,2,3+n090:0,1,2,3"]);
  });

  test("capacity runs out exactly, and the reason counts every node", () => {
    const nodes = big(50);
    const r = place(nodes, [req("m", [prof("p", H, 3)], { count: 60 })]);
    expect(r.placed.length).toBe(50);
    expect(r.unplaceable.get("m")).toBe("placed 50 of 60; no H100-80GB node has 3 free GPUs (50 nodes have 1)");
  });
});

describe("the call as a whole", () => {
  test("requests consume capacity in the order given", () => {
    const nodes = [node("a", cards(H, 4))];
    const ab = place(nodes, [req("x", [prof("p", H, 3)]), req("y", [prof("p", H, 2)])]);
    expect(where(ab)).toEqual(["p@a:0,1,2"]);
    expect([...ab.unplaceable.keys()]).toEqual(["y"]);
    const ba = place(nodes, [req("y", [prof("p", H, 2)]), req("x", [prof("p", H, 3)])]);
    expect(where(ba)).toEqual(["p@a:0,1"]);
    expect([...ba.unplaceable.keys()]).toEqual(["x"]);
  });

  test("a multi-node replica cannot take a node an earlier request made partly used", () => {
    const nodes = [node("a", cards(H, 2), { fabrics: ["f"] }), node("b", cards(H, 2), { fabrics: ["f"] })];
    const r = place(nodes, [req("small", [prof("p", H)]), req("big", [prof("p", H, 2, 2)])]);
    expect(where(r)).toEqual(["p@a:0"]);
    expect(r.unplaceable.get("big")).toBe("needs 2 whole H100-80GB nodes (2 GPUs each) in one fabric; f has 1");
  });

  test("inputs are not mutated", () => {
    const nodes = [node("b", cards(H, 4), { fabrics: ["f"], used: [1], weights: ["m"] }), node("a", cards(H, 4), { fabrics: ["f"] }), node("c", cards(H, 4), { fabrics: ["f"] })];
    const requests = [req("m", [prof("p", H, 2), prof("q", H, 4, 2)], { count: 3, inUse: ["a"] }), req("n", [prof("p", H)], { placement: "spread" })];
    const before = structuredClone({ nodes, requests });
    const r = place(nodes, requests);
    expect(r.placed.length).toBeGreaterThan(0);
    expect({ nodes, requests }).toEqual(before);
  });

  test("nothing asked, nothing placed", () => {
    const r = place([node("a", cards(H, 1))], [req("m", [prof("p", H)], { count: 0 })]);
    expect(r).toEqual({ placed: [], unplaceable: new Map() });
  });
});

// ---- properties ------------------------------------------------------------------------------

// Repeats make H100 the common class, so multi-node replicas find partners.
const CLASSES = [H, H, H, A, MIG];
const weighted = <T>(often: T, rarely: T, odds = 4) => fc.oneof({ weight: odds, arbitrary: fc.constant(often) }, { weight: 1, arbitrary: fc.constant(rarely) });

const gpuArb = fc.record({ mixed: weighted(false, true, 6), class: fc.constantFrom(...CLASSES), healthy: weighted(true, false), used: weighted(false, true, 2) });
const fabricsArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant<string[]>(["f1"]) },
  { weight: 3, arbitrary: fc.constant<string[]>(["f2"]) },
  { weight: 1, arbitrary: fc.constant<string[]>(["f1", "f2"]) },
  { weight: 1, arbitrary: fc.constant<string[]>(["f3"]) },
  { weight: 1, arbitrary: fc.constant<string[]>([]) },
);
const STATES = ["cordoned", "draining", "unreachable"] as const;
/**
 * Small fleets shaped like real ones: most nodes carry the fleet's main class (a few carry
 * another or mix one in, as MIG does). Half the fleets are tidy — nearly every node ready and
 * untouched — so whole nodes and multi-node replicas come up often; the rest are messy. Names
 * are shuffled against input order.
 */
function fleetArb(maxNodes: number, maxGpus: number) {
  const nodeArb = fc.record({
    // rolls of 0-9, read against the fleet's tidiness below
    notReady: fc.integer({ min: 0, max: 9 }),
    touched: fc.integer({ min: 0, max: 9 }),
    fabrics: fabricsArb,
    odd: weighted(false, true, 3),
    class: fc.constantFrom(...CLASSES),
    gpus: fc.array(gpuArb, { minLength: 1, maxLength: maxGpus }),
    weights: fc.subarray(["m0", "m1", "m2"]),
    // a node whose agent found no vllm (the profiles' engine): never placed on
    noVllm: weighted(false, true, 5),
  });
  return fc
    .record({ main: fc.constantFrom(...CLASSES), tidy: fc.boolean(), list: fc.array(nodeArb, { minLength: 2, maxLength: maxNodes }) })
    .chain((f) => fc.shuffledSubarray(f.list.map((_, i) => i), { minLength: f.list.length, maxLength: f.list.length }).map((names) => ({ ...f, names })))
    .map(({ main, tidy, list, names }) => ({
      main,
      nodes: list.map((n, i): PlacementNode => {
        const pristine = n.touched >= (tidy ? 1 : 5);
        return {
          name: `n${names[i]}`,
          state: n.notReady < (tidy ? 1 : 3) ? STATES[n.notReady % 3]! : "ready",
          fabrics: n.fabrics,
          gpus: n.gpus.map((g, j) => ({
            index: j,
            uuid: `u${j}`,
            class: g.mixed ? g.class : n.odd ? n.class : main,
            healthy: pristine || g.healthy,
            used: !pristine && g.used,
          })),
          weights: new Set(n.weights),
          ...(n.noVllm ? { missingEngines: new Map([["vllm", "vllm not found on PATH"]]) } : {}),
        };
      }),
    }));
}
/** Profiles mostly for the fleet's main class, sometimes another, sometimes one nobody has. */
const profileArb = (i: number, main: string) =>
  fc
    .record({
      cls: fc.oneof({ weight: 3, arbitrary: fc.constant(main) }, { weight: 1, arbitrary: fc.constantFrom(...CLASSES, "L40S") }),
      gpus: fc.oneof({ weight: 2, arbitrary: fc.constant(1) }, { weight: 2, arbitrary: fc.constant(2) }, { weight: 1, arbitrary: fc.constant(3) }),
      nodes: fc.oneof({ weight: 1, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 2, max: 3 }) }),
    })
    .map((p) => prof(`p${i}`, p.cls, p.gpus, p.nodes));
const profilesArb = (main: string) => fc.integer({ min: 1, max: 2 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => profileArb(i, main))));
const placementArb = fc.constantFrom<"binpack" | "spread">("binpack", "spread");

/** Checks every placed replica against the fleet as it stood when that replica was placed. */
function checkValid(nodes: readonly PlacementNode[], requests: readonly PlacementRequest[], r: PlacementResult): void {
  const byName = new Map(nodes.map((n) => [n.name, n]));
  const taken = new Set<string>();
  for (const p of r.placed) {
    const rq = requests.find((q) => q.model === p.model)!;
    const pr = rq.profiles.find((x) => x.name === p.profile)!;
    expect(pr).toBeDefined();
    expect(p.shards.length).toBe(pr.nodes);
    expect(new Set(p.shards.map((s) => s.node)).size).toBe(p.shards.length);
    if (pr.nodes > 1) {
      const shared = p.shards.map((s) => byName.get(s.node)!.fabrics).reduce((acc, f) => acc.filter((x) => f.includes(x)));
      expect(shared.length).toBeGreaterThan(0);
      for (const s of p.shards) {
        const n = byName.get(s.node)!;
        // whole-free at the time: every GPU healthy, unused, and not taken earlier in this call
        expect(n.gpus.every((g) => g.healthy && !g.used && !taken.has(`${n.name}/${g.index}`))).toBe(true);
      }
    }
    for (const s of p.shards) {
      const n = byName.get(s.node)!;
      expect(n.state).toBe("ready");
      expect(n.missingEngines?.has(pr.engine) ?? false).toBe(false);
      expect(s.gpus.length).toBe(pr.gpus);
      expect([...s.gpus].sort((a, b) => a - b)).toEqual(s.gpus);
      for (const i of s.gpus) {
        const g = n.gpus.find((x) => x.index === i)!;
        expect(g).toBeDefined();
        expect(g.healthy && !g.used && g.class === pr.gpu_class).toBe(true);
        const key = `${n.name}/${i}`;
        expect(taken.has(key)).toBe(false);
        taken.add(key);
      }
    }
  }
  for (const rq of requests) {
    const n = r.placed.filter((p) => p.model === rq.model).length;
    expect(n).toBeLessThanOrEqual(rq.count);
    expect(r.unplaceable.has(rq.model)).toBe(n < rq.count);
  }
}

function combinations<T>(items: readonly T[], k: number): T[][] {
  if (k === 0) return [[]];
  const out: T[][] = [];
  items.forEach((x, i) => {
    for (const rest of combinations(items.slice(i + 1), k - 1)) out.push([x, ...rest]);
  });
  return out;
}

/** Whether any assignment at all of nodes and GPUs to one replica of `p` is valid: the oracle. */
function bruteForceFits(nodes: readonly PlacementNode[], p: Profile): boolean {
  for (const group of combinations(nodes, p.nodes)) {
    if (!group.every((n) => n.state === "ready" && !n.missingEngines?.has(p.engine))) continue;
    if (p.nodes > 1) {
      if (!group.every((n) => n.gpus.length > 0 && n.gpus.every((g) => g.healthy && !g.used))) continue;
      if (!group[0]!.fabrics.some((f) => group.every((n) => n.fabrics.includes(f)))) continue;
    }
    const eachNodeHasShard = group.every((n) => combinations(n.gpus, p.gpus).some((set) => set.every((g) => g.healthy && !g.used && g.class === p.gpu_class)));
    if (eachNodeHasShard) return true;
  }
  return false;
}

/**
 * The rules stated directly, for fleets too big to search: a ready node with k free GPUs of the
 * class, or a fabric with n ready nodes that are whole and have k GPUs of the class.
 */
function roomFor(nodes: readonly PlacementNode[], p: Profile): boolean {
  const fits = (n: PlacementNode) => n.state === "ready" && !n.missingEngines?.has(p.engine) && n.gpus.filter((g) => g.class === p.gpu_class && g.healthy && !g.used).length >= p.gpus;
  if (p.nodes === 1) return nodes.some(fits);
  const whole = nodes.filter((n) => fits(n) && n.gpus.every((g) => g.healthy && !g.used));
  const fabrics = new Set(whole.flatMap((n) => n.fabrics));
  return [...fabrics].some((f) => whole.filter((n) => n.fabrics.includes(f)).length >= p.nodes);
}

describe("properties", () => {
  test("every placed replica is valid and nothing is double-booked", () => {
    const requestsArb = (main: string) =>
      fc
        .array(fc.record({ profiles: profilesArb(main), count: fc.integer({ min: 1, max: 3 }), placement: placementArb, inUse: fc.subarray(["n0", "n1", "n2", "n3"]) }), { minLength: 1, maxLength: 3 })
        .map((list) => list.map((q, i) => req(`m${i}`, q.profiles, { count: q.count, placement: q.placement, inUse: q.inUse })));
    const caseArb = fleetArb(6, 6).chain(({ main, nodes }) => requestsArb(main).map((requests) => ({ nodes, requests })));
    fc.assert(
      fc.property(caseArb, ({ nodes, requests }) => {
        const r = place(nodes, requests);
        checkValid(nodes, requests, r);
        // deterministic: the same inputs, in any node order, give the same answer
        expect(place([...nodes].reverse(), requests)).toEqual(r);
      }),
      { numRuns: 1000 },
    );
  });

  test("on fleets of up to 80 nodes, placements stay valid and a lone replica is placed iff some node or fabric has room", () => {
    const caseArb = fleetArb(80, 4).chain(({ main, nodes }) =>
      fc.record({ profiles: profilesArb(main), placement: placementArb, inUse: fc.subarray(nodes.map((n) => n.name)) }).map((rest) => ({ nodes, ...rest })),
    );
    fc.assert(
      fc.property(caseArb, ({ nodes, profiles, placement, inUse }) => {
        const rq = req("m0", profiles, { placement, inUse });
        const r = place(nodes, [rq]);
        checkValid(nodes, [rq], r);
        const first = profiles.find((p) => roomFor(nodes, p));
        expect(r.placed.map((x) => x.profile)).toEqual(first ? [first.name] : []);
      }),
      { numRuns: 300 },
    );
  });

  test("completeness: whenever a brute-force search finds a placement, place finds one, with the first profile that fits", () => {
    const caseArb = fleetArb(4, 4).chain(({ main, nodes }) =>
      fc.record({ profiles: profilesArb(main), placement: placementArb, inUse: fc.subarray(["n0", "n1", "n2", "n3"]) }).map((rest) => ({ nodes, ...rest })),
    );
    fc.assert(
      fc.property(caseArb, ({ nodes, profiles, placement, inUse }) => {
        const rq = req("m0", profiles, { placement, inUse });
        const r = place(nodes, [rq]);
        checkValid(nodes, [rq], r);
        const first = profiles.find((p) => bruteForceFits(nodes, p));
        // Placed with the first profile that fits, or not at all and saying why.
        expect(r.placed.map((x) => x.profile)).toEqual(first ? [first.name] : []);
        expect([...r.unplaceable.keys()]).toEqual(first ? [] : ["m0"]);
        expect([...r.unplaceable.values()].every((why) => typeof why === "string" && why.length > 0)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("MIG compute instances share their GPU instance's memory", () => {
  // The agent's report of the constructed H200 sample (test/fixtures/nvidia-smi, built in the
  // format of real captures): GPU instance 3g.71gb split into 1c and 2c compute instances.
  // Index 1 (2c) stands for the GPU instance; index 0 (1c) names it as parent.
  const GI = "H200-141GB/3g.71gb";
  const CI = "H200-141GB/1c.3g.71gb";
  function h200(name: string, used: number[] = []): PlacementNode {
    const gpus = [
      { index: 0, uuid: "MIG-ci0", class: CI, parent: "MIG-ci1" },
      { index: 1, uuid: "MIG-ci1", class: GI, parent: "GPU-card" },
      { index: 2, uuid: "MIG-gi3", class: "H200-141GB/2g.35gb", parent: "GPU-card" },
    ];
    return { name, state: "ready", fabrics: [], weights: new Set(), gpus: gpus.map((g) => ({ ...g, healthy: true, used: used.includes(g.index) })) };
  }

  test("two replicas that each need the 71 GB instance never share it", () => {
    const r = place([h200("a")], [req("big", [prof("gi", GI)], { count: 2 }), req("other", [prof("ci", CI)])]);
    expect(where(r)).toEqual(["gi@a:1"]);
    expect(r.unplaceable.has("big")).toBe(true);
    // The compute instance beside it is inside the same memory: not offered while the GPU instance is held.
    expect(r.unplaceable.has("other")).toBe(true);
  });

  test("held in the store: the GPU instance blocks its compute instances, and the reverse", () => {
    expect(where(place([h200("a", [1])], [req("m", [prof("ci", CI)])]))).toEqual([]);
    expect(where(place([h200("a", [0])], [req("m", [prof("gi", GI)])]))).toEqual([]);
    // The other GPU instance on the card is its own memory.
    expect(where(place([h200("a", [0, 1])], [req("m", [prof("g2", "H200-141GB/2g.35gb")])]))).toEqual(["g2@a:2"]);
  });

  test("a compute instance taken first keeps the GPU instance from a profile that wants it whole", () => {
    const r = place([h200("a")], [req("small", [prof("ci", CI)]), req("big", [prof("gi", GI)])]);
    expect(where(r)).toEqual(["ci@a:0"]);
    expect(r.unplaceable.get("big")).toContain("no H200-141GB/3g.71gb node has 1 free GPU");
  });

  test("profiles that ask for the compute-instance class explicitly may share the GPU instance", () => {
    const gpus = [
      { index: 0, uuid: "MIG-a", class: GI, parent: "GPU-card" },
      { index: 1, uuid: "MIG-b", class: CI, parent: "MIG-a" },
      { index: 2, uuid: "MIG-c", class: CI, parent: "MIG-a" },
    ].map((g) => ({ ...g, healthy: true, used: false }));
    const n: PlacementNode = { name: "a", state: "ready", fabrics: [], weights: new Set(), gpus };
    const r = place([n], [req("x", [prof("ci", CI)]), req("y", [prof("ci", CI)])]);
    expect(where(r)).toEqual(["ci@a:1", "ci@a:2"]);
    // …and with one of them already held.
    expect(where(place([{ ...n, gpus: gpus.map((g) => ({ ...g, used: g.index === 1 })) }], [req("y", [prof("ci", CI)])]))).toEqual(["ci@a:2"]);
  });

  test("property: a GPU instance and a compute instance inside it are never held by two replicas", () => {
    const group = fc.record({ siblings: fc.integer({ min: 1, max: 3 }), used: fc.array(fc.boolean(), { minLength: 4, maxLength: 4 }) });
    fc.assert(
      fc.property(fc.array(group, { minLength: 1, maxLength: 3 }), fc.array(fc.boolean(), { minLength: 1, maxLength: 6 }), (groups, asks) => {
        const gpus: PlacementNode["gpus"] = [];
        const leadOf = new Map<number, number>();
        groups.forEach((g, k) => {
          const lead = gpus.length;
          gpus.push({ index: lead, uuid: `MIG-${k}`, class: GI, healthy: true, used: g.used[0]!, parent: "GPU-card" });
          for (let j = 1; j <= g.siblings; j++) {
            leadOf.set(gpus.length, lead);
            gpus.push({ index: gpus.length, uuid: `MIG-${k}-${j}`, class: CI, healthy: true, used: g.used[j]!, parent: `MIG-${k}` });
          }
        });
        // Held as the store has it: never a GPU instance together with a compute instance inside it.
        for (const [sib, lead] of leadOf) if (gpus[sib]!.used && gpus[lead]!.used) gpus[sib]!.used = false;
        const n: PlacementNode = { name: "a", state: "ready", fabrics: [], weights: new Set(), gpus };
        const r = place([n], asks.map((whole, i) => req(`m${i}`, [whole ? prof("gi", GI) : prof("ci", CI)])));
        const holder = new Map<number, string>();
        for (const g of gpus) if (g.used) holder.set(g.index, "held");
        for (const p of r.placed)
          for (const i of p.shards[0]!.gpus) {
            expect(holder.has(i)).toBe(false);
            holder.set(i, p.model);
          }
        for (const [sib, lead] of leadOf) expect(holder.has(sib) && holder.has(lead)).toBe(false);
      }),
    );
  });
});
