// Step 7: ports. An engine port free on every address a replica spans, found from a start
// derived from its id; a rendezvous block too for a multi-node one; a reason when there is none.

import { describe, expect, test } from "bun:test";
import { fnv1a } from "../../../src/lib/hash";
import { PortBook, assignPorts, blockOf, freePort, placedNode, placedReplaces, portsInUse, rendezvousPort } from "../../../src/control/reconcile/ports";
import { H, T0, builder, ctxOf } from "./fixture";
import { reconcile } from "../../../src/control/reconciler";
import { model, snapshot } from "../../helpers/fleet";
import { RECONCILE_DEFAULTS } from "../../helpers/control-settings";

const cfg = { basePort: 8100, portCount: 900 };

/** FNV-1a as the allocator computed it before it used lib/hash: ports must not move. */
function fnvAsBefore(id: string): number {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619) >>> 0;
  return h;
}

describe("the range", () => {
  test("every port handed out, engine or rendezvous, is inside base … base+2N-1, for many ids and range sizes", () => {
    for (const c of [cfg, { basePort: 20000, portCount: 16 }, { basePort: 30000, portCount: 37 }, { basePort: 40000, portCount: 1 }]) {
      const taken = new Set<number>();
      for (let i = 0; i < c.portCount + 5; i++) {
        const p = freePort([taken], undefined, c, `r-${i}`);
        if (i >= c.portCount) {
          expect(p).toBeUndefined();
          continue;
        }
        expect(p).toBeGreaterThanOrEqual(c.basePort);
        expect(p).toBeLessThan(c.basePort + c.portCount);
        taken.add(p!);
        if (c.portCount >= 16) {
          const r = rendezvousPort(p!, c);
          expect(r).toBeGreaterThanOrEqual(c.basePort + c.portCount);
          expect(r + 15).toBeLessThan(c.basePort + 2 * c.portCount);
        }
      }
      expect(taken.size).toBe(c.portCount);
    }
  });
});

describe("freePort", () => {
  test("the search starts at the id's FNV-1a, the same value as before", () => {
    for (const id of ["r-1", "r-aaaa0000", "0190f3c2-7b1e-7c3a-9d2e-1f2a3b4c5d6e", "é€😀"]) {
      expect(fnv1a(id)).toBe(fnvAsBefore(id));
      expect(freePort([], undefined, cfg, id)).toBe(8100 + (fnvAsBefore(id) % 900));
    }
  });

  test("skips ports taken on any of the addresses, wrapping round the range", () => {
    const start = 8100 + (fnv1a("r") % 900);
    expect(freePort([new Set([start]), new Set([start + 1])], undefined, cfg, "r")).toBe(start + 2);
    const all = new Set(Array.from({ length: 900 }, (_, i) => 8100 + i));
    expect(freePort([all], undefined, cfg, "r")).toBeUndefined();
  });

  test("a multi-node replica also needs its port's rendezvous block free", () => {
    const start = 8100 + (fnv1a("r") % 900);
    const p = freePort([], [new Set([blockOf(start, cfg)])], cfg, "r")!;
    expect(p).toBe(start + 1);
    expect(rendezvousPort(p, cfg)).toBeGreaterThanOrEqual(9000);
    // No blocks at all (a range too small for one): never a port.
    expect(freePort([], [], { basePort: 8100, portCount: 8 }, "r")).toBeUndefined();
  });
});

describe("portsInUse", () => {
  test("ports of replicas that have not failed, by address; blocks of multi-node ones", () => {
    const ctx = ctxOf({
      nodes: [
        { name: "a", gpus: [H, H] },
        { name: "b", gpus: [H, H] },
      ],
      replicas: [
        { id: "single", model: "m", shards: [{ node: "a", gpus: [0] }] },
        { id: "multi", model: "m", shards: [{ node: "a", gpus: [1] }, { node: "b", gpus: [1] }] },
        { id: "failed", model: "m", state: "failed", shards: [{ node: "b", gpus: [0] }] },
      ],
    });
    ctx.snapshot.replicas.forEach((r, i) => (r.port = 8200 + i));
    // Both fixture nodes are at 10.0.0.1.
    const book = portsInUse(ctx);
    expect(book.portsOn(["10.0.0.1"])).toEqual([new Set([8200, 8201])]);
    expect(book.blocksOn(["10.0.0.1"])).toEqual([new Set([blockOf(8201, ctx.cfg)])]);
  });
});

describe("SGLang with DP attention on one node", () => {
  const dp = model({ name: "dp", profiles: [{ name: "p", engine: "sglang", gpu_class: H, gpus: 1, args: ["--enable-dp-attention", "--dp-size", "2"] }] });
  const plain = model({ name: "plain", profiles: [{ name: "p", engine: "sglang", gpu_class: H, gpus: 1 }] });

  test("holds its rendezvous block, as a multi-node replica does; a plain single-node one does not", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H, H] }], models: [dp, plain], replicas: [{ id: "d", model: "dp", shards: [{ node: "a", gpus: [0] }] }, { id: "s", model: "plain", shards: [{ node: "a", gpus: [1] }] }] });
    ctx.snapshot.replicas.forEach((r, i) => ((r.port = 8200 + i), (r.profile = "p")));
    const book = portsInUse(ctx);
    expect(book.blocksOn(["10.0.0.1"])).toEqual([new Set([blockOf(8200, ctx.cfg)])]);
  });

  test("is given only a port whose block is free, and takes the block; with none free it is not placed, saying why", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }], models: [dp] });
    const book = new PortBook(ctx.cfg);
    const start = 8100 + (fnv1a("r-dp") % 900);
    book.take("10.0.0.1", start + 1, true); // a neighbour's block, not this port's
    const b = builder();
    assignPorts(ctx, b, [{ model: "dp", profile: "p", shards: [{ node: "a", gpus: [0] }] }], new Map(), book, () => "r-dp");
    const port = b.plan.create[0]!.port;
    expect(port).toBe(start);
    expect(book.blocksOn(["10.0.0.1"])[0]!.has(blockOf(port, ctx.cfg))).toBe(true);

    const small = ctxOf({ nodes: [{ name: "a", gpus: [H] }], models: [dp] }, { config: { portCount: 16 } });
    const full = new PortBook(small.cfg);
    full.take("10.0.0.1", 8100, true);
    const unplaceable = new Map<string, string>();
    assignPorts(small, builder(), [{ model: "dp", profile: "p", shards: [{ node: "a", gpus: [0] }] }], unplaceable, full, () => "r");
    expect(unplaceable.get("dp")).toBe("no free rendezvous port block on 10.0.0.1 (all 1 blocks of 16 ports in 8116…8131 are held by multi-node and SGLang DP-attention replicas; a larger --engine-port-range makes more)");
  });

  test("through the whole step: two such replicas on one address never share a block", () => {
    const snap = snapshot({ nodes: [{ name: "a", gpus: [H, H] }], models: [model({ ...dp, name: "dp", replicas: { min: 2 } })] });
    // Two ids whose searches start at different ports of one block (32 ports: 2 blocks, by parity).
    const from = (id: string) => fnv1a(id) % 32;
    const second = Array.from({ length: 100 }, (_, i) => `r-${i}`).find((id) => from(id) !== from("r-x") && (from(id) - from("r-x")) % 2 === 0)!;
    const ids = ["r-x", second];
    const plan = reconcile({ snapshot: snap, now: T0, lastUsed: new Map(), config: { ...RECONCILE_DEFAULTS, portCount: 32 }, newId: () => ids.shift()! });
    const ports = plan.create.map((c) => c.port);
    expect(ports.length).toBe(2);
    expect(new Set(ports.map((p) => blockOf(p, { basePort: 8100, portCount: 32 }))).size).toBe(2);
  });
});

describe("assignPorts", () => {
  const placed = (nodes: string[]) => ({ model: "m", profile: "p", shards: nodes.map((node) => ({ node, gpus: [0] })) });

  test("creates the replica with its endpoint on the leader's address (IPv6 in brackets) and an event", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }] });
    ctx.snapshot.nodes[0]!.address = "fd00::7";
    const b = builder();
    assignPorts(ctx, b, [placed(["a"])], new Map(), new PortBook(ctx.cfg), () => "r-new");
    const port = 8100 + (fnv1a("r-new") % 900);
    expect(b.plan.create).toEqual([{ id: "r-new", model: "m", profile: "p", shards: [{ node: "a", gpus: [0] }], port, endpoint: `http://[fd00::7]:${port}` }]);
    expect(b.plan.events).toEqual([{ kind: "replica.placed", subject: "replica/r-new", message: "placed replica r-new of m on a:0 (profile p)", data: { node: "a" } }]);
  });

  test("two replicas on one address in one step get different ports", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }, { name: "b", gpus: [H] }] });
    const b = builder();
    // Two ids that start at the same port.
    const ids = ["x", "x"];
    assignPorts(ctx, b, [placed(["a"]), placed(["b"])], new Map(), new PortBook(ctx.cfg), () => ids.shift()!);
    const [p1, p2] = b.plan.create.map((c) => c.port);
    expect(p2).toBe(p1! + 1);
  });

  test("no free engine port: not created, and the model says why", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }] }, { config: { portCount: 2 } });
    const book = new PortBook(ctx.cfg);
    book.take("10.0.0.1", 8100, false);
    book.take("10.0.0.1", 8101, false);
    const unplaceable = new Map<string, string>();
    const b = builder();
    assignPorts(ctx, b, [placed(["a"])], unplaceable, book, () => "r");
    expect(b.plan.create).toEqual([]);
    expect(unplaceable.get("m")).toBe("no free engine port on 10.0.0.1: all 2 of 8100…8101 are in use (--engine-base-port and --engine-port-range; a larger range allows more replicas per address)");
  });

  test("no free rendezvous block for a multi-node replica: the reason names the blocks", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H] }, { name: "b", gpus: [H] }] }, { config: { portCount: 16 } });
    const book = new PortBook(ctx.cfg);
    book.take("10.0.0.1", 8100, true);
    const unplaceable = new Map<string, string>();
    assignPorts(ctx, builder(), [placed(["a", "b"])], unplaceable, book, () => "r");
    expect(unplaceable.get("m")).toBe("no free rendezvous port block on 10.0.0.1 (all 1 blocks of 16 ports in 8116…8131 are held by multi-node and SGLang DP-attention replicas; a larger --engine-port-range makes more)");
  });
});

describe("the placed event, for `llmgw logs --previous`", () => {
  const placed = (nodes: string[]) => ({ model: "m", profile: "p", shards: nodes.map((node) => ({ node, gpus: [0] })) });
  test("names the node, and the failed replica of the model the new one replaces", () => {
    const ctx = ctxOf({ nodes: [{ name: "a", gpus: [H, H] }], replicas: [{ id: "r-old", model: "m", state: "failed", shards: [{ node: "a", gpus: [1] }] }, { id: "r-other", model: "z", state: "failed", shards: [{ node: "a", gpus: [1] }] }] });
    const b = builder();
    assignPorts(ctx, b, [placed(["a"])], new Map(), new PortBook(ctx.cfg), () => "r-new");
    const e = b.plan.events[0]!;
    expect(e.data).toEqual({ node: "a", replaces: "r-old" });
    expect(placedNode(e)).toBe("a");
    expect(placedReplaces(e)).toBe("r-old");
  });

  test("an event from before data was kept: the node from its message; no data, nothing replaced", () => {
    const old = { message: "placed replica r-1 of m on gpu-03:0,1 gpu-04:0,1 (profile p)", data: null };
    expect(placedNode(old)).toBe("gpu-03");
    expect(placedReplaces(old)).toBeUndefined();
    expect(placedNode({ message: "something else", data: { node: 5 } })).toBeUndefined();
  });
});

describe("a node whose engine ports are all in use", () => {
  test("takes no new replica: it goes to a node with a port; with none left anywhere, the reason says the range is full", () => {
    const snap = snapshot({
      nodes: [{ name: "a", gpus: [H, H] }, { name: "b", gpus: [H, H] }],
      models: [model({ name: "m", replicas: { min: 2 } })],
      replicas: [{ id: "r-a", model: "m", shards: [{ node: "a", gpus: [0] }] }],
    });
    snap.nodes[1]!.address = "10.0.0.2";
    const config = { ...RECONCILE_DEFAULTS, basePort: 8100, portCount: 1 };
    const plan = reconcile({ snapshot: snap, now: T0, lastUsed: new Map(), config, newId: () => "r-new" });
    expect(plan.create.map((c) => [c.shards[0]!.node, c.port])).toEqual([["b", 8100]]);

    // Both addresses full: nothing placed, and the reason names the range.
    snap.replicas.push({ ...snap.replicas[0]!, id: "r-b", shards: [{ node: "b", gpus: [0] }] });
    const none = reconcile({ snapshot: { ...snap, models: [model({ name: "m", replicas: { min: 3 } })].map((spec) => ({ name: spec.name, spec, revision: 1, createdAt: T0, updatedAt: T0 })) }, now: T0, lastUsed: new Map(), config, newId: () => "r-x" });
    expect(none.create).toEqual([]);
    const reason = none.events.filter((e) => e.kind === "model.unplaceable").map((e) => e.message).join(" ");
    expect(reason).toContain("takes no new replica: no free engine port on 10.0.0.1: all 1 of 8100…8100 are in use");
  });
});
