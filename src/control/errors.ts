// The control plane's domain errors. The APIs map them to status codes (api/errors.ts); the
// store turns a failed database call into StoreUnavailableError, so nothing above it needs to
// know which database it runs on.

/** A name, alias or state is taken or forbids the change; `path` names the request field it concerns. */
export class ConflictError extends Error {
  constructor(
    message: string,
    readonly path: (string | number)[] = [],
    /** Every conflict found, when there are several (the first is `message` at `path`). */
    readonly issues: { path: (string | number)[]; message: string }[] = [{ path, message }],
  ) {
    super(message);
  }
}

export class NotFoundError extends Error {}

/** A request that is well formed but cannot be done as asked (a time already past); `path` names the field. */
export class InvalidRequestError extends Error {
  constructor(
    message: string,
    readonly path: (string | number)[] = [],
  ) {
    super(message);
  }
}

/**
 * The store cannot do what was asked now (a full disk, a lock held by someone else, an unwritable
 * file, a lost connection): nothing was changed. The APIs answer 503 with the message; the
 * control loop logs it and carries on, and recovers by itself when the cause goes away.
 */
export class StoreUnavailableError extends Error {
  constructor(
    readonly code: "store_full" | "store_busy" | "store_unavailable",
    message: string,
    /** The database's own error code (e.g. SQLITE_FULL), for the log. */
    readonly driverCode?: string,
  ) {
    super(message);
  }
}

/**
 * A plan written under a lease this control plane no longer holds (another leads with a newer
 * epoch, or the lease lapsed): the store wrote nothing. The leader steps down at once.
 */
export class FencedError extends Error {
  constructor(readonly epoch: number, message = `not the leader any more (epoch ${epoch} lost the lease): nothing was written`) {
    super(message);
  }
}
