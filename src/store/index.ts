// Opening the embedded SQLite database and every query the rest of llmgw makes of it. Callers
// get plain objects; drizzle stays inside src/store.

import { Database } from "bun:sqlite";
import { and, asc, count, desc, eq, getTableColumns, gt, gte, inArray } from "drizzle-orm";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import type { ModelSpec } from "../protocol/catalog";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { AdminState, ReplicaState } from "../protocol/views";
import { embeddedMigrations } from "./migrations";
import * as schema from "./schema";

/** A node as the views see it: its credential's hash stays inside the store. */
export type NodeRow = Omit<typeof schema.nodes.$inferSelect, "credentialHash">;
const { credentialHash: _credentialHash, ...nodeColumns } = getTableColumns(schema.nodes);
export type GpuRow = typeof schema.gpus.$inferSelect;
export type ReplicaRow = typeof schema.replicas.$inferSelect;
export type ModelStateRow = typeof schema.modelState.$inferSelect;
export type EventRow = typeof schema.events.$inferSelect;
export interface ModelRow {
  name: string;
  spec: ModelSpec;
  revision: number;
  createdAt: number;
  updatedAt: number;
}

/** What a node's last heartbeat said about its GPU discovery: the node's error, each GPU's reason. */
export interface NodeDiscovery {
  error: string | null;
  /** GPU index → why it is unhealthy */
  reasons: ReadonlyMap<number, string>;
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
}

/** A name or alias is already taken: both names are in the message. */
export class ConflictError extends Error {
  constructor(message: string, readonly path: (string | number)[] = []) {
    super(message);
  }
}

export class NotFoundError extends Error {}

export interface OpenOptions {
  /** File path, or ":memory:" for tests. */
  path: string;
  busyTimeoutMs?: number;
}

export class Store {
  readonly db: BunSQLiteDatabase<typeof schema>;
  readonly sqlite: Database;
  /**
   * Discovery errors and GPU reasons are kept in memory, not in a table: only people read them,
   * every heartbeat (seconds apart) carries them again, so a restarted head node knows them
   * after one interval, and the health they explain (gpus.healthy) is stored. No migration.
   */
  private readonly discovery = new Map<string, NodeDiscovery>();
  /**
   * Each node's reported revisions, in memory for the same reasons: every heartbeat carries them
   * again, and until a node's next one the head node only holds back from settling a revision.
   */
  private readonly revisions = new Map<string, ReadonlyMap<string, readonly string[]>>();

  constructor(opts: OpenOptions) {
    this.sqlite = new Database(opts.path, { create: true, strict: true });
    // WAL lets the CLI-facing reads run beside the reconciler's writes; the busy timeout
    // turns a brief lock into a wait instead of an error; foreign keys keep GPUs and
    // weights from outliving their node.
    this.sqlite.exec("PRAGMA journal_mode = WAL");
    this.sqlite.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(opts.busyTimeoutMs ?? 5000))}`);
    this.sqlite.exec("PRAGMA foreign_keys = ON");
    this.sqlite.exec("PRAGMA synchronous = NORMAL");
    this.db = drizzle({ client: this.sqlite, schema });
    this.migrate();
  }

  private migrate(): void {
    // Same path drizzle's bun-sqlite migrator takes after reading files; see migrations.ts.
    const dialect = (this.db as unknown as { dialect: { migrate(m: unknown, s: unknown, c: unknown): void } }).dialect;
    const session = (this.db as unknown as { session: unknown }).session;
    dialect.migrate(embeddedMigrations(), session, { migrationsFolder: "(embedded)" });
  }

  close(): void {
    this.sqlite.close();
  }

  /**
   * Upserts a node, its GPUs and its weights from one heartbeat, atomically. `join` is given for
   * a heartbeat that carried the join token: the new node's credential hash (and whether it
   * waits for approval). A node that already holds a credential is never given another here.
   */
  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): { created: boolean } {
    return this.db.transaction((tx) => {
      const existing = tx.select({ name: schema.nodes.name, credentialHash: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, hb.node)).get();
      if (existing) {
        if (join && existing.credentialHash !== null) throw new ConflictError(`node "${hb.node}" already holds a credential`, ["node"]);
        tx.update(schema.nodes)
          .set({ address: hb.address, labels: hb.labels, fabrics: hb.fabrics, lastHeartbeat: now, agentVersion: hb.agent_version, ...(join ? { credentialHash: join.credentialHash } : {}) })
          .where(eq(schema.nodes.name, hb.node))
          .run();
      } else {
        tx.insert(schema.nodes)
          .values({
            name: hb.node,
            address: hb.address,
            labels: hb.labels,
            fabrics: hb.fabrics,
            adminState: join?.pending ? "pending" : "none",
            lastHeartbeat: now,
            agentVersion: hb.agent_version,
            registeredAt: now,
            credentialHash: join?.credentialHash ?? null,
          })
          .run();
      }
      tx.delete(schema.gpus).where(eq(schema.gpus.node, hb.node)).run();
      if (hb.gpus.length > 0)
        tx.insert(schema.gpus)
          .values(
            hb.gpus.map((g) => ({
              node: hb.node,
              index: g.index,
              uuid: g.uuid,
              name: g.name,
              class: g.class,
              memoryMib: g.memory_mib,
              healthy: g.healthy,
              parent: g.parent,
            })),
          )
          .run();
      tx.delete(schema.weights).where(eq(schema.weights.node, hb.node)).run();
      const models = [...new Set(hb.models)];
      if (models.length > 0) tx.insert(schema.weights).values(models.map((m) => ({ node: hb.node, model: m }))).run();
      const reasons = new Map<number, string>();
      for (const g of hb.gpus) if (!g.healthy && g.reason) reasons.set(g.index, g.reason);
      if (hb.discovery_error || reasons.size > 0) this.discovery.set(hb.node, { error: hb.discovery_error || null, reasons });
      else this.discovery.delete(hb.node);
      // A Map, not the parsed record: a model named like an Object.prototype key stays a plain entry.
      if (hb.model_revisions !== undefined) this.revisions.set(hb.node, new Map(Object.entries(hb.model_revisions)));
      else this.revisions.delete(hb.node);
      return { created: !existing };
    });
  }

  /** One consistent read of everything the views are built from. */
  snapshot(): Snapshot {
    return this.db.transaction(
      (tx) => ({
        nodes: tx.select(nodeColumns).from(schema.nodes).orderBy(asc(schema.nodes.name)).all(),
        gpus: tx.select().from(schema.gpus).orderBy(asc(schema.gpus.node), asc(schema.gpus.index)).all(),
        weights: tx.select().from(schema.weights).orderBy(asc(schema.weights.node), asc(schema.weights.model)).all(),
        models: tx.select().from(schema.models).orderBy(asc(schema.models.name)).all() as ModelRow[],
        replicas: tx.select().from(schema.replicas).orderBy(asc(schema.replicas.id)).all(),
        modelState: tx.select().from(schema.modelState).all(),
        discovery: new Map(this.discovery),
        revisions: new Map(this.revisions),
      }),
      { behavior: "deferred" },
    );
  }

  /** Replicas and per-model state only: what a heartbeat's reports are checked against. */
  replicaSnapshot(): Pick<Snapshot, "replicas" | "modelState"> {
    return this.db.transaction(
      (tx) => ({ replicas: tx.select().from(schema.replicas).all(), modelState: tx.select().from(schema.modelState).all() }),
      { behavior: "deferred" },
    );
  }

  // ---- nodes --------------------------------------------------------------------------

  nodeExists(name: string): boolean {
    return !!this.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
  }

  /** What the agent API checks a heartbeat against: is the name taken, by a credential, and what may it report. */
  nodeTrust(name: string): { exists: boolean; hasCredential: boolean; adminState: AdminState | undefined; allowedAddress: string | undefined } {
    return this.db.transaction(
      (tx) => {
        const row = tx.select({ h: schema.nodes.credentialHash, s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
        const allowed = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get();
        return { exists: !!row, hasCredential: !!row?.h, adminState: row?.s, allowedAddress: allowed?.a };
      },
      { behavior: "deferred" },
    );
  }

  /** The node a credential (by its SHA-256) belongs to. */
  nodeByCredentialHash(hash: string): string | undefined {
    return this.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.credentialHash, hash)).get()?.n;
  }

  /** The stored hash of a node's credential (the head node derives the log listener's token from it). */
  credentialHashOf(name: string): string | undefined {
    return this.db.select({ h: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, name)).get()?.h ?? undefined;
  }

  countNodes(): number {
    return this.db.select({ n: count() }).from(schema.nodes).get()?.n ?? 0;
  }

  /**
   * Forgets a node: its row, GPUs, weights, credential and address allowance, and the given
   * replicas (those still on it), in one transaction.
   */
  deleteNode(name: string, replicaIds: string[], events: { kind: string; subject: string; message: string; data?: unknown }[], now: number): void {
    this.db.transaction((tx) => {
      const row = tx.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
      if (!row) throw new NotFoundError(`node "${name}" not found`);
      if (replicaIds.length > 0) tx.delete(schema.replicas).where(inArray(schema.replicas.id, replicaIds)).run();
      tx.delete(schema.nodes).where(eq(schema.nodes.name, name)).run();
      tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
      for (const e of events) tx.insert(schema.events).values({ at: now, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null }).run();
    });
  }

  /** Sets (or with null clears) the data-plane address a node may report besides its source address. */
  setAllowedAddress(name: string, address: string | null, now: number): { previous: string | undefined } {
    return this.db.transaction((tx) => {
      const prev = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get()?.a;
      if (address === null) tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
      else tx.insert(schema.nodeAddresses).values({ node: name, address, createdAt: now }).onConflictDoUpdate({ target: schema.nodeAddresses.node, set: { address, createdAt: now } }).run();
      return { previous: prev };
    });
  }

  listAllowedAddresses(): { node: string; address: string }[] {
    return this.db.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).orderBy(asc(schema.nodeAddresses.node)).all();
  }

  setAdminState(name: string, state: AdminState, opts: { approve?: boolean } = {}): { previous: AdminState } {
    return this.db.transaction((tx) => {
      const row = tx.select({ s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
      if (!row) throw new NotFoundError(`node "${name}" not found`);
      // Only approving takes a node out of pending: a cordon or uncordon must not admit it by the way.
      if (row.s === "pending" && !opts.approve && state !== "pending")
        throw new ConflictError(`node "${name}" is pending approval: approve it first (llmgw nodes approve ${name})`, ["node"]);
      tx.update(schema.nodes).set({ adminState: state }).where(eq(schema.nodes.name, name)).run();
      return { previous: row.s };
    });
  }

  // ---- catalog ------------------------------------------------------------------------

  /** The model a name or alias refers to, or undefined. */
  resolveModel(nameOrAlias: string): ModelRow | undefined {
    const direct = this.db.select().from(schema.models).where(eq(schema.models.name, nameOrAlias)).get() as ModelRow | undefined;
    if (direct) return direct;
    const alias = this.db.select().from(schema.modelAliases).where(eq(schema.modelAliases.alias, nameOrAlias)).get();
    if (!alias) return undefined;
    return this.db.select().from(schema.models).where(eq(schema.models.name, alias.model)).get() as ModelRow | undefined;
  }

  /**
   * Creates or replaces models, all or none. A changed spec gets a new revision, and a new
   * revision unparks the model: the operator changed something, so it deserves another try.
   */
  putModels(specs: ModelSpec[], now: number): { name: string; result: "created" | "configured" | "unchanged"; revision: number }[] {
    return this.db.transaction((tx) => {
      const out: { name: string; result: "created" | "configured" | "unchanged"; revision: number }[] = [];
      for (const [i, spec] of specs.entries()) {
        for (const [j, n] of [spec.name, ...spec.aliases].entries()) {
          const asModel = j > 0 ? tx.select({ name: schema.models.name }).from(schema.models).where(eq(schema.models.name, n)).get() : undefined;
          if (asModel) throw new ConflictError(`alias "${n}" of model "${spec.name}" is the name of model "${asModel.name}"`, specs.length > 1 ? ["models", i, "aliases"] : ["aliases"]);
          const asAlias = tx.select().from(schema.modelAliases).where(eq(schema.modelAliases.alias, n)).get();
          if (asAlias && asAlias.model !== spec.name)
            throw new ConflictError(
              j === 0 ? `name "${n}" is already an alias of model "${asAlias.model}"` : `alias "${n}" of model "${spec.name}" is already an alias of model "${asAlias.model}"`,
              specs.length > 1 ? ["models", i, j === 0 ? "name" : "aliases"] : [j === 0 ? "name" : "aliases"],
            );
        }
        const existing = tx.select().from(schema.models).where(eq(schema.models.name, spec.name)).get() as ModelRow | undefined;
        if (existing && JSON.stringify(existing.spec) === JSON.stringify(spec)) {
          out.push({ name: spec.name, result: "unchanged", revision: existing.revision });
          continue;
        }
        const revision = existing ? existing.revision + 1 : 1;
        if (existing) {
          tx.update(schema.models).set({ spec, revision, updatedAt: now }).where(eq(schema.models.name, spec.name)).run();
          tx.delete(schema.modelAliases).where(eq(schema.modelAliases.model, spec.name)).run();
        } else {
          tx.insert(schema.models).values({ name: spec.name, spec, revision, createdAt: now, updatedAt: now }).run();
        }
        if (spec.aliases.length > 0) tx.insert(schema.modelAliases).values(spec.aliases.map((a) => ({ alias: a, model: spec.name }))).run();
        tx.insert(schema.modelState)
          .values({ model: spec.name })
          .onConflictDoUpdate({ target: schema.modelState.model, set: { failures: 0, parked: false, reason: null, unplaceableReason: null } })
          .run();
        out.push({ name: spec.name, result: existing ? "configured" : "created", revision });
      }
      return out;
    });
  }

  deleteModel(name: string): void {
    this.db.transaction((tx) => {
      const row = tx.select({ n: schema.models.name }).from(schema.models).where(eq(schema.models.name, name)).get();
      if (!row) throw new NotFoundError(`model "${name}" not found`);
      tx.delete(schema.models).where(eq(schema.models.name, name)).run();
      tx.delete(schema.modelState).where(eq(schema.modelState.model, name)).run();
    });
  }

  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): void {
    this.db
      .insert(schema.modelState)
      .values({ model, ...patch })
      .onConflictDoUpdate({ target: schema.modelState.model, set: patch })
      .run();
  }

  // ---- replicas -----------------------------------------------------------------------

  insertReplica(r: typeof schema.replicas.$inferInsert): void {
    this.db.insert(schema.replicas).values(r).run();
  }

  updateReplica(id: string, patch: Partial<Omit<ReplicaRow, "id">>): void {
    this.db.update(schema.replicas).set(patch).where(eq(schema.replicas.id, id)).run();
  }

  deleteReplicas(ids: string[]): void {
    if (ids.length > 0) this.db.delete(schema.replicas).where(inArray(schema.replicas.id, ids)).run();
  }

  setReplicaState(id: string, state: ReplicaState, now: number): void {
    this.db.update(schema.replicas).set({ state, updatedAt: now }).where(eq(schema.replicas.id, id)).run();
  }

  /**
   * Applies one reconcile plan in a single transaction: new replicas, state changes, removals,
   * model state, node admin changes and the events that explain them, all or nothing.
   */
  applyPlan(
    plan: {
      create: { id: string; model: string; profile: string; shards: { node: string; gpus: number[] }[]; port: number; endpoint: string }[];
      update: { id: string; patch: Partial<Omit<ReplicaRow, "id">> }[];
      remove: string[];
      modelState: Map<string, Partial<Omit<ModelStateRow, "model">>>;
      nodeAdmin: { node: string; state: AdminState }[];
      events: { kind: string; subject: string; message: string; data?: unknown }[];
    },
    now: number,
  ): void {
    this.db.transaction((tx) => {
      for (const r of plan.create)
        tx.insert(schema.replicas)
          .values({ id: r.id, model: r.model, profile: r.profile, state: "starting", shards: r.shards, port: r.port, endpoint: r.endpoint, createdAt: now, updatedAt: now })
          .run();
      for (const u of plan.update) tx.update(schema.replicas).set({ ...u.patch, updatedAt: now }).where(eq(schema.replicas.id, u.id)).run();
      if (plan.remove.length > 0) tx.delete(schema.replicas).where(inArray(schema.replicas.id, plan.remove)).run();
      for (const [model, patch] of plan.modelState) {
        if (Object.keys(patch).length === 0) continue;
        tx.insert(schema.modelState).values({ model, ...patch }).onConflictDoUpdate({ target: schema.modelState.model, set: patch }).run();
      }
      for (const n of plan.nodeAdmin) tx.update(schema.nodes).set({ adminState: n.state }).where(eq(schema.nodes.name, n.node)).run();
      for (const e of plan.events) tx.insert(schema.events).values({ at: now, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null }).run();
    });
  }

  /** Clears a model's failures and parking; false when it was not parked. */
  unpark(model: string): boolean {
    return this.db.transaction((tx) => {
      const st = tx.select().from(schema.modelState).where(eq(schema.modelState.model, model)).get();
      if (!st?.parked) return false;
      tx.update(schema.modelState).set({ parked: false, failures: 0, reason: null, lastFailureAt: null }).where(eq(schema.modelState.model, model)).run();
      return true;
    });
  }

  parkedModels(): string[] {
    return this.db.select({ m: schema.modelState.model }).from(schema.modelState).where(eq(schema.modelState.parked, true)).all().map((r) => r.m);
  }

  // ---- events -------------------------------------------------------------------------

  appendEvent(e: { at: number; kind: string; subject: string; message: string; data?: unknown }): number {
    const row = this.db
      .insert(schema.events)
      .values({ at: e.at, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null })
      .returning({ id: schema.events.id })
      .get();
    return row.id;
  }

  /** Events after `afterId` (oldest first), or the newest `limit` when no cursor is given. */
  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): EventRow[] {
    const where = and(
      opts.afterId !== undefined ? gt(schema.events.id, opts.afterId) : undefined,
      opts.subject !== undefined ? eq(schema.events.subject, opts.subject) : undefined,
      opts.kind !== undefined ? eq(schema.events.kind, opts.kind) : undefined,
      opts.since !== undefined ? gte(schema.events.at, opts.since) : undefined,
    );
    if (opts.afterId !== undefined)
      return this.db.select().from(schema.events).where(where).orderBy(asc(schema.events.id)).limit(opts.limit).all();
    return this.db.select().from(schema.events).where(where).orderBy(desc(schema.events.id)).limit(opts.limit).all().reverse();
  }

  // ---- API keys -----------------------------------------------------------------------

  createApiKey(k: { name: string; hash: string; pool: string | null; createdAt: number }): void {
    const existing = this.db.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.name, k.name)).get();
    if (existing) throw new ConflictError(`an API key named "${k.name}" already exists; revoke it first or pick another name`, ["name"]);
    this.db.insert(schema.apiKeys).values(k).run();
  }

  listApiKeys(): { name: string; hash: string; pool: string | null; createdAt: number }[] {
    return this.db.select().from(schema.apiKeys).orderBy(asc(schema.apiKeys.name)).all();
  }

  revokeApiKey(name: string): void {
    const row = this.db.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.name, name)).get();
    if (!row) throw new NotFoundError(`API key "${name}" not found`);
    this.db.delete(schema.apiKeys).where(eq(schema.apiKeys.name, name)).run();
  }

  // ---- meta ---------------------------------------------------------------------------

  getMeta(key: string): string | undefined {
    return this.db.select().from(schema.meta).where(eq(schema.meta.key, key)).get()?.value;
  }

  setMeta(key: string, value: string): void {
    this.db.insert(schema.meta).values({ key, value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } }).run();
  }

  /**
   * Writes a consistent copy of the whole database to `path` while the server keeps running
   * (SQLite's VACUUM INTO reads one snapshot). The target must not exist.
   */
  backupTo(path: string): void {
    this.sqlite.query("VACUUM INTO ?").run(path);
  }

  /** Row counts per table, for tests and `llmgw backup` checks. */
  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const t of ["nodes", "gpus", "weights", "models", "model_aliases", "replicas", "model_state", "events", "api_keys"]) {
      out[t] = (this.sqlite.query(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n;
    }
    return out;
  }
}

