// Who may say what, as one pure decision: admit(principal, heartbeat, trust, policy, counts)
// answers whether a heartbeat is taken, or the domain refusal (AdmissionRefused) the agent API
// maps once to its status and code (api/errors.ts). The join token only admits a new node;
// from then on the node presents its own credential and speaks only for itself, and reports only
// the address it speaks from or one an operator allowed for it. Also here: the rule both store
// dialects and the in-memory image apply inside their transaction when a join names a node that
// exists (joinRefused), and the refusal the intake gives when a store found a name taken.

import { canonicalAddress } from "../lib/net";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import { UNSTATED_PROTOCOL, agentProtocolProblem } from "../protocol/skew";
import type { NodeTrust } from "./types";

/** Who may join and how often a node may call: `serve --approve-nodes`, `--max-nodes`, `--heartbeat-rate`, `--heartbeat-burst`. */
export interface NodePolicy {
  /** A new node waits as pending until `llmgw nodes approve NAME`. */
  approveNodes: boolean;
  /** Nodes the head node accepts in all; a new one beyond is refused. */
  maxNodes: number;
  /** Agent API requests (heartbeats and assignment polls) per second per node, sustained. */
  heartbeatRate: number;
  /** How many may come at once above that rate. */
  heartbeatBurst: number;
}

/** Where an agent keeps its credential, relative to its state dir; named in refusals so the operator knows what to remove. */
export const AGENT_CREDENTIAL_FILE = "node.credential";

/** Who speaks: the join token (a node's first heartbeat) or a node by its credential; and from which address the request came, when the listener says. */
export type Principal = ({ kind: "join" } | { kind: "node"; node: string }) & { from?: string };

/** What the store says of the names a heartbeat uses: the node's trust, and which node holds the credential a join proposes. */
export interface HeartbeatTrust extends NodeTrust {
  /** The node holding hb.join_credential (a join only; undefined: nobody, or no credential proposed). */
  credentialHolder?: string;
}

/** How many nodes the head node holds (read only for a join of a new name). */
export interface AdmissionCounts {
  nodes: number;
}

export type RefusalCode = "forbidden" | "credential_in_use" | "node_exists" | "node_limit" | "address_mismatch" | "protocol_mismatch";

/** A heartbeat refused for who sent it or what it claims; the message names the field and what to do. */
export class AdmissionRefused extends Error {
  constructor(
    readonly code: RefusalCode,
    message: string,
  ) {
    super(message);
  }
}

export type Admission = { accepted: true } | { accepted: false; refusal: AdmissionRefused };

/** The refusal of the join token for a node that holds its own credential: it says how to join it again. */
export function nodeExists(node: string): AdmissionRefused {
  return new AdmissionRefused(
    "node_exists",
    `node: node ${node} has already joined and holds its own credential; the join token cannot speak for it. To join it again: run \`llmgw nodes delete ${node}\` on the head node, then remove the agent's credential file (<state-dir>/${AGENT_CREDENTIAL_FILE}, by default ./llmgw-agent/${AGENT_CREDENTIAL_FILE}) on the node and restart the agent`,
  );
}

/**
 * Whether the heartbeat is taken. `counts` is read only for a join of a name that does not exist
 * (pass undefined otherwise). A join sent again with the credential the agent chose (its answer
 * was lost) holds that very credential and is taken as the same join.
 */
export function admit(
  principal: Principal,
  hb: Pick<HeartbeatRequest, "node" | "address" | "join_credential" | "protocol">,
  trust: HeartbeatTrust,
  policy: Pick<NodePolicy, "maxNodes">,
  counts: AdmissionCounts | undefined,
): Admission {
  const refuse = (code: RefusalCode, message: string): Admission => ({ accepted: false, refusal: new AdmissionRefused(code, message) });
  // First: an agent this control plane cannot understand is told which side to upgrade, whatever else it says.
  const skew = protocolRefusal(hb.protocol ?? UNSTATED_PROTOCOL, hb.node);
  if (skew) return { accepted: false, refusal: skew };
  if (principal.kind === "node" && principal.node !== hb.node) return refuse("forbidden", `node: this credential belongs to node ${principal.node}, not ${hb.node}; a node speaks only for itself`);
  if (principal.kind === "join") {
    const holder = trust.credentialHolder;
    if (holder !== undefined && holder !== hb.node)
      return refuse("credential_in_use", "join_credential: another node holds this credential; a joining agent chooses a new random one (remove its <state-dir>/node.joining and restart it)");
    const again = trust.hasCredential && holder === hb.node;
    if (trust.hasCredential && !again) return { accepted: false, refusal: nodeExists(hb.node) };
    if (!trust.exists && counts !== undefined && counts.nodes >= policy.maxNodes)
      return refuse("node_limit", `node: this head node already has ${policy.maxNodes} nodes, its limit (serve --max-nodes); delete one (llmgw nodes delete NAME) or raise --max-nodes`);
  }
  // The data-plane address is where the router sends prompts: a node may claim only the address
  // it speaks from, or one an operator allowed for it by name.
  const reported = canonicalAddress(hb.address);
  const allowed = trust.allowedAddress !== undefined ? canonicalAddress(trust.allowedAddress) : undefined;
  if (reported !== principal.from && reported !== allowed) {
    const from = principal.from ?? "an unknown address";
    const claimed = hb.address.slice(0, 80);
    return refuse(
      "address_mismatch",
      `address: node ${hb.node} reports ${claimed} but its heartbeat comes from ${from}; report the address it heartbeats from (llmgw agent --address), or allow this one on the head node: llmgw nodes allow-address ${hb.node} ${claimed}`,
    );
  }
  return { accepted: true };
}

/** The refusal of an agent speaking a protocol this control plane does not accept (protocol/skew.ts), or undefined. */
export function protocolRefusal(protocol: number, node?: string): AdmissionRefused | undefined {
  const problem = agentProtocolProblem(protocol);
  return problem === undefined ? undefined : new AdmissionRefused("protocol_mismatch", node === undefined ? problem : `${problem} (node ${node})`);
}

/** Whether a join needs the node count to be decided: only one for a name that does not exist. */
export function needsCount(principal: Principal, trust: NodeTrust): boolean {
  return principal.kind === "join" && !trust.exists;
}

/**
 * Whether the join token is refused for a node that exists (stores apply this inside their
 * transaction): it is, once the node holds a credential, unless the join carries that same
 * credential. A joining agent chooses its credential itself and sends it with every try
 * (HeartbeatRequest.join_credential), so a join whose answer was lost (a connection cut, a store
 * failover after the commit) is answered when sent again; anyone else with the join token is
 * refused the name.
 */
export function joinRefused(storedHash: string | null, joinHash: string): boolean {
  return storedHash !== null && storedHash !== joinHash;
}
