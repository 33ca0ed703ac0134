// The weights scan over a real temporary directory tree laid out the ways models are stored:
// flat, org/name, Hugging Face hub cache, with the near-misses that must not count.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { scanWeights } from "../../src/agent/weights";

let root: string;
const put = (rel: string, content = "x") => {
  const p = join(root, rel);
  mkdirSync(dirname(p), { recursive: true });
  writeFileSync(p, content);
};

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "llmgw-weights-"));
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
