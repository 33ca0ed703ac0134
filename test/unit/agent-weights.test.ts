// The weights scan over a real temporary directory tree laid out the ways models are stored:
// flat, org/name, Hugging Face hub cache, with the near-misses that must not count; the
// revisions a hub cache holds, which GGUF file llama.cpp gets, and the engines' offline env.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { LaunchError } from "../../src/agent/engines";
import { MAX_REVISIONS, ggufFile, localWeightsEnv, modelPathFor, scanModels, scanWeights } from "../../src/agent/weights";
import { scratchDir } from "../helpers/tmp";

let root: string;
const put = (rel: string, content = "x") => {
  const p = join(root, rel);
  mkdirSync(dirname(p), { recursive: true });
  writeFileSync(p, content);
};

beforeAll(() => {
  root = scratchDir("llmgw-weights-");
  // Present (under good/).
  put("good/Llama-3.1-8B-Instruct/config.json");
  put("good/Llama-3.1-8B-Instruct/model-00001-of-00004.safetensors");
  put("good/meta-llama/Llama-3.1-70B/config.json");
  put("good/meta-llama/Llama-3.1-70B/model-00001-of-00030.safetensors");
  put("good/meta-llama/Llama-3.2-1B/pytorch_model.bin");
  put("good/meta-llama/.locks/x.bin");
  put("good/qwen-gguf/qwen2.5-7b-instruct-q4_k_m.gguf");
  // Meta's original layout: weights only in original/, so this is one model, not org "old-checkpoint".
  put("good/old-checkpoint/README.md");
  put("good/old-checkpoint/original/consolidated.00.pth");
  put("good/tiny/weights.pt");
  put("good/three-deep/a/b/model.safetensors");
  // Hugging Face hub cache: snapshot files are symlinks into blobs/.
  put("good/models--Qwen--Qwen2.5-0.5B/blobs/4f1c9e");
  put("good/models--Qwen--Qwen2.5-0.5B/refs/main", "abc");
  mkdirSync(join(root, "good/models--Qwen--Qwen2.5-0.5B/snapshots/abc"), { recursive: true });
  symlinkSync("../../blobs/4f1c9e", join(root, "good/models--Qwen--Qwen2.5-0.5B/snapshots/abc/model.safetensors"));
  // A model directory reached through a symlink counts too.
  put("elsewhere/Mistral-7B/model.safetensors");
  symlinkSync(join(root, "elsewhere/Mistral-7B"), join(root, "good/Mistral-7B"));

  // Absent (under bad/), beside one real model so the scan is known to run.
  put("bad/real/model.safetensors");
  put("bad/config-only/config.json");
  put("bad/partial/model.safetensors.incomplete");
  put("bad/four-deep/a/b/c/model.safetensors");
  put("bad/.cache/hidden.safetensors");
  put("bad/stray-top-level.gguf");
  put("bad/bad name/model.safetensors");
  mkdirSync(join(root, "bad/empty"));
  symlinkSync(join(root, "nowhere"), join(root, "bad/dangling"));
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("scanWeights", () => {
  test("finds flat, org/name, deep, symlinked and hub-cache models, sorted", async () => {
    expect(await scanWeights(join(root, "good"))).toEqual([
      "Llama-3.1-8B-Instruct",
      "Mistral-7B",
      "Qwen/Qwen2.5-0.5B",
      "meta-llama/Llama-3.1-70B",
      "meta-llama/Llama-3.2-1B",
      "old-checkpoint",
      "qwen-gguf",
      "three-deep",
      "tiny",
    ]);
  });

  test("skips what has no weights, weights too deep, partial downloads, hidden dirs and bad names", async () => {
    const skipped: string[] = [];
    const found = await scanWeights(join(root, "bad"), (path, reason) => skipped.push(`${path}: ${reason}`));
    expect(found).toEqual(["real"]);
    expect(skipped).toHaveLength(1);
    expect(skipped[0]).toContain('"bad name" is not a valid model name');
  });

  test("a missing or unreadable models directory is no models, not an error", async () => {
    expect(await scanWeights(join(root, "does-not-exist"))).toEqual([]);
    expect(await scanWeights(join(root, "good/tiny/weights.pt"))).toEqual([]);
  });
});

// ---- Hugging Face snapshots, GGUF files, and where an assignment's weights are --------------

const REV_A = "a".repeat(40);
const REV_B = "b".repeat(40);
const REV_C = "c".repeat(40);
const REV_D = "d".repeat(40);

/** A hub cache entry under `base` with the given snapshots, each a symlink into blobs/ per file. */
function hubModel(base: string, repo: string, snapshots: Record<string, string[]>, mtimes: Record<string, number> = {}): string {
  const dir = join(base, `models--${repo.split("/").join("--")}`);
  for (const [rev, files] of Object.entries(snapshots)) {
    mkdirSync(join(dir, "snapshots", rev), { recursive: true });
    for (const f of files) {
      const blob = join(dir, "blobs", `${rev}-${f.replaceAll("/", "_")}`);
      mkdirSync(dirname(blob), { recursive: true });
      writeFileSync(blob, f.endsWith(".json") ? JSON.stringify({ weight_map: { "a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors" } }) : "w");
      mkdirSync(dirname(join(dir, "snapshots", rev, f)), { recursive: true });
      symlinkSync(blob, join(dir, "snapshots", rev, f));
    }
  }
  for (const [rev, t] of Object.entries(mtimes)) utimesSync(join(dir, "snapshots", rev), new Date(t), new Date(t));
  return dir;
}

describe("scanModels: Hugging Face revisions", () => {
  test("complete snapshots only, newest first by the snapshot's time, not by name or creation order", async () => {
    const base = join(root, "revs-mtime");
    // Made first, then made the newer one: the scan must go by the time, not by creation or name.
    hubModel(base, "org/two", { [REV_A]: ["config.json", "model.safetensors"], [REV_B]: ["config.json", "model.safetensors"] }, {
      [REV_A]: Date.UTC(2026, 5, 1),
      [REV_B]: Date.UTC(2025, 0, 1),
    });
    // Config only: a download that has not got to the weights yet.
    hubModel(base, "org/two", { [REV_C]: ["config.json"] }, { [REV_C]: Date.UTC(2026, 11, 1) });
    const { models, revisions } = await scanModels(base);
    expect(models).toEqual(["org/two"]);
    expect(revisions).toEqual({ "org/two": [REV_A, REV_B] });
  });

  test("refs/main's snapshot comes first; a sharded snapshot missing a shard of its index is not complete", async () => {
    const base = join(root, "revs-refs");
    const dir = hubModel(
      base,
      "org/sharded",
      {
        [REV_A]: ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
        [REV_B]: ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
        [REV_C]: ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"],
      },
      { [REV_A]: Date.UTC(2026, 5, 1), [REV_B]: Date.UTC(2025, 0, 1), [REV_C]: Date.UTC(2026, 11, 1) },
    );
    mkdirSync(join(dir, "refs"));
    writeFileSync(join(dir, "refs", "main"), REV_B);
    // A snapshot folder not named by a commit is weights (older layouts) but no revision to report.
    hubModel(base, "org/odd", { abc: ["model.safetensors"] });
    const { models, revisions } = await scanModels(base);
    expect(models).toEqual(["org/odd", "org/sharded"]);
    expect(revisions).toEqual({ "org/sharded": [REV_B, REV_A] });
  });

  test("at most MAX_REVISIONS per model, the newest", async () => {
    const base = join(root, "revs-many");
    const revs = Array.from({ length: MAX_REVISIONS + 1 }, (_, i) => i.toString(16).padStart(40, "0"));
    hubModel(base, "org/many", Object.fromEntries(revs.map((r) => [r, ["model.safetensors"]])), Object.fromEntries(revs.map((r, i) => [r, Date.UTC(2026, 0, 1 + i)])));
    const { revisions } = await scanModels(base);
    expect(revisions["org/many"]).toEqual([...revs].reverse().slice(0, MAX_REVISIONS));
  });

  test("plain folders report no revisions", async () => {
    const { revisions } = await scanModels(join(root, "good"));
    expect(revisions).toEqual({});
  });
});

describe("ggufFile", () => {
  test("skips projector files and picks the first part of a split model, whatever sorts first", () => {
    const dir = join(root, "gguf-split");
    for (const f of ["mmproj-model-f16.gguf", "qwen2.5-vl-00002-of-00003.gguf", "qwen2.5-vl-00001-of-00003.gguf", "qwen2.5-vl-00003-of-00003.gguf", "README.md"]) put(`gguf-split/${f}`);
    expect(ggufFile(dir)).toBe(join(dir, "qwen2.5-vl-00001-of-00003.gguf"));
  });

  test("a single model beside its projector, whichever name the projector has", () => {
    put("gguf-single/Aaa-mmproj-f16.gguf");
    put("gguf-single/gemma-3-4b-it-Q4_K_M.gguf");
    expect(ggufFile(join(root, "gguf-single"))).toBe(join(root, "gguf-single", "gemma-3-4b-it-Q4_K_M.gguf"));
  });

  test("several models in one folder, only a projector, or a split model without its first part: refused naming the files", () => {
    put("gguf-many/llama-Q4_K_M.gguf");
    put("gguf-many/llama-Q8_0.gguf");
    put("gguf-many/mmproj-llama.gguf");
    expect(() => ggufFile(join(root, "gguf-many"))).toThrow(/holds 2 GGUF models \(llama-Q4_K_M\.gguf, llama-Q8_0\.gguf\)/);
    put("gguf-proj/mmproj-x.gguf");
    expect(() => ggufFile(join(root, "gguf-proj"))).toThrow(/no GGUF model in .*gguf-proj \(only projector files: mmproj-x\.gguf\)/);
    put("gguf-part/big-00002-of-00002.gguf");
    expect(() => ggufFile(join(root, "gguf-part"))).toThrow(/big-00001-of-00002\.gguf, the first part of a split model, is missing/);
  });
});

describe("modelPathFor with an assignment's revision", () => {
  test("the revision's snapshot, not the newest; for llama.cpp the model file inside it", () => {
    const base = join(root, "paths");
    hubModel(base, "org/m", { [REV_A]: ["model.safetensors"], [REV_B]: ["model.safetensors"] }, { [REV_A]: Date.UTC(2026, 5, 1), [REV_B]: Date.UTC(2025, 0, 1) });
    hubModel(base, "org/g", { [REV_A]: ["mmproj-g.gguf", "g-Q4.gguf"] });
    const snaps = join(base, "models--org--m", "snapshots");
    expect(modelPathFor(base, "org/m", "vllm", REV_B)).toBe(join(snaps, REV_B));
    expect(modelPathFor(base, "org/m", "sglang", null)).toBe(join(snaps, REV_A));
    expect(modelPathFor(base, "org/g", "llama.cpp", REV_A)).toBe(join(base, "models--org--g", "snapshots", REV_A, "g-Q4.gguf"));
  });

  test("a revision this node does not have (or has incomplete) fails naming it and the ones it has", () => {
    const base = join(root, "paths-missing");
    hubModel(base, "org/m", { [REV_A]: ["model.safetensors"], [REV_B]: ["model.safetensors"], [REV_D]: ["config.json"] }, { [REV_A]: Date.UTC(2026, 5, 1), [REV_B]: Date.UTC(2025, 0, 1) });
    const err = (() => {
      try {
        modelPathFor(base, "org/m", "vllm", REV_C);
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err).toBeInstanceOf(LaunchError);
    expect(err!.message).toContain(`revision ${REV_C.slice(0, 12)}… of org/m is not on this node: have ${REV_A.slice(0, 12)}…, ${REV_B.slice(0, 12)}…`);
    expect(err!.message).toContain(`hf download org/m --revision ${REV_C} --cache-dir ${base}`);
    expect(() => modelPathFor(base, "org/m", "vllm", REV_D)).toThrow(`revision ${REV_D.slice(0, 12)}… of org/m is not on this node`);
    // Only as a plain folder: its revision is unknown, so it cannot stand in for a pinned one.
    put("paths-missing/org/plain/model.safetensors");
    expect(() => modelPathFor(base, "org/plain", "vllm", REV_A)).toThrow(/org\/plain is not on this node: have none/);
  });
});

describe("localWeightsEnv", () => {
  test("engines run offline: the Hub is never asked, unless the catalog's env says HF_HUB_OFFLINE=0", () => {
    expect(localWeightsEnv({ FOO: "1" })).toEqual({ HF_HUB_OFFLINE: "1", TRANSFORMERS_OFFLINE: "1", FOO: "1" });
    expect(localWeightsEnv({ HF_HUB_OFFLINE: "0" })).toEqual({ HF_HUB_OFFLINE: "0", TRANSFORMERS_OFFLINE: "0" });
    expect(localWeightsEnv({ HF_HUB_OFFLINE: "0", TRANSFORMERS_OFFLINE: "1" })).toEqual({ HF_HUB_OFFLINE: "0", TRANSFORMERS_OFFLINE: "1" });
  });
});
