// What the operator sees of weights, through the compiled binary against a stand-in Hub:
// `llmgw weights ls` (per revision each node's copy: fetching with how far, present, absent),
// `weights pull` onto named nodes or a fabric (and nowhere else), `weights rm` refused while a
// replica uses the weights and done once the model is gone, the Weights line of `status` while
// a slow transfer runs, and the transfer events in `llmgw events`.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { WeightsRowView } from "../../src/protocol/weights-admin";
import { run, until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess, pseudoRandomBytes as bytesOf } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;

describe("weights as the operator sees them", () => {
  let hub: HubProcess;
  let c: Cluster;
  const hubPort = freePort();
  const cli = (...args: string[]) => run(c.bin, args, { cwd: c.dir, env: { LLMGW_SERVER: c.serve.adminUrl, LLMGW_TOKEN: c.serve.adminToken, COLUMNS: "200" } });
  const ls = () => {
    const r = cli("weights", "ls", "-o", "json");
    if (r.code !== 0) throw new Error(`weights ls failed: ${r.stderr}`);
    return JSON.parse(r.stdout) as WeightsRowView[];
  };
  const stateOf = (rows: WeightsRowView[], repo: string) => Object.fromEntries((rows.find((r) => r.repo === repo)?.nodes ?? []).map((n) => [n.node, n.state]));
  const snapshotDir = (node: string, repo: string, commit: string) => join(c.dir, `models-${node}`, `models--${repo.replace("/", "--")}`, "snapshots", commit);

  beforeAll(async () => {
    const src = scratchDir("llmgw-hubsrc-");
    const repos = [];
    for (const [name, seed] of [["alpha", 11], ["beta", 12]] as const) {
      const d = join(src, name);
      mkdirSync(d);
      writeFileSync(join(d, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], name }));
      writeFileSync(join(d, "model.safetensors"), bytesOf(4 * MB, seed));
      repos.push({ repo: `org/${name}`, revisions: [{ dir: d, refs: ["main"] }] });
    }
    // Slow enough that a pull is seen fetching (4 MiB from the Hub take about 8 s).
    hub = await startHubProcess({ port: hubPort, bytesPerSecond: MB / 2, repos });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    for (const n of ["w1", "w2"]) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`)]);
    c.startAgent("w3", ["--models-dir", join(c.dir, "models-w3"), "--fabric", "f2"]);
    await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === 3);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  test("weights pull --nodes: ls shows the copies fetching, status a Weights line; they end present on those nodes only, with events", async () => {
    // No replica: the weights move only because they are pulled.
    expect(await c.putModel("alpha", { source: "hf://org/alpha", replicas: { min: 0, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const commit = await hub.commit("org/alpha", "main");
    const before = ls().find((r) => r.repo === "org/alpha");
    expect(before?.models).toEqual(["alpha"]);
    expect(before?.revision).toBe(commit);
    expect(before?.nodes.map((n) => [n.node, n.state])).toEqual([["w1", "absent"], ["w2", "absent"], ["w3", "absent"]]);

    const pulled = cli("weights", "pull", "alpha", "--nodes", "w1,w2");
    expect(pulled.stderr).toBe("");
    expect(pulled.code).toBe(0);
    expect(pulled.stdout).toContain("w1, w2");

    const rows = await until("a copy fetching", async () => {
      const r = ls();
      return Object.values(stateOf(r, "org/alpha")).includes("fetching") ? r : undefined;
    }, { timeoutMs: 20_000 });
    const fetching = rows.find((r) => r.repo === "org/alpha")!.nodes.find((n) => n.state === "fetching")!;
    expect(["w1", "w2"]).toContain(fetching.node);
    expect(fetching.seeded).toBe(true);
    expect(stateOf(rows, "org/alpha").w3).toBe("absent");
    let lastDescribe = "";
    await until(() => `describe model showing the copy fetching from the Hub; last:\n${lastDescribe}`, async () => /^ {2}w[12]\s+fetching\s+\d+ %\s+[\d.]+ \w+\/s\s+hub$/m.test((lastDescribe = cli("describe", "model", "alpha").stdout)), { timeoutMs: 10_000 });
    const status = await until("status shows the Weights line", async () => {
      const s = cli("status").stdout;
      return /^Weights {3}/m.test(s) ? s : undefined;
    }, { timeoutMs: 10_000 });
    expect(status).toMatch(/^Weights {3}\d+ files? in flight · .+ of .+ · .+\/s · slowest: w[12] org\/alpha /m);
    await until("weights ls shows a copy fetching with how far", async () => /w[12] fetching \d+ %/.test(cli("weights", "ls").stdout), { timeoutMs: 5_000 });

    await until("present on w1 and w2", async () => {
      const s = stateOf(ls(), "org/alpha");
      return s.w1 === "present" && s.w2 === "present" ? s : undefined;
    }, { timeoutMs: 30_000 });
    const done = ls().find((r) => r.repo === "org/alpha")!;
    expect(done.nodes.map((n) => [n.node, n.state])).toEqual([["w1", "present"], ["w2", "present"], ["w3", "absent"]]);
    expect(done.fabrics).toEqual(["f1"]);
    expect(done.size).toBe(4 * MB + JSON.stringify({ architectures: ["LlamaForCausalLM"], name: "alpha" }).length);
    for (const n of ["w1", "w2"]) expect(existsSync(join(snapshotDir(n, "org/alpha", commit), "model.safetensors"))).toBe(true);
    expect(existsSync(join(c.dir, "models-w3", "models--org--alpha"))).toBe(false);
    expect(cli("weights", "ls").stdout).toMatch(/alpha\s+org\/alpha@\w{12}\s+4 MiB\s+f1\s+never\s+w1 present, w2 present, w3 absent/);

    const described = cli("describe", "model", "alpha");
    expect(described.stdout).toMatch(/Weights on nodes:\n {2}NODE\s+STATE\s+PROGRESS\s+RATE\s+FROM\n {2}w1\s+present\s+100 %\s+-\s+-\n {2}w2\s+present\s+100 %\s+-\s+-\n {2}w3\s+absent\s+0 %\s+-\s+-\n/);
    const page = await (await fetch(`${c.serve.adminUrl}/ui/models/alpha`, { headers: { authorization: `Bearer ${c.serve.adminToken}` } })).text();
    expect([...page.matchAll(/data-testid="weights-row" data-node="(\w+)" data-state="(\w+)"/g)].map((m) => `${m[1]}=${m[2]}`)).toEqual(["w1=present", "w2=present", "w3=absent"]);
    const events = await until("the transfer events", async () => {
      const e = cli("events", "-o", "json");
      const list = JSON.parse(e.stdout) as { kind: string; subject: string; message: string }[];
      return ["w1", "w2"].every((n) => list.some((x) => x.kind === "weights.fetched" && x.subject === `node/${n}`)) ? list : undefined;
    }, { timeoutMs: 10_000 });
    expect(events.filter((e) => e.kind === "weights.fetching").map((e) => e.subject).sort()).toEqual(["node/w1", "node/w2"]);
    expect(events.filter((e) => e.kind === "weights.fetched").length).toBe(2);
    expect(events.some((e) => e.subject === "node/w3" && e.kind.startsWith("weights."))).toBe(false);
  }, 90_000);

  test("weights pull --fabric: the fabric's nodes only; a bad pull is refused with a non-zero exit", async () => {
    const r = cli("weights", "pull", "alpha", "--fabric", "f2");
    expect(r.code).toBe(0);
    await until("present on w3", async () => stateOf(ls(), "org/alpha").w3 === "present", { timeoutMs: 30_000 });
    const bad = cli("weights", "pull", "alpha", "--nodes", "nope");
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('no node named "nope"');
    const neither = cli("weights", "pull", "alpha");
    expect(neither.code).toBe(2);
    expect(neither.stderr).toContain("--fabric F or --nodes");
  }, 60_000);

  test("weights rm is refused while a replica uses the weights, naming it; once the model is deleted the files go", async () => {
    expect(await c.putModel("beta", { source: "hf://org/beta", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const commit = await hub.commit("org/beta", "main");
    const [ready] = await until("beta ready", async () => {
      const r = await c.readyOf("beta");
      return r.length === 1 ? r : undefined;
    }, { timeoutMs: 40_000 });
    const node = ready!.shards[0]!.node;
    expect(existsSync(join(snapshotDir(node, "org/beta", commit), "model.safetensors"))).toBe(true);

    const refused = cli("weights", "rm", "beta", "--node", node);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`replica ${ready!.id} on ${node} uses org/beta@`);

    const del = await fetch(`${c.serve.adminUrl}/api/v1/models/beta`, { method: "DELETE", headers: { authorization: `Bearer ${c.serve.adminToken}` } });
    expect(del.status).toBe(200);
    await until("beta's replica gone", async () => (await c.replicas()).every((r) => r.model !== "beta"), { timeoutMs: 30_000 });
    // No model names org/beta any more: the repository names the weights.
    const row = ls().find((r) => r.repo === "org/beta");
    expect(row?.models).toEqual([]);
    const ok = await until("rm accepted (the node has stopped the engine)", async () => {
      const r = cli("weights", "rm", "org/beta", "--node", node);
      return r.code === 0 ? r : undefined;
    }, { timeoutMs: 20_000 });
    expect(ok.stdout).toContain(`${node} will remove org/beta`);
    // The node reports the removal once it is done: then the snapshot and its blobs are gone.
    await until("the removal in the events", async () => cli("events").stdout.includes(`weights.removed`), { timeoutMs: 20_000 });
    expect(existsSync(snapshotDir(node, "org/beta", commit))).toBe(false);
    const blobs = join(c.dir, `models-${node}`, "models--org--beta", "blobs");
    expect(existsSync(blobs) ? readdirSync(blobs) : []).toEqual([]);
    await until("ls shows it absent there", async () => stateOf(ls(), "org/beta")[node] === "absent" || ls().every((r) => r.repo !== "org/beta"), { timeoutMs: 10_000 });
  }, 90_000);
});
