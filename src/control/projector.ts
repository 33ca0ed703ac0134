// What the agents and the router are told, projected from the state: each node's assignment set
// (through the broker, which numbers its generations and answers the long polls), the endpoint
// list and the catalog the router routes by, and the client API keys; each handed over only when
// it changed (by fingerprint), and only the nodes a change touched are projected again. A head
// node answers no node before it has projected it (answersFromStore): an empty set at a new
// generation would make the agent stop every engine it runs.

import type { Logger } from "pino";
import type { Scheduler } from "../lib/scheduler";
import type { Assignment, HeartbeatResponse } from "../protocol/heartbeat";
import type { WeightsRemoval } from "../protocol/weights-admin";
import type { Manifests } from "./manifests";
import type { WeightsPlanner } from "./weights-planner";
import { type HubOrders, weightsFor } from "./weights-orders";
import { AssignmentBroker } from "./broker";
import type { EngineKeys } from "./engine-keys";
import type { EndpointSink } from "./interfaces";
import { KeyPublisher } from "./key-publisher";
import type { LeadershipView } from "./leadership";
import type { NodeMemory } from "./node-memory";
import * as project from "./projections";
import type { ReconcileConfig } from "./reconciler";
import type { KeysPort } from "./store-port";
import type { Snapshot } from "./types";

export interface ProjectorOptions {
  /** The router's side; absent without a router (nothing is published). */
  sink?: EndpointSink;
  config: ReconcileConfig;
  engineKeys: EngineKeys;
  memory: Pick<NodeMemory, "snapshot" | "engines" | "reported">;
  store: Pick<KeysPort, "listApiKeys" | "listTeams">;
  leadership: LeadershipView;
  /** The heartbeat interval announced to agents now (load.ts). */
  interval: { intervalMs(): number };
  scheduler: Scheduler;
  log: Logger;
  /** Weights from the Hub: the revisions' files and where each node fetches them (weights-orders.ts); absent: none are sent. */
  weights?: {
    manifests: Pick<Manifests, "get" | "needsToken">;
    hub: HubOrders;
    planner?: Pick<WeightsPlanner, "orders">;
    /** `weights pull` and `weights rm` (weights-admin.ts): revisions a node is to hold with no replica there, and to remove. */
    admin?: { seedsOf(node: string): { repo: string; revision: string }[]; removalsOf(node: string): WeightsRemoval[] };
    /** Weights operators placed at file:// sources, as nodes found them (local-weights.ts). */
    local?: { revisionOf(source: string): string | undefined; version(): number };
  };
}

export class Projector {
  /** Each node's assignment set and generation, and the long polls waiting on them. */
  private readonly broker: AssignmentBroker;
  /** The client API keys as the router was last handed them (key-publisher.ts). */
  private readonly keys: KeyPublisher;
  /** The sink is told from start() on: a router thread not started yet would lose what it was sent. */
  private live = false;
  /** Undefined until the first publication: the first list goes out even when it is empty (a router waits for it, router/first-tables.ts). */
  private lastEndpoints: string | undefined;
  private lastCatalog = "";
  /**
   * The snapshot version and reported-revisions count the assignments and endpoints were last
   * projected from: a tick over unchanged state (the steady state of a large fleet) skips them.
   */
  private projectedAt: string | undefined;
  /** The snapshot (and reported-revisions count) every node's assignments were last brought up to: the next projection covers only what changed since. */
  private projectedFrom: { snapshot: Snapshot; reported: number } | undefined;
  /**
   * The revision each live replica was handed, once every one of its nodes had reported theirs
   * (see projections.ts). In memory: a restarted head node settles it again.
   */
  private replicaRevisions: ReadonlyMap<string, string | null> = new Map();
  private localVersion = 0;
  private sourcesOf: { snap: Snapshot; list: string[] } | undefined;
  private readonly localRevision = (source: string) => this.o.weights?.local?.revisionOf(source);
  /** Of the group of heartbeats under way, the latest snapshot whose endpoints are yet to be published. */
  private endpointsDue: Snapshot | undefined;

  constructor(private readonly o: ProjectorOptions) {
    // Boot time in ms × 1000: a restarted server's numbers never meet the ones its agents hold
    // from the last run unless that run made a thousand changes a millisecond.
    this.broker = new AssignmentBroker(o.scheduler.now() * 1000, o.scheduler);
    this.keys = new KeyPublisher(async () => {
      const [keys, teams] = await Promise.all([o.store.listApiKeys(), o.store.listTeams()]);
      return { keys, teams };
    });
  }

  /** From now on the sink is told (the router listens); resolves once it holds the API keys. */
  async start(): Promise<void> {
    this.live = true;
    // What was projected before went nowhere: the next projection hands over everything.
    this.projectedAt = undefined;
    this.projectedFrom = undefined;
    this.lastEndpoints = undefined;
    this.lastCatalog = "";
    this.keys.reset();
    await this.publishKeys();
  }

  /** A node's assignments now (the weights plan reads every node's). */
  assignmentsOf(node: string): readonly Assignment[] {
    return this.broker.current(node).assignments;
  }

  /** A replica's engine key (engine-keys.ts). */
  engineKey(replicaId: string): string | null {
    return this.o.engineKeys.of(replicaId);
  }

  /** What the node should run now, as a heartbeat's answer carries it. */
  response(node: string): HeartbeatResponse {
    const { assignments, generation } = this.broker.current(node);
    const w = this.o.weights;
    let weights: { weights: HeartbeatResponse["weights"]; fetches?: HeartbeatResponse["fetches"] } | undefined;
    if (w !== undefined) {
      const all = weightsFor(assignments, w.manifests, w.hub, w.admin?.seedsOf(node));
      // With a plan (peers of the fabric first), its orders; none said before the first plan (the
      // agent keeps what it runs). Without a planner, every file from the Hub.
      const fetches = w.planner !== undefined ? w.planner.orders(node) : all.fetches;
      weights = { weights: all.weights, ...(fetches !== undefined ? { fetches } : {}) };
    }
    const remove = w?.admin?.removalsOf(node) ?? [];
    const local = w?.local !== undefined ? this.localSources() : [];
    // The epoch the assignments come from: this one's when leading, the leader's when standing by (0: a single head node).
    return {
      assignments,
      heartbeat_interval_ms: this.o.interval.intervalMs(),
      generation,
      generation_base: this.broker.base,
      epoch: this.o.leadership.get().epoch,
      ...(weights ?? {}),
      ...(remove.length > 0 ? { remove } : {}),
      ...(local.length > 0 ? { local_sources: local } : {}),
    };
  }

  /** Resolves when the node's assignments change from `generation`, or after waitMs (broker.ts). */
  wait(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<void> {
    return this.broker.wait(node, generation, waitMs, signal);
  }

  /**
   * Whether a node's answer must be projected from what the store holds now: standing by (an
   * agent that failed over must not be handed a set older than the leader's, or it would stop
   * engines the leader placed), or leading without having projected this node since the start
   * (the first tick may be under way).
   */
  answersFromStore(node: string): boolean {
    return !this.o.leadership.get().leading || !this.broker.projected(node);
  }

  /** Projects assignments and endpoints again when the store changed since they last were. */
  async catchUp(): Promise<void> {
    const snap = await this.o.memory.snapshot();
    const key = this.keyOf(snap);
    if (key !== undefined && key === this.projectedAt) return;
    this.refreshAssignments(snap);
    this.publish(snap);
    this.projectedAt = key;
  }

  /**
   * A tick's projection: assignments, endpoints, catalog and keys, unless the state is the one
   * they were last projected from (the O(fleet) work skipped). `pause` runs between the steps.
   */
  async project(after: Snapshot, pause: () => Promise<void>): Promise<void> {
    const key = this.keyOf(after);
    if (key !== undefined && key === this.projectedAt) return;
    this.refreshAssignments(after);
    await pause();
    this.publish(after);
    // Keys another control plane created or revoked arrive with the state read here.
    await this.publishKeys();
    this.projectedAt = key;
  }

  /** Recomputes the assignment sets of the given nodes only (a heartbeat's news); the rest keep theirs. */
  refreshNodes(snapshot: Snapshot, nodes: ReadonlySet<string>): void {
    const replicas = snapshot.replicas.filter((r) => r.shards.some((sh) => nodes.has(sh.node)));
    const all = new Set(nodes);
    for (const r of replicas) for (const sh of r.shards) all.add(sh.node);
    const sub = { ...snapshot, nodes: snapshot.nodes.filter((n) => all.has(n.name)), gpus: snapshot.gpus.filter((g) => all.has(g.node)), replicas };
    const { byNode, settled } = project.assignments(sub, this.o.config, this.o.engineKeys.of, this.replicaRevisions, this.localRevision);
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
   * (the in-memory image's snapshots), else all of them.
   */
  refreshAssignments(snapshot: Snapshot): void {
    const prev = this.projectedFrom;
    const reported = this.o.memory.reported;
    this.projectedFrom = { snapshot, reported };
    // Weights found at a file:// source since (a revision now known): every node again.
    const localVersion = this.o.weights?.local?.version() ?? 0;
    const sameLocal = localVersion === this.localVersion;
    this.localVersion = localVersion;
    const touched = prev && prev.reported === reported && sameLocal ? project.touchedNodes(prev.snapshot, snapshot) : undefined;
    if (touched) {
      if (touched.size > 0) this.refreshNodes(snapshot, touched);
      return;
    }
    const { byNode, settled } = project.assignments(snapshot, this.o.config, this.o.engineKeys.of, this.replicaRevisions, this.localRevision);
    this.replicaRevisions = settled;
    this.broker.offerAll(snapshot.nodes.map((n) => [n.name, byNode.get(n.name) ?? []] as const));
  }

  /** The node's weight orders changed: its long polls are answered now, with them. */
  ordersChanged(node: string): void {
    this.broker.nudge(node);
  }

  /** A deleted node: its long polls are answered now. */
  forget(node: string): void {
    this.broker.forget(node);
  }

  /**
   * A replica became ready (or stopped being): routed to (or not) at the end of this group of
   * heartbeats, not after the coalesced tick. The endpoint list is projected from the whole fleet,
   * so once per group (a cold start reports hundreds ready at once), not per heartbeat.
   */
  endpointsChanged(after: Snapshot): void {
    this.endpointsDue = after;
  }

  /** Publishes the endpoints a group of heartbeats changed, once. */
  flushEndpoints(): void {
    const due = this.endpointsDue;
    this.endpointsDue = undefined;
    if (due) this.publishEndpoints(due);
  }

  /** Hands the router the client API keys when they differ from what it holds. */
  async publishKeys(): Promise<void> {
    await this.keys.publish(this.live ? this.o.sink : undefined);
  }

  /** The catalog's file:// sources, as last projected: every agent looks for them on its disk. */
  private localSources(): string[] {
    const snap = this.projectedFrom?.snapshot;
    if (snap === undefined) return [];
    if (this.sourcesOf?.snap !== snap) this.sourcesOf = { snap, list: [...new Set(snap.models.map((m) => m.spec.source).filter((s): s is string => s?.startsWith("file://") === true))].sort() };
    return this.sourcesOf.list;
  }

  private keyOf(snap: Snapshot): string | undefined {
    return snap.version === undefined ? undefined : `${snap.version}/${this.o.memory.reported}/${this.o.weights?.local?.version() ?? 0}`;
  }

  private publish(snapshot: Snapshot): void {
    const sink = this.o.sink;
    if (!sink || !this.live) return;
    const catalog = project.catalog(snapshot, this.o.config, this.o.memory.engines);
    const cfp = JSON.stringify(catalog);
    if (cfp !== this.lastCatalog) {
      this.lastCatalog = cfp;
      sink.setCatalog(catalog);
    }
    this.publishEndpoints(snapshot);
  }

  private publishEndpoints(snapshot: Snapshot): void {
    const sink = this.o.sink;
    if (!sink || !this.live) return;
    const eps = project.endpoints(snapshot, this.o.engineKeys.of);
    // Unchanged lists are not re-published: replacing the table is cheap, but it resets the
    // router's per-endpoint metric polling for no reason.
    const fp = project.endpointsFingerprint(eps);
    if (fp === this.lastEndpoints) return;
    this.lastEndpoints = fp;
    this.o.log.info({ count: eps.length }, "publishing endpoints");
    sink.setEndpoints(eps);
  }
}
