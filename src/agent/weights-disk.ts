// The weights on this node's disk as llmgw keeps them: which revisions of which repositories it
// holds in the Hugging Face cache under the models directory (each file counted only when its
// link leads to a whole, verified blob of the same entry), which of them llmgw fetched (a marker
// file per cache entry, kept per blob as the fetcher writes them, so that a revision with a file
// an operator placed is never taken for llmgw's, even after a restart mid-fetch; an operator's
// own weights are never counted against the bound nor removed), the free space, and making room for a transfer under `agent --models-max-bytes`:
// a pure plan picks the least recently used fetched revisions no replica uses, and their
// snapshot and the blobs no other snapshot links to are removed.

import { lstat, readdir, readFile, readlink, realpath, rename, rm, stat, statfs, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { z } from "zod";
import { bytes as human } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import { type DiskReport, sourceProblem, WEIGHTS_LIMITS, type WeightsHeld } from "../protocol/weights";
import { cacheEntry } from "../hub/download";
import { type AgentLogger, silentLogger } from "./log";

/** Per cache entry, what llmgw fetched into it. Hidden: the agent's scans pass it by. */
export const FETCHED_MARKER = ".llmgw-fetched.json";

/** A blob's name in the cache: a sha256 or a git object id, never a `.incomplete` partial. */
export const BLOB_NAME = /^(?:[0-9a-f]{64}|[0-9a-f]{40})$/;
const COMMIT = /^[0-9a-f]{40}$/;

const Marker = z.object({
  /**
   * The blobs llmgw's fetcher wrote into this entry, recorded as each one is whole: a revision
   * counts as fetched only when all its blobs are here (or it was recorded before).
   */
  blobs: z.array(z.string().regex(BLOB_NAME)).default([]),
  revisions: z.record(
    z.string().regex(COMMIT),
    z.object({ bytes: z.number().int().nonnegative(), fetched_at: z.number().int().nonnegative(), last_used: z.number().int().nonnegative().nullable() }),
  ),
});
type Marker = z.infer<typeof Marker>;

/** One revision this node holds. */
export interface HeldRevision {
  repo: string;
  revision: string;
  /** The files present and verified, with the blob each links to. */
  files: { path: string; blob: string; size: number }[];
  /** Their bytes (a blob two paths link to counted once). */
  bytes: number;
  fetched: boolean;
  fetched_at: number | null;
  last_used: number | null;
}

/** The key a revision goes by in `inUse` sets: "ORG/NAME@COMMIT". */
export const revisionKey = (repo: string, revision: string) => `${repo}@${revision}`;

/**
 * The verified blob behind snapshots/<revision>/<path> of a cache entry: the path must be a
 * symbolic link (as hub/download.ts's linkSnapshot makes) in the snapshot's own folders (no
 * folder on the way is a link leading elsewhere), resolving to a whole blob (its final name,
 * given only once its checksum matched) in the same entry's blobs/. Undefined otherwise.
 */
export async function snapshotBlob(entry: string, revision: string, path: string): Promise<{ file: string; size: number } | undefined> {
  try {
    const realEntry = await realpath(entry);
    const link = join(entry, "snapshots", revision, path);
    if ((await realpath(dirname(link))) !== join(realEntry, "snapshots", revision, dirname(path))) return undefined;
    if (!(await lstat(link)).isSymbolicLink()) return undefined;
    const file = await realpath(link);
    if (dirname(file) !== join(realEntry, "blobs") || !BLOB_NAME.test(basename(file))) return undefined;
    const st = await stat(file);
    return st.isFile() ? { file, size: st.size } : undefined;
  } catch {
    return undefined;
  }
}

/** Bytes free to this process on the file system holding `dir` (or its nearest existing parent). */
export async function freeBytes(dir: string): Promise<number> {
  for (let at = dir; ; at = dirname(at)) {
    try {
      const s = await statfs(at);
      return Number(s.bavail) * Number(s.bsize);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT" || dirname(at) === at) throw e;
    }
  }
}

async function readMarker(entry: string): Promise<Marker> {
  try {
    const parsed = Marker.safeParse(JSON.parse(await readFile(join(entry, FETCHED_MARKER), "utf8")));
    return parsed.success ? parsed.data : { blobs: [], revisions: {} };
  } catch {
    return { blobs: [], revisions: {} };
  }
}

/** The repository a cache folder holds (models--ORG--NAME), or undefined for anything else. */
function repoOf(folder: string): string | undefined {
  if (!folder.startsWith("models--")) return undefined;
  const rest = folder.slice("models--".length);
  const cut = rest.indexOf("--");
  if (cut <= 0) return undefined;
  const repo = `${rest.slice(0, cut)}/${rest.slice(cut + 2)}`;
  return sourceProblem(`hf://${repo}`) === undefined ? repo : undefined;
}

/** The verified files of one snapshot folder: links (in real folders of it) to whole blobs of the entry. */
async function snapshotFiles(snap: string, blobsDir: string, limit: number): Promise<HeldRevision["files"]> {
  const out: HeldRevision["files"] = [];
  const walk = async (dir: string, prefix: string): Promise<void> => {
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (out.length >= limit) return;
      const rel = prefix === "" ? e.name : `${prefix}/${e.name}`;
      if (e.isDirectory()) await walk(join(dir, e.name), rel);
      else if (e.isSymbolicLink()) {
        const target = await realpath(join(dir, e.name)).catch(() => undefined);
        if (target === undefined || dirname(target) !== blobsDir || !BLOB_NAME.test(basename(target))) continue;
        const st = await stat(target).catch(() => undefined);
        if (st?.isFile()) out.push({ path: rel, blob: basename(target), size: st.size });
      }
    }
  };
  await walk(snap, "");
  return out;
}

/** The revisions in one cache entry, with what its marker says llmgw fetched. */
async function entryRevisions(entry: string, repo: string): Promise<HeldRevision[]> {
  const realEntry = await realpath(entry).catch(() => undefined);
  if (realEntry === undefined) return [];
  const marker = await readMarker(entry);
  const snaps = await readdir(join(entry, "snapshots"), { withFileTypes: true }).catch(() => []);
  const out: HeldRevision[] = [];
  for (const s of snaps.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (!s.isDirectory() || !COMMIT.test(s.name)) continue;
    const files = await snapshotFiles(join(entry, "snapshots", s.name), join(realEntry, "blobs"), WEIGHTS_LIMITS.filesPerRevision);
    if (files.length === 0) continue;
    const blobs = new Map(files.map((f) => [f.blob, f.size]));
    let bytes = 0;
    for (const size of blobs.values()) bytes += size;
    const m = marker.revisions[s.name];
    out.push({ repo, revision: s.name, files, bytes, fetched: m !== undefined, fetched_at: m?.fetched_at ?? null, last_used: m?.last_used ?? null });
  }
  return out;
}

/** Every revision held under the models directory, in the Hub cache layout. */
export async function scanHeld(modelsDir: string): Promise<HeldRevision[]> {
  const folders = await readdir(modelsDir, { withFileTypes: true }).catch(() => []);
  const out: HeldRevision[] = [];
  for (const f of folders.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const repo = f.isDirectory() || f.isSymbolicLink() ? repoOf(f.name) : undefined;
    if (repo !== undefined) out.push(...(await entryRevisions(join(modelsDir, f.name), repo)));
  }
  return out;
}

/** The heartbeat's list: fetched revisions and the most recently used first when there are more than it holds. */
export function heldForHeartbeat(held: readonly HeldRevision[]): WeightsHeld[] {
  const order = [...held].sort((a, b) => Number(b.fetched) - Number(a.fetched) || lru(b) - lru(a));
  return order.slice(0, WEIGHTS_LIMITS.revisions).map((h) => ({ repo: h.repo, revision: h.revision, files: h.files.map((f) => f.path), bytes: h.bytes, fetched: h.fetched, last_used: h.last_used }));
}

/** When a revision was last wanted: its last use, else its fetch. */
const lru = (h: Pick<HeldRevision, "last_used" | "fetched_at">) => h.last_used ?? h.fetched_at ?? 0;

/** Bytes of what llmgw fetched and keeps (a blob shared by revisions counted once). */
export function keptBytes(held: readonly HeldRevision[]): number {
  const blobs = new Map<string, number>();
  for (const h of held) if (h.fetched) for (const f of h.files) blobs.set(`${h.repo}\u0000${f.blob}`, f.size);
  let n = 0;
  for (const size of blobs.values()) n += size;
  return n;
}

export interface EvictionPlan {
  /** Revisions to remove, least recently used first, with the bytes each frees. */
  remove: { repo: string; revision: string; freed: number }[];
  freed: number;
  /** Whether `need` bytes fit after the removals (on the disk and within maxBytes). */
  fits: boolean;
  /** Why not, for placement and the operator. */
  reason: string | null;
}

/**
 * Which revisions to remove so that `need` more bytes fit: on the disk (`free` bytes free) and
 * within `maxBytes` of what llmgw keeps. Only revisions llmgw fetched and no replica uses (nor
 * a serve: `inUse` holds revisionKey()s) are candidates, least recently used first; a blob
 * another revision still links to frees nothing. When removing every candidate would not make
 * room, nothing is removed and the reason says what is short.
 */
export function evictionPlan(held: readonly HeldRevision[], inUse: ReadonlySet<string>, need: number, maxBytes: number | null, free: number): EvictionPlan {
  const none = (reason: string | null, fits: boolean): EvictionPlan => ({ remove: [], freed: 0, fits, reason });
  if (maxBytes !== null && need > maxBytes) return none(`needs ${human(need)}, more than --models-max-bytes ${human(maxBytes)} allows`, false);
  const kept = keptBytes(held);
  const shortDisk = need - free;
  const shortMax = maxBytes === null ? 0 : kept + need - maxBytes;
  if (shortDisk <= 0 && shortMax <= 0) return none(null, true);
  // Links to each blob, from any revision and from fetched ones.
  const refs = new Map<string, { all: number; fetched: number; size: number }>();
  for (const h of held)
    for (const b of new Map(h.files.map((f) => [f.blob, f.size]))) {
      const key = `${h.repo}\u0000${b[0]}`;
      const r = refs.get(key) ?? { all: 0, fetched: 0, size: b[1] };
      r.all++;
      if (h.fetched) r.fetched++;
      refs.set(key, r);
    }
  const candidates = held.filter((h) => h.fetched && !inUse.has(revisionKey(h.repo, h.revision))).sort((a, b) => lru(a) - lru(b) || (a.repo < b.repo ? -1 : a.repo > b.repo ? 1 : a.revision < b.revision ? -1 : 1));
  const remove: EvictionPlan["remove"] = [];
  let diskFreed = 0;
  let keptFreed = 0;
  for (const h of candidates) {
    if (diskFreed >= shortDisk && keptFreed >= shortMax) break;
    let freed = 0;
    for (const blob of new Set(h.files.map((f) => f.blob))) {
      const r = refs.get(`${h.repo}\u0000${blob}`)!;
      r.all--;
      r.fetched--;
      if (r.fetched === 0) keptFreed += r.size;
      if (r.all === 0) freed += r.size;
    }
    diskFreed += freed;
    remove.push({ repo: h.repo, revision: h.revision, freed });
  }
  if (diskFreed < shortDisk)
    return none(`needs ${human(need)} on the models disk: ${human(Math.max(0, free))} free, and removing weights no replica uses would free ${human(diskFreed)} more`, false);
  if (keptFreed < shortMax)
    return none(`needs ${human(need)} within --models-max-bytes ${human(maxBytes!)}: llmgw keeps ${human(kept)}, of which ${human(keptFreed)} is weights no replica uses`, false);
  return { remove, freed: diskFreed, fits: true, reason: null };
}

/** Links in the snapshots of an entry other than `except`, as the blob names they lead to. */
async function linkedBlobs(entry: string, except: string): Promise<Set<string>> {
  const out = new Set<string>();
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (e.isDirectory()) await walk(join(dir, e.name));
      else if (e.isSymbolicLink()) out.add(basename(await readlink(join(dir, e.name)).catch(() => "")));
    }
  };
  for (const s of await readdir(join(entry, "snapshots"), { withFileTypes: true }).catch(() => [])) if (s.name !== except) await walk(join(entry, "snapshots", s.name));
  return out;
}

export interface WeightsDiskOptions {
  modelsDir: string;
  /** `agent --models-max-bytes`; null without a bound. */
  maxBytes: number | null;
  scheduler: Pick<Scheduler, "now">;
  log?: AgentLogger;
}

/** The models directory's weights as llmgw keeps them: what it holds, records of fetches and uses, the disk report, and making room. */
export class WeightsDisk {
  private readonly o: WeightsDiskOptions;
  private readonly log: AgentLogger;
  /** Marker writes of each entry, one after another. */
  private readonly writing = new Map<string, Promise<unknown>>();

  constructor(o: WeightsDiskOptions) {
    this.o = o;
    this.log = o.log ?? silentLogger;
  }

  held(): Promise<HeldRevision[]> {
    return scanHeld(this.o.modelsDir);
  }

  /** The heartbeat's DiskReport, from a scan already made (held()) or a new one. */
  async report(held?: readonly HeldRevision[]): Promise<DiskReport> {
    const h = held ?? (await this.held());
    return { free_bytes: Math.max(0, Math.floor(await freeBytes(this.o.modelsDir))), kept_bytes: keptBytes(h), max_bytes: this.o.maxBytes };
  }

  /** A blob the fetcher wrote whole into a repository's entry: part of what llmgw fetched, recorded before its revision is whole. */
  recordBlob(repo: string, blob: string): Promise<void> {
    if (!BLOB_NAME.test(blob)) return Promise.reject(new Error(`${blob} is not a blob name`));
    return this.update(repo, (m) => {
      if (m.blobs.includes(blob)) return false;
      m.blobs.push(blob);
      return true;
    });
  }

  /**
   * A revision whole on disk (after linkSnapshot), with the blobs of its files: recorded as
   * fetched by llmgw, counting against the bound and removable, only when it was already or
   * every one of its blobs was written by the fetcher (recordBlob). A revision any of whose
   * files an operator placed is theirs: not recorded, so never evicted nor removed. Resolves to
   * whether it counts as fetched.
   */
  async recordFetch(repo: string, revision: string, bytes: number, blobs: readonly string[]): Promise<boolean> {
    if (!COMMIT.test(revision)) throw new Error(`${revision} is not a commit hash`);
    const at = this.o.scheduler.now();
    let fetched = false;
    let placed: string[] = [];
    await this.update(repo, (m) => {
      const r = m.revisions[revision];
      if (r === undefined) {
        const ours = new Set(m.blobs);
        placed = blobs.filter((b) => !ours.has(b));
        if (placed.length > 0) return false;
      }
      fetched = true;
      m.revisions[revision] = { bytes, fetched_at: at, last_used: r?.last_used ?? null };
      return true;
    });
    if (placed.length > 0) this.log.info({ repo, revision, placed: placed.length, blob: placed[0] }, "weights whole on disk with files llmgw did not fetch: kept as the operator's (never removed to make room)");
    return fetched;
  }

  /**
   * A replica started on (or stopped using) a revision: its place in the least-recently-used
   * order. Recorded for what llmgw fetched only: an operator's folders are not written to (they
   * may be read-only), and are never removed anyway.
   */
  recordUse(repo: string, revision: string): Promise<void> {
    const at = this.o.scheduler.now();
    return this.update(repo, (m) => {
      const r = m.revisions[revision];
      if (r === undefined) return false;
      r.last_used = at;
      return true;
    });
  }

  /**
   * Makes room for `need` more bytes: removes what evictionPlan picks, or nothing when that
   * would not be enough (then `reason` says what is short, for placement to pass the node over).
   */
  async makeRoom(need: number, inUse: ReadonlySet<string>): Promise<EvictionPlan> {
    const held = await this.held();
    const plan = evictionPlan(held, inUse, need, this.o.maxBytes, await freeBytes(this.o.modelsDir));
    for (const r of plan.remove) {
      await this.remove(r.repo, r.revision);
      this.log.info({ repo: r.repo, revision: r.revision, freed: r.freed, need }, "weights no replica uses removed to make room (least recently used first)");
    }
    return plan;
  }

  /**
   * Removes a revision llmgw fetched: its snapshot folder, then the blobs no other snapshot of
   * the entry links to (a transfer's `.incomplete` left alone), its refs, and its marker record.
   * Refuses one llmgw did not fetch. Returns the bytes freed.
   */
  async remove(repo: string, revision: string): Promise<number> {
    const entry = cacheEntry(this.o.modelsDir, repo);
    if (!COMMIT.test(revision) || (await readMarker(entry)).revisions[revision] === undefined) throw new Error(`${repo}@${revision} was not fetched by llmgw: its files are left alone`);
    await rm(join(entry, "snapshots", revision), { recursive: true, force: true });
    const linked = await linkedBlobs(entry, revision);
    let freed = 0;
    const gone = new Set<string>();
    for (const b of await readdir(join(entry, "blobs")).catch(() => [])) {
      if (!BLOB_NAME.test(b) || linked.has(b)) continue;
      const path = join(entry, "blobs", b);
      freed += (await stat(path).catch(() => undefined))?.size ?? 0;
      await rm(path, { force: true });
      gone.add(b);
    }
    for (const ref of await readdir(join(entry, "refs"), { recursive: true }).catch(() => [] as string[])) {
      const path = join(entry, "refs", ref);
      if ((await readFile(path, "utf8").catch(() => "")).trim() === revision) await rm(path, { force: true });
    }
    // A blob removed is llmgw's no more: one placed under the same name later is the operator's.
    await this.update(repo, (m) => {
      delete m.revisions[revision];
      m.blobs = m.blobs.filter((b) => !gone.has(b));
    });
    return freed;
  }

  /** Changes an entry's marker (unless `change` says there is none), written whole and renamed into place, one change at a time. */
  private update(repo: string, change: (m: Marker) => boolean | void): Promise<void> {
    const entry = cacheEntry(this.o.modelsDir, repo);
    const run = async () => {
      const m = await readMarker(entry);
      if (change(m) === false) return;
      const path = join(entry, FETCHED_MARKER);
      await writeFile(`${path}.tmp`, `${JSON.stringify(m)}\n`);
      await rename(`${path}.tmp`, path);
    };
    const next = (this.writing.get(entry) ?? Promise.resolve()).then(run, run);
    this.writing.set(entry, next);
    const done = () => {
      if (this.writing.get(entry) === next) this.writing.delete(entry);
    };
    next.then(done, done);
    return next;
  }
}
