// src/control is the control plane: inventory (nodes, GPUs, weights), the catalog and its
// rules, placement, the reconcile steps, the views and the summary, the projections handed to
// agents and to the router, and the domain types and errors all of them share. This file is its
// front door: the admin and agent APIs call the Controller; each tick it collects the router's
// usage, decides (scaling, reachability, reconcile: pure functions of one snapshot), applies the
// plan in one store transaction and publishes (assignments through the broker, endpoints and
// catalog to the router). The pure steps are generators (lib/steps.ts): a tick, and any build of
// the tables, lets the I/O already due run between them, so heartbeats are answered during a
// tick at a few thousand nodes instead of queueing behind all of it.
//
// What it may import: protocol/ (the wire types, and the router-facing interfaces in
// protocol/routing.ts, re-exported by interfaces.ts) and lib/. Never router/, store/, api/,
// app/: the app wires a store (anything implementing StorePort, store-port.ts), a router (an
// EndpointSink and UsageSource) and a Scheduler (time) into the Controller.

import { randomBytes } from "node:crypto";
import { hmacSha256hex, matchesDigest, sha256, sha256hex } from "../lib/digest";
import type { Logger } from "pino";
import { letIoIn, type Scheduler } from "../lib/scheduler";
import { plural } from "../lib/format";
import { bracketHost } from "../lib/net";
import type { CatalogIssue, ModelSpec } from "../protocol/catalog";
import { type EngineReport, type HeartbeatRequest, type HeartbeatResponse, logsToken, newNodeCredential } from "../protocol/heartbeat";
import type { AdminState, ApplyDryRun, EventView, Explanation, ModelView, NodeView, ReplicaView, Summary, Tables } from "../protocol/views";
import { dryRunApply } from "./dry-run";
import { type ExplainInput, explainModel } from "./explain";
import { KeyPublisher } from "./key-publisher";
import { AssignmentBroker } from "./broker";
import { type PutResult, catalogChanges } from "./catalog";
import { ConflictError, FencedError, NotFoundError, StoreUnavailableError } from "./errors";
import type { Leadership } from "./ha";
import type { EndpointSink, UsageSource } from "./interfaces";
import * as project from "./projections";
import { LoadMonitor, SUMMARY_CACHE_MS } from "./load";
import { type NodeReport, ReportLedger, reportOf } from "./node-reports";
import { type HealthBefore, keepLastKnownGpus, nextHealth, storedHealth } from "./gpu-health";
import { reachability } from "./reachability";
import { DEFAULT_RECONCILE, type Plan, type ReconcileConfig, emptyPlan, isEmpty, processReports, reconcilePaced } from "./reconciler";
import { type ScaleChange, scale, scaleEvent, withTargets } from "./scaling";
import type { JoinWrite, StorePort } from "./store-port";
import { summarize } from "./summary";
import type { ModelRow, NewEvent, NodeDiscovery, NodeTrust, Snapshot, StoreChange } from "./types";
import { knownIdleStamps, mergeUsage } from "./usage";
import { buildTablesPaced } from "./views";
import { placedNode, placedReplaces } from "./reconcile/ports";

export interface ControllerOptions {
  store: StorePort;
  /** Time: wall-clock readings and the long poll's timers. */
  scheduler: Scheduler;
  log: Logger;
  version: string;
  nodeTimeoutMs: number;
  heartbeatIntervalMs: number;
  reconcile?: Partial<ReconcileConfig>;
  /** Where temporary files (backups) go. */
  dataDir?: string;
  /** Load must stay low this long before a model scales down. */
  scaleDownDelayMs?: number;
  /**
   * The head node's secret each replica's engine key is derived from (`<data-dir>/engine.secret`),
   * so keys need no column of their own and survive a restart. Without it engines get no key.
   */
  engineSecret?: string;
}

/** Who may join and how often a node may call: `serve --approve-nodes`, `--max-nodes`, `--heartbeat-rate`, `--heartbeat-burst`. */
export interface NodePolicy {
  /** A new node waits as pending until `llmgw nodes approve NAME`. */
  approveNodes: boolean;
  /** Nodes the head node accepts in all; a new one beyond is refused. */
  maxNodes: number;
  /** Agent API requests (heartbeats and assignment polls) per second per node, sustained. */
  heartbeatRate: number;
  /** How many may come at once above that rate. */
  heartbeatBurst: number;
}

/**
 * An agent heartbeats every few seconds, sends an early one on each replica change (debounced)
 * and holds one long poll: well under one request a second. Ten a second with a burst of a
 * hundred leaves that a wide margin and still bounds what one node can cost.
 */
export const DEFAULT_NODE_POLICY: NodePolicy = { approveNodes: false, maxNodes: 5000, heartbeatRate: 10, heartbeatBurst: 100 };

/** Where an agent keeps its credential, relative to its state dir; named in refusals so the operator knows what to remove. */
export const AGENT_CREDENTIAL_FILE = "node.credential";

/** The least time between two ticks a wake() asks for. */
const WAKE_GAP_MS = 150;
/** A heartbeat (or join) waiting for its group's write, and how to answer it. */
interface Waiting {
  hb: HeartbeatRequest;
  /** The node's discovery failed with no GPUs: hb carries its last known ones (gpu-health.ts). */
  kept?: boolean;
  resolve: (a: HeartbeatResponse) => void;
  reject: (e: unknown) => void;
  at: number;
}

/** What a group's heartbeats leave to write together after it: their events, and the nodes that registered. */
interface Batch {
  events: NewEvent[];
  created: string[];
}

/** Heartbeats with news written in one transaction at most (the rest wait for the next). */
const MAX_GROUP = 256;


/** HMAC-SHA256 of the replica id under the head node's engine secret, hex (64 characters). */
export function deriveEngineKey(secret: string, replicaId: string): string {
  return hmacSha256hex(secret, `llmgw-engine-key\u0000${replicaId}`);
}

export class Controller {
  private readonly store: StorePort;
  private readonly scheduler: Scheduler;
  private readonly log: Logger;
  readonly config: ReconcileConfig;
  private usage: UsageSource | undefined;
  private sink: EndpointSink | undefined;
  /** The router's last-used map as collected on the latest tick (with several routers, all of theirs merged: usage.ts). */
  private lastUsed: ReadonlyMap<string, number> = new Map();
  /**
   * Several control planes on one store (set by the app, `serve --ha`): this one's name, which
   * names its router in usage reports and how long a router's report keeps it limiting idleness.
   * Absent for a single head node.
   */
  private shared: { name: string; liveWithinMs: number } | undefined;
  /**
   * The node reports this control plane wrote or loaded. Written by a single head node too, and
   * loaded at start, so a restart keeps GPU reasons and discovery errors and tells a change from
   * a repeat (gpu-health.ts) against what was known, not against an empty memory.
   */
  private readonly reports = new ReportLedger();
  /** Nodes whose report (and so whose discovery error) is known here, from a heartbeat or the store. */
  private readonly reportKnown = new Set<string>();
  /** Idleness is counted from here: the latest watchingSince of the live routers (usage.ts); -Infinity alone. */
  private usageSince = Number.NEGATIVE_INFINITY;
  private lastPublished = "";
  /**
   * The snapshot version and reported-revisions count the assignments and endpoints were last
   * projected from: a tick over unchanged state (the steady state of a large fleet) skips them.
   */
  private projectedAt: string | undefined;
  /** The snapshot (and reported-revisions count) every node's assignments were last brought up to: the next tick projects only what changed since. */
  private projectedFrom: { snapshot: Snapshot; reported: number } | undefined;
  /** Rises whenever a node's reported revisions change (they feed the assignments). */
  private reported = 0;
  /** Each node's last reported revisions, as sent, to tell a change from a repeat. */
  private readonly revisionsSaid = new Map<string, string>();
  private lastCatalog = "";
  /** The client API keys as the router was last handed them (key-publisher.ts). */
  private readonly keys = new KeyPublisher(() => this.store.listApiKeys());
  /** Each node's assignment set and generation, and the long polls waiting on them. */
  private readonly broker: AssignmentBroker;
  /** Nodes last seen unreachable, so the event is written once per outage. */
  private unreachable: ReadonlySet<string> = new Set();
  private wakeScheduled = false;
  private readonly engineKeys = new Map<string, string>();
  private lastWake = Number.NEGATIVE_INFINITY;
  private readonly demandWritten = new Map<string, number>();
  /** Each node's engine-log port, as its last heartbeat said (in memory: the next heartbeat refills it). */
  private readonly logsPorts = new Map<string, number>();
  /** Each node's log-listener certificate (PEM), when it serves HTTPS. */
  private readonly logsCerts = new Map<string, string>();
  /**
   * The engines each node's last heartbeat reported, with their versions. In memory, like the
   * discovery errors: every heartbeat carries them again. A node absent here has not said
   * (an older agent, a simulated node, or none since this process started): unknown, not none.
   */
  private readonly engines = new Map<string, EngineReport[]>();
  /**
   * Discovery errors and GPU reasons, in memory like the engines and in the stored node reports
   * (loaded at start), and the health they explain (gpus.healthy) is stored.
   */
  private readonly discovery = new Map<string, NodeDiscovery>();
  /**
   * Each node's reported revisions, in memory for the same reasons: every heartbeat carries them
   * again, and until a node's next one the head node only holds back from settling a revision.
   */
  private readonly revisions = new Map<string, ReadonlyMap<string, readonly string[]>>();
  private joinTokenDigest: Buffer | undefined;
  nodePolicy: NodePolicy = { ...DEFAULT_NODE_POLICY };
  /** Per model, since when its load has been low enough to scale down (scaling.ts). */
  private lowSince: ReadonlyMap<string, number> = new Map();
  /** Of the tick under way, the time spent in pause(): listening, not working. */
  private pausedMs = 0;
  readonly scaleDownDelayMs: number;
  private onWake: (() => void) | undefined;
  /** How far behind this head node is (load.ts): deadlines, the announced interval, shedding. */
  readonly load: LoadMonitor;
  /** The last overview, served while the head node sheds summary refreshes. */
  private overviewCache: { at: number; value: { summary: Summary; tables: Tables } } | undefined;
  /**
   * The revision each live replica was handed, once every one of its nodes had reported theirs
   * (see projections.ts). In memory: a restarted head node settles it again.
   */
  private replicaRevisions: ReadonlyMap<string, string | null> = new Map();
  /**
   * Writes that read before they write (a tick, a heartbeat, a catalog change) run one at a time,
   * so none decides on what another is about to change.
   */
  private serial: Promise<unknown> = Promise.resolve();
  /**
   * Time the control plane has watched without a gap: since it started, or since its clock last
   * jumped (backwards, or forwards further than any plausible pause). Silence, start times and
   * idleness are only counted from then: a node cannot have missed heartbeats while nobody was
   * listening, and a day the clock skipped is not a day a replica sat idle.
   */
  private lastSeen: number | undefined;
  private jumpedAt = Number.NEGATIVE_INFINITY;
  private watchedSince: number;
  private observe(now: number): { watchedSince: number; jumpedAt: number } {
    const jump = Math.max(60_000, 2 * (this.config.nodeTimeoutMs + this.config.replaceAfterMs));
    if (this.lastSeen !== undefined && (now < this.lastSeen || now - this.lastSeen > jump)) this.jumpedAt = this.watchedSince = now;
    this.lastSeen = now;
    return { watchedSince: this.watchedSince, jumpedAt: this.jumpedAt };
  }

  constructor(readonly opts: ControllerOptions) {
    this.store = opts.store;
    this.scheduler = opts.scheduler;
    this.log = opts.log;
    // The margin covers an assignment that waits for the next heartbeat and a verdict that waits
    // for the one after, plus a minute for the agent's own work before it launches the engine.
    this.config = { ...DEFAULT_RECONCILE, nodeTimeoutMs: opts.nodeTimeoutMs, startMarginMs: 2 * opts.heartbeatIntervalMs + 60_000, ...opts.reconcile };
    // Boot time in ms × 1000: a restarted server's numbers never meet the ones its agents hold
    // from the last run unless that run made a thousand changes a millisecond.
    this.broker = new AssignmentBroker(opts.scheduler.now() * 1000, opts.scheduler);
    this.watchedSince = opts.scheduler.now();
    this.scaleDownDelayMs = opts.scaleDownDelayMs ?? 60_000;
    this.load = new LoadMonitor(opts.scheduler, opts.heartbeatIntervalMs, opts.nodeTimeoutMs);
  }

  /**
   * Whether this control plane leads, under which epoch: a single head node always leads
   * (epoch 0); with several on one store the lease decides (ha.ts sets it).
   */
  private lead: Leadership = { leading: true, epoch: 0 };
  /**
   * What the summary says of the world beyond this store's rows, as last observed (never
   * fetched while a summary waits): the replicated store's members as Patroni reports them, and
   * the control planes. Set by the app; absent for a single head node on SQLite.
   */
  private summarySources: { store?: () => { members: Summary["store"]; error?: string }; controlPlanes?: () => Summary["control_planes"] } = {};
  setSummarySources(s: { store?: () => { members: Summary["store"]; error?: string }; controlPlanes?: () => Summary["control_planes"] }): void {
    this.summarySources = { ...this.summarySources, ...s };
  }
  leadership(): Leadership {
    return this.lead;
  }
  setLeadership(l: Leadership): void {
    const was = this.lead.leading;
    this.lead = l;
    // A new leader reconciles at once, not on the next tick.
    if (l.leading && !was) this.wake(true);
  }
  private onFenced: ((e: FencedError) => void) | undefined;
  /** Told when a plan write was fenced (the lease keeper steps down); without one the controller steps down by itself. */
  setFencedHandler(fn: (e: FencedError) => void): void {
    this.onFenced = fn;
  }

  /** The store's snapshot with what the latest heartbeats said that is kept in memory only. */
  private async snapshot(): Promise<Snapshot> {
    return { ...(await this.store.snapshot()), discovery: new Map(this.discovery), revisions: new Map(this.revisions) };
  }

  private exclusive<T>(fn: () => Promise<T>, queued?: (waitedMs: number) => void): Promise<T> {
    const t0 = queued ? this.scheduler.mono() : 0;
    const go = queued ? () => (queued(this.scheduler.mono() - t0), fn()) : fn;
    const run = this.serial.then(go, go);
    this.serial = run.catch(() => undefined);
    return run;
  }

  /**
   * Setters, not constructor arguments: a control plane without a router is fully working; it
   * just cannot tell idle from busy (it says "unknown") and publishes to no one.
   */
  setUsageSource(u: UsageSource): void {
    this.usage = u;
  }

  /** Resolves once the sink holds the API keys. */
  async setEndpointSink(s: EndpointSink): Promise<void> {
    this.sink = s;
    this.lastPublished = "";
    this.lastCatalog = "";
    this.projectedAt = undefined;
    this.projectedFrom = undefined;
    this.keys.reset();
    await this.publishKeys();
  }

  /** Called when something happened that deserves a reconcile before the next tick. */
  setWakeHandler(fn: () => void): void {
    this.onWake = fn;
  }

  /**
   * Coalesced: the first wake after a quiet spell runs at once (a microtask); a burst after it
   * (a heartbeat flood with news) causes one more tick WAKE_GAP_MS after the last, not one each.
   * Only heartbeats' news is coalesced so; `urgent` wakes run at once.
   */
  private wake(urgent = false): void {
    if (!this.onWake) return;
    // What an operator or a client asked for (a catalog change, a node action, demand for a
    // model) is reconciled at once: what they read next must already reflect it.
    if (urgent) {
      queueMicrotask(() => {
        this.lastWake = this.scheduler.mono();
        this.onWake?.();
      });
      return;
    }
    if (this.wakeScheduled) return;
    this.wakeScheduled = true;
    const fire = () => {
      this.wakeScheduled = false;
      this.lastWake = this.scheduler.mono();
      this.onWake?.();
    };
    const wait = this.lastWake + WAKE_GAP_MS - this.scheduler.mono();
    if (wait <= 0) queueMicrotask(fire);
    else this.scheduler.after(wait, fire).unref();
  }

  /**
   * A replica's engine key: HMAC-SHA256 of its id under the head node's secret. Every shard and
   * the published endpoint get the same one; another replica's key says nothing about it.
   */
  engineKey = (replicaId: string): string | null => {
    const secret = this.opts.engineSecret;
    if (secret === undefined) return null;
    // An HMAC per replica per tick adds up at thousands of replicas: derive each once.
    let key = this.engineKeys.get(replicaId);
    if (key === undefined) {
      if (this.engineKeys.size >= 100_000) this.engineKeys.clear();
      this.engineKeys.set(replicaId, (key = deriveEngineKey(secret, replicaId)));
    }
    return key;
  };

  private newId = (): string => `r-${randomBytes(4).toString("hex")}`;

  /** Reads the router's last-used map: once a tick, so its cost does not grow with traffic. */
  collectUsage(): void {
    if (this.usage) this.lastUsed = new Map(this.usage.lastUsed());
  }

  /**
   * Several control planes on one store: from now on this one reports its router's usage and its
   * nodes' reports into the store, and reads everyone's (usage.ts, node-reports.ts). Resolves once
   * the node reports already stored are loaded.
   */
  async setShared(o: { name: string; liveWithinMs: number }): Promise<void> {
    this.shared = { ...o };
    await this.loadReports();
  }

  /**
   * Reports this router's usage (the map just collected, and since when the router has watched
   * without a gap: this process's watch, or the router thread's restart, whichever is later) and
   * merges every router's, newest stamp winning; idleness is counted only from the latest
   * watchingSince of the routers still reporting. A store that does not answer leaves nothing
   * known idle this tick.
   */
  private async shareUsage(now: number, watchedSince: number): Promise<void> {
    if (!this.shared) return;
    const { name, liveWithinMs } = this.shared;
    const own = { router: name, watchingSince: Math.max(watchedSince, this.usage?.watchingSince?.() ?? Number.NEGATIVE_INFINITY), lastUsed: this.lastUsed };
    try {
      await this.store.reportUsage(name, own.watchingSince, own.lastUsed);
      const merged = mergeUsage({ reports: await this.store.routerUsage(), now, liveWithinMs, own });
      this.lastUsed = merged.lastUsed;
      this.usageSince = merged.since;
    } catch (e) {
      this.usageSince = now;
      this.log.warn({ err: (e as Error).message }, "router usage not exchanged through the store: no replica counts as idle this tick");
    }
  }

  /**
   * Another control plane wrote to the store (its watch, or the periodic backstop): load what
   * its heartbeats said (node reports whose time moved), then look again soon: the leader
   * reconciles (demand may have arrived there), a standby projects what the leader wrote for
   * its own agents and router.
   */
  async storeChanged(change: StoreChange = "any"): Promise<void> {
    // The lease and usage reports are read on their own rounds and ticks: nothing to do now.
    if (change === "meta") return;
    if (change === "any" || change === "reports") await this.loadReports();
    this.wake();
  }

  /**
   * The node reports written since this one last looked (at start: all of them, this head node's
   * earlier run's or other control planes'); a bad row is skipped with a warning.
   */
  async loadReports(): Promise<void> {
    let rows;
    try {
      rows = await this.store.nodeReports();
    } catch (e) {
      this.log.warn({ err: (e as Error).message }, "node reports not read from the store: the next change tries again");
      return;
    }
    const { fresh, bad } = this.reports.news(rows);
    for (const b of bad) this.log.warn({ node: b.node, problem: b.problem }, `ignored the stored report of node ${b.node}: ${b.problem}`);
    for (const f of fresh) this.applyReport(f.node, f.report);
  }

  /**
   * One control-plane step: collect the router's usage and one snapshot; decide scaling,
   * reachability and the reconcile plan from them (pure functions); apply all of it in one
   * transaction; publish assignments and endpoints. Returns the reconciler's plan.
   */
  tick(): Promise<Plan> {
    return this.exclusive(async () => {
      const began = this.scheduler.mono();
      this.pausedMs = 0;
      // Before any silence is judged: a stall that ended just now counts already.
      this.load.sample();
      // Usage first, so idleness is as fresh as what is published beside it.
      await this.usage?.refresh?.();
      this.collectUsage();
      // The snapshot before the clock is read: unchanged heartbeats are answered without the
      // lock, so they may stamp nodes while this tick waits (the usage exchange, the store). A
      // stamp later than `now` would read as a clock that went back (observedFrom): the node
      // heard last at the start of the watch, and declared unreachable a moment after its heartbeat.
      const read = await this.snapshot();
      const now = this.scheduler.now();
      const seen = this.observe(now);
      await this.shareUsage(now, seen.watchedSince);
      // A standby decides and writes nothing: it projects what the leader wrote, for its own agents and router.
      const decided = this.lead.leading ? await this.decide(read, now, seen) : this.standBy(read, now);
      const after = decided.after;
      // Unchanged state projects to unchanged assignments and endpoints: skip the O(fleet) work.
      const key = after.version === undefined ? undefined : `${after.version}/${this.reported}`;
      if (key === undefined || key !== this.projectedAt) {
        this.refreshAssignments(after);
        await this.tickPause();
        this.publish(after);
        // Keys another control plane created or revoked arrive with the state read here.
        await this.publishKeys();
        this.projectedAt = key;
      }
      // The tick's own work: the pauses that let heartbeats in between its steps were listening time.
      this.load.tickTook(this.scheduler.mono() - began - this.pausedMs);
      await this.writeEpisodes(this.lead.leading);
      return decided.plan;
    });
  }

  /**
   * Between the steps of a tick or of the tables: lets the I/O already due run (heartbeats above
   * all), so none waits for the whole of them, which at a few thousand nodes is tens of
   * milliseconds of work. What runs meanwhile cannot change what a tick decides on: the snapshot
   * is a value, heartbeats that change state wait for the lock the tick holds, and unchanged ones
   * only stamp a node (into rows the snapshot does not hold). Without `soon` (the manual
   * scheduler) only a promise turn.
   */
  private pause(): Promise<void> {
    return letIoIn(this.scheduler);
  }

  /** pause(), the time it took counted as the tick's listening time (see tick()). */
  private async tickPause(): Promise<void> {
    const from = this.scheduler.mono();
    await this.pause();
    this.pausedMs += this.scheduler.mono() - from;
  }

  /** The leader's part of a tick: scaling, reachability and the reconcile plan, written in one fenced transaction. */
  private async decide(read: Snapshot, now: number, seen: { watchedSince: number; jumpedAt: number }): Promise<{ plan: Plan; after: Snapshot }> {
    const scaled = this.usage
      ? scale({ models: read.models, modelState: read.modelState, inflight: this.usage.inflightByModel(), now, delayMs: this.scaleDownDelayMs, lowSince: this.lowSince })
      : { changes: [], lowSince: this.lowSince };
    // The reconcile step sees the targets as they will be written.
    const snapshot = scaled.changes.length > 0 ? { ...read, modelState: withTargets(read.modelState, scaled.changes) } : read;
    // Deadlines discount the time this head node was not listening, and cover the interval announced.
    const deaf = this.load.deafSpans();
    const config = { ...this.config, nodeTimeoutMs: this.load.nodeTimeoutInForce() };
    const reach = reachability({ nodes: snapshot.nodes, now, watchedSince: this.watchedSince, nodeTimeoutMs: config.nodeTimeoutMs, unreachable: this.unreachable, deaf });
    await this.tickPause();
    // With several routers, nothing is known idle for longer than every live one has watched.
    const plan = await reconcilePaced(
      { snapshot, now, lastUsed: this.lastUsed, config, newId: this.newId, engines: this.engines, deaf, ...seen, jumpedAt: Math.max(seen.jumpedAt, this.usageSince) },
      () => this.tickPause(),
    );
    const write = combined(plan, scaled.changes, reach.events);
    let after = snapshot;
    if (!isEmpty(write)) {
      const { name, holder = name, epoch } = this.lead;
      try {
        // Several control planes: only under the lease this one holds (the store checks it in the transaction).
        await this.store.applyPlan(write, now, holder !== undefined ? { holder, epoch } : undefined);
      } catch (e) {
        if (!(e instanceof FencedError)) throw e;
        this.fenced(e);
        return { plan: emptyPlan(), after: await this.snapshot() };
      }
      for (const e of reach.events) this.log.warn({ kind: e.kind, subject: e.subject }, e.message);
      this.logEvents(plan);
      after = await this.snapshot();
    }
    this.lowSince = scaled.lowSince;
    this.unreachable = reach.unreachable;
    return { plan, after };
  }

  /**
   * A standby's tick: nothing decided or written. Which nodes are unreachable is still followed
   * (silently: the leader writes the events), so one that takes over does not announce again an
   * outage the old leader already did.
   */
  private standBy(read: Snapshot, now: number): { plan: Plan; after: Snapshot } {
    const nodeTimeoutMs = this.load.nodeTimeoutInForce();
    this.unreachable = reachability({ nodes: read.nodes, now, watchedSince: this.watchedSince, nodeTimeoutMs, unreachable: this.unreachable, deaf: this.load.deafSpans() }).unreachable;
    return { plan: emptyPlan(), after: read };
  }

  private fenced(e: FencedError): void {
    this.log.warn({ epoch: e.epoch, name: this.lead.name }, e.message);
    if (this.onFenced) this.onFenced(e);
    else this.lead = { ...this.lead, leading: false };
  }

  /** head.behind / head.caught_up, once per episode, as events and in the log. */
  private async writeEpisodes(write = true): Promise<void> {
    for (const e of this.load.takeEpisodes()) {
      const by = Number((e.behindMs / 1000).toFixed(1));
      const every = Number((e.intervalMs / 1000).toFixed(1));
      const message = e.kind === "head.behind" ? `head node behind by ${by} s: heartbeats slowed to ${every} s` : `head node caught up (it was behind by up to ${by} s): heartbeats every ${every} s`;
      // A standby writes nothing in its tick: its episodes go to its log only.
      if (write) await this.event(e.kind, "head", message, { behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: Math.round(e.intervalMs) });
      if (e.kind === "head.behind") this.log.warn({ kind: e.kind, behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: e.intervalMs }, message);
      else this.log.info({ kind: e.kind, behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: e.intervalMs }, message);
    }
  }

  /** Writes a plan in one transaction and logs its events. */
  private async apply(plan: Plan, now: number): Promise<Snapshot> {
    await this.store.applyPlan(plan, now);
    this.logEvents(plan);
    return this.snapshot();
  }

  private logEvents(plan: Plan): void {
    for (const e of plan.events) this.log.info({ kind: e.kind, subject: e.subject }, e.message);
  }

  // ---- agents -------------------------------------------------------------------------

  setNodePolicy(p: Partial<NodePolicy>): void {
    this.nodePolicy = { ...this.nodePolicy, ...p };
  }

  /** The join token agents present to be admitted; replaced by `llmgw join-token rotate`. */
  setJoinToken(token: string): void {
    this.joinTokenDigest = sha256(token);
  }

  /** The join token by its SHA-256 (hex) alone: with several control planes, the store's (shared-tokens.ts). */
  setJoinTokenDigest(hex: string): void {
    this.joinTokenDigest = Buffer.from(hex, "hex");
  }

  /** Constant time over digests, so neither content nor length leaks. */
  isJoinToken(presented: string): boolean {
    if (!this.joinTokenDigest) return false;
    return matchesDigest(presented, this.joinTokenDigest);
  }

  /** The node a credential belongs to, or undefined. */
  nodeForCredential(credential: string): Promise<string | undefined> {
    return this.store.nodeByCredentialHash(sha256hex(credential));
  }

  nodeTrust(name: string): Promise<NodeTrust> {
    return this.store.nodeTrust(name);
  }

  nodeCount(): Promise<number> {
    return this.store.countNodes();
  }

  /**
   * A heartbeat that carried the join token: admits a new node (pending under approve_nodes)
   * and answers with its credential. A name that holds a credential is refused (the join token
   * must not speak for a node that has joined), unless the join carries that very credential:
   * the agent's own choice, sent again because the first answer was lost.
   */
  async join(hb: HeartbeatRequest): Promise<HeartbeatResponse> {
    // A node joining again (its answer was lost) with a failing driver keeps its GPUs too.
    const taken = await this.lastKnown(hb);
    return new Promise<HeartbeatResponse>((resolve, reject) => {
      this.joining.push({ ...taken, resolve, reject, at: this.scheduler.mono() });
      this.armJoins();
    });
  }

  /** Joins waiting for the next group write, in arrival order (see writeJoins). */
  private joining: Waiting[] = [];
  private joinsArmed = false;

  private armJoins(): void {
    if (this.joinsArmed || this.joining.length === 0) return;
    this.joinsArmed = true;
    const go = () => void this.exclusive(() => this.writeJoins()).catch((e: unknown) => this.log.error({ err: (e as Error).message }, "a group of joins was not handled"));
    if (this.scheduler.soon) this.scheduler.soon(go);
    else go();
  }

  /**
   * The joins that arrived together, in one transaction (a cold start of the whole cluster is a
   * few commits, not one per node) and their events in one more. A node named twice waits for
   * the next group, so that its second join sees what the first wrote. A join the store refuses
   * fails alone.
   */
  private async writeJoins(): Promise<void> {
    this.joinsArmed = false;
    const group: Waiting[] = [];
    const later: Waiting[] = [];
    const names = new Set<string>();
    for (const w of this.joining) {
      if (group.length < MAX_GROUP && !names.has(w.hb.node)) {
        names.add(w.hb.node);
        group.push(w);
      } else later.push(w);
    }
    this.joining = later;
    this.armJoins();
    const mono = this.scheduler.mono();
    this.load.queueWait(Math.max(...group.map((g) => mono - g.at)));
    const health = await this.healthBefore(group.map((g) => g.hb));
    const now = this.scheduler.now();
    const seen = this.observe(now);
    // The credential the agent chose (the same on every try of its join), else a new one.
    const credentials = group.map((g) => g.hb.join_credential ?? newNodeCredential());
    const trusts: NodeTrust[] = [];
    for (const g of group) trusts.push(await this.store.nodeTrust(g.hb.node));
    const writes: JoinWrite[] = group.map((g, i) => ({ hb: g.hb, join: { credentialHash: sha256hex(credentials[i]!), pending: this.nodePolicy.approveNodes && !trusts[i]!.exists } }));
    const applied = await this.applyJoinGroup(writes, now);
    const batch: Batch = { events: [], created: [] };
    const answers: ({ ok: HeartbeatResponse } | { error: unknown })[] = [];
    for (const [i, g] of group.entries()) {
      const r = applied[i]!;
      const node = g.hb.node;
      try {
        if ("error" in r) throw r.error;
        if (r.taken) throw takenError(node);
        this.noteHealth(g, r.created, health, batch);
        const answer = await this.received(g.hb, now, seen, r.created, batch, g.kept);
        if (writes[i]!.join.pending) {
          batch.events.push({ kind: "node.pending", subject: `node/${node}`, message: `node ${node} joined and waits for approval: llmgw nodes approve ${node}` });
          this.log.warn({ node, address: g.hb.address }, "node joined and waits for approval");
        }
        if (trusts[i]!.hasCredential) this.log.info({ node }, "the same join sent again (its answer was lost): answered with the credential the agent chose");
        else this.log.info({ node }, "node credential issued");
        answers.push({ ok: { ...answer, credential: credentials[i]! } });
      } catch (e) {
        answers.push({ error: e });
      }
    }
    this.flushEndpoints();
    await this.writeBatch(batch, now);
    for (const [i, g] of group.entries()) {
      const a = answers[i]!;
      if ("ok" in a) g.resolve(a.ok);
      else g.reject(a.error);
    }
  }

  /** The joins in one transaction; when that fails, one at a time, so that a join the store refuses fails alone. */
  private async applyJoinGroup(writes: JoinWrite[], now: number): Promise<({ created: boolean; taken: boolean } | { error: unknown })[]> {
    try {
      return await this.store.applyJoins(writes, now);
    } catch (e) {
      if (writes.length === 1 || e instanceof StoreUnavailableError) return writes.map(() => ({ error: e }));
      const out: ({ created: boolean; taken: boolean } | { error: unknown })[] = [];
      for (const w of writes)
        out.push(
          await this.store.applyHeartbeat(w.hb, now, w.join).then(
            (r) => r,
            (error: unknown) => ({ error }),
          ),
        );
      return out;
    }
  }

  /**
   * What a group's heartbeats left to write: their events in one transaction, then, when nodes
   * registered, the parked models tried again once. The nodes are written already: a failure
   * here is logged, and their answers still go out.
   */
  private async writeBatch(batch: Batch, now: number): Promise<void> {
    try {
      if (batch.events.length > 0) {
        const plan = { ...emptyPlan(), events: batch.events };
        await this.store.applyPlan(plan, now);
      }
      if (batch.created.length > 0) {
        const why = batch.created.length === 1 ? `new node ${batch.created[0]}` : `${batch.created.length} new nodes`;
        for (const m of await this.store.parkedModels()) await this.unparkModel(m, why);
      }
    } catch (e) {
      this.log.warn({ err: (e as Error).message, events: batch.events.length }, "the events of a group of heartbeats were not written");
    }
  }

  /**
   * A heartbeat from a node already known (by its credential, or from inside the process). One
   * that says what the store holds (the common case) is answered at once, without the lock
   * (answerUnchanged). One with news waits for the next group: the heartbeats that arrive while
   * a group is being written are written after it, together, in one transaction (writeGroup).
   */
  async heartbeat(hb: HeartbeatRequest): Promise<HeartbeatResponse> {
    // A node's heartbeats take their turns in the order they came: each is answered or queued
    // before the node's next one is looked at, so the store ends as its last one says.
    const before = this.nodeTurn.get(hb.node);
    let done = () => {};
    const mine = new Promise<void>((r) => (done = r));
    this.nodeTurn.set(hb.node, mine);
    try {
      if (before) await before;
      const taken = await this.lastKnown(hb);
      const quick = await this.answerUnchanged(taken.hb, taken.kept);
      if (quick) return quick;
      return new Promise<HeartbeatResponse>((resolve, reject) => {
        this.grouped.push({ ...taken, resolve, reject, at: this.scheduler.mono() });
        this.inGroup.set(hb.node, (this.inGroup.get(hb.node) ?? 0) + 1);
        this.armGroup();
      });
    } finally {
      done();
      if (this.nodeTurn.get(hb.node) === mine) this.nodeTurn.delete(hb.node);
    }
  }

  /** Per node, the turn of its latest heartbeat (see heartbeat()). */
  private readonly nodeTurn = new Map<string, Promise<void>>();

  /** Heartbeats waiting for the next group write, in arrival order. */
  private grouped: Waiting[] = [];
  private groupArmed = false;
  /** Per node, how many of its heartbeats wait or are being written: a later one never overtakes them. */
  private readonly inGroup = new Map<string, number>();

  private armGroup(): void {
    if (this.groupArmed || this.grouped.length === 0) return;
    this.groupArmed = true;
    const go = () => void this.exclusive(() => this.writeGroup()).catch((e: unknown) => this.log.error({ err: (e as Error).message }, "a group of heartbeats was not handled"));
    // After the requests read together with this one: a synchronous store (SQLite) would
    // otherwise write each heartbeat alone, before the next is even read.
    if (this.scheduler.soon) this.scheduler.soon(go);
    else go();
  }

  /**
   * Without the lock, for a leader whose store keeps a model in memory: a heartbeat that says
   * what is stored (a last-seen touch, batched to the store), whose reports change nothing and
   * whose node report is held already, changes nothing another writer could be deciding on.
   * Undefined when the heartbeat must take the lock's path.
   */
  private async answerUnchanged(hb: HeartbeatRequest, kept: boolean): Promise<HeartbeatResponse | undefined> {
    // A node not projected yet (the first heartbeats after a start) takes the lock's path, which projects first.
    const skip = () => this.answersFromStore(hb.node) || this.inGroup.has(hb.node) || this.unreachable.has(hb.node);
    if (!this.store.touchIfUnchanged || skip()) return undefined;
    const report = reportOf(hb, kept);
    if (this.reports.toWrite(hb.node, report) !== undefined) return undefined;
    const now = this.scheduler.now();
    const seen = this.observe(now);
    const mine = await this.store.replicaSnapshot(hb.node);
    const plan = processReports({ snapshot: mine, node: hb.node, reports: hb.replicas, now, config: this.config, watchedSince: seen.watchedSince, deaf: this.load.deafSpans() });
    if (!isEmpty(plan) || skip() || !(await this.store.touchIfUnchanged(hb, now))) return undefined;
    this.applyReport(hb.node, report);
    // A tick may have found the node silent meanwhile: then the lock's path writes that it is back.
    if (this.unreachable.has(hb.node)) return undefined;
    return this.response(hb.node);
  }

  /**
   * One group of heartbeats with news: their inventory in one transaction, then each one's
   * reports in arrival order. A failure fails only the heartbeat it belongs to.
   */
  private async writeGroup(): Promise<void> {
    this.groupArmed = false;
    const group = this.grouped.splice(0, MAX_GROUP);
    // More than a group waited: the rest go next.
    this.armGroup();
    const mono = this.scheduler.mono();
    this.load.queueWait(Math.max(...group.map((g) => mono - g.at)));
    const health = await this.healthBefore(group.map((g) => g.hb));
    const now = this.scheduler.now();
    const seen = this.observe(now);
    const applied = await this.applyGroup(
      group.map((g) => g.hb),
      now,
    );
    const batch: Batch = { events: [], created: [] };
    try {
      for (const [i, g] of group.entries()) {
        const r = applied[i]!;
        try {
          if ("error" in r) throw r.error;
          this.noteHealth(g, r.created, health, batch);
          g.resolve(await this.received(g.hb, now, seen, r.created, undefined, g.kept));
        } catch (e) {
          g.reject(e);
        } finally {
          const left = (this.inGroup.get(g.hb.node) ?? 1) - 1;
          if (left > 0) this.inGroup.set(g.hb.node, left);
          else this.inGroup.delete(g.hb.node);
        }
      }
    } finally {
      this.flushEndpoints();
    }
    if (batch.events.length > 0) await this.writeBatch(batch, now);
  }

  /**
   * The heartbeat as taken (gpu-health.ts): with a discovery error and no GPUs, the node's stored
   * GPUs, kept unhealthy. The store is read only then.
   */
  private async lastKnown(hb: HeartbeatRequest): Promise<{ hb: HeartbeatRequest; kept: boolean }> {
    if (!hb.discovery_error || hb.gpus.length > 0) return { hb, kept: false };
    return keepLastKnownGpus(hb, await this.store.nodeGpus([hb.node]));
  }

  /**
   * What is stored of the group's nodes before it is written (gpu-health.ts). Undefined when the
   * store cannot say: then the group's health changes go without events, its heartbeats are still handled.
   */
  private async healthBefore(hbs: readonly HeartbeatRequest[]): Promise<Map<string, HealthBefore> | undefined> {
    const nodes = [...new Set(hbs.map((h) => h.node))];
    try {
      return storedHealth(nodes, await this.store.nodeGpus(nodes), (n) => (this.reportKnown.has(n) ? (this.discovery.get(n)?.error ?? null) : undefined));
    } catch (e) {
      this.log.warn({ err: (e as Error).message, nodes: nodes.length }, "stored GPUs not read: this group's GPU health changes are written without events");
      return undefined;
    }
  }

  /** The health events of one heartbeat the store took, into the group's batch, and logged. */
  private noteHealth(w: Waiting, created: boolean, health: Map<string, HealthBefore> | undefined, batch: Batch): void {
    if (!health) return;
    for (const e of nextHealth(health, w.hb, w.kept === true, created)) {
      batch.events.push(e);
      this.log[/failed|unhealthy/.test(e.kind) ? "warn" : "info"]({ node: w.hb.node, kind: e.kind, ...(e.data as object) }, e.message);
    }
  }

  /** Of the group of heartbeats under way, the latest snapshot whose endpoints are yet to be published. */
  private endpointsDue: Snapshot | undefined;

  private flushEndpoints(): void {
    const due = this.endpointsDue;
    this.endpointsDue = undefined;
    if (due) this.publishEndpoints(due);
  }

  /**
   * The group's inventory in one transaction; when that fails, one transaction per heartbeat, so
   * that a heartbeat the store refuses fails alone. A store that does not answer fails them all
   * at once (each was tried again already where that is safe): their agents send them again.
   */
  private async applyGroup(hbs: HeartbeatRequest[], now: number): Promise<({ created: boolean } | { error: unknown })[]> {
    try {
      return await this.store.applyHeartbeats(hbs, now);
    } catch (e) {
      if (hbs.length === 1 || e instanceof StoreUnavailableError) return hbs.map(() => ({ error: e }));
      const out: ({ created: boolean } | { error: unknown })[] = [];
      for (const hb of hbs)
        out.push(
          await this.store.applyHeartbeat(hb, now).then(
            (r) => ({ created: r.created }),
            (error: unknown) => ({ error }),
          ),
        );
      return out;
    }
  }

  /** The rest of a heartbeat once the store took its inventory: its report, events, replica verdicts, the answer. */
  private async received(hb: HeartbeatRequest, now: number, seen: { watchedSince: number }, created: boolean, batch?: Batch, kept = false): Promise<HeartbeatResponse> {
    await this.noteReported(hb, now, kept);
    // With a batch (a group of joins), its events are written together after the group.
    const event = (kind: string, message: string) => (batch ? void batch.events.push({ kind, subject: `node/${hb.node}`, message }) : this.event(kind, `node/${hb.node}`, message));
    if (created) {
      const gpus = hb.gpus.length;
      await event("node.registered", `node ${hb.node} registered with ${plural(gpus, "GPU")} (${hb.address})`);
      this.log.info({ node: hb.node, address: hb.address, gpus, fabrics: hb.fabrics }, "node registered");
      // New hardware is a reason to try parked models again.
      if (batch) batch.created.push(hb.node);
      else for (const m of await this.store.parkedModels()) await this.unparkModel(m, `new node ${hb.node}`);
    }
    if (this.unreachable.has(hb.node)) {
      const rest = new Set(this.unreachable);
      rest.delete(hb.node);
      this.unreachable = rest;
      await event("node.reachable", `node ${hb.node} is heartbeating again`);
    }
    // Heartbeats are the busiest path: read only the replicas here, and recompute assignments
    // only when a report changed something (the tick does it for everything else).
    const mine = await this.store.replicaSnapshot(hb.node);
    const plan = processReports({ snapshot: mine, node: hb.node, reports: hb.replicas, now, config: this.config, watchedSince: seen.watchedSince, deaf: this.load.deafSpans() });
    if (!isEmpty(plan)) {
      // Only the nodes the changed replicas run on can see their assignments change.
      const touched = new Set([hb.node]);
      for (const r of mine.replicas) for (const sh of r.shards) touched.add(sh.node);
      const after = await this.apply(plan, now);
      this.refreshNodes(after, touched);
      // A replica that became ready (or stopped being) is routed to (or not) at the end of this
      // group of heartbeats, not after the coalesced tick: the endpoint list is projected from
      // the whole fleet, so once per group (a cold start reports hundreds ready at once), not per heartbeat.
      this.endpointsDue = after;
      this.wake();
    } else if (created) this.wake();
    // A standby answers from what the store holds now, not from its last tick: an agent that
    // failed over to it must not be handed a set older than the leader's (same epoch, fewer
    // replicas), or it would stop engines the leader placed. Only after a change: once per change.
    if (this.answersFromStore(hb.node)) await this.catchUp();
    return this.response(hb.node);
  }

  /**
   * Whether a node's answer must be projected from what the store holds now: standing by (see
   * above), or leading without having projected this node since the start (the first tick may be
   * under way), where the broker would answer an empty set at a new generation and the agent
   * would stop every engine it runs.
   */
  private answersFromStore(node: string): boolean {
    return !this.lead.leading || !this.broker.projected(node);
  }

  /** Projects assignments and endpoints again when the store changed since they last were. */
  private async catchUp(): Promise<void> {
    const snap = await this.snapshot();
    const key = snap.version === undefined ? undefined : `${snap.version}/${this.reported}`;
    if (key !== undefined && key === this.projectedAt) return;
    this.refreshAssignments(snap);
    this.publish(snap);
    this.projectedAt = key;
  }

  /**
   * What a heartbeat says that is kept in memory: log listener, certificate, engines, discovery,
   * revisions. It is also written to the store when it changed, so other control planes and a
   * restart know it (node-reports.ts); a failed write is retried by the next heartbeat.
   */
  private async noteReported(hb: HeartbeatRequest, now: number, kept: boolean): Promise<void> {
    const report = reportOf(hb, kept);
    this.applyReport(hb.node, report);
    const json = this.reports.toWrite(hb.node, report);
    if (json === undefined) return;
    try {
      await this.store.saveNodeReport(hb.node, json, now);
      this.reports.written(hb.node, json, now);
    } catch (e) {
      this.log.warn({ node: hb.node, err: (e as Error).message }, "node report not written to the store: the next heartbeat tries again");
    }
  }

  private applyReport(node: string, r: NodeReport): void {
    const reasons = new Map<number, string>(r.gpu_reasons);
    this.reportKnown.add(node);
    if (r.discovery_error || reasons.size > 0) this.discovery.set(node, { error: r.discovery_error || null, reasons, ...(r.gpus_kept ? { kept: true } : {}) });
    else this.discovery.delete(node);
    // A Map, not the parsed record: a model named like an Object.prototype key stays a plain entry.
    const said = r.model_revisions === undefined ? undefined : JSON.stringify(r.model_revisions);
    if (said !== this.revisionsSaid.get(node)) {
      this.reported++;
      if (r.model_revisions !== undefined && said !== undefined) {
        this.revisions.set(node, new Map(Object.entries(r.model_revisions)));
        this.revisionsSaid.set(node, said);
      } else {
        this.revisions.delete(node);
        this.revisionsSaid.delete(node);
      }
    }
    if (r.logs_port !== null) this.logsPorts.set(node, r.logs_port);
    else this.logsPorts.delete(node);
    if (r.logs_tls_cert) this.logsCerts.set(node, r.logs_tls_cert);
    else this.logsCerts.delete(node);
    const engines = this.engines.get(node);
    if (r.engines) this.engines.set(node, r.engines);
    else this.engines.delete(node);
    // A node that gains an engine (or loses one) may change what placement can do.
    if (engines !== undefined && r.engines !== undefined && JSON.stringify(engines) !== JSON.stringify(r.engines)) this.wake();
  }

  /** What the node should run now, as the heartbeat answer carries it. */
  response(node: string): HeartbeatResponse {
    const { assignments, generation } = this.broker.current(node);
    // The epoch the assignments come from: this one's when leading, the leader's when standing by (0: a single head node).
    return { assignments, heartbeat_interval_ms: this.load.intervalMs(), generation, generation_base: this.broker.base, epoch: this.lead.epoch };
  }

  /** The long poll: resolves when the node's assignments change, or after waitMs. */
  async waitForAssignments(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<HeartbeatResponse> {
    // A standby, as for a heartbeat, answers from what the store holds now: an agent that fails
    // over asks its long poll first (at once), and a set from the standby's last tick may lack a
    // replica the leader placed since, which would stop that engine until the next heartbeat. A
    // leader that has not projected this node since it started projects first, as for a heartbeat
    // (once: the polls queued behind the first projection find it done).
    if (this.answersFromStore(node))
      await this.exclusive(async () => {
        if (this.answersFromStore(node)) await this.catchUp();
      });
    await this.broker.wait(node, generation, waitMs, signal);
    return this.response(node);
  }

  /** Recomputes the assignment sets of the given nodes only (a heartbeat's news); the rest keep theirs. */
  private refreshNodes(snapshot: Snapshot, nodes: ReadonlySet<string>): void {
    const replicas = snapshot.replicas.filter((r) => r.shards.some((sh) => nodes.has(sh.node)));
    const all = new Set(nodes);
    for (const r of replicas) for (const sh of r.shards) all.add(sh.node);
    const sub = { ...snapshot, nodes: snapshot.nodes.filter((n) => all.has(n.name)), gpus: snapshot.gpus.filter((g) => all.has(g.node)), replicas };
    const { byNode, settled } = project.assignments(sub, this.config, this.engineKey, this.replicaRevisions);
    const live = new Set(snapshot.replicas.map((r) => r.id));
    const merged = new Map<string, string | null>();
    for (const [id, v] of this.replicaRevisions) if (live.has(id)) merged.set(id, v);
    for (const r of replicas) {
      merged.delete(r.id);
      const v = settled.get(r.id);
      if (v !== undefined) merged.set(r.id, v);
    }
    this.replicaRevisions = merged;
    // Only the given nodes: a peer of theirs also runs replicas left out of `sub`.
    for (const n of sub.nodes) if (nodes.has(n.name)) this.broker.offer(n.name, byNode.get(n.name) ?? []);
  }

  /**
   * Brings every node's assignment set up to the snapshot; the broker bumps and wakes the nodes
   * whose set changed. Only the nodes a change since the last time touched are projected again
   * (the in-memory model's snapshots), else all of them.
   */
  private refreshAssignments(snapshot: Snapshot): void {
    const prev = this.projectedFrom;
    this.projectedFrom = { snapshot, reported: this.reported };
    const touched = prev && prev.reported === this.reported ? project.touchedNodes(prev.snapshot, snapshot) : undefined;
    if (touched) {
      if (touched.size > 0) this.refreshNodes(snapshot, touched);
      return;
    }
    const { byNode, settled } = project.assignments(snapshot, this.config, this.engineKey, this.replicaRevisions);
    this.replicaRevisions = settled;
    this.broker.offerAll(snapshot.nodes.map((n) => [n.name, byNode.get(n.name) ?? []] as const));
  }

  // ---- router -------------------------------------------------------------------------

  private publish(snapshot: Snapshot): void {
    if (!this.sink) return;
    const catalog = project.catalog(snapshot, this.config, this.engines);
    const cfp = JSON.stringify(catalog);
    if (cfp !== this.lastCatalog) {
      this.lastCatalog = cfp;
      this.sink.setCatalog(catalog);
    }
    this.publishEndpoints(snapshot);
  }

  private publishEndpoints(snapshot: Snapshot): void {
    if (!this.sink) return;
    const eps = project.endpoints(snapshot, this.engineKey);
    // Unchanged lists are not re-published: replacing the table is cheap, but it resets the
    // router's per-endpoint metric polling for no reason.
    const fp = project.endpointsFingerprint(eps);
    if (fp === this.lastPublished) return;
    this.lastPublished = fp;
    this.log.info({ count: eps.length }, "publishing endpoints");
    this.sink.setEndpoints(eps);
  }

  /**
   * A client asked for a model nothing serves (the router's demand signal): an on-demand model
   * then wants a replica. Written at most once a second per model, however many ask.
   */
  async requestModel(nameOrAlias: string): Promise<boolean> {
    const now = this.scheduler.now();
    const last = this.demandWritten.get(nameOrAlias);
    if (last !== undefined && now - last >= 0 && now - last < 1000) return true;
    // Marked before the write, so requests arriving while it is under way do not write again.
    this.demandWritten.set(nameOrAlias, now);
    try {
      const row = await this.resolve(nameOrAlias);
      if (!row) {
        this.demandWritten.delete(nameOrAlias);
        return false;
      }
      await this.store.updateModelState(row.name, { lastRequestedAt: now });
    } catch (e) {
      // The router's request path must not fail because the store cannot take a write now.
      this.demandWritten.delete(nameOrAlias);
      this.log.warn({ model: nameOrAlias, err: (e as Error).message }, "could not record demand for a model");
      return false;
    }
    this.wake(true);
    return true;
  }

  // ---- views --------------------------------------------------------------------------

  async tables(): Promise<Tables> {
    const snapshot = await this.snapshot();
    // With several routers a table shows how long a replica is known to have gone unused.
    const lastUsed = this.shared ? knownIdleStamps({ lastUsed: this.lastUsed, since: this.usageSince }) : this.lastUsed;
    return buildTablesPaced({ snapshot, now: this.scheduler.now(), lastUsed, nodeTimeoutMs: this.config.nodeTimeoutMs, watchedSince: this.watchedSince, engines: this.engines }, () => this.pause());
  }

  async summary(): Promise<Summary> {
    return (await this.overview()).summary;
  }

  /** The summary and the tables it is derived from, of one snapshot: they describe the same moment. */
  async overview(): Promise<{ summary: Summary; tables: Tables }> {
    const now = this.scheduler.now();
    // Shed first when behind (load.ts): a summary up to SUMMARY_CACHE_MS old, its head field fresh.
    const c = this.overviewCache;
    if (c && this.load.shedding().includes("summary") && now - c.at >= 0 && now - c.at < SUMMARY_CACHE_MS) return { ...c.value, summary: { ...c.value.summary, head: this.load.view() } };
    const recent = await this.store.listEvents({ kind: "replica.evicted", since: now - 3_600_000, limit: 50 });
    const evictions = recent.reverse().map((e) => {
      const d = (e.data ?? {}) as { replica?: string; model?: string; for_model?: string; idle_seconds?: number };
      return { at: new Date(e.at).toISOString(), replica: d.replica ?? "", model: d.model ?? "", for_model: d.for_model ?? "", idle_seconds: d.idle_seconds ?? -1 };
    });
    const tables = await this.tables();
    const extra = this.summarySources;
    const store = extra.store?.();
    const value = {
      summary: {
        ...summarize(tables, { version: this.opts.version, evictions, ...(store ? { store: store.members, ...(store.error ? { storeError: store.error } : {}) } : {}), ...(extra.controlPlanes ? { controlPlanes: extra.controlPlanes() } : {}) }),
        head: this.load.view(),
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
    const resolved = (await this.resolve(model))?.name ?? model;
    return all.filter((r) => r.model === resolved);
  }

  async models(): Promise<ModelView[]> {
    return (await this.tables()).models;
  }

  async model(nameOrAlias: string): Promise<{ view: ModelView; spec: ModelSpec }> {
    const row = await this.resolveOrThrow(nameOrAlias);
    const view = (await this.tables()).models.find((m) => m.name === row.name)!;
    return { view, spec: row.spec };
  }

  /** Whether a name or alias names a model. */
  async hasModel(nameOrAlias: string): Promise<boolean> {
    return (await this.resolve(nameOrAlias)) !== undefined;
  }

  /** Why a model has (or has not) the replicas it wants, and what would make it fit (explain.ts). */
  async explain(nameOrAlias: string): Promise<Explanation> {
    const row = await this.resolveOrThrow(nameOrAlias);
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
    return {
      snapshot: await this.snapshot(),
      now: this.scheduler.now(),
      lastUsed: this.lastUsed,
      config: { ...this.config, nodeTimeoutMs: this.load.nodeTimeoutInForce() },
      engines: this.engines,
      deaf: this.load.deafSpans(),
      watchedSince: this.watchedSince,
      jumpedAt: Math.max(this.jumpedAt, this.usageSince),
    };
  }

  // ---- catalog ------------------------------------------------------------------------

  /** The model a name or alias refers to, or undefined. */
  private async resolve(nameOrAlias: string): Promise<ModelRow | undefined> {
    return (await this.store.modelByName(nameOrAlias)) ?? (await this.store.modelByAlias(nameOrAlias));
  }

  private async resolveOrThrow(nameOrAlias: string): Promise<ModelRow> {
    const row = await this.resolve(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    return row;
  }

  /**
   * Creates or replaces models, all or none (catalog.ts has the rules). A changed spec gets a
   * new revision, and a new revision unparks the model: the operator changed something, so it
   * deserves another try.
   */
  putModels(specs: ModelSpec[], inFile = false): Promise<PutResult[]> {
    return this.exclusive(async () => {
      const { results, writes, conflicts } = catalogChanges(specs, await this.store.models(), inFile);
      if (conflicts.length > 0) throw new ConflictError(conflicts[0]!.message, conflicts[0]!.path, conflicts);
      if (writes.length > 0) await this.store.saveModels(writes, this.scheduler.now());
      for (const r of results) {
        if (r.result === "unchanged") continue;
        await this.event(`model.${r.result}`, `model/${r.name}`, `model ${r.name} ${r.result} (revision ${r.revision})`);
        this.log.info({ model: r.name, revision: r.revision, result: r.result }, "catalog changed");
      }
      this.wake(true);
      return results;
    });
  }

  /** What putModels would refuse of these specs (holes skipped), changing nothing: paths into a catalog file. */
  catalogConflicts(specs: (ModelSpec | undefined)[]): Promise<CatalogIssue[]> {
    return this.exclusive(async () => catalogChanges(specs, await this.store.models(), true).conflicts);
  }

  deleteModel(nameOrAlias: string): Promise<string> {
    return this.exclusive(async () => {
      const row = await this.resolveOrThrow(nameOrAlias);
      if (!(await this.store.deleteModel(row.name))) throw new NotFoundError(`model "${row.name}" not found`);
      await this.event("model.deleted", `model/${row.name}`, `model ${row.name} deleted`);
      this.log.info({ model: row.name }, "model deleted");
      this.wake(true);
      return row.name;
    });
  }

  /** Clears a parked model so it is tried again; false when it was not parked. */
  unpark(nameOrAlias: string, why = "unparked by an operator"): Promise<{ model: string; changed: boolean }> {
    return this.exclusive(async () => {
      const row = await this.resolveOrThrow(nameOrAlias);
      return { model: row.name, changed: await this.unparkModel(row.name, why) };
    });
  }

  private async unparkModel(model: string, why: string): Promise<boolean> {
    const changed = await this.store.unpark(model);
    if (changed) {
      await this.event("model.unparked", `model/${model}`, `model ${model} unparked (${why}); it will be tried again`);
      this.log.info({ model, why }, "model unparked");
      this.wake(true);
    }
    return changed;
  }

  /** A consistent copy of the database in a temporary file beside it; the caller deletes it. */
  async backup(): Promise<string> {
    const path = `${this.opts.dataDir ?? "."}/backup-${process.pid}-${this.scheduler.now()}.db`;
    await this.store.backupTo(path);
    this.log.info({ path }, "database backed up");
    return path;
  }

  /**
   * Where a replica's engine log can be read: its leader node's log listener. With `previous`,
   * a replica no longer in the control plane is looked for too: its node is the one it was
   * placed on (the replica.placed event), whose agent keeps its last log a while; and
   * `predecessor` names the failed replica this one replaced, whose last run is the run before
   * this one's when its own node has no earlier run of it.
   */
  async logSource(id: string, previous = false): Promise<{ url: string; node: string; token: string; cert?: string; predecessor?: string }> {
    const snap = await this.snapshot();
    const r = snap.replicas.find((x) => x.id === id);
    const placed = previous || !r ? (await this.store.listEvents({ subject: `replica/${id}`, kind: "replica.placed", limit: 1 }))[0] : undefined;
    let node = r?.shards[0]!.node;
    if (!node) {
      const placedOn = placed ? placedNode(placed) : undefined;
      if (!placedOn) throw new NotFoundError(`replica "${id}" not found (not in the control plane, and no event says where it ran)`);
      if (!previous) throw new NotFoundError(`replica "${id}" is no longer running (it ran on ${placedOn}): \`llmgw logs ${id} --previous\` shows its last run`);
      node = placedOn;
    }
    const address = snap.nodes.find((n) => n.name === node)?.address;
    const port = this.logsPorts.get(node);
    const digest = await this.store.credentialHashOf(node);
    if (!address || port === undefined || !digest) throw new NotFoundError(`the agent on ${node} does not serve engine logs (started with --logs-listen off, or not heartbeating)`);
    const cert = this.logsCerts.get(node);
    const predecessor = placed ? placedReplaces(placed) : undefined;
    return {
      url: `${cert ? "https" : "http"}://${bracketHost(address)}:${port}/logs/${encodeURIComponent(id)}`,
      node,
      token: logsToken(digest),
      ...(cert ? { cert } : {}),
      ...(predecessor ? { predecessor } : {}),
    };
  }

  // ---- API keys -----------------------------------------------------------------------

  /** Creates a client API key; the key itself is returned this once and never stored. */
  async createApiKey(name: string, pool?: string): Promise<{ name: string; key: string; pool: string | null }> {
    const key = `sk-llmgw-${randomBytes(24).toString("base64url")}`;
    if (!(await this.store.createApiKey({ name, hash: sha256hex(key), pool: pool ?? null, createdAt: this.scheduler.now() })))
      throw new ConflictError(`an API key named "${name}" already exists; revoke it first or pick another name`, ["name"]);
    await this.event("key.created", `key/${name}`, `API key ${name} created${pool ? ` for pool ${pool}` : ""}`);
    await this.publishKeys();
    return { name, key, pool: pool ?? null };
  }

  async listApiKeys(): Promise<{ name: string; pool: string | null; created_at: string }[]> {
    return (await this.store.listApiKeys()).map((k) => ({ name: k.name, pool: k.pool, created_at: new Date(k.createdAt).toISOString() }));
  }

  async revokeApiKey(name: string): Promise<void> {
    if (!(await this.store.revokeApiKey(name))) throw new NotFoundError(`API key "${name}" not found`);
    await this.event("key.revoked", `key/${name}`, `API key ${name} revoked`);
    await this.publishKeys();
  }

  private async publishKeys(): Promise<void> {
    await this.keys.publish(this.sink);
  }

  // ---- node admin ---------------------------------------------------------------------

  /** Admits a pending node (serve --approve-nodes); false when it was not pending. */
  approveNode(name: string): Promise<{ changed: boolean }> {
    return this.exclusive(async () => {
      const t = await this.store.nodeTrust(name);
      if (!t.exists) throw new NotFoundError(`node "${name}" not found`);
      if (t.adminState !== "pending") return { changed: false };
      await this.store.setAdminState(name, "none");
      await this.event("node.approved", `node/${name}`, `node ${name} approved: replicas may be placed on it`);
      this.log.info({ node: name }, "node approved");
      this.wake(true);
      return { changed: true };
    });
  }

  /**
   * Forgets a node and its credential, so only the join token (and a fresh start of its agent)
   * brings it back. Refused while replicas run on it unless forced; forced, what is still on it
   * is stopped here and placed elsewhere by the next reconcile.
   */
  deleteNode(name: string, force: boolean): Promise<{ stopped: string[] }> {
    return this.exclusive(async () => {
      const snap = await this.snapshot();
      if (!snap.nodes.some((n) => n.name === name)) throw new NotFoundError(`node "${name}" not found`);
      const on = snap.replicas.filter((r) => r.shards.some((s) => s.node === name));
      const running = on.filter((r) => r.state !== "failed");
      if (running.length > 0 && !force) {
        const ids = running.map((r) => r.id);
        throw new ConflictError(
          `node ${name} runs ${plural(running.length, "replica")} (${ids.slice(0, 5).join(", ")}${ids.length > 5 ? ", …" : ""}): drain it first (llmgw drain ${name} --wait), or delete with --force, which drains and then deletes`,
          ["force"],
        );
      }
      const events: NewEvent[] = on.map((r) => ({ kind: "replica.removed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} removed: its node ${name} was deleted` }));
      events.push({ kind: "node.deleted", subject: `node/${name}`, message: `node ${name} deleted; its credential no longer works, and it joins again only with the join token` });
      if (!(await this.store.deleteNode(name, on.map((r) => r.id), events, this.scheduler.now()))) throw new NotFoundError(`node "${name}" not found`);
      this.forgetNode(name);
      this.log.warn({ node: name, replicas: on.map((r) => r.id) }, "node deleted");
      this.refreshAssignments(await this.snapshot());
      this.wake(true);
      return { stopped: on.map((r) => r.id) };
    });
  }

  /** Drops what is kept in memory about a deleted node; its long polls are answered now. */
  private forgetNode(name: string): void {
    this.logsPorts.delete(name);
    this.logsCerts.delete(name);
    this.engines.delete(name);
    this.discovery.delete(name);
    this.reportKnown.delete(name);
    this.revisions.delete(name);
    this.revisionsSaid.delete(name);
    this.reports.forget(name);
    this.reported++;
    const rest = new Set(this.unreachable);
    rest.delete(name);
    this.unreachable = rest;
    this.broker.forget(name);
  }

  /** Lets a node report `address` although its heartbeats come from elsewhere; null withdraws it. */
  async allowNodeAddress(name: string, address: string | null): Promise<{ changed: boolean }> {
    const { previous } = await this.store.setAllowedAddress(name, address, this.scheduler.now());
    const changed = (previous ?? null) !== address;
    if (changed)
      await this.event(
        "node.address_allowed",
        `node/${name}`,
        address === null ? `node ${name} may again report only the address its heartbeats come from` : `node ${name} may report address ${address} besides the one its heartbeats come from`,
      );
    return { changed };
  }

  allowedAddresses(): Promise<{ node: string; address: string }[]> {
    return this.store.listAllowedAddresses();
  }

  /** Cordons, drains or uncordons a node. Only approving takes a node out of pending: a cordon or uncordon must not admit it by the way. */
  setNodeAdminState(name: string, state: AdminState): Promise<{ changed: boolean }> {
    return this.exclusive(async () => {
      const { exists, adminState } = await this.store.nodeTrust(name);
      if (!exists) throw new NotFoundError(`node "${name}" not found`);
      if (adminState === "pending" && state !== "pending") throw new ConflictError(`node "${name}" is pending approval: approve it first (llmgw nodes approve ${name})`, ["node"]);
      const { previous } = await this.store.setAdminState(name, state);
      if (previous === undefined) throw new NotFoundError(`node "${name}" not found`);
      const verb = state === "none" ? "uncordoned" : state;
      if (previous !== state) {
        await this.event(`node.${verb}`, `node/${name}`, `node ${name} ${verb}`);
        this.log.info({ node: name, from: previous, to: state }, `node ${verb}`);
        this.wake(true);
      }
      return { changed: previous !== state };
    });
  }

  // ---- events -------------------------------------------------------------------------

  /** Appends an event; a node-trust refusal worth an operator's eye goes through here too. */
  async event(kind: string, subject: string, message: string, data?: unknown): Promise<void> {
    await this.store.appendEvent({ at: this.scheduler.now(), kind, subject, message, data });
  }

  async events(opts: { afterId?: number; limit: number; subject?: string }): Promise<EventView[]> {
    return (await this.store.listEvents(opts)).map((e) => ({ id: e.id, at: new Date(e.at).toISOString(), kind: e.kind, subject: e.subject, message: e.message }));
  }
}

/** The tick's one write: scaling targets, then reachability, then the reconcile plan, with their events in that order. */
function combined(plan: Plan, changes: readonly ScaleChange[], reached: readonly NewEvent[]): Plan {
  if (changes.length === 0 && reached.length === 0) return plan;
  const modelState = new Map(plan.modelState);
  for (const c of changes) modelState.set(c.model, { scaleTarget: c.to, ...modelState.get(c.model) });
  return { ...plan, modelState, events: [...changes.map(scaleEvent), ...reached, ...plan.events] };
}

/** The refusal a join-token heartbeat for a node that has joined gets: it says how to re-join. */
function takenError(node: string): ConflictError {
  return new ConflictError(
    `node ${node} has already joined and holds its own credential; the join token cannot speak for it. ` +
      `To join it again: run \`llmgw nodes delete ${node}\` on the head node, then remove the agent's credential file ` +
      `(<state-dir>/${AGENT_CREDENTIAL_FILE}, by default ./llmgw-agent/${AGENT_CREDENTIAL_FILE}) on the node and restart the agent`,
    ["node"],
  );
}
