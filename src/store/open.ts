// Which store a head node runs on: `serve --store URL` (LLMGW_STORE). A postgres:// or
// postgresql:// URL is the PostgreSQL dialect (several control planes, Patroni); anything else
// is a SQLite file; nothing at all is SQLite in the data dir. The URL's password never reaches
// a log or an error message: `describe` is what may be shown.

import { isAbsolute, join, resolve } from "node:path";
import type { StorePort } from "../control/store-port";
import { Store } from "./index";

export type Dialect = "sqlite" | "postgres";

export interface OpenedStore {
  store: StorePort;
  dialect: Dialect;
  /** Where it is, fit for a log line (a URL without its password). */
  describe: string;
  /** The SQLite store itself, for the test helpers' back doors; absent on PostgreSQL. */
  sqlite?: Store;
  close(): Promise<void>;
}

export interface OpenStoreOptions {
  /** `--store`: a PostgreSQL URL or a SQLite path; undefined: `<dataDir>/llmgw.db`. */
  target: string | undefined;
  dataDir: string;
  busyTimeoutMs?: number;
}

export function isPostgresUrl(target: string): boolean {
  return /^postgres(ql)?:\/\//i.test(target);
}

/** A URL with any password replaced by ***, for logs and errors. */
export function redactUrl(target: string): string {
  return target.replace(/^(postgres(?:ql)?:\/\/[^:@/]*):[^@/]*@/i, "$1:***@");
}

export async function openStore(o: OpenStoreOptions): Promise<OpenedStore> {
  if (o.target !== undefined && isPostgresUrl(o.target)) {
    throw new Error(`PostgreSQL stores are not built yet (${redactUrl(o.target)})`);
  }
  const path = o.target === undefined ? join(o.dataDir, "llmgw.db") : isAbsolute(o.target) ? o.target : resolve(o.target);
  const store = new Store({ path, busyTimeoutMs: o.busyTimeoutMs });
  return { store, dialect: "sqlite", describe: path, sqlite: store, close: async () => store.close() };
}
