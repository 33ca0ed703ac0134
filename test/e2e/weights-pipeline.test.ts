// Peer copies pipelined within a file, through the compiled binary: three nodes of one fabric
// want a model whose one large file the stand-in Hub sends slowly. The node fetching it from the
// Hub serves its peers the bytes it has already written, so their copies grow while the Hub is
// still sending (a fan-out or a chain behind the one Hub download) instead of starting once the
// first copy is whole; every copy is verified, and the Hub still serves each file once.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const MB = 1024 * 1024;
const NODES = ["p1", "p2", "p3"];
const BIG = 6 * MB;

describe("weights copied between peers while the first copy is still arriving", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;

  beforeAll(async () => {
    src = scratchDir("llmgw-pipesrc-");
    const d = join(src, "pipe");
    mkdirSync(d);
    writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name: "pipe" }));
    writeFileSync(join(d, "model.safetensors"), bytesOf(BIG, 7));
    // Slow: the Hub takes about 6 s for the large file, time enough to see the peers' copies grow meanwhile.
    hub = await startHubProcess({ port: freePort(), bytesPerSecond: 1 * MB, repos: [{ repo: "org/pipe", revisions: [{ dir: d, refs: ["main"] }] }] });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    for (const n of NODES) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`)]);
    await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === NODES.length);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  /** Per node, the bytes of the large file on its disk: its partial copy, or its whole blob. */
  function onDisk(sha: string): Record<string, { partial: number; whole: boolean }> {
    const out: Record<string, { partial: number; whole: boolean }> = {};
    for (const n of NODES) {
      const blobs = join(c.dir, `models-${n}`, "models--org--pipe", "blobs");
      let names: string[] = [];
      try {
        names = readdirSync(blobs);
      } catch {}
      const size = (f: string) => {
        try {
          return statSync(join(blobs, f)).size;
        } catch {
          return 0;
        }
      };
      out[n] = { partial: names.includes(`${sha}.incomplete`) ? size(`${sha}.incomplete`) : 0, whole: names.includes(sha) && size(sha) === BIG };
    }
    return out;
  }

  test("a second node's copy of the large file grows while the first is still fetching it; the Hub serves each file once", async () => {
    const sha = new Bun.CryptoHasher("sha256").update(readFileSync(join(src, "pipe", "model.safetensors"))).digest("hex");
    expect(await c.putModel("pipe", { source: "hf://org/pipe", replicas: { min: 3, max: 3 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 2 }] })).toBe(201);

    // While the Hub has sent less than the whole file, at least two nodes have part of it on disk.
    const seen = await until(
      "two nodes with part of the large file while the Hub is still sending it",
      async () => {
        const disk = onDisk(sha);
        const hubSent = (await hub.served()).byFile["org/pipe/model.safetensors"] ?? 0;
        const growing = NODES.filter((n) => disk[n]!.partial > 0);
        return hubSent < BIG && growing.length >= 2 && NODES.every((n) => !disk[n]!.whole) ? { disk, hubSent } : undefined;
      },
      { timeoutMs: 30_000, everyMs: 50 },
    );
    expect(seen.hubSent).toBeLessThan(BIG);

    const ready = await until("three replicas ready", async () => {
      const r = await c.readyOf("pipe");
      return r.length === 3 ? r : undefined;
    }, { timeoutMs: 60_000 });
    expect(new Set(ready.map((r) => r.shards[0]!.node)).size).toBe(3);
    // Every node's copy is the Hub's bytes, verified.
    const commit = await hub.commit("org/pipe", "main");
    for (const n of NODES) expect(readFileSync(join(c.dir, `models-${n}`, "models--org--pipe", "snapshots", commit, "model.safetensors"))).toEqual(readFileSync(join(src, "pipe", "model.safetensors")));
    // Each file left the Hub once; the two other copies of the large file came from peers.
    const served = await hub.served();
    expect(served.byFile["org/pipe/model.safetensors"]).toBe(BIG);
    expect(served.byFile["org/pipe/config.json"]).toBe(statSync(join(src, "pipe", "config.json")).size);
    const finished = NODES.flatMap((n) => c.agentLog(n).filter((l) => l.msg === "weights transfer finished" && (l as { file?: string }).file === "model.safetensors").map((l) => (l as { from?: string }).from));
    expect(finished.sort()).toHaveLength(3);
    expect(finished.filter((f) => f === "hub")).toHaveLength(1);
    const failed = NODES.flatMap((n) => c.agentLog(n).filter((l) => l.msg === "weights transfer failed"));
    expect(failed).toEqual([]);
  }, 120_000);
});
