// Finds which models' weights are on this node's disk, so the head node can place replicas
// where the weights already are (the heartbeat's `models`), and which Hugging Face revisions of
// each it holds (`model_revisions`); and, for one assignment, which folder or file the engine
// is given and the environment that keeps it off the Hub.

import { type Stats, readdirSync, readFileSync, statSync } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { Name } from "../protocol/common";
import type { Assignment } from "../protocol/heartbeat";
import { LaunchError } from "./engines";

/** Files that hold weights (".pth" too: Meta's original checkpoints use it). */
export const WEIGHT_EXTENSIONS = [".safetensors", ".bin", ".gguf", ".pt", ".pth"] as const;

/** How deep below a model's directory weights may sit (1 = directly in it). */
const MAX_DEPTH = 3;

interface Listing {
  files: string[];
  dirs: string[];
}

// Hidden entries are tool state (.cache, .locks, .git), never a model or its weights.
async function list(dir: string): Promise<Listing> {
  const out: Listing = { files: [], dirs: [] };
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    if (e.name.startsWith(".")) continue;
    let isDir = e.isDirectory();
    let isFile = e.isFile();
    if (e.isSymbolicLink()) {
      // Hugging Face snapshots are symlinks into blobs/; a dangling one is not a weight file.
      const target = await stat(join(dir, e.name)).catch(() => null);
      isDir = target?.isDirectory() ?? false;
      isFile = target?.isFile() ?? false;
    }
    if (isDir) out.dirs.push(e.name);
    else if (isFile) out.files.push(e.name);
  }
  return out;
}

function isWeightFile(name: string): boolean {
  const lower = name.toLowerCase();
  return WEIGHT_EXTENSIONS.some((ext) => lower.endsWith(ext));
}

async function holdsWeights(dir: string, depth = MAX_DEPTH, listing?: Listing): Promise<boolean> {
  const { files, dirs } = listing ?? (await list(dir));
  if (files.some(isWeightFile)) return true;
  if (depth <= 1) return false;
  for (const d of dirs) if (await holdsWeights(join(dir, d), depth - 1)) return true;
  return false;
}

/**
 * Revisions reported per model, newest first. The heartbeat allows 64; a node with thousands of
 * models must still fit its heartbeat in the agent API's body limit, and a replica is given one
 * of the newest few a node has anyway.
 */
export const MAX_REVISIONS = 16;

/** A snapshot folder named by a commit: what a revision is. */
const COMMIT = /^[0-9a-f]{40}$/;

/** Index files bigger than this are not read: a real one is well under a megabyte. */
const INDEX_MAX_BYTES = 16 * 1024 * 1024;

function listSync(dir: string): Listing {
  const out: Listing = { files: [], dirs: [] };
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    if (e.name.startsWith(".")) continue;
    let isDir = e.isDirectory();
    let isFile = e.isFile();
    if (e.isSymbolicLink()) {
      const target = statOrNull(join(dir, e.name));
      isDir = target?.isDirectory() ?? false;
      isFile = target?.isFile() ?? false;
    }
    if (isDir) out.dirs.push(e.name);
    else if (isFile) out.files.push(e.name);
  }
  return out;
}

function statOrNull(path: string): Stats | null {
  try {
    return statSync(path);
  } catch {
    return null;
  }
}

/**
 * Whether a hub snapshot is complete: it holds weight files (in it or one folder down), and
 * every shard its `*.index.json` names is there. huggingface_hub links a file into the snapshot
 * only once its blob is whole, so a download cut short is a snapshot missing some links.
 * Synchronous (a snapshot is a handful of entries) so a launch can check the one it is given.
 */
function completeSnapshot(dir: string): boolean {
  const { files, dirs } = listSync(dir);
  if (!files.some(isWeightFile) && !dirs.some((d) => listSync(join(dir, d)).files.some(isWeightFile))) return false;
  for (const f of files) {
    if (!f.endsWith(".index.json")) continue;
    let shards: string[];
    try {
      const path = join(dir, f);
      if ((statOrNull(path)?.size ?? 0) > INDEX_MAX_BYTES) continue;
      const index = JSON.parse(readFileSync(path, "utf8")) as { weight_map?: unknown };
      if (typeof index.weight_map !== "object" || index.weight_map === null) continue;
      shards = [...new Set(Object.values(index.weight_map).filter((v): v is string => typeof v === "string"))];
    } catch {
      // An index that cannot be read says nothing about the shards; the weight files decide.
      continue;
    }
    for (const shard of shards) {
      const target = resolve(dir, shard);
      if (relative(dir, target).startsWith("..")) continue;
      if (!statOrNull(target)?.isFile()) return false;
    }
  }
  return true;
}

/**
 * The complete snapshots of one hub cache entry (`models--org--name`), newest first: the one
 * refs/main points to (what `from_pretrained(name)` would load), then the others by the time
 * their folder last changed, newest first (ties by name, so every scan agrees). `weights` is
 * whether any snapshot is complete, commit-named or not (older tools wrote other names).
 */
export function hubRevisions(entry: string): { revisions: string[]; weights: boolean } {
  const snapshots = join(entry, "snapshots");
  const found: { name: string; mtime: number }[] = [];
  let weights = false;
  for (const name of listSync(snapshots).dirs) {
    const dir = join(snapshots, name);
    if (!completeSnapshot(dir)) continue;
    weights = true;
    if (COMMIT.test(name)) found.push({ name, mtime: statOrNull(dir)?.mtimeMs ?? 0 });
  }
  let main = "";
  try {
    main = readFileSync(join(entry, "refs", "main"), "utf8").trim();
  } catch {
    // No refs/main (downloaded by commit only): the times alone order them.
  }
  found.sort((a, b) => Number(b.name === main) - Number(a.name === main) || b.mtime - a.mtime || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { revisions: found.map((f) => f.name), weights };
}

/** "models--meta-llama--Llama-3.1-8B" (the Hugging Face hub cache layout) → "meta-llama/Llama-3.1-8B". */
function hubCacheName(dir: string): string | null {
  const m = /^models--(.+)$/.exec(dir);
  return m ? m[1]!.split("--").join("/") : null;
}

/**
 * Names of the models under `modelsDir` that have weights: `<name>/…`, or `<org>/<name>/…` for an
 * org directory (one with no files of its own, whose subdirectories are models), or a Hugging
 * Face cache entry `models--org--name`. Sorted. A missing directory means no models, not an
 * error. Names the protocol would reject (spaces, say) are left out and passed to `onSkip`.
 */
export async function scanWeights(modelsDir: string, onSkip: (path: string, reason: string) => void = () => {}): Promise<string[]> {
  return (await scanModels(modelsDir, onSkip)).models;
}

/**
 * scanWeights' models, and for each model in the hub cache layout the revisions it holds
 * (complete snapshots, newest first, at most MAX_REVISIONS): the heartbeat's `model_revisions`.
 */
export async function scanModels(
  modelsDir: string,
  onSkip: (path: string, reason: string) => void = () => {},
): Promise<{ models: string[]; revisions: Record<string, string[]> }> {
  const found = new Set<string>();
  const revisions = new Map<string, string[]>();
  const add = (name: string, path: string): boolean => {
    if (Name.safeParse(name).success) found.add(name);
    else onSkip(path, `"${name}" is not a valid model name (letters, digits and . _ : / - only)`);
    return found.has(name);
  };

  for (const top of (await list(modelsDir)).dirs) {
    const topPath = join(modelsDir, top);
    const hub = hubCacheName(top);
    if (hub !== null) {
      const held = hubRevisions(topPath);
      if (held.weights && add(hub, topPath) && held.revisions.length > 0) revisions.set(hub, held.revisions.slice(0, MAX_REVISIONS));
      continue;
    }
    const topListing = await list(topPath);
    let asOrg = false;
    if (topListing.files.length === 0) {
      for (const sub of topListing.dirs) {
        const subPath = join(topPath, sub);
        const subListing = await list(subPath);
        // A model directory has files of its own (config.json, weights); "original/" or
        // "snapshots/" alone under a model would otherwise pass for an org's model.
        if (subListing.files.length > 0 && (await holdsWeights(subPath, MAX_DEPTH, subListing))) {
          add(`${top}/${sub}`, subPath);
          asOrg = true;
        }
      }
    }
    if (!asOrg && (await holdsWeights(topPath, MAX_DEPTH, topListing))) add(top, topPath);
  }
  const models = [...found].sort();
  // Sorted keys: the agent compares inventories as JSON to see whether anything changed.
  return { models, revisions: Object.fromEntries(models.filter((m) => revisions.has(m)).map((m) => [m, revisions.get(m)!])) };
}

// ---- one assignment's weights -----------------------------------------------------------------

/** A revision as messages show it: enough to recognise, short enough to read in a list. */
function short(rev: string): string {
  return `${rev.slice(0, 12)}…`;
}

/**
 * Where an assignment's weights are on this node. With a revision (the catalog's pin, or the
 * one the head node chose for every shard of the replica) exactly that snapshot of the Hugging
 * Face cache entry (`models--org--name`), complete, or a LaunchError naming the revisions this
 * node has: a plain folder's revision is unknown, so it never stands in for one. Without a
 * revision (not in the hub layout, or an older head node): `<models_dir>/<model>`, else the
 * cache entry's newest complete snapshot, else its newest folder. For llama.cpp the model's
 * .gguf file inside (see ggufFile). Throws LaunchError when the name would lead outside the
 * models directory.
 */
export function modelPathFor(modelsDir: string, model: string, engine: Assignment["engine"], revision: string | null = null): string {
  const root = resolve(modelsDir);
  let dir = resolve(root, model);
  const rel = relative(root, dir);
  // Name allows "." and "/", so "a/../../etc" is a valid name; it must not reach outside.
  if (rel === "" || rel === ".." || rel.startsWith(`..${sep}`) || isAbsolute(rel))
    throw new LaunchError(`model name "${model}" does not name a directory inside ${modelsDir}`);
  const entry = join(root, `models--${model.split("/").join("--")}`);
  const snapshots = join(entry, "snapshots");
  if (revision !== null) {
    // The revision comes from the head node; only a commit hash may become a path segment.
    if (!COMMIT.test(revision)) throw new LaunchError(`revision "${revision}" of ${model} is not a 40-character commit hash`);
    const have = hubRevisions(entry).revisions;
    if (!have.includes(revision)) {
      const plain = statOrNull(dir)?.isDirectory() ? ` (it is here only as the plain folder ${dir}, whose revision is unknown)` : "";
      throw new LaunchError(
        `revision ${short(revision)} of ${model} is not on this node: have ${have.length > 0 ? have.map(short).join(", ") : "none"}${plain}; ` +
          `download it (hf download ${model} --revision ${revision} --cache-dir ${modelsDir}) or change the catalog's revision`,
      );
    }
    dir = join(snapshots, revision);
  } else if (!statOrNull(dir)?.isDirectory()) {
    const newest = hubRevisions(entry).revisions[0] ?? newestDir(snapshots);
    if (newest !== undefined) dir = join(snapshots, newest);
  }
  return engine === "llama.cpp" ? ggufFile(dir) : dir;
}

function newestDir(dir: string): string | undefined {
  return listSync(dir)
    .dirs.map((d) => ({ d, mtime: statOrNull(join(dir, d))?.mtimeMs ?? 0 }))
    .sort((a, b) => b.mtime - a.mtime)[0]?.d;
}

/** llama.cpp's multimodal projectors (mmproj-model-f16.gguf, gemma-3-mmproj.gguf): never the model. */
const PROJECTOR = /mmproj/i;
/** A split model's parts, as gguf-split names them: name-00001-of-00003.gguf. */
const SPLIT = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/**
 * The model file llama-server gets (`-m`) from a folder: projector files are skipped, a split
 * model is given by its first part (llama.cpp loads the others from beside it). More than one
 * model in the folder is refused rather than guessed: the largest is usually the highest
 * precision, which need not fit the GPUs the profile was sized for, and the wrong quantisation
 * would serve under the model's name without anyone noticing. A folder that does not exist is
 * returned as is, for the engine to report.
 */
export function ggufFile(dir: string): string {
  if (!statOrNull(dir)?.isDirectory()) return dir;
  const ggufs = listSync(dir).files.filter((f) => f.toLowerCase().endsWith(".gguf")).sort();
  const projectors = ggufs.filter((f) => PROJECTOR.test(f));
  // One entry per model: a split model's parts count once, under its first part's name.
  const models = new Map<string, { first: string; parts: string[] }>();
  for (const f of ggufs) {
    if (PROJECTOR.test(f)) continue;
    const m = SPLIT.exec(f);
    const key = m ? `${m[1]}\u0000${m[3]}` : f;
    const first = m ? `${m[1]}-${"1".padStart(m[2]!.length, "0")}-of-${m[3]}.gguf` : f;
    const entry = models.get(key) ?? { first, parts: [] };
    entry.parts.push(f);
    models.set(key, entry);
  }
  if (models.size === 0)
    throw new LaunchError(`no GGUF model in ${dir}${projectors.length > 0 ? ` (only projector files: ${projectors.join(", ")})` : ""}`);
  if (models.size > 1) {
    const names = [...models.values()].map((m) => m.first);
    throw new LaunchError(
      `${dir} holds ${models.size} GGUF models (${names.join(", ")}); llama.cpp is given one: keep one model per folder (move the others into folders of their own)`,
    );
  }
  const only = [...models.values()][0]!;
  if (!only.parts.includes(only.first))
    throw new LaunchError(`${only.first}, the first part of a split model, is missing from ${dir} (found ${only.parts.join(", ")})`);
  return join(dir, only.first);
}

/**
 * The engine's environment for weights on local disk: HF_HUB_OFFLINE=1 so vLLM and SGLang
 * (through huggingface_hub) never ask the Hub for a config, tokenizer or newer revision, and
 * TRANSFORMERS_OFFLINE=1 for transformers releases that read only their own variable. The
 * catalog's env comes after, so a profile may set HF_HUB_OFFLINE=0 to let an engine download
 * (a tokenizer from another repository, say); TRANSFORMERS_OFFLINE then follows it unless the
 * profile sets that too.
 */
export function localWeightsEnv(env: Readonly<Record<string, string>>): Record<string, string> {
  const hub = env.HF_HUB_OFFLINE ?? "1";
  return { HF_HUB_OFFLINE: hub, TRANSFORMERS_OFFLINE: hub, ...env };
}
