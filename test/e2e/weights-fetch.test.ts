// Weights fetched from the Hub through the compiled binary: a model whose catalog entry says
// `source: hf://org/tiny` is placed on a simulated node that has nothing under its models
// directory; its replica waits in `fetching` (with how far it is, from where) while the agent
// fetches every file from a stand-in Hub on 127.0.0.1, verified, into the Hugging Face cache
// layout; once the snapshot is whole the engine starts and answers. The Hub serves each byte
// once. A gated repository's bytes need the token, which the head node hands to the transfer.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ReplicaView } from "../../src/protocol/views";
import { until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;
const TOKEN = "hf_stand_in_token_for_tests";

describe("weights fetched from the Hub", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;
  const hubPort = freePort();

  beforeAll(async () => {
    src = scratchDir("llmgw-hubsrc-");
    for (const [name, seed] of [["tiny", 1], ["locked", 2], ["shared", 3]] as const) {
      const d = join(src, name);
      mkdirSync(d);
      writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name }));
      writeFileSync(join(d, "tokenizer.json"), JSON.stringify({ version: "1.0" }));
      writeFileSync(join(d, "model.safetensors"), bytesOf(4 * MB, seed));
    }
    const token = join(src, "hf.token");
    writeFileSync(token, `${TOKEN}\n`);
    hub = await startHubProcess({
      port: hubPort,
      token: TOKEN,
      // Slow enough that the replica is seen waiting for its weights.
      bytesPerSecond: 2 * MB,
      repos: [
        { repo: "org/tiny", revisions: [{ dir: join(src, "tiny"), refs: ["main"] }] },
        { repo: "org/locked", revisions: [{ dir: join(src, "locked"), refs: ["main"] }], gated: true },
        { repo: "org/shared", revisions: [{ dir: join(src, "shared"), refs: ["main"] }] },
      ],
    });
    c = new Cluster(["--hf-endpoint", hub.url, "--hf-token-file", token]);
    await c.startServe();
    for (const n of ["w1", "w2", "w3"]) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`)]);
    await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === 3);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("a replica waits in fetching while its node fetches the revision from the Hub, then starts; each byte served once", async () => {
    expect(await c.putModel("tiny", { source: "hf://org/tiny", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const commit = await hub.commit("org/tiny", "main");
    // First without figures (the files are being listed on the Hub), then with them.
    const fetching = await until("the replica fetching its weights", async () => (await c.replicas()).find((r: ReplicaView) => r.model === "tiny" && r.state === "fetching" && r.error?.includes("from hub")), { timeoutMs: 20_000 });
    expect(fetching.error).toMatch(/^fetching weights: \d+ % \(.+\) from hub/);

    const [ready] = await until("the replica ready", async () => {
      const r = await c.readyOf("tiny");
      return r.length === 1 ? r : undefined;
    }, { timeoutMs: 30_000 });
    const node = ready!.shards[0]!.node;
    const snap = join(c.dir, `models-${node}`, "models--org--tiny", "snapshots", commit);
    for (const f of ["config.json", "tokenizer.json", "model.safetensors"]) expect(readFileSync(join(snap, f))).toEqual(readFileSync(join(src, "tiny", f)));
    const served = await hub.served();
    const size = ["config.json", "tokenizer.json", "model.safetensors"].reduce((n, f) => n + readFileSync(join(src, "tiny", f)).length, 0);
    expect(Object.entries(served.byFile).filter(([k]) => k.startsWith("org/tiny/")).reduce((n, [, v]) => n + v, 0)).toBe(size);

    const res = await fetch(`${c.serve.routerUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }, 90_000);

  test("a gated repository's bytes are fetched with the head node's token, which reaches neither the engine nor the node's disk", async () => {
    expect(await c.putModel("locked", { source: "hf://org/locked", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const [ready] = await until("the gated model's replica ready", async () => {
      const r = await c.readyOf("locked");
      return r.length === 1 ? r : undefined;
    }, { timeoutMs: 40_000 });
    const node = ready!.shards[0]!.node;
    const commit = await hub.commit("org/locked", "main");
    expect(existsSync(join(c.dir, `models-${node}`, "models--org--locked", "snapshots", commit, "model.safetensors"))).toBe(true);
    // Nothing the agent wrote holds the token: its state dir, its logs, the models dir.
    const grep = Bun.spawnSync(["grep", "-rl", TOKEN, c.stateDir(node), join(c.dir, `models-${node}`)]);
    expect(grep.stdout.toString()).toBe("");
  }, 90_000);

  test("three nodes of one fabric: the Hub serves each file once, the nodes copy the rest from each other", async () => {
    // The other models' replicas go: each of these takes a whole node (its two GPUs).
    for (const m of ["tiny", "locked"]) {
      const r = await fetch(`${c.serve.adminUrl}/api/v1/models/${m}`, { method: "DELETE", headers: { authorization: `Bearer ${c.serve.adminToken}` } });
      expect(r.status).toBeLessThan(300);
    }
    await until("the GPUs free", async () => (await c.replicas()).length === 0, { timeoutMs: 30_000 });
    expect(await c.putModel("shared", { source: "hf://org/shared", replicas: { min: 3, max: 3 }, profiles: [{ ...PROFILE, gpus: 2 }] })).toBe(201);
    const ready = await until("three replicas ready", async () => {
      const r = await c.readyOf("shared");
      return r.length === 3 ? r : undefined;
    }, { timeoutMs: 60_000 });
    expect(new Set(ready.map((r) => r.shards[0]!.node)).size).toBe(3);
    const size = ["config.json", "tokenizer.json", "model.safetensors"].reduce((n, f) => n + readFileSync(join(src, "shared", f)).length, 0);
    const served = await hub.served();
    const fromHub = Object.entries(served.byFile).filter(([k]) => k.startsWith("org/shared/")).reduce((n, [, v]) => n + v, 0);
    expect(fromHub).toBe(size);
    // The copies came from peers: the agents' logs name the node each file came from.
    const sources = ["w1", "w2", "w3"].flatMap((n) => c.agentLog(n).filter((l) => l.msg === "weights transfer finished" && (l as { repo?: string }).repo === "org/shared").map((l) => (l as { from?: string }).from));
    expect(sources.length).toBe(9);
    expect(sources.filter((f) => f !== "hub").length).toBe(6);
  }, 120_000);
});
