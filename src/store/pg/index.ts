// The PostgreSQL dialect of the control plane's store ports (src/control/store-port.ts), so that
// several control planes share one database (a Patroni cluster behind a multi-host URL). It
// persists and maps exactly as the SQLite dialect in ../index.ts does; the shared contract suite
// (test/contract/store.ts) holds the two to one behaviour. Its parts by role (fleet.ts,
// inventory.ts, nodes.ts, catalog.ts, shared.ts) run their calls through one connection
// (connection.ts: the driver, migrations at open, retries, deadlines, notifications).

import type { StoreChange } from "../../control/types";
import { type StoreParts, StoreByRole } from "../by-role";
import { MIGRATION_TIMEOUT_MS, PgConnection, type PgStoreOptions } from "./connection";
import { PgCatalog, PgRecords } from "./catalog";
import { PgFleet } from "./fleet";
import { PgInventory } from "./inventory";
import { PgKeys } from "./keys";
import { PgNodes } from "./nodes";
import { PgShared } from "./shared";
import { PgWeightsOrders } from "./weights-orders";
import { PgLedger } from "./ledger";

export { CHANNEL, type PgStoreOptions, withPrimaryTarget } from "./connection";

export class PgStore extends StoreByRole {
  /** Names this store in its notifications. */
  readonly instanceId: string;
  /** Where the database is, for messages: host:port, never a password. */
  readonly where: string;
  protected readonly parts: StoreParts;

  private constructor(private readonly c: PgConnection) {
    super();
    this.instanceId = c.instanceId;
    this.where = c.where;
    this.parts = { fleet: new PgFleet(c), inventory: new PgInventory(c), nodes: new PgNodes(c), catalog: new PgCatalog(c), records: new PgRecords(c), keys: new PgKeys(c), shared: new PgShared(c), ledger: new PgLedger(c), weights: new PgWeightsOrders(c) };
  }

  /** Connects and migrates; rejects with StoreUnavailableError when the server cannot be reached. */
  static async open(opts: PgStoreOptions): Promise<PgStore> {
    const c = new PgConnection(opts);
    try {
      await c.call("idempotent", () => c.migrate(), MIGRATION_TIMEOUT_MS);
    } catch (e) {
      await c.close();
      throw e;
    }
    return new PgStore(c);
  }

  /** Why this binary must not lead this store: its schema is newer than it knows (schema-age.ts); undefined when it may. */
  schemaAhead(): Promise<string | undefined> {
    return this.c.schemaAhead();
  }

  close(): Promise<void> {
    return this.c.close();
  }

  /**
   * Other instances' commits, heard through LISTEN on a connection of this store's own. After
   * that connection was lost and came back, fn hears "any" and "seen": what was announced meanwhile is lost.
   */
  watch(fn: (change: StoreChange) => void): () => void {
    return this.c.watch(fn);
  }

  backupTo(_path: string): Promise<void> {
    return Promise.reject(
      new Error(`the store is PostgreSQL (${this.where}): back it up with PostgreSQL's own tools, e.g. \`pg_dump --format=custom --file=llmgw.dump <URL>\` (or Patroni's/pgBackRest's backups); \`llmgw backup\` copies only a SQLite store`),
    );
  }
}
