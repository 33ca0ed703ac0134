// The stores the HA bench compares: a SQLite file in a temp dir, and a local PostgreSQL started
// for the run (test/helpers/postgres.ts: Debian's server on 127.0.0.1, a free port, a temp data
// dir) with durable commits (fsync and synchronous_commit on, as a real deployment runs it; the
// test helper's default turns fsync off). Each `fresh()` is an empty store: a new SQLite file,
// or a new database on the one PostgreSQL server.

import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type OpenedStore, openStore } from "../../../src/store/open";
import { ROOT } from "./procs";
import { scratchDir } from "../../helpers/tmp";
import { STORE_DEFAULTS } from "../../helpers/control-settings";

export interface BenchStores {
  /** A new empty SQLite file's path. */
  sqlitePath(): string;
  /** A new empty PostgreSQL database's URL; undefined when PostgreSQL cannot be measured (why: `pgMissing`). */
  pgUrl(): Promise<string | undefined>;
  pgMissing?: string;
  open(target: string): Promise<OpenedStore>;
  stop(): Promise<void>;
}

export async function benchStores(o: { postgres: boolean }): Promise<BenchStores> {
  const dir = scratchDir("llmgw-bench-ha-");
  let n = 0;
  let pg: { url: string; sql(q: string): Promise<unknown>; stop(): Promise<void> } | undefined;
  let pgMissing: string | undefined;
  if (!o.postgres) pgMissing = "not asked for (--sqlite-only)";
  else if (!existsSync(join(ROOT, "test/helpers/postgres.ts"))) pgMissing = "no PostgreSQL store on this branch yet (test/helpers/postgres.ts missing)";
  else {
    try {
      // Imported by path: the helper comes with the PostgreSQL store's branch.
      const { startPostgres } = (await import(join(ROOT, "test/helpers/postgres.ts"))) as { startPostgres(o: { settings: Record<string, string | number> }): Promise<NonNullable<typeof pg>> };
      pg = await startPostgres({ settings: { fsync: "on", synchronous_commit: "on", max_connections: 200 } });
      // A store that is not built yet says so on open.
      const probe = await openStore({ ...STORE_DEFAULTS, target: pg.url, dataDir: dir });
      await probe.close();
    } catch (e) {
      pgMissing = `PostgreSQL store not usable: ${(e as Error).message.split("\n")[0]}`;
      await pg?.stop().catch(() => undefined);
      pg = undefined;
    }
  }
  return {
    sqlitePath: () => join(dir, `bench-${n++}.db`),
    pgUrl: async () => {
      if (!pg) return undefined;
      const db = `bench_${n++}`;
      await pg.sql(`CREATE DATABASE ${db}`);
      const u = new URL(pg.url);
      u.pathname = `/${db}`;
      return u.toString();
    },
    pgMissing,
    open: (target) => openStore({ ...STORE_DEFAULTS, target, dataDir: dir }),
    stop: async () => {
      await pg?.stop().catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
