// Property-based fuzzing of what reaches an operator's terminal and the dashboard: heartbeats
// and catalog entries whose strings are full of control characters and escape sequences
// (screen clears, OSC titles and hyperlinks, C1 CSI, bidi overrides and marks, invisible format
// characters, CR overwrites) against a real head node. Each is either refused with the field
// named, or accepted; either way no CLI view (status, nodes, nodes NAME, events, replicas,
// models, models NAME) nor the dashboard holds a control character other than newline, plus, on
// a terminal, the CLI's own colours.
// Half the cases skip the edge and hand the heartbeat to the controller directly, as data
// stored before the edge checked it would be: the render edge must hold on its own.

import { afterAll, beforeAll, expect, test } from "bun:test";
import fc from "fast-check";
import { renderEvent } from "../../src/cli/events";
import { renderModels } from "../../src/cli/models";
import { renderNode, renderNodes } from "../../src/cli/nodes";
import { renderReplicas } from "../../src/cli/replicas";
import { renderStatus } from "../../src/cli/status";
import { ModelSpec } from "../../src/protocol/catalog";
import { loneSurrogatePath } from "../../src/protocol/common";
import { HeartbeatRequest } from "../../src/protocol/heartbeat";
import type { EventView, ModelView, NodeView, ReplicaView, Summary } from "../../src/protocol/views";
import { SEED, assertRuns } from "../helpers/fuzz";
import { type TestServer, testServer } from "../helpers/server";

let s: TestServer;

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]/;
/** The CLI's own SGR codes (render.ts CODES and the reset): the only escapes allowed, and only with colour on. */
// eslint-disable-next-line no-control-regex
const OWN_COLOURS = /\x1b\[(?:0|1|2|31|32|33|34|35|36|90)m/g;

const ESCAPES = [
  "\u001b[2J", "\u001b[41m", "\u001b]0;pwned\u0007", "\u001b]8;;http://evil.example/\u001b\\", "\u009b31m", "\u009d0;t\u009c", "\u001bc", "\u001b[?1049h",
  "\u001b[1A\u001b[2K", "\r", "\n", "\t", "\r\n", "\u0000", "\u0007", "\u0008", "\u007f", "\u0085", "\u202e", "\u2066", "\u2069", "\u2028", "\ud800",
  // Bidi marks and invisible format characters: drawn as nothing, they reorder or disguise a name.
  "\u200e", "\u200f", "\u061c", "\u200b", "\u200d", "\u2060", "\ufeff",
];
const TEXT = ["H100-80GB", "NVIDIA H100 80GB HBM3", "10.0.0.7", "0.1.0", " ", "é", "مرحبا", "👩‍👩‍👧‍👦", "<b>x</b>", "FAKE BANNER"];
const hostileText = fc
  .array(fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...ESCAPES) }, { weight: 3, arbitrary: fc.constantFrom(...TEXT) }, { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 6 }) }), { minLength: 1, maxLength: 6 })
  .map((a) => a.join(""));
/** Mostly hostile, sometimes clean, so the accepted path is exercised as well as the refused one. */
const text = fc.oneof({ weight: 3, arbitrary: hostileText }, { weight: 1, arbitrary: fc.constantFrom(...TEXT) });

const KEYS = ["address", "agent_version", "labelKey", "labelValue", "gpuName", "gpuClass", "gpuUuid", "error", "gpuClassCatalog", "pool"] as const;

/** Problems with one rendered text: a control character (with colour: other than the CLI's own colours). */
function controlsIn(what: string, out: string, colour: boolean): string[] {
  const rest = colour ? out.replace(OWN_COLOURS, "") : out;
  const m = CONTROL.exec(rest);
  if (!m) return [];
  return [`${what}${colour ? " (colour)" : ""}: U+${m[0].charCodeAt(0).toString(16).padStart(4, "0")} at ${m.index} in ${JSON.stringify(rest.slice(Math.max(0, m.index - 30), m.index + 30))}`];
}

async function get<T>(path: string): Promise<T> {
  const r = await s.admin(path);
  if (r.status !== 200) throw new Error(`GET ${path}: ${r.status} ${await r.text()}`);
  return (await r.json()) as T;
}

/** Every CLI view and the dashboard, rendered from what the admin API serves now. */
async function renderAll(): Promise<string[]> {
  const [summary, nodes, node, events, replicas, models, model] = await Promise.all([
    get<Summary>("/api/v1/summary"),
    get<NodeView[]>("/api/v1/nodes"),
    get<NodeView>("/api/v1/nodes/fz-host"),
    get<EventView[]>("/api/v1/events?limit=200"),
    get<ReplicaView[]>("/api/v1/replicas"),
    get<ModelView[]>("/api/v1/models"),
    get<ModelView>("/api/v1/models/fz-model"),
  ]);
  const p: string[] = [];
  for (const colour of [false, true]) {
    const style = { color: colour };
    p.push(...controlsIn("status", renderStatus(summary, style), colour));
    p.push(...controlsIn("nodes", renderNodes(nodes, style, false, s.clock.now()), colour));
    p.push(...controlsIn("nodes -o wide", renderNodes(nodes, style, true, s.clock.now()), colour));
    p.push(...controlsIn("nodes fz-host", renderNode(node, style, s.clock.now()), colour));
    p.push(...controlsIn("events", events.map((e) => renderEvent(e, style)).join(""), colour));
    p.push(...controlsIn("replicas -o wide", renderReplicas(replicas, style, true), colour));
    p.push(...controlsIn("models -o wide", renderModels(models, style, true), colour));
    p.push(...controlsIn("models fz-model", renderModels([model], style, true), colour));
  }
  const ui = await s.admin("/ui/fragment");
  p.push(...controlsIn("dashboard", await ui.text(), false));
  return p;
}

const gpu0 = { index: 0, uuid: "GPU-fz-0", name: "NVIDIA H100", class: "FZ-GPU", memory_mib: 81559, healthy: true, parent: null };

beforeAll(async () => {
  s = await testServer();
  const put = await s.admin("/api/v1/models/fz-model", { method: "PUT", body: JSON.stringify({ name: "fz-model", replicas: { min: 1 }, profiles: [{ name: "p", engine: "fake", gpu_class: "FZ-GPU" }] }) });
  if (put.status !== 200 && put.status !== 201) throw new Error(`seeding the catalog: ${put.status} ${await put.text()}`);
  const hb = await s.agent({ node: "fz-host", address: "10.0.0.7", gpus: [gpu0] });
  if (hb.status !== 200) throw new Error(`seeding fz-host: ${hb.status} ${await hb.text()}`);
  await s.tick();
  console.log(`terminal fuzz: seed ${SEED}`);
});

afterAll(async () => {
  await s?.stop();
});

/** The id of fz-model's current replica, unparking and placing one if there is none. */
async function currentReplica(): Promise<string | undefined> {
  let list = await get<ReplicaView[]>("/api/v1/replicas?model=fz-model");
  if (list.length === 0) {
    await s.admin("/api/v1/models/fz-model/unpark", { method: "POST" });
    await s.tick();
    list = await get<ReplicaView[]>("/api/v1/replicas?model=fz-model");
  }
  return list[0]?.id;
}

/** The fields a refusal names: its issues' paths, or the path its message starts with. */
const issuePaths = async (r: Response) => {
  const e = ((await r.json()) as { error: { message: string; issues?: { path: string }[] } }).error;
  return e.issues?.map((i) => i.path) ?? [e.message.split(": ")[0]!];
};
/** Whether the server should take it: the schema, and no lone surrogate (refused before it). */
const acceptable = (schema: { safeParse(v: unknown): { success: boolean } }, v: unknown) => schema.safeParse(v).success && !loneSurrogatePath(v);

test("the issue's heartbeat is refused naming gpus.0.class and agent_version, and changes nothing", async () => {
  const before = await get<NodeView>("/api/v1/nodes/fz-host");
  const r = await s.agent({
    node: "fz-host",
    address: "10.0.0.7",
    agent_version: "\u001b]0;pwned\u0007",
    gpus: [{ ...gpu0, class: "\u001b[2J\u001b[41m FAKE BANNER" }],
  });
  expect(r.status).toBe(400);
  expect((await issuePaths(r)).sort()).toEqual(["agent_version", "gpus.0.class"]);
  expect(await get<NodeView>("/api/v1/nodes/fz-host")).toEqual(before);
});

test("the issue's strings, stored without the edge's check, reach no view raw", async () => {
  await s.seed.heartbeat({
    node: "fz-raw",
    address: "10.0.0.8\u001b[2J",
    agent_version: "\u001b]0;pwned\u0007",
    labels: { "k\u001b[41m": "v\u009b2J" },
    fabrics: [],
    gpus: [{ index: 0, uuid: "GPU-raw\r", name: "N\u202eA", class: "\u001b[2J\u001b[41m FAKE BANNER", memory_mib: 1024, healthy: true, parent: null }],
    models: [],
    replicas: [],
    logs_port: null,
  });
  const views = await renderAll();
  expect(views).toEqual([]);
  // Shown, spelled out, not dropped: the operator sees what the node claimed.
  expect(renderNodes(await get<NodeView[]>("/api/v1/nodes"), { color: false }, true)).toContain("\\x1b[2J\\x1b[41m FAKE BANNER");
  expect(renderNode(await get<NodeView>("/api/v1/nodes/fz-raw"), { color: false })).toContain("Agent:      \\x1b]0;pwned\\x07");
});

test("hostile heartbeat and catalog strings: refused naming the field, or accepted and rendered with no control character", async () => {
  let refused = 0;
  let accepted = 0;
  let withReplica = 0;
  await assertRuns(
    // Every field hostile, or one, or none but the engine's error (which the edge neutralises).
    fc
      .record({
        raw: fc.boolean(),
        mode: fc.constantFrom("all", "one", "error"),
        one: fc.constantFrom(...KEYS),
        hostile: fc.record(Object.fromEntries(KEYS.map((k) => [k, text])) as Record<(typeof KEYS)[number], fc.Arbitrary<string>>),
        clean: fc.record(Object.fromEntries(KEYS.map((k) => [k, fc.constantFrom(...TEXT)])) as Record<(typeof KEYS)[number], fc.Arbitrary<string>>),
      })
      .map(({ raw, mode, one, hostile, clean }) => ({
        raw,
        ...Object.fromEntries(KEYS.map((k) => [k, mode === "all" || (mode === "one" && k === one) || k === "error" ? hostile[k] : clean[k]])),
      }) as { raw: boolean } & Record<(typeof KEYS)[number], string>),
    120,
    async (c) => {
      const replica = await currentReplica();
      if (replica) withReplica++;
      const body = {
        node: "fz-host",
        address: c.address,
        agent_version: c.agent_version,
        labels: { [c.labelKey]: c.labelValue },
        fabrics: [],
        gpus: [gpu0, { index: 1, uuid: c.gpuUuid, name: c.gpuName, class: c.gpuClass, memory_mib: 1024, healthy: true, parent: null }],
        models: [],
        replicas: replica ? [{ id: replica, state: "failed" as const, port: null, error: c.error }] : [],
        logs_port: null,
      };
      const fields = ["address", "agent_version", "labels", "gpus.1.name", "gpus.1.class", "gpus.1.uuid", "replicas.0.error"];
      if (c.raw) await s.seed.heartbeat(body);
      else {
        const want = { success: acceptable(HeartbeatRequest, body) };
        const r = await s.agent(body);
        if (want.success) expect({ status: r.status, body: r.status === 200 ? "" : await r.text() }).toEqual({ status: 200, body: "" });
        else {
          expect(r.status).toBe(400);
          const paths = await issuePaths(r);
          expect(paths.length).toBeGreaterThan(0);
          for (const p of paths) expect({ p, named: fields.some((f) => p === f || p.startsWith(`${f}.`)) }).toEqual({ p, named: true });
        }
        if (want.success) accepted++;
        else refused++;
      }
      // A catalog entry with hostile operator-facing strings.
      const spec = { name: "fz-cat", pool: c.pool, replicas: { min: 1 }, profiles: [{ name: "p", engine: "fake", gpu_class: c.gpuClassCatalog }] };
      const put = await s.admin("/api/v1/models/fz-cat", { method: "PUT", body: JSON.stringify(spec) });
      if (acceptable(ModelSpec, spec)) expect(put.status).toBeLessThan(300);
      else {
        expect(put.status).toBe(400);
        for (const p of await issuePaths(put)) expect(["pool", "profiles[0].gpu_class"]).toContain(p);
      }
      await s.tick();
      s.clock.advance(1000);
      const problems = await renderAll();
      expect({ case: JSON.stringify(c), problems }).toEqual({ case: JSON.stringify(c), problems: [] });
    },
    21,
  );
  // Both outcomes happened, so neither half of the property is vacuous.
  expect(refused).toBeGreaterThan(10);
  expect(accepted).toBeGreaterThan(2);
  // And engines' errors were reported against a real replica, so they reached events and reasons.
  expect(withReplica).toBeGreaterThan(20);
}, 180_000);
