// What a failed SQLite call means for people: a full disk, a lock held by someone else, an
// unwritable file. The store turns these into the control plane's StoreUnavailableError, whose
// message says what to do; anything else (a bug) passes through unchanged.

import { StoreUnavailableError } from "../control/errors";

export function storeFailure(err: unknown): StoreUnavailableError | undefined {
  if (err instanceof StoreUnavailableError) return err;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== "string" || !code.startsWith("SQLITE_")) return undefined;
  if (code.startsWith("SQLITE_FULL"))
    return new StoreUnavailableError("store_full", "the database's disk is full: free space in the data dir; nothing was changed, and writes resume by themselves", code);
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"))
    return new StoreUnavailableError("store_busy", "the database is locked by another process (a backup tool or a second server on the same data dir?); nothing was changed, try again", code);
  if (code.startsWith("SQLITE_IOERR") || code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code.startsWith("SQLITE_CORRUPT"))
    return new StoreUnavailableError("store_unavailable", `the database cannot be written (${code}): check the data dir's disk and permissions; nothing was changed`, code);
  return undefined;
}

/** Runs one database call, turning a SQLite failure into StoreUnavailableError. */
export function guarded<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (e) {
    return Promise.reject(storeFailure(e) ?? e);
  }
}
