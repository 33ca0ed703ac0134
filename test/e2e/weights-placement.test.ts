// Placement follows the weights, through the compiled binary: a model's revision fetched from a
// stand-in Hub onto one node stays there after its replica goes, and the model's next replica
// goes back to that node, though another node of the same fabric, first by name, has as many
// GPUs free. `llmgw explain` says per node which preference applied and what fetching costs. A
// node whose --models-max-bytes cannot take the revision is passed over, with that reason.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { run, until } from "../helpers/binary";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const PROFILE = { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 };
const MB = 1024 * 1024;
const configText = (name: string) => JSON.stringify({ architectures: ["LlamaForCausalLM"], name });
const configBytes = (name: string) => Buffer.byteLength(configText(name));

describe("placement prefers the node holding the weights", () => {
  let hub: HubProcess;
  let c: Cluster;
  const hubPort = freePort();

  beforeAll(async () => {
    const src = scratchDir("llmgw-hubsrc-");
    for (const [name, seed] of [["tiny", 7], ["other", 8]] as const) {
      const d = join(src, name);
      mkdirSync(d);
      writeFileSync(join(d, "config.json"), configText(name));
      writeFileSync(join(d, "model.safetensors"), new Uint8Array(2 * MB).fill(seed));
    }
    hub = await startHubProcess({
      port: hubPort,
      repos: [
        { repo: "org/tiny", revisions: [{ dir: join(src, "tiny"), refs: ["main"] }] },
        { repo: "org/other", revisions: [{ dir: join(src, "other"), refs: ["main"] }] },
      ],
    });
    c = new Cluster(["--hf-endpoint", hub.url]);
    await c.startServe();
    // w0 keeps at most 1 MiB of weights: no model here fits it.
    c.startAgent("w0", ["--models-dir", join(c.dir, "models-w0"), "--models-max-bytes", "1Mi"]);
    for (const n of ["w1", "w2"]) c.startAgent(n, ["--models-dir", join(c.dir, `models-${n}`)]);
    await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === 3);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    hub?.stop();
  }, 30_000);

  const cli = (...args: string[]) => {
    const r = run(c.bin, args, { cwd: c.dir });
    if (r.code !== 0) throw new Error(`llmgw ${args.join(" ")}: ${r.stderr}`);
    return r.stdout;
  };
  const readyNode = async (model: string) => {
    const [r] = await until(`a replica of ${model} ready`, async () => {
      const ready = await c.readyOf(model);
      return ready.length === 1 ? ready : undefined;
    }, { timeoutMs: 30_000 });
    return r!.shards[0]!.node;
  };

  test("a new replica goes back to the node that fetched the weights; explain says what each node would cost", async () => {
    // w0 comes first by name but has no room; w1 next: held back, the first replica and its weights go to w2.
    cli("cordon", "w1");
    // On demand first, until the head node knows the files and the nodes' disks (a replica
    // placed before that goes where placement would put it without them).
    expect(await c.putModel("tiny", { source: "hf://org/tiny", replicas: { min: 0, max: 1 }, profiles: [PROFILE] })).toBe(201);
    await until("the weights' cost known", () => (cli("explain", "tiny").includes("w0: disk:") ? true : undefined), { timeoutMs: 20_000 });
    expect(await c.putModel("tiny", { source: "hf://org/tiny", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(200);
    expect(await readyNode("tiny")).toBe("w2");
    cli("uncordon", "w1");
    await until("w1 ready again", async () => (await c.nodes()).find((n) => n.name === "w1")?.state === "ready");

    const del = await fetch(`${c.serve.adminUrl}/api/v1/models/tiny`, { method: "DELETE", headers: { authorization: `Bearer ${c.serve.adminToken}` } });
    expect(del.status).toBeLessThan(300);
    await until("the replica gone", async () => (await c.replicas()).length === 0, { timeoutMs: 30_000 });

    // Both nodes have both GPUs free: name order says w1, the weights say w2.
    expect(await c.putModel("tiny", { source: "hf://org/tiny", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(201);
    expect(await readyNode("tiny")).toBe("w2");
    // Nothing fetched again.
    const served = await hub.served();
    expect(Object.entries(served.byFile).filter(([k]) => k.startsWith("org/tiny/")).reduce((n, [, v]) => n + v, 0)).toBe(2 * MB + configBytes("tiny"));

    const tiny = cli("explain", "tiny");
    expect(tiny).toMatch(/w1: 2 H100-80GB free; its fabric holds the weights \(copy 2 MiB from w2 in fabric f1\)/);
    expect(tiny).toMatch(/w2: 1 H100-80GB free; holds the weights \(present\)/);
    expect(tiny).toMatch(/no room for the weights\s+1\s+w0: disk: needs 2 MiB, --models-max-bytes leaves room for 1 MiB/);

    // A model nobody holds: both nodes would fetch it from the Hub, and the summary says so.
    expect(await c.putModel("other", { source: "hf://org/other", replicas: { min: 0, max: 1 }, profiles: [PROFILE] })).toBe(201);
    const other = await until("explain with the file list known", () => {
      const out = cli("explain", "other");
      return out.includes("from the Hub") ? out : undefined;
    }, { timeoutMs: 20_000 });
    expect(other).toMatch(/w1: 2 H100-80GB free; weights from the Hub \(fetch 2 MiB from the Hub\)/);
    expect(other).toMatch(/w2: 1 H100-80GB free; weights from the Hub \(fetch 2 MiB from the Hub\)/);

    // With w1 and w2 held back, only w0 is left, and its disk is the reason.
    cli("cordon", "w1");
    cli("cordon", "w2");
    expect(await c.putModel("other", { source: "hf://org/other", replicas: { min: 1, max: 1 }, profiles: [PROFILE] })).toBe(200);
    const m = await until("other unplaceable", async () => {
      const v = await c.model("other");
      return v?.unplaceable && v.reason?.includes("disk") ? v : undefined;
    }, { timeoutMs: 20_000 });
    expect(m.reason).toContain("w0: disk: needs 2 MiB, --models-max-bytes leaves room for 1 MiB");
    expect((await c.replicas()).filter((r) => r.model === "other")).toEqual([]);
  }, 90_000);
});
