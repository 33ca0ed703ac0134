// What the operator reads: the tables (nodes, replicas, models), the summary derived from the
// same snapshot (so the two cannot disagree), a model's explanation and an apply's dry run. Read
// only: nothing here writes. The pure builders are views.ts, summary.ts, explain.ts and
// dry-run.ts; here is what they read, and the summary's cache while the head node sheds load.

import type { Scheduler } from "../lib/scheduler";
import { letIoIn } from "../lib/scheduler";
import type { ModelSpec } from "../protocol/catalog";
import type { ApplyDryRun, Explanation, ModelView, NodeView, ReplicaView, Summary, Tables } from "../protocol/views";
import { resolveModel, resolveModelOrThrow } from "./catalog-admin";
import type { ClockWatch } from "./clock-watch";
import { dryRunApply } from "./dry-run";
import { NotFoundError } from "./errors";
import { type ExplainInput, explainModel } from "./explain";
import { type LoadMonitor, SUMMARY_CACHE_MS } from "./load";
import type { NodeMemory } from "./node-memory";
import type { ReconcileConfig } from "./reconciler";
import type { CatalogPort, EventsPort } from "./store-port";
import { summarize } from "./summary";
import type { UsageExchange } from "./usage-exchange";
import { buildTablesPaced } from "./views";
import type { WeightsPlanner } from "./weights-planner";
import type { WeightsInFlight } from "../protocol/weights-admin";

const inflightField = (inflight: ReadonlyMap<string, number> | undefined) => (inflight ? { inflight } : {});
const weightsField = (w: WeightsInFlight | null | undefined) => (w ? { weights: w } : {});

/**
 * What the summary says of the world beyond this store's rows, as last observed (never fetched
 * while a summary waits): the replicated store's members as Patroni reports them, and the
 * control planes. Absent for a single head node on SQLite.
 */
export interface SummarySources {
  store?: () => { members: Summary["store"]; error?: string };
  controlPlanes?: () => Summary["control_planes"] | undefined;
}

export interface FleetViewsOptions {
  store: Pick<CatalogPort, "modelByName" | "modelByAlias"> & Pick<EventsPort, "listEvents">;
  memory: Pick<NodeMemory, "snapshot" | "engines">;
  usage: Pick<UsageExchange, "lastUsed" | "since" | "forTables" | "inflightByReplica">;
  clock: Pick<ClockWatch, "watchedSince" | "jumpedAt">;
  load: Pick<LoadMonitor, "shedding" | "view" | "nodeTimeoutInForce" | "deafSpans">;
  config: ReconcileConfig;
  version: string;
  sources?: SummarySources;
  /** Each node's standing for the Hub weights of each model, for explain (weights-planner.ts). */
  weights?: Pick<WeightsPlanner, "placement">;
  scheduler: Scheduler;
  /** What weights move now (weights-admin.ts), for the summary's Weights line. */
  inFlight?: () => WeightsInFlight | null;
}

export class FleetViews {
  /** The last overview, served while the head node sheds summary refreshes. */
  private overviewCache: { at: number; value: { summary: Summary; tables: Tables } } | undefined;

  constructor(private readonly o: FleetViewsOptions) {}

  /** The tables, built in steps (the I/O already due let in between: heartbeats wait for one step, not all). */
  async tables(): Promise<Tables> {
    const { memory, usage, scheduler } = this.o;
    const snapshot = await memory.snapshot();
    return buildTablesPaced(
      { snapshot, now: scheduler.now(), lastUsed: usage.forTables(), nodeTimeoutMs: this.o.config.nodeTimeoutMs, watchedSince: this.o.clock.watchedSince, engines: memory.engines, ...inflightField(usage.inflightByReplica()) },
      () => letIoIn(scheduler),
    );
  }

  async summary(): Promise<Summary> {
    return (await this.overview()).summary;
  }

  /** The summary and the tables it is derived from, of one snapshot: they describe the same moment. */
  async overview(): Promise<{ summary: Summary; tables: Tables }> {
    const { load } = this.o;
    const now = this.o.scheduler.now();
    // Shed first when behind (load.ts): a summary up to SUMMARY_CACHE_MS old, its head field fresh.
    const c = this.overviewCache;
    if (c && load.shedding().includes("summary") && now - c.at >= 0 && now - c.at < SUMMARY_CACHE_MS) return { ...c.value, summary: { ...c.value.summary, head: load.view() } };
    const recent = await this.o.store.listEvents({ kind: "replica.evicted", since: now - 3_600_000, limit: 50 });
    const evictions = recent.reverse().map((e) => {
      const d = (e.data ?? {}) as { replica?: string; model?: string; for_model?: string; idle_seconds?: number };
      return { at: new Date(e.at).toISOString(), replica: d.replica ?? "", model: d.model ?? "", for_model: d.for_model ?? "", idle_seconds: d.idle_seconds ?? -1 };
    });
    const tables = await this.tables();
    const store = this.o.sources?.store?.();
    const controlPlanes = this.o.sources?.controlPlanes?.();
    const value = {
      summary: {
        ...summarize(tables, { version: this.o.version, evictions, ...(store ? { store: store.members, ...(store.error ? { storeError: store.error } : {}) } : {}), ...(controlPlanes ? { controlPlanes } : {}) }),
        head: load.view(),
        ...weightsField(this.o.inFlight?.()),
      },
      tables,
    };
    this.overviewCache = { at: now, value };
    return value;
  }

  async nodes(): Promise<NodeView[]> {
    return (await this.tables()).nodes;
  }

  async node(name: string): Promise<NodeView> {
    const n = (await this.tables()).nodes.find((x) => x.name === name);
    if (!n) throw new NotFoundError(`node "${name}" not found`);
    return n;
  }

  async replicas(model?: string): Promise<ReplicaView[]> {
    const all = (await this.tables()).replicas;
    if (model === undefined) return all;
    const resolved = (await resolveModel(this.o.store, model))?.name ?? model;
    return all.filter((r) => r.model === resolved);
  }

  async models(): Promise<ModelView[]> {
    return (await this.tables()).models;
  }

  async model(nameOrAlias: string): Promise<{ view: ModelView; spec: ModelSpec }> {
    const row = await resolveModelOrThrow(this.o.store, nameOrAlias);
    const view = (await this.tables()).models.find((m) => m.name === row.name)!;
    return { view, spec: row.spec };
  }

  /** Whether a name or alias names a model. */
  async hasModel(nameOrAlias: string): Promise<boolean> {
    return (await resolveModel(this.o.store, nameOrAlias)) !== undefined;
  }

  /** Why a model has (or has not) the replicas it wants, and what would make it fit (explain.ts). */
  async explain(nameOrAlias: string): Promise<Explanation> {
    const row = await resolveModelOrThrow(this.o.store, nameOrAlias);
    const ex = explainModel(await this.explainInput(), row.name);
    if (!ex) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    return ex;
  }

  /** What applying these specs would change and where new replicas would go, with nothing written (dry-run.ts). */
  async dryRunApply(specs: ModelSpec[]): Promise<ApplyDryRun> {
    return dryRunApply(await this.explainInput(), specs);
  }

  /** What a tick's reconcile step would read now, read without changing anything (no clock-jump bookkeeping). */
  private async explainInput(): Promise<ExplainInput> {
    const { memory, usage, load, clock } = this.o;
    const snapshot = await memory.snapshot();
    return {
      snapshot,
      ...(this.o.weights ? { weights: this.o.weights.placement(snapshot.models) } : {}),
      now: this.o.scheduler.now(),
      lastUsed: usage.lastUsed,
      config: { ...this.o.config, nodeTimeoutMs: load.nodeTimeoutInForce() },
      engines: memory.engines,
      deaf: load.deafSpans(),
      watchedSince: clock.watchedSince,
      jumpedAt: Math.max(clock.jumpedAt, usage.since),
      ...inflightField(usage.inflightByReplica()),
    };
  }
}
