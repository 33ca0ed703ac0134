// The OpenAPI document against the server it describes: a valid 3.1 document; one operation
// for every route Hono registered and none it did not; the documented security is what the
// server enforces; and real requests and answers validate against the documented schemas.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
// ajv comes with the OpenAPI validator; it is an independent check of the generated JSON Schema.
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { ROUTES, type RouteDoc } from "../../src/api/openapi";
import { ApiErrorSchema } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";

type Json = Record<string, any>;

/** Routes of the admin listener that are not the API: the dashboard's HTML pages. */
const NOT_API = [/^\/ui(\/|$)/];
const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"];

let s: TestServer;
let doc: Json;
let ajv: Ajv2020;

beforeAll(async () => {
  s = await testServer();
  const res = await s.admin("/api/v1/openapi.json");
  expect(res.status).toBe(200);
  doc = (await res.json()) as Json;
  ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema({ components: doc.components }, "openapi");
});
afterAll(() => s.stop());

/** Hono's `:name` and `:name{.+}` as OpenAPI's `{name}`. */
const openApiPath = (honoPath: string) => honoPath.replace(/:(\w+)(\{[^}]*\})?/g, "{$1}");

function operations(): { key: string; path: string; method: string; op: Json }[] {
  const out = [];
  for (const [path, item] of Object.entries(doc.paths as Json))
    for (const [method, op] of Object.entries(item as Json)) if (METHODS.includes(method)) out.push({ key: `${method.toUpperCase()} ${path}`, path, method, op: op as Json });
  return out;
}

function operation(operationId: string) {
  const found = operations().find((o) => o.op.operationId === operationId);
  if (!found) throw new Error(`no operation ${operationId} in the document`);
  return found;
}

const deref = (x: Json): Json => (typeof x.$ref === "string" ? (x.$ref as string).slice(2).split("/").reduce((o: Json, k) => o[k], doc) : x);

/** Validates data against a schema taken from the document; returns ajv's errors, or null. */
function validate(schema: Json, data: unknown): unknown {
  const rooted = JSON.parse(JSON.stringify(schema).replaceAll('"#/components/', '"openapi#/components/'));
  const check = ajv.compile(rooted);
  return check(data) ? null : check.errors;
}

/**
 * Sends a request for a documented operation and checks both sides against the document: the
 * request body against its requestBody schema, and the answer's status and body against the
 * responses it lists.
 */
async function exchange(operationId: string, url: string, init: RequestInit & { json?: unknown }, expectStatus: number): Promise<{ status: number; body: any }> {
  const { method, op } = operation(operationId);
  const { json, ...rest } = init;
  if (json !== undefined) {
    const schema = op.requestBody?.content?.["application/json"]?.schema;
    expect(schema).toBeDefined();
    expect(validate(schema, json)).toBeNull();
  }
  // Agent routes: gpu-01's credential once it has one (from its first heartbeat), else the join token.
  const agentOp = op.security.some((x: Json) => x.joinToken || x.nodeCredential);
  const token = op.security.length === 0 ? undefined : agentOp ? (s.credentials.get("gpu-01") ?? s.joinToken) : s.adminToken;
  const res = await fetch(`${s.adminUrl}${url}`, {
    method: method.toUpperCase(),
    ...rest,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), "content-type": "application/json", ...(rest.headers as Record<string, string>) },
    ...(json !== undefined ? { body: JSON.stringify(json) } : {}),
  });
  expect(res.status).toBe(expectStatus);
  const documented = op.responses[String(res.status)];
  if (!documented) throw new Error(`${operationId} answered ${res.status}, which the document does not list`);
  const text = await res.text();
  // Every answer exchanged here is JSON with a documented schema, made from a zod schema.
  const media = deref(documented).content?.["application/json"];
  expect(media?.schema).toBeDefined();
  const body = JSON.parse(text);
  if (agentOp && res.status === 200 && body.credential) s.credentials.set("gpu-01", body.credential);
  const errors = validate(media.schema, body);
  if (errors) throw new Error(`${operationId} ${res.status} does not match its documented schema: ${JSON.stringify(errors, null, 1)}\n${text.slice(0, 2000)}`);
  // And against the zod schema the document was made from; zod strips unknown keys, so equality means none.
  const ok = (ROUTES as Record<string, RouteDoc>)[operationId]!.ok.find((o) => o.status === res.status);
  const zodSchema = res.status >= 400 ? ApiErrorSchema : ok?.schema;
  expect(zodSchema).toBeDefined();
  expect(zodSchema!.parse(body)).toEqual(body);
  return { status: res.status, body };
}

describe("the document", () => {
  test("is a valid OpenAPI 3.1 document naming this server's version", async () => {
    const v = new Validator();
    const res = await v.validate(doc);
    if (!res.valid) throw new Error(JSON.stringify(res.errors, null, 1));
    expect(v.version).toBe("3.1");
    expect(doc.openapi).toStartWith("3.1.");
    const health = (await (await fetch(`${s.adminUrl}/healthz`)).json()) as { version: string };
    expect(doc.info.version).toBe(health.version);
  });

  test("needs the admin token", async () => {
    expect((await fetch(`${s.adminUrl}/api/v1/openapi.json`)).status).toBe(401);
    expect((await fetch(`${s.adminUrl}/api/v1/openapi.json`, { headers: { authorization: `Bearer ${s.joinToken}` } })).status).toBe(401);
  });

  test("documents every registered route, and only those", () => {
    const registered = s.adminApp.routes
      .filter((r) => r.method !== "ALL" && !NOT_API.some((re) => re.test(r.path)))
      .map((r) => `${r.method} ${openApiPath(r.path)}`);
    const documented = operations().map((o) => o.key);
    expect(new Set(registered).size).toBe(registered.length);
    expect([...registered].sort()).toEqual([...documented].sort());
    // The registry in code is what the document lists.
    expect(Object.values(ROUTES).map((r) => `${r.method.toUpperCase()} ${r.path}`).sort()).toEqual([...documented].sort());
  });

  test("operation ids are unique, path parameters match the templates, every $ref resolves", () => {
    const ids = operations().map((o) => o.op.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { path, op } of operations()) {
      const inTemplate = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      const declared = (op.parameters ?? []).filter((p: Json) => p.in === "path").map((p: Json) => p.name).sort();
      expect(declared).toEqual(inTemplate);
    }
    const refs = JSON.stringify(doc).matchAll(/"\$ref":"([^"]+)"/g);
    for (const [, ref] of refs) {
      expect(ref).toStartWith("#/");
      expect(deref({ $ref: ref! })).toBeDefined();
    }
  });

  test("the documented security is what the server enforces", async () => {
    const url = (path: string) => s.adminUrl + path.replace(/\{\w+\}/g, "x");
    // Only /healthz needs no token; it answers without one.
    const open = operations().filter((o) => o.op.security.length === 0);
    expect(open.map((o) => o.key)).toEqual(["GET /healthz"]);
    for (const { key, path, method } of open) expect((await fetch(url(path), { method: method.toUpperCase() })).status, key).not.toBe(401);
    // Every other operation names one scheme and refuses no token and the wrong one.
    const secured = operations().filter((o) => o.op.security.length > 0);
    expect(secured.length).toBe(operations().length - 1);
    for (const { key, path, method, op } of secured) {
      const bare = await fetch(url(path), { method: method.toUpperCase() });
      const wrong = await fetch(url(path), { method: method.toUpperCase(), headers: { authorization: `Bearer ${op.security[0]?.adminToken ? s.joinToken : s.adminToken}` } });
      expect(Object.keys(op.security[0]).length, key).toBe(1);
      expect(Object.keys(doc.components.securitySchemes)).toContain(Object.keys(op.security[0])[0]!);
      expect(bare.status, key).toBe(401);
      expect(wrong.status, key).toBe(401);
      expect(op.responses["401"], key).toBeDefined();
    }
  });

  test("request bodies are described as clients send them: defaults optional, durations in words", () => {
    const spec = doc.components.schemas.ModelSpec;
    expect(spec.required).toEqual(["name", "profiles"]);
    const idle = spec.properties.idle_timeout as { type?: string[]; anyOf?: { type: string }[] };
    expect(idle.type ?? idle.anyOf!.map((a) => a.type)).toEqual(["string", "number"]);
    expect(doc.components.schemas.ModelSpecPut.required).toEqual(["profiles"]);
    expect(validate({ $ref: "#/components/schemas/ModelSpec" }, { name: "a/../b", profiles: [{ name: "p", engine: "vllm", gpu_class: "H100" }] })).not.toBeNull();
    expect(validate({ $ref: "#/components/schemas/ModelSpec" }, { name: "a/b", profiles: [{ name: "p", engine: "vllm", gpu_class: "H100" }] })).toBeNull();
    const events = operation("events").op.parameters.map((p: Json) => [p.name, p.in, p.required, p.schema.type]);
    expect(events).toEqual([
      ["after", "query", false, "integer"],
      ["limit", "query", false, "integer"],
      ["subject", "query", false, "string"],
    ]);
  });
});

describe("real answers match the documented schemas", () => {
  const H = "H100-80GB";
  const spec = { aliases: ["llama3"], replicas: { min: 1 }, idle_timeout: "15m", profiles: [{ name: "h100", engine: "vllm", gpu_class: H, gpus: 1 }] };

  test("a node, a model and a ready replica, through every read route", async () => {
    const hb = heartbeat({ name: "gpu-01", fabrics: ["ib-a"], gpus: [H, H], models: ["llama"] });
    // Its made-up address comes from 127.0.0.1: allowed, as an operator would.
    await s.seed.allowAddress("gpu-01", hb.address);
    await exchange("heartbeat", "/agent/v1/heartbeat", { json: hb }, 200);
    expect((await exchange("putModel", "/api/v1/models/llama", { json: spec }, 201)).body.result).toBe("created");
    expect((await exchange("putModel", "/api/v1/models/llama", { json: { name: "llama", ...spec } }, 200)).body.result).toBe("unchanged");
    await s.tick();
    const assigned = await exchange("assignments", "/agent/v1/assignments?node=gpu-01&wait_ms=0", {}, 200);
    const a = assigned.body.assignments[0];
    expect(a).toBeDefined();
    await exchange("heartbeat", "/agent/v1/heartbeat", { json: { ...hb, replicas: [{ id: a.id, state: "ready", port: a.port, error: null }] } }, 200);
    await s.tick();

    const summary = (await exchange("summary", "/api/v1/summary", {}, 200)).body;
    expect(summary.nodes.total).toBe(1);
    expect(summary.replicas.ready).toBe(1);
    expect((await exchange("listNodes", "/api/v1/nodes", {}, 200)).body).toHaveLength(1);
    expect((await exchange("getNode", "/api/v1/nodes/gpu-01", {}, 200)).body.gpus.some((g: Json) => g.in_use_by === a.id)).toBe(true);
    expect((await exchange("listReplicas", "/api/v1/replicas?model=llama3", {}, 200)).body[0].state).toBe("ready");
    expect((await exchange("listModels", "/api/v1/models", {}, 200)).body[0].ready).toBe(1);
    const detail = (await exchange("getModel", "/api/v1/models/llama3", {}, 200)).body;
    expect(detail.spec.idle_timeout).toBe("900s");
    // The detail's spec is a valid PUT body: it round-trips.
    expect((await exchange("putModel", "/api/v1/models/llama", { json: detail.spec }, 200)).body.result).toBe("unchanged");
    expect((await exchange("events", "/api/v1/events?limit=5", {}, 200)).body.length).toBeGreaterThan(0);
    expect((await exchange("health", "/healthz", {}, 200)).body.status).toBe("ok");
  });

  test("every write route's answer", async () => {
    expect((await exchange("cordonNode", "/api/v1/nodes/gpu-01/cordon", {}, 200)).body.changed).toBe(true);
    expect((await exchange("cordonNode", "/api/v1/nodes/gpu-01/cordon", {}, 200)).body.changed).toBe(false);
    await exchange("drainNode", "/api/v1/nodes/gpu-01/drain", {}, 200);
    await exchange("uncordonNode", "/api/v1/nodes/gpu-01/uncordon", {}, 200);
    await exchange("unparkModel", "/api/v1/models/llama/unpark", {}, 200);
    const applied = await exchange("apply", "/api/v1/apply", { json: { models: [{ name: "qwen/qwen3-8b", ...spec, aliases: [] }] } }, 200);
    expect(applied.body.results[0]).toMatchObject({ name: "qwen/qwen3-8b", result: "created" });
    const dry = await exchange("apply", "/api/v1/apply?dry_run=1", { json: { models: [{ name: "qwen/qwen3-8b", ...spec, aliases: [] }, { name: "dry", ...spec, aliases: [] }] } }, 200);
    expect(dry.body.results.map((r: Json) => [r.name, r.result])).toEqual([["qwen/qwen3-8b", "unchanged"], ["dry", "created"]]);
    expect((await exchange("explainModel", "/api/v1/models/qwen/qwen3-8b/explain", {}, 200)).body.model).toBe("qwen/qwen3-8b");
    await exchange("getModel", "/api/v1/models/qwen/qwen3-8b", {}, 200);
    await exchange("deleteModel", "/api/v1/models/qwen/qwen3-8b", {}, 200);
    const key = await exchange("createKey", "/api/v1/keys", { json: { name: "ci", pool: "default" } }, 201);
    expect(key.body.key).toStartWith("sk-llmgw-");
    expect((await exchange("listKeys", "/api/v1/keys", {}, 200)).body).toEqual([
      { name: "ci", pool: "default", team: null, models: null, expires_at: null, rpm: null, tpm: null, max_concurrent: null, budget_tokens: null, budget_gpu_hours: null, budget_period: null, priority: null, created_at: expect.any(String), updated_at: null },
    ]);
    await exchange("revokeKey", "/api/v1/keys/ci", {}, 200);
    const team = await exchange("createTeam", "/api/v1/teams", { json: { name: "search", rpm: 600, budget_gpu_hours: 1.5, budget_period: "week" } }, 201);
    expect(team.body).toMatchObject({ name: "search", rpm: 600, budget_gpu_hours: 1.5, budget_period: "week", keys: [] });
    const teamKey = await exchange("createKey", "/api/v1/keys", { json: { name: "web", team: "search", models: ["llama"], rpm: 60, tpm: 1000, max_concurrent: 2, budget_tokens: 100000, priority: "batch", expires: "30d" } }, 201);
    expect(teamKey.body).toMatchObject({ name: "web", team: "search", models: ["llama"], rpm: 60, priority: "batch", expires_at: expect.any(String) });
    expect((await exchange("updateKey", "/api/v1/keys/web", { json: { rpm: null, models: null, expires: "2099-01-01T00:00:00Z" } }, 200)).body).toMatchObject({ rpm: null, tpm: 1000, models: null, expires_at: "2099-01-01T00:00:00.000Z", updated_at: expect.any(String) });
    expect((await exchange("listTeams", "/api/v1/teams", {}, 200)).body).toEqual([expect.objectContaining({ name: "search", keys: ["web"] })]);
    expect((await exchange("updateTeam", "/api/v1/teams/search", { json: { rpm: null, priority: "batch" } }, 200)).body).toMatchObject({ rpm: null, priority: "batch", budget_gpu_hours: 1.5 });
    expect((await exchange("getTeam", "/api/v1/teams/search", {}, 200)).body.keys).toEqual(["web"]);
    expect((await exchange("deleteTeam", "/api/v1/teams/search", {}, 409)).body.error.message).toContain("web");
    expect((await exchange("deleteTeam", "/api/v1/teams/search?force=1", {}, 200)).body).toMatchObject({ name: "search", revoked: ["web"] });
    const backup = await fetch(`${s.adminUrl}/api/v1/backup`, { headers: { authorization: `Bearer ${s.adminToken}` } });
    expect(backup.status).toBe(200);
    expect(Object.keys(operation("backup").op.responses["200"].content)).toEqual([backup.headers.get("content-type")!]);
    await backup.arrayBuffer();
  });

  test("errors have the documented shape and a documented status", async () => {
    const bad = await exchange("putModel", "/api/v1/models/m", { body: JSON.stringify({ replicas: { min: 2, max: 1 }, profiles: [] }) }, 400);
    expect(bad.body.error.issues.map((i: Json) => i.path)).toContain("profiles");
    await exchange("putModel", "/api/v1/models/m", { body: "{not json" }, 400);
    await exchange("putModel", "/api/v1/models/m", { body: "name: m", headers: { "content-type": "text/yaml" } }, 415);
    await exchange("apply", "/api/v1/apply", { body: JSON.stringify({ models: [{ name: "x".repeat(9 * 1024 * 1024) }] }) }, 413);
    await exchange("getNode", "/api/v1/nodes/nope", {}, 404);
    await exchange("getModel", "/api/v1/models/nope", {}, 404);
    await exchange("revokeKey", "/api/v1/keys/nope", {}, 404);
    await exchange("createKey", "/api/v1/keys", { json: { name: "twice" } }, 201);
    const conflict = await exchange("createKey", "/api/v1/keys", { json: { name: "twice" } }, 409);
    expect(conflict.body.error.issues).toEqual([{ path: "name", message: expect.any(String) }]);
    const noTeam = await exchange("createKey", "/api/v1/keys", { json: { name: "k", team: "nope" } }, 404);
    expect(noTeam.body.error.message).toContain('team "nope" not found');
    const badKey = await fetch(`${s.adminUrl}/api/v1/keys`, { method: "POST", headers: { authorization: `Bearer ${s.adminToken}`, "content-type": "application/json" }, body: JSON.stringify({ name: "k", rpm: 0, budget_gpu_hours: -1, models: Array.from({ length: 257 }, (_, i) => `m${i}`), expires: "soon" }) });
    expect(badKey.status).toBe(400);
    expect(((await badKey.json()) as Json).error.issues.map((i: Json) => i.path).sort()).toEqual(["budget_gpu_hours", "expires", "models", "rpm"]);
    await exchange("updateKey", "/api/v1/keys/nope", { json: { rpm: 5 } }, 404);
    await exchange("getTeam", "/api/v1/teams/nope", {}, 404);
    await exchange("updateTeam", "/api/v1/teams/nope", { json: { rpm: 5 } }, 404);
    await exchange("deleteTeam", "/api/v1/teams/nope", {}, 404);
    await exchange("createTeam", "/api/v1/teams", { json: { name: "t" } }, 201);
    expect((await exchange("createTeam", "/api/v1/teams", { json: { name: "t" } }, 409)).body.error.issues).toEqual([{ path: "name", message: expect.any(String) }]);
    await exchange("events", "/api/v1/events?limit=0", {}, 400);
    await exchange("assignments", "/agent/v1/assignments", {}, 400);
    await exchange("heartbeat", "/agent/v1/heartbeat", { body: JSON.stringify({ node: "a/b" }) }, 400);
  });
});
