// A node whose driver stops answering, through the controller over a SQLite store as a head node
// builds it: its GPUs stay, counted unhealthy with the discovery error as their reason, until
// discovery answers again or the node is deleted; each change is one event, and a restarted head
// node (a new controller over the same store) neither forgets the reasons nor says it all again.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { StoreImage } from "../../src/control/image";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { HeartbeatRequest } from "../../src/protocol/heartbeat";
import { Store } from "../../src/store";
import { type TestControl, testControl } from "../helpers/control";
import { T0, heartbeat, model } from "../helpers/fleet";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const H = "H100-80GB";
const DRIVER =
  "nvidia-smi exited with status 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running: this node reports no GPUs";
const HEALTH_KINDS = ["discovery.failed", "discovery.recovered", "gpu.unhealthy", "gpu.healthy"];

async function headNode(inner: Store, at: number) {
  const scheduler = new ManualScheduler(at);
  const ctl = testControl({ store: new StoreImage(inner, scheduler), scheduler, log: pino({ level: "silent" }), nodeTimeoutMs: 15_000, heartbeatIntervalMs: 1_000 });
  await ctl.memory.loadReports();
  return ctl;
}

const healthEvents = async (ctl: TestControl) => (await ctl.events.events({ limit: 100 })).filter((e) => HEALTH_KINDS.includes(e.kind));
const good: HeartbeatRequest = heartbeat({ name: "n1", gpus: [H, H] });
const broken: HeartbeatRequest = { ...heartbeat({ name: "n1" }), discovery_error: DRIVER };

describe("a node whose driver stops answering", () => {
  test("keeps its GPUs, unhealthy with the reason, in the node, the summary and the events; once per change; healthy again when discovery answers", async () => {
    const inner = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const ctl = await headNode(inner, T0);
    await ctl.intake.heartbeat(good);
    const uuids = (await ctl.views.node("n1")).gpus.map((g) => g.uuid);
    for (let i = 0; i < 3; i++) await ctl.intake.heartbeat(broken);

    const node = await ctl.views.node("n1");
    expect(node).toMatchObject({ gpu_total: 2, gpu_unhealthy: 2, gpu_free: 0, discovery_error: DRIVER, gpus_last_known: true });
    expect(node.gpus.map((g) => [g.uuid, g.healthy])).toEqual(uuids.map((u) => [u, false]));
    expect(node.gpus[0]!.reason).toStartWith("GPU discovery fails: nvidia-smi exited with status 9: NVIDIA-SMI has failed");
    const summary = await ctl.views.summary();
    expect(summary.gpus).toEqual([{ class: H, total: 2, used: 0, unhealthy: 2 }]);
    expect(summary.gpu_discovery).toEqual([{ node: "n1", gpus: 2, error: DRIVER, last_known: true }]);

    const failed = await healthEvents(ctl);
    expect(failed.map((e) => [e.kind, e.subject])).toEqual([
      ["discovery.failed", "node/n1"],
      ["gpu.unhealthy", "node/n1"],
      ["gpu.unhealthy", "node/n1"],
    ]);
    expect(failed[1]!.message).toContain(`GPU 0 (${uuids[0]}) of node n1 is unhealthy: GPU discovery fails: nvidia-smi exited with status 9`);

    await ctl.intake.heartbeat(good);
    await ctl.intake.heartbeat(good);
    const back = await ctl.views.node("n1");
    expect(back).toMatchObject({ gpu_total: 2, gpu_unhealthy: 0, discovery_error: null });
    expect(back.gpus_last_known).toBeUndefined();
    expect((await healthEvents(ctl)).slice(3).map((e) => e.message)).toEqual([
      "GPU discovery on node n1 works again: 2 GPUs reported",
      `GPU 0 (${uuids[0]}) of node n1 is healthy again`,
      `GPU 1 (${uuids[1]}) of node n1 is healthy again`,
    ]);
    inner.close();
  });

  test("a head node restarted meanwhile keeps the reasons and writes no event again; the recovery is still one event each", async () => {
    const inner = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const first = await headNode(inner, T0);
    await first.intake.heartbeat(good);
    await first.intake.heartbeat(broken);
    expect(await healthEvents(first)).toHaveLength(3);

    const again = await headNode(inner, T0 + 60_000);
    // Before the node's next heartbeat: the reasons are the stored report's.
    const node = await again.views.node("n1");
    expect(node).toMatchObject({ gpu_total: 2, gpu_unhealthy: 2, discovery_error: DRIVER, gpus_last_known: true });
    expect(node.gpus.every((g) => g.reason?.startsWith("GPU discovery fails:"))).toBe(true);
    for (let i = 0; i < 3; i++) await again.intake.heartbeat(broken);
    expect(await healthEvents(again)).toHaveLength(3);
    expect((await again.views.summary()).gpus).toEqual([{ class: H, total: 2, used: 0, unhealthy: 2 }]);

    await again.intake.heartbeat(good);
    expect((await healthEvents(again)).slice(3).map((e) => e.kind)).toEqual(["discovery.recovered", "gpu.healthy", "gpu.healthy"]);
    inner.close();
  });

  test("a replica on its GPUs stays as it is, its card counted unhealthy, not used; nothing new is placed there", async () => {
    const inner = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const ctl = await headNode(inner, T0);
    await ctl.intake.heartbeat(good);
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1 } })]);
    await ctl.loop.tick();
    const [a] = ctl.projector.response("n1").assignments;
    await ctl.intake.heartbeat({ ...good, replicas: [{ id: a!.id, state: "ready", port: a!.port, error: null }] });
    await ctl.intake.heartbeat({ ...broken, replicas: [{ id: a!.id, state: "ready", port: a!.port, error: null }] });
    await ctl.catalog.putModels([model({ name: "m", replicas: { min: 1 } }), model({ name: "other", replicas: { min: 1 } })]);
    await ctl.loop.tick();
    const gpus = (await ctl.views.node("n1")).gpus;
    expect(gpus.map((g) => [g.healthy, g.in_use_by])).toEqual([
      [false, a!.id],
      [false, null],
    ]);
    expect((await ctl.views.summary()).gpus).toEqual([{ class: H, total: 2, used: 0, unhealthy: 2 }]);
    expect((await ctl.views.replicas()).map((r) => [r.id, r.state])).toEqual([[a!.id, "ready"]]);
    inner.close();
  });

  test("a deleted node's GPUs go with it: joining again with a failing driver, it has none", async () => {
    const inner = new Store({ path: ":memory:", ...SQLITE_DEFAULTS });
    const ctl = await headNode(inner, T0);
    await ctl.intake.heartbeat(good);
    await ctl.intake.heartbeat(broken);
    await ctl.nodes.deleteNode("n1", true);
    await ctl.intake.heartbeat(broken);
    expect(await ctl.views.node("n1")).toMatchObject({ gpu_total: 0, discovery_error: DRIVER });
    expect((await ctl.views.node("n1")).gpus_last_known).toBeUndefined();
    expect((await ctl.views.summary()).gpus).toEqual([]);
    inner.close();
  });
});
