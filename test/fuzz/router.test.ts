// Property-based fuzzing of the router's OpenAI-compatible listener against a real head node
// with a catalog but no replicas: every malformed or hostile request is answered with a 4xx in
// OpenAI's error shape naming the problem, a request for a known model gets a prompt 503
// model_not_ready with Retry-After (nothing can serve it), the server stays up, and the store
// changes only by the demand a known model's request records.

import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { type TestServer, testServer } from "../helpers/server";
import { Router } from "../../src/router/router";
import { INFERENCE_PATHS } from "../../src/router/dispatch";
import { MALFORMED, chatRequest, engineAnswer, rawEngine, rawRequest } from "../helpers/raw-http";
import { SEED, SCALE, pathParam, query, Raw, toJson, own, hostile, enc, textBody, garbage, contentType, bodies, clip, FuzzHarness, errorAnswer, assertRuns, type Req, type Res, type Judge } from "../helpers/fuzz";
import { ROUTER_DEFAULTS } from "../helpers/router-settings";
import { jsonShape } from "../helpers/json-bodies";

// ---- the server, its catalog, and the checks -----------------------------------------------

let s: TestServer;
const MAX_BODY = 2 * 1024 * 1024;
/** The catalog: name or alias → the pool its model is in. */
const CATALOG = new Map<string, string>([
  ["llama", "default"],
  ["llama-alias", "default"],
  ["org/mistral", "default"],
  ["embed", "batch"],
  ["embed-small", "batch"],
]);
const MODEL_NAMES = [...CATALOG.keys()];

beforeAll(async () => {
  s = await testServer({ max_body_bytes: MAX_BODY, cold_start_timeout: "1s" });
  const put = async (name: string, extra: Record<string, unknown>) => {
    const r = await s.admin(`/api/v1/models/${name}`, { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "vllm", gpu_class: "H100-80GB" }], ...extra }) });
    if (r.status >= 300) throw new Error(`seeding ${name}: ${r.status} ${await r.text()}`);
  };
  await put("llama", { aliases: ["llama-alias"] });
  await put("org/mistral", {});
  await put("embed", { aliases: ["embed-small"], pool: "batch" });
  // No nodes, so nothing is placed: the tick only publishes the catalog to the router.
  await s.tick();
  console.log(`router fuzz: seed ${SEED}, scale ${SCALE}`);
});

const h = new FuzzHarness({
  server: () => s,
  base: (s) => s.routerUrl,
  headers: (_s, r): Record<string, string> => (r.pool !== undefined ? { "x-llmgw-pool": r.pool } : {}),
});
const { found, health, run, report, stats } = h;

/** What is wrong with an error answer in OpenAI's shape; empty when it is a proper one. */
function openAIErrorProblems(res: Res): string[] {
  const { problems: p, error: e } = errorAnswer(res);
  if (e === undefined) return p;
  const keys = Object.keys(e).sort().join(",");
  if (keys !== "code,message,param,type") p.push(`error has keys ${keys}, not code,message,param,type`);
  if (typeof e.message !== "string" || e.message.trim() === "") p.push("error.message empty");
  else if (/internal error/i.test(e.message) && res.status < 500) p.push("message says internal error");
  if (typeof e.type !== "string" || e.type === "") p.push("error.type missing");
  if (e.param !== null && typeof e.param !== "string") p.push("error.param neither a string nor null");
  if (e.code !== null && typeof e.code !== "string") p.push("error.code neither a string nor null");
  return p;
}

let expected503 = 0;

/** What the router must answer to a POST body, from the body alone: 400, 404, 413 or 503 (the limits are the config's defaults). */
function expectedStatus(r: Req): number {
  const bytes = r.body ?? new Uint8Array();
  if (bytes.length > MAX_BODY) return 413;
  // Only the inference endpoints are passed on; any other path is 404 whatever the body.
  if (!(INFERENCE_PATHS as readonly string[]).includes(r.path.split("?")[0]!)) return 404;
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return 400;
  }
  // Nesting and values are counted before the parse, so they come before any field.
  const shape = jsonShape(body);
  if (shape.depth > ROUTER_DEFAULTS.maxJsonDepth) return 400;
  if (shape.values > ROUTER_DEFAULTS.maxJsonValues) return 413;
  if (body === null || typeof body !== "object" || Array.isArray(body)) return 400;
  const model = (body as { model?: unknown }).model;
  if (typeof model !== "string" || model === "") return 400;
  const pool = CATALOG.get(model);
  if (pool === undefined || (r.pool !== undefined && r.pool !== pool)) return 404;
  return 503;
}

/** A POST to /v1/*: the status the body calls for, in OpenAI's shape; 503 only as model_not_ready with Retry-After. */
function judgePost(r: Req): Judge {
  return (res) => {
    const want = expectedStatus(r);
    const problems = res.status === 503 && want === 503 ? [] : openAIErrorProblems(res);
    if (res.status !== want && res.status !== 0) problems.push(`answered another status than the body calls for — ${res.status} where ${want} was due`);
    if (res.status === 400) {
      // A model given with the wrong type is not a missing model: the message should say which.
      const body = (() => {
        try {
          return JSON.parse(new TextDecoder().decode(r.body ?? new Uint8Array())) as unknown;
        } catch {
          return undefined;
        }
      })();
      const given = body !== null && typeof body === "object" && !Array.isArray(body) && Object.prototype.hasOwnProperty.call(body, "model");
      let message = "";
      try {
        message = (JSON.parse(res.text) as { error?: { message?: string } }).error?.message ?? "";
      } catch {
        // not JSON: reported by openAIErrorProblems
      }
      const model = given ? (body as { model: unknown }).model : undefined;
      if (given && typeof model !== "string" && /must provide a model/i.test(message)) problems.push(`says "${message}" for a model that is present but not a string`);
    }
    if (res.status === 503 && want === 503) {
      let e: { code?: string; message?: string } | undefined;
      try {
        e = (JSON.parse(res.text) as { error?: { code?: string; message?: string } }).error;
      } catch {
        problems.push("503 body is not JSON");
      }
      if (e?.code !== "model_not_ready") problems.push(`503 with another code than model_not_ready — ${e?.code}`);
      if (!res.headers?.get("retry-after")) problems.push("503 without Retry-After");
      if (!e?.message) problems.push("503 without a message");
      expected503++;
      return { accepted: true, problems };
    }
    return { accepted: false, problems };
  };
}

afterAll(async () => {
  if (s) {
    await health();
    await s.stop();
  }
  console.log(`router fuzz (seed ${SEED}):\n${h.rows()}\n  (accepted = 503 model_not_ready for a known model: ${expected503}; 200 for reads)\nrouter fuzz total: ${h.total} cases`);
});

// ---- the properties ------------------------------------------------------------------------

const MODEL_VARIANTS = [
  ...MODEL_NAMES, "LLAMA", " llama", "llama ", "llama\u0000", "llama/", "org/", "gpt-4", "", "__proto__", "constructor", "toString", "hasOwnProperty", "valueOf",
  "embed-small\n", "llama-alias\u200b", "x".repeat(100_000),
];
const validRequests = [
  { path: "/v1/chat/completions", body: { model: "llama", messages: [{ role: "user", content: "hi" }], max_tokens: 16, temperature: 0.7, stream: false } },
  { path: "/v1/completions", body: { model: "org/mistral", prompt: "Once upon a time", max_tokens: 16, stream: true } },
  { path: "/v1/embeddings", body: { model: "embed", input: ["a", "b"] } },
];
const POOLS = [undefined, undefined, undefined, undefined, "default", "batch", "", "nope", "\u00e9", "x".repeat(300)];

test("POST /v1/chat/completions, /v1/completions, /v1/embeddings: bad bodies are 400/404/413 in OpenAI's shape; known models 503", async () => {
  // The model field decides everything the router does with a body, so it gets its own mutator.
  const modelMutation = fc.record({ v: fc.constantFrom(...validRequests), m: fc.oneof(fc.constantFrom<unknown>(...MODEL_VARIANTS), hostile) }).map(({ v, m }) => ({
    v,
    b: textBody(toJson({ ...v.body, model: m }), `model = ${m instanceof Raw ? String(m) : clip(JSON.stringify(m) ?? "undefined", 60)}`),
  }));
  const arb = fc.record({
    vb: fc.oneof({ weight: 2, arbitrary: modelMutation }, { weight: 3, arbitrary: fc.constantFrom(...validRequests).chain((v) => bodies(v.body).map((b) => ({ v, b }))) }),
    path: fc.oneof({ weight: 8, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom("/v1/x", "/v1/chat/completions?x=%ZZ", "/v1/models", "/v1/%00", "/v1/chat/completions/", "/v1//completions") }),
    ct: contentType,
    pool: fc.constantFrom(...POOLS),
  });
  await assertRuns(
    arb,
    2400,
    async ({ vb, path, ct, pool }) => {
      const r: Req = { method: "POST", path: path ?? vb.v.path, body: vb.b.bytes, ct, ...(pool !== undefined ? { pool } : {}), note: vb.b.note };
      await run(`POST ${vb.v.path}`, r, judgePost(r));
    },
    21,
  );
  const all = validRequests.map((v) => stats.get(`POST ${v.path}`)!);
  const cases = all.reduce((a, st) => a + st.cases, 0);
  // Known models are 503 (counted as accepted); the rest must be most of the cases.
  expect(all.reduce((a, st) => a + st.rejected, 0) / cases).toBeGreaterThan(0.5);
  expect(validRequests.flatMap((v) => report(`POST ${v.path}`))).toEqual([]);
}, 120_000);

test("GET /v1/models and /v1/models/{id}: garbage queries and hostile ids are answered, 404 in OpenAI's shape for unknown ids", async () => {
  const ids = fc.oneof({ weight: 3, arbitrary: pathParam(MODEL_NAMES) }, { weight: 1, arbitrary: fc.constantFrom(...MODEL_NAMES.map(encodeURIComponent), ...MODEL_NAMES) });
  const arb = fc.oneof(
    query(["limit", "after", "model", "pool"]).map((q) => ({ kind: "list" as const, path: `/v1/models${q}` })),
    ids.map((id) => ({ kind: "one" as const, path: `/v1/models/${id}`, id })),
  );
  await assertRuns(
    arb,
    900,
    async (c) => {
      if (c.kind === "list") {
        await run("GET /v1/models", { method: "GET", path: c.path }, (res) => {
          if (res.status !== 200) return { accepted: false, problems: [`answered ${res.status}`, ...openAIErrorProblems(res)] };
          const j = JSON.parse(res.text) as { object?: string; data?: { id: string }[] };
          const got = (j.data ?? []).map((d) => d.id).sort();
          return { accepted: true, problems: j.object === "list" && JSON.stringify(got) === JSON.stringify([...MODEL_NAMES].sort()) ? [] : ["the list is not the catalog"] };
        });
        return;
      }
      // The id as the router sees it: after the URL parser removed dot segments, then decoded.
      const pathname = new URL(c.path, "http://x").pathname;
      let id: string | undefined;
      try {
        id = pathname.startsWith("/v1/models/") ? decodeURIComponent(pathname.slice("/v1/models/".length)) : undefined;
      } catch {
        id = undefined; // not decodable: no model has that name
      }
      await run("GET /v1/models/{id}", { method: "GET", path: c.path }, (res) => {
        const known = id !== undefined && CATALOG.has(id);
        if (res.status === 200) return { accepted: true, problems: known || pathname === "/v1/models" ? [] : [`200 for an unknown id`] };
        const problems = openAIErrorProblems(res);
        if (res.status !== 404 && res.status !== 400 && res.status < 500) problems.push(`answered ${res.status}, not 404 (or 400 for an id that cannot be decoded)`);
        return { accepted: false, problems };
      });
    },
    22,
  );
  expect([...report("GET /v1/models")]).toEqual([]);
}, 60_000);

test("wrong methods and unknown paths on the router are 404 in OpenAI's shape", async () => {
  const routes = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/v1/models/llama", "/", "/v2/chat/completions", "/v1", "/metrics/x", "/healthz/x", "/%00"];
  const methods = ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "POST"];
  await assertRuns(
    fc.record({ route: fc.constantFrom(...routes), method: fc.constantFrom(...methods) }).filter(({ route, method }) => !(method === "POST" && route.startsWith("/v1/")) && !(method === "GET" && route.startsWith("/v1/models"))),
    300,
    async ({ route, method }) => {
      await run("wrong method", { method, path: route }, (res) => ({ accepted: false, problems: openAIErrorProblems(res) }));
    },
    23,
  );
  expect(report("wrong method")).toEqual([]);
}, 60_000);

test("bodies over the limit are 413 request_too_large, also when nothing declares their length up front", async () => {
  const pad = (n: number) => enc.encode(JSON.stringify({ model: "llama", messages: [], pad: "x".repeat(n) }));
  for (const [label, body] of [["3 MiB", pad(3 * 1024 * 1024)], ["5 MiB", pad(5 * 1024 * 1024)]] as const) {
    const r: Req = { method: "POST", path: "/v1/chat/completions", body, ct: "application/json", note: label };
    await run(`POST /v1/chat/completions (${label})`, r, judgePost(r));
    // The same bytes streamed in chunks: no Content-Length to refuse early on.
    const chunked = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < body.length; i += 256 * 1024) c.enqueue(body.subarray(i, i + 256 * 1024));
        c.close();
      },
    });
    const res = await fetch(`${s.routerUrl}/v1/chat/completions`, { method: "POST", body: chunked, signal: AbortSignal.timeout(10_000) }).catch((e: Error) => e);
    h.total++;
    if (res instanceof Error) found(`POST /v1/chat/completions (${label}, chunked): no answer`, r, { status: 0, text: res.message });
    else {
      const text = await res.text();
      if (res.status !== 413) found(`POST /v1/chat/completions (${label}, chunked): answered ${res.status}, not 413`, r, { status: res.status, text });
    }
  }
  expect(report("POST /v1/chat/completions (")).toEqual([]);
}, 60_000);

// ---- header bytes and hostile engines, against a router with a raw-socket engine -----------

/** A router in front of one raw engine whose next answer the property sets. */
function rawRig() {
  let answer: string | ((s: import("bun").Socket<{ buf: string }>) => void) = engineAnswer();
  // Each answer ends its connection: a head cut short by random bytes leaves a body that runs
  // to the close, and that close must come.
  const e = rawEngine(() => {
    const a = answer;
    return typeof a === "string"
      ? (s) => {
          s.write(Buffer.from(a, "latin1"));
          s.end();
        }
      : a;
  });
  const r = new Router({ ...ROUTER_DEFAULTS, host: "127.0.0.1", port: 0, metricsIntervalMs: 0, cooldownMs: 60_000, maxAttempts: 1 });
  r.setCatalog([{ name: "m", aliases: [], on_demand: false, pool: "default", created: 1 }]);
  r.setEndpoints([{ id: "rep-f", url: e.url, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0 }]);
  const { port } = r.start();
  return {
    e,
    r,
    port,
    set: (a: typeof answer) => {
      answer = a;
    },
    inflight: () => r.balancer.endpoints().reduce((n, x) => n + x.inflight, 0),
    stop: async () => {
      await r.stop();
      e.stop();
    },
  };
}
/** A byte string, weighted toward the bytes that matter in a head: controls, CR, LF, colon, space, obs-text. */
const headByte = fc.oneof(
  { weight: 3, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 2, arbitrary: fc.constantFrom(0x00, 0x09, 0x0a, 0x0d, 0x20, 0x3a, 0x7f, 0x80, 0xe9, 0xff) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 255 }) },
);
const headText = (max: number) => fc.array(headByte, { minLength: 0, maxLength: max }).map((a) => String.fromCharCode(...a));
const headerLine = fc.oneof(
  fc.record({ n: headText(12), v: headText(24) }).map(({ n, v }) => `${n}: ${v}`),
  fc.record({ n: fc.constantFrom("User-Agent", "X-Request-Id", "Accept", "X-Llmgw-Pool", "Traceparent"), v: headText(24) }).map(({ n, v }) => `${n}: ${v}`),
  headText(30),
);
/** The header lines a client may get from the router: its own, and the engine headers it passes on. */
const ROUTER_ANSWER_HEADERS = new Set(["date", "x-llmgw-replica", "content-type", "cache-control", "x-request-id", "openai-processing-ms", "content-length", "transfer-encoding", "connection", "retry-after"]);

test("request header lines of random bytes (names and values): a 2xx or a 4xx, never a 5xx; no lease left taken; the next request served", async () => {
  const rig = rawRig();
  const problems: string[] = [];
  try {
    await assertRuns(
      fc.array(headerLine, { minLength: 1, maxLength: 4 }),
      600,
      async (lines) => {
        h.total++;
        const res = await rawRequest(rig.port, chatRequest(lines));
        if (res.status >= 500 || res.status === 0) problems.push(`${JSON.stringify(lines)}: ${res.status}`);
        if (rig.inflight() !== 0) problems.push(`${JSON.stringify(lines)}: in-flight ${rig.inflight()}`);
        const next = await rawRequest(rig.port, chatRequest());
        if (next.status !== 200) problems.push(`${JSON.stringify(lines)}: the next request got ${next.status}`);
      },
      31,
    );
  } finally {
    await rig.stop();
  }
  expect(problems.slice(0, 10)).toEqual([]);
}, 120_000);

test("engine header lines of random bytes: 200 or 502 (the engine's fault), never a 500; no header reaches the client that the router does not pass on; no lease left taken", async () => {
  const rig = rawRig();
  const problems: string[] = [];
  try {
    await assertRuns(
      fc.record({ lines: fc.array(headerLine, { minLength: 1, maxLength: 4 }), stream: fc.boolean() }),
      600,
      async ({ lines, stream }) => {
        h.total++;
        rig.set(
          stream
            ? `HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n${lines.join("\r\n")}\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:\n\r\n0\r\n\r\n`
            : engineAnswer(["Content-Type: application/json", ...lines]),
        );
        const res = await rawRequest(rig.port, chatRequest());
        rig.set(engineAnswer());
        const what = JSON.stringify(lines);
        if (res.status !== 200 && res.status !== 502) problems.push(`${what}: ${res.status}`);
        for (const [n] of res.headers) if (!ROUTER_ANSWER_HEADERS.has(n)) problems.push(`${what}: header ${JSON.stringify(n)} reached the client`);
        for (const [n, v] of res.headers) if (/[\x00-\x08\x0a-\x1f\x7f]/.test(v)) problems.push(`${what}: control byte in ${n}`);
        if (rig.inflight() !== 0) problems.push(`${what}: in-flight ${rig.inflight()}`);
        const next = await rawRequest(rig.port, chatRequest());
        if (next.status !== 200) problems.push(`${what}: the next request got ${next.status}`);
      },
      32,
    );
  } finally {
    await rig.stop();
  }
  expect(problems.slice(0, 10)).toEqual([]);
}, 120_000);

test("malformed engine responses split at random read boundaries: always 502 upstream_error naming the replica, never served", async () => {
  const rig = rawRig();
  const problems: string[] = [];
  try {
    await assertRuns(
      fc.record({ row: fc.constantFrom(...MALFORMED), cuts: fc.array(fc.integer({ min: 1, max: 200 }), { maxLength: 4 }) }),
      300,
      async ({ row: [what, bytes], cuts }) => {
        h.total++;
        const at = [...new Set(cuts.filter((c) => c < bytes.length))].sort((a, b) => a - b);
        rig.set((s) => {
          let from = 0;
          const pieces = [...at, bytes.length].map((to) => {
            const p = bytes.slice(from, to);
            from = to;
            return p;
          });
          const next = (i: number) => {
            if (i >= pieces.length) return;
            s.write(Buffer.from(pieces[i]!, "latin1"));
            // Real time, on purpose: a pause between writes is what makes the pieces arrive
            // as separate reads on the router's socket; no scheduler can split a TCP read.
            setTimeout(() => next(i + 1), 2);
          };
          next(0);
        });
        const res = await rawRequest(rig.port, chatRequest());
        rig.set(engineAnswer());
        // A cut that lets a first body byte reach the client before the fault shows: the answer
        // has started, and is cut short (no last chunk) instead.
        const cutShort = res.status === 200 && res.headers.some(([n, v]) => n === "transfer-encoding" && v === "chunked") && !res.body.endsWith("0\r\n\r\n");
        if (cutShort) return;
        if (res.status !== 502) problems.push(`${what} cut at ${at}: ${res.status}`);
        else if (!res.body.includes("replica rep-f") || res.body.includes("127.0.0.1")) problems.push(`${what}: message ${res.body}`);
        if (res.headers.some(([n]) => n === "set-cookie")) problems.push(`${what}: set-cookie reached the client`);
        if (rig.inflight() !== 0) problems.push(`${what}: in-flight ${rig.inflight()}`);
      },
      33,
    );
  } finally {
    await rig.stop();
  }
  expect(problems.slice(0, 10)).toEqual([]);
}, 120_000);

test("paths with dot segments, encoded dots and slashes, and engine admin paths never reach an engine: 400 or 404 in OpenAI's shape", async () => {
  const rig = rawRig();
  const seg = fc.constantFrom("v1", "chat", "completions", ".", "..", "%2e", "%2E%2e", ".%2e", "%2f", "%5c", "load_lora_adapter", "slots", "update_weights", "", "x");
  const problems: string[] = [];
  try {
    await assertRuns(
      fc.array(seg, { minLength: 1, maxLength: 5 }).map((a) => `/${a.join("/")}`),
      400,
      async (path) => {
        h.total++;
        const before = rig.e.requests.length;
        const res = await rawRequest(rig.port, chatRequest([], { path }));
        const known = (INFERENCE_PATHS as readonly string[]).includes(path);
        if (known ? res.status !== 200 : res.status !== 400 && res.status !== 404) problems.push(`${path}: ${res.status}`);
        if (!known && rig.e.requests.length !== before) problems.push(`${path}: reached the engine`);
        if (!known && res.status !== 0) {
          const p = openAIErrorProblems({ status: res.status, text: res.body } as Res);
          if (p.length > 0) problems.push(`${path}: ${p.join("; ")}`);
        }
      },
      34,
    );
  } finally {
    await rig.stop();
  }
  expect(problems.slice(0, 10)).toEqual([]);
}, 60_000);
