// The HA bench's reconcile part: one control-plane step at 1,000 nodes × 8 GPUs, 500 models,
// 2,000 replicas (the reconcile bench's fleet, lib/fleet.ts), on whatever store it is handed
// (SQLite file or PostgreSQL), so both dialects are measured the same way in one run. The fleet
// is written through the StorePort itself (heartbeats, the catalog, one plan creating the
// replicas), then a control plane on the in-memory image (StoreImage, as serve runs it) is measured:
//   snapshot (store)   the store's own full read, what every reload costs;
//   snapshot (reload)  the in-memory image reloaded from the store (snapshot, addresses, keys,
//                      credentials): what a control plane pays after another one's commit;
//   tick steady        ControlLoop.tick() over unchanged state (nothing to write);
//   tick local change  one model's min raised by one through the catalog first (one replica
//                      to place: decide, the plan's transaction, projections);
//   tick other writer  another control plane (a second store on the same database) raised one
//                      model's min by one first, and this model's watch() heard it: the tick
//                      reads that writer's changes (the changes table), decides, writes, projects;
//   tick full reload   memory dropped first (a doubt: a gap in the changes), so the tick reads
//                      the whole store again, then reconciles.
// The clock stands still (ManualScheduler), so no deadline passes between runs.

import { StoreImage } from "../../../src/control/image";
import { isEmpty } from "../../../src/control/reconciler";
import type { StorePort } from "../../../src/control/store-port";
import type { ModelSpec } from "../../../src/protocol/catalog";
import { ManualScheduler } from "../../../src/lib/scheduler";
import { testControl } from "../../helpers/control";
import { heartbeat, model as modelSpec } from "../../helpers/fleet";
import { reconcileFleet, T0 } from "./fleet";

export interface ReconcileFigures {
  seedMs: number;
  snapshotStore: Stat;
  snapshotReload: Stat;
  tickSteady: Stat;
  tickChange: Stat;
  /** After another writer's commit, heard through watch(). */
  tickReload: Stat;
  /** After memory was dropped: everything read again. */
  tickFullReload: Stat;
  placedFirst: number;
}

export interface Stat {
  p50: number;
  p95: number;
  /** This process's CPU time per run (user + system), p50: what the machine's other load does not inflate. */
  cpuP50: number;
  n: number;
}

const stat = (t: number[], cpu: number[]): Stat => {
  const s = [...t].sort((a, b) => a - b);
  const c = [...cpu].sort((a, b) => a - b);
  return { p50: s[Math.floor(s.length / 2)]!, p95: s[Math.min(s.length - 1, Math.floor(s.length * 0.95))]!, cpuP50: c[Math.floor(c.length / 2)]!, n: s.length };
};

async function timed(runs: number, before: (() => Promise<unknown> | unknown) | undefined, fn: () => Promise<unknown>): Promise<Stat> {
  const t: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < runs; i++) {
    await before?.();
    const c = process.cpuUsage();
    const s = performance.now();
    await fn();
    t.push(performance.now() - s);
    const d = process.cpuUsage(c);
    cpu.push((d.user + d.system) / 1000);
  }
  return stat(t, cpu);
}

/** Writes the fleet into an empty store through the StorePort. */
export async function seedReconcileFleet(store: StorePort, NODES = 1000, MODELS = 500, REPLICAS = 2000): Promise<{ models: ModelSpec[] }> {
  const { nodes, models, replicas } = reconcileFleet(NODES, MODELS, REPLICAS);
  for (const d of nodes) {
    await store.applyHeartbeat(heartbeat(d), T0);
    if (d.admin && d.admin !== "none") await store.setAdminState(d.name, d.admin);
  }
  await store.saveModels(models.map((spec) => ({ spec, revision: 1, created: true })), T0);
  const create = replicas.map((r, i) => ({ id: r.id, model: r.model, profile: "a", shards: r.shards, port: 30000 + i, endpoint: `http://10.0.0.1:${30000 + i}` }));
  const empty = { update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [] };
  await store.applyPlan({ ...empty, create }, T0);
  const update = replicas.filter((r) => r.state !== "starting").map((r) => ({ id: r.id, patch: { state: "ready" as const, readyAt: T0 } }));
  await store.applyPlan({ ...empty, create: [], update }, T0);
  return { models };
}

/** Another writer's commit: one model's min raised by one through `other`, resolved once `model`'s watch heard it. */
async function otherWrites(other: StorePort, heard: () => Promise<void>, m: ModelSpec): Promise<void> {
  const row = await other.modelByName(m.name);
  const min = (row?.spec.replicas.min ?? m.replicas.min) + 1;
  const spec = modelSpec({ ...m, replicas: { ...m.replicas, min, max: Math.max(min, m.replicas.max ?? min) } } as Parameters<typeof modelSpec>[0]);
  const next = heard();
  await other.saveModels([{ spec, revision: (row?.revision ?? 1) + 1, created: false }], T0);
  await next;
}

/** The model's watch, kept for the whole run: heard() resolves at the next "any" it passes on. */
function hearing(model: StoreImage): { heard: () => Promise<void>; stop: () => void } {
  let waiting: (() => void)[] = [];
  const stop = model.watch((c) => {
    if (c !== "any") return;
    const w = waiting;
    waiting = [];
    for (const f of w) f();
  });
  return { heard: () => new Promise<void>((r) => waiting.push(r)), stop };
}

export async function reconcileBench(store: StorePort, o: { runs: number; log?: (s: string) => void; other?: () => Promise<StorePort> }): Promise<ReconcileFigures> {
  const say = o.log ?? (() => {});
  const s0 = performance.now();
  const { models } = await seedReconcileFleet(store);
  const seedMs = performance.now() - s0;
  say(`  fleet written in ${(seedMs / 1000).toFixed(1)} s`);

  const snapshotStore = await timed(Math.max(5, Math.ceil(o.runs / 2)), undefined, () => store.snapshot());
  const clock = new ManualScheduler(T0);
  const model = new StoreImage(store, clock);
  const snapshotReload = await timed(Math.max(5, Math.ceil(o.runs / 2)), () => model.invalidate(), () => model.snapshot());

  const control = testControl({ store: model, scheduler: clock, nodeTimeoutMs: 30_000, heartbeatIntervalMs: 5000, router: false });
  let placedFirst = 0;
  for (let i = 0; i < 20; i++) {
    const plan = await control.loop.tick();
    if (i === 0) placedFirst = plan.create.length;
    if (isEmpty(plan)) break;
    if (i === 19) say("  (the fleet did not settle within 20 ticks: steady figures include writes)");
  }
  say(`  first tick placed ${placedFirst}; settled`);
  const tickSteady = await timed(o.runs, undefined, () => control.loop.tick());
  let k = 0;
  const tickChange = await timed(
    o.runs,
    async () => {
      const m = models[k % models.length]!;
      const min = m.replicas.min + 1 + Math.floor(k++ / models.length);
      await control.catalog.putModels([modelSpec({ ...m, replicas: { ...m.replicas, min, max: Math.max(min, m.replicas.max ?? min) } } as Parameters<typeof modelSpec>[0])]);
    },
    () => control.loop.tick(),
  );
  let tickReload: Stat = { p50: Number.NaN, p95: Number.NaN, cpuP50: Number.NaN, n: 0 };
  if (o.other) {
    const other = await o.other();
    const watch = hearing(model);
    let j = 0;
    // The watch's first notification may precede its LISTEN (PostgreSQL): write until one is heard, then settle.
    for (let heardOne = false; !heardOne; ) {
      const m = models[(k + j++) % models.length]!;
      heardOne = await Promise.race([otherWrites(other, watch.heard, m).then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1000))]);
    }
    await control.loop.tick();
    tickReload = await timed(o.runs, () => otherWrites(other, watch.heard, models[(k + j++) % models.length]!), () => control.loop.tick());
    watch.stop();
  }
  const tickFullReload = await timed(o.runs, () => model.invalidate(), () => control.loop.tick());
  await model.flush().catch(() => undefined);
  return { seedMs, snapshotStore, snapshotReload, tickSteady, tickChange, tickReload, tickFullReload, placedFirst };
}
