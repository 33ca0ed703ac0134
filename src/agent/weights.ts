// Finds which models' weights are on this node's disk, so the head node can place replicas
// where the weights already are. The answer goes into the heartbeat's `models` list.

import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { Name } from "../protocol/common";

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
export async function scanWeights(
  modelsDir: string,
  onSkip: (path: string, reason: string) => void = () => {},
): Promise<string[]> {
  const found = new Set<string>();
  const add = (name: string, path: string) => {
    if (Name.safeParse(name).success) found.add(name);
    else onSkip(path, `"${name}" is not a valid model name (letters, digits and . _ : / - only)`);
  };

  for (const top of (await list(modelsDir)).dirs) {
    const topPath = join(modelsDir, top);
    const hub = hubCacheName(top);
    if (hub !== null) {
      if (await holdsWeights(topPath)) add(hub, topPath);
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
  return [...found].sort();
}
