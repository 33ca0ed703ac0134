// The head node's transfer plan, rule by rule: each example breaks if its rule does. The Hub
// once per file per fabric, copies from holders of the fabric spread over them (a finished node
// serving the next), running transfers given again unchanged, held files never fetched, the disk
// checked, the bounds kept, grants that verify, the token only towards the Hub; and placement's
// preference with its cost.

import { describe, expect, test } from "bun:test";
import {
  type TransferInput,
  type TransferNode,
  type TransferPlan,
  grantExpiry,
  placementPreference,
  planTransfers,
  weightsFit,
} from "../../src/control/transfers";
import { FetchOrder, type TransferReport, type WeightsManifest, transferGrant } from "../../src/protocol/weights";

const GB = 1024 ** 3;
const REPO = "meta-llama/Llama-3.1-8B";
const REV = "a".repeat(40);
const HOUR = 3_600_000;
const NOW = 1_800_000_000_000;

function manifest(paths: string[], size = GB, repo = REPO, revision = REV): WeightsManifest {
  return { repo, revision, files: paths.map((path, i) => ({ path, size, sha256: i.toString(16).padStart(64, "0"), oid: i.toString(16).padStart(40, "0") })) };
}
const M = manifest(["model-00001.safetensors", "model-00002.safetensors", "model-00003.safetensors"]);
const [F1, F2, F3] = M.files.map((f) => f.path) as [string, string, string];

interface NodeOpts {
  fabrics?: string[];
  held?: string[];
  transfers?: Partial<TransferReport>[];
  peerUrl?: string | null;
  unusable?: string;
  free?: number;
  maxBytes?: number | null;
  kept?: number;
  inUse?: string[];
  heldOther?: { repo: string; revision: string; files: string[]; bytes: number; fetched: boolean }[];
}

function node(name: string, o: NodeOpts = {}, m: WeightsManifest = M): TransferNode {
  const held = o.held ?? [];
  return {
    name,
    fabrics: o.fabrics ?? ["f1"],
    ...(o.unusable !== undefined ? { unusable: o.unusable } : {}),
    peerUrl: o.peerUrl === null ? undefined : (o.peerUrl ?? `https://${name}.example:7070`),
    credentialSha256: Buffer.from(name.padEnd(32, ".")).toString("hex").slice(0, 64),
    held: [
      ...(held.length > 0 ? [{ repo: m.repo, revision: m.revision, files: held, bytes: held.length * GB, fetched: true, last_used: null }] : []),
      ...(o.heldOther ?? []).map((h) => ({ ...h, last_used: null })),
    ],
    transfers: (o.transfers ?? []).map((t) => ({ repo: m.repo, revision: m.revision, path: F1, size: GB, done: 0, rate: 0, from: "hub", error: null, ...t })),
    disk: o.free === undefined ? undefined : { free_bytes: o.free, kept_bytes: o.kept ?? 0, max_bytes: o.maxBytes ?? null },
    ...(o.inUse ? { inUse: new Set(o.inUse) } : {}),
  };
}

const hub = { endpoint: "https://hub.example", token: "hf_secret", needsToken: (repo: string) => repo.startsWith("gated/") };

function plan(nodes: TransferNode[], wants: string[], extra: Partial<TransferInput> = {}): TransferPlan {
  return planTransfers({ manifests: [M], nodes, wants: wants.map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW, ...extra });
}

/** node → "path<-source" for each order, source "hub" or the serving node. */
function summary(p: TransferPlan): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [n, orders] of p.orders) out[n] = orders.map((o) => `${o.file.path}<-${o.from.kind === "hub" ? "hub" : o.from.node}`);
  return out;
}

function hubOrdersOf(p: TransferPlan, path: string): string[] {
  const out: string[] = [];
  for (const [n, orders] of p.orders) for (const o of orders) if (o.file.path === path && o.from.kind === "hub") out.push(n);
  return out;
}

describe("the Hub once per file per fabric, then copies inside the fabric", () => {
  test("three nodes of one fabric: one Hub order per file, the others copy it from that node as it arrives, then from the holder", () => {
    const first = plan([node("a"), node("b"), node("c")], ["a", "b", "c"]);
    // One Hub download per file, spread over the fabric's nodes; no file asked of the Hub twice;
    // the others copy each file from the node getting it, at once (it serves what it has).
    expect(summary(first)).toEqual({
      a: [`${F1}<-hub`, `${F2}<-b`, `${F3}<-c`],
      b: [`${F1}<-a`, `${F2}<-hub`, `${F3}<-c`],
      c: [`${F1}<-a`, `${F2}<-b`, `${F3}<-hub`],
    });
    for (const f of [F1, F2, F3]) expect(hubOrdersOf(first, f)).toHaveLength(1);
    expect(first.fabrics).toEqual([{ fabric: "f1", hub_files: 3, hub_bytes: 3 * GB, peer_files: 6, peer_bytes: 6 * GB, waiting_files: 0 }]);
    // One serve each at most: the copies wait for the file to arrive, as before pipelining.
    const one = plan([node("a"), node("b"), node("c")], ["a", "b", "c"], { options: { maxServesPerNode: 1 } });
    for (const f of [F1, F2, F3]) expect(hubOrdersOf(one, f)).toHaveLength(1);
    expect(one.status.find((s) => s.node === "c")!.reason).toContain("to arrive in fabric f1");

    // a has F1 now (b and c still fetch theirs): b and c copy F1 from a, nothing new from the Hub.
    const second = plan(
      [node("a", { held: [F1] }), node("b", { transfers: [{ path: F2, from: "hub" }] }), node("c", { transfers: [{ path: F3, from: "hub" }] })],
      ["a", "b", "c"],
    );
    expect(summary(second)).toEqual({ a: [`${F2}<-b`, `${F3}<-c`], b: [`${F1}<-a`, `${F2}<-hub`, `${F3}<-c`], c: [`${F1}<-a`, `${F2}<-b`, `${F3}<-hub`] });
    for (const orders of second.orders.values()) for (const o of orders) FetchOrder.parse(o);
  });

  test("a node that just finished a file serves it too: copies spread over the holders", () => {
    const nodes = [node("a", { held: [F1] }), node("b", { held: [F1] }), node("c"), node("d"), node("e"), node("f")];
    const p = planTransfers({ manifests: [manifest([F1])], nodes, wants: ["a", "b", "c", "d", "e", "f"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW });
    expect(summary(p)).toEqual({ a: [], b: [], c: [`${F1}<-a`], d: [`${F1}<-b`], e: [`${F1}<-a`], f: [`${F1}<-b`] });
    // c finished: it is a holder as good as a and b, and the next copies go to whoever serves least.
    const later = planTransfers({
      manifests: [manifest([F1])],
      nodes: [node("a", { held: [F1] }), node("b", { held: [F1] }), node("c", { held: [F1] }), node("d"), node("e"), node("f")],
      wants: ["a", "b", "c", "d", "e", "f"].map((n) => ({ node: n, repo: REPO, revision: REV })),
      hub,
      now: NOW,
    });
    expect(summary(later)).toEqual({ a: [], b: [], c: [], d: [`${F1}<-a`], e: [`${F1}<-b`], f: [`${F1}<-c`] });
  });

  test("two fabrics: one Hub download per file in each, and no copy across fabrics", () => {
    const one = manifest([F1]);
    const nodes = [node("a", { fabrics: ["f1"] }), node("b", { fabrics: ["f1"] }), node("x", { fabrics: ["f2"] }), node("y", { fabrics: ["f2"] })];
    const p = planTransfers({ manifests: [one], nodes, wants: ["a", "b", "x", "y"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW });
    expect(summary(p)).toEqual({ a: [`${F1}<-hub`], b: [`${F1}<-a`], x: [`${F1}<-hub`], y: [`${F1}<-x`] });
    // a holds it: b copies from a; f2 is not served by f1's holder, and downloads once itself.
    const q = planTransfers({
      manifests: [one],
      nodes: [node("a", { fabrics: ["f1"], held: [F1] }), node("b", { fabrics: ["f1"] }), node("x", { fabrics: ["f2"] }), node("y", { fabrics: ["f2"] })],
      wants: ["b", "x", "y"].map((n) => ({ node: n, repo: REPO, revision: REV })),
      hub,
      now: NOW,
    });
    expect(summary(q)).toEqual({ a: [], b: [`${F1}<-a`], x: [`${F1}<-hub`], y: [`${F1}<-x`] });
    expect(q.fabrics).toEqual([
      { fabric: "f1", hub_files: 0, hub_bytes: 0, peer_files: 1, peer_bytes: GB, waiting_files: 0 },
      { fabric: "f2", hub_files: 1, hub_bytes: GB, peer_files: 1, peer_bytes: GB, waiting_files: 0 },
    ]);
  });

  test("a node in no fabric is a fabric of its own: it fetches from the Hub and serves nobody", () => {
    const one = manifest([F1]);
    const nodes = [node("a", { fabrics: [], held: [F1] }), node("b", { fabrics: [] }), node("c", { fabrics: [] })];
    const p = planTransfers({ manifests: [one], nodes, wants: ["b", "c"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW });
    expect(summary(p)).toEqual({ a: [], b: [`${F1}<-hub`], c: [`${F1}<-hub`] });
    expect(p.fabrics).toEqual([{ fabric: null, hub_files: 2, hub_bytes: 2 * GB, peer_files: 0, peer_bytes: 0, waiting_files: 0 }]);
  });

  test("a node in two fabrics bridges them: it copies from one, and the other copies from it rather than asking the Hub", () => {
    const one = manifest([F1]);
    const nodes = [node("a", { fabrics: ["f1"], held: [F1] }), node("bridge", { fabrics: ["f1", "f2"] }), node("z", { fabrics: ["f2"] })];
    const p = planTransfers({ manifests: [one], nodes, wants: ["bridge", "z"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW });
    expect(summary(p)).toEqual({ a: [], bridge: [`${F1}<-a`], z: [`${F1}<-bridge`] });
  });

  test("a Hub download already running in the fabric is not started again elsewhere", () => {
    const p = plan([node("a", { transfers: [{ path: F1, from: "hub", done: GB / 2, rate: 1e8 }] }), node("b")], ["a", "b"]);
    // b copies F1 from a as it arrives; the files not yet fetched go to whoever fetches least, then serves least.
    expect(summary(p)).toEqual({ a: [`${F1}<-hub`, `${F2}<-b`, `${F3}<-hub`], b: [`${F1}<-a`, `${F2}<-hub`, `${F3}<-a`] });
    for (const f of [F1, F2, F3]) expect(hubOrdersOf(p, f)).toHaveLength(1);
  });
});

describe("pipelined copies: from a node still receiving the file", () => {
  const one = manifest([F1]);
  const wantAll = (names: string[]) => names.map((n) => ({ node: n, repo: REPO, revision: REV }));
  const plan1 = (nodes: TransferNode[], wants: string[], options = {}) => planTransfers({ manifests: [one], nodes, wants: wantAll(wants), hub, now: NOW, options });

  test("a chain Hub -> a -> b -> c is given again link by link while it runs", () => {
    const nodes = [node("a", { transfers: [{ path: F1, from: "hub", done: 3 * (GB / 4) }] }), node("b", { transfers: [{ path: F1, from: "a", done: GB / 2 }] }), node("c", { transfers: [{ path: F1, from: "b", done: GB / 4 }] })];
    const p = plan1(nodes, ["a", "b", "c"]);
    expect(summary(p)).toEqual({ a: [`${F1}<-hub`], b: [`${F1}<-a`], c: [`${F1}<-b`] });
    expect(p.status.find((x) => x.node === "c")!.fetching).toMatchObject({ bytes_done: GB / 4, from: ["b"] });
  });

  test("a link whose source stopped getting the file is planned afresh; the fabric still asks the Hub once", () => {
    // a's Hub download failed: b (copying from a) and c (from b) lose their root.
    const nodes = [node("a", { transfers: [{ path: F1, from: "hub", error: "hub.example answered 502" }] }), node("b", { transfers: [{ path: F1, from: "a", done: 10 }] }), node("c", { transfers: [{ path: F1, from: "b", done: 5 }] })];
    const p = plan1(nodes, ["a", "b", "c"]);
    expect(hubOrdersOf(p, F1)).toHaveLength(1);
    const s = summary(p);
    for (const n of ["a", "b", "c"]) expect(s[n]).toHaveLength(1);
    // Each copies from the one fetching from the Hub (or from a node copying from it): no cycle, one root.
    const from = Object.fromEntries([...p.orders].map(([n, os]) => [n, os[0]!.from.kind === "hub" ? "hub" : (os[0]!.from as { node: string }).node]));
    for (const n of ["a", "b", "c"]) {
      const seen = new Set<string>();
      let at = n;
      while (at !== "hub") {
        expect(seen.has(at)).toBe(false);
        seen.add(at);
        at = from[at]!;
      }
    }
    // An unreachable link drops the ones behind it alike.
    const gone = plan1([node("a", { unusable: "unreachable", transfers: [{ path: F1, from: "hub" }] }), node("b", { transfers: [{ path: F1, from: "a" }] }), node("c", { transfers: [{ path: F1, from: "b" }] })], ["b", "c"]);
    expect(summary(gone)).toEqual({ a: [], b: [`${F1}<-hub`], c: [`${F1}<-b`] });
  });

  test("an agent that serves whole files only (protocol 1) is a source once it holds the file, not while it receives it", () => {
    const older = (o: NodeOpts) => ({ ...node("a", o), wholeOnly: true });
    const receiving = plan1([older({ transfers: [{ path: F1, from: "hub", done: GB / 2 }] }), node("b")], ["a", "b"]);
    expect(summary(receiving)).toEqual({ a: [`${F1}<-hub`], b: [] });
    expect(hubOrdersOf(receiving, F1)).toHaveLength(1);
    const holding = plan1([older({ held: [F1] }), node("b")], ["a", "b"]);
    expect(summary(holding)).toEqual({ a: [], b: [`${F1}<-a`] });
  });

  test("a cycle of copies (each from the other, nobody holding or fetching from the Hub) roots nowhere and is replaced", () => {
    const p = plan1([node("a", { transfers: [{ path: F1, from: "b" }] }), node("b", { transfers: [{ path: F1, from: "a" }] })], ["a", "b"]);
    expect(summary(p)).toEqual({ a: [`${F1}<-hub`], b: [`${F1}<-a`] });
  });

  test("a copy from a stalled peer is planned from another source; the fabric's Hub download is not repeated", () => {
    const stalled = `${F1}: no bytes from a for 30 s (stalled)`;
    const nodes = [node("a", { transfers: [{ path: F1, from: "hub", done: 100 }] }), node("b", { transfers: [{ path: F1, from: "a", error: stalled }] }), node("c", { transfers: [{ path: F1, from: "a", done: 50 }] })];
    const p = plan1(nodes, ["a", "b", "c"]);
    expect(summary(p)).toEqual({ a: [`${F1}<-hub`], b: [`${F1}<-c`], c: [`${F1}<-a`] });
    expect(hubOrdersOf(p, F1)).toEqual(["a"]);
    // The stalled peer stopped getting it (its own transfer stalled too): the fabric asks the Hub once again, and b copies behind it.
    const both = plan1([node("a", { transfers: [{ path: F1, from: "hub", error: `${F1}: no bytes from hub for 30 s (stalled)` }] }), node("b", { transfers: [{ path: F1, from: "a", error: stalled }] })], ["a", "b"]);
    expect(hubOrdersOf(both, F1)).toHaveLength(1);
    expect(Object.values(summary(both)).flat()).toHaveLength(2);
    // With no other source, the same one again (the agent waits a while before it retries it).
    const only = plan1([node("a", { transfers: [{ path: F1, from: "hub", done: 100 }] }), node("b", { transfers: [{ path: F1, from: "a", error: stalled }] })], ["a", "b"]);
    expect(summary(only)).toEqual({ a: [`${F1}<-hub`], b: [`${F1}<-a`] });
  });

  test("never two Hub downloads of a file in a fabric, however the transfers stand", () => {
    const names = ["a", "b", "c", "d"];
    const sources = ["hub", ...names];
    // Every combination of each node's transfer of F1 (none, or from one source, running or failed).
    const states: (Partial<TransferReport> | undefined)[] = [undefined, ...sources.flatMap((from) => [{ path: F1, from }, { path: F1, from, error: "connection reset" }])];
    let plans = 0;
    for (let i = 0; i < states.length ** 3; i++) {
      const pick = [i % states.length, Math.floor(i / states.length) % states.length, Math.floor(i / states.length ** 2) % states.length];
      const nodes = names.map((n, j) => {
        const t = j < 3 ? states[pick[j]!] : undefined;
        return node(n, t === undefined || t.from === n ? {} : { transfers: [t] });
      });
      const p = plan1(nodes, names);
      expect(hubOrdersOf(p, F1).length).toBeLessThanOrEqual(1);
      // And every node is fetching it or waiting for it: nothing wedged.
      for (const n of names) expect(p.status.find((x) => x.node === n)!.state).toMatch(/fetching|waiting/);
      plans++;
    }
    expect(plans).toBe(states.length ** 3);
  });

  test("a copy that failed its checksum from a peer is fetched from another holder, else from the Hub, never that peer again", () => {
    const bad = { path: F1, from: "a", error: `${F1}: checksum mismatch (expected 00…, got 11…); the copy was deleted` };
    const other = plan1([node("a", { held: [F1] }), node("b", { held: [F1] }), node("c", { transfers: [bad] })], ["c"]);
    expect(summary(other).c).toEqual([`${F1}<-b`]);
    const onlyA = plan1([node("a", { held: [F1] }), node("c", { transfers: [bad] })], ["c"]);
    expect(summary(onlyA).c).toEqual([`${F1}<-hub`]);
    // Nor a node still receiving it (its bytes may come from the same peer).
    const receiving = plan1([node("a", { held: [F1] }), node("b", { transfers: [{ path: F1, from: "a" }] }), node("c", { transfers: [bad] })], ["b", "c"]);
    expect(summary(receiving)).toEqual({ a: [], b: [`${F1}<-a`], c: [`${F1}<-hub`] });
  });
});

describe("what a node holds or is fetching", () => {
  test("a file a node holds verified is never ordered to it, whatever else happens", () => {
    const p = plan([node("a", { held: [F1, F3] }), node("b", { held: [F1, F2, F3] })], ["a", "b"]);
    expect(summary(p)).toEqual({ a: [`${F2}<-b`], b: [] });
    // Even with a running transfer of it reported (a stale report after it finished).
    const q = plan([node("a", { held: [F1, F2, F3], transfers: [{ path: F2, from: "b" }] }), node("b", { held: [F1, F2, F3] })], ["a", "b"]);
    expect(summary(q)).toEqual({ a: [], b: [] });
    expect(q.status.map((s) => [s.node, s.state])).toEqual([
      ["a", "present"],
      ["b", "present"],
    ]);
  });

  test("a running transfer's order is given again unchanged, even when a better source appears", () => {
    const nodes = () => [
      node("a", { held: [F1] }),
      node("b", { held: [F1] }),
      node("c", { transfers: [{ path: F1, from: "b", done: GB / 4, rate: 5e7 }] }),
      node("d", { transfers: [{ path: F1, from: "b", done: 10, rate: 5e7 }] }),
    ];
    const first = planTransfers({ manifests: [manifest([F1])], nodes: nodes(), wants: ["c", "d"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW });
    // Fresh, c and d would be split over a and b; running, both stay with b.
    expect(summary(first)).toEqual({ a: [], b: [], c: [`${F1}<-b`], d: [`${F1}<-b`] });
    const again = planTransfers({ manifests: [manifest([F1])], nodes: nodes(), wants: ["c", "d"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW + 10 * 60_000 });
    expect(again.orders).toEqual(first.orders);
    // At the grant window's turn only the grant and its expiry change: same file, same source.
    const turned = planTransfers({ manifests: [manifest([F1])], nodes: nodes(), wants: ["c", "d"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW + HOUR });
    expect(summary(turned)).toEqual(summary(first));
    expect(turned.orders.get("c")![0]!.from.url).toContain(`expires=${NOW + 3 * HOUR}`);
  });

  test("a running transfer whose source stopped serving, or that failed, is planned afresh from another holder", () => {
    const gone = plan([node("a", { held: [F1, F2, F3], unusable: "unreachable" }), node("b", { held: [F1, F2, F3] }), node("c", { held: [F2, F3], transfers: [{ path: F1, from: "a" }] })], ["c"]);
    expect(summary(gone).c).toEqual([`${F1}<-b`]);
    const failed = plan([node("a", { held: [F1, F2, F3] }), node("b", { held: [F1, F2, F3] }), node("c", { held: [F2, F3], transfers: [{ path: F1, from: "a", error: "checksum" }] })], ["c"]);
    expect(summary(failed).c).toEqual([`${F1}<-b`]);
    // With no other holder, the same source again.
    const only = plan([node("a", { held: [F1, F2, F3] }), node("c", { held: [F2, F3], transfers: [{ path: F1, from: "a", error: "connection reset" }] })], ["c"]);
    expect(summary(only).c).toEqual([`${F1}<-a`]);
  });

  test("a running transfer no longer wanted gets no order (the agent stops it)", () => {
    const p = plan([node("a", { transfers: [{ path: F1, from: "hub" }] })], []);
    expect(summary(p)).toEqual({ a: [] });
  });

  test("status: present, fetching with bytes, rate, sources and estimate, waiting with its reason", () => {
    const p = plan(
      [node("a", { held: [F1, F2, F3] }), node("b", { held: [F1], transfers: [{ path: F2, from: "a", done: GB / 2, rate: GB / 8 }] }), node("c", { held: [F1, F2] }), node("w")],
      ["b", "c", "w"],
      { options: { maxServesPerNode: 1 } },
    );
    const byNode = Object.fromEntries(p.status.map((s) => [s.node, s]));
    expect(byNode.a!.state).toBe("present");
    expect(byNode.b).toMatchObject({
      state: "fetching",
      files_total: 3,
      files_present: 1,
      bytes_total: 3 * GB,
      bytes_present: GB,
      // F2 running from a; F3 waits: a serves its one transfer, c does not hold it.
      fetching: { files: 1, bytes_done: GB / 2, bytes_total: GB, rate: GB / 8, from: ["a"] },
      estimate_seconds: 12,
    });
    expect(byNode.b!.reason).toBe(`waiting for a source of ${F3}: a, which holds it in fabric f1, serves the most transfers allowed (1)`);
    expect(byNode.c!.state).toBe("waiting");
    // w copies F1 from b and F2 from c (a serves its one), and waits for F3 like the others.
    expect(byNode.w!.state).toBe("fetching");
    expect(byNode.w!.fetching).toEqual({ files: 2, bytes_done: 0, bytes_total: 2 * GB, rate: 0, from: ["b", "c"] });
    expect(byNode.w!.estimate_seconds).toBeNull();
  });
});

describe("disk", () => {
  test("a node whose disk cannot take the rest of the revision gets no orders, and says why", () => {
    const p = plan([node("a", { held: [F1], free: 1.5 * GB }), node("b", { free: 10 * GB })], ["a", "b"]);
    expect(summary(p).a).toEqual([]);
    // a still serves the file it holds.
    expect(summary(p).b).toEqual([`${F1}<-a`, `${F2}<-hub`, `${F3}<-hub`]);
    const a = p.status.find((s) => s.node === "a")!;
    expect(a.state).toBe("blocked");
    expect(a.reason).toBe("disk: needs 2 GiB, 1.5 GiB free");
    expect(weightsFit(node("a", { held: [F1], free: 1.5 * GB }), M)).toEqual({ fits: false, needBytes: 2 * GB, reason: "disk: needs 2 GiB, 1.5 GiB free" });
    expect(weightsFit(node("a", { held: [F1], free: 2 * GB }), M)).toEqual({ fits: true, needBytes: 2 * GB });
    expect(weightsFit(node("a"), M)).toEqual({ fits: true, needBytes: 3 * GB });
  });

  test("what running transfers still need is not free; weights no replica uses are (when known)", () => {
    // 2.5 GB free, but the running F1 still needs 1 GB: F2 and F3 do not fit.
    const running = node("a", { free: 2.5 * GB, transfers: [{ path: F1, from: "hub", done: 0 }] });
    expect(weightsFit(running, M)).toMatchObject({ fits: false, reason: "disk: needs 2 GiB, 1.5 GiB free" });
    const old = { repo: "old/model", revision: "b".repeat(40), files: ["w.safetensors"], bytes: 4 * GB, fetched: true };
    const full = node("a", { free: GB, heldOther: [old], inUse: [] });
    expect(weightsFit(full, M)).toEqual({ fits: true, needBytes: 3 * GB });
    const used = node("a", { free: GB, heldOther: [old], inUse: [`old/model@${"b".repeat(40)}`] });
    expect(weightsFit(used, M)).toMatchObject({ fits: false, reason: "disk: needs 3 GiB, 1 GiB free" });
    const bounded = node("a", { free: 100 * GB, maxBytes: 2 * GB });
    expect(weightsFit(bounded, M)).toMatchObject({ fits: false, reason: "disk: needs 3 GiB, --models-max-bytes leaves room for 2 GiB" });
  });

  test("two revisions on one node share its room: the second that does not fit is held back", () => {
    const M2 = manifest(["x.safetensors"], 2 * GB, "org/second");
    const p = planTransfers({
      manifests: [M, M2],
      nodes: [node("a", { free: 4 * GB })],
      wants: [
        { node: "a", repo: REPO, revision: REV },
        { node: "a", repo: "org/second", revision: REV },
      ],
      hub,
      now: NOW,
    });
    expect(summary(p).a).toEqual([`${F1}<-hub`, `${F2}<-hub`, `${F3}<-hub`]);
    expect(p.status.find((s) => s.repo === "org/second")!.reason).toBe("disk: needs 2 GiB, 1 GiB free");
  });
});

describe("bounds", () => {
  test("a node runs at most maxTransfersPerNode at once, its running ones included", () => {
    const many = manifest(["1", "2", "3", "4", "5", "6"].map((i) => `model-${i}.safetensors`));
    const fresh = planTransfers({ manifests: [many], nodes: [node("a")], wants: [{ node: "a", repo: REPO, revision: REV }], hub, now: NOW });
    expect(fresh.orders.get("a")).toHaveLength(4);
    const busy = planTransfers({
      manifests: [many],
      nodes: [node("a", { transfers: [{ path: "model-4.safetensors" }, { path: "model-5.safetensors" }, { path: "model-6.safetensors" }] })],
      wants: [{ node: "a", repo: REPO, revision: REV }],
      hub,
      now: NOW,
      options: { maxTransfersPerNode: 4 },
    });
    expect(summary(busy).a).toEqual(["model-1.safetensors<-hub", "model-4.safetensors<-hub", "model-5.safetensors<-hub", "model-6.safetensors<-hub"]);
    // Copies from peers count alike, however many holders could serve.
    const paths = many.files.map((f) => f.path);
    const holders = ["h1", "h2", "h3"].map((n) => node(n, { held: paths }, many));
    const copying = planTransfers({ manifests: [many], nodes: [...holders, node("a", {}, many)], wants: [{ node: "a", repo: REPO, revision: REV }], hub, now: NOW });
    expect(summary(copying).a).toEqual(["model-1.safetensors<-h1", "model-2.safetensors<-h2", "model-3.safetensors<-h3", "model-4.safetensors<-h1"]);
    expect(copying.status.find((s) => s.node === "a")!.reason).toBe("at most 4 transfers at a time on a");
  });

  test("a node serves at most maxServesPerNode at once; the others copy from those receiving it, or wait, rather than ask the Hub", () => {
    const one = manifest([F1]);
    const names = ["b", "c", "d", "e", "f", "g"];
    const p = planTransfers({ manifests: [one], nodes: [node("a", { held: [F1] }), ...names.map((n) => node(n))], wants: names.map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW, options: { maxServesPerNode: 4 } });
    expect(summary(p)).toEqual({ a: [], b: [`${F1}<-a`], c: [`${F1}<-a`], d: [`${F1}<-a`], e: [`${F1}<-a`], f: [`${F1}<-b`], g: [`${F1}<-c`] });
    expect(hubOrdersOf(p, F1)).toEqual([]);
    // One serve each: a chain, each node copying from the one before it.
    const chain = planTransfers({ manifests: [one], nodes: [node("a", { held: [F1] }), ...names.map((n) => node(n))], wants: names.map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW, options: { maxServesPerNode: 1 } });
    expect(summary(chain)).toEqual({ a: [], b: [`${F1}<-a`], c: [`${F1}<-b`], d: [`${F1}<-c`], e: [`${F1}<-d`], f: [`${F1}<-e`], g: [`${F1}<-f`] });
    // A node without a listener serves nobody: the one after it waits.
    const deaf = planTransfers({ manifests: [one], nodes: [node("a", { held: [F1] }), node("b", { peerUrl: null }), node("c")], wants: ["b", "c"].map((n) => ({ node: n, repo: REPO, revision: REV })), hub, now: NOW, options: { maxServesPerNode: 1 } });
    expect(summary(deaf)).toEqual({ a: [], b: [`${F1}<-a`], c: [] });
    expect(hubOrdersOf(deaf, F1)).toEqual([]);
    expect(deaf.status.find((x) => x.node === "c")).toMatchObject({ state: "waiting" });
  });

  test("options that are not whole numbers of at least 1 are refused", () => {
    expect(() => plan([node("a")], ["a"], { options: { maxServesPerNode: 0 } })).toThrow("maxServesPerNode");
  });
});

describe("sources", () => {
  test("a node without a listener, or one taking no transfers, is never a source", () => {
    const one = manifest([F1]);
    const wants = [{ node: "b", repo: REPO, revision: REV }];
    const noUrl = planTransfers({ manifests: [one], nodes: [node("a", { held: [F1], peerUrl: null }), node("b")], wants, hub, now: NOW });
    expect(summary(noUrl)).toEqual({ a: [], b: [`${F1}<-hub`] });
    const draining = planTransfers({ manifests: [one], nodes: [node("a", { held: [F1], unusable: "draining" }), node("b")], wants, hub, now: NOW });
    expect(summary(draining)).toEqual({ a: [], b: [`${F1}<-hub`] });
  });

  test("a node taking no transfers gets no orders, and its status says why", () => {
    const p = plan([node("a", { unusable: "unreachable" })], ["a"]);
    expect(summary(p)).toEqual({ a: [] });
    expect(p.status[0]).toMatchObject({ state: "blocked", reason: "node a takes no transfers now: unreachable" });
  });

  test("a peer whose listener serves HTTPS: its orders carry its certificate, the one the copying node trusts; a plain one's carry none", () => {
    const PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    const p = plan([{ ...node("a", { held: [F1, F2, F3], peerUrl: "https://10.0.0.1:7070" }), peerCert: PEM }, node("b")], ["b"]);
    const orders = p.orders.get("b")!;
    expect(orders).toHaveLength(3);
    for (const o of orders) expect(o.from).toMatchObject({ kind: "peer", node: "a", cert: PEM });
    const plain = plan([node("a", { held: [F1, F2, F3], peerUrl: "http://10.0.0.1:7070" }), node("b")], ["b"]);
    for (const o of plain.orders.get("b")!) expect("cert" in o.from).toBe(false);
  });

  test("a peer order's grant verifies with transferGrant for the serving node, the file and the URL's expiry", () => {
    const p = plan([node("a", { held: [F1, F2, F3], peerUrl: "https://10.0.0.1:7070/" }), node("b")], ["b"]);
    const expires = grantExpiry(NOW, HOUR);
    expect(expires - NOW).toBeGreaterThanOrEqual(HOUR);
    expect(expires - NOW).toBeLessThanOrEqual(2 * HOUR);
    const orders = p.orders.get("b")!;
    expect(orders).toHaveLength(3);
    for (const o of orders) {
      if (o.from.kind !== "peer") throw new Error("expected a peer order");
      expect(o.from.url).toBe(`https://10.0.0.1:7070/weights/v1/${REPO}/${REV}/${o.file.path}?expires=${expires}`);
      expect(o.from.grant).toBe(transferGrant(node("a").credentialSha256, REPO, REV, o.file.path, expires));
      // Another node's credential, or another file, does not give that grant.
      expect(o.from.grant).not.toBe(transferGrant(node("b").credentialSha256, REPO, REV, o.file.path, expires));
      FetchOrder.parse(o);
    }
  });

  test("a path is encoded segment by segment in both URLs", () => {
    const odd = manifest(["sub dir/model #1.safetensors"]);
    const wants = ["a", "b"].map((n) => ({ node: n, repo: REPO, revision: REV }));
    const p = planTransfers({ manifests: [odd], nodes: [node("a"), node("b", { fabrics: ["f2"] })], wants, hub, now: NOW });
    expect(p.orders.get("a")![0]!.from.url).toBe(`https://hub.example/${REPO}/resolve/${REV}/sub%20dir/model%20%231.safetensors`);
  });

  test("a gated repository's token goes on Hub orders only, never on peer orders; other repositories get none", () => {
    const gated = manifest([F1, F2], GB, "gated/model");
    const nodes = [node("a", { held: [F1] }, gated), node("b", {}, gated)];
    const p = planTransfers({ manifests: [gated], nodes, wants: [{ node: "b", repo: "gated/model", revision: REV }], hub, now: NOW });
    const [peer, fromHub] = p.orders.get("b")!;
    expect(peer!.from).not.toHaveProperty("token");
    expect(JSON.stringify(peer)).not.toContain("hf_secret");
    expect(fromHub!.from).toEqual({ kind: "hub", url: `https://hub.example/gated/model/resolve/${REV}/${F2}`, token: "hf_secret" });
    const open = plan([node("a")], ["a"]);
    for (const o of open.orders.get("a")!) expect(o.from).not.toHaveProperty("token");
  });
});

describe("determinism", () => {
  test("the same reports in another order give the same plan", () => {
    const nodes = [node("a", { held: [F1] }), node("b", { transfers: [{ path: F2, from: "hub" }] }), node("c"), node("d", { fabrics: ["f2"] })];
    const wants = ["a", "b", "c", "d"];
    const p = plan(nodes, wants);
    const q = plan([...nodes].reverse(), [...wants].reverse());
    expect(q).toEqual(p);
  });
});

describe("placement's preference", () => {
  test("holds it (2), its fabric holds or is getting it (1), else the Hub (0), with what it costs", () => {
    const nodes = [
      node("h100-1", { held: [F1, F2, F3] }),
      node("h100-2"),
      node("h100-3", { held: [F1, F2] }),
      node("x1", { fabrics: ["f2"] }),
      node("y1", { fabrics: ["f3"], transfers: [{ path: F1, from: "hub" }], held: [F2, F3] }),
      node("y2", { fabrics: ["f3"] }),
      node("z1", { fabrics: ["f4"], held: [F1, F2, F3], peerUrl: null }),
      node("z2", { fabrics: ["f4"] }),
    ];
    const p = placementPreference(nodes, M);
    expect(p.get("h100-1")).toMatchObject({ rank: 2, cost: "present" });
    expect(p.get("h100-2")).toMatchObject({ rank: 1, cost: "copy 3 GiB from h100-1 (or 1 more) in fabric f1" });
    expect(p.get("h100-3")).toMatchObject({ rank: 1, cost: "copy 1 GiB from h100-1 in fabric f1" });
    expect(p.get("x1")).toMatchObject({ rank: 0, cost: "fetch 3 GiB from the Hub", hubBytes: 3 * GB });
    expect(p.get("y2")).toMatchObject({ rank: 1, cost: "copy 2 GiB from y1 in fabric f3; copy 1 GiB from y1 in fabric f3 as it arrives there" });
    // A holder without a listener serves nobody.
    expect(p.get("z2")).toMatchObject({ rank: 0, cost: "fetch 3 GiB from the Hub" });
  });
});

describe("weights placed at a file:// source (never from the Hub)", () => {
  const local = { ...hub, isLocal: (repo: string) => repo === REPO };

  test("a node of another fabric copies from any node holding them; a node of the holder's fabric from that peer", () => {
    const p = plan([node("a", { held: [F1, F2, F3] }), node("b"), node("c", { fabrics: ["f2"] })], ["b", "c"], { hub: local });
    // Within the bounds on transfers and serves: the first files to each, every one from a.
    const s = summary(p);
    expect(s.a).toEqual([]);
    expect(s.b!.length).toBeGreaterThan(0);
    expect(s.c!.length).toBeGreaterThan(0);
    for (const o of [...s.b!, ...s.c!]) expect(o).toEndWith("<-a");
    for (const f of [F1, F2, F3]) expect(hubOrdersOf(p, f)).toEqual([]);
    expect(placementPreference([node("a", { held: [F1, F2, F3] }), node("c", { fabrics: ["f2"] })], M, true).get("c")).toMatchObject({ rank: 0, cost: "copy 3 GiB from a, of another fabric" });
  });

  test("no node holding them: nothing is ordered, from the Hub least of all, and the status says so", () => {
    const p = plan([node("b"), node("c", { fabrics: ["f2"] })], ["b", "c"], { hub: local });
    expect(summary(p)).toEqual({ b: [], c: [] });
    expect(p.status.find((s) => s.node === "b")?.reason).toContain(`no node that serves its peers holds ${F1}`);
  });
});
