// The agent API: heartbeats from node agents, behind the join token. A heartbeat reports the
// node's inventory and replicas; the answer is what the node should run.

import { Hono } from "hono";
import type { Controller } from "../control/controller";
import { HeartbeatRequest } from "../protocol/heartbeat";
import { HttpError } from "./errors";

export function agentRoutes(ctl: Controller): Hono {
  const app = new Hono();
  app.post("/heartbeat", async (c) => {
    let body: unknown;
    try {
      body = await c.req.json();
    } catch (e) {
      throw new HttpError(400, "invalid_json", `(body): malformed JSON: ${(e as Error).message}`);
    }
    const hb = HeartbeatRequest.parse(body);
    return c.json(ctl.heartbeat(hb));
  });
  return app;
}
