// The stand-in Hub (src/sim/fake-hub.ts) in a process of its own: a test that runs the CLI
// synchronously (spawnSync) blocks its own event loop, so a Hub in the test's process could
// not answer serve meanwhile.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { FakeHubOptions } from "../../src/sim/fake-hub";
import { scratchDir } from "./tmp";

export interface HubProcess {
  url: string;
  /** Its process (the benchmark reads its CPU time). */
  pid: number;
  served(): Promise<{ total: number; byFile: Record<string, number> }>;
  commit(repo: string, ref: string): Promise<string>;
  stop(): void;
}

export async function startHubProcess(o: FakeHubOptions): Promise<HubProcess> {
  const dir = scratchDir("llmgw-hubproc-");
  const config = join(dir, "hub.json");
  writeFileSync(config, JSON.stringify(o));
  const main = join(import.meta.dir, "fake-hub-main.ts");
  const proc = Bun.spawn([process.execPath, main, config], { stdout: "pipe", stderr: "inherit" });
  const reader = proc.stdout.getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`the stand-in Hub exited: ${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const url = text.trim();
  return {
    url,
    pid: proc.pid,
    served: async () => (await (await fetch(`${url}/_fake/served`)).json()) as { total: number; byFile: Record<string, number> },
    commit: async (repo, ref) => ((await (await fetch(`${url}/_fake/commit?repo=${encodeURIComponent(repo)}&ref=${encodeURIComponent(ref)}`)).json()) as { sha: string }).sha,
    stop: () => proc.kill("SIGKILL"),
  };
}

/** Bytes that look random and are the same for the same seed: a model file for the stand-in Hub. */
export function pseudoRandomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1103515245 + 12345) >>> 0;
    out[i] = s >>> 24;
  }
  return out;
}

/** A model's folder for the stand-in Hub: a config and one weights file of `size` bytes from `seed`. */
export function modelDir(src: string, name: string, size: number, seed: number): string {
  const d = join(src, name);
  mkdirSync(d);
  writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name }));
  writeFileSync(join(d, "model.safetensors"), pseudoRandomBytes(size, seed));
  return d;
}
