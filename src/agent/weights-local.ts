// Weights an operator placed on this node, named by the catalog as `source: file:///PATH` (the
// head node lists those sources in its answers): PATH is a plain model directory (config, weights,
// tokenizer files at any depth; hidden entries skipped). When this node has it, every file's
// sha256 is computed once (kept by path, size and mtime in the state directory, so a restart
// hashes nothing again), the files are linked (hard links; copied when PATH is on another file
// system) into the models directory's Hub cache layout under fileSourceRepo(PATH) at a revision
// that is a digest of the listing, and reported in heartbeats (`local_weights`). From there the
// node serves them to its peers as any verified file, and its engines load that snapshot.

import { createReadStream } from "node:fs";
import { copyFile, link, lstat, mkdir, readdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { contentHash } from "../lib/digest";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import { blobPath, cacheEntry, linkSnapshot } from "../hub/download";
import { type LocalWeights, SnapshotPath, WEIGHTS_LIMITS, type WeightFile, fileSourceRepo, localRevision, sourceProblem } from "../protocol/weights";
import type { AgentLogger } from "./log";

const CACHE_FILE = "local-weights.json";

export interface LocalWeightsOptions {
  modelsDir: string;
  stateDir: string;
  scheduler: Pick<Scheduler, "now">;
  log: AgentLogger;
  /** How often the sources are looked at again (a file changed or came): the inventory's pace. */
  intervalMs: number;
  /** Told when what is found changed (the snapshot is linked: a heartbeat and a rescan of the disk soon). */
  onChange: () => void;
}

/** A file's sha256, read in pieces (a weights file may be larger than memory). */
export async function sha256File(path: string): Promise<string> {
  const h = contentHash("sha256");
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 20 })) h.update(chunk as Buffer);
  return h.hex();
}

/** The regular files below dir (relative "/"-paths, hidden entries skipped), at most `limit`. */
async function listFiles(dir: string, limit: number): Promise<{ rel: string; abs: string; size: number; mtimeMs: number }[]> {
  const out: { rel: string; abs: string; size: number; mtimeMs: number }[] = [];
  const walk = async (d: string, prefix: string, depth: number): Promise<void> => {
    const entries = await readdir(d, { withFileTypes: true }).catch(() => []);
    for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (out.length >= limit || e.name.startsWith(".")) continue;
      const abs = join(d, e.name);
      const rel = prefix === "" ? e.name : `${prefix}/${e.name}`;
      const st = await stat(abs).catch(() => undefined);
      if (st?.isDirectory() && depth < 8) await walk(abs, rel, depth + 1);
      else if (st?.isFile() && SnapshotPath.safeParse(rel).success) out.push({ rel, abs, size: st.size, mtimeMs: Math.floor(st.mtimeMs) });
    }
  };
  await walk(dir, "", 0);
  return out;
}

export class LocalWeightsFinder {
  private sources: string[] = [];
  private readonly found = new Map<string, LocalWeights>();
  /** "abs\0size\0mtime" → sha256. */
  private hashes: Map<string, string> | undefined;
  private scanning: Promise<void> | null = null;
  private again = false;
  private scannedAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly o: LocalWeightsOptions) {}

  /** The head node's list of file:// sources (undefined: an older head node, nothing asked). */
  apply(sources: readonly string[] | undefined): void {
    if (sources === undefined) return;
    const next = [...new Set(sources.filter((s) => s.startsWith("file://") && sourceProblem(s) === undefined))].sort();
    const changed = next.join("\n") !== this.sources.join("\n");
    this.sources = next;
    for (const s of [...this.found.keys()]) if (!next.includes(s)) this.found.delete(s);
    if (changed || this.o.scheduler.now() - this.scannedAt >= this.o.intervalMs) void this.refresh();
  }

  /** Whether a revision is one this node found at a file:// source (the operator's, never evicted). */
  placedHere(repo: string, revision: string): boolean {
    for (const f of this.found.values()) if (f.revision === revision && fileSourceRepo(f.source.slice(7)) === repo) return true;
    return false;
  }

  /** What the last look found, for the heartbeat. */
  report(): { local_weights?: LocalWeights[] } {
    return this.found.size > 0 ? { local_weights: [...this.found.values()] } : {};
  }

  /** Looks at every source again (once more after the look under way, when one is). */
  refresh(): Promise<void> {
    if (this.scanning !== null) {
      this.again = true;
      return this.scanning;
    }
    this.scanning = (async () => {
      do {
        this.again = false;
        this.scannedAt = this.o.scheduler.now();
        let changed = false;
        for (const source of this.sources) {
          try {
            const before = this.found.get(source)?.revision;
            const got = await this.find(source);
            if (got === undefined) this.found.delete(source);
            else this.found.set(source, got);
            changed ||= before !== got?.revision;
          } catch (e) {
            this.o.log.warn({ source, err: errorText(e) }, "weights placed at a file:// source could not be read; not reported");
            this.found.delete(source);
          }
        }
        if (changed) this.o.onChange();
      } while (this.again);
      this.scanning = null;
    })();
    return this.scanning;
  }

  private async find(source: string): Promise<LocalWeights | undefined> {
    const path = source.slice("file://".length);
    if (!(await stat(path).catch(() => undefined))?.isDirectory()) return undefined;
    const listed = await listFiles(path, WEIGHTS_LIMITS.filesPerRevision);
    if (listed.length === 0) return undefined;
    const hashes = await this.loadHashes();
    let hashed = 0;
    const files: WeightFile[] = [];
    for (const f of listed) {
      const k = `${f.abs}\u0000${f.size}\u0000${f.mtimeMs}`;
      let sha = hashes.get(k);
      if (sha === undefined) {
        sha = await sha256File(f.abs);
        hashes.set(k, sha);
        hashed++;
      }
      files.push({ path: f.rel, size: f.size, sha256: sha, oid: sha.slice(0, 40) });
    }
    if (hashed > 0) await this.saveHashes(new Set(listed.map((f) => `${f.abs}\u0000${f.size}\u0000${f.mtimeMs}`)));
    const revision = localRevision(files);
    const repo = fileSourceRepo(path);
    const entry = cacheEntry(this.o.modelsDir, repo);
    await mkdir(join(entry, "blobs"), { recursive: true });
    for (let i = 0; i < files.length; i++) await this.placeBlob(listed[i]!.abs, blobPath(entry, files[i]!), files[i]!.size);
    await linkSnapshot(entry, revision, files);
    if (hashed > 0) this.o.log.info({ source, repo, revision, files: files.length, hashed }, "weights placed at a file:// source found and linked into the models directory");
    return { source, revision, files };
  }

  /** The blob as a hard link to the operator's file (no copy); a copy when it lies on another file system. */
  private async placeBlob(abs: string, blob: string, size: number): Promise<void> {
    const have = await lstat(blob).catch(() => undefined);
    if (have?.isFile() && have.size === size) return;
    const tmp = `${blob}.local-${process.pid}`;
    await rm(tmp, { force: true });
    try {
      await link(abs, tmp);
    } catch {
      await copyFile(abs, tmp);
    }
    await rename(tmp, blob);
  }

  private async loadHashes(): Promise<Map<string, string>> {
    if (this.hashes !== undefined) return this.hashes;
    this.hashes = new Map();
    try {
      const saved = JSON.parse(await readFile(join(this.o.stateDir, CACHE_FILE), "utf8")) as unknown;
      if (saved !== null && typeof saved === "object")
        for (const [k, v] of Object.entries(saved as Record<string, unknown>)) if (typeof v === "string" && /^[0-9a-f]{64}$/.test(v)) this.hashes.set(k, v);
    } catch {
      // None yet, or unreadable: hashed again.
    }
    return this.hashes;
  }

  /** Kept for the files seen now (and the other sources' as they were), so the cache does not grow without end. */
  private async saveHashes(current: ReadonlySet<string>): Promise<void> {
    const hashes = this.hashes!;
    const keep = new Set(current);
    for (const f of this.found.values()) for (const k of hashes.keys()) if (f.files.some((x) => k.startsWith(`${f.source.slice(7)}/${x.path}\u0000`))) keep.add(k);
    const out: Record<string, string> = {};
    for (const [k, v] of hashes) if (keep.has(k)) out[k] = v;
    const file = join(this.o.stateDir, CACHE_FILE);
    await writeFile(`${file}.tmp`, JSON.stringify(out), { mode: 0o600 });
    await rename(`${file}.tmp`, file);
  }
}
