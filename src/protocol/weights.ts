// Where a model's weights come from and what they are: a catalog model's `source` (hf://ORG/NAME
// on the Hugging Face Hub, or file:///PATH for weights an operator placed on some node), the
// files of one pinned revision with the checksums every copy is verified against, and the Hub's
// own answers (its revision and tree listings), which are outside input like any other.

import { z } from "zod";
import { sha256hex } from "../lib/digest";

/** A Hub repository id: ORG/NAME, each part as the Hub allows it (letters, digits, - _ .). */
const REPO = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$/;

export type WeightsSource = { kind: "hf"; repo: string } | { kind: "file"; path: string };

/** What is wrong with a `source`, or undefined when it is one of the two forms. */
export function sourceProblem(s: string): string | undefined {
  if (s.startsWith("hf://")) {
    const repo = s.slice(5);
    if (!REPO.test(repo)) return `"${s}" must be hf://ORG/NAME (letters, digits, - _ . in each part)`;
    if (repo.split("/").some((p) => p.includes("..") || p.endsWith("."))) return `"${s}": a repository name has no ".." and does not end with "."`;
    return undefined;
  }
  if (s.startsWith("file://")) {
    const path = s.slice(7);
    if (!path.startsWith("/")) return `"${s}" must be file:///ABSOLUTE/PATH (three slashes: no host)`;
    if (path.split("/").some((seg) => seg === "." || seg === "..")) return `"${s}" must not contain "." or ".." path segments`;
    return undefined;
  }
  return `"${s.length > 80 ? `${s.slice(0, 80)}…` : s}" is neither hf://ORG/NAME nor file:///PATH`;
}

/** A checked `source` as its parts. */
export function parseSource(s: string): WeightsSource {
  const problem = sourceProblem(s);
  if (problem !== undefined) throw new Error(problem);
  return s.startsWith("hf://") ? { kind: "hf", repo: s.slice(5) } : { kind: "file", path: s.slice(7) };
}

/** The catalog's `source` field: one of the two forms, or a message naming the problem. */
export const SourceField = z
  .string()
  .max(512, "must be at most 512 characters")
  .superRefine((s, ctx) => {
    const problem = sourceProblem(s);
    if (problem !== undefined) ctx.addIssue({ code: "custom", message: problem });
  });

/** A commit hash (heartbeat.ts's Revision; not imported from there, which imports the catalog that imports this). */
const Revision = z.string().regex(/^[0-9a-f]{40}$/, "must be a 40-character lowercase hex commit hash");
const Sha256 = z.string().regex(/^[0-9a-f]{64}$/, "must be a 64-character lowercase hex sha256");
const GitOid = z.string().regex(/^[0-9a-f]{40}$/, "must be a 40-character lowercase hex git object id");

/**
 * A path inside a snapshot, as the Hub lists it: relative, "/"-separated, no "." or ".." segment,
 * no hidden top folder of a tool's state. It becomes a path under the models directory.
 */
export const SnapshotPath = z
  .string()
  .min(1)
  .max(1024)
  .refine((p) => !p.startsWith("/") && !p.includes("\\") && !p.includes("\u0000"), "must be a relative path with / separators")
  .refine((p) => p.split("/").every((seg) => seg !== "" && seg !== "." && seg !== ".."), "must not contain empty, '.' or '..' segments");

/**
 * One file of a revision: its size and what its bytes must hash to. Files stored with LFS (the
 * weights) carry their sha256; small files kept in git carry the git blob id, sha1 of
 * "blob <size>\0" and the bytes, which verifies them as well.
 */
export const WeightFile = z.object({
  path: SnapshotPath,
  size: z.number().int().nonnegative(),
  sha256: Sha256.nullable(),
  oid: GitOid,
});
export type WeightFile = z.infer<typeof WeightFile>;

/** The files of one pinned revision of a Hub repository. */
export const WeightsManifest = z.object({
  repo: z.string().regex(REPO),
  revision: Revision,
  files: z.array(WeightFile).max(100_000),
});
export type WeightsManifest = z.infer<typeof WeightsManifest>;

/** What a file's bytes are checked against, and the name of its blob in the Hub cache layout (huggingface_hub's etag). */
export function blobName(f: Pick<WeightFile, "sha256" | "oid">): string {
  return f.sha256 ?? f.oid;
}

/** Total bytes of a manifest. */
export function manifestBytes(m: Pick<WeightsManifest, "files">): number {
  let n = 0;
  for (const f of m.files) n += f.size;
  return n;
}

// ---- the Hub's answers ------------------------------------------------------------------------

/** GET /api/models/{repo}/revision/{rev}: what matters of it is the commit the revision is at. */
export const HubRevisionInfo = z.object({
  id: z.string().max(256),
  sha: Revision,
  /** false, or how access is granted ("auto", "manual"): the bytes need a token that was granted it. */
  gated: z.union([z.boolean(), z.string().max(32)]).optional(),
  private: z.boolean().optional(),
});

/** One entry of GET /api/models/{repo}/tree/{rev}?recursive=true. */
export const HubTreeEntry = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("file"),
    path: SnapshotPath,
    size: z.number().int().nonnegative(),
    oid: GitOid,
    lfs: z.object({ oid: Sha256, size: z.number().int().nonnegative() }).optional(),
  }),
  z.object({ type: z.literal("directory"), path: SnapshotPath }),
]);
export const HubTree = z.array(HubTreeEntry).max(100_000);
export type HubTreeEntry = z.infer<typeof HubTreeEntry>;

// ---- between the head node and the agents ------------------------------------------------------

/** Most files a node reports per revision, transfers per heartbeat, and fetch orders per answer. */
export const WEIGHTS_LIMITS = { filesPerRevision: 20_000, revisions: 256, transfers: 1024, orders: 4096 } as const;

/** A revision a node holds (some or all of its files, each verified), as its heartbeat says. */
export const WeightsHeld = z.object({
  repo: z.string().regex(REPO),
  revision: Revision,
  /** Paths present and verified. */
  files: z.array(SnapshotPath).max(WEIGHTS_LIMITS.filesPerRevision),
  /** Their bytes. */
  bytes: z.number().int().nonnegative(),
  /** Whether llmgw fetched it (only those are ever removed to make room). */
  fetched: z.boolean(),
  /** When a replica last used it (ms since the epoch), null if none has. */
  last_used: z.number().int().nonnegative().nullable(),
});
export type WeightsHeld = z.infer<typeof WeightsHeld>;

/** One transfer running on a node. */
export const TransferReport = z.object({
  repo: z.string().regex(REPO),
  revision: Revision,
  path: SnapshotPath,
  size: z.number().int().nonnegative(),
  done: z.number().int().nonnegative(),
  /** Bytes per second over the last few seconds. */
  rate: z.number().nonnegative(),
  /** "hub" or the name of the node it copies from. */
  from: z.string().min(1).max(128),
  /** The last try's failure, while it is retried (a checksum mismatch says "checksum"). */
  error: z.string().max(512).nullable().default(null),
});
export type TransferReport = z.infer<typeof TransferReport>;

/** The node's disk under its models directory. */
export const DiskReport = z.object({
  free_bytes: z.number().int().nonnegative(),
  /** What llmgw fetched and keeps there. */
  kept_bytes: z.number().int().nonnegative(),
  /** `agent --models-max-bytes`, null without a bound. */
  max_bytes: z.number().int().positive().nullable(),
});
export type DiskReport = z.infer<typeof DiskReport>;

/** Where a file is to be fetched from: the Hub (the token only when the repository needs it), or a peer of the fabric with a grant. */
export const FetchSource = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("hub"), url: z.string().url().max(4096), token: z.string().min(1).max(512).optional() }),
  z.object({
    kind: z.literal("peer"),
    node: z.string().min(1).max(128),
    url: z.string().url().max(4096),
    grant: z.string().regex(/^[0-9a-f]{64}$/),
    /** The peer's listener certificate (PEM) when it serves HTTPS, as its heartbeats sent it: the one certificate the copy trusts. */
    cert: z.string().min(1).max(16_384).regex(/^-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\r\n-]+-----END CERTIFICATE-----\s*$/, "must be one PEM certificate").optional(),
  }),
]);
export type FetchSource = z.infer<typeof FetchSource>;

/** One file the head node asks a node to fetch. */
export const FetchOrder = z.object({
  repo: z.string().regex(REPO),
  revision: Revision,
  file: WeightFile,
  from: FetchSource,
});
export type FetchOrder = z.infer<typeof FetchOrder>;

/**
 * A grant to copy one file from a node: derived from the SHA-256 of the serving node's
 * credential (which the head node and that node have, and no other node), the file, and when
 * the grant ends. The serving node computes it again to check a request: the requesting node's
 * own credential opens nothing, and a grant opens one file of one revision until it ends.
 */
export function transferGrant(servingCredentialSha256: string, repo: string, revision: string, path: string, expiresAt: number): string {
  return sha256hex(`llmgw-grant\u0000${servingCredentialSha256}\u0000${repo}\u0000${revision}\u0000${path}\u0000${expiresAt}`);
}

// ---- file:///PATH: weights an operator placed on some node ---------------------------------

/**
 * The repository name weights of `file:///PATH` go by once an agent found them (in its models
 * directory's Hub cache layout, in heartbeats, plans and orders): "llmgw-file/" and the folder's
 * name with a digest of the whole path, so two folders of one name stay apart. Both sides derive it.
 */
export function fileSourceRepo(path: string): string {
  const base = (path.replace(/\/+$/, "").split("/").pop() ?? "").replace(/[^A-Za-z0-9_.-]/g, "-").replace(/^[^A-Za-z0-9]+/, "").replace(/-{2,}/g, "-").replace(/[.-]+$/, "").slice(0, 64);
  return `llmgw-file/${base === "" ? "" : `${base}-`}${sha256hex(`file://${path}`).slice(0, 12)}`;
}

/** The repository of a source's weights as the cache holds them: hf://ORG/NAME's, or file:///PATH's fileSourceRepo. */
export function sourceRepo(source: string | undefined): string | undefined {
  if (source === undefined || sourceProblem(source) !== undefined) return undefined;
  return source.startsWith("hf://") ? source.slice(5) : fileSourceRepo(source.slice(7));
}

/** An agent's report of the weights it found at one file:///PATH the head node named: each file with its size and sha256. */
export const LocalWeights = z.object({
  source: z.string().max(4096).refine((s) => s.startsWith("file://") && sourceProblem(s) === undefined, "must be file:///ABSOLUTE/PATH"),
  /** A digest of the listing (every path, size and sha256): what the copies are pinned to. */
  revision: Revision,
  files: z.array(WeightFile).max(WEIGHTS_LIMITS.filesPerRevision),
});
export type LocalWeights = z.infer<typeof LocalWeights>;

/** The revision of a listing of files: a digest of every path, size and sha256, in path order. */
export function localRevision(files: readonly Pick<WeightFile, "path" | "size" | "sha256">[]): string {
  const lines = [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)).map((f) => `${f.path}\u0000${f.size}\u0000${f.sha256 ?? ""}\n`);
  return sha256hex(`llmgw-local\u0000${lines.join("")}`).slice(0, 40);
}
