// The admin listener's Hono app: /healthz open, /api/v1 behind the admin token, /agent/v1
// behind node credentials (the join token admits new nodes only), one error shape everywhere, a body limit on every route.
//
// src/api is the head node's HTTP face for operators and agents: Hono apps, auth, sessions, error
// mapping and the listener adapter. It may import control (the parts it serves: each API names the
// narrow interface it uses), protocol, config, lib and the HTTP/1.1 server; never the store
// (control hides it), never app, cli, agent or sim. app/head.ts builds it and hands it only what
// it serves.

import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { Logger } from "pino";
import type { LeadershipView } from "../control/leadership";
import type { Scheduler } from "../lib/scheduler";
import type { NodeAdmission, RouterExposure } from "../protocol/views";
import { type AdminControl, type JoinTokenRotation, adminRoutes } from "./admin";
import { type AgentControl, agentRoutes } from "./agent";
import { requireToken } from "./auth";
import { errorBody, handleError } from "./errors";
import type { History } from "./history";
import { ledgerCheckRoutes } from "./ledger-check";
import type { LedgerCheckSource } from "../protocol/ledger-check";
import { type UiControl, uiRoutes } from "./ui";

export interface AppOptions {
  /** The operator's side of the control plane (admin API and dashboard), and whether it leads (/healthz). */
  control: AdminControl & UiControl & { leadership: LeadershipView };
  /** The agents' side. */
  agent: AgentControl;
  log: Logger;
  adminToken: string;
  /** How `join-token rotate` replaces the join token (the assembly knows where it lives). */
  joinTokenRotation: JoinTokenRotation;
  version: string;
  /** Largest accepted request body, bytes. */
  maxBodyBytes: number;
  /** How the router listens, for the summary (known once it has started). */
  routerExposure?: () => RouterExposure | undefined;
  /** How new nodes are admitted, for the summary. */
  nodeAdmission?: () => NodeAdmission | undefined;
  /** Times each request for its log line, and the dashboard's pages and sessions. */
  scheduler: Pick<Scheduler, "mono" | "now">;
  /** The dashboard's last hour (sampled by the assembly); the dashboard keeps an empty one without. */
  history?: History;
  /** This control plane's router, for GET /api/v1/usage/check (503 without). */
  ledgerCheck?: LedgerCheckSource;
}

export function buildAdminApp(o: AppOptions): Hono {
  const app = new Hono();
  const maxSize = o.maxBodyBytes;
  const clock = o.scheduler;

  app.use(async (c, next) => {
    const started = clock.mono();
    await next();
    const ms = Math.round((clock.mono() - started) * 10) / 10;
    const quiet = c.req.path === "/agent/v1/heartbeat" || c.req.path === "/healthz" || (c.req.method === "GET" && c.res.status < 400);
    o.log[quiet ? "debug" : "info"]({ method: c.req.method, path: c.req.path, status: c.res.status, ms }, "request");
  });
  app.use(
    bodyLimit({
      maxSize,
      onError: (c) => c.json(errorBody("body_too_large", `request body exceeds ${maxSize} bytes`), 413),
    }),
  );

  app.get("/healthz", (c) => {
    const l = o.control.leadership.get();
    const body = { status: l.leading ? ("ok" as const) : ("standing by" as const), version: o.version, leading: l.leading, epoch: l.epoch, ...(l.name ? { name: l.name } : {}), ...(l.barred !== undefined ? { barred: l.barred } : {}) };
    // Only the leader check fails on a standby: it is healthy, it just does not lead.
    const leader = c.req.query("leader");
    const asked = leader !== undefined && leader !== "0" && leader !== "false";
    return c.json(body, asked && !l.leading ? 503 : 200);
  });


  app.use("/api/v1/*", requireToken("admin", o.adminToken));
  app.route("/api/v1", adminRoutes(o.control, o.log, o.joinTokenRotation, o.routerExposure, o.nodeAdmission));
  app.route("/api/v1", ledgerCheckRoutes(o.ledgerCheck));

  // The agent API checks its own tokens: a node credential, or the join token for a first
  // heartbeat (the assembly hands it the join token in force).
  app.route("/agent/v1", agentRoutes(o.agent));

  // The dashboard: admin token only, by cookie from its login form or by bearer header.
  app.route("/ui", uiRoutes({ control: o.control, clock: o.scheduler, adminToken: o.adminToken, ...(o.history ? { history: o.history } : {}) }));

  app.notFound((c) => c.json(errorBody("not_found", `no route ${c.req.method} ${c.req.path}`), 404));
  app.onError((err, c) => handleError(err, c, o.log));
  return app;
}
