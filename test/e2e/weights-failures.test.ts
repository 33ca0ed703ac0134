// What goes wrong while weights are fetched, through the compiled binary with a stand-in Hub on
// 127.0.0.1: a file whose bytes do not match the Hub's sha256 is refused (the copy deleted) and,
// the Hub being the last source, the model is held with a reason naming the file and
// "checksum"; an agent killed mid-file resumes from its partial copy after a restart; under
// `--models-max-bytes` the weights of a model with no replica on the node are removed to make
// room for another, while weights an operator put there stay; and weights that can never fit
// are named as the replica's reason.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { FETCHED_MARKER } from "../../src/agent/weights-disk";
import type { ModelView, ReplicaView } from "../../src/protocol/views";
import { until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, modelDir, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 2 };
const MB = 1000 * 1000;

const del = (c: Cluster, model: string) => fetch(`${c.serve.adminUrl}/api/v1/models/${model}`, { method: "DELETE", headers: { authorization: `Bearer ${c.serve.adminToken}` } }).then((r) => r.arrayBuffer());
const modelView = async (c: Cluster, name: string) => (await c.api<ModelView[]>("/api/v1/models")).find((m) => m.name === name);
const served = async (hub: HubProcess, key: string) => (await hub.served()).byFile[key] ?? 0;

describe("weights: checksum, disk bound", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;
  let models: string;

  beforeAll(async () => {
    src = scratchDir("llmgw-hubsrc-");
    hub = await startHubProcess({
      port: freePort(),
      repos: [
        { repo: "org/bad", revisions: [{ dir: modelDir(src, "bad", 1 * MB, 1), refs: ["main"] }], corrupt: ["model.safetensors"] },
        { repo: "org/a", revisions: [{ dir: modelDir(src, "a", 3 * MB, 2), refs: ["main"] }] },
        { repo: "org/b", revisions: [{ dir: modelDir(src, "b", 3 * MB, 3), refs: ["main"] }] },
        { repo: "org/big", revisions: [{ dir: modelDir(src, "big", 6 * MB, 4), refs: ["main"] }] },
      ],
    });
    c = new Cluster(["--hf-endpoint", hub.url, "--max-failures", "2"]);
    await c.startServe();
    models = join(c.dir, "models-d1");
    // Weights an operator placed by hand: a Hub cache entry llmgw did not fetch, and a plain folder.
    const own = join(models, "models--op--own");
    mkdirSync(join(own, "blobs"), { recursive: true });
    mkdirSync(join(own, "snapshots", "0e".repeat(20)), { recursive: true });
    writeFileSync(join(own, "blobs", "7".repeat(64)), bytesOf(2 * MB, 9));
    Bun.spawnSync(["ln", "-s", `../../blobs/${"7".repeat(64)}`, join(own, "snapshots", "0e".repeat(20), "model.safetensors")]);
    mkdirSync(join(models, "my-model"));
    writeFileSync(join(models, "my-model", "model.safetensors"), bytesOf(2 * MB, 10));
    c.startAgent("d1", ["--models-dir", models, "--models-max-bytes", "5M"]);
    await until("the agent registered", async () => (await c.nodes()).some((n) => n.name === "d1" && n.state === "ready"));
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("a file whose bytes do not match the Hub's sha256 is refused, and the model is held with the file and 'checksum' as its reason", async () => {
    expect(await c.putModel("bad", { source: "hf://org/bad", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const m = await until("the model held", async () => {
      const v = await modelView(c, "bad");
      return v?.parked ? v : undefined;
    }, { timeoutMs: 40_000 });
    expect(m.reason).toContain("model.safetensors");
    expect(m.reason).toContain("checksum");
    // No engine ran: the reason points at no engine log.
    expect(m.reason).not.toContain("logs --previous");
    // Tried at most once per failed start (two, --max-failures), each copy deleted: nothing of it is kept.
    const bad = await served(hub, "org/bad/model.safetensors");
    expect(bad).toBeGreaterThanOrEqual(MB);
    expect(bad).toBeLessThanOrEqual(2 * MB);
    const blobs = join(models, "models--org--bad", "blobs");
    expect(readdirSync(blobs).filter((b) => statSync(join(blobs, b)).size >= MB / 2)).toEqual([]);
    expect((await c.replicas()).filter((r: ReplicaView) => r.model === "bad" && r.state !== "failed")).toEqual([]);
    await del(c, "bad");
    await until("its replicas gone", async () => (await c.replicas()).length === 0, { timeoutMs: 20_000 });
  }, 60_000);

  test("under --models-max-bytes the weights of a model with no replica here are removed to make room; an operator's are not", async () => {
    expect(await c.putModel("a", { source: "hf://org/a", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("a ready", async () => (await c.readyOf("a")).length === 1, { timeoutMs: 30_000 });
    const commitA = await hub.commit("org/a", "main");
    const snapA = join(models, "models--org--a", "snapshots", commitA);
    expect(existsSync(join(snapA, "model.safetensors"))).toBe(true);
    await del(c, "a");
    await until("a's replica gone", async () => (await c.replicas()).length === 0, { timeoutMs: 20_000 });

    // b's 3 MB and a's 3 MB do not both fit in 5 MB: a's go, b's come.
    expect(await c.putModel("b", { source: "hf://org/b", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("b ready", async () => (await c.readyOf("b")).length === 1, { timeoutMs: 30_000 });
    expect(existsSync(snapA)).toBe(false);
    expect(readdirSync(join(models, "models--org--a", "blobs")).filter((b) => !b.endsWith(".incomplete"))).toEqual([]);
    expect(existsSync(join(models, "models--org--b", "snapshots", await hub.commit("org/b", "main"), "model.safetensors"))).toBe(true);
    expect(c.agentLog("d1").some((l) => l.msg?.startsWith("weights no replica uses removed to make room") && (l as { repo?: string }).repo === "org/a")).toBe(true);
    // What an operator put there is left as it was.
    expect(readFileSync(join(models, "models--op--own", "snapshots", "0e".repeat(20), "model.safetensors"))).toEqual(Buffer.from(bytesOf(2 * MB, 9)));
    expect(readFileSync(join(models, "my-model", "model.safetensors"))).toEqual(Buffer.from(bytesOf(2 * MB, 10)));
    await del(c, "b");
    await until("b's replica gone", async () => (await c.replicas()).length === 0, { timeoutMs: 20_000 });
  }, 90_000);

  test("weights larger than --models-max-bytes allows: the replica's note names the disk as the reason, and nothing is fetched", async () => {
    expect(await c.putModel("big", { source: "hf://org/big", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const r = await until("the disk named", async () => (await c.replicas()).find((x: ReplicaView) => x.model === "big" && x.error?.includes("disk:")), { timeoutMs: 30_000 });
    expect(r.error).toMatch(/^fetching weights: 0 % .*disk: needs 5\.7 MiB, more than --models-max-bytes 4\.8 MiB allows/);
    expect(await served(hub, "org/big/model.safetensors")).toBe(0);
    // b, whose replica is gone, is not removed for weights that would not fit anyway.
    expect(existsSync(join(models, "models--org--b", "snapshots", await hub.commit("org/b", "main"), "model.safetensors"))).toBe(true);
  }, 60_000);
});

describe("weights: resume after the agent is killed mid-file", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;
  const SIZE = 8 * MB;

  beforeAll(async () => {
    src = scratchDir("llmgw-hubsrc-");
    // 2 MB/s: the file takes about four seconds, time enough to kill the agent in the middle.
    hub = await startHubProcess({ port: freePort(), bytesPerSecond: 2 * MB, repos: [{ repo: "org/slow", revisions: [{ dir: modelDir(src, "slow", SIZE, 5), refs: ["main"] }] }] });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    c.startAgent("r1", ["--models-dir", join(c.dir, "models-r1")]);
    await until("the agent registered", async () => (await c.nodes()).some((n) => n.name === "r1" && n.state === "ready"));
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("kill -9 mid-file, restart: the transfer goes on from the partial copy and the replica becomes ready", async () => {
    expect(await c.putModel("slow", { source: "hf://org/slow", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const sha = new Bun.CryptoHasher("sha256").update(readFileSync(join(src, "slow", "model.safetensors"))).digest("hex");
    const partial = join(c.dir, "models-r1", "models--org--slow", "blobs", `${sha}.incomplete`);
    const sizeOf = () => (existsSync(partial) ? statSync(partial).size : 0);
    await until("a third of the file here", () => sizeOf() > SIZE / 3, { timeoutMs: 30_000 });
    // config.json is whole before the kill: the agent after the restart finds it on disk, and must know it fetched it.
    await until("config.json fetched", () => c.agentLog("r1").some((l) => l.msg === "weights transfer finished" && (l as { file?: string }).file === "config.json"));
    const agent = c.agents.get("r1")!;
    agent.kill("SIGKILL");
    await agent.exited;
    const kept = sizeOf();
    expect(kept).toBeGreaterThan(SIZE / 3);
    expect(kept).toBeLessThan(SIZE);

    c.startAgent("r1", ["--models-dir", join(c.dir, "models-r1")]);
    await until("the replica ready", async () => (await c.readyOf("slow")).length === 1, { timeoutMs: 40_000 });
    const snap = join(c.dir, "models-r1", "models--org--slow", "snapshots", await hub.commit("org/slow", "main"));
    expect(readFileSync(join(snap, "model.safetensors"))).toEqual(readFileSync(join(src, "slow", "model.safetensors")));
    // The Hub served the file about once: the restart asked only for what was missing.
    const hubBytes = await served(hub, "org/slow/model.safetensors");
    expect(hubBytes).toBeGreaterThanOrEqual(SIZE);
    expect(hubBytes).toBeLessThan(1.2 * SIZE);
    expect(c.agentLog("r1").filter((l) => l.msg === "weights transfer finished" && (l as { file?: string }).file === "model.safetensors").length).toBe(1);
    // Fetched by llmgw in two runs of the agent, every file of it: recorded as fetched (so removable to make room), not as an operator's.
    const marker = join(c.dir, "models-r1", "models--org--slow", FETCHED_MARKER);
    const commit = await hub.commit("org/slow", "main");
    await until("the revision recorded as fetched", () => existsSync(marker) && commit in (JSON.parse(readFileSync(marker, "utf8")) as { revisions: Record<string, unknown> }).revisions);
    expect(c.agentLog("r1").some((l) => l.msg?.startsWith("weights whole on disk with files llmgw did not fetch"))).toBe(false);
  }, 90_000);
});
