// `source: file:///PATH` through the compiled binary: an operator placed a model directory on
// one node (w1); w1 finds it (the head node names the source), reports its files with their
// sha256, and links them into its models directory; the other node (w2), which has no such
// directory, copies them from w1 with a grant, verified against w1's report, with no Hub
// involved, and its replica starts on them. A source no node has holds the model, naming the path.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { WeightsRowView } from "../../src/protocol/weights-admin";
import { run, until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";
import { fileSourceRepo } from "../../src/protocol/weights";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 2 };
const MB = 1024 * 1024;

describe("weights placed by hand at a file:// source", () => {
  let hub: HubProcess;
  let c: Cluster;
  let placed: string;
  const hubPort = freePort();
  const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir, env: { LLMGW_SERVER: c.serve.adminUrl, LLMGW_TOKEN: c.serve.adminToken, COLUMNS: "200" } });

  beforeAll(async () => {
    const src = scratchDir("llmgw-placed-");
    placed = join(src, "tiny-model");
    mkdirSync(join(placed, "sub"), { recursive: true });
    writeFileSync(join(placed, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"] }));
    writeFileSync(join(placed, "model.safetensors"), bytesOf(2 * MB, 41));
    writeFileSync(join(placed, "sub", "tokenizer.json"), JSON.stringify({ version: "1.0" }));
    writeFileSync(join(placed, ".hidden"), "not a weight");
    // A Hub that holds nothing: nothing may come from it.
    hub = await startHubProcess({ port: hubPort, repos: [] });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    c.startAgent("w1", ["--models-dir", join(c.dir, "models-w1")]);
    await until("w1 registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === 1);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("the node holding the directory reports it; the other copies it from that node and starts its replica on it", async () => {
    const source = `file://${placed}`;
    const repo = fileSourceRepo(placed);
    expect(await c.putModel("tiny", { source, replicas: { min: 2, max: 2 }, profiles: [PROFILE] })).toBe(201);
    // w1 finds the directory and its replica starts on the snapshot linked from it.
    await until("tiny ready on w1", async () => (await c.readyOf("tiny")).some((r) => r.shards[0]!.node === "w1"), { timeoutMs: 30_000 });
    // From now on only w1 has the files: the directory goes where no other agent looks.
    renameSync(placed, `${placed}-elsewhere`);
    c.startAgent("w2", ["--models-dir", join(c.dir, "models-w2")]);
    const ready = await until("both replicas ready", async () => {
      const r = await c.readyOf("tiny");
      return r.length === 2 ? r : undefined;
    }, { timeoutMs: 40_000 });
    expect(ready.map((r) => r.shards[0]!.node).sort()).toEqual(["w1", "w2"]);
    // w2's copy is byte for byte the operator's, in the Hub cache layout under the source's repository.
    // The head node hears of w2's whole copy with the agent's next stock of its disk, which may
    // come a heartbeat after the replica's ready.
    const row = await until("w2's copy present in weights ls", () => {
      const r = (JSON.parse(cli("weights", "ls", "-o", "json").stdout) as WeightsRowView[]).find((x) => x.repo === repo);
      return r?.nodes.every((n) => n.state === "present") === true ? r : undefined;
    }, { timeoutMs: 10_000 });
    expect(row.models).toEqual(["tiny"]);
    expect(row.nodes.map((n) => [n.node, n.state])).toEqual([["w1", "present"], ["w2", "present"]]);
    // Where the operator placed them, they are theirs: llmgw does not remove them.
    const rm = cli("weights", "rm", repo, "--node", "w1");
    expect(rm.code).not.toBe(0);
    expect(rm.stderr).toContain("llmgw did not fetch it");
    const snap = join(c.dir, "models-w2", `models--${repo.replace("/", "--")}`, "snapshots", row.revision);
    for (const f of ["config.json", "model.safetensors", "sub/tokenizer.json"]) expect(readFileSync(join(snap, f))).toEqual(readFileSync(join(`${placed}-elsewhere`, f)));
    const sources = c.agentLog("w2").filter((l) => l.msg === "weights transfer finished").map((l) => (l as { from?: string }).from);
    expect(sources.sort()).toEqual(["w1", "w1", "w1"]);
    expect((await hub.served()).total).toBe(0);
  }, 90_000);

  test("a file:// source no node has: the model is not placed, and why names the path", async () => {
    expect(await c.putModel("ghost", { source: "file:///nowhere/ghost-model", replicas: { min: 1, max: 1 }, profiles: [{ ...PROFILE, gpus: 1 }] })).toBe(201);
    const why = await until("explain naming the path", async () => {
      const e = cli("explain", "ghost");
      return e.stdout.includes("no node holds file:///nowhere/ghost-model") ? e.stdout : undefined;
    }, { timeoutMs: 15_000 });
    expect(why).toContain("no node holds file:///nowhere/ghost-model");
    expect((await c.replicas()).some((r) => r.model === "ghost")).toBe(false);
  }, 30_000);
});
