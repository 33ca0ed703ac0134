// What the control plane needs of persistence, one role port per kind of need, and nothing
// more: each part of the control plane depends only on the ports it uses, and the app hands it
// something that implements them (the SQLite and PostgreSQL stores in src/store, the in-memory
// image in image/ around either). Every method is async, so a networked database changes no
// caller. Implementations persist and map rows to the domain types in types.ts; the rules
// (aliases, pending nodes, names taken) are the control plane's. A failed database call rejects
// with StoreUnavailableError. test/contract/store.ts holds every implementation to one behaviour.

import type { ShareRow, Shares } from "./limit-shares";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { UsageRow } from "../protocol/routing";
import type { AdminState } from "../protocol/views";
import type { ApiKeyRow, ChangeRead, KeyPatch, TeamPatch, TeamRow, ControlPlaneRecord, ControlPlaneRow, EventRow, Fence, GpuRow, Lease, ModelRow, ModelStateRow, ModelWrite, NewEvent, NodeReportRow, NodeTrust, PlanWrite, RouterUsage, SharedTokenKind, Snapshot, StoreChange, TokenDigests, WeightsOrderRow } from "./types";

/** One join to write: the heartbeat, and its node's credential hash and whether it waits for approval. */
export interface JoinWrite {
  hb: HeartbeatRequest;
  join: { credentialHash: string; pending: boolean };
}

/** A node's replicas and their models' state, as a heartbeat's reports are checked against. */
export type ReplicaRead = Pick<Snapshot, "replicas" | "modelState"> & {
  /**
   * Rises whenever replicas or model state change (the in-memory image sets it; a plain store
   * leaves it out): a decision taken on one read still holds while it is unchanged.
   */
  version?: number;
};

/** The fleet's state as the views, the control loop and the projections read it. */
export interface FleetRead {
  /** One consistent read of everything the views are built from. */
  snapshot(): Promise<Snapshot>;
  /** Replicas and per-model state only (of the replicas on `node` when given): what a heartbeat's reports are checked against. */
  replicaSnapshot(node?: string): Promise<ReplicaRead>;
}

/** What heartbeats and joins write: nodes, their GPUs and weights, and when each was last heard. */
export interface InventoryWrites {
  /**
   * Upserts a node, its GPUs and its weights from one heartbeat, atomically. `join` is given for a
   * heartbeat that carried the join token: the new node's credential hash (and whether it waits
   * for approval). A node that already holds a credential is never given another: then nothing is
   * written and `taken` is true.
   */
  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }>;
  /**
   * Upserts several heartbeats (none with the join token) in one transaction, all or none, in
   * the order given: a node named twice ends as its last heartbeat says. One answer per
   * heartbeat: `created` is true for the first heartbeat of a node that had no row.
   */
  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]>;
  /**
   * Several joins (heartbeats that carried the join token) in one transaction, all or none, in
   * the order given, each as applyHeartbeat with its `join` would write it (a refused one writes
   * nothing and answers `taken`): a cold start of the whole cluster is a few commits, not one per node.
   */
  applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]>;
  /** The GPUs stored for these nodes, by node and index: what a heartbeat's GPU health is compared with. */
  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]>;
  /** Every node's last heartbeat: what another control plane's batched "last seen" moved. */
  nodesSeen(): Promise<{ name: string; at: number }[]>;
  /** Sets each named node's last heartbeat, in one transaction (the image's batched "last seen"). */
  touchNodes(seen: { name: string; at: number }[]): Promise<void>;
}

/**
 * The in-memory image's fast path (image/index.ts): a heartbeat that says exactly what is stored
 * is answered with its node's last-seen time touched in memory and nothing written.
 */
export interface UnchangedHeartbeats {
  /** True, with the node's last-seen time touched and nothing written, when the heartbeat says exactly what is stored already. */
  touchIfUnchanged(hb: HeartbeatRequest, now: number): Promise<boolean>;
  /** The ReplicaRead version as it stands now (see ReplicaRead.version). */
  replicaVersion(): number;
}

/** Who a node is and what it may do: credentials, trust, admin state, allowed addresses, deletion. */
export interface NodeRegistry {
  nodeTrust(name: string): Promise<NodeTrust>;
  /** The node a credential (by its SHA-256) belongs to. */
  nodeByCredentialHash(hash: string): Promise<string | undefined>;
  /** The stored hash of a node's credential. */
  credentialHashOf(name: string): Promise<string | undefined>;
  countNodes(): Promise<number>;
  /** Every node's credential hash (nodes without one are left out): what the in-memory image loads. */
  nodeCredentials(): Promise<{ node: string; hash: string }[]>;
  /** Forgets a node (row, GPUs, weights, address allowance) and the given replicas, writing the events; false when there was no such node. */
  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean>;
  /** Sets (or with null clears) the address a node may report besides its source address. */
  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }>;
  listAllowedAddresses(): Promise<{ node: string; address: string }[]>;
  /** Sets a node's admin state; the previous one, or undefined (nothing written) when there is no such node. */
  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }>;
}

/** The fenced planner: a reconcile plan (or a heartbeat's verdicts) written all or nothing. */
export interface PlanWriter {
  /**
   * Applies one plan in a single transaction, all or nothing. With a fence, the transaction first
   * checks (in the database, under a row lock) that the lease is still held by fence.holder with
   * fence.epoch and not expired by the database's clock; otherwise nothing is written and it
   * rejects with FencedError. Reports' verdicts (any control plane) pass no fence.
   */
  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void>;
}

/** The catalog and each model's control state. */
export interface CatalogPort {
  /** The models, by name. */
  models(): Promise<ModelRow[]>;
  /** The model named so, or the one with that alias. */
  modelByName(name: string): Promise<ModelRow | undefined>;
  modelByAlias(alias: string): Promise<ModelRow | undefined>;
  /** Writes catalog entries all or none; each written one's state loses its failures and parking. */
  saveModels(models: ModelWrite[], now: number): Promise<void>;
  /** False when there was no such model. */
  deleteModel(name: string): Promise<boolean>;
  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void>;
  /** Clears a model's failures and parking; false when it was not parked. */
  unpark(model: string): Promise<boolean>;
  parkedModels(): Promise<string[]>;
}

export interface EventsPort {
  appendEvent(e: NewEvent & { at: number }): Promise<number>;
  /** Events after `afterId` (oldest first), or the newest `limit` when no cursor is given. */
  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]>;
}

/** Client API keys, by the SHA-256 of the key, and the teams they belong to. */
export interface KeysPort {
  /** False (nothing written) when a key of that name exists. */
  createApiKey(k: ApiKeyRow): Promise<boolean>;
  listApiKeys(): Promise<ApiKeyRow[]>;
  /** False when there was no such key. */
  revokeApiKey(name: string): Promise<boolean>;
  /** Changes a key (undefined keeps a field, null clears it); the key as it now stands, undefined when there is no such key. */
  updateApiKey(name: string, patch: KeyPatch, now: number): Promise<ApiKeyRow | undefined>;
  /** False (nothing written) when a team of that name exists. */
  createTeam(t: TeamRow): Promise<boolean>;
  listTeams(): Promise<TeamRow[]>;
  /** Changes a team as updateApiKey a key; undefined when there is no such team. */
  updateTeam(name: string, patch: TeamPatch, now: number): Promise<TeamRow | undefined>;
  /**
   * Deletes a team, in one transaction: refused (nothing written, deleted false) while keys belong
   * to it, unless `force`, which deletes (revokes) them with it. `keys` names the team's keys
   * either way; undefined when there is no such team.
   */
  deleteTeam(name: string, force: boolean): Promise<{ deleted: boolean; keys: string[] } | undefined>;
}

/** Several control planes on one store (ha.ts): the leader lease and who is there. */
export interface MembershipPort {
  /**
   * Takes or renews the leader lease for `holder`, by the database's clock: renewed when holder
   * holds it unexpired (same epoch), taken when it is free or expired (epoch + 1), refused when
   * another holds it unexpired. With `take` (a holder that does not lead asks for a new term) the
   * epoch rises even when holder still holds it. Always answers the lease as it now stands.
   */
  acquireLease(holder: string, ttlMs: number, take?: boolean): Promise<Lease>;
  /** Gives the lease up at once (a clean stop) when holder holds it; the next taker raises the epoch. */
  releaseLease(holder: string): Promise<void>;
  /** The lease as it stands, or undefined when nobody ever took it. */
  readLease(): Promise<Lease | undefined>;
  /** Registers or refreshes a control plane (seen now, by the database's clock). */
  upsertControlPlane(cp: ControlPlaneRecord): Promise<void>;
  /** Every control plane that ever registered, with how long ago each was last seen (database clock). */
  controlPlanes(): Promise<ControlPlaneRow[]>;
  /** Forgets a control plane (`llmgw` never does this by itself: a stopped one shows as not answering). */
  removeControlPlane(name: string): Promise<void>;
}

/** Each router's last-used map, shared through the store by several control planes (usage.ts). */
export interface UsagePort {
  /**
   * One router's last-used map (replica id → ms since epoch) and since when it has watched
   * without a gap; replaces what that router reported before.
   */
  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void>;
  /** Every router's report, with how long ago each reported (database clock). */
  routerUsage(): Promise<RouterUsage[]>;
}

/** Each router's share of the keys' and teams' rate limits, shared through the store (limit-shares.ts). */
export interface LimitSharesPort {
  /**
   * In one transaction, serialised with every other control plane's: reads every router's row
   * (with how long ago each was written, by the database's clock), lets `decide` compute this
   * router's shares from them, and writes this router's row with its demand and those shares.
   * Answers what decide did.
   */
  shareLimits(router: string, demand: ReadonlyMap<string, number>, decide: (rows: ShareRow[]) => Shares): Promise<Shares>;
}

/**
 * The usage ledger's rows (per team, key, model and hour), as the routers counted them. Every
 * control plane adds its own router's counts: additions, so several writers are safe.
 */
export interface LedgerPort {
  /** Adds each row's counts to the stored row of its team, key, model and hour (made when missing), in one transaction. */
  addUsage(rows: readonly UsageRow[]): Promise<void>;
  /** The rows of the hours starting at or after `since` (ms since epoch), by hour, then team, key and model. */
  usageSince(since: number): Promise<UsageRow[]>;
  /** Deletes the rows of the hours starting before `before`. */
  pruneUsage(before: number): Promise<void>;
  /** Per team and key: the tokens (prompt and completion) and GPU-seconds of the hours from each of `starts` (the budgets' periods). */
  usageTotalsSince(starts: readonly number[]): Promise<UsageTotal[]>;
}

/** What one key (by name, under one team) used since each start asked for, in their order. */
export interface UsageTotal {
  team: string;
  key: string;
  tokens: number[];
  gpu_seconds: number[];
}

/** What nodes' heartbeats say beside their inventory (node-reports.ts). */
export interface NodeReportsPort {
  /**
   * What a node's heartbeats say that is not inventory (engines, discovery errors, revisions,
   * log listener): a JSON document, written only when it changed, so a control plane other
   * than the one the node heartbeats to knows it.
   */
  saveNodeReport(node: string, report: string, now: number): Promise<void>;
  nodeReports(): Promise<NodeReportRow[]>;
}

/**
 * The operator's pulls and removals of weights not done yet (weights-admin.ts): kept so a head
 * node that restarts, or another control plane that comes to lead, carries them on.
 */
export interface WeightsOrdersPort {
  /** Every order kept, by node, repository and revision. */
  weightsOrders(): Promise<WeightsOrderRow[]>;
  /** Writes the orders in one transaction, each replacing any of its node, repository and revision (a pull replaces a removal, and the reverse). */
  putWeightsOrders(rows: readonly WeightsOrderRow[]): Promise<void>;
  /** Deletes the orders named, each only while it is still of the kind given (a newer order of the other kind stays), in one transaction. */
  deleteWeightsOrders(keys: readonly Omit<WeightsOrderRow, "at">[]): Promise<void>;
}

/** Another writer's commits: told of, and read alone. */
export interface ChangeFeed {
  /**
   * Calls fn when another writer (another control plane) committed a change: PostgreSQL's
   * LISTEN/NOTIFY, SQLite's data_version. Returns a function that stops watching.
   */
  watch(fn: (change: StoreChange) => void): () => void;
  /** The seq of the last change committed (0 before any): read before a full load, it is where reading changes resumes. */
  changeCursor(): Promise<number>;
  /**
   * At most `limit` changes after seq `after`, oldest first, with the rows they name as they now
   * stand, in one consistent read. Changes commit in seq order without gaps; pruned ones are gone,
   * so a first seq other than after + 1 means the caller must load everything.
   */
  changesSince(after: number, limit: number): Promise<ChangeRead>;
}

/** What every control plane on one store shares: the engine secret, the tokens' digests. */
export interface SharedSecretsPort {
  /**
   * A secret every control plane on this store must share and use as it is (the engine secret):
   * stores `candidate` under `key` unless one is stored already, and answers the stored one.
   */
  sharedSecret(key: string, candidate: string): Promise<string>;
  /**
   * The digests of the tokens every control plane on this store shares (never the tokens). A
   * token an older version kept here in clear is first replaced by its digest.
   */
  tokenDigests(): Promise<TokenDigests>;
  /**
   * Stores `sha256` as `kind`'s digest: with "claim" only when none is stored (the first control
   * plane's token), with "replace" in place of the stored one, which joins the retired digests
   * (a rotation; replacing with the digest already stored changes nothing). Answers the digests
   * as they now stand.
   */
  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests>;
}

export interface BackupPort {
  /** A consistent copy of the whole database at `path` (which must not exist), written while the server runs. */
  backupTo(path: string): Promise<void>;
}

/** Everything a store implements: the role ports together. */
export interface StorePort
  extends FleetRead,
    InventoryWrites,
    NodeRegistry,
    PlanWriter,
    CatalogPort,
    EventsPort,
    KeysPort,
    MembershipPort,
    UsagePort,
    LimitSharesPort,
    LedgerPort,
    NodeReportsPort,
    WeightsOrdersPort,
    ChangeFeed,
    SharedSecretsPort,
    BackupPort {}
