// What the control plane needs of persistence, and nothing more: the app hands the Controller
// something that implements this (today the SQLite store in src/store; a PostgreSQL dialect
// next). Every method is async, so a networked database changes no caller. Implementations
// persist and map rows to the domain types in types.ts; the rules (aliases, pending nodes,
// names taken) are the Controller's. A failed database call rejects with StoreUnavailableError.

import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { AdminState } from "../protocol/views";
import type { ApiKeyRow, EventRow, ModelRow, ModelStateRow, ModelWrite, NewEvent, NodeTrust, PlanWrite, Snapshot } from "./types";

export interface StorePort {
  /** One consistent read of everything the views are built from. */
  snapshot(): Promise<Snapshot>;
  /** Replicas and per-model state only: what a heartbeat's reports are checked against. */
  replicaSnapshot(node?: string): Promise<Pick<Snapshot, "replicas" | "modelState">>;

  // ---- nodes
  /**
   * Upserts a node, its GPUs and its weights from one heartbeat, atomically. `join` is given for a
   * heartbeat that carried the join token: the new node's credential hash (and whether it waits
   * for approval). A node that already holds a credential is never given another: then nothing is
   * written and `taken` is true.
   */
  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }>;
  nodeTrust(name: string): Promise<NodeTrust>;
  /** The node a credential (by its SHA-256) belongs to. */
  nodeByCredentialHash(hash: string): Promise<string | undefined>;
  /** The stored hash of a node's credential. */
  credentialHashOf(name: string): Promise<string | undefined>;
  countNodes(): Promise<number>;
  /** Sets each named node's last heartbeat, in one transaction (the model's batched "last seen"). */
  touchNodes(seen: { name: string; at: number }[]): Promise<void>;
  /** Every node's credential hash (nodes without one are left out): what the in-memory model loads. */
  nodeCredentials(): Promise<{ node: string; hash: string }[]>;
  /** Forgets a node (row, GPUs, weights, address allowance) and the given replicas, writing the events; false when there was no such node. */
  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean>;
  /** Sets (or with null clears) the address a node may report besides its source address. */
  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }>;
  listAllowedAddresses(): Promise<{ node: string; address: string }[]>;
  /** Sets a node's admin state; the previous one, or undefined (nothing written) when there is no such node. */
  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }>;

  // ---- catalog
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

  // ---- replicas
  /** Applies one reconcile plan in a single transaction, all or nothing. */
  applyPlan(plan: PlanWrite, now: number): Promise<void>;

  // ---- events
  appendEvent(e: NewEvent & { at: number }): Promise<number>;
  /** Events after `afterId` (oldest first), or the newest `limit` when no cursor is given. */
  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]>;

  // ---- API keys
  /** False (nothing written) when a key of that name exists. */
  createApiKey(k: ApiKeyRow): Promise<boolean>;
  listApiKeys(): Promise<ApiKeyRow[]>;
  /** False when there was no such key. */
  revokeApiKey(name: string): Promise<boolean>;

  /** A consistent copy of the whole database at `path` (which must not exist), written while the server runs. */
  backupTo(path: string): Promise<void>;
}
