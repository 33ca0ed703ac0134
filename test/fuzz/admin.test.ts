// Property-based fuzzing of the admin API (/api/v1/*) against a real head node: every malformed,
// mistyped or hostile body, path and query is answered with a 4xx in the documented error shape
// with a message that names the problem, the server stays up, and a rejected request leaves the
// store exactly as it was.

import { loneSurrogatePath } from "../../src/protocol/common";
import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { CreateKeyBody } from "../../src/protocol/admin";
import { CatalogFile, ModelSpec } from "../../src/protocol/catalog";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";
import { SEED, SCALE, pathParam, query, own, hostile, enc, garbage, contentType, bodies, clip, apiErrorProblems, judgeWrite, judgeRead, serverView, FuzzHarness, assertRuns, type Req } from "../helpers/fuzz";


// ---- the server, its seed, and the checks -------------------------------------------------

let s: TestServer;
const NODES = ["gpu-01", "gpu-02", "cpu-03"];
const validModel = (name: string) => ({
  name,
  aliases: [`${name}-alias`],
  replicas: { min: 1, max: 2 },
  on_demand: false,
  idle_timeout: "30m",
  pool: "default",
  weight: 1,
  placement: "binpack",
  target_inflight: 4,
  profiles: [
    { name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1, nodes: 1, priority: 0, args: ["--max-model-len", "8192"], env: { HF_HOME: "/models" } },
    { name: "a100", engine: "sglang", gpu_class: "A100-80GB", gpus: 2, nodes: 1, priority: 1, args: [], env: {} },
  ],
});
const MODELS = ["llama", "qwen", "org/mistral"];
const KNOWN = [...NODES, ...MODELS, ...MODELS.map((m) => `${m}-alias`), "fz-key"];

async function seedModel(name: string): Promise<void> {
  const r = await s.admin(`/api/v1/models/${name}`, { method: "PUT", body: JSON.stringify(validModel(name)) });
  if (r.status >= 300) throw new Error(`seeding ${name}: ${r.status} ${await r.text()}`);
}

beforeAll(async () => {
  s = await testServer({ cold_start_timeout: "1s" });
  for (const [i, n] of NODES.entries()) {
    const r = await s.agent(heartbeat({ name: n, fabrics: ["ib-a"], gpus: i < 2 ? ["H100-80GB", "H100-80GB"] : [], models: ["llama"] }));
    if (r.status !== 200) throw new Error(`seeding ${n}: ${r.status}`);
  }
  for (const m of MODELS) await seedModel(m);
  await s.seed.modelState("qwen", { parked: true, failures: 5, reason: "engine exited with code 1" });
  console.log(`admin fuzz: seed ${SEED}, scale ${SCALE}`);
});

const h = new FuzzHarness({ server: () => s, base: (s) => s.adminUrl, headers: (s) => ({ authorization: `Bearer ${s.adminToken}` }) });
const { exec, health, run, report, findings, stats } = h;

/** After an accepted write: GET the model back; its spec must parse again to exactly what was accepted. */
async function storedAsAccepted(want: ModelSpec): Promise<string[]> {
  const got = await exec({ method: "GET", path: `/api/v1/models/${want.name}` });
  if (got.status !== 200) return [`GET of an accepted model answers ${got.status}`];
  const spec = (JSON.parse(got.text) as { spec: unknown }).spec;
  const again = ModelSpec.safeParse(spec);
  if (!again.success) return [`the spec GET answers for an accepted model does not parse again — ${again.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`];
  const a = JSON.stringify(again.data);
  const b = JSON.stringify(want);
  if (a === b) return [];
  const diff = Object.keys(want).filter((k) => JSON.stringify((want as Record<string, unknown>)[k]) !== JSON.stringify((again.data as Record<string, unknown>)[k]));
  return [`the stored spec differs from the accepted one — in ${diff.join(", ")}: accepted ${diff.map((k) => `${k}=${JSON.stringify((want as Record<string, unknown>)[k])}`).join(", ")}, GET answers ${diff.map((k) => `${k}=${JSON.stringify((spec as Record<string, unknown>)[k])}`).join(", ")}`];
}

function putBody(name: string, r: Req): unknown {
  const v = serverView(r);
  if (!v.ok) return undefined;
  const body = v.value;
  if (body !== null && typeof body === "object" && !Array.isArray(body) && (body as { name?: unknown }).name === undefined) (body as { name?: unknown }).name = name;
  return body;
}

function putOracle(name: string, r: Req): boolean | undefined {
  if (/%/.test(name)) return undefined;
  const v = serverView(r);
  if (!v.ok) return false;
  const body = v.value;
  if (body !== null && typeof body === "object" && !Array.isArray(body)) {
    const given = (body as { name?: unknown }).name;
    if (given === undefined) (body as { name?: unknown }).name = name;
    else if (given !== name) return false;
  }
  return ModelSpec.safeParse(body).success && !loneSurrogatePath(body);
}

afterAll(async () => {
  if (s) {
    await health();
    await s.stop();
  }
  console.log(`admin fuzz (seed ${SEED}):\n${h.rows()}\nadmin fuzz total: ${h.total} cases`);
});

// ---- the properties ------------------------------------------------------------------------

test("the harness notices a write: a request that changes the store, judged rejected, is a finding", async () => {
  // Drain then uncordon gpu-02: both change a row. Judged as rejections, both must be caught.
  for (const action of ["drain", "uncordon"])
    await run("self-check", { method: "POST", path: `/api/v1/nodes/gpu-02/${action}` }, () => ({ accepted: false, problems: [] }));
  expect(findings.get("self-check: store changed by a rejected request")?.count).toBe(2);
  findings.delete("self-check: store changed by a rejected request");
  stats.delete("self-check");
  h.total -= 2;
});

test("PUT /api/v1/models/{name}: bad bodies are 4xx naming the field, and change nothing", async () => {
  // The URL names the body's model, so the mutation is what the server judges; sometimes the
  // URL is another model or a hostile path, which is its own error.
  const arb = fc.constantFrom(...MODELS, "fz-new").chain((m) =>
    fc.record({
      m: fc.constant(m),
      name: fc.oneof({ weight: 10, arbitrary: fc.constant(m) }, { weight: 1, arbitrary: fc.constantFrom(...MODELS) }, { weight: 1, arbitrary: pathParam(KNOWN) }),
      b: bodies(validModel(m)),
      ct: contentType,
    }),
  );
  await assertRuns(
    arb,
    1500,
    async ({ m, name, b, ct }) => {
      const r: Req = { method: "PUT", path: `/api/v1/models/${name}`, body: b.bytes, ct, note: `${b.note} (valid body was ${m})` };
      await run(
        "PUT /api/v1/models/{name}",
        r,
        judgeWrite(
          [200, 201],
          () => putOracle(name, r),
          () => storedAsAccepted(ModelSpec.parse(putBody(name, r))),
        ),
      );
    },
    1,
  );
  const st = stats.get("PUT /api/v1/models/{name}")!;
  expect(st.rejected / st.cases).toBeGreaterThan(0.6);
  expect(report("PUT /api/v1/models/{name}")).toEqual([]);
}, 120_000);

test("POST /api/v1/apply: bad catalogs are 4xx naming the field, and change nothing", async () => {
  const valid = { models: MODELS.map(validModel) };
  await assertRuns(
    fc.record({ body: bodies(valid), ct: contentType }),
    1000,
    async ({ body, ct }) => {
      const r: Req = { method: "POST", path: "/api/v1/apply", body: body.bytes, ct, note: body.note };
      await run(
        "POST /api/v1/apply",
        r,
        judgeWrite(
          [200],
          () => {
            const v = serverView(r);
            return v.ok && CatalogFile.safeParse(v.value).success && !loneSurrogatePath(v.value);
          },
          async () => {
            const v = serverView(r);
            const file = v.ok ? CatalogFile.parse(v.value) : { models: [] };
            return (await Promise.all(file.models.map(storedAsAccepted))).flat();
          },
        ),
      );
    },
    2,
  );
  const st = stats.get("POST /api/v1/apply")!;
  expect(st.rejected / st.cases).toBeGreaterThan(0.6);
  expect(report("POST /api/v1/apply")).toEqual([]);
}, 120_000);

test("POST /api/v1/keys: bad bodies are 4xx naming the field, and change nothing", async () => {
  await assertRuns(
    fc.record({ body: bodies({ name: "fz-key", pool: "default" }), ct: contentType }),
    300,
    async ({ body, ct }) => {
      const r: Req = { method: "POST", path: "/api/v1/keys", body: body.bytes, ct, note: body.note };
      await run(
        "POST /api/v1/keys",
        r,
        judgeWrite([201], () => {
          const v = serverView(r);
          return v.ok && CreateKeyBody.safeParse(v.value).success && !loneSurrogatePath(v.value);
        }),
      );
    },
    3,
  );
  const st = stats.get("POST /api/v1/keys")!;
  expect(st.rejected / st.cases).toBeGreaterThan(0.6);
  expect(report("POST /api/v1/keys")).toEqual([]);
}, 60_000);

test("paths with hostile names: DELETE models and keys, node actions, unpark, GET by name", async () => {
  const endpoints = [
    { name: "DELETE /api/v1/models/{name}", method: "DELETE", path: (p: string) => `/api/v1/models/${p}`, after: async () => Promise.all(MODELS.map(seedModel)).then(() => undefined) },
    { name: "DELETE /api/v1/keys/{name}", method: "DELETE", path: (p: string) => `/api/v1/keys/${p}` },
    { name: "POST /api/v1/nodes/{name}/cordon", method: "POST", path: (p: string) => `/api/v1/nodes/${p}/cordon` },
    { name: "POST /api/v1/nodes/{name}/uncordon", method: "POST", path: (p: string) => `/api/v1/nodes/${p}/uncordon` },
    { name: "POST /api/v1/nodes/{name}/drain", method: "POST", path: (p: string) => `/api/v1/nodes/${p}/drain` },
    { name: "POST /api/v1/models/{name}/unpark", method: "POST", path: (p: string) => `/api/v1/models/${p}/unpark` },
    { name: "GET /api/v1/models/{name}", method: "GET", path: (p: string) => `/api/v1/models/${p}`, read: true },
    { name: "GET /api/v1/nodes/{name}", method: "GET", path: (p: string) => `/api/v1/nodes/${p}`, read: true },
  ];
  await assertRuns(
    fc.record({ e: fc.constantFrom(...endpoints), p: pathParam(KNOWN), withBody: fc.boolean() }),
    1600,
    async ({ e, p, withBody }) => {
      const r: Req = { method: e.method, path: e.path(p), ...(withBody && e.method !== "GET" ? { body: enc.encode('{"x":1}'), ct: "application/json" } : {}) };
      if (e.read) await run(e.name, r, judgeRead, { readOnly: true });
      else await run(e.name, r, judgeWrite([200]), e.after ? { after: e.after } : {});
    },
    4,
  );
  const writes = [...stats].filter(([k]) => endpoints.some((e) => e.name === k && !e.read)).map(([, st]) => st);
  expect(writes.reduce((a, st) => a + st.rejected, 0) / writes.reduce((a, st) => a + st.cases, 0)).toBeGreaterThan(0.6);
  expect(endpoints.flatMap((e) => report(e.name))).toEqual([]);
}, 120_000);

test("GET /api/v1/events and /api/v1/replicas: garbage queries are 400 naming the parameter; reads change nothing", async () => {
  const endpoints = [
    { name: "GET /api/v1/events?…", path: "/api/v1/events", keys: ["limit", "after", "subject"] },
    { name: "GET /api/v1/replicas?…", path: "/api/v1/replicas", keys: ["model"] },
  ];
  await assertRuns(
    fc.constantFrom(...endpoints).chain((e) => query(e.keys).map((q) => ({ e, q }))),
    1000,
    async ({ e, q }) => {
      await run(e.name, { method: "GET", path: `${e.path}${q}` }, judgeRead, { readOnly: true });
    },
    5,
  );
  expect(endpoints.flatMap((e) => report(e.name))).toEqual([]);
}, 60_000);

test("unknown methods and wrong methods on every route are 4xx in the error shape", async () => {
  const routes = ["/api/v1/summary", "/api/v1/nodes", "/api/v1/nodes/gpu-01", "/api/v1/nodes/gpu-01/cordon", "/api/v1/replicas", "/api/v1/models", "/api/v1/models/llama", "/api/v1/models/llama/unpark", "/api/v1/apply", "/api/v1/keys", "/api/v1/events", "/api/v1/nope", "/api", "/"];
  // Methods Bun's fetch sends as written; a made-up one it turns into GET, so the raw-socket test covers those.
  const methods = ["PATCH", "OPTIONS", "PROPFIND", "PUT", "DELETE", "POST"];
  const allowed = new Set(["PUT /api/v1/models/llama", "DELETE /api/v1/models/llama", "POST /api/v1/models/llama/unpark", "POST /api/v1/nodes/gpu-01/cordon", "DELETE /api/v1/nodes/gpu-01", "POST /api/v1/apply", "POST /api/v1/keys"]);
  await assertRuns(
    fc.record({ route: fc.constantFrom(...routes), method: fc.constantFrom(...methods) }).filter(({ route, method }) => !allowed.has(`${method} ${route}`)),
    300,
    async ({ route, method }) => {
      await run("wrong method", { method, path: route }, (res) => ({ accepted: false, problems: apiErrorProblems(res) }));
    },
    6,
  );
  expect(report("wrong method")).toEqual([]);
}, 60_000);

test("made-up methods on a raw socket get a 4xx or a closed connection, never a hang or a 5xx", async () => {
  const port = Number(new URL(s.adminUrl).port);
  const sendRaw = (head: string) =>
    new Promise<string>((resolve) => {
      const chunks: string[] = [];
      const timer = setTimeout(() => resolve(`TIMEOUT ${chunks.join("")}`), 3000);
      void Bun.connect({
        hostname: "127.0.0.1",
        port,
        socket: {
          open: (sock) => void sock.write(head),
          data: (_sock, d) => void chunks.push(Buffer.from(d).toString()),
          close: () => (clearTimeout(timer), resolve(chunks.join(""))),
          error: () => (clearTimeout(timer), resolve(chunks.join(""))),
        },
      });
    });
  const bad: string[] = [];
  // Bun's HTTP parser answers a request line it cannot read before the app sees it: a tab in
  // the method gets "505 HTTP Version Not Supported". That is the runtime's answer, not ours.
  const runtimeAnswers = new Set(["505"]);
  for (const m of ["FOO", "get", "Put", "DELETE ", "\u0000", "G\tET", "BREW", "GET\r\n"]) {
    const out = await sendRaw(`${m} /api/v1/models/llama HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.adminToken}\r\nConnection: close\r\n\r\n`);
    h.total++;
    const status = /^HTTP\/1\.1 (\d{3})/.exec(out)?.[1];
    if (out.startsWith("TIMEOUT") || (status !== undefined && !status.startsWith("4") && !runtimeAnswers.has(status))) bad.push(`${JSON.stringify(m)} → ${clip(out, 200)}`);
  }
  stats.set("raw socket methods", { cases: 8, rejected: 8, accepted: 0 });
  expect(bad).toEqual([]);
  await health();
});

test("bodies over the 8 MiB limit are 413 body_too_large and change nothing", async () => {
  const big = enc.encode(`{"name":"llama","pad":"${"x".repeat(9 * 1024 * 1024)}"}`);
  for (const [path, method] of [["/api/v1/models/llama", "PUT"], ["/api/v1/apply", "POST"], ["/api/v1/keys", "POST"]] as const) {
    await run(`${method} ${path} (9 MiB)`, { method, path, body: big, ct: "application/json" }, (res) => ({
      accepted: false,
      problems: [...apiErrorProblems(res), ...(res.status === 413 ? [] : [`answered ${res.status}, not 413`])],
    }));
  }
  expect(report("PUT /api/v1/models/llama (9").concat(report("POST /api/v1/apply (9"), report("POST /api/v1/keys (9"))).toEqual([]);
}, 60_000);
