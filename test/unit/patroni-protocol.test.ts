// Patroni's GET /cluster answer (real 3.0.2 answers in test/fixtures/patroni/) mapped to the
// summary's store members, and what a hostile or broken answer turns into: an error naming
// the field, never a throw, never control characters on the way to a terminal.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isLeaderRole, parseCluster } from "../../src/protocol/patroni";

const dir = join(import.meta.dir, "../fixtures/patroni");
const healthy = JSON.parse(readFileSync(join(dir, "cluster-3.0.2-healthy.json"), "utf8"));
const sequence = JSON.parse(readFileSync(join(dir, "cluster-3.0.2-failover-switchover.json"), "utf8")) as unknown[];

function ok(raw: unknown) {
  const r = parseCluster(raw);
  if ("error" in r) throw new Error(r.error);
  return r.members;
}
function err(raw: unknown): string {
  const r = parseCluster(raw);
  if (!("error" in r)) throw new Error(`expected an error, got ${JSON.stringify(r)}`);
  return r.error;
}

describe("real Patroni 3.0.2 answers", () => {
  test("healthy: the leader with lag 0, replicas with their byte lag, host:port", () => {
    const m = ok(healthy);
    expect(m.map((x) => [x.name, x.role, x.state, x.lag])).toEqual([
      ["pg1", "leader", "running", 0],
      ["pg2", "replica", "running", 0],
      ["pg3", "replica", "running", 0],
    ]);
    expect(m[0]!.host).toBe(`127.0.0.1:${healthy.members[0].port}`);
  });

  test("every answer seen through a failover and a switchover parses; unknown lag is -1, a byte lag is kept", () => {
    const all = sequence.map(ok);
    expect(all).toHaveLength(sequence.length);
    const flat = all.flat();
    expect(flat.some((x) => x.state === "stopped" && x.lag === -1)).toBe(true);
    expect(flat.some((x) => x.role === "replica" && x.lag > 0)).toBe(true);
    for (const x of flat) if (isLeaderRole(x.role)) expect(x.lag).toBe(0);
    // The moment between the old leader letting go and the new one taking over: no leader.
    expect(all.some((ms) => !ms.some((x) => x.role === "leader"))).toBe(true);
  });

  test("later versions' `streaming` state and roles we do not know are kept as text", () => {
    const m = ok({ members: [
      { name: "a", role: "leader", state: "running", host: "db1", port: 5432, timeline: 4 },
      { name: "b", role: "sync_standby", state: "streaming", host: "db2", port: 5432, lag: 1024 },
      { name: "c", role: "quorum_standby", state: "in archive recovery", host: "::1", port: 5432, lag: "unknown" },
      { name: "d", role: "standby_leader", state: "running" },
    ] });
    expect(m.map((x) => [x.name, x.host, x.role, x.state, x.lag])).toEqual([
      ["a", "db1:5432", "leader", "running", 0],
      ["b", "db2:5432", "sync_standby", "streaming", 1024],
      ["c", "[::1]:5432", "quorum_standby", "in archive recovery", -1],
      ["d", "", "standby_leader", "running", 0],
    ]);
  });

  test("members come out sorted by name, whatever order Patroni sent", () => {
    expect(ok({ members: [{ name: "z", role: "replica", state: "running", lag: 1 }, { name: "a", role: "leader", state: "running" }] }).map((x) => x.name)).toEqual(["a", "z"]);
  });
});

describe("hostile and broken answers", () => {
  const member = { name: "pg1", role: "leader", state: "running", host: "127.0.0.1", port: 5432 };
  test.each([
    ["a string", "nope", "answer"],
    ["null", null, "answer"],
    ["no members", {}, "members"],
    ["members not an array", { members: { a: 1 } }, "members"],
    ["a member's name a number", { members: [{ ...member, name: 7 }] }, "members[0].name"],
    ["an empty name", { members: [{ ...member, name: "" }] }, "members[0].name"],
    ["role missing", { members: [{ name: "x", state: "running" }] }, "members[0].role"],
    ["port out of range", { members: [{ ...member, port: 70000 }] }, "members[0].port"],
    ["lag negative", { members: [{ ...member, role: "replica", lag: -5 }] }, "members[0].lag"],
    ["lag an object", { members: [{ ...member, role: "replica", lag: { x: 1 } }] }, "members[0].lag"],
    ["a huge name", { members: [{ ...member, name: "x".repeat(5000) }] }, "members[0].name"],
    ["too many members", { members: Array.from({ length: 65 }, (_, i) => ({ ...member, name: `m${i}` })) }, "members"],
  ])("%s: a clear error naming the field", (_what, raw, field) => {
    const e = err(raw);
    expect(e).toStartWith("unexpected answer from Patroni's /cluster: ");
    expect(e).toContain(`${field}: `);
  });

  test.each([
    ["ESC in a name", { name: "pg1\x1b[2J", role: "leader", state: "running" }, "members[0].name"],
    ["a newline in a state", { name: "pg1", role: "leader", state: "running\nroot ok" }, "members[0].state"],
    ["a bidi override in a host", { name: "pg1", role: "leader", state: "running", host: "db\u202e1" }, "members[0].host"],
    ["a C1 control in a role", { name: "pg1", role: "lead\u009ber", state: "running" }, "members[0].role"],
  ])("%s is refused, and the error itself carries no control character", (_what, m, field) => {
    const e = err({ members: [m] });
    expect(e).toContain(field);
    // eslint-disable-next-line no-control-regex
    expect(e).not.toMatch(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e]/);
  });

  test("extra fields Patroni may add are allowed, and not passed on", () => {
    const m = ok({ members: [{ name: "a", role: "leader", state: "running", tags: { nofailover: true }, pending_restart: true }], pause: true, scheduled_switchover: { at: "x" } });
    expect(Object.keys(m[0]!).sort()).toEqual(["host", "lag", "name", "role", "state"]);
  });
});
