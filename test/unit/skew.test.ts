// The version-skew contract as pure rules: which agent protocols a control plane accepts and
// what it tells the others, the admission refusal, the summary's agent versions and the
// status lines for mixed versions, and the schema-age rule.

import { describe, expect, test } from "bun:test";
import { AdmissionRefused, admit } from "../../src/control/admission";
import { agentVersions } from "../../src/control/summary";
import { versionAttention } from "../../src/cli/status";
import { acceptedRange, agentProtocolProblem, oldestAccepted, statedProtocol } from "../../src/protocol/skew";
import { PROTOCOL_VERSION } from "../../src/protocol/version";
import type { NodeView } from "../../src/protocol/views";
import { newestKnown, schemaAheadReason } from "../../src/store/schema-age";
import { Store } from "../../src/store";
import { join } from "node:path";
import { Database } from "bun:sqlite";
import { scratchDir } from "../helpers/tmp";

describe("agent protocols a control plane accepts", () => {
  test("its own and the one before; 1 is every release before the number", () => {
    expect(PROTOCOL_VERSION).toBe(2);
    expect(oldestAccepted()).toBe(1);
    expect(acceptedRange()).toBe("1–2");
    expect(acceptedRange(1)).toBe("1");
    expect([0, 1, 2, 3].map((p) => agentProtocolProblem(p) === undefined)).toEqual([false, true, true, false]);
    expect(agentProtocolProblem(7, 7)).toBeUndefined();
    expect(agentProtocolProblem(5, 7)).toContain("this agent speaks protocol 5, this control plane speaks 7 (accepts 6–7): upgrade the agent");
    expect(agentProtocolProblem(3)).toBe("protocol: this agent speaks protocol 3, this control plane speaks 2 (accepts 1–2): upgrade the control plane first (control planes before agents; see Upgrading in the README)");
  });

  test("the protocol a raw body states: a whole number, else unstated (1)", () => {
    expect([{ protocol: 3 }, {}, { protocol: "3" }, { protocol: 2.5 }, null, "x"].map(statedProtocol)).toEqual([3, 1, 1, 1, 1, 1]);
  });

  test("admission refuses an unaccepted protocol before anything else, with its own code; an agent that does not say is protocol 1", () => {
    const trust = { exists: false, hasCredential: false, adminState: undefined, allowedAddress: undefined };
    const hb = { node: "n1", address: "10.0.0.1" };
    const verdict = admit({ kind: "join", from: "10.0.0.1" }, { ...hb, protocol: 3 }, trust, { maxNodes: 0 }, { nodes: 5 });
    expect(verdict.accepted).toBe(false);
    const refusal = (verdict as { refusal: AdmissionRefused }).refusal;
    expect(refusal.code).toBe("protocol_mismatch");
    expect(refusal.message).toEndWith("(node n1)");
    expect(admit({ kind: "join", from: "10.0.0.1" }, hb, trust, { maxNodes: 10 }, { nodes: 5 })).toEqual({ accepted: true });
    expect(admit({ kind: "node", node: "n1", from: "10.0.0.1" }, { ...hb, protocol: 2 }, { ...trust, exists: true }, { maxNodes: 10 }, undefined)).toEqual({ accepted: true });
    expect(admit({ kind: "node", node: "n1", from: "10.0.0.1" }, { ...hb, protocol: 0 }, { ...trust, exists: true }, { maxNodes: 10 }, undefined).accepted).toBe(false);
  });
});

describe("mixed versions in the summary and in status", () => {
  const node = (name: string, agent_version: string, agent_protocol?: number) => ({ name, agent_version, ...(agent_protocol !== undefined ? { agent_protocol } : {}) }) as NodeView;

  test("nodes per release and protocol, most first; an agent that did not say counts as protocol 1", () => {
    const t = { nodes: [node("a", "0.2.0", 2), node("b", "0.1.0"), node("c", "0.2.0", 2), node("d", "0.2.0", 2)] };
    expect(agentVersions(t)).toEqual([
      { version: "0.2.0", protocol: 2, nodes: 3 },
      { version: "0.1.0", protocol: 1, nodes: 1 },
    ]);
    expect(agentVersions({ nodes: [] })).toEqual([]);
  });

  test("one line for agents on several versions, one for control planes, one per control plane barred from leading; nothing when all agree", () => {
    const agent_versions = [
      { version: "0.2.0", protocol: 2, nodes: 3 },
      { version: "0.1.0", protocol: 1, nodes: 1 },
    ];
    const members = [
      { name: "cp-a", address: "http://a", state: "leading", version: "0.1.0" },
      { name: "cp-b", address: "http://b", state: "standing by", version: "0.2.0", protocol: 2, this: true, barred: "the store's schema is newer than this release knows" },
    ];
    expect(versionAttention({ agent_versions, control_planes: { members } })).toEqual([
      "agents on 2 versions: 0.2.0 (protocol 2) ×3, 0.1.0 (protocol 1) ×1: finish the upgrade (README, Upgrading)",
      "control planes on 2 versions: 0.1.0 (protocol 1) ×1, 0.2.0 (protocol 2) ×1: upgrade the standbys first, the leader last",
      "control plane cp-b stands by and will not lead: the store's schema is newer than this release knows",
    ]);
    expect(versionAttention({ agent_versions: agent_versions.slice(0, 1), control_planes: { members: [members[0]!] } })).toEqual([]);
    expect(versionAttention({ control_planes: {} })).toEqual([]);
  });
});

describe("a store's schema newer than this release", () => {
  test("only a migration applied after the newest this binary embeds bars it", () => {
    for (const dialect of ["sqlite", "pg"] as const) {
      const known = newestKnown(dialect);
      expect(known).toBeGreaterThan(0);
      expect(schemaAheadReason(undefined, dialect)).toBeUndefined();
      expect(schemaAheadReason(known, dialect)).toBeUndefined();
      expect(schemaAheadReason(known - 1, dialect)).toBeUndefined();
      expect(schemaAheadReason(4_102_444_800_000, dialect)).toContain("a migration of 2100-01-01 00:00:00 UTC is applied");
    }
  });
});

test("a SQLite store migrated by a later release is not opened (one head node cannot stand by), and is left as it was", () => {
  const path = join(scratchDir("llmgw-skew-"), "llmgw.db");
  new Store({ path, busyTimeoutMs: 1000 }).close();
  const db = new Database(path);
  db.run("INSERT INTO __drizzle_migrations (hash, created_at) VALUES ('from-a-later-release', 4102444800000)");
  const rows = () => (db.query("SELECT count(*) AS n FROM __drizzle_migrations").get() as { n: number }).n;
  const before = rows();
  expect(() => new Store({ path, busyTimeoutMs: 1000 })).toThrow("the store's schema is newer than this release knows");
  expect(rows()).toBe(before);
  db.close();
});
