// The PostgreSQL dialect's connection to its database: every call its parts (index.ts) make runs
// through call() (a read, or a write that may be tried again) or write() (a committing transaction
// that announces its change). What that means for the dialect:
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
import { sql } from "drizzle-orm";
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import type { StoreChange } from "../../control/types";
import { embeddedMigrations } from "../migrations";
import { schemaAheadReason } from "../schema-age";
import { TOKEN_KEYS, clearTokenMigration } from "../token-digests";
import { PgDeadlineError, classify, hostsOf } from "./errors";
import * as schema from "./schema";
import { txBody } from "./transaction";

export const CHANNEL = "llmgw_changes";
/** pg_advisory_xact_lock key taken while migrating ("llmgw" in ASCII). */
const MIGRATION_LOCK = 0x6c6c6d6777;

export type Db = PostgresJsDatabase<typeof schema>;
export type Tx = Parameters<Parameters<Db["transaction"]>[0]>[0];
export type Sql = postgres.Sql<Record<string, never>>;
export type TxSql = postgres.TransactionSql<Record<string, never>>;

/** How a call may be tried again after a failure (see the file's head). */
export type Retry = "read" | "idempotent" | "once";

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
export const MIGRATION_TIMEOUT_MS = 120_000;

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

/** A multi-host URL without target_session_attrs reaches whichever member is first: ask for the primary. */
export function withPrimaryTarget(url: string): string {
  const authority = url.replace(/^postgres(ql)?:\/\//i, "").split(/[/?]/)[0] ?? "";
  if (!authority.includes(",") || /[?&]target_session_attrs=/.test(url)) return url;
  return `${url}${url.includes("?") ? "&" : "?"}target_session_attrs=primary`;
}

export class PgConnection {
  readonly instanceId: string;
  /** Where the database is, for messages: host:port, never a password. */
  readonly where: string;
  private readonly url: string;
  private readonly opts: PgStoreOptions;
  private readonly retries: number;
  private readonly queryTimeoutMs: number;
  private readonly idleInTransactionTimeoutMs: number;
  /** The pool, replaced after a failover (reconnect()): read it at each use, never keep it. */
  client: Sql;
  /** Drizzle over the current pool. */
  db: Db;
  /** Each change's notification as this instance sends it. */
  readonly payload: Record<StoreChange, string>;
  private closed = false;
  // watch(): one LISTEN connection for every watcher, kept up by listenLoop().
  private readonly watchers = new Set<(change: StoreChange) => void>();
  private listener: Sql | undefined;
  private listening = false;
  private listenLoopRunning = false;

  constructor(opts: PgStoreOptions) {
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
  async migrate(): Promise<void> {
    const migrations = embeddedMigrations("pg");
    await this.begin("", async (t) => {
      // Waiting for another control plane's migration is no stuck statement.
      await t.unsafe(`SET LOCAL statement_timeout = ${MIGRATION_TIMEOUT_MS}`);
      await t`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`;
      // drizzle's own bookkeeping (as its pg migrator keeps it), so drizzle-kit agrees on what is applied.
      await t.unsafe(`CREATE SCHEMA IF NOT EXISTS drizzle`);
      await t.unsafe(`CREATE TABLE IF NOT EXISTS drizzle.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)`);
      const last = (await t.unsafe(`SELECT created_at FROM drizzle.__drizzle_migrations ORDER BY created_at DESC LIMIT 1`))[0] as { created_at: number | string } | undefined;
      // A later release migrated this store: nothing runs backwards and nothing is written (schema-age.ts).
      if (schemaAheadReason(last ? Number(last.created_at) : undefined, "pg") !== undefined) return;
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

  /** Why this binary must not lead this store (its schema is newer than it knows), or undefined. */
  async schemaAhead(): Promise<string | undefined> {
    const rows = (await this.call("read", () => this.client.unsafe(`SELECT max(created_at) AS at FROM drizzle.__drizzle_migrations`))) as unknown as { at: number | string | null }[];
    const at = rows[0]?.at;
    return schemaAheadReason(at === null || at === undefined ? undefined : Number(at), "pg");
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
  async call<T>(retry: Retry, fn: () => Promise<T>, deadlineMs = this.queryTimeoutMs): Promise<T> {
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
  begin<T>(mode: string, body: (t: TxSql) => Promise<T>): Promise<T> {
    return this.client.begin(mode, txBody(body)) as Promise<T>;
  }

  /** A committing write: fn in one transaction that also announces the change to other control planes. */
  write<T>(retry: Retry, change: StoreChange, fn: (tx: Tx) => Promise<T>): Promise<T> {
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
}
