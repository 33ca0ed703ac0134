// A heartbeat that reaches a standby is not lost to the leader: what it says beside inventory
// (engines, discovery errors and GPU reasons, model revisions, log listener) is written to the
// store when it changed, and every other control plane loads it when the store says another
// writer committed, and at its start. A row that does not validate is skipped with a warning.

import { afterEach, describe, expect, test } from "bun:test";
import pino from "pino";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { T0, gpuReports, heartbeat, model } from "../helpers/fleet";
import { type Plane, type Planes, lead, startPlanes } from "../helpers/planes";
import { until } from "../helpers/until";

const H = "H100-80GB";
const [R1, R2] = ["1".repeat(40), "2".repeat(40)] as [string, string];

let env: Planes | undefined;
afterEach(() => {
  env?.stop();
  env = undefined;
});

function beat(over: Partial<HeartbeatRequest> = {}): HeartbeatRequest {
  const gpus = gpuReports("x1", [H, H, H], [2]).map((g) => (g.index === 2 ? { ...g, reason: "XID 79: fallen off the bus" } : g));
  return {
    ...heartbeat({ name: "x1", gpus: [H, H, H], models: ["org/m"] }),
    address: "127.0.0.1",
    gpus,
    engines: [{ engine: "vllm", version: "0.11.0", error: null }],
    model_revisions: { "org/m": [R1, R2] },
    discovery_error: "nvidia-smi answered for 3 of 4 cards",
    logs_port: 9100,
    ...over,
  };
}

async function two(log?: pino.Logger): Promise<{ clock: ManualScheduler; a: Plane; b: Plane }> {
  const clock = new ManualScheduler(T0);
  env = await startPlanes({ names: ["a", "b"], clock, ...(log ? { log } : {}) });
  const [a, b] = env.planes as [Plane, Plane];
  await lead(a);
  return { clock, a, b };
}

describe("node reports through the store", () => {
  test("a heartbeat to the standby: the leader's views and projections see its engines, discovery, revisions and log listener", async () => {
    const { a, b } = await two();
    await a.ctl.catalog.putModels([model({ name: "org/m" })]);
    // The node joins and heartbeats through b only.
    await b.ctl.intake.join(beat());
    const x1 = await until("the leader to know x1's engines", async () => {
      const n = (await a.ctl.views.nodes()).find((x) => x.name === "x1");
      return n && n.engines.length > 0 ? n : undefined;
    });
    expect(x1.engines).toEqual([{ engine: "vllm", version: "0.11.0", error: null }]);
    expect(x1.discovery_error).toBe("nvidia-smi answered for 3 of 4 cards");
    expect(x1.gpus.find((g) => g.index === 2)!.reason).toBe("XID 79: fallen off the bus");
    // The leader places and hands out the revision the node holds: settled from b's heartbeat
    // (without it the leader has heard no revisions from x1 and hands out none).
    await a.ctl.loop.tick();
    const [asg] = a.ctl.projector.response("x1").assignments;
    expect(asg!.model).toBe("org/m");
    expect(asg!.revision).toBe(R1);
    // Where the replica's engine log is read: the port and the node came through the store.
    const src = await a.ctl.logs.logSource(asg!.id);
    expect(src.url).toBe(`http://127.0.0.1:9100/logs/${asg!.id}`);
  });

  test("an unchanged heartbeat writes nothing; a changed one does, and reaches the leader", async () => {
    const { clock, a, b } = await two();
    await b.ctl.intake.join(beat());
    const first = (await b.store.nodeReports()).find((r) => r.node === "x1")!;
    expect(first.at).toBe(T0);
    clock.advance(5_000);
    await b.ctl.intake.heartbeat(beat());
    expect((await b.store.nodeReports()).find((r) => r.node === "x1")!.at).toBe(T0);
    clock.advance(5_000);
    await b.ctl.intake.heartbeat(beat({ engines: [{ engine: "vllm", version: "0.12.0", error: null }], discovery_error: null, logs_port: null }));
    expect((await b.store.nodeReports()).find((r) => r.node === "x1")!.at).toBe(T0 + 10_000);
    const n = await until("the leader to see the new engine version", async () => {
      const x = (await a.ctl.views.nodes()).find((y) => y.name === "x1");
      return x?.engines[0]?.version === "0.12.0" ? x : undefined;
    });
    expect(n.discovery_error).toBeNull();
  });

  test("a control plane that starts later loads the stored reports at once", async () => {
    const { b } = await two();
    await b.ctl.intake.join(beat());
    const c = await env!.add("c");
    expect((await c.ctl.views.node("x1")).engines).toEqual([{ engine: "vllm", version: "0.11.0", error: null }]);
    expect((await c.ctl.views.node("x1")).discovery_error).toBe("nvidia-smi answered for 3 of 4 cards");
  });

  test("a stored row that does not validate is skipped with a warning naming the node and the field; the others load", async () => {
    const lines: string[] = [];
    const log = pino({ level: "warn" }, { write: (s: string) => void lines.push(s) });
    const { clock, a, b } = await two(log);
    await a.ctl.intake.join(beat());
    await b.store.saveNodeReport("bad-json", "{oops", clock.now());
    await b.store.saveNodeReport("bad-port", JSON.stringify({ discovery_error: null, gpu_reasons: [], logs_port: 0, logs_tls_cert: null }), clock.now());
    await b.store.saveNodeReport("extra", JSON.stringify({ discovery_error: null, gpu_reasons: [], logs_port: null, logs_tls_cert: null, shell: "rm -rf /" }), clock.now());
    // b's watch hears a's writes; x1's row (written by a) loads, the three bad ones are skipped, each named.
    await until("b to load x1's report", async () => (await b.ctl.views.nodes()).find((n) => n.name === "x1")?.engines[0]?.version === "0.11.0" || undefined);
    await b.ctl.loop.storeChanged();
    // (a hears b's writes through its watch and warns too: each control plane once.)
    const warned = lines.map((l) => JSON.parse(l) as { plane: string; node?: string; problem?: string; msg: string }).filter((l) => l.node && l.plane === "b");
    expect(warned.map((w) => w.node).sort()).toEqual(["bad-json", "bad-port", "extra"]);
    expect(warned.find((w) => w.node === "bad-port")!.problem).toStartWith("logs_port:");
    expect(warned.find((w) => w.node === "bad-json")!.problem).toStartWith("not JSON");
    expect(warned.find((w) => w.node === "extra")!.problem).toContain("shell");
    // Once per row version: looking again does not warn again.
    const before = lines.length;
    await b.ctl.loop.storeChanged();
    expect(lines.length).toBe(before);
  });
});
