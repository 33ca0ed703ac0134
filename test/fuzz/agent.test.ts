// Property-based fuzzing of the agent API (/agent/v1/*) against a real head node: every
// malformed, mistyped or hostile heartbeat and long-poll query is answered with a 4xx in the
// documented error shape naming the problem, the server stays up, a rejected heartbeat leaves the
// store exactly as it was, and an accepted one is stored as sent.

import { loneSurrogatePath } from "../../src/protocol/common";
import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { HeartbeatRequest } from "../../src/protocol/heartbeat";
import type { NodeView } from "../../src/protocol/views";
import { type TestServer, testServer } from "../helpers/server";
import { SEED, SCALE, query, hostile, enc, garbage, contentType, bodies, clip, apiErrorProblems, judgeWrite, judgeRead, serverView, FuzzHarness, assertRuns, type Req } from "../helpers/fuzz";


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
    { index: 1, uuid: `MIG-${node}-1`, name: "NVIDIA A100 MIG 3g.40gb", class: "A100-80GB/3g.40gb", memory_mib: 40192, healthy: false, parent: `GPU-${node}-card`, reason: "remapped_rows.pending is Yes: a row remapping waits for a GPU reset" },
  ],
  discovery_error: "nvidia-smi -L exited with status 15: Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error (kept the 2 GPUs it could list, 1 marked unhealthy)",
  models: ["llama", "org/mistral"],
  replicas: [{ id: "r-0000aaaa", state: "ready", port: 8100, error: null }],
});

beforeAll(async () => {
  // Thousands of cases per node on a clock that never moves: the rate limit has its own test.
  s = await testServer({ heartbeat_burst: 1_000_000 });
  // Every case reports 10.0.0.7 from 127.0.0.1: allowed for the node that joins during the run too.
  await s.seed.allowAddress("fz-node", "10.0.0.7");
  for (const n of NODES) {
    const r = await s.agent(validHeartbeat(n));
    if (r.status !== 200) throw new Error(`seeding ${n}: ${r.status} ${await r.text()}`);
  }
  console.log(`agent fuzz: seed ${SEED}, scale ${SCALE}`);
});

/**
 * Each case speaks as an agent would: with the credential of the node it is about (its seeded
 * heartbeat got one), else the join token, as a new node's first heartbeat does.
 */
function agentToken(s: TestServer, r: Req): string {
  const about = /valid body was (\S+)\)$/.exec(r.note ?? "")?.[1] ?? /[?&]node=([^&]*)/.exec(r.path)?.[1];
  let name: string | undefined;
  try {
    name = about === undefined ? undefined : decodeURIComponent(about);
  } catch {
    // Garbage escapes: about no node.
  }
  return (name !== undefined ? s.credentials.get(name) : undefined) ?? s.joinToken;
}
const h = new FuzzHarness({ server: () => s, base: (s) => s.adminUrl, headers: (s, r) => ({ authorization: `Bearer ${r.admin ? s.adminToken : agentToken(s, r)}` }) });
const { exec, health, run, report, stats } = h;

afterAll(async () => {
  if (s) {
    await health();
    await s.stop();
  }
  console.log(`agent fuzz (seed ${SEED}):\n${h.rows()}\nagent fuzz total: ${h.total} cases`);
});

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
  // A node whose discovery fails and that lists no GPU keeps those it reported before, each
  // unhealthy with the discovery error as its reason (not "stored as sent", by design).
  if (hb.discovery_error && hb.gpus.length === 0 && node.gpus.length > 0) {
    if (node.gpus_last_known !== true) p.push(`GPUs kept after a failed discovery are not marked last known — stored ${JSON.stringify(node.gpus.map((g) => g.uuid))}`);
    const wrong = node.gpus.filter((g) => g.healthy || !g.reason?.startsWith("GPU discovery fails: "));
    if (wrong.length > 0) p.push(`GPUs kept after a failed discovery are not all unhealthy with the error as their reason — ${JSON.stringify(wrong.map((g) => [g.index, g.healthy, g.reason]))}`);
    if (node.discovery_error !== hb.discovery_error) p.push(`discovery_error stored differs from the one sent — stored ${JSON.stringify(node.discovery_error)}, sent ${clip(JSON.stringify(hb.discovery_error), 200)}`);
    return p;
  }
  const gpus = (g: { index: number; uuid: string; class: string; memory_mib: number; healthy: boolean; parent: string | null }[]) =>
    [...g].sort((x, y) => x.index - y.index).map((x) => [x.index, x.uuid, x.class, x.memory_mib, x.healthy, x.parent]);
  if (!sameJson(gpus(node.gpus), gpus(hb.gpus))) p.push(`GPUs stored differ from those sent — stored ${JSON.stringify(gpus(node.gpus))}, sent ${clip(JSON.stringify(gpus(hb.gpus)), 300)}`);
  // Reasons are shown for unhealthy GPUs only; an empty one says nothing.
  const reasons = (g: { index: number; healthy: boolean; reason?: string | null }[]) =>
    [...g].sort((x, y) => x.index - y.index).map((x) => (!x.healthy && x.reason ? x.reason : null));
  if (!sameJson(reasons(node.gpus), reasons(hb.gpus))) p.push(`GPU reasons stored differ from those sent — stored ${JSON.stringify(reasons(node.gpus))}, sent ${clip(JSON.stringify(reasons(hb.gpus)), 300)}`);
  if (node.discovery_error !== (hb.discovery_error || null)) p.push(`discovery_error stored differs from the one sent — stored ${JSON.stringify(node.discovery_error)}, sent ${clip(JSON.stringify(hb.discovery_error), 200)}`);
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
            const v = serverView(r, { anyContentType: true });
            return v.ok && HeartbeatRequest.safeParse(v.value).success && !loneSurrogatePath(v.value);
          },
          async () => {
            const v = serverView(r, { anyContentType: true });
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
