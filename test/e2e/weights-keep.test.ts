// A `weights pull` outlives the head node: the pull is kept in the store, so a serve killed with
// SIGKILL while the weights are still moving carries it on once it is started again, and both
// nodes end with the whole revision; the pull, done, is then cleared. Through the compiled
// binary, with a slow stand-in Hub.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { WeightsRowView } from "../../src/protocol/weights-admin";
import { run, until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;

describe("a weights pull kept across a restart of serve", () => {
  let hub: HubProcess;
  let c: Cluster;
  const hubPort = freePort();
  const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir, env: { LLMGW_SERVER: c.serve.adminUrl, LLMGW_TOKEN: c.serve.adminToken, COLUMNS: "200" } });
  const row = () => {
    const r = cli("weights", "ls", "-o", "json");
    if (r.code !== 0) throw new Error(`weights ls failed: ${r.stderr}`);
    return (JSON.parse(r.stdout) as WeightsRowView[]).find((x) => x.repo === "org/alpha");
  };

  beforeAll(async () => {
    const src = scratchDir("llmgw-hubsrc-");
    const d = join(src, "alpha");
    mkdirSync(d);
    writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name: "alpha" }));
    writeFileSync(join(d, "model.safetensors"), bytesOf(4 * MB, 21));
    // 4 MiB from the Hub take about 8 s: serve is killed well before the copies are whole.
    hub = await startHubProcess({ port: hubPort, bytesPerSecond: MB / 2, repos: [{ repo: "org/alpha", revisions: [{ dir: d, refs: ["main"] }] }] });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    for (const n of ["w1", "w2"]) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`)]);
    await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === 2);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("serve killed mid-pull: started again, it carries the pull on until both nodes hold the revision, then clears it", async () => {
    expect(await c.putModel("alpha", { source: "hf://org/alpha", replicas: { min: 0, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const commit = await hub.commit("org/alpha", "main");
    const pulled = cli("weights", "pull", "alpha", "--nodes", "w1,w2");
    expect(pulled.stderr).toBe("");
    expect(pulled.code).toBe(0);
    await until("a copy fetching", async () => row()?.nodes.some((n) => n.state === "fetching" && n.bytes_present > 0) === true, { timeoutMs: 20_000 });
    expect(row()?.nodes.every((n) => n.state !== "present")).toBe(true);

    process.kill(c.serve.pid, "SIGKILL");
    await c.startServe();

    const done = await until("present on w1 and w2 after the restart", async () => {
      const r = row();
      return r?.nodes.every((n) => n.state === "present") === true ? r : undefined;
    }, { timeoutMs: 45_000 });
    expect(done.nodes.map((n) => n.node)).toEqual(["w1", "w2"]);
    for (const n of ["w1", "w2"]) expect(existsSync(join(c.dir, `models-${n}`, "models--org--alpha", "snapshots", commit, "model.safetensors"))).toBe(true);
    // Done: the pull is no longer kept (the copies stay, no longer marked pulled).
    await until("the pull cleared", async () => row()?.nodes.every((n) => !n.seeded) === true, { timeoutMs: 10_000 });
  }, 90_000);
});
