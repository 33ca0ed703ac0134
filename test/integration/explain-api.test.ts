// GET /api/v1/models/{name}/explain and POST /api/v1/apply?dry_run=1 over real HTTP: the
// answers match their schemas, an unknown model is 404 in the usual error shape, and the dry
// run validates as apply does and changes nothing (models, replicas, events).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ApplyDryRunSchema, ApplyResultSchema, ExplanationSchema, type ApplyDryRun, type Explanation, type ModelView } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;
const H = "H100-80GB";
const h100x8 = Array.from({ length: 8 }, () => H);
const eight = (name: string, extra: Record<string, unknown> = {}) => ({ name, replicas: { min: 1, max: 1 }, profiles: [{ name: "h100x8", engine: "vllm", gpu_class: H, gpus: 8 }], ...extra });

beforeAll(async () => {
  s = await testServer();
  for (const name of ["gpu-a", "gpu-b"]) expect((await s.agent(heartbeat({ name, gpus: h100x8 }))).status).toBe(200);
  // qwen takes one node; the other is cordoned: big fits nowhere now, but could.
  expect((await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [eight("qwen", { aliases: ["qwen3"] })] }) })).status).toBe(200);
  await s.tick();
  const qwenOn = (await s.peek.replicas()).find((r) => r.model === "qwen")!.shards[0]!.node;
  const other = qwenOn === "gpu-a" ? "gpu-b" : "gpu-a";
  expect((await s.admin(`/api/v1/nodes/${other}/cordon`, { method: "POST" })).status).toBe(200);
  expect((await s.admin("/api/v1/models/org%2Fbig", { method: "PUT", body: JSON.stringify(eight("org/big")) })).status).toBe(201);
  await s.tick();
});
afterAll(() => s.stop());

async function explain(name: string): Promise<Explanation> {
  const res = await s.admin(`/api/v1/models/${name}/explain`);
  expect(res.status).toBe(200);
  const body = (await res.json()) as Explanation;
  expect(ExplanationSchema.parse(body)).toEqual(body);
  return body;
}

describe("explain", () => {
  test("a model that cannot fit now: the exhausted and the cordoned node, and uncordoning it as the way out", async () => {
    const e = await explain("org%2Fbig");
    expect(e.model).toBe("org/big");
    expect(e.status).toBe("not_now");
    expect(e.profiles[0]!.line).toBe("1 node not ready: cordoned; 1 exhausted: 8/8 H100-80GB used; 0 fit");
    const exhausted = e.profiles[0]!.outcomes.find((o) => o.outcome === "exhausted")!;
    const qwen = (await s.peek.replicas()).find((r) => r.model === "qwen")!;
    expect(exhausted.nodes[0]!.detail).toBe(`8/8 H100-80GB used by ${qwen.id} (qwen, starting)`);
    const cordoned = e.profiles[0]!.outcomes.find((o) => o.outcome === "cordoned")!.nodes[0]!.name;
    expect(e.suggestions.find((x) => x.kind === "uncordon")!.nodes).toEqual([cordoned]);
    // The router has not reported qwen's replica: unknown is not idle, so no eviction is offered.
    expect(e.suggestions.some((x) => x.kind === "evict")).toBe(false);
  });

  test("a model that runs (asked by alias, or with its name unescaped): where, and that nothing is needed", async () => {
    const e = await explain("qwen3");
    expect(e.model).toBe("qwen");
    expect(e.status).toBe("running");
    expect(e.summary).toMatch(/^qwen has what it wants: 0 of 1 ready, 1 starting \(r-\w+ on gpu-[ab] GPU 0,1,2,3,4,5,6,7\); nothing is needed$/);
    expect((await explain("org/big")).model).toBe("org/big");
  });

  test("an unknown model is 404 in the usual error shape", async () => {
    const res = await s.admin("/api/v1/models/nope/explain");
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ error: { code: "not_found", message: 'model "nope" not found' } });
  });

  test("GET /models/{name} itself still answers the model, one whose name ends in /explain too", async () => {
    expect(((await (await s.admin("/api/v1/models/org%2Fbig")).json()) as ModelView).name).toBe("org/big");
    expect((await s.admin("/api/v1/models/tools%2Fexplain", { method: "PUT", body: JSON.stringify({ ...eight("tools/explain"), replicas: { min: 0, max: 1 } }) })).status).toBe(201);
    const got = (await (await s.admin("/api/v1/models/tools/explain")).json()) as ModelView & { status?: string };
    expect(got.name).toBe("tools/explain");
    expect(got.status).toBeUndefined();
    expect((await explain("tools/explain")).model).toBe("tools/explain");
    expect((await s.admin("/api/v1/models/tools%2Fexplain", { method: "DELETE" })).status).toBe(200);
  });
});

describe("apply --dry-run", () => {
  const catalog = {
    models: [
      eight("qwen", { aliases: ["qwen3"] }),
      eight("org/big", { replicas: { min: 1, max: 2 } }),
      { name: "small", replicas: { min: 1, max: 1 }, profiles: [{ name: "one", engine: "vllm", gpu_class: H, gpus: 8 }] },
      { name: "huge", profiles: [{ name: "p", engine: "vllm", gpu_class: H, gpus: 16 }] },
    ],
  };

  test("says what would change and why not, and writes nothing: no model, replica, state or event", async () => {
    const before = s.peek.counts();
    const eventsBefore = await (await s.admin("/api/v1/events?limit=1000")).json();
    const modelsBefore = await (await s.admin("/api/v1/models")).json();
    const res = await s.admin("/api/v1/apply?dry_run=1", { method: "POST", body: JSON.stringify(catalog) });
    expect(res.status).toBe(200);
    const body = (await res.json()) as ApplyDryRun;
    expect(ApplyDryRunSchema.parse(body)).toEqual(body);
    expect(body.results.map((r) => [r.name, r.result, r.verdict])).toEqual([
      ["qwen", "unchanged", "running"],
      ["org/big", "configured", "not_now"],
      ["small", "created", "not_now"],
      ["huge", "created", "never"],
    ]);
    expect(body.results[1]!.message).toBe("model/org/big configured (dry run)");
    expect(body.results[2]!.reason).toStartWith("not now: no H100-80GB node has 8 free GPUs");
    expect(body.results[3]!.reason).toStartWith("can never fit on this fleet: no node has 16 H100-80GB GPUs (the largest has 8)");
    expect(s.peek.counts()).toEqual(before);
    expect(await (await s.admin("/api/v1/events?limit=1000")).json()).toEqual(eventsBefore);
    expect(await (await s.admin("/api/v1/models")).json()).toEqual(modelsBefore);
  });

  test("where a new replica would go once room is made", async () => {
    const cordoned = (await explain("org%2Fbig")).suggestions.find((x) => x.kind === "uncordon")!.nodes![0]!;
    expect((await s.admin(`/api/v1/nodes/${cordoned}/uncordon`, { method: "POST" })).status).toBe(200);
    try {
      const body = (await (await s.admin("/api/v1/apply?dry_run=true", { method: "POST", body: JSON.stringify({ models: [catalog.models[2]] }) })).json()) as ApplyDryRun;
      // org/big is short too and comes first by need, so small may find the node taken: the answer says which.
      const small = body.results[0]!;
      expect(small.result).toBe("created");
      expect(small.placements.length + (small.reason ? 1 : 0)).toBe(1);
      const alone = (await (await s.admin("/api/v1/apply?dry_run=true", { method: "POST", body: JSON.stringify({ models: [{ ...catalog.models[2], profiles: [{ name: "one", engine: "vllm", gpu_class: H, gpus: 8 }] }, eight("org/big", { replicas: { min: 0, max: 1 } })] }) })).json()) as ApplyDryRun;
      expect(alone.results[0]!.placements).toEqual([{ profile: "one", shards: [{ node: cordoned, gpus: [0, 1, 2, 3, 4, 5, 6, 7] }] }]);
      expect(alone.results[0]!.verdict).toBe("fits");
      expect(alone.results[0]!.reason).toBeNull();
    } finally {
      await s.admin(`/api/v1/nodes/${cordoned}/cordon`, { method: "POST" });
    }
  });

  test("validates as apply does: a bad body is 400 naming the field, a conflict 409, a bad flag 400; nothing written", async () => {
    const before = s.peek.counts();
    const bad = await s.admin("/api/v1/apply?dry_run=1", { method: "POST", body: JSON.stringify({ models: [{ name: "x", profiles: [{ name: "p", engine: "tgi", gpu_class: H }] }] }) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { issues: { path: string }[] } }).error.issues.map((i) => i.path)).toContain("models[x].profiles[0].engine");
    const conflict = await s.admin("/api/v1/apply?dry_run=1", { method: "POST", body: JSON.stringify({ models: [eight("other", { aliases: ["qwen3"] })] }) });
    expect(conflict.status).toBe(409);
    const flag = await s.admin("/api/v1/apply?dry_run=maybe", { method: "POST", body: JSON.stringify(catalog) });
    expect(flag.status).toBe(400);
    expect(((await flag.json()) as { error: { issues: { path: string }[] } }).error.issues.map((i) => i.path)).toEqual(["dry_run"]);
    expect(s.peek.counts()).toEqual(before);
  });

  test("without dry_run, apply answers as before and writes", async () => {
    const res = await s.admin("/api/v1/apply", { method: "POST", body: JSON.stringify({ models: [catalog.models[3]] }) });
    const body = (await res.json()) as unknown;
    expect(ApplyResultSchema.parse(body) as unknown).toEqual(body);
    expect(body).toEqual({ results: [{ name: "huge", result: "created", revision: 1, message: "model/huge created" }] });
  });
});
