// The agent API: heartbeats from node agents and the assignments long poll, behind the join
// token. A heartbeat reports the node's inventory and replicas; every answer is the complete
// set of replicas the node should run.

import { Hono } from "hono";
import type { Controller } from "../control/controller";
import { AssignmentsQuery, HeartbeatRequest } from "../protocol/heartbeat";
import { parseJsonBody } from "./errors";

export function agentRoutes(ctl: Controller): Hono {
  const app = new Hono();
  app.post("/heartbeat", async (c) => {
    const hb = HeartbeatRequest.parse(parseJsonBody(await c.req.text()));
    return c.json(ctl.heartbeat(hb));
  });
  app.get("/assignments", async (c) => {
    const q = AssignmentsQuery.parse(c.req.query());
    return c.json(await ctl.waitForAssignments(q.node, q.generation, q.wait_ms, c.req.raw.signal));
  });
  return app;
}
