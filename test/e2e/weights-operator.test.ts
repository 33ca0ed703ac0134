// Weights an operator placed by hand in the Hub cache layout (models--ORG--NAME/blobs and
// snapshots), at the very revision the catalog pins, are used as they are and stay theirs:
// through the compiled binary with a stand-in Hub, such a revision is run without a byte from
// the Hub, and under `--models-max-bytes` it is never removed to make room (nor counted against
// the bound), while weights llmgw fetched are, once no replica uses them; a transfer that would
// need more than that waits with the disk as its reason.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { ModelView, ReplicaView } from "../../src/protocol/views";
import { until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, modelDir, startHubProcess } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1000 * 1000;

/** Places a revision the way an operator copying a Hub cache would: each file's blob under the name the Hub lists, a snapshot of links to them. */
async function placeByHand(hub: HubProcess, models: string, repo: string, dir: string): Promise<{ commit: string; snapshot: string }> {
  const commit = await hub.commit(repo, "main");
  const tree = (await (await fetch(`${hub.url}/api/models/${repo}/tree/${commit}?recursive=true`)).json()) as { type: string; path: string; oid: string; lfs?: { oid: string } }[];
  const entry = join(models, `models--${repo.replace("/", "--")}`);
  mkdirSync(join(entry, "blobs"), { recursive: true });
  const snapshot = join(entry, "snapshots", commit);
  for (const f of tree.filter((t) => t.type === "file")) {
    const blob = f.lfs?.oid ?? f.oid;
    writeFileSync(join(entry, "blobs", blob), readFileSync(join(dir, f.path)));
    mkdirSync(dirname(join(snapshot, f.path)), { recursive: true });
    symlinkSync(`../../blobs/${blob}`, join(snapshot, f.path));
  }
  return { commit, snapshot };
}

const del = (c: Cluster, model: string) => fetch(`${c.serve.adminUrl}/api/v1/models/${model}`, { method: "DELETE", headers: { authorization: `Bearer ${c.serve.adminToken}` } }).then((r) => r.arrayBuffer());
const servedOf = async (hub: HubProcess, repo: string) => Object.entries((await hub.served()).byFile).reduce((n, [k, v]) => (k.startsWith(`${repo}/`) ? n + v : n), 0);

describe("weights an operator placed in the Hub cache layout", () => {
  let hub: HubProcess;
  let c: Cluster;
  let src: string;
  let models: string;
  let own: { commit: string; snapshot: string };

  beforeAll(async () => {
    src = scratchDir("llmgw-hubsrc-");
    hub = await startHubProcess({
      port: freePort(),
      repos: [
        { repo: "org/own", revisions: [{ dir: modelDir(src, "own", 3 * MB, 21), refs: ["main"] }] },
        { repo: "org/b", revisions: [{ dir: modelDir(src, "b", 2 * MB, 22), refs: ["main"] }] },
        { repo: "org/c", revisions: [{ dir: modelDir(src, "c", 3.5 * MB, 23), refs: ["main"] }] },
      ],
    });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    models = join(c.dir, "models-d1");
    own = await placeByHand(hub, models, "org/own", join(src, "own"));
    c.startAgent("d1", ["--models-dir", models, "--models-max-bytes", "5M"]);
    await until("the agent registered", async () => (await c.nodes()).some((n) => n.name === "d1" && n.state === "ready"));
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  const ownIntact = () => {
    expect(readFileSync(join(own.snapshot, "model.safetensors"))).toEqual(Buffer.from(readFileSync(join(src, "own", "model.safetensors"))));
    expect(existsSync(join(own.snapshot, "config.json"))).toBe(true);
  };

  test("run as placed, never removed to make room for what llmgw fetches; fetched weights no replica uses are, and a transfer needing more waits with the disk as its reason", async () => {
    // The pinned revision is whole on disk: the replica runs on it, the Hub serves none of it.
    expect(await c.putModel("own", { source: "hf://org/own", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("own ready", async () => (await c.readyOf("own")).length === 1, { timeoutMs: 30_000 });
    expect(await servedOf(hub, "org/own")).toBe(0);
    await del(c, "own");
    await until("own's replica gone", async () => (await c.replicas()).length === 0, { timeoutMs: 20_000 });

    // b (2 MB) fetched, used, then not.
    expect(await c.putModel("b", { source: "hf://org/b", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("b ready", async () => (await c.readyOf("b")).length === 1, { timeoutMs: 30_000 });
    await del(c, "b");
    await until("b's replica gone", async () => (await c.replicas()).length === 0, { timeoutMs: 20_000 });
    const snapB = join(models, "models--org--b", "snapshots", await hub.commit("org/b", "main"));
    expect(existsSync(join(snapB, "model.safetensors"))).toBe(true);

    // c (3.5 MB) and b do not both fit in 5 MB: b's go, the operator's 3 MB (used before b) stay.
    expect(await c.putModel("c", { source: "hf://org/c", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("c ready", async () => (await c.readyOf("c")).length === 1, { timeoutMs: 30_000 });
    expect(existsSync(snapB)).toBe(false);
    const removed = c.agentLog("d1").filter((l) => l.msg?.startsWith("weights no replica uses removed to make room")).map((l) => (l as { repo?: string }).repo);
    expect(removed).toEqual(["org/b"]);
    ownIntact();

    // b again while c runs: c is in use and the operator's are not llmgw's to remove, so b is not
    // fetched: the head node passes the node over (or its replica waits), the disk named.
    expect(await c.putModel("b", { source: "hf://org/b", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const why = await until("the disk named", async () => {
      const m = (await c.api<ModelView[]>("/api/v1/models")).find((x) => x.name === "b");
      const r = (await c.replicas()).find((x: ReplicaView) => x.model === "b");
      const text = `${m?.reason ?? ""} ${r?.error ?? ""}`;
      return text.includes("disk:") ? text : undefined;
    }, { timeoutMs: 30_000 });
    expect(why).toContain("--models-max-bytes");
    expect(await c.readyOf("b")).toEqual([]);
    expect(await servedOf(hub, "org/b")).toBeLessThan(3 * MB);
    ownIntact();
    expect(c.agentLog("d1").some((l) => l.msg?.startsWith("weights no replica uses removed to make room") && (l as { repo?: string }).repo === "org/own")).toBe(false);
  }, 120_000);
});
