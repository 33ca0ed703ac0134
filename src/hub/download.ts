// One file's bytes into the Hugging Face cache layout that vLLM, SGLang and huggingface_hub read
// offline (models--ORG--NAME/blobs/<sha256 or git oid>, linked from snapshots/<commit>/<path>),
// as huggingface_hub writes it: into `<blob>.incomplete`, resumed with a Range request where an
// earlier try stopped, checked against the checksum the file was listed with, and only then
// renamed to its blob. Redirects are followed by hand so the Hub token never reaches another
// host (the Hub sends LFS files to their storage). A snapshot's links are made once every file
// of it is whole (linkSnapshot): an engine never sees a snapshot with a file missing.

import { createReadStream } from "node:fs";
import { mkdir, open, rename, rm, stat, symlink, unlink } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import { type ContentHash as Hash, contentHash } from "../lib/digest";
import { blobName, type WeightFile } from "../protocol/weights";

/** The Hub cache folder of a repository: models--ORG--NAME. */
export function cacheEntry(modelsDir: string, repo: string): string {
  return join(modelsDir, `models--${repo.split("/").join("--")}`);
}

/** Where a file's verified bytes are kept. */
export function blobPath(entry: string, f: Pick<WeightFile, "sha256" | "oid">): string {
  return join(entry, "blobs", blobName(f));
}

/** The bytes did not hash to what the file was listed with: deleted, to be fetched again from elsewhere. */
export class ChecksumError extends Error {
  constructor(
    readonly file: string,
    readonly expected: string,
    readonly got: string,
  ) {
    super(`${file}: checksum mismatch (expected ${expected.slice(0, 16)}…, got ${got.slice(0, 16)}…); the copy was deleted`);
    this.name = "ChecksumError";
  }
}

/** The source refused or failed the transfer (`status` when it answered). */
export class TransferError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "TransferError";
  }
}

export interface BlobDownload {
  url: string;
  /** Sent to the URL's own origin only (a token), dropped when a redirect leaves it. */
  headers?: Record<string, string>;
  /** The cache entry (cacheEntry) the blob goes into. */
  entry: string;
  file: WeightFile;
  /** Each read's bytes once they are written (progress, rate, peers reading the partial copy). */
  onBytes?: (n: number) => void;
  /** The partial copy is open for appending, `have` bytes in it already: its bytes may be read from now on. */
  onAppend?: (partial: string, have: number) => void;
  /** Awaited after each read: a rate limit holds the transfer back here. */
  throttle?: (n: number) => Promise<void> | void;
  signal?: AbortSignal;
  fetch?: typeof fetch;
}

const MAX_REDIRECTS = 5;

/** The hash a file is checked with: sha256 for LFS files, git's blob sha1 for the others. */
function hasher(f: WeightFile): { hash: Hash; expected: string } {
  if (f.sha256 !== null) return { hash: contentHash("sha256"), expected: f.sha256 };
  const hash = contentHash("sha1");
  hash.update(`blob ${f.size}\u0000`);
  return { hash, expected: f.oid };
}

async function sizeOf(path: string): Promise<number | undefined> {
  try {
    return (await stat(path)).size;
  } catch {
    return undefined;
  }
}

/** Feeds the first `bytes` of a file into a hash: a resumed transfer's checksum covers what was there. */
async function hashPrefix(path: string, bytes: number, hash: Hash): Promise<void> {
  if (bytes === 0) return;
  for await (const chunk of createReadStream(path, { start: 0, end: bytes - 1 })) hash.update(chunk as Buffer);
}

/**
 * The file's verified blob, fetched or resumed unless it is already there. Returns the bytes
 * transferred now (0 when the blob was whole). Throws ChecksumError (the partial copy deleted),
 * TransferError, or the abort.
 */
export async function downloadBlob(o: BlobDownload): Promise<number> {
  const f = o.file;
  const dest = blobPath(o.entry, f);
  if ((await sizeOf(dest)) === f.size) return 0;
  await mkdir(dirname(dest), { recursive: true });
  const partial = `${dest}.incomplete`;
  let have = (await sizeOf(partial)) ?? 0;
  if (have > f.size) {
    await rm(partial, { force: true });
    have = 0;
  }
  let { hash, expected } = hasher(f);
  await hashPrefix(partial, have, hash);
  let moved = 0;
  if (have < f.size) {
    const res = await fetchFollowing(o, have);
    if (res.status === 200 && have > 0) {
      // The source ignored the Range: start again from the first byte.
      await rm(partial, { force: true });
      have = 0;
      ({ hash, expected } = hasher(f));
    } else if (res.status === 416) {
      await res.body?.cancel();
      throw new TransferError(`${f.path}: the source has fewer bytes than the ${have} already here`, 416);
    }
    moved = await writeBody(res, partial, have, hash, o);
    have += moved;
  }
  if (have !== f.size) throw new TransferError(`${f.path}: ${have} bytes arrived, the file has ${f.size}`);
  const got = hash.hex();
  if (got !== expected) {
    await rm(partial, { force: true });
    throw new ChecksumError(f.path, expected, got);
  }
  await rename(partial, dest);
  return moved;
}

/** GET with Range from `from`, following redirects by hand (the headers stay on their origin). */
async function fetchFollowing(o: BlobDownload, from: number): Promise<Response> {
  const fetcher = o.fetch ?? fetch;
  let url = o.url;
  const origin = new URL(url).origin;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const own = new URL(url).origin === origin ? (o.headers ?? {}) : {};
    const headers: Record<string, string> = { ...own, ...(from > 0 ? { range: `bytes=${from}-` } : {}) };
    let res: Response;
    try {
      res = await fetcher(url, { headers, redirect: "manual", ...(o.signal ? { signal: o.signal } : {}) });
    } catch (e) {
      if (o.signal?.aborted) throw e;
      throw new TransferError(`${o.file.path}: ${new URL(url).host} did not answer (${(e as Error).message})`);
    }
    if (res.status >= 300 && res.status < 400 && res.headers.has("location")) {
      await res.body?.cancel();
      url = new URL(res.headers.get("location")!, url).href;
      continue;
    }
    if (res.status === 200 || res.status === 206 || res.status === 416) return res;
    await res.body?.cancel();
    const why = res.status === 401 || res.status === 403 ? "refused (gated or private: a token that may read it is needed)" : res.status === 404 ? "not found" : `answered ${res.status}`;
    throw new TransferError(`${o.file.path}: ${new URL(url).host} ${why}`, res.status);
  }
  throw new TransferError(`${o.file.path}: more than ${MAX_REDIRECTS} redirects`);
}

/** Appends the body to `partial`, hashing it; the bytes written. */
async function writeBody(res: Response, partial: string, have: number, hash: Hash, o: BlobDownload): Promise<number> {
  if (res.body === null) return 0;
  const out = await open(partial, "a");
  o.onAppend?.(partial, have);
  let n = 0;
  try {
    for await (const chunk of res.body) {
      if (n + chunk.byteLength > o.file.size) throw new TransferError(`${o.file.path}: the source sent more than its ${o.file.size} bytes`);
      await out.write(chunk);
      hash.update(chunk);
      n += chunk.byteLength;
      o.onBytes?.(chunk.byteLength);
      if (o.throttle) await o.throttle(chunk.byteLength);
    }
  } finally {
    await out.close();
  }
  return n;
}

/**
 * Links snapshots/<commit>/<path> to each file's blob (relative links, as huggingface_hub makes
 * them), once every blob is whole. Files already linked are linked again: a link left by an
 * earlier revision's file of the same path may point at another blob.
 */
export async function linkSnapshot(entry: string, commit: string, files: readonly WeightFile[]): Promise<string> {
  const snap = join(entry, "snapshots", commit);
  for (const f of files) {
    const link = join(snap, f.path);
    await mkdir(dirname(link), { recursive: true });
    await unlink(link).catch(() => undefined);
    await symlink(relative(dirname(link), blobPath(entry, f)), link);
  }
  return snap;
}
