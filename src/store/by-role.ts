// A store as the control plane sees it (StorePort), answered by the dialect's parts, one per
// kind of need (control/store-port.ts's role ports): the fleet's reads, plans and change feed;
// inventory writes; the node registry; the catalog; API keys and events; what several control
// planes share. Both dialects (index.ts, pg/index.ts) are this, each with parts of its own.

import type { CatalogPort, ChangeFeed, EventsPort, FleetRead, InventoryWrites, JoinWrite, KeysPort, LedgerPort, LimitSharesPort, MembershipPort, NodeRegistry, NodeReportsPort, PlanWriter, ReplicaRead, SharedSecretsPort, StorePort, UsagePort, UsageTotal, WeightsOrdersPort } from "../control/store-port";
import type { ApiKeyRow, ChangeRead, KeyPatch, TeamPatch, TeamRow, ControlPlaneRecord, ControlPlaneRow, EventRow, Fence, GpuRow, Lease, ModelRow, ModelStateRow, ModelWrite, NewEvent, NodeReportRow, NodeTrust, PlanWrite, RouterUsage, SharedTokenKind, Snapshot, StoreChange, TokenDigests, WeightsOrderRow } from "../control/types";
import type { ShareRow, Shares } from "../control/limit-shares";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { UsageRow } from "../protocol/routing";
import type { AdminState } from "../protocol/views";

/** A dialect's parts. */
export interface StoreParts {
  fleet: FleetRead & PlanWriter & Pick<ChangeFeed, "changeCursor" | "changesSince">;
  inventory: InventoryWrites;
  nodes: NodeRegistry;
  catalog: CatalogPort;
  records: EventsPort;
  keys: KeysPort;
  shared: MembershipPort & UsagePort & LimitSharesPort & NodeReportsPort & SharedSecretsPort;
  ledger: LedgerPort;
  weights: WeightsOrdersPort;
}

export abstract class StoreByRole implements StorePort {
  protected abstract readonly parts: StoreParts;

  abstract watch(fn: (change: StoreChange) => void): () => void;
  abstract backupTo(path: string): Promise<void>;

  // ---- the fleet: reads, plans, the change feed
  snapshot(): Promise<Snapshot> {
    return this.parts.fleet.snapshot();
  }
  replicaSnapshot(node?: string): Promise<ReplicaRead> {
    return this.parts.fleet.replicaSnapshot(node);
  }
  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    return this.parts.fleet.applyPlan(plan, now, fence);
  }
  changeCursor(): Promise<number> {
    return this.parts.fleet.changeCursor();
  }
  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return this.parts.fleet.changesSince(after, limit);
  }

  // ---- inventory
  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    return this.parts.inventory.applyHeartbeat(hb, now, join);
  }
  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    return this.parts.inventory.applyHeartbeats(hbs, now);
  }
  applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    return this.parts.inventory.applyJoins(joins, now);
  }
  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    return this.parts.inventory.nodeGpus(nodes);
  }
  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return this.parts.inventory.nodesSeen();
  }
  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    return this.parts.inventory.touchNodes(seen);
  }

  // ---- the node registry
  nodeTrust(name: string): Promise<NodeTrust> {
    return this.parts.nodes.nodeTrust(name);
  }
  nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return this.parts.nodes.nodeByCredentialHash(hash);
  }
  credentialHashOf(name: string): Promise<string | undefined> {
    return this.parts.nodes.credentialHashOf(name);
  }
  countNodes(): Promise<number> {
    return this.parts.nodes.countNodes();
  }
  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return this.parts.nodes.nodeCredentials();
  }
  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return this.parts.nodes.deleteNode(name, replicaIds, events, now);
  }
  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    return this.parts.nodes.setAllowedAddress(name, address, now);
  }
  listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    return this.parts.nodes.listAllowedAddresses();
  }
  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    return this.parts.nodes.setAdminState(name, state);
  }

  // ---- the catalog
  models(): Promise<ModelRow[]> {
    return this.parts.catalog.models();
  }
  modelByName(name: string): Promise<ModelRow | undefined> {
    return this.parts.catalog.modelByName(name);
  }
  modelByAlias(alias: string): Promise<ModelRow | undefined> {
    return this.parts.catalog.modelByAlias(alias);
  }
  saveModels(models: ModelWrite[], now: number): Promise<void> {
    return this.parts.catalog.saveModels(models, now);
  }
  deleteModel(name: string): Promise<boolean> {
    return this.parts.catalog.deleteModel(name);
  }
  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    return this.parts.catalog.updateModelState(model, patch);
  }
  unpark(model: string): Promise<boolean> {
    return this.parts.catalog.unpark(model);
  }
  parkedModels(): Promise<string[]> {
    return this.parts.catalog.parkedModels();
  }

  // ---- API keys and events
  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return this.parts.keys.createApiKey(k);
  }
  listApiKeys(): Promise<ApiKeyRow[]> {
    return this.parts.keys.listApiKeys();
  }
  revokeApiKey(name: string): Promise<boolean> {
    return this.parts.keys.revokeApiKey(name);
  }
  updateApiKey(name: string, patch: KeyPatch, now: number): Promise<ApiKeyRow | undefined> {
    return this.parts.keys.updateApiKey(name, patch, now);
  }
  createTeam(t: TeamRow): Promise<boolean> {
    return this.parts.keys.createTeam(t);
  }
  listTeams(): Promise<TeamRow[]> {
    return this.parts.keys.listTeams();
  }
  updateTeam(name: string, patch: TeamPatch, now: number): Promise<TeamRow | undefined> {
    return this.parts.keys.updateTeam(name, patch, now);
  }
  deleteTeam(name: string, force: boolean): Promise<{ deleted: boolean; keys: string[] } | undefined> {
    return this.parts.keys.deleteTeam(name, force);
  }
  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return this.parts.records.appendEvent(e);
  }
  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return this.parts.records.listEvents(opts);
  }

  // ---- what several control planes share
  acquireLease(holder: string, ttlMs: number, take?: boolean): Promise<Lease> {
    return this.parts.shared.acquireLease(holder, ttlMs, take);
  }
  releaseLease(holder: string): Promise<void> {
    return this.parts.shared.releaseLease(holder);
  }
  readLease(): Promise<Lease | undefined> {
    return this.parts.shared.readLease();
  }
  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return this.parts.shared.upsertControlPlane(cp);
  }
  controlPlanes(): Promise<ControlPlaneRow[]> {
    return this.parts.shared.controlPlanes();
  }
  removeControlPlane(name: string): Promise<void> {
    return this.parts.shared.removeControlPlane(name);
  }
  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    return this.parts.shared.reportUsage(router, watchingSince, lastUsed);
  }
  routerUsage(): Promise<RouterUsage[]> {
    return this.parts.shared.routerUsage();
  }
  shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares> {
    return this.parts.shared.shareLimits(router, demand, decide);
  }
  addUsage(rows: readonly UsageRow[]): Promise<void> {
    return this.parts.ledger.addUsage(rows);
  }
  usageSince(since: number): Promise<UsageRow[]> {
    return this.parts.ledger.usageSince(since);
  }
  pruneUsage(before: number): Promise<void> {
    return this.parts.ledger.pruneUsage(before);
  }
  usageTotalsSince(starts: readonly number[]): Promise<UsageTotal[]> {
    return this.parts.ledger.usageTotalsSince(starts);
  }
  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return this.parts.shared.saveNodeReport(node, report, now);
  }
  nodeReports(): Promise<NodeReportRow[]> {
    return this.parts.shared.nodeReports();
  }
  weightsOrders(): Promise<WeightsOrderRow[]> {
    return this.parts.weights.weightsOrders();
  }
  putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void> {
    return this.parts.weights.putWeightsOrders(rows);
  }
  deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void> {
    return this.parts.weights.deleteWeightsOrders(keys);
  }
  sharedSecret(key: string, candidate: string): Promise<string> {
    return this.parts.shared.sharedSecret(key, candidate);
  }
  tokenDigests(): Promise<TokenDigests> {
    return this.parts.shared.tokenDigests();
  }
  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return this.parts.shared.putTokenDigest(kind, sha256, mode);
  }
}
