// The PostgreSQL dialect of the control plane's StorePort (src/control/store-port.ts), so that
// several control planes share one database (a Patroni cluster behind a multi-host URL). It
// persists and maps exactly as the SQLite dialect in ../index.ts does; the shared contract suite
// (test/contract/store.ts) holds the two to one behaviour.
//
// - Driver: postgres-js (the only one that follows a multi-host URL to the primary, with
//   `target_session_attrs=primary`), through drizzle-orm/postgres-js.
// - Migrations run at open, from the binary (../migrations.ts), in one transaction under an
//   advisory lock, so control planes starting together do not race; drizzle's own table records them.
// - Every committing write sends pg_notify('llmgw_changes', {"from": <this instance>, "change"})
//   in its transaction; watch() LISTENs on a connection of its own and ignores its own instance.
// - Failures: a lost or refused connection, a standby's read-only answer (after a failover) and
//   the like reject with StoreUnavailableError naming host:port (./errors.ts). Reads and
//   idempotent writes are tried again a few times; a call that may have been applied when its
//   connection broke is tried again only when doing it twice is harmless (never a plan).
// - Deadline: every call, its tries included, ends within queryTimeoutMs (`serve
//   --db-query-timeout`). A server or network that goes silent mid-failover sends no error, and
//   postgres-js would wait for as long as the socket stays open, holding the call (and a `status`
//   behind it). Past the deadline the call fails as a store failure and the pool it ran on is
//   dropped; the server is given the same limit (statement_timeout and
//   idle_in_transaction_session_timeout), so it lets go of what the store let go of.
// - A connection closed mid-transaction (a failover terminating backends, a fast shutdown, the
//   server's idle limit, a cut) fails that call as any lost connection does, and nothing more:
//   transactions run through ./transaction.ts, so postgres-js never writes its ROLLBACK to the
//   closed socket (an uncaught TypeError).
// - Times of leases and control planes are the database's clock.

import { randomUUID } from "node:crypto";
import { and, asc, count, desc, eq, gt, gte, inArray, sql, type SQL } from "drizzle-orm";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import type { JoinWrite, StorePort } from "../../control/store-port";
import { type ApiKeyRow, type ControlPlaneRecord, type ControlPlaneRow, type EventRow, type Fence, type GpuRow, type Lease, type ModelRow, type ModelStateRow, type ModelWrite, type NewEvent, type NodeReportRow, type NodeRow, type NodeTrust, type PlanWrite, type ReplicaRow, type RouterUsage, type SharedTokenKind, type Snapshot, type StoreChange, type ChangeRead, type TokenDigests, CHANGES_KEPT, PRUNE_EVERY, changedKeys } from "../../control/types";
import { FencedError } from "../../control/errors";
import type { ModelSpec } from "../../protocol/catalog";
import type { HeartbeatRequest } from "../../protocol/heartbeat";
import type { AdminState } from "../../protocol/views";
import { joinRefused } from "../../control/admission";
import { embeddedMigrations } from "../migrations";
import { DIGEST_KEYS, TOKEN_KEYS, clearTokenMigration, digestsOf, nextDigest } from "../token-digests";
import { PgDeadlineError, classify, hostsOf } from "./errors";
import { txBody } from "./transaction";
import * as schema from "./schema";

export const CHANNEL = "llmgw_changes";
/** pg_advisory_xact_lock key taken while migrating ("llmgw" in ASCII). */
const MIGRATION_LOCK = 0x6c6c6d6777;
/** The database's own clock, ms since epoch (clock_timestamp: the moment of the call, not of the transaction's start). */
const DB_NOW = sql.raw("(extract(epoch from clock_timestamp()) * 1000)::bigint");

type Db = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];
type Sql = postgres.Sql<Record<string, never>>;
type TxSql = postgres.TransactionSql<Record<string, never>>;

/** How a call may be tried again after a failure (see the file's head). */
type Retry = "read" | "idempotent" | "once";

export interface PgStoreOptions {
  /** postgres://user[:password]@host[:port][,host2[:port]…]/database[?target_session_attrs=primary] */
  url: string;
  /** Connections in the pool (default 10). */
  max?: number;
  /** Seconds a connection attempt may take (default 5). */
  connectTimeoutS?: number;
  /** Further tries of a call that may be tried again (default 3). */
  retries?: number;
  /** Names this store in its notifications (default a random UUID). */
  instanceId?: string;
  /** How long one call may take, its tries included, before it fails as the store being unavailable (`serve --db-query-timeout`). */
  queryTimeoutMs: number;
  /** How long the server lets a transaction of this store sit idle before it ends the session (default queryTimeoutMs). */
  idleInTransactionTimeoutMs?: number;
}

/** Migrations may wait for another control plane's (the advisory lock) and alter tables. */
const MIGRATION_TIMEOUT_MS = 120_000;

type ModelRecord = typeof schema.models.$inferSelect;
const toModel = (r: ModelRecord): ModelRow => ({ name: r.name, spec: r.spec as ModelSpec, revision: r.revision, createdAt: r.createdAt, updatedAt: r.updatedAt });
const eventRecord = (e: NewEvent, at: number) => ({ at, kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null });
const toEvent = (r: typeof schema.events.$inferSelect): EventRow => ({ id: r.id, at: r.at, kind: r.kind, subject: r.subject, message: r.message, data: r.data });
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** fn's answer, or PgDeadlineError (naming deadlineMs) once leftMs have passed without one. */
function within<T>(fn: () => Promise<T>, leftMs: number, deadlineMs: number): Promise<T> {
  if (!(leftMs > 0)) return Promise.reject(new PgDeadlineError(deadlineMs));
  const answer = fn();
  // An answer after the deadline is no one's: it must not surface as an unhandled rejection.
  answer.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new PgDeadlineError(deadlineMs)), leftMs)));
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}

/** Text ordered by bytes, as SQLite orders it, whatever the database's collation. */
const byBytes = (col: SQL.Aliased | Parameters<typeof asc>[0]) => sql`${col} COLLATE "C"`;

// The snapshot's queries, written out: one round trip for all of them, rows shaped as the domain types.
const SNAPSHOT_SQL = {
  nodes: `SELECT name, address, labels, fabrics, admin_state AS "adminState", last_heartbeat AS "lastHeartbeat", agent_version AS "agentVersion", registered_at AS "registeredAt" FROM nodes ORDER BY name COLLATE "C"`,
  gpus: `SELECT node, idx AS "index", uuid, name, class, memory_mib AS "memoryMib", healthy, parent FROM gpus ORDER BY node COLLATE "C", idx`,
  weights: `SELECT node, model FROM weights ORDER BY node COLLATE "C", model COLLATE "C"`,
  models: `SELECT name, spec, revision, created_at AS "createdAt", updated_at AS "updatedAt" FROM models ORDER BY name COLLATE "C"`,
  replicas: `SELECT id, model, profile, state, shards, port, endpoint, failures, error, created_at AS "createdAt", updated_at AS "updatedAt", ready_at AS "readyAt" FROM replicas ORDER BY id COLLATE "C"`,
  modelState: `SELECT model, failures, crashes, parked, reason, last_failure_at AS "lastFailureAt", last_requested_at AS "lastRequestedAt", scale_target AS "scaleTarget", unplaceable_reason AS "unplaceableReason" FROM model_state ORDER BY model COLLATE "C"`,
} as const;

// changesSince's queries: the snapshot's columns, of the rows the changes name ($1, a text array).
const CHANGE_SQL = {
  changes: `SELECT seq, kind, key FROM changes WHERE seq > $1 ORDER BY seq LIMIT $2`,
  nodes: `SELECT name, address, labels, fabrics, admin_state AS "adminState", last_heartbeat AS "lastHeartbeat", agent_version AS "agentVersion", registered_at AS "registeredAt" FROM nodes WHERE name = ANY($1::text[])`,
  gpus: `SELECT node, idx AS "index", uuid, name, class, memory_mib AS "memoryMib", healthy, parent FROM gpus WHERE node = ANY($1::text[]) ORDER BY node COLLATE "C", idx`,
  weights: `SELECT node, model FROM weights WHERE node = ANY($1::text[]) ORDER BY node COLLATE "C", model COLLATE "C"`,
  credentials: `SELECT name AS node, credential_hash AS hash FROM nodes WHERE name = ANY($1::text[]) AND credential_hash IS NOT NULL`,
  addresses: `SELECT node, address FROM node_addresses WHERE node = ANY($1::text[])`,
  models: `SELECT name, spec, revision, created_at AS "createdAt", updated_at AS "updatedAt" FROM models WHERE name = ANY($1::text[])`,
  modelState: `SELECT model, failures, crashes, parked, reason, last_failure_at AS "lastFailureAt", last_requested_at AS "lastRequestedAt", scale_target AS "scaleTarget", unplaceable_reason AS "unplaceableReason" FROM model_state WHERE model = ANY($1::text[])`,
  replicas: `SELECT id, model, profile, state, shards, port, endpoint, failures, error, created_at AS "createdAt", updated_at AS "updatedAt", ready_at AS "readyAt" FROM replicas WHERE id = ANY($1::text[])`,
  apiKeys: `SELECT name, hash, pool, created_at AS "createdAt" FROM api_keys WHERE name = ANY($1::text[])`,
} as const;

// A group of heartbeats' inventory in one statement (after the change counter's lock, applyHeartbeats), rows
// handed over as JSON text: the nodes upserted; each node's GPUs and weights upserted (a GPU row
// that says the same is left alone: no new row version) and the ones it no longer reports
// deleted (rows apart from those upserted, so no two parts touch one row).
const HEARTBEATS_SQL = `WITH
  v AS (SELECT * FROM jsonb_to_recordset($1::text::jsonb) AS v(name text, address text, labels jsonb, fabrics jsonb, agent_version text)),
  g AS (SELECT * FROM jsonb_to_recordset($3::text::jsonb) AS g(node text, idx integer, uuid text, name text, class text, memory_mib integer, healthy boolean, parent text)),
  w AS (SELECT * FROM jsonb_to_recordset($4::text::jsonb) AS w(node text, model text)),
  up AS (
    INSERT INTO nodes (name, address, labels, fabrics, admin_state, last_heartbeat, agent_version, registered_at)
    SELECT v.name, v.address, v.labels, v.fabrics, 'none', $2::bigint, v.agent_version, $2::bigint FROM v
    ON CONFLICT (name) DO UPDATE SET address = excluded.address, labels = excluded.labels, fabrics = excluded.fabrics, last_heartbeat = excluded.last_heartbeat, agent_version = excluded.agent_version
    RETURNING name, (xmax = 0) AS inserted),
  dg AS (DELETE FROM gpus USING v WHERE gpus.node = v.name AND NOT EXISTS (SELECT 1 FROM g WHERE g.node = gpus.node AND g.idx = gpus.idx)),
  ig AS (
    INSERT INTO gpus (node, idx, uuid, name, class, memory_mib, healthy, parent) SELECT g.node, g.idx, g.uuid, g.name, g.class, g.memory_mib, g.healthy, g.parent FROM g
    ON CONFLICT (node, idx) DO UPDATE SET uuid = excluded.uuid, name = excluded.name, class = excluded.class, memory_mib = excluded.memory_mib, healthy = excluded.healthy, parent = excluded.parent
    WHERE (gpus.uuid, gpus.name, gpus.class, gpus.memory_mib, gpus.healthy, gpus.parent) IS DISTINCT FROM (excluded.uuid, excluded.name, excluded.class, excluded.memory_mib, excluded.healthy, excluded.parent)),
  dw AS (DELETE FROM weights USING v WHERE weights.node = v.name AND NOT EXISTS (SELECT 1 FROM w WHERE w.node = weights.node AND w.model = weights.model)),
  iw AS (INSERT INTO weights (node, model) SELECT w.node, w.model FROM w ON CONFLICT DO NOTHING)
SELECT up.name, up.inserted FROM up CROSS JOIN (SELECT pg_notify($5, $6)) AS n`;

/** A multi-host URL without target_session_attrs reaches whichever member is first: ask for the primary. */
export function withPrimaryTarget(url: string): string {
  const authority = url.replace(/^postgres(ql)?:\/\//i, "").split(/[/?]/)[0] ?? "";
  if (!authority.includes(",") || /[?&]target_session_attrs=/.test(url)) return url;
  return `${url}${url.includes("?") ? "&" : "?"}target_session_attrs=primary`;
}

export class PgStore implements StorePort {
  readonly instanceId: string;
  /** Where the database is, for messages: host:port, never a password. */
  readonly where: string;
  private readonly url: string;
  private readonly opts: PgStoreOptions;
  private readonly retries: number;
  private readonly queryTimeoutMs: number;
  private readonly idleInTransactionTimeoutMs: number;
  private client: Sql;
  private db: Db;
  private readonly payload: Record<StoreChange, string>;
  private closed = false;
  // watch(): one LISTEN connection for every watcher, kept up by listenLoop().
  private readonly watchers = new Set<(change: StoreChange) => void>();
  private listener: Sql | undefined;
  private listening = false;
  private listenLoopRunning = false;
  /** Plans written since the changes table was last pruned. */
  private plansUnpruned = PRUNE_EVERY - 1;

  private constructor(opts: PgStoreOptions) {
    this.opts = opts;
    this.url = withPrimaryTarget(opts.url);
    this.where = hostsOf(opts.url);
    this.retries = opts.retries ?? 3;
    this.queryTimeoutMs = Math.max(1, Math.floor(opts.queryTimeoutMs));
    this.idleInTransactionTimeoutMs = Math.max(1, Math.floor(opts.idleInTransactionTimeoutMs ?? this.queryTimeoutMs));
    this.instanceId = opts.instanceId ?? randomUUID();
    this.payload = {
      seen: JSON.stringify({ from: this.instanceId, change: "seen" }),
      any: JSON.stringify({ from: this.instanceId, change: "any" }),
      meta: JSON.stringify({ from: this.instanceId, change: "meta" }),
      reports: JSON.stringify({ from: this.instanceId, change: "reports" }),
    };
    this.client = this.connect();
    this.db = drizzle({ client: this.client, schema });
  }

  /** Connects and migrates; rejects with StoreUnavailableError when the server cannot be reached. */
  static async open(opts: PgStoreOptions): Promise<PgStore> {
    const store = new PgStore(opts);
    try {
      await store.call("idempotent", () => store.migrate(), MIGRATION_TIMEOUT_MS);
    } catch (e) {
      await store.close();
      throw e;
    }
    return store;
  }

  private connect(extra: Partial<postgres.Options<Record<string, never>>> = {}): Sql {
    return postgres(this.url, {
      max: this.opts.max ?? 10,
      connect_timeout: this.opts.connectTimeoutS ?? 5,
      onnotice: () => {},
      // ms times and ids are bigint: read them as JS numbers (exact below 2^53).
      types: { bigint: { to: 20, from: [20], serialize: (x: number) => String(x), parse: (x: string) => Number(x) } },
      // The server ends what the store's deadline ended: a statement, and a transaction left
      // open with its row locks (the change counter's holds every other control plane's writes)
      // by a store that stopped talking to it mid-way (a partition). The store's transactions send
      // their statements back to back: one idle for as long as a whole call may take is stalled.
      connection: { application_name: "llmgw", statement_timeout: this.queryTimeoutMs, idle_in_transaction_session_timeout: this.idleInTransactionTimeoutMs },
      ...extra,
    }) as unknown as Sql;
  }

  /** Applies the embedded migrations not yet applied, in one transaction, one control plane at a time. */
  private async migrate(): Promise<void> {
    const migrations = embeddedMigrations("pg");
    await this.begin("", async (t) => {
      // Waiting for another control plane's migration is no stuck statement.
      await t.unsafe(`SET LOCAL statement_timeout = ${MIGRATION_TIMEOUT_MS}`);
      await t`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
      // drizzle's own bookkeeping (as its pg migrator keeps it), so drizzle-kit agrees on what is applied.
      await t.unsafe(`CREATE SCHEMA IF NOT EXISTS drizzle`);
      await t.unsafe(`CREATE TABLE IF NOT EXISTS drizzle.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`);
      const last = (await t.unsafe(`SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 1`))[0] as { created_at: number | string } | undefined;
      for (const m of migrations) {
        if (last && Number(last.created_at) >= m.folderMillis) continue;
        for (const stmt of m.sql) if (stmt.trim() !== "") await t.unsafe(stmt);
        await t`INSERT INTO drizzle.__drizzle_migrations (hash, created_at) VALUES (${m.hash}, ${m.folderMillis})`;
      }
      // Tokens an older version kept in clear: digests from the first open on.
      const rows = (await t`SELECT key, value FROM meta WHERE key = ANY(${TOKEN_KEYS}::text[])`) as unknown as { key: string; value: string }[];
      const { put, remove } = clearTokenMigration(rows);
      for (const r of put) await t`INSERT INTO meta (key, value) VALUES (${r.key}, ${r.value}) ON CONFLICT (key) DO NOTHING`;
      if (remove.length > 0) await t`DELETE FROM meta WHERE key = ANY(${remove}::text[])`;
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.watchers.clear();
    const l = this.listener;
    this.listener = undefined;
    await Promise.all([this.client.end({ timeout: 2 }), l?.end({ timeout: 1 })]);
  }

  /**
   * Runs fn, turning PostgreSQL's failures into StoreUnavailableError and trying again what may
   * be, all within deadlineMs: past it the call fails as the store being unavailable.
   */
  private async call<T>(retry: Retry, fn: () => Promise<T>, deadlineMs = this.queryTimeoutMs): Promise<T> {
    const end = performance.now() + deadlineMs;
    for (let attempt = 0; ; attempt++) {
      const pool = this.client;
      try {
        return await within(fn, end - performance.now(), deadlineMs);
      } catch (e) {
        const f = classify(e, this.where);
        if (!f) throw e;
        // Once per pool: calls that ran on it fail together, and a later one must not drop the fresh pool.
        if ((f.standby || f.stuck) && this.client === pool) this.reconnect(f.stuck ? this.queryTimeoutMs / 1000 : 5);
        const pause = 30 * 3 ** attempt;
        const again = !this.closed && attempt < this.retries && (f.kind !== "maybe applied" || retry !== "once") && performance.now() + pause < end;
        if (!again) throw f.error;
        await sleep(pause);
      }
    }
  }

  /**
   * A pool whose connections reached a standby (a failover), or one stuck without an answer:
   * start a new one, which finds the primary. The old one's calls get graceS to finish, then its
   * connections are closed: a stuck one's get a deadline, so each call still under way on it
   * ends by its own deadline, saying so, rather than by another's.
   */
  private reconnect(graceS = 5): void {
    const old = this.client;
    this.client = this.connect();
    this.db = drizzle({ client: this.client, schema });
    void old.end({ timeout: graceS }).catch(() => {});
  }

  /** body in one transaction on the pool (mode: "ISOLATION LEVEL …"), run so that a connection lost mid-way fails the call and nothing more (./transaction.ts). */
  private begin<T>(mode: string, body: (t: TxSql) => Promise<T>): Promise<T> {
    return this.client.begin(mode, txBody(body)) as Promise<T>;
  }

  /** A committing write: fn in one transaction that also announces the change to other control planes. */
  private write<T>(retry: Retry, change: StoreChange, fn: (tx: Tx) => Promise<T>): Promise<T> {
    return this.call(retry, () =>
      this.db.transaction(
        txBody(async (tx: Tx) => {
          // What the in-memory image holds may change: the change counter first (its row lock, held
          // to the commit, orders the triggers' seqs as the commits), before any other row's lock.
          if (change === "any") await tx.execute(sql`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`);
          const r = await fn(tx);
          await tx.execute(sql`SELECT pg_notify(${CHANNEL}, ${this.payload[change]})`);
          return r;
        }),
      ),
    );
  }

  // ---- reads of everything --------------------------------------------------------------

  snapshot(): Promise<Snapshot> {
    return this.call("read", () =>
      this.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const q = (text: string) => t.unsafe(text, [], { prepare: true });
        // Issued together: postgres-js pipelines them on the transaction's connection.
        const [nodes, gpus, weights, models, replicas, modelState] = await Promise.all([
          q(SNAPSHOT_SQL.nodes),
          q(SNAPSHOT_SQL.gpus),
          q(SNAPSHOT_SQL.weights),
          q(SNAPSHOT_SQL.models),
          q(SNAPSHOT_SQL.replicas),
          q(SNAPSHOT_SQL.modelState),
        ]);
        return {
          nodes: [...nodes] as unknown as NodeRow[],
          gpus: [...gpus] as unknown as GpuRow[],
          weights: [...weights] as unknown as { node: string; model: string }[],
          models: [...models] as unknown as ModelRow[],
          replicas: [...replicas] as unknown as ReplicaRow[],
          modelState: [...modelState] as unknown as ModelStateRow[],
        };
      }) as Promise<Snapshot>,
    );
  }

  changeCursor(): Promise<number> {
    return this.call("read", async () => Number((await this.db.select({ seq: schema.changeCounter.seq }).from(schema.changeCounter).where(eq(schema.changeCounter.id, 1)))[0]?.seq ?? 0));
  }

  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return this.call("read", () =>
      this.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const rows = await t.unsafe(CHANGE_SQL.changes, [after, limit], { prepare: true });
        const changes = rows.map((r) => ({ seq: Number(r.seq), kind: String(r.kind), key: String(r.key) }));
        const k = changedKeys(changes);
        const q = (text: string, keys: string[]) => (keys.length > 0 ? t.unsafe(text, [keys], { prepare: true }).then((r) => [...r]) : Promise.resolve([]));
        const [nodes, gpus, weights, credentials, addresses, models, modelState, replicas, apiKeys] = await Promise.all([
          q(CHANGE_SQL.nodes, k.node),
          q(CHANGE_SQL.gpus, k.node),
          q(CHANGE_SQL.weights, k.node),
          q(CHANGE_SQL.credentials, k.node),
          q(CHANGE_SQL.addresses, k.node),
          q(CHANGE_SQL.models, k.model),
          q(CHANGE_SQL.modelState, k.model),
          q(CHANGE_SQL.replicas, k.replica),
          q(CHANGE_SQL.apiKeys, k.key),
        ]);
        return { changes, nodes, gpus, weights, credentials, addresses, models, modelState, replicas, apiKeys } as unknown as ChangeRead;
      }) as Promise<ChangeRead>,
    );
  }

  replicaSnapshot(): Promise<Pick<Snapshot, "replicas" | "modelState">> {
    return this.call("read", () =>
      this.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const [replicas, modelState] = await Promise.all([t.unsafe(SNAPSHOT_SQL.replicas, [], { prepare: true }), t.unsafe(SNAPSHOT_SQL.modelState, [], { prepare: true })]);
        return { replicas: [...replicas] as unknown as ReplicaRow[], modelState: [...modelState] as unknown as ModelStateRow[] };
      }) as Promise<Pick<Snapshot, "replicas" | "modelState">>,
    );
  }

  // ---- nodes --------------------------------------------------------------------------

  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    // Without a join, as part of a group (doing it twice is doing it once); with one, a second try would find the credential it gave.
    if (!join) return this.applyHeartbeats([hb], now).then(([r]) => ({ created: r!.created, taken: false }));
    return this.write("once", "any", (tx) => joinOne(tx, hb, now, join));
  }

  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    if (nodes.length === 0) return Promise.resolve([]);
    return this.call("read", async () => [...(await this.client.unsafe(CHANGE_SQL.gpus, [[...nodes]] as never[], { prepare: true }))] as unknown as GpuRow[]);
  }

  /**
   * The joins in one transaction of a few statements: their node rows locked (in name order),
   * the refused ones set aside, the inventory of the rest written as a group of heartbeats is
   * (HEARTBEATS_SQL), then their credentials. A row another control plane inserted meanwhile
   * (absent when locked, present when upserted) rolls the group back, and each join is then
   * written alone, as applyHeartbeat checks it.
   */
  async applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    if (joins.length === 0) return [];
    if (joins.length === 1 || new Set(joins.map((j) => j.hb.node)).size < joins.length) {
      // A node named twice: one after the other, as each would be alone.
      return this.write("once", "any", async (tx) => {
        const out: { created: boolean; taken: boolean }[] = [];
        for (const { hb, join } of joins) out.push(await joinOne(tx, hb, now, join));
        return out;
      });
    }
    try {
      return await this.call("once", () => this.joinGroup(joins, now));
    } catch (e) {
      if (!(e instanceof RaceLost)) throw e;
      const out: { created: boolean; taken: boolean }[] = [];
      for (const { hb, join } of joins) out.push(await this.applyHeartbeat(hb, now, join));
      return out;
    }
  }

  private joinGroup(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    const names = joins.map((j) => j.hb.node).sort(byteOrder);
    return this.begin("", async (t) => {
      await t.unsafe(`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`, [], { prepare: true });
      const held = await t.unsafe(`SELECT name, credential_hash AS hash FROM nodes WHERE name = ANY($1::text[]) ORDER BY name COLLATE "C" FOR UPDATE`, [names] as never[], { prepare: true });
      const stored = new Map<string, string | null>([...held].map((r) => [r.name as string, (r.hash as string | null) ?? null]));
      const taken = new Set(joins.filter((j) => stored.has(j.hb.node) && joinRefused(stored.get(j.hb.node) ?? null, j.join.credentialHash)).map((j) => j.hb.node));
      const go = joins.filter((j) => !taken.has(j.hb.node)).sort((a, b) => byteOrder(a.hb.node, b.hb.node));
      const inserted = new Set<string>();
      if (go.length > 0) {
        const { nodes, gpus, weights } = inventoryRows(go.map((j) => j.hb));
        const upserted = await t.unsafe(HEARTBEATS_SQL, [nodes, now, gpus, weights, CHANNEL, this.payload.any] as never[], { prepare: true });
        for (const r of upserted) if (r.inserted === true) inserted.add(r.name as string);
        // Absent when locked, yet not inserted by us: another control plane's join of that name.
        for (const j of go) if (!stored.has(j.hb.node) && !inserted.has(j.hb.node)) throw new RaceLost();
        const creds = JSON.stringify(go.map((j) => ({ name: j.hb.node, hash: j.join.credentialHash, pending: inserted.has(j.hb.node) && j.join.pending })));
        await t.unsafe(
          `UPDATE nodes SET credential_hash = v.hash,
             registered_at = CASE WHEN nodes.credential_hash IS DISTINCT FROM v.hash THEN $2::bigint ELSE nodes.registered_at END,
             admin_state = CASE WHEN v.pending THEN 'pending' ELSE nodes.admin_state END
           FROM jsonb_to_recordset($1::text::jsonb) AS v(name text, hash text, pending boolean) WHERE nodes.name = v.name`,
          [creds, now] as never[],
          { prepare: true },
        );
      }
      return joins.map((j) => (taken.has(j.hb.node) ? { created: false, taken: true } : { created: inserted.has(j.hb.node), taken: false }));
    }) as Promise<{ created: boolean; taken: boolean }[]>;
  }

  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    if (hbs.length === 0) return Promise.resolve([]);
    // Written as each node's last heartbeat says (the earlier ones are overwritten in full), in
    // name order, so that two control planes writing the same nodes never wait on each other in a circle.
    const last = new Map<string, HeartbeatRequest>();
    for (const hb of hbs) last.set(hb.node, hb);
    // Byte order, as COLLATE "C" sorts (touchNodes locks in that order too).
    const names = [...last.keys()].sort(byteOrder);
    const { nodes, gpus, weights } = inventoryRows(names.map((n) => last.get(n)!));
    // Doing it twice is doing it once.
    return this.call("idempotent", async () => {
      // The change counter's row first, as every write of what the in-memory image holds takes
      // it (write()): the triggers of a node whose inventory changed take it too, and taken after
      // the node rows it could close a circle with a plan holding it and waiting for one of them.
      const upserted = await this.begin("", async (t) => {
        await t.unsafe(`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`, [], { prepare: true });
        return t.unsafe(HEARTBEATS_SQL, [nodes, now, gpus, weights, CHANNEL, this.payload.any] as never[], { prepare: true });
      });
      const inserted = new Set([...upserted].filter((r) => r.inserted === true).map((r) => r.name as string));
      const first = new Set<string>();
      return hbs.map((hb) => {
        const created = inserted.has(hb.node) && !first.has(hb.node);
        first.add(hb.node);
        return { created };
      });
    });
  }

  nodeTrust(name: string): Promise<NodeTrust> {
    return this.call("read", async () => {
      const [rows, allowed] = await Promise.all([
        this.db.select({ h: schema.nodes.credentialHash, s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)),
        this.db.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)),
      ]);
      const row = rows[0];
      return { exists: !!row, hasCredential: !!row?.h, adminState: row?.s, allowedAddress: allowed[0]?.a };
    });
  }

  nodeByCredentialHash(hash: string): Promise<string | undefined> {
    return this.call("read", async () => (await this.db.select({ n: schema.nodes.name }).from(schema.nodes).where(eq(schema.nodes.credentialHash, hash)))[0]?.n);
  }

  credentialHashOf(name: string): Promise<string | undefined> {
    return this.call("read", async () => (await this.db.select({ h: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, name)))[0]?.h ?? undefined);
  }

  countNodes(): Promise<number> {
    return this.call("read", async () => (await this.db.select({ n: count() }).from(schema.nodes))[0]?.n ?? 0);
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    if (seen.length === 0) return Promise.resolve();
    // One statement for the whole batch, its rows handed over as one JSON document. The rows are
    // locked first, in name order, as a group of heartbeats locks them (applyHeartbeats): two
    // writers of many node rows never wait on each other in a circle.
    const rows = JSON.stringify(seen);
    return this.write("idempotent", "seen", async (tx) => {
      await tx.execute(sql`SELECT 1 FROM nodes WHERE name IN (SELECT v.name FROM jsonb_to_recordset(${rows}::jsonb) AS v(name text)) ORDER BY name COLLATE "C" FOR UPDATE`);
      await tx.execute(sql`UPDATE nodes SET last_heartbeat = v.at FROM jsonb_to_recordset(${rows}::jsonb) AS v(name text, at bigint) WHERE nodes.name = v.name`);
    });
  }

  nodeCredentials(): Promise<{ node: string; hash: string }[]> {
    return this.call("read", async () =>
      (await this.db.select({ node: schema.nodes.name, hash: schema.nodes.credentialHash }).from(schema.nodes)).flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
    );
  }

  deleteNode(name: string, replicaIds: string[], events: NewEvent[], now: number): Promise<boolean> {
    return this.write("once", "any", async (tx) => {
      const gone = await tx.delete(schema.nodes).where(eq(schema.nodes.name, name)).returning({ n: schema.nodes.name });
      if (gone.length === 0) return false;
      if (replicaIds.length > 0) await tx.delete(schema.replicas).where(inArray(schema.replicas.id, replicaIds));
      await tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name));
      if (events.length > 0) await tx.insert(schema.events).values(events.map((e) => eventRecord(e, now)));
      return true;
    });
  }

  setAllowedAddress(name: string, address: string | null, now: number): Promise<{ previous: string | undefined }> {
    return this.write("once", "any", async (tx) => {
      const prev = (await tx.select({ a: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name)).for("update"))[0]?.a;
      if (address === null) await tx.delete(schema.nodeAddresses).where(eq(schema.nodeAddresses.node, name));
      else await tx.insert(schema.nodeAddresses).values({ node: name, address, createdAt: now }).onConflictDoUpdate({ target: schema.nodeAddresses.node, set: { address, createdAt: now } });
      return { previous: prev };
    });
  }

  listAllowedAddresses(): Promise<{ node: string; address: string }[]> {
    return this.call("read", () =>
      this.db.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).orderBy(byBytes(schema.nodeAddresses.node)),
    );
  }

  setAdminState(name: string, state: AdminState): Promise<{ previous: AdminState | undefined }> {
    return this.write("once", "any", async (tx) => {
      const row = (await tx.select({ s: schema.nodes.adminState }).from(schema.nodes).where(eq(schema.nodes.name, name)).for("update"))[0];
      if (!row) return { previous: undefined };
      await tx.update(schema.nodes).set({ adminState: state }).where(eq(schema.nodes.name, name));
      return { previous: row.s };
    });
  }

  // ---- catalog ------------------------------------------------------------------------

  models(): Promise<ModelRow[]> {
    return this.call("read", async () => (await this.db.select().from(schema.models).orderBy(byBytes(schema.models.name))).map(toModel));
  }

  modelByName(name: string): Promise<ModelRow | undefined> {
    return this.call("read", async () => {
      const r = (await this.db.select().from(schema.models).where(eq(schema.models.name, name)))[0];
      return r && toModel(r);
    });
  }

  modelByAlias(alias: string): Promise<ModelRow | undefined> {
    return this.call("read", async () => {
      const r = (
        await this.db
          .select({ m: schema.models })
          .from(schema.modelAliases)
          .innerJoin(schema.models, eq(schema.models.name, schema.modelAliases.model))
          .where(eq(schema.modelAliases.alias, alias))
      )[0];
      return r ? toModel(r.m) : undefined;
    });
  }

  saveModels(models: ModelWrite[], now: number): Promise<void> {
    return this.write("once", "any", async (tx) => {
      if (models.length === 0) return;
      const fresh = models.filter((m) => m.created).map(({ spec, revision }) => ({ name: spec.name, spec, revision }));
      const changed = models.filter((m) => !m.created).map(({ spec, revision }) => ({ name: spec.name, spec, revision }));
      // A catalog entry's rows in a few statements for the whole catalog (see applyPlan).
      if (fresh.length > 0)
        await tx.execute(sql`INSERT INTO models (name, spec, revision, created_at, updated_at) SELECT v.name, v.spec, v.revision, ${now}::bigint, ${now}::bigint FROM ${recordset(fresh, "name text, spec jsonb, revision integer")}`);
      if (changed.length > 0) {
        await tx.execute(sql`UPDATE models SET spec = v.spec, revision = v.revision, updated_at = ${now}::bigint FROM ${recordset(changed, "name text, spec jsonb, revision integer")} WHERE models.name = v.name`);
        await tx.execute(sql`DELETE FROM model_aliases WHERE model IN (SELECT v.name FROM ${recordset(changed.map((m) => ({ name: m.name })), "name text")})`);
      }
      const aliases = models.flatMap(({ spec }) => spec.aliases.map((alias) => ({ alias, model: spec.name })));
      if (aliases.length > 0) await tx.execute(sql`INSERT INTO model_aliases (alias, model) SELECT v.alias, v.model FROM ${recordset(aliases, "alias text, model text")}`);
      const names = [...new Set(models.map((m) => m.spec.name))].map((name) => ({ name }));
      await tx.execute(
        sql`INSERT INTO model_state (model) SELECT v.name FROM ${recordset(names, "name text")}
          ON CONFLICT (model) DO UPDATE SET failures = 0, crashes = 0, parked = false, reason = NULL, unplaceable_reason = NULL`,
      );
    });
  }

  deleteModel(name: string): Promise<boolean> {
    return this.write("once", "any", async (tx) => {
      const gone = await tx.delete(schema.models).where(eq(schema.models.name, name)).returning({ n: schema.models.name });
      if (gone.length === 0) return false;
      await tx.delete(schema.modelState).where(eq(schema.modelState.model, name));
      return true;
    });
  }

  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    // Setting the same values twice is setting them once.
    return this.write("idempotent", "any", async (tx) => {
      const insert = tx.insert(schema.modelState).values({ model, ...patch });
      await (Object.keys(patch).length === 0 ? insert.onConflictDoNothing() : insert.onConflictDoUpdate({ target: schema.modelState.model, set: patch }));
    });
  }

  unpark(model: string): Promise<boolean> {
    return this.write("once", "any", async (tx) => {
      const done = await tx
        .update(schema.modelState)
        .set({ parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null })
        .where(and(eq(schema.modelState.model, model), eq(schema.modelState.parked, true)))
        .returning({ m: schema.modelState.model });
      return done.length > 0;
    });
  }

  parkedModels(): Promise<string[]> {
    return this.call("read", async () =>
      (await this.db.select({ m: schema.modelState.model }).from(schema.modelState).where(eq(schema.modelState.parked, true)).orderBy(byBytes(schema.modelState.model))).map((r) => r.m),
    );
  }

  // ---- replicas -----------------------------------------------------------------------

  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    // "once": a plan whose connection broke mid-way may have been committed; it is never sent twice.
    return this.write("once", "any", async (tx) => {
      if (fence) {
        // The lease row, locked until this transaction ends: no successor can take it meanwhile.
        const held = (await tx.execute(sql`SELECT holder, epoch, expires_at > ${DB_NOW} AS live FROM leases WHERE name = 'leader' FOR UPDATE`))[0] as
          | { holder: string; epoch: number; live: boolean }
          | undefined;
        if (!held || held.holder !== fence.holder || held.epoch !== fence.epoch || !held.live) throw new FencedError(fence.epoch);
      }
      // Each part in one statement, its rows handed over as one JSON document: a plan of
      // thousands of rows is a few round trips, not one per row.
      if (plan.create.length > 0) {
        const rows = plan.create.map((r) => ({ id: r.id, model: r.model, profile: r.profile, shards: r.shards, port: r.port, endpoint: r.endpoint }));
        await tx.execute(
          sql`INSERT INTO replicas (id, model, profile, state, shards, port, endpoint, created_at, updated_at)
            SELECT v.id, v.model, v.profile, 'starting', v.shards, v.port, v.endpoint, ${now}::bigint, ${now}::bigint
            FROM ${recordset(rows, "id text, model text, profile text, shards jsonb, port integer, endpoint text")}`,
        );
      }
      await updateReplicas(tx, plan.update, now);
      if (plan.remove.length > 0) await tx.delete(schema.replicas).where(inArray(schema.replicas.id, plan.remove));
      await upsertModelState(tx, plan.modelState);
      for (const n of plan.nodeAdmin) await tx.update(schema.nodes).set({ adminState: n.state }).where(eq(schema.nodes.name, n.node));
      await insertEvents(tx, plan.events, now);
      // The leader's plans keep the changes table short (every PRUNE_EVERY-th): the oldest rows go (a reader that far behind loads everything).
      if (++this.plansUnpruned >= PRUNE_EVERY) {
        this.plansUnpruned = 0;
        await tx.execute(sql`DELETE FROM changes WHERE seq <= (SELECT seq FROM change_counter WHERE id = 1) - ${CHANGES_KEPT}`);
      }
    });
  }

  // ---- several control planes -------------------------------------------------------------

  acquireLease(holder: string, ttlMs: number, take = false): Promise<Lease> {
    const ttl = Math.max(1, Math.floor(ttlMs));
    // A second try after a lost answer renews what the first took (same holder, same epoch); a
    // second try of a take takes again, one epoch higher: still one holder.
    return this.write("idempotent", "meta", async (tx) => {
      // Renewed by its holder while unexpired (same epoch); taken when free or lapsed, or asked to take (epoch + 1).
      await tx.execute(sql`INSERT INTO leases (name, holder, epoch, expires_at) VALUES ('leader', ${holder}, 1, ${DB_NOW} + ${ttl}::bigint)
        ON CONFLICT (name) DO UPDATE SET
          epoch = CASE WHEN ${!take}::boolean AND leases.holder = excluded.holder AND leases.expires_at > ${DB_NOW} THEN leases.epoch ELSE leases.epoch + 1 END,
          holder = excluded.holder,
          expires_at = excluded.expires_at
        WHERE leases.holder = excluded.holder OR leases.expires_at <= ${DB_NOW}`);
      return (await readLeaseRow(tx))!;
    });
  }

  releaseLease(holder: string): Promise<void> {
    return this.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`UPDATE leases SET expires_at = ${DB_NOW} - 1 WHERE name = 'leader' AND holder = ${holder}`);
    });
  }

  readLease(): Promise<Lease | undefined> {
    return this.call("read", () => readLeaseRow(this.db));
  }

  upsertControlPlane(cp: ControlPlaneRecord): Promise<void> {
    return this.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`INSERT INTO control_planes (name, admin_url, router_url, started_at, seen_at) VALUES (${cp.name}, ${cp.adminUrl}, ${cp.routerUrl}, ${cp.startedAt}::bigint, ${DB_NOW})
        ON CONFLICT (name) DO UPDATE SET admin_url = excluded.admin_url, router_url = excluded.router_url, started_at = excluded.started_at, seen_at = excluded.seen_at`);
    });
  }

  controlPlanes(): Promise<ControlPlaneRow[]> {
    return this.call("read", async () =>
      (
        (await this.db.execute(sql`SELECT name, admin_url, router_url, started_at, ${DB_NOW} - seen_at AS ago FROM control_planes ORDER BY name COLLATE "C"`)) as unknown as {
          name: string;
          admin_url: string;
          router_url: string;
          started_at: number;
          ago: number;
        }[]
      ).map((r) => ({ name: r.name, adminUrl: r.admin_url, routerUrl: r.router_url, startedAt: Number(r.started_at), seenAgoMs: Number(r.ago) })),
    );
  }

  removeControlPlane(name: string): Promise<void> {
    return this.write("idempotent", "meta", async (tx) => {
      await tx.delete(schema.controlPlanes).where(eq(schema.controlPlanes.name, name));
      await tx.delete(schema.routerUsage).where(eq(schema.routerUsage.router, name));
    });
  }

  reportUsage(router: string, watchingSince: number, lastUsed: ReadonlyMap<string, number>): Promise<void> {
    const map = JSON.stringify(Object.fromEntries(lastUsed));
    return this.write("idempotent", "meta", async (tx) => {
      await tx.execute(sql`INSERT INTO router_usage (router, watching_since, last_used, reported_at) VALUES (${router}, ${watchingSince}::bigint, ${map}::jsonb, ${DB_NOW})
        ON CONFLICT (router) DO UPDATE SET watching_since = excluded.watching_since, last_used = excluded.last_used, reported_at = excluded.reported_at`);
    });
  }

  routerUsage(): Promise<RouterUsage[]> {
    return this.call("read", async () =>
      (
        (await this.db.execute(sql`SELECT router, watching_since, last_used, ${DB_NOW} - reported_at AS ago FROM router_usage ORDER BY router COLLATE "C"`)) as unknown as {
          router: string;
          watching_since: number;
          last_used: Record<string, number> | string;
          ago: number;
        }[]
      ).map((r) => ({
        router: r.router,
        watchingSince: Number(r.watching_since),
        lastUsed: new Map(Object.entries(typeof r.last_used === "string" ? (JSON.parse(r.last_used) as Record<string, number>) : r.last_used)),
        reportedAgoMs: Number(r.ago),
      })),
    );
  }

  saveNodeReport(node: string, report: string, now: number): Promise<void> {
    return this.write("idempotent", "reports", async (tx) => {
      await tx.insert(schema.nodeReports).values({ node, report, at: now }).onConflictDoUpdate({ target: schema.nodeReports.node, set: { report, at: now } });
    });
  }

  nodeReports(): Promise<NodeReportRow[]> {
    return this.call("read", () => this.db.select().from(schema.nodeReports).orderBy(byBytes(schema.nodeReports.node)));
  }

  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return this.call("read", () => this.db.select({ name: schema.nodes.name, at: schema.nodes.lastHeartbeat }).from(schema.nodes));
  }

  sharedSecret(key: string, candidate: string): Promise<string> {
    return this.write("idempotent", "meta", async (tx) => {
      await tx.insert(schema.meta).values({ key: `secret:${key}`, value: candidate }).onConflictDoNothing({ target: schema.meta.key });
      return (await tx.select().from(schema.meta).where(eq(schema.meta.key, `secret:${key}`)))[0]!.value;
    });
  }

  tokenDigests(): Promise<TokenDigests> {
    return this.call("read", () => this.db.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS))).then((rows) => {
      const { put, remove } = clearTokenMigration(rows);
      // An older version wrote a token in clear again (several control planes during an upgrade).
      if (put.length > 0 || remove.length > 0) return this.write("idempotent", "meta", async (tx) => digestsOf(await tokenRows(tx)));
      return digestsOf(rows);
    });
  }

  putTokenDigest(kind: SharedTokenKind, sha256: string, mode: "claim" | "replace"): Promise<TokenDigests> {
    return this.write("idempotent", "meta", async (tx) => {
      // The row locked to the commit: two rotations at once apply one after the other.
      await tx.execute(sql`SELECT key FROM meta WHERE key = ${DIGEST_KEYS[kind]} FOR UPDATE`);
      const held = digestsOf(await tokenRows(tx));
      const next = nextDigest(held[kind], sha256, mode);
      if (!next) return held;
      const value = JSON.stringify(next);
      // A claim never overwrites: the first control plane's stays, whoever committed first.
      if (mode === "claim") await tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoNothing({ target: schema.meta.key });
      else await tx.insert(schema.meta).values({ key: DIGEST_KEYS[kind], value }).onConflictDoUpdate({ target: schema.meta.key, set: { value } });
      return digestsOf(await tokenRows(tx));
    });
  }

  /**
   * Other instances' commits, heard through LISTEN on a connection of this store's own. After
   * that connection was lost and came back, fn hears "any" and "seen": what was announced meanwhile is lost.
   */
  watch(fn: (change: StoreChange) => void): () => void {
    this.watchers.add(fn);
    if (!this.listenLoopRunning) void this.listenLoop(false);
    return () => {
      this.watchers.delete(fn);
    };
  }

  private dispatch(payload: string): void {
    let m: { from?: unknown; change?: unknown };
    try {
      m = JSON.parse(payload) as typeof m;
    } catch {
      return;
    }
    if (m.from === this.instanceId) return;
    const change: StoreChange = m.change === "seen" || m.change === "meta" || m.change === "reports" ? m.change : "any";
    for (const w of [...this.watchers]) w(change);
  }

  /** (Re)establishes the LISTEN connection until it stands, then tells the watchers when it came back. */
  private async listenLoop(resumed: boolean): Promise<void> {
    this.listenLoopRunning = true;
    try {
      for (let attempt = 0; !this.closed; attempt++) {
        if (!this.listener) {
          this.listener = this.connect({
            max: 1,
            idle_timeout: undefined,
            max_lifetime: null,
            onnotify: (channel: string, payload: string) => {
              if (channel === CHANNEL) this.dispatch(payload);
            },
            onclose: () => {
              if (!this.listening) return;
              this.listening = false;
              if (!this.closed && !this.listenLoopRunning) void this.listenLoop(true);
            },
          } as Partial<postgres.Options<Record<string, never>>>);
        }
        try {
          await this.listener.unsafe(`LISTEN ${CHANNEL}`);
          this.listening = true;
          // What was announced meanwhile is lost: anything, and last-seen times.
          if (resumed)
            for (const w of [...this.watchers]) {
              w("any");
              w("seen");
            }
          return;
        } catch {
          resumed = true;
          // A standby refuses LISTEN and a dead server refuses the connection: start afresh, later.
          const l = this.listener;
          this.listener = undefined;
          void l?.end({ timeout: 0 }).catch(() => {});
          await sleep(Math.min(1000, 50 * 2 ** attempt));
        }
      }
    } finally {
      this.listenLoopRunning = false;
    }
  }

  // ---- events -------------------------------------------------------------------------

  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return this.write("once", "meta", async (tx) => (await tx.insert(schema.events).values(eventRecord(e, e.at)).returning({ id: schema.events.id }))[0]!.id);
  }

  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return this.call("read", async () => {
      const where = and(
        opts.afterId !== undefined ? gt(schema.events.id, opts.afterId) : undefined,
        opts.subject !== undefined ? eq(schema.events.subject, opts.subject) : undefined,
        opts.kind !== undefined ? eq(schema.events.kind, opts.kind) : undefined,
        opts.since !== undefined ? gte(schema.events.at, opts.since) : undefined,
      );
      if (opts.afterId !== undefined) return (await this.db.select().from(schema.events).where(where).orderBy(asc(schema.events.id)).limit(opts.limit)).map(toEvent);
      return (await this.db.select().from(schema.events).where(where).orderBy(desc(schema.events.id)).limit(opts.limit)).reverse().map(toEvent);
    });
  }

  // ---- API keys -----------------------------------------------------------------------

  createApiKey(k: ApiKeyRow): Promise<boolean> {
    return this.write("once", "any", async (tx) => (await tx.insert(schema.apiKeys).values(k).onConflictDoNothing({ target: schema.apiKeys.name }).returning({ n: schema.apiKeys.name })).length > 0);
  }

  listApiKeys(): Promise<ApiKeyRow[]> {
    return this.call("read", () => this.db.select().from(schema.apiKeys).orderBy(byBytes(schema.apiKeys.name)));
  }

  revokeApiKey(name: string): Promise<boolean> {
    return this.write("once", "any", async (tx) => (await tx.delete(schema.apiKeys).where(eq(schema.apiKeys.name, name)).returning({ n: schema.apiKeys.name })).length > 0);
  }

  backupTo(_path: string): Promise<void> {
    return Promise.reject(
      new Error(`the store is PostgreSQL (${this.where}): back it up with PostgreSQL's own tools, e.g. \`pg_dump --format=custom --file=llmgw.dump <URL>\` (or Patroni's/pgBackRest's backups); \`llmgw backup\` copies only a SQLite store`),
    );
  }
}

/** The shared tokens' meta rows, after replacing any token kept in clear by its digest (token-digests.ts). */
async function tokenRows(tx: Tx): Promise<{ key: string; value: string }[]> {
  const rows = await tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS));
  const { put, remove } = clearTokenMigration(rows);
  if (put.length === 0 && remove.length === 0) return rows;
  for (const r of put) await tx.insert(schema.meta).values(r).onConflictDoNothing({ target: schema.meta.key });
  await tx.delete(schema.meta).where(inArray(schema.meta.key, remove));
  return tx.select().from(schema.meta).where(inArray(schema.meta.key, TOKEN_KEYS));
}

async function readLeaseRow(db: Pick<Db, "execute">): Promise<Lease | undefined> {
  const r = (await db.execute(sql`SELECT holder, epoch, expires_at - ${DB_NOW} AS remaining FROM leases WHERE name = 'leader'`))[0] as { holder: string; epoch: number; remaining: number } | undefined;
  return r ? { holder: r.holder, epoch: Number(r.epoch), expiresInMs: Number(r.remaining) } : undefined;
}

/** Names in byte order, as COLLATE "C" sorts them: the order node rows are locked in. */
function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a), Buffer.from(b));
}

/** A group of heartbeats' inventory as HEARTBEATS_SQL takes it: nodes, GPUs and weights, each one JSON document. */
function inventoryRows(hbs: readonly HeartbeatRequest[]): { nodes: string; gpus: string; weights: string } {
  return {
    nodes: JSON.stringify(hbs.map((hb) => ({ name: hb.node, address: hb.address, labels: hb.labels, fabrics: hb.fabrics, agent_version: hb.agent_version }))),
    gpus: JSON.stringify(hbs.flatMap((hb) => hb.gpus.map((g) => ({ node: hb.node, idx: g.index, uuid: g.uuid, name: g.name, class: g.class, memory_mib: g.memory_mib, healthy: g.healthy, parent: g.parent ?? null })))),
    weights: JSON.stringify(hbs.flatMap((hb) => [...new Set(hb.models)].map((m) => ({ node: hb.node, model: m })))),
  };
}

/** A join that took its rows alone. */
class RaceLost extends Error {}

/** One join inside a transaction: applyHeartbeat's with a join, and applyJoins' step for a node named twice. */
async function joinOne(tx: Tx, hb: HeartbeatRequest, now: number, join: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
  const select = () => tx.select({ credentialHash: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, hb.node)).for("update");
  let existing = (await select())[0];
  let created = false;
  if (!existing) {
    const inserted = await tx
      .insert(schema.nodes)
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
      .onConflictDoNothing({ target: schema.nodes.name })
      .returning({ n: schema.nodes.name });
    created = inserted.length === 1;
    // Another control plane inserted it just now: take it as existing.
    if (!created) existing = (await select())[0];
  }
  if (existing) {
    if (joinRefused(existing.credentialHash, join.credentialHash)) return { created: false, taken: true };
    await tx
      .update(schema.nodes)
      .set({ address: hb.address, labels: hb.labels, fabrics: hb.fabrics, lastHeartbeat: now, agentVersion: hb.agent_version, ...(existing.credentialHash !== join.credentialHash ? { credentialHash: join.credentialHash, registeredAt: now } : {}) })
      .where(eq(schema.nodes.name, hb.node));
  }
  await tx.delete(schema.gpus).where(eq(schema.gpus.node, hb.node));
  if (hb.gpus.length > 0)
    await tx
      .insert(schema.gpus)
      .values(hb.gpus.map((g) => ({ node: hb.node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent })));
  await tx.delete(schema.weights).where(eq(schema.weights.node, hb.node));
  const models = [...new Set(hb.models)];
  if (models.length > 0) await tx.insert(schema.weights).values(models.map((m) => ({ node: hb.node, model: m })));
  return { created, taken: false };
}

/** Rows handed to one statement as one JSON document: `jsonb_to_recordset(...) AS v(<columns>)`. */
function recordset(rows: readonly object[], columns: string): SQL {
  return sql`jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS v(${sql.raw(columns)})`;
}

/** Column and type of each field a replica or model-state patch may set. */
const REPLICA_COLUMNS: Record<string, [string, string]> = {
  model: ["model", "text"],
  profile: ["profile", "text"],
  state: ["state", "text"],
  shards: ["shards", "jsonb"],
  port: ["port", "integer"],
  endpoint: ["endpoint", "text"],
  failures: ["failures", "integer"],
  error: ["error", "text"],
  createdAt: ["created_at", "bigint"],
  readyAt: ["ready_at", "bigint"],
};
const MODEL_STATE_COLUMNS: Record<string, [string, string]> = {
  failures: ["failures", "integer"],
  crashes: ["crashes", "integer"],
  parked: ["parked", "boolean"],
  reason: ["reason", "text"],
  lastFailureAt: ["last_failure_at", "bigint"],
  lastRequestedAt: ["last_requested_at", "bigint"],
  scaleTarget: ["scale_target", "integer"],
  unplaceableReason: ["unplaceable_reason", "text"],
};

/** Patches grouped by the fields they set (undefined ones are not set, as drizzle's updates leave them), keys in order. */
function byFields(patches: Iterable<[string, object]>, columns: Record<string, [string, string]>): { fields: string[]; rows: Record<string, unknown>[] }[] {
  const groups = new Map<string, { fields: string[]; rows: Record<string, unknown>[] }>();
  for (const [key, patch] of patches) {
    const set = Object.entries(patch).filter(([, v]) => v !== undefined);
    for (const [f] of set) if (!Object.hasOwn(columns, f)) throw new Error(`no column for the field ${f}`);
    const fields = set.map(([f]) => f).sort();
    const id = fields.join(",");
    let g = groups.get(id);
    if (!g) groups.set(id, (g = { fields, rows: [] }));
    g.rows.push({ key, ...Object.fromEntries(set) });
  }
  return [...groups.values()];
}

/** A plan's replica updates, one statement per set of fields; a replica updated twice ends as both in order say. */
async function updateReplicas(tx: Tx, updates: PlanWrite["update"], now: number): Promise<void> {
  if (updates.length === 0) return;
  const merged = new Map<string, object>();
  for (const u of updates) {
    // updated_at is the plan's time, whatever a patch says.
    const { updatedAt: _, ...patch } = u.patch;
    const into: Record<string, unknown> = { ...merged.get(u.id) };
    for (const [k, v] of Object.entries(patch)) if (v !== undefined) into[k] = v;
    merged.set(u.id, into);
  }
  for (const { fields, rows } of byFields(merged, REPLICA_COLUMNS)) {
    const set = [...fields.map((f) => `${REPLICA_COLUMNS[f]![0]} = v."${f}"`), "updated_at = "].join(", ");
    const columns = ["key text", ...fields.map((f) => `"${f}" ${REPLICA_COLUMNS[f]![1]}`)].join(", ");
    await tx.execute(sql`UPDATE replicas SET ${sql.raw(set)}${now}::bigint FROM ${recordset(rows, columns)} WHERE replicas.id = v.key`);
  }
}

/** A plan's model-state patches, upserted one statement per set of fields (an empty patch writes nothing). */
async function upsertModelState(tx: Tx, patches: PlanWrite["modelState"]): Promise<void> {
  const nonEmpty = [...patches].filter(([, p]) => Object.values(p).some((v) => v !== undefined));
  for (const { fields, rows } of byFields(nonEmpty, MODEL_STATE_COLUMNS)) {
    const cols = fields.map((f) => MODEL_STATE_COLUMNS[f]![0]);
    const columns = ["key text", ...fields.map((f) => `"${f}" ${MODEL_STATE_COLUMNS[f]![1]}`)].join(", ");
    const text = `INSERT INTO model_state (model, ${cols.join(", ")}) SELECT v.key, ${fields.map((f) => `v."${f}"`).join(", ")} FROM `;
    const conflict = ` ON CONFLICT (model) DO UPDATE SET ${cols.map((c) => `${c} = excluded.${c}`).join(", ")}`;
    await tx.execute(sql`${sql.raw(text)}${recordset(rows, columns)}${sql.raw(conflict)}`);
  }
}

/** Events in one statement, their ids in the order given. */
async function insertEvents(tx: Tx, events: readonly NewEvent[], at: number): Promise<void> {
  if (events.length === 0) return;
  const rows = JSON.stringify(events.map((e) => ({ kind: e.kind, subject: e.subject, message: e.message, data: e.data ?? null })));
  await tx.execute(
    sql`INSERT INTO events (at, kind, subject, message, data)
      SELECT ${at}::bigint, v.kind, v.subject, v.message, v.data
      FROM ROWS FROM (jsonb_to_recordset(${rows}::text::jsonb) AS (kind text, subject text, message text, data jsonb)) WITH ORDINALITY AS v(kind, subject, message, data, ord)
      ORDER BY v.ord`,
  );
}
