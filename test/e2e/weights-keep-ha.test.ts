// A `weights pull` asked of the leading control plane outlives it: kept in the PostgreSQL store,
// it is carried on by the control plane the agents talk to, which leads once the first is killed
// with SIGKILL mid-pull; both nodes end with the whole revision. Through the compiled binary,
// with a slow stand-in Hub.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { NodeView } from "../../src/protocol/views";
import type { WeightsRowView } from "../../src/protocol/weights-admin";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { ADMIN_TOKEN, HaCluster } from "../helpers/ha-cluster";
import { freePort } from "../helpers/ports";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;

let pg: Postgres;
let hub: HubProcess;
let c: HaCluster;

beforeAll(async () => {
  pg = await startPostgres();
  const d = join(scratchDir("llmgw-hubsrc-"), "alpha");
  mkdirSync(d);
  writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name: "alpha" }));
  writeFileSync(join(d, "model.safetensors"), bytesOf(4 * MB, 22));
  // 4 MiB from the Hub take about 8 s: the leader is killed well before the copies are whole.
  hub = await startHubProcess({ port: freePort(), bytesPerSecond: MB / 2, repos: [{ repo: "org/alpha", revisions: [{ dir: d, refs: ["main"] }] }] });
  c = new HaCluster(["--lease-ttl", "3000ms", "--lease-renew", "1000ms", "--hf-endpoint", hub.url], () => pg.url);
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
  for (const n of ["n1", "n2"]) c.startAgent(n, c.serve("cp-b").adminUrl, ["--models-dir", join(c.dir, `models-${n}`)]);
  await until("both agents registered", async () => (await c.api<NodeView[]>("cp-b", "/api/v1/nodes")).filter((n) => n.state === "ready").length === 2, 30_000);
}, 90_000);
afterAll(async () => {
  await c?.cleanup();
  hub?.stop();
  await pg?.stop();
}, 60_000);

describe("a weights pull kept in the store across control planes", () => {
  test("pulled through the leader, which is killed mid-pull: the other control plane leads and the pull finishes on both nodes", async () => {
    const put = await fetch(`${c.serve("cp-a").adminUrl}/api/v1/models/alpha`, { method: "PUT", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ source: "hf://org/alpha", replicas: { min: 0, max: 1 }, profiles: [PROFILE] }) });
    expect(put.status).toBe(201);
    const pulled = await fetch(`${c.serve("cp-a").adminUrl}/api/v1/weights/pull`, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify({ model: "alpha", nodes: ["n1", "n2"] }) });
    expect(pulled.status).toBe(200);
    const row = async () => (await c.api<WeightsRowView[]>("cp-b", "/api/v1/weights")).find((r) => r.repo === "org/alpha");
    await until("a copy fetching", async () => (await row())?.nodes.some((n) => n.state === "fetching" && n.bytes_present > 0) === true, 20_000);
    c.kill9("cp-a");
    await until("cp-b leads", async () => (await c.health("cp-b"))?.status === 200, 15_000);
    const done = await until("present on n1 and n2", async () => {
      const r = await row();
      return r?.nodes.every((n) => n.state === "present") === true ? r : undefined;
    }, 45_000);
    expect(done.nodes.map((n) => n.node)).toEqual(["n1", "n2"]);
    const commit = await hub.commit("org/alpha", "main");
    for (const n of ["n1", "n2"]) expect(existsSync(join(c.dir, `models-${n}`, "models--org--alpha", "snapshots", commit, "model.safetensors"))).toBe(true);
    await until("the pull cleared", async () => (await row())?.nodes.every((n) => !n.seeded) === true, 10_000);
  }, 120_000);
});
