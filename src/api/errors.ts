// The admin and agent APIs' one error shape, and the mapping from what went wrong to a status
// code: bad input 400 naming every field, missing names 404, conflicts 409, a heartbeat's refusal
// by its code (control/admission.ts). Nothing else leaks: an unexpected error is logged with its
// stack and answered with a plain 500.

import type { Context } from "hono";
import type { Logger } from "pino";
import { ZodError } from "zod";
import type { ApiError } from "../protocol/views";
import { loneSurrogatePath } from "../protocol/common";
import { type CatalogIssue, catalogPath } from "../protocol/catalog";
import { AdmissionRefused, type RefusalCode } from "../control/admission";
import { ConflictError, InvalidRequestError, NotFoundError, StoreUnavailableError } from "../control/errors";

export class HttpError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 409 | 413 | 415 | 503,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Every problem of a catalog body, each path as a person reads it (catalogPath): 400, or 409
 * when each problem is a conflict with the stored catalog.
 */
export class CatalogProblems extends Error {
  readonly body: ApiError;
  constructor(
    issues: CatalogIssue[],
    models?: unknown,
    readonly status: 400 | 409 = 400,
  ) {
    const list = issues.map((i) => ({ path: catalogPath(i.path, models), message: i.message }));
    const first = list[0];
    const more = list.length > 1 ? ` (and ${list.length - 1} more problem${list.length > 2 ? "s" : ""})` : "";
    const message = first ? `${first.path}: ${first.message}${more}` : "invalid request";
    super(message);
    this.body = { error: { code: status === 409 ? "conflict" : "invalid_request", message, issues: list } };
  }
}

/** The status of each admission refusal: who may not speak so is 403, a name or credential someone holds is 409. */
const REFUSAL_STATUS: Record<RefusalCode, 403 | 409> = { forbidden: 403, credential_in_use: 409, node_exists: 409, node_limit: 403, address_mismatch: 403, protocol_mismatch: 403 };

export function issuePath(path: readonly PropertyKey[]): string {
  return path.length === 0 ? "(body)" : path.map(String).join(".");
}

export function zodToApiError(err: ZodError, prefix: (string | number)[] = []): ApiError {
  const issues = err.issues.map((i) => ({ path: issuePath([...prefix, ...i.path]), message: i.message }));
  const first = issues[0];
  const more = issues.length > 1 ? ` (and ${issues.length - 1} more problem${issues.length > 2 ? "s" : ""})` : "";
  return {
    error: { code: "invalid_request", message: first ? `${first.path}: ${first.message}${more}` : "invalid request", issues },
  };
}

export function errorBody(code: string, message: string): ApiError {
  return { error: { code, message } };
}

export function handleError(err: unknown, c: Context, log: Logger): Response {
  if (err instanceof ZodError) return c.json(zodToApiError(err), 400);
  if (err instanceof CatalogProblems) return c.json(err.body, err.status);
  if (err instanceof HttpError) return c.json(errorBody(err.code, err.message), err.status);
  if (err instanceof AdmissionRefused) return c.json(errorBody(err.code, err.message), REFUSAL_STATUS[err.code]);
  if (err instanceof NotFoundError) return c.json(errorBody("not_found", err.message), 404);
  if (err instanceof InvalidRequestError) return c.json({ error: { code: "invalid_request", message: err.message, issues: [{ path: issuePath(err.path), message: err.message }] } }, 400);
  if (err instanceof ConflictError)
    return c.json({ error: { code: "conflict", message: err.message, issues: [{ path: issuePath(err.path), message: err.message }] } }, 409);
  if (err instanceof StoreUnavailableError) {
    log.error({ code: err.code, sqlite: err.driverCode, method: c.req.method, path: c.req.path }, `store write failed: ${err.message}`);
    c.header("Retry-After", "5");
    return c.json(errorBody(err.code, err.message), 503);
  }
  log.error({ err, method: c.req.method, path: c.req.path }, "request failed");
  return c.json(errorBody("internal", "internal error; see the server log"), 500);
}

/**
 * Parses a JSON body, refusing strings with lone surrogates (see loneSurrogatePath); the rest
 * is checked by the route's schema.
 */
export function parseJsonBody(text: string, render: (path: (string | number)[], body: unknown) => string = issuePath): unknown {
  if (text.trim() === "") throw new HttpError(400, "invalid_request", "(body): empty body, expected JSON");
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new HttpError(400, "invalid_json", `(body): malformed JSON: ${(e as Error).message}`);
  }
  const bad = loneSurrogatePath(v);
  if (bad) throw new HttpError(400, "invalid_request", `${render(bad, v).toWellFormed()}: holds invalid Unicode (a lone surrogate)`);
  return v;
}
