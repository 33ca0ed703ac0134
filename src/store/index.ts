// The SQLite dialect of the control plane's StorePort (src/control/store-port.ts): opening the
// embedded database, migrating it, and every query the control plane makes of it, mapped to the
// domain types of src/control/types.ts. It persists and maps, nothing more: the rules live in the
// control plane. Drizzle stays inside src/store; a SQLite failure leaves it as
// StoreUnavailableError. bun:sqlite is synchronous, so each method does its work at once and
// returns a settled promise: the async signatures are for a networked dialect.
//
// src/store may import control (the port it implements, the domain types and errors), protocol
// and lib; never router, api, app, cli, agent or sim.

import { Database } from "bun:sqlite";
import { and, asc, count, desc, eq, getTableColumns, gt, gte, inArray, sql } from "drizzle-orm";
import { drizzle, type BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import type { JoinWrite, StorePort } from "../control/store-port";
import { type ApiKeyRow, type ChangeRead, type ControlPlaneRecord, type ControlPlaneRow, type EventRow, type Fence, type GpuRow, type Lease, type ModelRow, type ModelStateRow, type ModelWrite, type NewEvent, type NodeReportRow, type NodeTrust, type PlanWrite, type RouterUsage, type SharedTokenKind, type Snapshot, type StoreChange, type TokenDigests, CHANGES_KEPT, PRUNE_EVERY, changedKeys } from "../control/types";
import { FencedError } from "../control/errors";
import type { ModelSpec } from "../protocol/catalog";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import type { AdminState } from "../protocol/views";
import { guarded } from "./errors";
import { joinRefused } from "../control/admission";
import { embeddedMigrations } from "./migrations";
import * as schema from "./schema";
import { DIGEST_KEYS, TOKEN_KEYS, clearTokenMigration, digestsOf, nextDigest } from "./token-digests";

// The domain types, importable from here as before (test fixtures use them).
export type { EventRow, GpuRow, ModelRow, ModelStateRow, NodeDiscovery, NodeRow, ReplicaRow, Snapshot } from "../control/types";

const { credentialHash: _credentialHash, ...nodeColumns } = getTableColumns(schema.nodes);

type ModelRecord = typeof schema.models.$inferSelect;
type EventRecord = typeof schema.events.$inferSelect;
const toModel = (r: ModelRecord): ModelRow => ({ name: r.name, spec: r.spec as ModelSpec, revision: r.revision, createdAt: r.createdAt, updatedAt: r.updatedAt });
const toEvent = (r: EventRecord): EventRow => ({ id: r.id, at: r.at, kind: r.kind, subject: r.subject, message: r.message, data: r.data });
const eventRecord = (e: NewEvent, at: number) => ({ at, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null });

export interface OpenOptions {
  /** File path, or ":memory:" for tests. */
  path: string;
  /** How long a write waits for a lock held by another connection (`serve --db-busy-timeout`). */
  busyTimeoutMs: number;
}

/** The database's own clock, ms since epoch: what leases and "last seen" of control planes are measured by. */
const DB_NOW = sql.raw("CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)");

function readLeaseRow(db: { all<T>(q: ReturnType<typeof sql>): T[] }): Lease | undefined {
  const r = db.all<{ holder: string; epoch: number; left: number }>(sql`SELECT holder, epoch, expires_at - ${DB_NOW} AS left FROM leases WHERE name = 'leader'`)[0];
  return r ? { holder: r.holder, epoch: r.epoch, expiresInMs: r.left } : undefined;
}

type Statement = ReturnType<Database["prepare"]>;
interface HeartbeatStatements {
  exists: Statement;
  update: Statement;
  insert: Statement;
  deleteGpus: Statement;
  insertGpu: Statement;
  deleteWeights: Statement;
  insertWeight: Statement;
}

export class Store implements StorePort {
  private readonly db: BunSQLiteDatabase<typeof schema>;
  readonly sqlite: Database;
  private touchStatement: { run(values: { at: number; name: string }): unknown } | undefined;
  /** Plans written since the changes table was last pruned. */
  private plansUnpruned = PRUNE_EVERY - 1;
  private hbStatements: HeartbeatStatements | undefined;
  constructor(opts: OpenOptions) {
    this.sqlite = new Database(opts.path, { create: true, strict: true });
    // WAL lets the CLI-facing reads run beside the reconciler's writes; the busy timeout
    // turns a brief lock into a wait instead of an error; foreign keys keep GPUs and
    // weights from outliving their node.
    this.sqlite.exec("PRAGMA journal_mode = WAL");
    this.sqlite.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(opts.busyTimeoutMs))}`);
    this.sqlite.exec("PRAGMA foreign_keys = ON");
    this.sqlite.exec("PRAGMA synchronous = NORMAL");
    this.db = drizzle({ client: this.sqlite, schema });
    this.migrate();
    // Tokens an older version kept in clear: digests from the first open on.
    this.db.transaction((tx) => tokenRows(tx));
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

  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    if (!join) return this.applyHeartbeats([hb], now).then(([r]) => ({ created: r!.created, taken: false }));
    return this.applyJoins([{ hb, join }], now).then(([r]) => r!);
  }

  applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    if (joins.length === 0) return Promise.resolve([]);
    return guarded(() => this.db.transaction((tx) => joins.map(({ hb, join }) => joinOne(tx, hb, now, join))));
  }

  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    if (nodes.length === 0) return Promise.resolve([]);
    return guarded(() =>
      this.db
        .select()
        .from(schema.gpus)
        .where(inArray(schema.gpus.node, [...nodes]))
        .orderBy(asc(schema.gpus.node), asc(schema.gpus.index))
        .all(),
    );
  }

  /**
   * The heartbeat's hot path, in bun:sqlite statements prepared once (drizzle builds its query
   * anew on every call, which at thousands of heartbeats a second is most of their cost).
   */
  private heartbeatStatements(): HeartbeatStatements {
    const q = (text: string) => this.sqlite.prepare(text);
    this.hbStatements ??= {
      exists: q("SELECT 1 AS x FROM nodes WHERE name = ?"),
      update: q("UPDATE nodes SET address = ?, labels = ?, fabrics = ?, last_heartbeat = ?, agent_version = ? WHERE name = ?"),
      insert: q("INSERT INTO nodes (name, address, labels, fabrics, admin_state, last_heartbeat, agent_version, registered_at, credential_hash) VALUES (?, ?, ?, ?, 'none', ?, ?, ?, NULL)"),
      deleteGpus: q("DELETE FROM gpus WHERE node = ?"),
      insertGpu: q("INSERT INTO gpus (node, idx, uuid, name, class, memory_mib, healthy, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
      deleteWeights: q("DELETE FROM weights WHERE node = ?"),
      insertWeight: q("INSERT INTO weights (node, model) VALUES (?, ?)"),
    };
    return this.hbStatements;
  }

  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    if (hbs.length === 0) return Promise.resolve([]);
    return guarded(() => {
      const st = this.heartbeatStatements();
      return this.sqlite
        .transaction(() =>
          hbs.map((hb) => {
            const labels = JSON.stringify(hb.labels);
            const fabrics = JSON.stringify(hb.fabrics);
            const existed = st.exists.get(hb.node) !== null;
            if (existed) st.update.run(hb.address, labels, fabrics, now, hb.agent_version, hb.node);
            else st.insert.run(hb.node, hb.address, labels, fabrics, now, hb.agent_version, now);
            st.deleteGpus.run(hb.node);
            for (const g of hb.gpus) st.insertGpu.run(hb.node, g.index, g.uuid, g.name, g.class, g.memory_mib, g.healthy ? 1 : 0, g.parent ?? null);
            st.deleteWeights.run(hb.node);
            for (const m of new Set(hb.models)) st.insertWeight.run(hb.node, m);
            return { created: !existed };
          }),
        )
        .immediate();
    });
  }

  snapshot(): Promise<Snapshot> {
    return guarded(() =>
      this.db.transaction(
        (tx) => ({
          nodes: tx.select(nodeColumns).from(schema.nodes).orderBy(asc(schema.nodes.name)).all(),
          gpus: tx.select().from(schema.gpus).orderBy(asc(schema.gpus.node), asc(schema.gpus.index)).all(),
          weights: tx.select().from(schema.weights).orderBy(asc(schema.weights.node), asc(schema.weights.model)).all(),
          models: tx.select().from(schema.models).orderBy(asc(schema.models.name)).all().map(toModel),
          replicas: tx.select().from(schema.replicas).orderBy(asc(schema.replicas.id)).all(),
          modelState: tx.select().from(schema.modelState).all(),
        }),
        { behavior: "deferred" },
      ),
    );
  }

  replicaSnapshot(): Promise<Pick<Snapshot, "replicas" | "modelState">> {
    return guarded(() =>
      this.db.transaction((tx) => ({ replicas: tx.select().from(schema.replicas).all(), modelState: tx.select().from(schema.modelState).all() }), { behavior: "deferred" }),
    );
  }

  // ---- nodes --------------------------------------------------------------------------

  nodeTrust(name: string): Promise<NodeTrust> {
    return guarded(() =>
      this.db.transaction(
        (tx) => {
          const row = tx.select({ h: schema.nodes.credentialHash, s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
          const allowed = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get();
          return { exists: !!row, hasCredential: !!row?.h, adminState: row?.s, allowedAddress: allowed?.a };
        },
        { behavior: "deferred" },
      ),
    );
  }

  nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return guarded(() => this.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.credentialHash, hash)).get()?.n);
  }

  credentialHashOf(name: string): Promise<string | undefined> {
    return guarded(() => this.db.select({ h: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, name)).get()?.h ?? undefined);
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    if (seen.length === 0) return Promise.resolve();
    return guarded(() =>
      // One prepared statement for every row: a second's heartbeats of a large fleet (hundreds
      // of rows) cost a loop of binds, not a query built per row.
      this.sqlite.transaction(() => {
        this.touchStatement ??= this.db.update(schema.nodes).set({ lastHeartbeat: sql`${sql.placeholder("at")}` }).where(eq(schema.nodes.name, sql.placeholder("name"))).prepare();
        for (const s of seen) this.touchStatement.run({ at: s.at, name: s.name });
      })(),
    );
  }

  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return guarded(() =>
      this.db
        .select({ node: schema.nodes.name, hash: schema.nodes.credentialHash })
        .from(schema.nodes)
        .all()
        .flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
    );
  }

  countNodes(): Promise<number> {
    return guarded(() => this.db.select({ n: count() }).from(schema.nodes).get()?.n ?? 0);
  }

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return guarded(() =>
      this.db.transaction((tx) => {
        const row = tx.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
        if (!row) return false;
        if (replicaIds.length > 0) tx.delete(schema.replicas).where(inArray(schema.replicas.id, replicaIds)).run();
        tx.delete(schema.nodes).where(eq(schema.nodes.name, name)).run();
        tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
        for (const e of events) tx.insert(schema.events).values(eventRecord(e, now)).run();
        return true;
      }),
    );
  }

  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    return guarded(() =>
      this.db.transaction((tx) => {
        const prev = tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).get()?.a;
        if (address === null) tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).run();
        else tx.insert(schema.nodeAddresses).values({ node: name, address, createdAt: now }).onConflictDoUpdate({ target: schema.nodeAddresses.node, set: { address, createdAt: now } }).run();
        return { previous: prev };
      }),
    );
  }

  listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    return guarded(() => this.db.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).orderBy(asc(schema.nodeAddresses.node)).all());
  }

  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    return guarded(() =>
      this.db.transaction((tx) => {
        const row = tx.select({ s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).get();
        if (!row) return { previous: undefined };
        tx.update(schema.nodes).set({ adminState: state }).where(eq(schema.nodes.name, name)).run();
        return { previous: row.s };
      }),
    );
  }

  // ---- catalog ------------------------------------------------------------------------

  models(): Promise<ModelRow[]> {
    return guarded(() => this.db.select().from(schema.models).orderBy(asc(schema.models.name)).all().map(toModel));
  }

  modelByName(name: string): Promise<ModelRow | undefined> {
    return guarded(() => {
      const r = this.db.select().from(schema.models).where(eq(schema.models.name, name)).get();
      return r && toModel(r);
    });
  }

  modelByAlias(alias: string): Promise<ModelRow | undefined> {
    return guarded(() => {
      const a = this.db.select().from(schema.modelAliases).where(eq(schema.modelAliases.alias, alias)).get();
      const r = a && this.db.select().from(schema.models).where(eq(schema.models.name, a.model)).get();
      return r ? toModel(r) : undefined;
    });
  }

  saveModels(models: ModelWrite[], now: number): Promise<void> {
    return guarded(() =>
      this.db.transaction((tx) => {
        for (const { spec, revision, created } of models) {
          if (created) tx.insert(schema.models).values({ name: spec.name, spec, revision, createdAt: now, updatedAt: now }).run();
          else {
            tx.update(schema.models).set({ spec, revision, updatedAt: now }).where(eq(schema.models.name, spec.name)).run();
            tx.delete(schema.modelAliases).where(eq(schema.modelAliases.model, spec.name)).run();
          }
          if (spec.aliases.length > 0) tx.insert(schema.modelAliases).values(spec.aliases.map((a) => ({ alias: a, model: spec.name }))).run();
          tx.insert(schema.modelState)
            .values({ model: spec.name })
            .onConflictDoUpdate({ target: schema.modelState.model, set: { failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null } })
            .run();
        }
      }),
    );
  }

  deleteModel(name: string): Promise<boolean> {
    return guarded(() =>
      this.db.transaction((tx) => {
        const row = tx.select({ n: schema.models.name }).from(schema.models).where(eq(schema.models.name, name)).get();
        if (!row) return false;
        tx.delete(schema.models).where(eq(schema.models.name, name)).run();
        tx.delete(schema.modelState).where(eq(schema.modelState.model, name)).run();
        return true;
      }),
    );
  }

  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    return guarded(() => {
      this.db.insert(schema.modelState).values({ model, ...patch }).onConflictDoUpdate({ target: schema.modelState.model, set: patch }).run();
    });
  }

  unpark(model: string): Promise<boolean> {
    return guarded(() =>
      this.db.transaction((tx) => {
        const st = tx.select().from(schema.modelState).where(eq(schema.modelState.model, model)).get();
        if (!st?.parked) return false;
        tx.update(schema.modelState).set({ parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null }).where(eq(schema.modelState.model, model)).run();
        return true;
      }),
    );
  }

  parkedModels(): Promise<string[]> {
    return guarded(() =>
      this.db
        .select({ m: schema.modelState.model })
        .from(schema.modelState)
        .where(eq(schema.modelState.parked, true))
        .all()
        .map((r) => r.m),
    );
  }

  // ---- replicas -----------------------------------------------------------------------

  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    return guarded(() =>
      this.db.transaction((tx) => {
        if (fence) {
          const held = tx.all<{ n: number }>(sql`SELECT count(*) AS n FROM leases WHERE name = 'leader' AND holder = ${fence.holder} AND epoch = ${fence.epoch} AND expires_at > ${DB_NOW}`)[0];
          if (!held || held.n !== 1) throw new FencedError(fence.epoch);
        }
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
        for (const e of plan.events) tx.insert(schema.events).values(eventRecord(e, now)).run();
        // The leader's plans keep the changes table short (every PRUNE_EVERY-th): the oldest rows go (a reader that far behind loads everything).
        if (++this.plansUnpruned >= PRUNE_EVERY) {
          this.plansUnpruned = 0;
          tx.run(sql`DELETE FROM changes WHERE seq <= (SELECT seq FROM change_counter WHERE id = 1) - ${CHANGES_KEPT}`);
        }
      }),
    );
  }

  changeCursor(): Promise<number> {
    return guarded(() => this.db.select({ seq: schema.changeCounter.seq }).from(schema.changeCounter).where(eq(schema.changeCounter.id, 1)).get()?.seq ?? 0);
  }

  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return guarded(() =>
      this.db.transaction(
        (tx) => {
          const changes = tx.select().from(schema.changes).where(gt(schema.changes.seq, after)).orderBy(asc(schema.changes.seq)).limit(limit).all();
          const k = changedKeys(changes);
          const some = <T>(keys: string[], read: () => T[]): T[] => (keys.length > 0 ? read() : []);
          return {
            changes,
            nodes: some(k.node, () => tx.select(nodeColumns).from(schema.nodes).where(inArray(schema.nodes.name, k.node)).all()),
            gpus: some(k.node, () => tx.select().from(schema.gpus).where(inArray(schema.gpus.node, k.node)).orderBy(asc(schema.gpus.node), asc(schema.gpus.index)).all()),
            weights: some(k.node, () => tx.select().from(schema.weights).where(inArray(schema.weights.node, k.node)).orderBy(asc(schema.weights.node), asc(schema.weights.model)).all()),
            credentials: some(k.node, () =>
              tx
                .select({ node: schema.nodes.name, hash: schema.nodes.credentialHash })
                .from(schema.nodes)
                .where(inArray(schema.nodes.name, k.node))
                .all()
                .flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
            ),
            addresses: some(k.node, () => tx.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(inArray(schema.nodeAddresses.node, k.node)).all()),
            models: some(k.model, () => tx.select().from(schema.models).where(inArray(schema.models.name, k.model)).all().map(toModel)),
            modelState: some(k.model, () => tx.select().from(schema.modelState).where(inArray(schema.modelState.model, k.model)).all()),
            replicas: some(k.replica, () => tx.select().from(schema.replicas).where(inArray(schema.replicas.id, k.replica)).all()),
            apiKeys: some(k.key, () => tx.select().from(schema.apiKeys).where(inArray(schema.apiKeys.name, k.key)).all()),
          };
        },
        { behavior: "deferred" },
      ),
    );
  }

  // ---- several control planes -------------------------------------------------------------

  acquireLease(holder: string, ttlMs: number, take = false): Promise<Lease> {
    const ttl = Math.max(1, Math.floor(ttlMs));
    const renew = take ? 0 : 1;
    return guarded(() =>
      this.db.transaction((tx) => {
        // Renewed by its holder while unexpired (same epoch); taken when free or lapsed, or asked to take (epoch + 1).
        tx.run(sql`INSERT INTO leases (name, holder, epoch, expires_at) VALUES ('leader', ${holder}, 1, ${DB_NOW} + ${ttl})
          ON CONFLICT (name) DO UPDATE SET
            epoch = CASE WHEN ${renew} = 1 AND leases.holder = excluded.holder AND leases.expires_at > ${DB_NOW} THEN leases.epoch ELSE leases.epoch + 1 END,
            holder = excluded.holder,
            expires_at = excluded.expires_at
          WHERE leases.holder = excluded.holder OR leases.expires_at <= ${DB_NOW}`);
        return readLeaseRow(tx)!;
      }, { behavior: "immediate" }),
    );
  }

  releaseLease(holder: string): Promise<void> {
    return guarded(() => {
      this.db.run(sql`UPDATE leases SET expires_at = ${DB_NOW} - 1 WHERE name = 'leader' AND holder = ${holder}`);
    });
  }

  readLease(): Promise<Lease | undefined> {
    return guarded(() => readLeaseRow(this.db));
  }

  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return guarded(() => {
      this.db.run(sql`INSERT INTO control_planes (name, admin_url, router_url, started_at, seen_at) VALUES (${cp.name}, ${cp.adminUrl}, ${cp.routerUrl}, ${cp.startedAt}, ${DB_NOW})
        ON CONFLICT (name) DO UPDATE SET admin_url = excluded.admin_url, router_url = excluded.router_url, started_at = excluded.started_at, seen_at = excluded.seen_at`);
    });
  }

  controlPlanes(): Promise<ControlPlaneRow[]> {
    return guarded(() =>
      this.db
        .all<{ name: string; admin_url: string; router_url: string; started_at: number; ago: number }>(sql`SELECT name, admin_url, router_url, started_at, ${DB_NOW} - seen_at AS ago FROM control_planes ORDER BY name`)
        .map((r) => ({ name: r.name, adminUrl: r.admin_url, routerUrl: r.router_url, startedAt: r.started_at, seenAgoMs: r.ago })),
    );
  }

  removeControlPlane(name: string): Promise<void> {
    return guarded(() => {
      this.db.delete(schema.controlPlanes).where(eq(schema.controlPlanes.name, name)).run();
      this.db.delete(schema.routerUsage).where(eq(schema.routerUsage.router, name)).run();
    });
  }

  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    const map = Object.fromEntries(lastUsed);
    return guarded(() => {
      this.db.run(sql`INSERT INTO router_usage (router, watching_since, last_used, reported_at) VALUES (${router}, ${watchingSince}, ${JSON.stringify(map)}, ${DB_NOW})
        ON CONFLICT (router) DO UPDATE SET watching_since = excluded.watching_since, last_used = excluded.last_used, reported_at = excluded.reported_at`);
    });
  }

  routerUsage(): Promise<RouterUsage[]> {
    return guarded(() =>
      this.db
        .all<{ router: string; watching_since: number; last_used: string; ago: number }>(sql`SELECT router, watching_since, last_used, ${DB_NOW} - reported_at AS ago FROM router_usage ORDER BY router`)
        .map((r) => ({ router: r.router, watchingSince: r.watching_since, lastUsed: new Map(Object.entries(JSON.parse(r.last_used) as Record<string, number>)), reportedAgoMs: r.ago })),
    );
  }

  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return guarded(() => {
      this.db.insert(schema.nodeReports).values({ node, report, at: now }).onConflictDoUpdate({ target: schema.nodeReports.node, set: { report, at: now } }).run();
    });
  }

  nodeReports(): Promise<NodeReportRow[]> {
    return guarded(() => this.db.select().from(schema.nodeReports).orderBy(asc(schema.nodeReports.node)).all());
  }

  /**
   * Another connection's commits, seen through PRAGMA data_version (it changes only when
   * another connection wrote): several control planes on one SQLite file on one machine. It
   * cannot tell what changed: "any", then "seen" (last-seen times may have moved too).
   */
  watch(fn: (change: StoreChange) => void, everyMs = 250): () => void {
    let last = this.dataVersion();
    const timer = setInterval(() => {
      let v: number;
      try {
        v = this.dataVersion();
      } catch {
        return;
      }
      if (v !== last) {
        last = v;
        fn("any");
        fn("seen");
      }
    }, everyMs);
    timer.unref();
    return () => clearInterval(timer);
  }

  private dataVersion(): number {
    return (this.sqlite.query("PRAGMA data_version").get() as { data_version: number }).data_version;
  }

  // ---- events -------------------------------------------------------------------------

  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return guarded(() => this.db.insert(schema.events).values(eventRecord(e, e.at)).returning({ id: schema.events.id }).get().id);
  }

  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return guarded(() => {
      const where = and(
        opts.afterId !== undefined ? gt(schema.events.id, opts.afterId) : undefined,
        opts.subject !== undefined ? eq(schema.events.subject, opts.subject) : undefined,
        opts.kind !== undefined ? eq(schema.events.kind, opts.kind) : undefined,
        opts.since !== undefined ? gte(schema.events.at, opts.since) : undefined,
      );
      if (opts.afterId !== undefined) return this.db.select().from(schema.events).where(where).orderBy(asc(schema.events.id)).limit(opts.limit).all().map(toEvent);
      return this.db.select().from(schema.events).where(where).orderBy(desc(schema.events.id)).limit(opts.limit).all().reverse().map(toEvent);
    });
  }

  // ---- API keys -----------------------------------------------------------------------

  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return guarded(() =>
      this.db.transaction((tx) => {
        if (tx.select({ n: schema.apiKeys.name }).from(schema.apiKeys).where(eq(schema.apiKeys.name, k.name)).get()) return false;
        tx.insert(schema.apiKeys).values(k).run();
        return true;
      }),
    );
  }

  listApiKeys(): Promise<ApiKeyRow[]> {
    return guarded(() => this.db.select().from(schema.apiKeys).orderBy(asc(schema.apiKeys.name)).all());
  }

  revokeApiKey(name: string): Promise<boolean> {
    return guarded(() => this.db.delete(schema.apiKeys).where(eq(schema.apiKeys.name, name)).returning({ n: schema.apiKeys.name }).all().length > 0);
  }

  /** SQLite's VACUUM INTO reads one snapshot while the server keeps running. */
  backupTo(path: string): Promise<void> {
    return guarded(() => {
      this.sqlite.query("VACUUM INTO ?").run(path);
    });
  }

  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return guarded(() => this.db.select({ name: schema.nodes.name, at: schema.nodes.lastHeartbeat }).from(schema.nodes).all());
  }

  sharedSecret(key: string, candidate: string): Promise<string> {
    return guarded(() =>
      this.db.transaction((tx) => {
        tx.insert(schema.meta).values({ key: `secret:${key}`, value: candidate }).onConflictDoNothing({ target: schema.meta.key }).run();
        return tx.select().from(schema.meta).where(eq(schema.meta.key, `secret:${key}`)).get()!.value;
      }),
    );
  }

  tokenDigests(): Promise<TokenDigests> {
    return guarded(() => this.db.transaction((tx) => digestsOf(tokenRows(tx))));
  }

  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return guarded(() =>
      this.db.transaction(
        (tx) => {
          const held = digestsOf(tokenRows(tx));
          const next = nextDigest(held[kind], sha256, mode);
          if (!next) return held;
          const value = JSON.stringify(next);
          tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } }).run();
          return { ...held, [kind]: next };
        },
        { behavior: "immediate" },
      ),
    );
  }

  // ---- SQLite only: the demo's marker, test fixtures, `llmgw backup` checks --------------

  getMeta(key: string): string | undefined {
    return this.db.select().from(schema.meta).where(eq(schema.meta.key, key)).get()?.value;
  }

  setMeta(key: string, value: string): void {
    this.db.insert(schema.meta).values({ key, value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } }).run();
  }

  /** A replica row written directly (fleet fixtures in tests and benchmarks). */
  insertReplica(r: typeof schema.replicas.$inferInsert): void {
    this.db.insert(schema.replicas).values(r).run();
  }

  /** Row counts per table. */
  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const t of ["nodes", "gpus", "weights", "models", "model_aliases", "replicas", "model_state", "events", "api_keys"]) {
      out[t] = (this.sqlite.query(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n;
    }
    return out;
  }
}

type Tx = Parameters<Parameters<BunSQLiteDatabase<typeof schema>["transaction"]>[0]>[0];

/** The shared tokens' meta rows, after replacing any token kept in clear by its digest (token-digests.ts). */
function tokenRows(tx: Tx): { key: string; value: string }[] {
  const rows = tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS)).all();
  const { put, remove } = clearTokenMigration(rows);
  if (put.length === 0 && remove.length === 0) return rows;
  for (const r of put) tx.insert(schema.meta).values(r).onConflictDoNothing({ target: schema.meta.key }).run();
  tx.delete(schema.meta).where(inArray(schema.meta.key, remove)).run();
  return tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS)).all();
}

/** One join inside a transaction: applyJoins' step. */
function joinOne(tx: Tx, hb: HeartbeatRequest, now: number, join: { credentialHash: string; pending: boolean }): { created: boolean; taken: boolean } {
  const existing = tx
    .select({ name: schema.nodes.name, credentialHash: schema.nodes.credentialHash })
    .from(schema.nodes)
    .where(eq(schema.nodes.name, hb.node))
    .get();
  if (existing) {
    if (joinRefused(existing.credentialHash, join.credentialHash)) return { created: false, taken: true };
    tx.update(schema.nodes)
      .set({ address: hb.address, labels: hb.labels, fabrics: hb.fabrics, lastHeartbeat: now, agentVersion: hb.agent_version, ...(existing.credentialHash !== join.credentialHash ? { credentialHash: join.credentialHash, registeredAt: now } : {}) })
      .where(eq(schema.nodes.name, hb.node))
      .run();
  } else {
    tx.insert(schema.nodes)
      .values({
        name: hb.node,
        address: hb.address,
        labels: hb.labels,
        fabrics: hb.fabrics,
        adminState: join.pending ? "pending" : "none",
        lastHeartbeat: now,
        agentVersion: hb.agent_version,
        registeredAt: now,
        credentialHash: join.credentialHash,
      })
      .run();
  }
  tx.delete(schema.gpus).where(eq(schema.gpus.node, hb.node)).run();
  if (hb.gpus.length > 0)
    tx.insert(schema.gpus)
      .values(hb.gpus.map((g) => ({ node: hb.node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent })))
      .run();
  tx.delete(schema.weights).where(eq(schema.weights.node, hb.node)).run();
  const models = [...new Set(hb.models)];
  if (models.length > 0) tx.insert(schema.weights).values(models.map((m) => ({ node: hb.node, model: m }))).run();
  return { created: !existing, taken: false };
}
