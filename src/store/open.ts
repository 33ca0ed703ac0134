// Which store a head node runs on: `serve --store URL` (LLMGW_STORE). A postgres:// or
// postgresql:// URL is the PostgreSQL dialect (several control planes, Patroni); anything else
// is a SQLite file; nothing at all is SQLite in the data dir. The URL's password never reaches
// a log or an error message: `describe` is what may be shown.

import { isAbsolute, join, resolve } from "node:path";
import type { StorePort } from "../control/store-port";
import { Store } from "./index";
import { PgStore } from "./pg/index";

export type Dialect = "sqlite" | "postgres";

export interface OpenedStore {
  store: StorePort;
  dialect: Dialect;
  /** Where it is, fit for a log line (a URL without its password). */
  describe: string;
  /** The SQLite store itself, for the test helpers' back doors; absent on PostgreSQL. */
  sqlite?: Store;
  /** The PostgreSQL store itself; absent on SQLite. */
  postgres?: PgStore;
  close(): Promise<void>;
}

export interface OpenStoreOptions {
  /** `--store`: a PostgreSQL URL or a SQLite path; undefined: `<dataDir>/llmgw.db`. */
  target: string | undefined;
  dataDir: string;
  /** SQLite: how long a write waits for a lock held elsewhere (`serve --db-busy-timeout`). */
  busyTimeoutMs: number;
  /** PostgreSQL: seconds a connection attempt may take (default 5). */
  connectTimeoutS?: number;
  /** PostgreSQL: names this control plane in the store's change notifications. */
  instanceId?: string;
  /** PostgreSQL: how long one call may take, its tries included (`serve --db-query-timeout`). */
  queryTimeoutMs: number;
}

export function isPostgresUrl(target: string): boolean {
  return /^postgres(ql)?:\/\//i.test(target);
}

/** A URL with any password replaced by ***, for logs and errors. */
export function redactUrl(target: string): string {
  return target.replace(/^(postgres(?:ql)?:\/\/[^:@/]*):[^@/]*@/i, "$1:***@");
}

/** Text with the URL's password (and any URL's password) taken out. */
function redactSecrets(text: string, url: string): string {
  const pw = /^postgres(?:ql)?:\/\/[^:@/]*:([^@/]*)@/i.exec(url)?.[1];
  let out = text.replace(/(postgres(?:ql)?:\/\/[^:@/\s]*):[^@/\s]*@/gi, "$1:***@");
  if (pw) {
    out = out.split(pw).join("***");
    try {
      const decoded = decodeURIComponent(pw);
      if (decoded !== "") out = out.split(decoded).join("***");
    } catch {
      /* not URI-encoded */
    }
  }
  return out;
}

export async function openStore(o: OpenStoreOptions): Promise<OpenedStore> {
  if (o.target !== undefined && isPostgresUrl(o.target)) {
    const describe = redactUrl(o.target);
    let store: PgStore;
    try {
      store = await PgStore.open({ url: o.target, connectTimeoutS: o.connectTimeoutS, instanceId: o.instanceId, queryTimeoutMs: o.queryTimeoutMs });
    } catch (e) {
      // Whatever the driver said, without the URL's password.
      const why = e instanceof Error ? e.message : String(e);
      throw new Error(`cannot open the PostgreSQL store ${describe}: ${redactSecrets(why, o.target)}`);
    }
    return { store, dialect: "postgres", describe, postgres: store, close: () => store.close() };
  }
  const path = o.target === undefined ? join(o.dataDir, "llmgw.db") : isAbsolute(o.target) ? o.target : resolve(o.target);
  const store = new Store({ path, busyTimeoutMs: o.busyTimeoutMs });
  return { store, dialect: "sqlite", describe: path, sqlite: store, close: async () => store.close() };
}
