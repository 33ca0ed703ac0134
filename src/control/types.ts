// The control plane's domain types: what a node, GPU, replica, model and event are to the
// reconciler, the views and the APIs. The store maps its rows to and from these (whatever its
// dialect); nothing here knows about tables or columns.

import type { ModelSpec } from "../protocol/catalog";
import type { KeyTier, UsageLimits } from "../protocol/routing";
import type { AdminState, ReplicaState } from "../protocol/views";

/** A node as the views see it: its credential's hash stays inside the store. */
export interface NodeRow {
  name: string;
  address: string;
  labels: Record<string, string>;
  fabrics: string[];
  /**
   * What an operator asked for; reachability is derived from lastHeartbeat at read time.
   * "pending": joined under `serve --approve-nodes` and not yet approved.
   */
  adminState: AdminState;
  lastHeartbeat: number;
  agentVersion: string;
  /** The protocol its agent speaks; null: one that did not say (protocol 1). */
  agentProtocol?: number | null;
  registeredAt: number;
}

export interface GpuRow {
  node: string;
  index: number;
  uuid: string;
  name: string;
  class: string;
  memoryMib: number;
  healthy: boolean;
  /** The physical card's uuid for a MIG instance; null for a whole card. */
  parent: string | null;
}

export interface Shard {
  node: string;
  gpus: number[];
}

export interface ReplicaRow {
  id: string;
  model: string;
  profile: string;
  state: ReplicaState;
  /** Shard 0 is the leader and serves HTTP. */
  shards: Shard[];
  port: number | null;
  endpoint: string | null;
  failures: number;
  error: string | null;
  createdAt: number;
  updatedAt: number;
  readyAt: number | null;
  /**
   * The fingerprint of how the replica was launched (launch.ts): a catalog change that alters it,
   * or `models restart`, makes the replica outdated and rolls it (reconcile/rollout.ts). Null: a
   * replica from before fingerprints, stamped with its model's current one on the next step.
   */
  launch?: string | null;
  /**
   * A draining replica still finishing the requests it was sent, kept running until they end or
   * this time (ms) passes (`serve --drain-timeout`); null: stop it now.
   */
  drainUntil?: number | null;
}

/** Per-model state the reconciler keeps between ticks: failures, parking, demand, placement. */
export interface ModelStateRow {
  model: string;
  /** Failed starts in a row (a replica that became ready ends the run). */
  failures: number;
  /**
   * Replicas that crashed soon after becoming ready, in a row (reconcile/crashes.ts): ended only
   * by a replica that stays ready for the crash window, or by an unpark or a catalog change.
   */
  crashes: number;
  parked: boolean;
  reason: string | null;
  lastFailureAt: number | null;
  /** Last time a client asked for this model (on-demand models want a replica until idle_timeout). */
  lastRequestedAt: number | null;
  /** Replicas the load-based scaler wants, between min and max; null = no signal. */
  scaleTarget: number | null;
  /** Why placement could not give it what it wants, as last computed; null when it could. */
  unplaceableReason: string | null;
}

/** A model's control state before anything happened to it (the store's column defaults). */
export function emptyModelState(model: string): ModelStateRow {
  return { model, failures: 0, crashes: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: null, scaleTarget: null, unplaceableReason: null };
}

export interface ModelRow {
  name: string;
  /** The validated spec exactly as applied, defaults filled. */
  spec: ModelSpec;
  /** Bumped on every change; a new revision unparks. */
  revision: number;
  createdAt: number;
  updatedAt: number;
}

export interface EventRow {
  id: number;
  at: number;
  kind: string;
  subject: string;
  message: string;
  data: unknown;
}

/** An event to be written: the store numbers it. */
export interface NewEvent {
  kind: string;
  subject: string;
  message: string;
  data?: unknown;
}

export interface ApiKeyRow {
  name: string;
  /** SHA-256 (hex) of the key; the key itself is never stored. */
  hash: string;
  /** When set, requests with this key see only this pool's models. */
  pool: string | null;
  createdAt: number;
  /** The team it belongs to (held to the team's limits too). Each of these is absent when not set. */
  team?: string;
  /** The models (names or aliases) it may use. */
  models?: string[];
  /** When it stops working (ms since epoch). */
  expiresAt?: number;
  tier?: KeyTier;
  /** Its own limits; absent when it has none. */
  limits?: UsageLimits;
  /** Its last change (absent until it was first changed). */
  updatedAt?: number;
}

/** A change to a key: a field given undefined stays, null clears it (a limit given null: unlimited). */
export interface KeyPatch {
  pool?: string | null;
  team?: string | null;
  models?: string[] | null;
  expiresAt?: number | null;
  tier?: KeyTier | null;
  limits?: LimitsPatch;
}

/** Limits to change: undefined keeps one, null clears it. */
export type LimitsPatch = { [K in keyof UsageLimits]?: UsageLimits[K] | null };

/** A team: limits shared by all its keys, and the tier its keys take when they name none. */
export interface TeamRow {
  name: string;
  /** Absent when it has none. */
  limits?: UsageLimits;
  tier?: KeyTier;
  createdAt: number;
  updatedAt: number;
}

/** A change to a team, as KeyPatch. */
export interface TeamPatch {
  tier?: KeyTier | null;
  limits?: LimitsPatch;
}

/** What a node's last heartbeat said about its GPU discovery: the node's error, each GPU's reason. */
export interface NodeDiscovery {
  error: string | null;
  /** GPU index → why it is unhealthy */
  reasons: ReadonlyMap<number, string>;
  /** Discovery fails and reports no GPUs: the node's GPUs are its last known ones, kept unhealthy (gpu-health.ts). */
  kept?: boolean;
}

/** Everything the control plane derives its views from, read in one transaction. */
export interface Snapshot {
  nodes: NodeRow[];
  gpus: GpuRow[];
  weights: { node: string; model: string }[];
  models: ModelRow[];
  replicas: ReplicaRow[];
  modelState: ModelStateRow[];
  /** Per node, as last heartbeated; absent for nodes not heard from since this process started. */
  discovery?: ReadonlyMap<string, NodeDiscovery>;
  /**
   * Per node, per model, the Hugging Face revisions it holds, newest first, as last heartbeated;
   * absent for nodes not heard from since this process started and for agents that do not report them.
   */
  revisions?: ReadonlyMap<string, ReadonlyMap<string, readonly string[]>>;
  /**
   * Rises with every change of what the snapshot holds other than nodes' last-seen times (the
   * in-memory image sets it; a plain store leaves it out). Two snapshots with one version give
   * the same assignments, endpoints and catalog, so the tick need not project them again.
   */
  version?: number;
}

/** What the agent API checks a heartbeat against: is the name taken, by a credential, and what may it report. */
export interface NodeTrust {
  exists: boolean;
  hasCredential: boolean;
  adminState: AdminState | undefined;
  allowedAddress: string | undefined;
}

/** One reconcile plan as the store writes it, all or nothing. */
export interface PlanWrite {
  create: { id: string; model: string; profile: string; shards: Shard[]; port: number; endpoint: string; launch?: string }[];
  update: { id: string; patch: Partial<Omit<ReplicaRow, "id">> }[];
  remove: string[];
  modelState: ReadonlyMap<string, Partial<Omit<ModelStateRow, "model">>>;
  nodeAdmin: { node: string; state: AdminState }[];
  events: NewEvent[];
}

/** A catalog entry to write, as control decided it: the store only persists it. */
export interface ModelWrite {
  spec: ModelSpec;
  revision: number;
  /** A model new to the catalog (else its spec, aliases and revision are replaced). */
  created: boolean;
}

// ---- several control planes on one store

/** Who may write the plan: the lease as the store's transaction must find it. */
export interface Fence {
  holder: string;
  epoch: number;
}

/** A token every control plane on one store shares: "admin" administers, "join" admits new nodes. */
export type SharedTokenKind = "admin" | "join";

/** What the store keeps of a shared token: its SHA-256 (hex), never the token, and the digests it replaced (rotated away), newest last. */
export interface TokenDigest {
  sha256: string;
  retired: string[];
}

/** Each shared token's digest; a kind absent has none stored yet. */
export type TokenDigests = Partial<Record<SharedTokenKind, TokenDigest>>;

/** The leader lease as the store holds it (times by the database's clock). */
export interface Lease {
  holder: string;
  /** Rises with every new leader (never with a renewal). */
  epoch: number;
  /** ms until it lapses, by the database's clock; ≤ 0 when it has. */
  expiresInMs: number;
}

/** A control plane as it registers itself. */
export interface ControlPlaneRecord {
  /** Unique among the control planes on one store (`serve --name`, default the hostname). */
  name: string;
  /** Its admin/agent API base URL, as others (and status) reach it. */
  adminUrl: string;
  /** Its router's base URL. */
  routerUrl: string;
  /** When this process started (ms since epoch). */
  startedAt: number;
  /** Its release and the protocol it speaks (protocol/version.ts); absent from a release before they were kept. */
  version?: string;
  protocol?: number;
}

export interface ControlPlaneRow extends ControlPlaneRecord {
  /** ms since it last refreshed its row, by the database's clock. */
  seenAgoMs: number;
}

/** One router's report of what it served. */
export interface RouterUsage {
  router: string;
  /** Since when it has watched without a gap (ms since epoch). */
  watchingSince: number;
  lastUsed: ReadonlyMap<string, number>;
  /** ms since it reported, by the database's clock. */
  reportedAgoMs: number;
}

export interface NodeReportRow {
  node: string;
  report: string;
  at: number;
}

/** An operator's `weights pull` (kind "pull") or `weights rm` ("remove") of one revision on one node, not done yet. */
export interface WeightsOrderRow {
  node: string;
  repo: string;
  revision: string;
  kind: "pull" | "remove";
  /** When it was asked for (ms since epoch). */
  at: number;
}

/**
 * What another writer changed, as far as the store can tell: "seen" when only nodes' last
 * heartbeats moved; "reports" for node reports; "meta" for what the in-memory image does not
 * hold (the lease, control-plane rows, router usage, events); "any" for everything else
 * (the in-memory image reads the store's changes). A store that cannot tell says "any" and
 * then "seen" (last-seen times may have moved as well).
 */
export type StoreChange = "seen" | "any" | "meta" | "reports";

// ---- another writer's commits, read alone (the store's changes table)

/** What a change row names: a node (its row, GPUs, weights, credential, allowed address), a model (its row and state), a replica, an API key, a team. */
export type ChangeKind = "node" | "model" | "replica" | "key" | "team";
export const CHANGE_KINDS: ReadonlySet<string> = new Set<ChangeKind>(["node", "model", "replica", "key", "team"]);

/** One row written in a table the in-memory image holds; seq rises by one per change, in commit order. */
export interface Change {
  seq: number;
  /** A ChangeKind; anything else is a kind this version does not know (the reader loads everything). */
  kind: string;
  key: string;
}

/** The changes after a cursor and, read in the same transaction, the rows they name as they stand (a name without a row: deleted). */
export interface ChangeRead {
  changes: Change[];
  nodes: NodeRow[];
  gpus: GpuRow[];
  weights: { node: string; model: string }[];
  credentials: { node: string; hash: string }[];
  addresses: { node: string; address: string }[];
  models: ModelRow[];
  modelState: ModelStateRow[];
  replicas: ReplicaRow[];
  apiKeys: ApiKeyRow[];
  teams: TeamRow[];
}

/** The distinct keys the changes name, per kind (what a store reads for changesSince). */
export function changedKeys(changes: readonly Change[]): Record<ChangeKind, string[]> {
  const out: Record<ChangeKind, Set<string>> = { node: new Set(), model: new Set(), replica: new Set(), key: new Set(), team: new Set() };
  for (const c of changes) if (CHANGE_KINDS.has(c.kind)) out[c.kind as ChangeKind].add(c.key);
  return { node: [...out.node], model: [...out.model], replica: [...out.replica], key: [...out.key], team: [...out.team] };
}

/** Changes kept in the store: a reader further behind finds a gap and loads everything. */
export const CHANGES_KEPT = 50_000;
/** Plans between two prunes of the changes table (the first plan of a store instance prunes). */
export const PRUNE_EVERY = 100;
