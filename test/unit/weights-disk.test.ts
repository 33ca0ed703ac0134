// The weights on a node's disk: the scan counts only links to whole blobs of the same entry and
// knows what llmgw fetched from the entry's marker; the eviction plan removes the least
// recently used fetched revisions no replica uses, counts a blob shared with another revision
// as freeing nothing, never touches an operator's weights, and removes nothing when that would
// not make room (saying what is short); removal takes the snapshot, its refs and the blobs no
// other snapshot links to, and leaves a transfer's partial blob.

import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FETCHED_MARKER, type HeldRevision, WeightsDisk, evictionPlan, freeBytes, heldForHeartbeat, keptBytes, revisionKey, scanHeld } from "../../src/agent/weights-disk";
import { cacheEntry, linkSnapshot } from "../../src/hub/download";
import { ManualScheduler } from "../../src/lib/scheduler";
import { WeightsHeld } from "../../src/protocol/weights";
import { scratchDir } from "../helpers/tmp";

const A1 = "a1".repeat(20);
const A2 = "a2".repeat(20);
const B1 = "b1".repeat(20);
const O1 = "0e".repeat(20);
const [X, Y, C, Z, W, V] = ["1", "2", "3", "4", "5", "6"].map((c) => c.repeat(64)) as [string, string, string, string, string, string];

/** Blobs written as downloadBlob leaves them, and the snapshot linked as linkSnapshot does. */
async function put(models: string, repo: string, commit: string, files: [path: string, blob: string, size: number][]) {
  const entry = cacheEntry(models, repo);
  mkdirSync(join(entry, "blobs"), { recursive: true });
  for (const [, blob, size] of files) writeFileSync(join(entry, "blobs", blob), new Uint8Array(size));
  await linkSnapshot(entry, commit, files.map(([path, blob, size]) => ({ path, size, sha256: blob, oid: "0".repeat(40) })));
  return entry;
}

/** What the fetcher and the agent do for a revision it fetched: each blob recorded as written, then the revision once whole. */
async function fetched(disk: WeightsDisk, repo: string, commit: string, bytes: number, blobs: string[]) {
  for (const b of blobs) await disk.recordBlob(repo, b);
  expect(await disk.recordFetch(repo, commit, bytes, blobs)).toBe(true);
}

/** org/a at A1 and A2 sharing config.json's blob, org/b at B1, all fetched by llmgw; org/op placed by an operator. */
async function layout() {
  const models = scratchDir("llmgw-disk-");
  const a = await put(models, "org/a", A1, [["config.json", C, 10], ["w.safetensors", X, 1000]]);
  await put(models, "org/a", A2, [["config.json", C, 10], ["w.safetensors", Y, 2000]]);
  await put(models, "org/b", B1, [["w.safetensors", Z, 4000]]);
  const op = await put(models, "org/op", O1, [["w.safetensors", W, 8000]]);
  // A transfer in progress, and a link to the blob it will become.
  writeFileSync(join(a, "blobs", `${V}.incomplete`), new Uint8Array(500));
  symlinkSync(`../../blobs/${V}`, join(a, "snapshots", A2, "more.safetensors"));
  mkdirSync(join(a, "refs"));
  writeFileSync(join(a, "refs", "v1"), A1);
  writeFileSync(join(a, "refs", "main"), A2);
  const clock = new ManualScheduler(0);
  const disk = new WeightsDisk({ modelsDir: models, maxBytes: 8000, scheduler: clock });
  await fetched(disk, "org/a", A1, 1010, [C, X]);
  await fetched(disk, "org/a", A2, 2010, [C, Y]);
  clock.advance(1000);
  await disk.recordUse("org/a", A1);
  clock.advance(2000);
  await fetched(disk, "org/b", B1, 4000, [Z]);
  clock.advance(2000);
  await Promise.all([disk.recordUse("org/a", A2), disk.recordUse("org/op", O1)]);
  return { models, a, op, disk, clock };
}

const rev = (repo: string, revision: string, fetched: boolean, last_used: number | null, fetched_at: number | null, files: [string, string, number][]): HeldRevision => ({
  repo,
  revision,
  files: files.map(([path, blob, size]) => ({ path, blob, size })),
  bytes: files.reduce((n, f) => n + f[2], 0),
  fetched,
  fetched_at,
  last_used,
});
const HELD = [
  rev("org/a", A1, true, 1000, 0, [["config.json", C, 10], ["w.safetensors", X, 1000]]),
  rev("org/a", A2, true, 5000, 0, [["config.json", C, 10], ["w.safetensors", Y, 2000]]),
  rev("org/b", B1, true, null, 3000, [["w.safetensors", Z, 4000]]),
  rev("org/op", O1, false, null, null, [["w.safetensors", W, 8000]]),
];
const BIG = 1e15;

describe("evictionPlan", () => {
  test("within the bound and the disk nothing is removed", () => {
    expect(evictionPlan(HELD, new Set(), 500, 8000, BIG)).toEqual({ remove: [], freed: 0, fits: true, reason: null });
    expect(keptBytes(HELD)).toBe(7010);
  });

  test("least recently used first (its last use, else its fetch), until the bound holds; a shared blob frees nothing", () => {
    expect(evictionPlan(HELD, new Set(), 1500, 8000, BIG)).toEqual({ remove: [{ repo: "org/a", revision: A1, freed: 1000 }], freed: 1000, fits: true, reason: null });
    expect(evictionPlan(HELD, new Set(), 5000, 8000, BIG).remove.map((r) => r.revision)).toEqual([A1, B1]);
    // The disk alone short: the same order.
    expect(evictionPlan(HELD, new Set(), 3000, null, 100).remove.map((r) => [r.revision, r.freed])).toEqual([[A1, 1000], [B1, 4000]]);
    // A2 after A1: config.json's blob goes with the last revision linking it.
    expect(evictionPlan(HELD, new Set(), 7000, null, 0).remove.map((r) => [r.revision, r.freed])).toEqual([[A1, 1000], [B1, 4000], [A2, 2010]]);
  });

  test("revisions in use and an operator's weights are never picked", () => {
    expect(evictionPlan(HELD, new Set([revisionKey("org/a", A1)]), 1500, 8000, BIG).remove.map((r) => r.revision)).toEqual([B1]);
    const plan = evictionPlan(HELD, new Set(), 7000, null, 0);
    expect(plan.remove.map((r) => r.repo)).not.toContain("org/op");
  });

  test("when removing all it may would not make room, nothing is removed and the reason says what is short", () => {
    const disk = evictionPlan(HELD, new Set(), 20_000, null, 100);
    expect(disk).toEqual({ remove: [], freed: 0, fits: false, reason: "needs 20 KiB on the models disk: 100 B free, and removing weights no replica uses would free 6.8 KiB more" });
    const all = new Set(HELD.map((h) => revisionKey(h.repo, h.revision)));
    expect(evictionPlan(HELD, all, 1500, 8000, BIG).reason).toBe("needs 1.5 KiB within --models-max-bytes 7.8 KiB: llmgw keeps 6.8 KiB, of which 0 B is weights no replica uses");
    expect(evictionPlan(HELD, new Set(), 9000, 8000, BIG)).toMatchObject({ remove: [], fits: false, reason: "needs 8.8 KiB, more than --models-max-bytes 7.8 KiB allows" });
  });
});

describe("the models directory", () => {
  test("the scan counts links to whole blobs of the entry, knows what llmgw fetched and when it was used, and writes nothing into an operator's folder", async () => {
    const { models, op } = await layout();
    const held = await scanHeld(models);
    expect(held.map((h) => [h.repo, h.revision, h.files.map((f) => f.path), h.bytes, h.fetched, h.fetched_at, h.last_used])).toEqual([
      ["org/a", A1, ["config.json", "w.safetensors"], 1010, true, 0, 1000],
      ["org/a", A2, ["config.json", "w.safetensors"], 2010, true, 0, 5000],
      ["org/b", B1, ["w.safetensors"], 4000, true, 3000, null],
      ["org/op", O1, ["w.safetensors"], 8000, false, null, null],
    ]);
    expect(existsSync(join(op, FETCHED_MARKER))).toBe(false);
    const beat = heldForHeartbeat(held);
    for (const h of beat) expect(WeightsHeld.safeParse(h).success).toBe(true);
    expect(beat.map((h) => h.revision)).toEqual([A2, B1, A1, O1]);
    // A link out of the entry, into another entry's blobs, is not a file of this revision.
    symlinkSync(join(cacheEntry(models, "org/b"), "blobs", Z), join(cacheEntry(models, "org/a"), "snapshots", A1, "borrowed.safetensors"));
    expect((await scanHeld(models))[0]!.files.map((f) => f.path)).toEqual(["config.json", "w.safetensors"]);
  });

  test("making room under --models-max-bytes removes the least recently used revision: its snapshot, its refs, the blobs only it linked; a partial blob stays", async () => {
    const { models, a, disk } = await layout();
    const report = await disk.report();
    expect(report.kept_bytes).toBe(7010);
    expect(report.max_bytes).toBe(8000);
    expect(report.free_bytes).toBeGreaterThan(0);
    const plan = await disk.makeRoom(1500, new Set());
    expect(plan.remove.map((r) => r.revision)).toEqual([A1]);
    expect(existsSync(join(a, "snapshots", A1))).toBe(false);
    expect(existsSync(join(a, "blobs", X))).toBe(false);
    expect(existsSync(join(a, "blobs", C))).toBe(true);
    expect(existsSync(join(a, "blobs", `${V}.incomplete`))).toBe(true);
    expect(existsSync(join(a, "refs", "v1"))).toBe(false);
    expect(readFileSync(join(a, "refs", "main"), "utf8")).toBe(A2);
    expect(Object.keys(JSON.parse(readFileSync(join(a, FETCHED_MARKER), "utf8")).revisions)).toEqual([A2]);
    expect((await scanHeld(models)).map((h) => h.revision)).toEqual([A2, B1, O1]);
    expect((await disk.report()).kept_bytes).toBe(6010);
    // Nothing to do now; and an operator's weights are refused outright.
    expect((await disk.makeRoom(1500, new Set())).remove).toEqual([]);
    expect(await disk.remove("org/op", O1).catch((e) => e.message)).toContain("was not fetched by llmgw");
    expect(existsSync(join(cacheEntry(models, "org/op"), "blobs", W))).toBe(true);
  });

  test("a revision counts as fetched only when the fetcher wrote every blob of it: one an operator placed in the cache layout is never recorded, so never evicted nor removed", async () => {
    const models = scratchDir("llmgw-disk-");
    const clock = new ManualScheduler(0);
    const disk = () => new WeightsDisk({ modelsDir: models, maxBytes: 1000, scheduler: clock });
    // Placed by hand, whole: the agent finds it whole when it first looks, and nothing of it was written by the fetcher.
    await put(models, "org/hand", A1, [["config.json", C, 10], ["w.safetensors", X, 2000]]);
    expect(await disk().recordFetch("org/hand", A1, 2010, [C, X])).toBe(false);
    // Half placed by hand, half fetched: still the operator's.
    await put(models, "org/half", A1, [["config.json", C, 10], ["w.safetensors", Y, 2000]]);
    await disk().recordBlob("org/half", Y);
    expect(await disk().recordFetch("org/half", A1, 2010, [C, Y])).toBe(false);
    // Fetched in part, the agent restarted (a new WeightsDisk reads what the first recorded), the rest fetched after.
    await put(models, "org/got", B1, [["config.json", C, 10], ["w.safetensors", Z, 300]]);
    await disk().recordBlob("org/got", C);
    const again = disk();
    await again.recordBlob("org/got", Z);
    expect(await again.recordFetch("org/got", B1, 310, [C, Z])).toBe(true);
    const held = await scanHeld(models);
    expect(held.map((h) => [h.repo, h.fetched])).toEqual([["org/got", true], ["org/half", false], ["org/hand", false]]);
    expect(keptBytes(held)).toBe(310);
    // Room for 900 more: only the fetched revision goes; the hand-placed ones (4 KB) stay.
    const plan = await again.makeRoom(900, new Set());
    expect(plan.remove.map((r) => r.repo)).toEqual(["org/got"]);
    expect(await again.makeRoom(1000, new Set())).toMatchObject({ fits: true, remove: [] });
    expect(await again.remove("org/hand", A1).catch((e) => e.message)).toContain("was not fetched by llmgw");
    expect(existsSync(join(cacheEntry(models, "org/hand"), "blobs", X))).toBe(true);
    expect(existsSync(join(cacheEntry(models, "org/half"), "blobs", Y))).toBe(true);
    // A removed blob is llmgw's no more: the same bytes placed again by hand are the operator's.
    expect(JSON.parse(readFileSync(join(cacheEntry(models, "org/got"), FETCHED_MARKER), "utf8")).blobs).toEqual([]);
    await put(models, "org/got", B1, [["config.json", C, 10], ["w.safetensors", Z, 300]]);
    expect(await again.recordFetch("org/got", B1, 310, [C, Z])).toBe(false);
  });

  test("free space is the file system's, also for a models directory not made yet", async () => {
    const dir = scratchDir("llmgw-disk-");
    const free = await freeBytes(dir);
    expect(free).toBeGreaterThan(0);
    expect(await freeBytes(join(dir, "not", "yet"))).toBeGreaterThan(0);
  });
});
