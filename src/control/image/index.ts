// The store's in-memory image: a write-through store around the real one (SQLite or
// PostgreSQL), which the control plane reads (snapshots, trust, credentials, the catalog) from
// memory, so a heartbeat costs the same at 100 nodes as at 5,000. The store stays the truth: the
// image is loaded from it at start, every write goes to the store first and reaches memory only
// once the store took it, and a failed write (or any doubt: invalidate()) makes the next read load
// everything again, so memory never holds what the database refused (memory.ts). It answers the
// store contract (test/contract/store.ts) as the stores do.
//
// An unchanged heartbeat (same address, labels, fabrics, agent version, GPUs and weights) writes
// nothing at once: its time is kept in memory and written for all nodes in one transaction at
// most once a second (flush(), also called on stop). What the image does not hold (the lease,
// control planes, router usage, node reports, events, shared secrets) goes straight to the store.

import type { Scheduler } from "../../lib/scheduler";
import type { HeartbeatRequest } from "../../protocol/heartbeat";
import type { UsageRow } from "../../protocol/routing";
import type { AdminState } from "../../protocol/views";
import { joinRefused } from "../admission";
import type { JoinWrite, ReplicaRead, StorePort, UnchangedHeartbeats, UsageTotal } from "../store-port";
import type { ShareRow, Shares } from "../limit-shares";
import type { ApiKeyRow, ChangeRead, KeyPatch, TeamPatch, TeamRow, ControlPlaneRecord, ControlPlaneRow, EventRow, Fence, GpuRow, Lease, ModelRow, ModelStateRow, ModelWrite, NewEvent, NodeReportRow, NodeTrust, PlanWrite, ReplicaRow, RouterUsage, SharedTokenKind, Snapshot, StoreChange, TokenDigests, WeightsOrderRow } from "../types";
import { ImageMemory } from "./memory";
import { type Collection, byKey, cmp, defined, dropModel, dropReplica, patchModelState, remember, setModel, setReplica, unchanged } from "./state";

export { CHANGES_READ_LIMIT, TOUCH_FLUSH_MS } from "./memory";

export class StoreImage implements StorePort, UnchangedHeartbeats {
  private readonly memory: ImageMemory;

  constructor(
    readonly inner: StorePort,
    scheduler?: Scheduler,
  ) {
    this.memory = new ImageMemory(inner, scheduler);
  }

  /** Transactions asked of the store, full loads and change reads so far (tests and benchmarks read them). */
  get writes(): number {
    return this.memory.writes;
  }
  get loads(): number {
    return this.memory.loads;
  }
  get changeReads(): number {
    return this.memory.changeReads;
  }

  /** Forget memory: the next read loads everything from the store again. */
  invalidate(): void {
    this.memory.invalidate();
  }

  /** Loads everything from the store again while reads go on from memory (memory.ts); true when memory was replaced or found the same. */
  reload(): Promise<boolean> {
    return this.memory.reload();
  }

  /** Loads everything from the store now. */
  async rebuild(): Promise<void> {
    this.memory.invalidate();
    await this.memory.load();
  }

  /** Writes every touched last-seen time in one transaction (at stop, and once a second while heartbeats come). */
  flush(): Promise<void> {
    return this.memory.flush();
  }

  /** Another writer committed: the next read first reads the changes committed since this memory's cursor. */
  otherWriter(): void {
    this.memory.otherWriter();
  }

  replicaVersion(): number {
    return this.memory.replicaVersion;
  }

  // ---- reads --------------------------------------------------------------------------

  snapshot(): Promise<Snapshot> {
    return this.memory.snapshot();
  }

  async replicaSnapshot(node?: string): Promise<ReplicaRead> {
    const s = await this.memory.load();
    if (node === undefined) {
      const snap = await this.memory.snapshot();
      return { replicas: snap.replicas, modelState: snap.modelState, version: this.memory.replicaVersion };
    }
    const replicas = [...(s.byNode.get(node) ?? [])].sort(cmp).map((id) => s.replicas.get(id)!);
    const models = new Set(replicas.map((r) => r.model));
    return { replicas, modelState: [...models].flatMap((m) => s.modelState.get(m) ?? []), version: this.memory.replicaVersion };
  }

  async nodeTrust(name: string): Promise<NodeTrust> {
    const s = await this.memory.load();
    const row = s.nodes.get(name);
    return { exists: !!row, hasCredential: s.credOf.has(name), adminState: row?.adminState, allowedAddress: s.allowed.get(name) };
  }

  async nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return (await this.memory.load()).nodeOfCred.get(hash);
  }

  async credentialHashOf(name: string): Promise<string | undefined> {
    return (await this.memory.load()).credOf.get(name);
  }

  async countNodes(): Promise<number> {
    return (await this.memory.load()).nodes.size;
  }

  async nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return [...(await this.memory.load()).credOf].map(([node, hash]) => ({ node, hash }));
  }

  async nodesSeen(): Promise<{ name: string; at: number }[]> {
    return [...(await this.memory.load()).nodes.values()].map((n) => ({ name: n.name, at: n.lastHeartbeat }));
  }

  /** By node and index, as the stores answer (whatever order the names come in, each once). */
  async nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    const s = await this.memory.load();
    return [...new Set(nodes)].sort(cmp).flatMap((n) => s.gpus.get(n) ?? []);
  }

  async listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    const s = await this.memory.load();
    return [...s.allowed.keys()].sort(cmp).map((node) => ({ node, address: s.allowed.get(node)! }));
  }

  async models(): Promise<ModelRow[]> {
    return byKey((await this.memory.load()).models);
  }

  async modelByName(name: string): Promise<ModelRow | undefined> {
    return (await this.memory.load()).models.get(name);
  }

  async modelByAlias(alias: string): Promise<ModelRow | undefined> {
    const s = await this.memory.load();
    const m = s.aliases.get(alias);
    return m === undefined ? undefined : s.models.get(m);
  }

  async parkedModels(): Promise<string[]> {
    return [...(await this.memory.load()).modelState.values()].filter((st) => st.parked).map((st) => st.model);
  }

  async listApiKeys(): Promise<ApiKeyRow[]> {
    return byKey((await this.memory.load()).apiKeys);
  }

  async listTeams(): Promise<TeamRow[]> {
    return byKey((await this.memory.load()).teams);
  }

  // ---- heartbeats ---------------------------------------------------------------------

  async applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    const s = await this.memory.load();
    const existing = s.nodes.get(hb.node);
    if (!join && existing && unchanged(s, hb)) {
      this.memory.touch(s, existing, now);
      return { created: false, taken: false };
    }
    // The same join sent again (its answer was lost) carries the same credential: see admission.ts.
    if (join && existing && joinRefused(s.credOf.get(hb.node) ?? null, join.credentialHash)) return { created: false, taken: true };
    const result = await this.memory.write(() => this.inner.applyHeartbeat(hb, now, join));
    if (result.taken || this.memory.loaded !== s) return result;
    remember(s, hb, now, this.memory.touched.get(hb.node), join);
    this.memory.changed("nodes", "gpus", "weights");
    return result;
  }

  /** Several joins in one transaction: the ones memory already refuses are not written. */
  async applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    const s = await this.memory.load();
    const out = joins.map(() => ({ created: false, taken: true }));
    const pick: number[] = [];
    joins.forEach((j, i) => {
      if (!(s.nodes.has(j.hb.node) && joinRefused(s.credOf.get(j.hb.node) ?? null, j.join.credentialHash))) pick.push(i);
    });
    if (pick.length === 0) return out;
    const result = await this.memory.write(() => this.inner.applyJoins(pick.map((i) => joins[i]!), now));
    pick.forEach((i, k) => (out[i] = result[k]!));
    if (this.memory.loaded !== s) return out;
    for (const i of pick) if (!out[i]!.taken) remember(s, joins[i]!.hb, now, this.memory.touched.get(joins[i]!.hb.node), joins[i]!.join);
    this.memory.changed("nodes", "gpus", "weights");
    return out;
  }

  /**
   * Several heartbeats, in order: the unchanged ones are touched in memory, the others written in
   * one transaction (a node with one written stays written for the rest of the group, so its
   * last heartbeat is what ends in the store).
   */
  async applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    const s = await this.memory.load();
    const out = hbs.map(() => ({ created: false }));
    const written = new Set<string>();
    const pick: number[] = [];
    hbs.forEach((hb, i) => {
      const existing = s.nodes.get(hb.node);
      if (existing && !written.has(hb.node) && unchanged(s, hb)) this.memory.touch(s, existing, now);
      else (written.add(hb.node), pick.push(i));
    });
    if (pick.length === 0) return out;
    const result = await this.memory.write(() => this.inner.applyHeartbeats(pick.map((i) => hbs[i]!), now));
    pick.forEach((i, k) => (out[i] = result[k]!));
    if (this.memory.loaded !== s) return out;
    for (const i of pick) remember(s, hbs[i]!, now, this.memory.touched.get(hbs[i]!.node));
    this.memory.changed("nodes", "gpus", "weights");
    return out;
  }

  /**
   * True (and the node's last-seen time touched) when the heartbeat says exactly what memory
   * holds: answered with no write, nothing else to do. False when it must be written.
   */
  async touchIfUnchanged(hb: HeartbeatRequest, now: number): Promise<boolean> {
    const s = this.memory.loaded ?? (await this.memory.load());
    const existing = s.nodes.get(hb.node);
    if (!existing || !unchanged(s, hb)) return false;
    this.memory.touch(s, existing, now);
    return true;
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    return this.memory.write(() => this.inner.touchNodes(seen)).then(() => this.memory.invalidate());
  }

  // ---- writes applied in memory ---------------------------------------------------------

  async applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    const s = await this.memory.load();
    await this.memory.write(() => this.inner.applyPlan(plan, now, fence));
    if (this.memory.loaded !== s) return;
    for (const r of plan.create)
      setReplica(s, { id: r.id, model: r.model, profile: r.profile, state: "starting", shards: r.shards, port: r.port, endpoint: r.endpoint, failures: 0, error: null, createdAt: now, updatedAt: now, readyAt: null, launch: r.launch ?? null, drainUntil: null } as ReplicaRow);
    for (const u of plan.update) {
      const r = s.replicas.get(u.id);
      if (r) setReplica(s, { ...r, ...defined(u.patch), updatedAt: now });
    }
    for (const id of plan.remove) dropReplica(s, id);
    for (const [model, patch] of plan.modelState) if (Object.keys(patch).length > 0) patchModelState(s, model, patch);
    for (const n of plan.nodeAdmin) {
      const row = s.nodes.get(n.node);
      if (row) s.nodes.set(n.node, { ...row, adminState: n.state });
    }
    // A plan of events alone (a heartbeat's news, a group's health events) changes nothing memory holds.
    const which: Collection[] = [];
    if (plan.create.length + plan.update.length + plan.remove.length > 0) which.push("replicas");
    if (plan.modelState.size > 0) which.push("modelState");
    if (plan.nodeAdmin.length > 0) which.push("nodes");
    if (which.length > 0) this.memory.changed(...which);
  }

  async updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    const s = await this.memory.load();
    await this.memory.write(() => this.inner.updateModelState(model, patch));
    if (this.memory.loaded !== s) return;
    patchModelState(s, model, patch);
    this.memory.changed("modelState");
  }

  async setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    const s = await this.memory.load();
    const out = await this.memory.write(() => this.inner.setAllowedAddress(name, address, now));
    if (this.memory.loaded === s) {
      if (address === null) s.allowed.delete(name);
      else s.allowed.set(name, address);
    }
    return out;
  }

  async setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    const s = await this.memory.load();
    const out = await this.memory.write(() => this.inner.setAdminState(name, state));
    const row = s.nodes.get(name);
    if (this.memory.loaded === s && row && out.previous !== undefined) {
      s.nodes.set(name, { ...row, adminState: state });
      this.memory.changed("nodes");
    }
    return out;
  }

  /** Written through: memory takes the entries as the store wrote them (a spec as its JSON reads back). */
  async saveModels(models: ModelWrite[], now: number): Promise<void> {
    const s = await this.memory.load();
    await this.memory.write(() => this.inner.saveModels(models, now));
    if (this.memory.loaded !== s) return;
    for (const { spec, revision, created } of models) {
      const prev = s.models.get(spec.name);
      // Memory does not hold what the store just updated: doubt, so load everything again.
      if (!created && !prev) return this.memory.invalidate();
      dropModel(s, spec.name);
      setModel(s, { name: spec.name, spec: JSON.parse(JSON.stringify(spec)) as ModelRow["spec"], revision, createdAt: created || !prev ? now : prev.createdAt, updatedAt: now });
      patchModelState(s, spec.name, { failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null });
    }
    this.memory.changed("models", "modelState");
  }

  async deleteModel(name: string): Promise<boolean> {
    const s = await this.memory.load();
    const out = await this.memory.write(() => this.inner.deleteModel(name));
    if (this.memory.loaded !== s) return out;
    if (out !== s.models.has(name)) this.memory.invalidate();
    else if (out) {
      dropModel(s, name);
      s.modelState.delete(name);
      this.memory.changed("models", "modelState");
    }
    return out;
  }

  async unpark(model: string): Promise<boolean> {
    const s = await this.memory.load();
    const out = await this.memory.write(() => this.inner.unpark(model));
    if (this.memory.loaded !== s) return out;
    if (out !== (s.modelState.get(model)?.parked === true)) this.memory.invalidate();
    else if (out) {
      patchModelState(s, model, { parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null });
      this.memory.changed("modelState");
    }
    return out;
  }

  // ---- rare writes: through the store, then memory loads again ------------------------

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return this.memory.thenReload(() => this.inner.deleteNode(name, replicaIds, events, now)).finally(() => this.memory.touched.delete(name));
  }
  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return this.memory.thenReload(() => this.inner.createApiKey(k));
  }
  revokeApiKey(name: string): Promise<boolean> {
    return this.memory.thenReload(() => this.inner.revokeApiKey(name));
  }
  updateApiKey(name: string, patch: KeyPatch, now: number): Promise<ApiKeyRow | undefined> {
    return this.memory.thenReload(() => this.inner.updateApiKey(name, patch, now));
  }
  createTeam(t: TeamRow): Promise<boolean> {
    return this.memory.thenReload(() => this.inner.createTeam(t));
  }
  updateTeam(name: string, patch: TeamPatch, now: number): Promise<TeamRow | undefined> {
    return this.memory.thenReload(() => this.inner.updateTeam(name, patch, now));
  }
  deleteTeam(name: string, force: boolean): Promise<{ deleted: boolean; keys: string[] } | undefined> {
    return this.memory.thenReload(() => this.inner.deleteTeam(name, force));
  }

  // ---- not held in memory: straight to the store ---------------------------------------

  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return this.inner.appendEvent(e);
  }
  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return this.inner.listEvents(opts);
  }
  acquireLease(holder: string, ttlMs: number, take?: boolean): Promise<Lease> {
    return this.inner.acquireLease(holder, ttlMs, take);
  }
  releaseLease(holder: string): Promise<void> {
    return this.inner.releaseLease(holder);
  }
  readLease(): Promise<Lease | undefined> {
    return this.inner.readLease();
  }
  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return this.inner.upsertControlPlane(cp);
  }
  controlPlanes(): Promise<ControlPlaneRow[]> {
    return this.inner.controlPlanes();
  }
  removeControlPlane(name: string): Promise<void> {
    return this.inner.removeControlPlane(name);
  }
  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    return this.inner.reportUsage(router, watchingSince, lastUsed);
  }
  routerUsage(): Promise<RouterUsage[]> {
    return this.inner.routerUsage();
  }
  shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares> {
    return this.inner.shareLimits(router, demand, decide);
  }
  // The ledger is not held in memory: its rows are written once a tick and read on request.
  addUsage(rows: readonly UsageRow[]): Promise<void> {
    return this.inner.addUsage(rows);
  }
  usageSince(since: number): Promise<UsageRow[]> {
    return this.inner.usageSince(since);
  }
  pruneUsage(before: number): Promise<void> {
    return this.inner.pruneUsage(before);
  }
  usageTotalsSince(starts: readonly number[]): Promise<UsageTotal[]> {
    return this.inner.usageTotalsSince(starts);
  }
  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return this.inner.saveNodeReport(node, report, now);
  }
  nodeReports(): Promise<NodeReportRow[]> {
    return this.inner.nodeReports();
  }
  weightsOrders(): Promise<WeightsOrderRow[]> {
    return this.inner.weightsOrders();
  }
  putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void> {
    return this.inner.putWeightsOrders(rows);
  }
  deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void> {
    return this.inner.deleteWeightsOrders(keys);
  }
  sharedSecret(key: string, candidate: string): Promise<string> {
    return this.inner.sharedSecret(key, candidate);
  }
  tokenDigests(): Promise<TokenDigests> {
    return this.inner.tokenDigests();
  }
  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return this.inner.putTokenDigest(kind, sha256, mode);
  }
  changeCursor(): Promise<number> {
    return this.inner.changeCursor();
  }
  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return this.inner.changesSince(after, limit);
  }

  /**
   * Another writer's change ("any"): the next read reads what it changed (otherWriter()), then fn
   * hears of it. Only last-seen times moved ("seen": another control plane's batched flush, once a
   * second): those are read alone and merged, newest wins.
   */
  watch(fn: (change: StoreChange) => void): () => void {
    return this.inner.watch((change) => {
      // The lease, control planes, router usage, events and node reports are not held here.
      if (change === "any") this.memory.otherWriter();
      if (change === "seen") {
        void this.memory.refreshSeen().then(
          () => fn(change),
          () => (this.memory.invalidate(), fn(change)),
        );
        return;
      }
      fn(change);
    });
  }

  async backupTo(path: string): Promise<void> {
    await this.memory.flush().catch(() => undefined);
    return this.inner.backupTo(path);
  }
}
