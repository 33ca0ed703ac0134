// The agent API: heartbeats from node agents and the assignments long poll. The join token
// only admits a new node, whose first heartbeat is answered with the node's own credential;
// from then on the node presents that credential and speaks only for itself. Every answer is
// the complete set of replicas the node should run.

import { Hono, type Context } from "hono";
import { getConnInfo } from "hono/bun";
import { isIP } from "node:net";
import type { Controller } from "../control/controller";
import { AGENT_CREDENTIAL_FILE } from "../control/controller";
import { AssignmentsQuery, HeartbeatRequest } from "../protocol/heartbeat";
import { bearerToken, markAuthenticated } from "./auth";
import { HttpError, errorBody, parseJsonBody } from "./errors";
import { TokenBuckets } from "./ratelimit";

type Principal = { kind: "join" } | { kind: "node"; node: string };
type Env = { Variables: { principal: Principal } };

/**
 * An address in one spelling: IPv4-mapped IPv6 as IPv4, IPv6 compressed and lower-case, no
 * brackets; a host name lower-case. Two spellings of one address compare equal after this.
 */
export function canonicalAddress(raw: string): string {
  let a = raw.trim().replace(/^\[|\]$/g, "").toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1]!;
  if (isIP(a) === 6) {
    try {
      a = new URL(`http://[${a}]/`).hostname.replace(/^\[|\]$/g, "");
    } catch {
      // Not parseable after all: compared as given.
    }
    const m2 = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(a);
    if (m2) {
      const hi = parseInt(m2[1]!, 16);
      const lo = parseInt(m2[2]!, 16);
      return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
    }
  }
  return a;
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

export function agentRoutes(ctl: Controller): Hono<Env> {
  const app = new Hono<Env>();
  const buckets = new TokenBuckets(() => ctl.opts.scheduler.now());
  /** Each node's last heartbeat body and its parse (see /heartbeat). */
  const lastBody = new Map<string, { text: string; hb: HeartbeatRequest }>();

  /** 429 with Retry-After when this node has used up its requests; undefined when it may go on. */
  const limited = (c: Context, node: string): Response | undefined => {
    const { heartbeatRate, heartbeatBurst } = ctl.nodePolicy;
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
    if (ctl.isJoinToken(presented)) {
      c.set("principal", { kind: "join" });
      markAuthenticated(c);
    } else {
      const node = await ctl.nodeForCredential(presented);
      if (node === undefined)
        return unauthorized(
          c,
          `wrong bearer token: neither the join token nor a node credential this head node knows (a deleted node must join again: remove the agent's <state-dir>/${AGENT_CREDENTIAL_FILE} and restart it)`,
        );
      c.set("principal", { kind: "node", node });
      markAuthenticated(c);
      // Before the body is read: a node that floods costs a hash lookup, not a parse.
      const r = limited(c, node);
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
    const hb = prior !== undefined && prior.text === text ? prior.hb : HeartbeatRequest.parse(parseJsonBody(text));
    if (principal.kind === "node" && prior?.hb !== hb) lastBody.set(principal.node, { text, hb });
    if (principal.kind === "node" && principal.node !== hb.node)
      throw new HttpError(403, "forbidden", `node: this credential belongs to node ${principal.node}, not ${hb.node}; a node speaks only for itself`);
    const trust = await ctl.nodeTrust(hb.node);
    if (principal.kind === "join") {
      // The same join sent again (its answer was lost) carries the credential the node chose
      // and now holds; any other join for a name that has a credential is refused.
      const holder = hb.join_credential !== undefined ? await ctl.nodeForCredential(hb.join_credential) : undefined;
      const again = trust.hasCredential && holder === hb.node;
      if (holder !== undefined && holder !== hb.node)
        throw new HttpError(409, "credential_in_use", "join_credential: another node holds this credential; a joining agent chooses a new random one (remove its <state-dir>/node.joining and restart it)");
      if (trust.hasCredential && !again)
        throw new HttpError(
          409,
          "node_exists",
          `node: node ${hb.node} has already joined and holds its own credential; the join token cannot speak for it. To join it again: run \`llmgw nodes delete ${hb.node}\` on the head node, then remove the agent's credential file (<state-dir>/${AGENT_CREDENTIAL_FILE}, by default ./llmgw-agent/${AGENT_CREDENTIAL_FILE}) on the node and restart the agent`,
        );
      const { maxNodes } = ctl.nodePolicy;
      if (!trust.exists && (await ctl.nodeCount()) >= maxNodes)
        throw new HttpError(403, "node_limit", `node: this head node already has ${maxNodes} nodes, its limit (serve --max-nodes); delete one (llmgw nodes delete NAME) or raise --max-nodes`);
      const r = limited(c, hb.node);
      if (r) return r;
    }
    // The data-plane address is where the router sends prompts: a node may claim only the
    // address it speaks from, or one an operator allowed for it by name.
    const source = sourceAddress(c);
    const reported = canonicalAddress(hb.address);
    const allowed = trust.allowedAddress !== undefined ? canonicalAddress(trust.allowedAddress) : undefined;
    if (reported !== source && reported !== allowed) {
      const from = source ?? "an unknown address";
      throw new HttpError(
        403,
        "address_mismatch",
        `address: node ${hb.node} reports ${hb.address.slice(0, 80)} but its heartbeat comes from ${from}; report the address it heartbeats from (llmgw agent --address), or allow this one on the head node: llmgw nodes allow-address ${hb.node} ${hb.address.slice(0, 80)}`,
      );
    }
    return c.json(await (principal.kind === "join" ? ctl.join(hb) : ctl.heartbeat(hb)));
  });

  app.get("/assignments", async (c) => {
    const principal = c.get("principal");
    if (principal.kind !== "node")
      throw new HttpError(403, "forbidden", "the join token only admits a new node: read assignments with the node's own credential (from its first heartbeat's answer)");
    const q = AssignmentsQuery.parse(c.req.query());
    if (q.node !== principal.node) throw new HttpError(403, "forbidden", `node: this credential belongs to node ${principal.node}; it cannot read the assignments of ${q.node}`);
    return c.json(await ctl.waitForAssignments(q.node, q.generation, q.wait_ms, c.req.raw.signal));
  });
  return app;
}
