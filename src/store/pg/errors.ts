// What a failed PostgreSQL call means: the server cannot be reached or went away (a restart, a
// Patroni failover), the server is a standby now (read-only: the old primary after a switchover),
// a serialization failure or deadlock (the transaction was rolled back: try it again), a full
// disk. The store turns these into the control plane's StoreUnavailableError, naming where the
// database is (host:port, never a password); anything else (a bug, a constraint) passes through.

import { StoreUnavailableError } from "../../control/errors";

/** Whether the failed call can have had an effect. */
export type FailureKind =
  /** Rolled back for sure (serialization failure, deadlock): any call may be tried again. */
  | "rolled back"
  /** Never reached a server that could apply it (refused, timed out connecting, a standby): any call may be tried again. */
  | "not sent"
  /** The connection broke while the call ran: only an idempotent call may be tried again. */
  | "maybe applied";

export interface PgFailure {
  kind: FailureKind;
  error: StoreUnavailableError;
  /** The server is a standby now: connections to it must be dropped so the pool finds the primary. */
  standby: boolean;
  /** The call outlived its deadline: its connection is stuck (no answer is coming), so the pool is dropped at once. */
  stuck?: boolean;
}

/**
 * Thrown by the store itself when a call outlives its deadline (PgStoreOptions.queryTimeoutMs):
 * a server, or the way to it, that stopped answering mid-failover sends no error, only silence,
 * and postgres-js waits for an answer for as long as the socket stays open.
 */
export class PgDeadlineError extends Error {
  readonly code = "QUERY_DEADLINE";
  constructor(readonly deadlineMs: number) {
    super(`no answer within ${deadlineMs} ms`);
  }
}

/** A deadline as written in flags: 10s, 1500ms. */
const durationText = (ms: number) => (ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`);

const CONNECT_CODES = new Set(["ECONNREFUSED", "CONNECT_TIMEOUT", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "ETIMEDOUT", "ConnectionRefused"]);
const BROKEN_CODES = new Set(["ECONNRESET", "EPIPE", "CONNECTION_CLOSED", "CONNECTION_DESTROYED", "CONNECTION_ENDED", "ECONNABORTED", "ERR_SOCKET_CLOSED", "ConnectionClosed"]);

/** The driver's own error: drizzle wraps it (DrizzleQueryError, its cause). */
export function driverError(err: unknown): unknown {
  let e = err;
  for (let i = 0; i < 5 && e instanceof Error && typeof (e as { code?: unknown }).code !== "string" && e.cause !== undefined; i++) e = e.cause;
  return e;
}

export function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** host:port list of a postgres:// URL, for messages: `127.0.0.1:5432` or `a:5432,b:5432`. */
export function hostsOf(url: string): string {
  const rest = url.replace(/^postgres(ql)?:\/\//i, "");
  const authority = rest.split(/[/?]/)[0] ?? "";
  const hosts = authority.slice(authority.lastIndexOf("@") + 1);
  return hosts
    .split(",")
    .map((h) => (h === "" ? "localhost:5432" : /:\d+$/.test(h) ? h : `${h}:5432`))
    .join(",");
}

export function classify(err: unknown, where: string): PgFailure | undefined {
  if (err instanceof StoreUnavailableError) return { kind: "not sent", error: err, standby: false };
  if (err instanceof PgDeadlineError)
    return {
      kind: "maybe applied",
      standby: false,
      stuck: true,
      error: new StoreUnavailableError(
        "store_unavailable",
        `PostgreSQL at ${where} did not answer within ${durationText(err.deadlineMs)} (--db-query-timeout): the server or the network to it stopped answering (a failover?); what was asked may or may not have been done; the store reconnects by itself`,
        err.code,
      ),
    };
  err = driverError(err);
  const code = codeOf(err);
  if (code === undefined) return undefined;
  const detail = (err as Error).message;
  const unavailable = (kind: FailureKind, message: string, standby = false): PgFailure => ({
    kind,
    standby,
    error: new StoreUnavailableError("store_unavailable", message, code),
  });
  // statement_timeout and idle_in_transaction_session_timeout, which the store sets to its
  // deadline so the server gives up on what the store gave up on: the transaction is rolled back.
  if (code === "57014" || code === "25P03")
    return unavailable("rolled back", `PostgreSQL at ${where} cancelled a statement or transaction (${code}: past --db-query-timeout, or cancelled by someone); nothing was changed, try again`);
  if (code === "40001" || code === "40P01")
    return unavailable("rolled back", `PostgreSQL at ${where} rolled the change back (${code === "40001" ? "serialization failure" : "deadlock"}) more often than it was retried; nothing was changed, try again`);
  if (code === "25006")
    return unavailable("not sent", `PostgreSQL at ${where} answered as a standby (read-only): the primary moved (a failover or switchover?); reconnecting to the new primary, nothing was changed`, true);
  if (code === "57P03" || CONNECT_CODES.has(code))
    return unavailable("not sent", `cannot reach PostgreSQL at ${where} (${code}): is it running and reachable? nothing was changed; the store reconnects by itself`);
  if (code === "57P01" || code === "57P02" || code.startsWith("08") || BROKEN_CODES.has(code))
    return unavailable("maybe applied", `lost the connection to PostgreSQL at ${where} (${code}: ${detail.replace(/postgres(ql)?:\/\/\S*/gi, "")}); the store reconnects by itself`);
  if (code === "53100")
    return { kind: "not sent", standby: false, error: new StoreUnavailableError("store_full", `PostgreSQL at ${where} is out of disk space: free space on the database server; nothing was changed`, code) };
  if (code === "53300" || code === "55P03")
    return { kind: "not sent", standby: false, error: new StoreUnavailableError("store_busy", `PostgreSQL at ${where} is busy (${code === "53300" ? "too many connections" : "a lock is held"}); nothing was changed, try again`, code) };
  return undefined;
}
