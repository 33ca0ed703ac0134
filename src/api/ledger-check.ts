// GET /api/v1/usage/check: per replica, the usage ledger against the engine's own token
// counters, as this control plane's router measures them (router/reconcile-ledger.ts). What
// `llmgw usage --check` shows. Each control plane answers for its own router.

import { Hono } from "hono";
import type { LedgerCheckSource } from "../protocol/ledger-check";
import { HttpError } from "./errors";

/** The route, under /api/v1 (behind the admin token); without a router to ask it answers 503. */
export function ledgerCheckRoutes(source: LedgerCheckSource | undefined): Hono {
  const app = new Hono();
  app.get("/usage/check", async (c) => {
    if (source === undefined) throw new HttpError(503, "unavailable", "this server runs no router, so there is no ledger to check against the engines");
    return c.json(await source.ledgerCheck());
  });
  return app;
}
