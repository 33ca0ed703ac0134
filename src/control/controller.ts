// The control plane's front door: the admin and agent APIs call it; it reads and writes the
// store, derives every view from one snapshot, runs the reconcile step, hands agents their
// assignments (with a long poll so a start does not wait a heartbeat interval) and publishes
// ready replicas to the router. It meets the router only through the interfaces in
// interfaces.ts.

import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Logger } from "pino";
import type { ModelSpec } from "../protocol/catalog";
import { type Assignment, type EngineReport, type HeartbeatRequest, type HeartbeatResponse, logsToken } from "../protocol/heartbeat";
import type { AdminState, EventView, ModelView, NodeView, ReplicaView, Summary, Tables } from "../protocol/views";
import { ConflictError, NotFoundError, type Snapshot, type Store } from "../store";
import type { Clock } from "./clock";
import type { CatalogEntry, EndpointInfo, EndpointSink, UsageSource } from "./interfaces";
import { DEFAULT_RECONCILE, type Plan, agentStartTimeout, rendezvousPort, serverStartDeadline, type ReconcileConfig, isEmpty, observedFrom, processReports, reconcile } from "./reconciler";
import { commonRevision } from "./revisions";
import { summarize } from "./summary";
import { buildTables, nodeState } from "./views";

export interface ControllerOptions {
  store: Store;
  clock: Clock;
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

type Waiter = { generation: number; resolve: () => void };

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

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

/** HMAC-SHA256 of the replica id under the head node's engine secret, hex (64 characters). */
export function deriveEngineKey(secret: string, replicaId: string): string {
  return createHmac("sha256", secret).update(`llmgw-engine-key\u0000${replicaId}`).digest("hex");
}

export class Controller {
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly log: Logger;
  readonly config: ReconcileConfig;
  private usage: UsageSource | undefined;
  private sink: EndpointSink | undefined;
  /** The router's last-used map as collected on the latest tick. */
  private lastUsed: ReadonlyMap<string, number> = new Map();
  private lastPublished = "";
  private lastCatalog = "";
  /** Per node: a counter bumped whenever its assignment set changes, and what it was computed from. */
  private readonly generations = new Map<string, { generation: number; fingerprint: string; assignments: Assignment[] }>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  /** Nodes last seen unreachable, so the event is written once per outage. */
  private readonly unreachable = new Set<string>();
  /**
   * Generations start from the boot time in seconds, so an agent that kept its number across a
   * server restart never mistakes the new server's set for the one it already has.
   */
  private readonly generationBase: number;
  private wakeScheduled = false;
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
  private joinTokenDigest: Buffer | undefined;
  nodePolicy: NodePolicy = { ...DEFAULT_NODE_POLICY };
  private readonly lowSince = new Map<string, number>();
  readonly scaleDownDelayMs: number;
  private onWake: (() => void) | undefined;
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
    this.clock = opts.clock;
    this.log = opts.log;
    // The margin covers an assignment that waits for the next heartbeat and a verdict that waits
    // for the one after, plus a minute for the agent's own work before it launches the engine.
    this.config = { ...DEFAULT_RECONCILE, nodeTimeoutMs: opts.nodeTimeoutMs, startMarginMs: 2 * opts.heartbeatIntervalMs + 60_000, ...opts.reconcile };
    // Boot time in ms × 1000: a restarted server's numbers never meet the ones its agents hold
    // from the last run unless that run made a thousand changes a millisecond.
    this.generationBase = opts.clock.now() * 1000;
    this.watchedSince = opts.clock.now();
    this.scaleDownDelayMs = opts.scaleDownDelayMs ?? 60_000;
  }

  /**
   * Setters, not constructor arguments: a control plane without a router is fully working; it
   * just cannot tell idle from busy (it says "unknown") and publishes to no one.
   */
  setUsageSource(u: UsageSource): void {
    this.usage = u;
  }

  setEndpointSink(s: EndpointSink): void {
    this.sink = s;
    this.lastPublished = "";
    this.lastCatalog = "";
    this.publishKeys();
  }

  /** Called when something happened that deserves a reconcile before the next tick. */
  setWakeHandler(fn: () => void): void {
    this.onWake = fn;
  }

  private wake(): void {
    if (!this.onWake || this.wakeScheduled) return;
    this.wakeScheduled = true;
    queueMicrotask(() => {
      this.wakeScheduled = false;
      this.onWake?.();
    });
  }

  /**
   * A replica's engine key: HMAC-SHA256 of its id under the head node's secret. Every shard and
   * the published endpoint get the same one; another replica's key says nothing about it.
   */
  engineKey(replicaId: string): string | null {
    const secret = this.opts.engineSecret;
    return secret === undefined ? null : deriveEngineKey(secret, replicaId);
  }

  private newId = (): string => `r-${randomBytes(4).toString("hex")}`;

  /** One control-plane step: collect usage, reconcile, hand out assignments, publish endpoints. */
  /** Reads the router's last-used map: once a tick, so its cost does not grow with traffic. */
  collectUsage(): void {
    if (this.usage) this.lastUsed = new Map(this.usage.lastUsed());
  }

  tick(): Plan {
    // Usage first, so idleness is as fresh as what is published beside it.
    this.collectUsage();
    const now = this.clock.now();
    const seen = this.observe(now);
    let snapshot = this.store.snapshot();
    if (this.scale(snapshot, now)) snapshot = this.store.snapshot();
    this.noteReachability(snapshot, now);
    const plan = reconcile({ snapshot, now, lastUsed: this.lastUsed, config: this.config, newId: this.newId, engines: this.engines, ...seen });
    const after = isEmpty(plan) ? snapshot : this.apply(plan, now);
    this.refreshAssignments(after);
    this.publish(after);
    return plan;
  }

  private apply(plan: Plan, now: number): Snapshot {
    this.store.applyPlan(plan, now);
    for (const e of plan.events) this.log.info({ kind: e.kind, subject: e.subject }, e.message);
    return this.store.snapshot();
  }

  private noteReachability(snapshot: Snapshot, now: number): void {
    const events: Plan["events"] = [];
    for (const n of snapshot.nodes) {
      const gone = nodeState(n.adminState, observedFrom(n.lastHeartbeat, now, this.watchedSince), now, this.config.nodeTimeoutMs) === "unreachable";
      if (gone && !this.unreachable.has(n.name)) {
        this.unreachable.add(n.name);
        events.push({ kind: "node.unreachable", subject: `node/${n.name}`, message: `node ${n.name} unreachable: no heartbeat for ${Math.round((now - n.lastHeartbeat) / 1000)}s` });
      } else if (!gone) this.unreachable.delete(n.name);
    }
    for (const e of events) {
      this.store.appendEvent({ at: now, ...e });
      this.log.warn({ kind: e.kind, subject: e.subject }, e.message);
    }
  }

  // ---- agents -------------------------------------------------------------------------

  setNodePolicy(p: Partial<NodePolicy>): void {
    this.nodePolicy = { ...this.nodePolicy, ...p };
  }

  /** The join token agents present to be admitted; replaced by `llmgw join-token rotate`. */
  setJoinToken(token: string): void {
    this.joinTokenDigest = createHash("sha256").update(token).digest();
  }

  /** Constant time over digests, so neither content nor length leaks. */
  isJoinToken(presented: string): boolean {
    if (!this.joinTokenDigest) return false;
    return timingSafeEqual(createHash("sha256").update(presented).digest(), this.joinTokenDigest);
  }

  /** The node a credential belongs to, or undefined. */
  nodeForCredential(credential: string): string | undefined {
    return this.store.nodeByCredentialHash(sha256(credential));
  }

  nodeTrust(name: string) {
    return this.store.nodeTrust(name);
  }

  nodeCount(): number {
    return this.store.countNodes();
  }

  /**
   * A heartbeat that carried the join token: admits a new node (pending under approve_nodes)
   * and answers with its credential, this once. A name that holds a credential is refused: the
   * join token must not speak for a node that has joined.
   */
  join(hb: HeartbeatRequest): HeartbeatResponse {
    const credential = `llmgw_node_${randomBytes(32).toString("base64url")}`;
    const pending = this.nodePolicy.approveNodes && !this.store.nodeExists(hb.node);
    const answer = this.receive(hb, { credentialHash: sha256(credential), pending });
    if (pending) {
      this.event("node.pending", `node/${hb.node}`, `node ${hb.node} joined and waits for approval: llmgw nodes approve ${hb.node}`);
      this.log.warn({ node: hb.node, address: hb.address }, "node joined and waits for approval");
    }
    this.log.info({ node: hb.node }, "node credential issued");
    return { ...answer, credential };
  }

  /** A heartbeat from a node already known (by its credential, or from inside the process). */
  heartbeat(hb: HeartbeatRequest): HeartbeatResponse {
    return this.receive(hb);
  }

  private receive(hb: HeartbeatRequest, join?: { credentialHash: string; pending: boolean }): HeartbeatResponse {
    const now = this.clock.now();
    const seen = this.observe(now);
    let created: boolean;
    try {
      ({ created } = this.store.applyHeartbeat(hb, now, join));
    } catch (e) {
      if (e instanceof ConflictError && join) throw takenError(hb.node);
      throw e;
    }
    if (hb.logs_port !== null) this.logsPorts.set(hb.node, hb.logs_port);
    else this.logsPorts.delete(hb.node);
    if (hb.logs_tls_cert) this.logsCerts.set(hb.node, hb.logs_tls_cert);
    else this.logsCerts.delete(hb.node);
    const engines = this.engines.get(hb.node);
    if (hb.engines) this.engines.set(hb.node, hb.engines);
    else this.engines.delete(hb.node);
    // A node that gains an engine (or loses one) may change what placement can do.
    if (engines !== undefined && hb.engines !== undefined && JSON.stringify(engines) !== JSON.stringify(hb.engines)) this.wake();
    if (created) {
      const gpus = hb.gpus.length;
      this.event("node.registered", `node/${hb.node}`, `node ${hb.node} registered with ${gpus} GPU${gpus === 1 ? "" : "s"} (${hb.address})`);
      this.log.info({ node: hb.node, address: hb.address, gpus, fabrics: hb.fabrics }, "node registered");
      // New hardware is a reason to try parked models again.
      for (const m of this.store.parkedModels()) this.unpark(m, `new node ${hb.node}`);
    }
    if (this.unreachable.delete(hb.node)) this.event("node.reachable", `node/${hb.node}`, `node ${hb.node} is heartbeating again`);
    // Heartbeats are the busiest path: read only the replicas here, and recompute assignments
    // only when a report changed something (the tick does it for everything else).
    const plan = processReports({ snapshot: this.store.replicaSnapshot(), node: hb.node, reports: hb.replicas, now, config: this.config, watchedSince: seen.watchedSince });
    if (!isEmpty(plan)) {
      this.refreshAssignments(this.apply(plan, now));
      this.wake();
    } else if (created) this.wake();
    return this.response(hb.node);
  }

  /** What the node should run now, as the heartbeat answer carries it. */
  response(node: string): HeartbeatResponse {
    const g = this.generations.get(node);
    return { assignments: g?.assignments ?? [], heartbeat_interval_ms: this.opts.heartbeatIntervalMs, generation: g?.generation ?? this.generationBase };
  }

  /** The long poll: resolves when the node's assignments change, or after waitMs. */
  async waitForAssignments(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<HeartbeatResponse> {
    const current = this.generations.get(node)?.generation ?? this.generationBase;
    if (current !== generation || waitMs <= 0) return this.response(node);
    await new Promise<void>((resolve) => {
      let set = this.waiters.get(node);
      if (!set) this.waiters.set(node, (set = new Set()));
      const w: Waiter = { generation, resolve: () => done() };
      const timer = setTimeout(() => done(), waitMs);
      const done = () => {
        clearTimeout(timer);
        set!.delete(w);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      signal?.addEventListener("abort", done);
      set.add(w);
    });
    return this.response(node);
  }

  /**
   * The revision each live replica was handed, once every one of its nodes had reported theirs:
   * a node downloading a newer revision later must not hand a shard that starts late (or again)
   * another commit than its peers loaded. In memory: a restarted head node settles it again.
   */
  private readonly replicaRevisions = new Map<string, string | null>();

  /** Recomputes every node's assignment set; bumps and wakes the nodes whose set changed. */
  private refreshAssignments(snapshot: Snapshot): void {
    const byNode = new Map<string, Assignment[]>();
    const live = new Set<string>();
    const models = new Map(snapshot.models.map((m) => [m.name, m.spec as ModelSpec]));
    const uuids = new Map(snapshot.gpus.map((g) => [`${g.node}\u0000${g.index}`, g.uuid]));
    const address = new Map(snapshot.nodes.map((n) => [n.name, n.address]));
    for (const r of snapshot.replicas) {
      if (r.state !== "starting" && r.state !== "ready") continue;
      const spec = models.get(r.model);
      const profile = spec?.profiles.find((p) => p.name === r.profile);
      if (!spec || !profile || r.port === null) continue;
      const engineKey = this.engineKey(r.id);
      live.add(r.id);
      // The catalog's pin wins; else the revision this replica was handed, else a common one.
      let revision = spec.revision ?? this.replicaRevisions.get(r.id);
      if (revision === undefined) {
        const chosen = commonRevision(r.model, r.shards.map((s) => s.node), snapshot.revisions ?? new Map());
        if (chosen.settled) this.replicaRevisions.set(r.id, chosen.revision);
        revision = chosen.revision;
      }
      r.shards.forEach((s, rank) => {
        let list = byNode.get(s.node);
        if (!list) byNode.set(s.node, (list = []));
        list.push({
          id: r.id,
          model: r.model,
          served_names: [spec.name, ...spec.aliases],
          profile: profile.name,
          engine: profile.engine,
          port: r.port!,
          gpus: s.gpus,
          engine_key: engineKey,
          revision,
          // Always given, so an agent's own default (shorter, on older agents) never cuts it short.
          start_timeout_ms: agentStartTimeout(profile, this.config),
          gpu_uuids: s.gpus.map((i) => uuids.get(`${s.node}\u0000${i}`) ?? `unknown-${i}`),
          args: profile.args,
          env: profile.env,
          shard: { rank, size: r.shards.length, leader_address: address.get(r.shards[0]!.node) ?? "", leader_port: rendezvousPort(r.port!, this.config) },
        });
      });
    }
    for (const id of this.replicaRevisions.keys()) if (!live.has(id)) this.replicaRevisions.delete(id);
    for (const n of snapshot.nodes) {
      const assignments = byNode.get(n.name) ?? [];
      const fingerprint = JSON.stringify(assignments);
      const prev = this.generations.get(n.name);
      if (prev && prev.fingerprint === fingerprint) continue;
      this.generations.set(n.name, { generation: (prev?.generation ?? this.generationBase) + 1, fingerprint, assignments });
      const set = this.waiters.get(n.name);
      if (set) for (const w of [...set]) w.resolve();
    }
  }

  // ---- router -------------------------------------------------------------------------

  /** Ready replicas of models still in the catalog, named by the model's name and aliases. */
  endpoints(snapshot: Snapshot): EndpointInfo[] {
    const models = new Map(snapshot.models.map((m) => [m.name, m.spec as ModelSpec]));
    const out: EndpointInfo[] = [];
    for (const r of snapshot.replicas) {
      if (r.state !== "ready" || !r.endpoint) continue;
      const spec = models.get(r.model);
      // A replica whose model left the catalog is being torn down; never route to it.
      if (!spec) continue;
      const profile = spec.profiles.find((p) => p.name === r.profile);
      const key = this.engineKey(r.id);
      out.push({
        id: r.id,
        url: r.endpoint.replace(/\/+$/, ""),
        models: [spec.name, ...spec.aliases],
        engine: profile?.engine ?? "vllm",
        pool: spec.pool,
        weight: spec.weight,
        priority: profile?.priority ?? 0,
        ...(key !== null ? { key } : {}),
      });
    }
    return out;
  }

  private publish(snapshot: Snapshot): void {
    if (!this.sink) return;
    const catalog: CatalogEntry[] = snapshot.models.map((m) => {
      const spec = m.spec as ModelSpec;
      // The router holds a request for a cold on-demand model as long as a replica may still come up.
      const startMs = Math.max(...spec.profiles.map((p) => serverStartDeadline(p, this.config)));
      return { name: m.name, aliases: spec.aliases, on_demand: spec.on_demand, pool: spec.pool, created: Math.floor(m.createdAt / 1000), start_timeout_ms: startMs };
    });
    const cfp = JSON.stringify(catalog);
    if (cfp !== this.lastCatalog) {
      this.lastCatalog = cfp;
      this.sink.setCatalog(catalog);
    }
    const eps = this.endpoints(snapshot);
    // Unchanged lists are not re-published: replacing the table is cheap, but it resets the
    // router's per-endpoint metric polling for no reason.
    const fp = eps.map((e) => `${e.id}|${e.url}|${e.engine}|${e.pool}|${e.models.join(",")}|${e.weight}|${e.priority}`).join(";");
    if (fp === this.lastPublished) return;
    this.lastPublished = fp;
    this.log.info({ count: eps.length }, "publishing endpoints");
    this.sink.setEndpoints(eps);
  }

  /**
   * A client asked for a model nothing serves (the router's demand signal): an on-demand model
   * then wants a replica. Written at most once a second per model, however many ask.
   */
  requestModel(nameOrAlias: string): boolean {
    const now = this.clock.now();
    const last = this.demandWritten.get(nameOrAlias);
    if (last !== undefined && now - last >= 0 && now - last < 1000) return true;
    try {
      const row = this.store.resolveModel(nameOrAlias);
      if (!row) return false;
      this.demandWritten.set(nameOrAlias, now);
      this.store.updateModelState(row.name, { lastRequestedAt: now });
    } catch (e) {
      // The router's request path must not fail because the store cannot take a write now.
      this.log.warn({ model: nameOrAlias, err: (e as Error).message }, "could not record demand for a model");
      return false;
    }
    this.wake();
    return true;
  }

  /**
   * Load-based scaling between min and max: the router's in-flight count per model against the
   * model's target_inflight per replica. Up at once; down only after the load has stayed low
   * for scaleDownDelayMs, and only when one replica fewer would still be under 80% of target,
   * so replicas do not flap. Returns whether anything was written.
   */
  private scale(snapshot: Snapshot, now: number): boolean {
    if (!this.usage) return false;
    const inflight = this.usage.inflightByModel();
    const state = new Map(snapshot.modelState.map((m) => [m.model, m]));
    let wrote = false;
    for (const m of snapshot.models) {
      const spec = m.spec as ModelSpec;
      const per = spec.target_inflight;
      if (per === undefined || spec.replicas.max <= spec.replicas.min) continue;
      const load = inflight.get(m.name) ?? 0;
      const current = state.get(m.name)?.scaleTarget ?? spec.replicas.min;
      const wanted = Math.min(spec.replicas.max, Math.max(spec.replicas.min, Math.ceil(load / per)));
      let next = current;
      if (wanted > current) {
        next = wanted;
        this.lowSince.delete(m.name);
      } else if (wanted < current && load < (current - 1) * per * 0.8) {
        const since = this.lowSince.get(m.name);
        if (since === undefined || now < since) this.lowSince.set(m.name, now);
        else if (now - since >= this.scaleDownDelayMs) {
          next = current - 1;
          this.lowSince.set(m.name, now);
        }
      } else this.lowSince.delete(m.name);
      if (next !== current) {
        this.store.updateModelState(m.name, { scaleTarget: next });
        this.event("model.scaled", `model/${m.name}`, `model ${m.name} scaled ${next > current ? "up" : "down"} to ${next} (in flight ${load}, target ${per} per replica)`);
        wrote = true;
      }
    }
    return wrote;
  }

  // ---- views --------------------------------------------------------------------------

  tables(): Tables {
    return buildTables({ snapshot: this.store.snapshot(), now: this.clock.now(), lastUsed: this.lastUsed, nodeTimeoutMs: this.config.nodeTimeoutMs, watchedSince: this.watchedSince, engines: this.engines });
  }

  summary(): Summary {
    const now = this.clock.now();
    const evictions = this.store
      .listEvents({ kind: "replica.evicted", since: now - 3_600_000, limit: 50 })
      .reverse()
      .map((e) => {
        const d = (e.data ?? {}) as { replica?: string; model?: string; for_model?: string; idle_seconds?: number };
        return { at: new Date(e.at).toISOString(), replica: d.replica ?? "", model: d.model ?? "", for_model: d.for_model ?? "", idle_seconds: d.idle_seconds ?? -1 };
      });
    return summarize(this.tables(), { version: this.opts.version, evictions });
  }

  nodes(): NodeView[] {
    return this.tables().nodes;
  }

  node(name: string): NodeView {
    const n = this.tables().nodes.find((x) => x.name === name);
    if (!n) throw new NotFoundError(`node "${name}" not found`);
    return n;
  }

  replicas(model?: string): ReplicaView[] {
    const all = this.tables().replicas;
    if (model === undefined) return all;
    const resolved = this.store.resolveModel(model)?.name ?? model;
    return all.filter((r) => r.model === resolved);
  }

  models(): ModelView[] {
    return this.tables().models;
  }

  model(nameOrAlias: string): { view: ModelView; spec: ModelSpec } {
    const row = this.store.resolveModel(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    const view = this.tables().models.find((m) => m.name === row.name)!;
    return { view, spec: row.spec };
  }

  // ---- catalog ------------------------------------------------------------------------

  putModels(specs: ModelSpec[]) {
    const results = this.store.putModels(specs, this.clock.now());
    for (const r of results) {
      if (r.result === "unchanged") continue;
      this.event(`model.${r.result}`, `model/${r.name}`, `model ${r.name} ${r.result} (revision ${r.revision})`);
      this.log.info({ model: r.name, revision: r.revision, result: r.result }, "catalog changed");
    }
    this.wake();
    return results;
  }

  deleteModel(nameOrAlias: string): string {
    const row = this.store.resolveModel(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    this.store.deleteModel(row.name);
    this.event("model.deleted", `model/${row.name}`, `model ${row.name} deleted`);
    this.log.info({ model: row.name }, "model deleted");
    this.wake();
    return row.name;
  }

  /** Clears a parked model so it is tried again; false when it was not parked. */
  unpark(nameOrAlias: string, why = "unparked by an operator"): { model: string; changed: boolean } {
    const row = this.store.resolveModel(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    const changed = this.store.unpark(row.name);
    if (changed) {
      this.event("model.unparked", `model/${row.name}`, `model ${row.name} unparked (${why}); it will be tried again`);
      this.log.info({ model: row.name, why }, "model unparked");
      this.wake();
    }
    return { model: row.name, changed };
  }

  /** A consistent copy of the database in a temporary file beside it; the caller deletes it. */
  async backup(): Promise<string> {
    const path = `${this.opts.dataDir ?? "."}/backup-${process.pid}-${Date.now()}.db`;
    this.store.backupTo(path);
    this.log.info({ path }, "database backed up");
    return path;
  }

  /** Where a replica's engine log can be read: its leader node's log listener. */
  logSource(id: string): { url: string; node: string; token: string; cert?: string } {
    const snap = this.store.snapshot();
    const r = snap.replicas.find((x) => x.id === id);
    if (!r) throw new NotFoundError(`replica "${id}" not found`);
    const node = r.shards[0]!.node;
    const address = snap.nodes.find((n) => n.name === node)?.address;
    const port = this.logsPorts.get(node);
    const digest = this.store.credentialHashOf(node);
    if (!address || port === undefined || !digest) throw new NotFoundError(`the agent on ${node} does not serve engine logs (started with --logs-listen off, or not heartbeating)`);
    const host = address.includes(":") && !address.startsWith("[") ? `[${address}]` : address;
    const cert = this.logsCerts.get(node);
    return { url: `${cert ? "https" : "http"}://${host}:${port}/logs/${encodeURIComponent(id)}`, node, token: logsToken(digest), ...(cert ? { cert } : {}) };
  }

  // ---- API keys -----------------------------------------------------------------------

  /** Creates a client API key; the key itself is returned this once and never stored. */
  createApiKey(name: string, pool?: string): { name: string; key: string; pool: string | null } {
    const key = `sk-llmgw-${randomBytes(24).toString("base64url")}`;
    this.store.createApiKey({ name, hash: sha256(key), pool: pool ?? null, createdAt: this.clock.now() });
    this.event("key.created", `key/${name}`, `API key ${name} created${pool ? ` for pool ${pool}` : ""}`);
    this.publishKeys();
    return { name, key, pool: pool ?? null };
  }

  listApiKeys(): { name: string; pool: string | null; created_at: string }[] {
    return this.store.listApiKeys().map((k) => ({ name: k.name, pool: k.pool, created_at: new Date(k.createdAt).toISOString() }));
  }

  revokeApiKey(name: string): void {
    this.store.revokeApiKey(name);
    this.event("key.revoked", `key/${name}`, `API key ${name} revoked`);
    this.publishKeys();
  }

  private publishKeys(): void {
    this.sink?.setApiKeys(this.store.listApiKeys().map((k) => ({ name: k.name, sha256: k.hash, pool: k.pool })));
  }

  // ---- node admin ---------------------------------------------------------------------

  /** Admits a pending node (serve --approve-nodes); false when it was not pending. */
  approveNode(name: string): { changed: boolean } {
    const t = this.store.nodeTrust(name);
    if (!t.exists) throw new NotFoundError(`node "${name}" not found`);
    if (t.adminState !== "pending") return { changed: false };
    this.store.setAdminState(name, "none", { approve: true });
    this.event("node.approved", `node/${name}`, `node ${name} approved: replicas may be placed on it`);
    this.log.info({ node: name }, "node approved");
    this.wake();
    return { changed: true };
  }

  /**
   * Forgets a node and its credential, so only the join token (and a fresh start of its agent)
   * brings it back. Refused while replicas run on it unless forced; forced, what is still on it
   * is stopped here and placed elsewhere by the next reconcile.
   */
  deleteNode(name: string, force: boolean): { stopped: string[] } {
    const snap = this.store.snapshot();
    if (!snap.nodes.some((n) => n.name === name)) throw new NotFoundError(`node "${name}" not found`);
    const on = snap.replicas.filter((r) => r.shards.some((s) => s.node === name));
    const running = on.filter((r) => r.state !== "failed");
    if (running.length > 0 && !force) {
      const ids = running.map((r) => r.id);
      throw new ConflictError(
        `node ${name} runs ${running.length} replica${running.length === 1 ? "" : "s"} (${ids.slice(0, 5).join(", ")}${ids.length > 5 ? ", …" : ""}): drain it first (llmgw drain ${name} --wait), or delete with --force, which drains and then deletes`,
        ["force"],
      );
    }
    const now = this.clock.now();
    const events = on.map((r) => ({ kind: "replica.removed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} removed: its node ${name} was deleted` }));
    events.push({ kind: "node.deleted", subject: `node/${name}`, message: `node ${name} deleted; its credential no longer works, and it joins again only with the join token` });
    this.store.deleteNode(name, on.map((r) => r.id), events, now);
    this.logsPorts.delete(name);
    this.logsCerts.delete(name);
    this.engines.delete(name);
    this.unreachable.delete(name);
    this.generations.delete(name);
    const set = this.waiters.get(name);
    if (set) for (const w of [...set]) w.resolve();
    this.log.warn({ node: name, replicas: on.map((r) => r.id) }, "node deleted");
    this.refreshAssignments(this.store.snapshot());
    this.wake();
    return { stopped: on.map((r) => r.id) };
  }

  /** Lets a node report `address` although its heartbeats come from elsewhere; null withdraws it. */
  allowNodeAddress(name: string, address: string | null): { changed: boolean } {
    const { previous } = this.store.setAllowedAddress(name, address, this.clock.now());
    const changed = (previous ?? null) !== address;
    if (changed)
      this.event(
        "node.address_allowed",
        `node/${name}`,
        address === null ? `node ${name} may again report only the address its heartbeats come from` : `node ${name} may report address ${address} besides the one its heartbeats come from`,
      );
    return { changed };
  }

  allowedAddresses(): { node: string; address: string }[] {
    return this.store.listAllowedAddresses();
  }

  setNodeAdminState(name: string, state: AdminState): { changed: boolean } {
    const { previous } = this.store.setAdminState(name, state);
    const verb = state === "none" ? "uncordoned" : state;
    if (previous !== state) {
      this.event(`node.${verb}`, `node/${name}`, `node ${name} ${verb}`);
      this.log.info({ node: name, from: previous, to: state }, `node ${verb}`);
      this.wake();
    }
    return { changed: previous !== state };
  }

  // ---- events -------------------------------------------------------------------------

  /** Appends an event; a node-trust refusal worth an operator's eye goes through here too. */
  event(kind: string, subject: string, message: string, data?: unknown): void {
    this.store.appendEvent({ at: this.clock.now(), kind, subject, message, data });
  }

  events(opts: { afterId?: number; limit: number; subject?: string }): EventView[] {
    return this.store.listEvents(opts).map((e) => ({ id: e.id, at: new Date(e.at).toISOString(), kind: e.kind, subject: e.subject, message: e.message }));
  }
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
