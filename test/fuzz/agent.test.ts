// Property-based fuzzing of the agent API (/agent/v1/*) against a real head node: every
// malformed, mistyped or hostile heartbeat and long-poll query is answered with a 4xx in the
// documented error shape naming the problem, the server stays up, a rejected heartbeat leaves the
// store exactly as it was, and an accepted one is stored as sent.

import { loneSurrogatePath } from "../../src/protocol/common";
import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { HeartbeatRequest } from "../../src/protocol/heartbeat";
import type { NodeView } from "../../src/protocol/views";
import { SEED, SCALE, runs, own, hostile, enc, garbage, contentType, bodies } from "../helpers/fuzz";
import { diffDumps, dumpStore, dumpText, storeWrites } from "../helpers/dump";
import { type TestServer, testServer } from "../helpers/server";


// ---- queries -------------------------------------------------------------------------------

const enc1 = (s: string) => encodeURIComponent(s);
const QUERY_VALUES = [
  "abc", "-1", "0", "1", "-0", "1.5", "1e308", "-1e308", "1e999", "NaN", "Infinity", "-Infinity", "0x10", "1_000", "%201", "1%20", "", "%00", "%ZZ", "%",
  "9007199254740993", "99999999999999999999", "true", "null", "[]", "{}", "%F0%9F%98%80", "x".repeat(300), "1000", "1001", "60000", "60001", "%ED%A0%80",
];
function query(keys: string[]): fc.Arbitrary<string> {
  const key = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...keys) }, { weight: 1, arbitrary: fc.constantFrom("__proto__", "constructor", "toString", "", "a[]", "%00", "limit[0]") });
  const value = fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...QUERY_VALUES) }, { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 12 }).map(enc1) }, { weight: 1, arbitrary: fc.integer().map(String) }, { weight: 1, arbitrary: fc.double().map(String) });
  const pair = fc.oneof({ weight: 8, arbitrary: fc.tuple(key, value).map(([k, v]) => `${k}=${v}`) }, { weight: 1, arbitrary: key }, { weight: 1, arbitrary: value.map((v) => `=${v}`) });
  return fc.oneof(
    { weight: 12, arbitrary: fc.tuple(fc.array(pair, { minLength: 1, maxLength: 4 }), fc.constantFrom("&", "&", "&", ";", "&&")).map(([ps, sep]) => `?${ps.join(sep)}`) },
    { weight: 1, arbitrary: fc.constantFrom("", "?", "?&", "??", "?=", "?&&&") },
  );
}

// ---- the server, its seed, and the checks -------------------------------------------------

let s: TestServer;
const NODES = ["gpu-01", "gpu-02", "cpu-03"];
const validHeartbeat = (node: string) => ({
  node,
  address: "10.0.0.7",
  agent_version: "0.1.0",
  labels: { rack: "r1", zone: "eu-1" },
  fabrics: ["ib-a"],
  gpus: [
    { index: 0, uuid: `GPU-${node}-0`, name: "NVIDIA H100 80GB HBM3", class: "H100-80GB", memory_mib: 81559, healthy: true, parent: null },
    { index: 1, uuid: `MIG-${node}-1`, name: "NVIDIA A100 MIG 3g.40gb", class: "A100-80GB/3g.40gb", memory_mib: 40192, healthy: false, parent: `GPU-${node}-card` },
  ],
  models: ["llama", "org/mistral"],
  replicas: [{ id: "r-0000aaaa", state: "ready", port: 8100, error: null }],
});

beforeAll(async () => {
  s = await testServer();
  for (const n of NODES) {
    const r = await s.agent(validHeartbeat(n));
    if (r.status !== 200) throw new Error(`seeding ${n}: ${r.status} ${await r.text()}`);
  }
  console.log(`agent fuzz: seed ${SEED}, scale ${SCALE}`);
});

interface Req {
  /** Use the admin token (to read back what an accepted heartbeat stored). */
  admin?: boolean;
  method: string;
  path: string;
  body?: Uint8Array;
  ct?: string | null;
  note?: string;
}
interface Res {
  status: number;
  text: string;
  headers?: Headers;
}

async function exec(r: Req): Promise<Res> {
  const headers: Record<string, string> = { authorization: `Bearer ${r.admin ? s.adminToken : s.joinToken}` };
  if (r.ct !== null && r.ct !== undefined) headers["content-type"] = r.ct;
  try {
    const res = await fetch(`${s.adminUrl}${r.path}`, { method: r.method, headers, body: r.body, signal: AbortSignal.timeout(10_000) });
    return { status: res.status, text: await res.text(), headers: res.headers };
  } catch (e) {
    return { status: 0, text: `no answer: ${(e as Error).name}: ${(e as Error).message}` };
  }
}

/** What is wrong with an error answer of the agent API (the admin API's shape); empty when it is a proper one. */
function apiErrorProblems(res: Res): string[] {
  if (res.status === 0) return [res.text];
  const p: string[] = [];
  if (res.status >= 500) p.push(`answered ${res.status}`);
  else if (res.status < 400) p.push(`answered ${res.status} to a bad request`);
  // Bun's own answer to an over-long request line or header, before the app sees it.
  if (res.status === 431) return p;
  let j: unknown;
  try {
    j = JSON.parse(res.text);
  } catch {
    return [...p, "error body is not JSON"];
  }
  const e = (j as { error?: unknown } | null)?.error as { code?: unknown; message?: unknown; issues?: unknown } | undefined;
  if (!e || typeof e !== "object") return [...p, "no error object"];
  if (typeof e.code !== "string" || e.code === "") p.push("error.code missing");
  if (typeof e.message !== "string" || e.message.trim() === "") p.push("error.message empty");
  else if (/internal error/i.test(e.message) && res.status < 500) p.push(`message says internal error`);
  if (e.issues !== undefined) {
    if (!Array.isArray(e.issues) || e.issues.length === 0) p.push("issues is not a non-empty list");
    else
      for (const i of e.issues as { path?: unknown; message?: unknown }[])
        if (typeof i?.path !== "string" || i.path === "" || typeof i.message !== "string" || i.message === "") {
          p.push("an issue without a path or message");
          break;
        }
  }
  if (e.code === "invalid_request" && typeof e.message === "string") {
    const first = Array.isArray(e.issues) ? (e.issues[0] as { path?: string } | undefined)?.path : undefined;
    if (first !== undefined && !e.message.startsWith(`${first}: `)) p.push("message does not start with the first issue's path");
    if (first === undefined && !/^\S+: \S/.test(e.message)) p.push("invalid_request message names no field");
  }
  return p;
}

interface Finding {
  count: number;
  example: string;
  size: number;
}
interface Stat {
  cases: number;
  rejected: number;
  accepted: number;
}
const findings = new Map<string, Finding>();
const stats = new Map<string, Stat>();
let total = 0;
let snapshot = "";
let writes = -1;
let sinceHealth = 0;
let sinceDump = 0;

function clip(s: string, n = 300): string {
  return s.length > n ? `${s.slice(0, n)}…[${s.length} chars]` : s;
}
function describeReq(r: Req): string {
  const body = r.body ? clip(JSON.stringify(new TextDecoder().decode(r.body))) : "(none)";
  return `${r.method} ${clip(r.path, 200)} content-type=${r.ct === undefined || r.ct === null ? "(none)" : JSON.stringify(r.ct)} body=${body}${r.note ? ` [${clip(r.note, 300)}]` : ""}`;
}
/** Records a problem; "kind — detail": the kind groups findings, the detail goes with the example. */
function found(problem: string, r: Req, res: Res, extra = ""): void {
  const cut = problem.indexOf(" — ");
  const kind = cut < 0 ? problem : problem.slice(0, cut);
  const detail = cut < 0 ? extra : [problem.slice(cut + 3), extra].filter(Boolean).join("\n    ");
  const example = `${describeReq(r)}\n    → ${res.status} ${clip(res.text)}${detail ? `\n    ${detail}` : ""}`;
  const size = (r.body?.length ?? 0) + r.path.length;
  const f = findings.get(kind);
  if (!f) findings.set(kind, { count: 1, example, size });
  else {
    f.count++;
    // Keep the smallest input: a poor man's shrink.
    if (size < f.size) Object.assign(f, { example, size });
  }
}

async function health(): Promise<void> {
  sinceHealth = 0;
  const r = await fetch(`${s.adminUrl}/healthz`, { signal: AbortSignal.timeout(5000) }).catch((e: Error) => e);
  if (r instanceof Error || r.status !== 200) throw new Error(`/healthz does not answer after fuzzing: ${r instanceof Error ? r.message : r.status}`);
}

interface Verdict {
  accepted: boolean;
  problems: string[];
}
type Judge = (res: Res) => Verdict | Promise<Verdict>;
/**
 * Sends one request, judges the answer, and checks the store: a rejected request (or any GET)
 * must leave every table as it was. `after` runs after an accepted request (to restore seeds).
 */
async function run(endpoint: string, r: Req, judge: Judge, opts: { readOnly?: boolean; after?: () => Promise<void> } = {}): Promise<void> {
  if (snapshot === "") {
    snapshot = dumpText(s.store);
    writes = storeWrites(s.store);
  }
  const res = await exec(r);
  const v = await judge(res);
  // FUZZ_DEBUG=1 prints every case, to see what the generators make.
  if (process.env.FUZZ_DEBUG) console.log(`DEBUG ${endpoint} ${res.status} ${describeReq(r)}`);
  total++;
  const st = stats.get(endpoint) ?? { cases: 0, rejected: 0, accepted: 0 };
  st.cases++;
  if (v.accepted) st.accepted++;
  else st.rejected++;
  stats.set(endpoint, st);
  for (const p of v.problems) found(`${endpoint}: ${p}`, r, res);
  // The full dump when anything was written (and every 25 cases regardless); otherwise the
  // store cannot have changed.
  const w = storeWrites(s.store);
  if (w !== writes || ++sinceDump >= 25) {
    const now = dumpText(s.store);
    if ((!v.accepted || opts.readOnly) && now !== snapshot) {
      found(`${endpoint}: store changed by a ${v.accepted ? "read" : "rejected request"}`, r, res, diffDumps(JSON.parse(snapshot), dumpStore(s.store)).join("\n    "));
    }
    snapshot = now;
    writes = w;
    sinceDump = 0;
  }
  if (v.accepted && opts.after) {
    await opts.after();
    snapshot = dumpText(s.store);
    writes = storeWrites(s.store);
  }
  if (++sinceHealth >= 250) await health();
}

/**
 * A mutating endpoint: 2xx is accepted (and must be allowed by the oracle, and `verify` then
 * checks what was stored), anything else must be a proper error.
 */
function judgeWrite(ok: number[], oracle?: () => boolean | undefined, verify?: () => Promise<string[]>): Judge {
  return async (res) => {
    if (ok.includes(res.status)) {
      const local = oracle?.();
      if (local === false) return { accepted: true, problems: [`accepted (${res.status}) a body its schema rejects`] };
      return { accepted: true, problems: verify ? await verify() : [] };
    }
    const problems = apiErrorProblems(res);
    if (res.status === 400 && oracle?.() === true) problems.push("rejected (400) a body its schema accepts");
    return { accepted: false, problems };
  };
}
/** A read: 200 is fine; otherwise a proper error. */
function judgeRead(res: Res): Verdict {
  if (res.status === 200) {
    try {
      JSON.parse(res.text);
      return { accepted: true, problems: [] };
    } catch {
      return { accepted: true, problems: ["200 with a body that is not JSON"] };
    }
  }
  return { accepted: false, problems: apiErrorProblems(res) };
}

/** The body as the server will see it: the same decoding, the same JSON parser (whatever the content type says). */
function serverView(r: Req): { ok: true; value: unknown } | { ok: false } {
  const text = new TextDecoder().decode(r.body ?? new Uint8Array());
  if (text.trim() === "") return { ok: false };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

afterAll(async () => {
  if (s) {
    await health();
    await s.stop();
  }
  const rows = [...stats].map(([e, st]) => `  ${e.padEnd(44)} ${String(st.cases).padStart(6)} cases  ${String(st.rejected).padStart(6)} rejected  ${String(st.accepted).padStart(5)} accepted`);
  console.log(`agent fuzz (seed ${SEED}):\n${rows.join("\n")}\nagent fuzz total: ${total} cases`);
});

function report(prefix: string): string[] {
  const out: string[] = [];
  for (const [k, f] of findings) if (k.startsWith(prefix)) out.push(`${k} (${f.count}×)\n    ${f.example}`);
  if (out.length) console.log(`FINDINGS ${prefix}\n${out.join("\n")}`);
  return out;
}

/**
 * Runs a property. A bad answer is recorded as a finding (the smallest input kept), not thrown,
 * so one bug does not stop the run and every kind of problem shows up in one go; the test then
 * asserts there are none. fast-check reports the seed only if the harness itself throws.
 */
const assertRuns = <T>(arb: fc.Arbitrary<T>, numRuns: number, fn: (v: T) => Promise<void>, seedOffset: number) =>
  fc.assert(
    fc.asyncProperty(arb, async (v) => {
      await fn(v);
    }),
    { numRuns: runs(numRuns), seed: SEED + seedOffset },
  );
// ---- the properties ------------------------------------------------------------------------

const sameJson = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** After an accepted heartbeat: the node as the admin API shows it must be what was sent. */
async function storedAsSent(input: unknown): Promise<string[]> {
  const hb = HeartbeatRequest.parse(input);
  const sent = input as { labels?: Record<string, unknown> };
  const got = await exec({ admin: true, method: "GET", path: `/api/v1/nodes/${hb.node}` });
  if (got.status !== 200) return [`GET of a node after its accepted heartbeat answers ${got.status}`];
  const node = JSON.parse(got.text) as NodeView;
  const p: string[] = [];
  // Compared with the labels as sent, not as parsed: a key the parser drops is lost silently.
  const labels = sent.labels ?? {};
  if (!sameJson(Object.entries(node.labels).sort(), Object.entries(labels).sort())) p.push(`labels stored differ from those sent — stored ${JSON.stringify(node.labels)}, sent ${clip(JSON.stringify(labels), 200)}`);
  if (!sameJson(node.fabrics, hb.fabrics)) p.push(`fabrics stored differ from those sent — stored ${JSON.stringify(node.fabrics)}, sent ${JSON.stringify(hb.fabrics)}`);
  if (!sameJson([...node.models].sort(), [...new Set(hb.models)].sort())) p.push(`models stored differ from those sent — stored ${JSON.stringify(node.models)}, sent ${clip(JSON.stringify(hb.models), 200)}`);
  if (node.address !== hb.address || node.agent_version !== hb.agent_version) p.push(`address or agent_version stored differ from those sent — stored ${JSON.stringify([node.address, node.agent_version])}, sent ${clip(JSON.stringify([hb.address, hb.agent_version]), 200)}`);
  const gpus = (g: { index: number; uuid: string; class: string; memory_mib: number; healthy: boolean; parent: string | null }[]) =>
    [...g].sort((x, y) => x.index - y.index).map((x) => [x.index, x.uuid, x.class, x.memory_mib, x.healthy, x.parent]);
  if (!sameJson(gpus(node.gpus), gpus(hb.gpus))) p.push(`GPUs stored differ from those sent — stored ${JSON.stringify(gpus(node.gpus))}, sent ${clip(JSON.stringify(gpus(hb.gpus)), 300)}`);
  return p;
}

test("POST /agent/v1/heartbeat: bad heartbeats are 4xx naming the field and change nothing; accepted ones are stored as sent", async () => {
  const names = [...NODES, "fz-node"];
  const arb = fc.constantFrom(...names).chain((n) => fc.record({ n: fc.constant(n), b: bodies(validHeartbeat(n)), ct: contentType }));
  await assertRuns(
    arb,
    2800,
    async ({ n, b, ct }) => {
      const r: Req = { method: "POST", path: "/agent/v1/heartbeat", body: b.bytes, ct, note: `${b.note} (valid body was ${n})` };
      await run(
        "POST /agent/v1/heartbeat",
        r,
        judgeWrite(
          [200],
          () => {
            const v = serverView(r);
            return v.ok && HeartbeatRequest.safeParse(v.value).success && !loneSurrogatePath(v.value);
          },
          async () => {
            const v = serverView(r);
            return v.ok ? storedAsSent(v.value) : [];
          },
        ),
      );
    },
    11,
  );
  const st = stats.get("POST /agent/v1/heartbeat")!;
  expect(st.rejected / st.cases).toBeGreaterThan(0.6);
  expect(report("POST /agent/v1/heartbeat")).toEqual([]);
}, 120_000);

test("GET /agent/v1/assignments: garbage queries are 400 naming the parameter, answered at once, and change nothing", async () => {
  await assertRuns(
    query(["node", "node", "generation", "wait_ms"]).map((q) => (q.includes("wait_ms") ? q : `${q}${q.startsWith("?") ? "&" : "?"}wait_ms=0`)),
    800,
    async (q) => {
      // A valid node with no wait answers at once; so does any valid query whose generation is
      // not the node's current one (garbage never is). A hang is caught by the client timeout.
      await run("GET /agent/v1/assignments?…", { method: "GET", path: `/agent/v1/assignments${q}` }, judgeRead, { readOnly: true });
    },
    12,
  );
  expect(report("GET /agent/v1/assignments")).toEqual([]);
}, 60_000);

test("wrong methods and unknown routes under /agent/v1 are 4xx in the error shape", async () => {
  const routes = ["/agent/v1/heartbeat", "/agent/v1/assignments", "/agent/v1/", "/agent/v1/nope", "/agent/v1/heartbeat/x", "/agent/v2/heartbeat"];
  const methods = ["GET", "PUT", "DELETE", "PATCH", "OPTIONS", "POST"];
  await assertRuns(
    fc.record({ route: fc.constantFrom(...routes), method: fc.constantFrom(...methods) }).filter(({ route, method }) => !(method === "POST" && route === "/agent/v1/heartbeat") && !(method === "GET" && route === "/agent/v1/assignments")),
    200,
    async ({ route, method }) => {
      await run("wrong method", { method, path: route }, (res) => ({ accepted: false, problems: apiErrorProblems(res) }));
    },
    13,
  );
  expect(report("wrong method")).toEqual([]);
}, 60_000);

test("a heartbeat over the 8 MiB limit is 413 body_too_large and changes nothing", async () => {
  const big = enc.encode(JSON.stringify({ ...validHeartbeat("gpu-01"), agent_version: "x".repeat(9 * 1024 * 1024) }));
  await run("POST /agent/v1/heartbeat (9 MiB)", { method: "POST", path: "/agent/v1/heartbeat", body: big, ct: "application/json" }, (res) => ({
    accepted: false,
    problems: [...apiErrorProblems(res), ...(res.status === 413 ? [] : [`answered ${res.status}, not 413`])],
  }));
  expect(report("POST /agent/v1/heartbeat (9")).toEqual([]);
}, 60_000);
