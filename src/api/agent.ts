// The agent API: heartbeats from node agents and the assignments long poll. The join token
// only admits a new node, whose first heartbeat is answered with the node's own credential;
// from then on the node presents that credential and speaks only for itself. Every answer is
// the complete set of replicas the node should run.

import { Hono, type Context } from "hono";
import { getConnInfo } from "hono/bun";
import { AGENT_CREDENTIAL_FILE, type NodePolicy, type Principal, protocolRefusal } from "../control/admission";
import type { NodeIntake } from "../control/intake";
import type { NodeIdentity } from "../control/node-identity";
import { canonicalAddress } from "../lib/net";
import type { Scheduler } from "../lib/scheduler";
import { AssignmentsQuery, HeartbeatRequest } from "../protocol/heartbeat";
import { statedProtocol } from "../protocol/skew";
import { bearerToken, markAuthenticated } from "./auth";
import { HttpError, errorBody, parseJsonBody } from "./errors";
import { TokenBuckets } from "./ratelimit";

type Env = { Variables: { principal: Principal } };

/** What the agent API asks of the control plane. */
export interface AgentControl {
  /** Who presents a bearer token: the join token in force, or a node by its credential. */
  identity: Pick<NodeIdentity, "identify">;
  intake: Pick<NodeIntake, "receive" | "waitForAssignments">;
  policy: Pick<NodePolicy, "heartbeatRate" | "heartbeatBurst">;
  /** Time for the per-node rate limits. */
  clock: Pick<Scheduler, "now">;
}

/** The peer's address as the listener saw it, or undefined when the listener does not say. */
function sourceAddress(c: Context): string | undefined {
  try {
    const a = getConnInfo(c).remote.address;
    return a ? canonicalAddress(a) : undefined;
  } catch {
    return undefined;
  }
}

function unauthorized(c: Context, message: string): Response {
  c.header("WWW-Authenticate", 'Bearer realm="llmgw"');
  return c.json(errorBody("unauthorized", message), 401);
}

/**
 * A heartbeat's body under its schema. A newer agent's message may not fit this control plane's
 * schema at all: then its protocol, when it is one this control plane refuses, is the answer
 * (which side to upgrade) rather than the schema's complaint.
 */
function parseHeartbeat(text: string): HeartbeatRequest {
  const body = parseJsonBody(text);
  const r = HeartbeatRequest.safeParse(body);
  if (r.success) return r.data;
  throw protocolRefusal(statedProtocol(body)) ?? r.error;
}

export function agentRoutes(ctl: AgentControl): Hono<Env> {
  const app = new Hono<Env>();
  const buckets = new TokenBuckets(() => ctl.clock.now());
  /** Each node's last heartbeat body and its parse (see /heartbeat). */
  const lastBody = new Map<string, { text: string; hb: HeartbeatRequest }>();

  /** 429 with Retry-After when this node has used up its requests; undefined when it may go on. */
  const limited = (c: Context, node: string): Response | undefined => {
    const { heartbeatRate, heartbeatBurst } = ctl.policy;
    const wait = buckets.take(node, heartbeatRate, heartbeatBurst);
    if (wait === 0) return undefined;
    c.header("Retry-After", String(Math.max(1, Math.ceil(wait / 1000))));
    return c.json(
      errorBody("rate_limited", `node ${node} sends more than ${heartbeatRate} agent API requests a second (burst ${heartbeatBurst}; serve --heartbeat-rate, --heartbeat-burst): retry in ${Math.ceil(wait / 1000)}s`),
      429,
    );
  };

  app.use("*", async (c, next) => {
    const presented = bearerToken(c.req.header("authorization"));
    if (presented === undefined) return unauthorized(c, "missing bearer token: this route needs the node's credential, or the join token for a node's first heartbeat");
    const principal = await ctl.identity.identify(presented);
    if (principal === undefined)
      return unauthorized(
        c,
        `wrong bearer token: neither the join token nor a node credential this head node knows (a deleted node must join again: remove the agent's <state-dir>/${AGENT_CREDENTIAL_FILE} and restart it)`,
      );
    c.set("principal", principal);
    markAuthenticated(c);
    // Before the body is read: a node that floods costs a hash lookup, not a parse.
    if (principal.kind === "node") {
      const r = limited(c, principal.node);
      if (r) return r;
    }
    await next();
  });

  app.post("/heartbeat", async (c) => {
    const principal = c.get("principal");
    const text = await c.req.text();
    // A node's heartbeat is most often byte for byte its previous one: that is answered from the
    // parse already made, so the common case skips the JSON parse and validation (the costliest
    // part of a heartbeat). Only a credentialed node's body is kept, one per node.
    const prior = principal.kind === "node" ? lastBody.get(principal.node) : undefined;
    const hb = prior !== undefined && prior.text === text ? prior.hb : parseHeartbeat(text);
    if (principal.kind === "node" && prior?.hb !== hb) lastBody.set(principal.node, { text, hb });
    // A join counts against the name it joins as, refused or not: a flood of joins costs a parse.
    if (principal.kind === "join") {
      const r = limited(c, hb.node);
      if (r) return r;
    }
    // Who may say what is the control plane's one decision (control/admission.ts); a refusal is mapped in errors.ts.
    const source = sourceAddress(c);
    return c.json(await ctl.intake.receive({ ...principal, ...(source !== undefined ? { from: source } : {}) }, hb));
  });

  app.get("/assignments", async (c) => {
    const principal = c.get("principal");
    if (principal.kind !== "node")
      throw new HttpError(403, "forbidden", "the join token only admits a new node: read assignments with the node's own credential (from its first heartbeat's answer)");
    const q = AssignmentsQuery.parse(c.req.query());
    if (q.node !== principal.node) throw new HttpError(403, "forbidden", `node: this credential belongs to node ${principal.node}; it cannot read the assignments of ${q.node}`);
    return c.json(await ctl.intake.waitForAssignments(q.node, q.generation, q.wait_ms, c.req.raw.signal));
  });
  return app;
}
