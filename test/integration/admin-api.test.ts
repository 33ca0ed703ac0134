// The admin and agent API over real HTTP: auth, validation naming fields, the catalog, node
// administration, events, and tables that agree with the summary.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { statSync } from "node:fs";
import { join } from "node:path";
import type { ModelView, NodeView, Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
beforeAll(async () => {
  s = await testServer();
});
afterAll(() => s.stop());

const H = "H100-80GB";
const modelBody = (extra: Record<string, unknown> = {}) => ({
  replicas: { min: 1, max: 2 },
  profiles: [{ name: "h100", engine: "vllm", gpu_class: H, gpus: 1 }],
  ...extra,
});

describe("auth", () => {
  test("secrets are generated 0600 in a 0700 data dir", () => {
    expect(statSync(s.dataDir).mode & 0o777).toBe(0o700);
    expect(statSync(join(s.dataDir, "admin.token")).mode & 0o777).toBe(0o600);
    expect(statSync(join(s.dataDir, "join.token")).mode & 0o777).toBe(0o600);
    expect(s.adminToken).not.toBe(s.joinToken);
  });

  test("admin routes refuse no token, a wrong token and the join token; /healthz is open", async () => {
    for (const auth of [undefined, "Bearer wrong-token-wrong-token", `Bearer ${s.joinToken}`, s.adminToken]) {
      const res = await fetch(`${s.adminUrl}/api/v1/summary`, { headers: auth ? { authorization: auth } : {} });
      expect(res.status).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("unauthorized");
    }
    expect((await fetch(`${s.adminUrl}/healthz`)).status).toBe(200);
  });

  test("the agent route refuses the admin token", async () => {
    expect((await s.agent(heartbeat({ name: "x" }), s.adminToken)).status).toBe(401);
    expect((await s.agent(heartbeat({ name: "x" }), "")).status).toBe(401);
  });
});

describe("heartbeat", () => {
  test("registers a node with GPUs and weights; the answer carries assignments and the interval", async () => {
    const res = await s.agent(heartbeat({ name: "gpu-01", fabrics: ["ib-a"], gpus: [H, H], models: ["llama"] }));
    expect(res.status).toBe(200);
    // The join token's heartbeat: answered with the node's own credential, this once.
    // A single head node answers epoch 0: the leader epoch of several control planes, which agents compare.
    expect(await res.json()).toEqual({ assignments: [], heartbeat_interval_ms: 5000, generation: expect.any(Number), generation_base: expect.any(Number), epoch: 0, credential: expect.any(String), weights: [] });
    const node = (await (await s.admin("/api/v1/nodes/gpu-01")).json()) as NodeView;
    expect(node.state).toBe("ready");
    expect(node.gpus.map((g) => g.class)).toEqual([H, H]);
    expect(node.models).toEqual(["llama"]);
    expect(node.fabrics).toEqual(["ib-a"]);
  });

  test("a later heartbeat replaces GPUs and weights atomically, keeping the admin state", async () => {
    await s.agent(heartbeat({ name: "gpu-02", gpus: [H, H, H] , models: ["a", "b"] }));
    await s.admin("/api/v1/nodes/gpu-02/cordon", { method: "POST" });
    await s.agent(heartbeat({ name: "gpu-02", gpus: [H], unhealthy: [0], models: ["b"] }));
    const node = (await (await s.admin("/api/v1/nodes/gpu-02")).json()) as NodeView;
    expect(node.gpus.length).toBe(1);
    expect(node.gpus[0]!.healthy).toBe(false);
    expect(node.models).toEqual(["b"]);
    expect(node.state).toBe("cordoned");
  });

  test("bad bodies are 400 naming every bad field; unknown fields are ignored; nothing is stored", async () => {
    const before = s.peek.counts();
    const bad = await s.agent({ node: "gpu-09", address: "x", gpus: [{ index: -1, uuid: "u", name: "n", class: "c", memory_mib: "lots", healthy: true }] });
    expect(bad.status).toBe(400);
    const body = (await bad.json()) as { error: { code: string; message: string; issues: { path: string }[] } };
    expect(body.error.code).toBe("invalid_request");
    expect(body.error.issues.map((i) => i.path).sort()).toEqual(["gpus.0.index", "gpus.0.memory_mib"]);
    expect(body.error.message).toContain("gpus.0.");
    const dup = await s.agent({ ...heartbeat({ name: "gpu-09", gpus: [H, H] }), gpus: heartbeat({ name: "gpu-09", gpus: [H, H] }).gpus.map((g) => ({ ...g, index: 0 })) });
    expect(((await dup.json()) as { error: { issues: { path: string; message: string }[] } }).error.issues[0]).toEqual({ path: "gpus.1.index", message: "duplicate GPU index 0 (also gpus[0])" });
    expect((await s.agent("{not json")).status).toBe(400);
    expect(s.peek.counts()).toEqual(before);
    const extra = await s.agent({ ...heartbeat({ name: "gpu-10" }), future_field: { x: 1 } });
    expect(extra.status).toBe(200);
  });

  test("a node without heartbeats past the timeout is unreachable, and ready again when it returns", async () => {
    await s.agent(heartbeat({ name: "gpu-late", gpus: [H] }));
    s.clock.advance(15_001);
    expect(((await (await s.admin("/api/v1/nodes/gpu-late")).json()) as NodeView).state).toBe("unreachable");
    await s.agent(heartbeat({ name: "gpu-late", gpus: [H] }));
    expect(((await (await s.admin("/api/v1/nodes/gpu-late")).json()) as NodeView).state).toBe("ready");
  });
});

describe("catalog", () => {
  test("PUT creates (201) then replaces (200) with a new revision; unchanged stays", async () => {
    const a = await s.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["llama3-8b"] })) });
    expect(a.status).toBe(201);
    const b = await s.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["llama3-8b"], replicas: { min: 2 } })) });
    expect(b.status).toBe(200);
    const bj = (await b.json()) as ModelView & { result: string; spec: { idle_timeout: string } };
    expect(bj.result).toBe("configured");
    expect(bj.revision).toBe(2);
    expect(bj.spec.idle_timeout).toBe("1800s");
    const c = (await (await s.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["llama3-8b"], replicas: { min: 2 } })) })).json()) as { result: string; revision: number };
    expect(c).toMatchObject({ result: "unchanged", revision: 2 });
  });

  test("GET by alias resolves to the model; GET → PUT round-trips unchanged", async () => {
    const got = (await (await s.admin("/api/v1/models/llama3-8b")).json()) as ModelView & { spec: Record<string, unknown> };
    expect(got.name).toBe("llama-3.1-8b");
    const again = (await (await s.admin("/api/v1/models/llama-3.1-8b", { method: "PUT", body: JSON.stringify(got.spec) })).json()) as { result: string };
    expect(again.result).toBe("unchanged");
  });

  test("an alias taken by another model is 409 naming both; a name that is another's alias too", async () => {
    const r = await s.admin("/api/v1/models/other", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["llama3-8b"] })) });
    expect(r.status).toBe(409);
    const body = (await r.json()) as { error: { message: string; issues: { path: string; message: string }[] } };
    expect(body.error.message).toBe('aliases[0]: alias "llama3-8b" of model "other" is already an alias of model "llama-3.1-8b"');
    expect(body.error.issues).toEqual([{ path: "aliases[0]", message: 'alias "llama3-8b" of model "other" is already an alias of model "llama-3.1-8b"' }]);
    const n = await s.admin("/api/v1/models/llama3-8b", { method: "PUT", body: JSON.stringify({ ...modelBody(), name: "llama3-8b" }) });
    expect(n.status).toBe(409);
  });

  test("a bad model body is 400 naming each field; a body name that differs from the URL is refused", async () => {
    const r = await s.admin("/api/v1/models/bad", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "tgi", gpu_class: H, gpus: 0 }] }) });
    expect(r.status).toBe(400);
    const issues = ((await r.json()) as { error: { issues: { path: string }[] } }).error.issues.map((i) => i.path);
    expect(issues).toEqual(expect.arrayContaining(["profiles[0].engine", "profiles[0].gpus"]));
    const m = await s.admin("/api/v1/models/bad", { method: "PUT", body: JSON.stringify({ ...modelBody(), name: "other-name" }) });
    expect(m.status).toBe(400);
    expect(((await m.json()) as { error: { message: string } }).error.message).toContain("does not match");
    expect((await s.admin("/api/v1/models/bad", { method: "PUT", body: "{" })).status).toBe(400);
    expect((await s.admin("/api/v1/models/bad")).status).toBe(404);
  });

  test("a MIG profile asking for gpus > 1 is refused at PUT and at apply, naming the field", async () => {
    const mig = { profiles: [{ name: "mig", engine: "vllm", gpu_class: "A100-80GB/3g.40gb", gpus: 2 }] };
    const put = await s.admin("/api/v1/models/mig-two", { method: "PUT", body: JSON.stringify(mig) });
    expect(put.status).toBe(400);
    const pj = (await put.json()) as { error: { issues: { path: string; message: string }[] } };
    expect(pj.error.issues).toEqual([{ path: "profiles[0].gpus", message: "one CUDA process can use only one MIG device (NVIDIA MIG user guide): gpus must be 1 for a MIG class" }]);
    const apply = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [{ name: "mig-two", ...mig }] }) });
    expect(apply.status).toBe(400);
    expect(((await apply.json()) as { error: { issues: { path: string }[] } }).error.issues.map((i) => i.path)).toEqual(["models[mig-two].profiles[0].gpus"]);
    expect((await s.admin("/api/v1/models/mig-two")).status).toBe(404);
  });

  test("a profile's start_timeout round-trips GET → PUT in words", async () => {
    const body = { profiles: [{ name: "p", engine: "vllm", gpu_class: H, start_timeout: "45m" }] };
    expect((await s.admin("/api/v1/models/slow-start", { method: "PUT", body: JSON.stringify(body) })).status).toBe(201);
    const got = (await (await s.admin("/api/v1/models/slow-start")).json()) as { spec: { profiles: { start_timeout: unknown }[] } };
    expect(got.spec.profiles[0]!.start_timeout).toBe("2700s");
    const again = (await (await s.admin("/api/v1/models/slow-start", { method: "PUT", body: JSON.stringify(got.spec) })).json()) as { result: string };
    expect(again.result).toBe("unchanged");
    await s.admin("/api/v1/models/slow-start", { method: "DELETE" });
  });

  test("apply: a whole file, all or none", async () => {
    const ok = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [{ name: "m1", ...modelBody() }, { name: "m2", ...modelBody() }] }) });
    expect(ok.status).toBe(200);
    expect(((await ok.json()) as { results: { message: string }[] }).results.map((r) => r.message)).toEqual(["model/m1 created", "model/m2 created"]);
    // m3 is fine, m4 steals an alias: neither lands.
    const bad = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [{ name: "m3", ...modelBody() }, { name: "m4", ...modelBody({ aliases: ["llama3-8b"] }) }] }) });
    expect(bad.status).toBe(409);
    expect((await s.admin("/api/v1/models/m3")).status).toBe(404);
    const invalid = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [{ name: "m5", ...modelBody({ replicas: { min: -1 } }) }] }) });
    expect(((await invalid.json()) as { error: { issues: { path: string }[] } }).error.issues[0]!.path).toBe("models[m5].replicas.min");
  });

  test("apply names every problem of a file in one answer, by model name, and changes nothing", async () => {
    const models = [
      { name: "ok-1", ...modelBody() },
      { name: "typo", ...modelBody({ idle_timout: "5m", replicas: { min: 3, max: 1 } }) },
      { name: "bad-class", profiles: [{ name: "p", engine: "tgi", gpu_class: H }] },
      { name: "thief", ...modelBody({ aliases: ["llama3-8b"] }) },
      { name: "twin", ...modelBody({ aliases: ["ok-1"] }) },
      { name: 7, ...modelBody() },
    ];
    const r = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models, extra: 1 }) });
    expect(r.status).toBe(400);
    const e = ((await r.json()) as { error: { message: string; issues: { path: string; message: string }[] } }).error;
    expect(e.issues.map((i) => `${i.path}: ${i.message}`)).toEqual([
      "extra: unknown key (expected one of: models)",
      "models[typo].idle_timout: unknown key; did you mean idle_timeout?",
      "models[typo].replicas.max: max (1) is below min (3)",
      'models[bad-class].profiles[0].engine: Invalid option: expected one of "vllm"|"sglang"|"llama.cpp"|"fake"',
      // A conflict with the stored catalog, found although other models are wrong.
      'models[thief].aliases[0]: alias "llama3-8b" of model "thief" is already an alias of model "llama-3.1-8b"',
      'models[twin].aliases[0]: "ok-1" is already used by model "ok-1"',
      "models[5].name: Invalid input: expected string, received number",
    ]);
    expect(e.message).toBe("extra: unknown key (expected one of: models) (and 6 more problems)");
    for (const n of ["ok-1", "typo", "thief", "twin"]) expect((await s.admin(`/api/v1/models/${n}`)).status).toBe(404);
  });

  test("DELETE by name or alias; then 404", async () => {
    await s.admin("/api/v1/models/tmp", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["tmp-alias"] })) });
    expect((await s.admin("/api/v1/models/tmp-alias", { method: "DELETE" })).status).toBe(200);
    expect((await s.admin("/api/v1/models/tmp")).status).toBe(404);
    expect((await s.admin("/api/v1/models/tmp", { method: "DELETE" })).status).toBe(404);
    // the alias is free again
    expect((await s.admin("/api/v1/models/tmp2", { method: "PUT", body: JSON.stringify(modelBody({ aliases: ["tmp-alias"] })) })).status).toBe(201);
  });

  test("model names with a slash work in the URL", async () => {
    const r = await s.admin("/api/v1/models/meta-llama/Llama-3.1-8B", { method: "PUT", body: JSON.stringify(modelBody()) });
    expect(r.status).toBe(201);
    expect(((await (await s.admin("/api/v1/models/meta-llama%2FLlama-3.1-8B")).json()) as ModelView).name).toBe("meta-llama/Llama-3.1-8B");
  });
});

describe("nodes, events, summary", () => {
  test("cordon, uncordon, drain change state with kubectl-style messages; unknown node 404", async () => {
    await s.agent(heartbeat({ name: "gpu-03", gpus: [H] }));
    const c = (await (await s.admin("/api/v1/nodes/gpu-03/cordon", { method: "POST" })).json()) as { message: string };
    expect(c.message).toBe("node/gpu-03 cordoned");
    expect(((await (await s.admin("/api/v1/nodes/gpu-03/cordon", { method: "POST" })).json()) as { message: string }).message).toBe("node/gpu-03 already cordoned");
    expect(((await (await s.admin("/api/v1/nodes/gpu-03")).json()) as NodeView).state).toBe("cordoned");
    await s.admin("/api/v1/nodes/gpu-03/uncordon", { method: "POST" });
    expect(((await (await s.admin("/api/v1/nodes/gpu-03")).json()) as NodeView).state).toBe("ready");
    await s.admin("/api/v1/nodes/gpu-03/drain", { method: "POST" });
    expect(((await (await s.admin("/api/v1/nodes/gpu-03")).json()) as NodeView).state).toBe("draining");
    expect((await s.admin("/api/v1/nodes/nope/cordon", { method: "POST" })).status).toBe(404);
    expect((await s.admin("/api/v1/nodes/nope")).status).toBe(404);
  });

  test("events record what happened, newest last, and can be followed with ?after", async () => {
    const all = (await (await s.admin("/api/v1/events?limit=1000")).json()) as { id: number; kind: string; subject: string }[];
    expect(all.some((e) => e.kind === "node.registered" && e.subject === "node/gpu-01")).toBe(true);
    expect(all.some((e) => e.kind === "node.cordoned" && e.subject === "node/gpu-03")).toBe(true);
    expect(all.some((e) => e.kind === "model.created" && e.subject === "model/llama-3.1-8b")).toBe(true);
    const last = all.at(-1)!.id;
    await s.admin("/api/v1/nodes/gpu-03/uncordon", { method: "POST" });
    const next = (await (await s.admin(`/api/v1/events?after=${last}`)).json()) as { kind: string }[];
    expect(next.map((e) => e.kind)).toEqual(["node.uncordoned"]);
    expect((await s.admin("/api/v1/events?limit=0")).status).toBe(400);
  });

  test("the summary counts what the tables list", async () => {
    const summary = (await (await s.admin("/api/v1/summary")).json()) as Summary;
    const nodes = (await (await s.admin("/api/v1/nodes")).json()) as NodeView[];
    const models = (await (await s.admin("/api/v1/models")).json()) as ModelView[];
    expect(summary.nodes.total).toBe(nodes.length);
    expect(summary.models.total).toBe(models.length);
    expect(summary.gpus.reduce((a, g) => a + g.total, 0)).toBe(nodes.reduce((a, n) => a + n.gpu_total, 0));
    expect(summary.unplaceable).toEqual(models.filter((m) => m.unplaceable).map((m) => m.name).sort());
    expect(summary.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(summary.store).toEqual([]);
  });

  test("unknown routes are 404 in the error shape; bodies over the limit are 413", async () => {
    const r = await s.admin("/api/v1/nothing");
    expect(r.status).toBe(404);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("not_found");
    const big = await s.admin("/api/v1/apply", { method: "POST", body: "x".repeat(9 * 1024 * 1024) });
    expect(big.status).toBe(413);
  });
});

describe("engines in the node view", () => {
  test("the engines a heartbeat reports are in GET /nodes/NAME; a node that reports none has an empty list", async () => {
    const engines = [
      { engine: "vllm", version: "0.11.0", error: null },
      { engine: "sglang", version: null, error: "No module named 'sglang'" },
    ];
    expect((await s.agent({ ...heartbeat({ name: "gpu-eng", gpus: [H] }), engines })).status).toBe(200);
    expect(((await (await s.admin("/api/v1/nodes/gpu-eng")).json()) as NodeView).engines).toEqual(engines);
    expect((await s.agent(heartbeat({ name: "gpu-eng", gpus: [H] }))).status).toBe(200);
    expect(((await (await s.admin("/api/v1/nodes/gpu-eng")).json()) as NodeView).engines).toEqual([]);
  });
});

describe("GPU discovery problems reach the node view", () => {
  // The driver failure of test/fixtures/nvidia-smi/unhealthy-gpu-outputs.txt
  // (ci-for-research/self-hosted-runners#40), as the agent words it.
  const DRIVER =
    "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running: this node reports no GPUs";

  test("a heartbeat's discovery error and GPU reasons are in the node, the node list and the summary; a good heartbeat clears them", async () => {
    expect((await s.agent({ ...heartbeat({ name: "gpu-dead" }), discovery_error: DRIVER })).status).toBe(200);
    const hb = heartbeat({ name: "gpu-mig", gpus: [H, H], unhealthy: [1] });
    hb.gpus[1]!.reason = "MIG mode with no GPU instances";
    expect((await s.agent(hb)).status).toBe(200);

    const dead = (await (await s.admin("/api/v1/nodes/gpu-dead")).json()) as NodeView;
    expect(dead).toMatchObject({ state: "ready", gpu_total: 0, discovery_error: DRIVER });
    const mig = (await (await s.admin("/api/v1/nodes/gpu-mig")).json()) as NodeView;
    expect(mig.discovery_error).toBeNull();
    expect(mig.gpus.map((g) => [g.healthy, g.reason])).toEqual([[true, null], [false, "MIG mode with no GPU instances"]]);
    const list = (await (await s.admin("/api/v1/nodes")).json()) as NodeView[];
    expect(list.find((n) => n.name === "gpu-dead")!.discovery_error).toBe(DRIVER);
    const summary = (await (await s.admin("/api/v1/summary")).json()) as Summary;
    expect(summary.gpu_discovery).toContainEqual({ node: "gpu-dead", gpus: 0, error: DRIVER });
    expect(summary.unhealthy_gpus).toContainEqual({ reason: "MIG mode with no GPU instances", gpus: 1, nodes: ["gpu-mig"] });

    expect((await s.agent(heartbeat({ name: "gpu-dead", gpus: [H] }))).status).toBe(200);
    expect(((await (await s.admin("/api/v1/nodes/gpu-dead")).json()) as NodeView).discovery_error).toBeNull();
  });

  test("an oversized discovery error or GPU reason is refused naming the field", async () => {
    const long = await s.agent({ ...heartbeat({ name: "gpu-long" }), discovery_error: "x".repeat(5000) });
    expect(long.status).toBe(400);
    expect(JSON.stringify(await long.json())).toContain("discovery_error");
    const hb = heartbeat({ name: "gpu-long", gpus: [H], unhealthy: [0] });
    hb.gpus[0]!.reason = "y".repeat(1000);
    const r = await s.agent(hb);
    expect(r.status).toBe(400);
    expect(JSON.stringify(await r.json())).toContain("gpus.0.reason");
  });
});

describe("weights revisions over HTTP", () => {
  const [A, B, D] = ["a", "b", "d"].map((c) => c.repeat(40)) as [string, string, string];

  test("a model's revision is stored and shown; a short hash is refused naming the field", async () => {
    const bad = await s.admin("/api/v1/models/org%2Fpinned", { method: "PUT", body: JSON.stringify(modelBody({ revision: "abc1234" })) });
    expect(bad.status).toBe(400);
    const issues = ((await bad.json()) as { error: { issues: { path: string; message: string }[] } }).error.issues;
    expect(issues.map((i) => i.path)).toEqual(["revision"]);
    expect(issues[0]!.message).toContain("40-character");
    const ok = await s.admin("/api/v1/models/org%2Fpinned", { method: "PUT", body: JSON.stringify(modelBody({ revision: D, replicas: { min: 0, max: 1 } })) });
    expect(ok.status).toBeLessThan(300);
    expect(((await (await s.admin("/api/v1/models/org%2Fpinned")).json()) as { spec: { revision?: string } }).spec.revision).toBe(D);
  });

  test("two nodes heartbeat different newest revisions: both shards are assigned the one they share", async () => {
    // A class of their own, so the other tests' models do not take these nodes' GPUs first.
    const R = "RTX-REV-48GB";
    const nodes = ["rev-1", "rev-2"];
    const revs: Record<string, string[]> = { "rev-1": [A, B], "rev-2": [D, B] };
    for (const n of nodes) expect((await s.agent({ ...heartbeat({ name: n, fabrics: ["ib-rev"], gpus: [R, R], models: ["org/shared"] }), model_revisions: { "org/shared": revs[n] } })).status).toBe(200);
    const put = await s.admin("/api/v1/models/org%2Fshared", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "p", engine: "vllm", gpu_class: R, gpus: 2, nodes: 2 }] }) });
    expect(put.status).toBeLessThan(300);
    await s.tick();
    const got: { model: string; revision: string | null }[] = [];
    for (const n of nodes) {
      const res = await s.agent({ ...heartbeat({ name: n, fabrics: ["ib-rev"], gpus: [R, R], models: ["org/shared"] }), model_revisions: { "org/shared": revs[n] } });
      got.push(...((await res.json()) as { assignments: { model: string; revision: string | null }[] }).assignments.filter((a) => a.model === "org/shared"));
    }
    expect(got.map((a) => a.revision)).toEqual([B, B]);
  });
});
