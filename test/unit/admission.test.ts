// Who may say what, as one pure decision (control/admission.ts): the checks the agent API made
// itself (a node speaks only for itself; the join token never for a node that holds its own
// credential, unless the join carries that very credential; no new node past --max-nodes; a node
// reports only the address it speaks from or one allowed for it), answered as a domain refusal the
// API maps once to its status.

import { describe, expect, test } from "bun:test";
import { AdmissionRefused, type HeartbeatTrust, type Principal, admit, joinRefused, needsCount, nodeExists } from "../../src/control/admission";
import { heartbeat } from "../helpers/fleet";

const hb = { ...heartbeat({ name: "gpu-01" }), address: "10.0.0.7" };
const from = "10.0.0.7";
const asNode: Principal = { kind: "node", node: "gpu-01", from };
const asJoin: Principal = { kind: "join", from };
const known: HeartbeatTrust = { exists: true, hasCredential: true, adminState: "none", allowedAddress: undefined };
const unknown: HeartbeatTrust = { exists: false, hasCredential: false, adminState: undefined, allowedAddress: undefined };
const policy = { maxNodes: 3 };

/** The refusal's code and message, or "accepted". */
function verdict(p: Principal, h: typeof hb, trust: HeartbeatTrust, nodes?: number): string | { code: string; message: string } {
  const a = admit(p, h, trust, policy, nodes === undefined ? undefined : { nodes });
  if (a.accepted) return "accepted";
  expect(a.refusal).toBeInstanceOf(AdmissionRefused);
  return { code: a.refusal.code, message: a.refusal.message };
}

describe("admit", () => {
  test("a node's own heartbeat from its own address is taken; another node's credential is forbidden", () => {
    expect(verdict(asNode, hb, known)).toBe("accepted");
    expect(verdict({ kind: "node", node: "gpu-02", from }, hb, known)).toEqual({ code: "forbidden", message: "node: this credential belongs to node gpu-02, not gpu-01; a node speaks only for itself" });
  });

  test("a join for a new name is taken below the node limit, refused at it; the count is asked for only then", () => {
    expect(needsCount(asJoin, unknown)).toBe(true);
    expect(needsCount(asJoin, known)).toBe(false);
    expect(needsCount(asNode, unknown)).toBe(false);
    expect(verdict(asJoin, hb, unknown, 2)).toBe("accepted");
    expect(verdict(asJoin, hb, unknown, 3)).toEqual({
      code: "node_limit",
      message: "node: this head node already has 3 nodes, its limit (serve --max-nodes); delete one (llmgw nodes delete NAME) or raise --max-nodes",
    });
    // A name that exists (without a credential yet) is no new node.
    expect(verdict(asJoin, hb, { ...unknown, exists: true }, 3)).toBe("accepted");
  });

  test("the join token cannot speak for a node holding its own credential, unless the join carries that very credential", () => {
    expect(verdict(asJoin, hb, known)).toEqual({ code: "node_exists", message: nodeExists("gpu-01").message });
    expect(nodeExists("gpu-01").message).toContain("llmgw nodes delete gpu-01");
    expect(nodeExists("gpu-01").message).toContain("node.credential");
    // The same join sent again: the credential it proposes is the one gpu-01 holds.
    expect(verdict(asJoin, hb, { ...known, credentialHolder: "gpu-01" })).toBe("accepted");
    // Another node's credential proposed by a join.
    expect(verdict(asJoin, hb, { ...unknown, credentialHolder: "gpu-02" }, 0)).toEqual({
      code: "credential_in_use",
      message: "join_credential: another node holds this credential; a joining agent chooses a new random one (remove its <state-dir>/node.joining and restart it)",
    });
  });

  test("a node reports only the address it speaks from, in any spelling, or one allowed for it", () => {
    expect(verdict(asNode, { ...hb, address: "::ffff:10.0.0.7" }, known)).toBe("accepted");
    const elsewhere = { ...hb, address: "192.168.1.5" };
    expect(verdict(asNode, elsewhere, known)).toEqual({
      code: "address_mismatch",
      message: "address: node gpu-01 reports 192.168.1.5 but its heartbeat comes from 10.0.0.7; report the address it heartbeats from (llmgw agent --address), or allow this one on the head node: llmgw nodes allow-address gpu-01 192.168.1.5",
    });
    expect(verdict(asNode, elsewhere, { ...known, allowedAddress: "192.168.1.5" })).toBe("accepted");
    expect(verdict({ kind: "node", node: "gpu-01" }, hb, known)).toEqual(expect.objectContaining({ code: "address_mismatch", message: expect.stringContaining("comes from an unknown address") }));
  });

  test("the order of the checks: who speaks first, then the name, then the limit, then the address", () => {
    const wrongAddress = { ...hb, address: "192.168.1.5" };
    expect(verdict({ kind: "node", node: "gpu-02", from }, wrongAddress, known)).toEqual(expect.objectContaining({ code: "forbidden" }));
    expect(verdict(asJoin, wrongAddress, known)).toEqual(expect.objectContaining({ code: "node_exists" }));
    expect(verdict(asJoin, wrongAddress, unknown, 3)).toEqual(expect.objectContaining({ code: "node_limit" }));
  });
});

describe("joinRefused, the rule the stores apply inside their transaction", () => {
  test("refused only for a node holding another credential", () => {
    expect(joinRefused(null, "h1")).toBe(false);
    expect(joinRefused("h1", "h1")).toBe(false);
    expect(joinRefused("h1", "h2")).toBe(true);
  });
});
