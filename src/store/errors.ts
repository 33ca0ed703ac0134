// What a failed database call means for people: a full disk, a lock held by someone else, an
// unwritable file. The API answers these with 503 and a sentence that says what to do; the
// control loop logs them and carries on, and recovers by itself when the cause goes away.

export interface StoreFailure {
  code: "store_full" | "store_busy" | "store_unavailable";
  message: string;
}

export function storeFailure(err: unknown): StoreFailure | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== "string" || !code.startsWith("SQLITE_")) return undefined;
  if (code.startsWith("SQLITE_FULL"))
    return { code: "store_full", message: "the database's disk is full: free space in the data dir; nothing was changed, and writes resume by themselves" };
  if (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"))
    return { code: "store_busy", message: "the database is locked by another process (a backup tool or a second server on the same data dir?); nothing was changed, try again" };
  if (code.startsWith("SQLITE_IOERR") || code.startsWith("SQLITE_READONLY") || code.startsWith("SQLITE_CANTOPEN") || code.startsWith("SQLITE_CORRUPT"))
    return { code: "store_unavailable", message: `the database cannot be written (${code}): check the data dir's disk and permissions; nothing was changed` };
  return undefined;
}
