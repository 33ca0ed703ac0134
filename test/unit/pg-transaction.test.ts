// The PostgreSQL store's transaction bodies (src/store/pg/transaction.ts): a body that failed
// because its connection is gone stays pending, so postgres-js writes no ROLLBACK to the closed
// socket; every other outcome, the server's refusals and the store's own errors included, passes
// through so that the transaction is rolled back on its live connection. The end-to-end behaviour
// against a real server is in test/integration/store-pg-faults.test.ts.

import { describe, expect, test } from "bun:test";
import { DrizzleQueryError } from "drizzle-orm/errors";
import postgres from "postgres";
import { FencedError } from "../../src/control/errors";
import { PgDeadlineError } from "../../src/store/pg/errors";
import { connectionGone, txBody } from "../../src/store/pg/transaction";

/** An error as postgres-js raises it: Errors.connection for a lost connection, Errors.generic for its own refusals. */
const driver = (code: string, message = code) => Object.assign(new Error(message), { code, errno: code });
const serverSaid = (code: string) => Object.assign(Object.create(postgres.PostgresError.prototype) as Error, { name: "PostgresError", code, message: `server: ${code}`, severity: "FATAL" });

/** Where p stands once every queued job has run. */
async function state(p: Promise<unknown>): Promise<string> {
  p.catch(() => {});
  await new Promise((r) => setImmediate(r));
  return Bun.peek.status(p);
}

describe("connectionGone", () => {
  test("a connection closed, destroyed or reset, as postgres-js or the socket reports it, wrapped by drizzle or not", () => {
    for (const code of ["CONNECTION_CLOSED", "CONNECTION_DESTROYED", "CONNECTION_ENDED", "ECONNRESET", "EPIPE", "ETIMEDOUT"]) {
      expect(connectionGone(driver(code))).toBe(true);
      expect(connectionGone(new DrizzleQueryError("SELECT 1", [], driver(code)))).toBe(true);
    }
  });

  test("not the server's answers (even a FATAL one: the connection said it), the driver's own refusals, or the store's errors", () => {
    for (const code of ["57P01", "25P03", "40001", "23505", "25006"]) expect(connectionGone(serverSaid(code))).toBe(false);
    expect(connectionGone(new DrizzleQueryError("SELECT 1", [], serverSaid("40P01")))).toBe(false);
    expect(connectionGone(driver("MAX_PARAMETERS_EXCEEDED"))).toBe(false);
    expect(connectionGone(driver("UNSAFE_TRANSACTION"))).toBe(false);
    expect(connectionGone(new FencedError(3))).toBe(false);
    expect(connectionGone(new PgDeadlineError(1000))).toBe(false);
    expect(connectionGone(new TypeError("x is undefined"))).toBe(false);
    expect(connectionGone(undefined)).toBe(false);
  });
});

describe("txBody", () => {
  test("its body's answer, and its body's failure when the connection still stands, pass through", async () => {
    expect(await txBody(async (n: number) => n + 1)(1)).toBe(2);
    const refused = serverSaid("23505");
    expect(await txBody(async () => Promise.reject(refused))(0).catch((e: unknown) => e)).toBe(refused);
    const fenced = new FencedError(2);
    expect(await txBody(async () => Promise.reject(fenced))(0).catch((e: unknown) => e)).toBe(fenced);
  });

  test("a failure because the connection is gone leaves the body pending: begin() rejects by itself, and no ROLLBACK is sent", async () => {
    expect(await state(txBody(async () => Promise.reject(driver("CONNECTION_CLOSED")))(0))).toBe("pending");
    expect(await state(txBody(async () => Promise.reject(new DrizzleQueryError("UPDATE nodes …", [], driver("ECONNRESET"))))(0))).toBe("pending");
    // The same body, its connection standing: it rejects.
    expect(await state(txBody(async () => Promise.reject(serverSaid("57014")))(0))).toBe("rejected");
  });
});
