// The SQLite dialect of the control plane's store ports (src/control/store-port.ts): opening the
// embedded database, migrating it, and every query the control plane makes of it, mapped to the
// domain types of src/control/types.ts, in parts by role (sqlite/: the fleet's reads, plans and
// change feed; inventory; the node registry; the catalog; keys and events; what several control
// planes share). It persists and maps, nothing more: the rules live in the control plane. Drizzle
// stays inside src/store; a SQLite failure leaves it as StoreUnavailableError. bun:sqlite is
// synchronous, so each method does its work at once and returns a settled promise: the async
// signatures are for a networked dialect.
//
// src/store may import control (the ports it implements, the domain types and errors), protocol
// and lib; never router, api, app, cli, agent or sim.

import { Database } from "bun:sqlite";
import { eq } from "drizzle-orm";
import { drizzle } from "drizzle-orm/bun-sqlite";
import type { StoreChange } from "../control/types";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import { type StoreParts, StoreByRole } from "./by-role";
import { guarded } from "./errors";
import { embeddedMigrations } from "./migrations";
import { SqliteWeightsOrders } from "./sqlite/weights-orders";
import { schemaAheadReason } from "./schema-age";
import * as schema from "./schema";
import { SqliteCatalog, SqliteRecords } from "./sqlite/catalog";
import { SqliteKeys } from "./sqlite/keys";
import { type Db, type Sqlite, tokenRows } from "./sqlite/db";
import { SqliteFleet } from "./sqlite/fleet";
import { SqliteInventory } from "./sqlite/inventory";
import { SqliteNodes } from "./sqlite/nodes";
import { SqliteShared } from "./sqlite/shared";
import { SqliteLedger } from "./sqlite/ledger";

// The domain types, importable from here as before (test fixtures use them).
export type { EventRow, GpuRow, ModelRow, ModelStateRow, NodeDiscovery, NodeRow, ReplicaRow, Snapshot } from "../control/types";

export interface OpenOptions {
  /** File path, or ":memory:" for tests. */
  path: string;
  /** How long a write waits for a lock held by another connection (`serve --db-busy-timeout`). */
  busyTimeoutMs: number;
}

export class Store extends StoreByRole {
  private readonly db: Db;
  readonly sqlite: Database;
  protected readonly parts: StoreParts;

  constructor(opts: OpenOptions) {
    super();
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
    const s: Sqlite = { db: this.db, sqlite: this.sqlite };
    this.parts = { fleet: new SqliteFleet(s), inventory: new SqliteInventory(s), nodes: new SqliteNodes(s), catalog: new SqliteCatalog(s), records: new SqliteRecords(s), keys: new SqliteKeys(s), shared: new SqliteShared(s), ledger: new SqliteLedger(s), weights: new SqliteWeightsOrders(s) };
  }

  private migrate(): void {
    // A later release migrated this file: nothing runs backwards, and one head node cannot stand by.
    const ahead = schemaAheadReason(this.appliedMigration(), "sqlite");
    if (ahead !== undefined) {
      this.sqlite.close();
      throw new Error(`${ahead}; this SQLite store is not opened`);
    }
    // Same path drizzle's bun-sqlite migrator takes after reading files; see migrations.ts.
    const dialect = (this.db as unknown as { dialect: { migrate(m: unknown, s: unknown, c: unknown): void } }).dialect;
    const session = (this.db as unknown as { session: unknown }).session;
    dialect.migrate(embeddedMigrations(), session, { migrationsFolder: "(embedded)" });
  }

  /** The newest migration applied to this file (drizzle's created_at), undefined on a new one. */
  private appliedMigration(): number | undefined {
    const table = this.sqlite.query("SELECT 1 AS x FROM sqlite_master WHERE type = 'table' AND name = '__drizzle_migrations'").get();
    if (table === null) return undefined;
    const row = this.sqlite.query("SELECT max(created_at) AS at FROM __drizzle_migrations").get() as { at: number | string | null } | null;
    return row?.at === null || row?.at === undefined ? undefined : Number(row.at);
  }

  close(): void {
    this.sqlite.close();
  }

  /** One heartbeat as a group of one (a join as a group of one join), through this store's own group writes. */
  override applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    if (!join) return this.applyHeartbeats([hb], now).then(([r]) => ({ created: r!.created, taken: false }));
    return this.applyJoins([{ hb, join }], now).then(([r]) => r!);
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

  /** SQLite's VACUUM INTO reads one snapshot while the server keeps running. */
  backupTo(path: string): Promise<void> {
    return guarded(() => {
      this.sqlite.query("VACUUM INTO ?").run(path);
    });
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
    for (const t of ["nodes", "gpus", "weights", "models", "model_aliases", "replicas", "model_state", "events", "api_keys", "teams"]) {
      out[t] = (this.sqlite.query(`SELECT count(*) AS n FROM ${t}`).get() as { n: number }).n;
    }
    return out;
  }
}
