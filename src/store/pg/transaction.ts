// How the PostgreSQL store runs a transaction's body, so that a connection the server or the
// network closes mid-transaction (a failover terminating backends, `pg_ctl stop -m fast`,
// idle_in_transaction_session_timeout, a proxy cutting it) fails the call and nothing else.
//
// postgres-js 3.4.9 answers a body that rejects by sending ROLLBACK on the transaction's
// connection. When the body rejected because that connection closed, the connection has already
// dropped its socket: the ROLLBACK is queued for a setImmediate that then throws
// "TypeError: null is not an object (evaluating 'socket.write')" from nextWrite, where no caller
// can catch it (porsager/postgres#1208), and the unsent bytes stay queued on the connection, so
// its next reconnects stall until connect_timeout. Nor is a ROLLBACK needed: the server rolls a
// transaction back when its session ends. begin() already rejects by itself, with
// CONNECTION_CLOSED, when its connection closes, so a body that failed for that reason is left
// pending instead of rejecting: postgres-js never reaches its ROLLBACK, and the call fails as it
// did (store_unavailable, tried again when that is harmless).

import postgres from "postgres";
import { codeOf, driverError } from "./errors";

/** Raised for a connection that is gone: by postgres-js when its socket closes or is destroyed, or by the socket itself. */
const GONE_CODES = new Set(["CONNECTION_CLOSED", "CONNECTION_DESTROYED", "CONNECTION_ENDED", "ECONNRESET", "EPIPE", "ECONNABORTED", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "ERR_SOCKET_CLOSED"]);

/**
 * The statement failed because its connection is gone, not because the server refused it: a
 * server's answer (PostgresError, a constraint, a serialization failure) or the store's own
 * errors leave the connection usable, and the transaction must be rolled back on it.
 */
export function connectionGone(err: unknown): boolean {
  const e = driverError(err);
  if (e instanceof postgres.PostgresError) return false;
  const code = codeOf(e);
  return code !== undefined && GONE_CODES.has(code);
}

/**
 * body as a transaction's callback for begin() or drizzle's transaction(): its result, or its
 * failure, except a failure on a lost connection, which never settles (see the file's head). A
 * fresh promise each time: nothing holds it once begin() has rejected, so the collector takes the
 * abandoned body with it.
 */
export function txBody<A, T>(body: (tx: A) => Promise<T>): (tx: A) => Promise<T> {
  return (tx) => body(tx).catch((e: unknown) => (connectionGone(e) ? new Promise<T>(() => {}) : Promise.reject(e)));
}
