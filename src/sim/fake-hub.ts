// A stand-in Hugging Face Hub on 127.0.0.1, for tests, the demo and the weights benchmark: it
// answers the part of the Hub's API llmgw uses (hub/client.ts) from folders on disk, as the Hub
// does: a revision's commit, the recursive tree listing with each LFS file's sha256 and size
// (paged with a Link header), and file bytes at /{repo}/resolve/{rev}/{path}, small files
// straight away and LFS files by a redirect to a storage path that honours Range. A repository
// may be gated (its bytes answer 401 without the token), and a file may be served corrupted
// (its listing keeps the true checksum). It counts the bytes it served, per file.

import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";
import type { Server } from "bun";
import { contentHash } from "../lib/digest";

export interface FakeHubRevision {
  /** A folder whose files (recursively) are the revision's files. */
  dir: string;
  /** Branch or tag names that point at this revision (a later revision takes a name over). */
  refs?: string[];
}

export interface FakeHubRepo {
  repo: string;
  revisions: FakeHubRevision[];
  /** Bytes need the token (401 GatedRepo without it); the API's listings stay open, as on the Hub. */
  gated?: boolean;
  /** Paths whose bytes are served with their first byte changed. */
  corrupt?: string[];
}

export interface FakeHubOptions {
  repos: FakeHubRepo[];
  /** The token gated repositories accept. */
  token?: string;
  /** Entries per tree page (the Hub's is 1,000). */
  pageSize?: number;
  /** Bytes per second each answer of file bytes is held to (a slow Hub, so a test sees transfers run). */
  bytesPerSecond?: number;
  port?: number;
}

interface HubFile {
  path: string;
  abs: string;
  size: number;
  oid: string;
  sha256: string | null;
}

interface HubCommit {
  sha: string;
  files: HubFile[];
}

export interface FakeHub {
  url: string;
  /** Bytes served per "repo/path" (storage and direct answers), and in all. */
  served(): { total: number; byFile: Record<string, number> };
  /** The commit a repository's ref points at. */
  commit(repo: string, ref: string): string;
  stop(): void;
}

/** Files at most this size and not weights are kept in git, the rest in LFS (as the Hub's .gitattributes do). */
const GIT_MAX = 10 * 1024 * 1024;
const LFS_EXT = /\.(safetensors|bin|gguf|pt|pth|h5|onnx|msgpack)$/i;

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else if (e.isFile()) out.push(p);
  }
  return out.sort();
}

function digest(algo: "sha1" | "sha256", abs: string, prefix?: string): string {
  const h = contentHash(algo);
  if (prefix !== undefined) h.update(prefix);
  // The files of a test are small; the benchmark's are hashed once, at start.
  h.update(readFileSync(abs));
  return h.hex();
}

function sha1hex(s: string): string {
  const h = contentHash("sha1");
  h.update(s);
  return h.hex();
}

function loadCommit(dir: string): HubCommit {
  const files = walk(dir).map((abs): HubFile => {
    const path = relative(dir, abs).split(sep).join("/");
    const size = statSync(abs).size;
    const lfs = size > GIT_MAX || LFS_EXT.test(path);
    const sha256 = lfs ? digest("sha256", abs) : null;
    // A git blob id; for an LFS file the Hub lists the pointer's, any 40 hex digits do here.
    const oid = lfs ? sha1hex(`pointer ${sha256}`) : digest("sha1", abs, `blob ${size}\u0000`);
    return { path, abs, size, oid, sha256 };
  });
  const sha = sha1hex(files.map((f) => `${f.path} ${f.sha256 ?? f.oid}`).join("\n"));
  return { sha, files };
}

const json = (body: unknown, status = 200, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });

const hubError = (status: number, message: string, code?: string) => json({ error: message }, status, code !== undefined ? { "x-error-code": code } : {});

/** Bytes of a file (corrupted if it is to be), whole or from a Range, counted as the client takes them. */
function serveBytes(req: Request, f: HubFile, corrupt: boolean, extra: Record<string, string>, count: (n: number) => void, bytesPerSecond = 0): Response {
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.get("range") ?? "");
  const start = range ? Number(range[1]) : 0;
  const end = range && range[2] !== "" ? Math.min(Number(range[2]), f.size - 1) : f.size - 1;
  if (range && start >= f.size) return new Response(null, { status: 416, headers: { "content-range": `bytes */${f.size}` } });
  let body: Blob | Uint8Array = Bun.file(f.abs).slice(start, end + 1);
  if (corrupt && start === 0 && f.size > 0) {
    const all = new Uint8Array(readFileSync(f.abs).subarray(0, end + 1));
    all[0] = all[0]! ^ 0xff;
    body = all;
  }
  const n = end + 1 - start;
  const headers: Record<string, string> = { "content-length": String(n), "accept-ranges": "bytes", ...extra };
  if (range) headers["content-range"] = `bytes ${start}-${end}/${f.size}`;
  if (req.method === "HEAD") return new Response(null, { status: range ? 206 : 200, headers });
  // Counted as the client takes it: a transfer cut short counts what it read.
  const reader = (body instanceof Blob ? body.stream() : new Blob([body]).stream()).getReader();
  // Held to a rate, the bytes go in slices of 64 KiB, each after its time.
  const slice = bytesPerSecond > 0 ? 64 * 1024 : Number.POSITIVE_INFINITY;
  let left: Uint8Array | undefined;
  const counted = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (left === undefined || left.byteLength === 0) {
        const { done, value } = await reader.read();
        if (done) return c.close();
        left = value;
      }
      const piece = left.byteLength > slice ? left.subarray(0, slice) : left;
      left = left.subarray(piece.byteLength);
      if (bytesPerSecond > 0) await Bun.sleep((1000 * piece.byteLength) / bytesPerSecond);
      count(piece.byteLength);
      c.enqueue(piece);
    },
    cancel: (why) => reader.cancel(why),
  });
  return new Response(counted, { status: range ? 206 : 200, headers });
}

export function startFakeHub(o: FakeHubOptions): FakeHub {
  const repos = new Map<string, { commits: Map<string, HubCommit>; refs: Map<string, string>; gated: boolean; corrupt: Set<string> }>();
  const blobs = new Map<string, { file: HubFile; repo: string; corrupt: boolean }>();
  for (const r of o.repos) {
    const commits = new Map<string, HubCommit>();
    const refs = new Map<string, string>();
    for (const rev of r.revisions) {
      const c = loadCommit(rev.dir);
      commits.set(c.sha, c);
      for (const name of rev.refs ?? []) refs.set(name, c.sha);
      for (const f of c.files) if (f.sha256 !== null) blobs.set(f.sha256, { file: f, repo: r.repo, corrupt: (r.corrupt ?? []).includes(f.path) });
    }
    repos.set(r.repo, { commits, refs, gated: r.gated ?? false, corrupt: new Set(r.corrupt ?? []) });
  }
  const byFile: Record<string, number> = {};
  let total = 0;
  const pageSize = o.pageSize ?? 1000;

  const commitOf = (repo: string, rev: string) => {
    const r = repos.get(repo);
    if (r === undefined) return undefined;
    return r.commits.get(rev) ?? r.commits.get(r.refs.get(rev) ?? "");
  };
  const authorized = (req: Request) => o.token !== undefined && req.headers.get("authorization") === `Bearer ${o.token}`;

  const count = (key: string, n: number) => {
    byFile[key] = (byFile[key] ?? 0) + n;
    total += n;
  };
  const bytes = (req: Request, f: HubFile, key: string, corrupt: boolean, extra: Record<string, string>) => serveBytes(req, f, corrupt, extra, (n) => count(key, n), o.bytesPerSecond);

  const api = (req: Request, url: URL, path: string): Response => {
    const m = /^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)$/.exec(path);
    if (m === null) return hubError(404, "Not Found");
    const [, repo, what, rev] = m;
    if (!repos.has(repo!)) return hubError(404, "Repository not found", "RepoNotFound");
    const c = commitOf(repo!, decodeURIComponent(rev!));
    if (c === undefined) return hubError(404, `Invalid rev id: ${rev}`, "RevisionNotFound");
    if (what === "revision") return json({ _id: c.sha.slice(0, 24), id: repo, sha: c.sha, gated: repos.get(repo!)!.gated ? "auto" : false, siblings: c.files.map((f) => ({ rfilename: f.path })) });
    const dirs = new Set<string>();
    for (const f of c.files) for (let i = f.path.indexOf("/"); i > 0; i = f.path.indexOf("/", i + 1)) dirs.add(f.path.slice(0, i));
    const entries = [
      ...[...dirs].sort().map((d) => ({ type: "directory", oid: "0".repeat(40), size: 0, path: d })),
      ...c.files.map((f) => ({ type: "file", oid: f.oid, size: f.sha256 !== null ? 134 : f.size, path: f.path, ...(f.sha256 !== null ? { lfs: { oid: f.sha256, size: f.size, pointerSize: 134 } } : {}) })),
    ];
    const from = Number(url.searchParams.get("cursor") ?? "0");
    const page = entries.slice(from, from + pageSize);
    const next = from + pageSize < entries.length ? { link: `<${url.origin}${path}?recursive=true&cursor=${from + pageSize}>; rel="next"` } : undefined;
    return json(page, 200, next);
  };

  const resolve = (req: Request, path: string): Response => {
    const m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(path);
    if (m === null) return hubError(404, "Not Found");
    const [, repo, rev, filePath] = m;
    const r = repos.get(repo!);
    if (r === undefined) return hubError(404, "Repository not found", "RepoNotFound");
    if (r.gated && !authorized(req)) return hubError(401, `Access to model ${repo} is restricted. You must have access to it and be authenticated to access it.`, "GatedRepo");
    const c = commitOf(repo!, decodeURIComponent(rev!));
    if (c === undefined) return hubError(404, `Invalid rev id: ${rev}`, "RevisionNotFound");
    const name = filePath!.split("/").map(decodeURIComponent).join("/");
    const f = c.files.find((x) => x.path === name);
    if (f === undefined) return hubError(404, "Entry not found", "EntryNotFound");
    const common = { "x-repo-commit": c.sha };
    if (f.sha256 !== null) {
      // LFS: to storage, which takes no token (a signed URL on the real Hub).
      return new Response(null, { status: 302, headers: { ...common, location: `/storage/${f.sha256}`, "x-linked-etag": `"${f.sha256}"`, "x-linked-size": String(f.size) } });
    }
    return bytes(req, f, `${repo}/${f.path}`, r.corrupt.has(f.path), { ...common, etag: `"${f.oid}"` });
  };

  const server: Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: o.port ?? 0,
    fetch(req) {
      const url = new URL(req.url);
      const path = url.pathname;
      if (req.method !== "GET" && req.method !== "HEAD") return hubError(405, "Method not allowed");
      // The stand-in's own questions, for a test that runs it in another process.
      if (path === "/_fake/served") return json({ total, byFile });
      if (path === "/_fake/commit") {
        const c = commitOf(url.searchParams.get("repo") ?? "", url.searchParams.get("ref") ?? "");
        return c === undefined ? hubError(404, "no such ref") : json({ sha: c.sha });
      }
      if (path.startsWith("/api/")) return api(req, url, path);
      const s = /^\/storage\/([0-9a-f]{64})$/.exec(path);
      if (s !== null) {
        const b = blobs.get(s[1]!);
        return b === undefined ? hubError(404, "Not Found") : bytes(req, b.file, `${b.repo}/${b.file.path}`, b.corrupt, { etag: `"${b.file.sha256}"` });
      }
      return resolve(req, path);
    },
  });

  return {
    url: `http://127.0.0.1:${server.port}`,
    served: () => ({ total, byFile: { ...byFile } }),
    commit(repo, ref) {
      const c = commitOf(repo, ref);
      if (c === undefined) throw new Error(`no ${ref} in ${repo}`);
      return c.sha;
    },
    stop: () => void server.stop(true),
  };
}
