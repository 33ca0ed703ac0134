// `llmgw status` for several control planes on a replicated store: the Control planes and
// Store lines above the fleet, and what is wrong in the Attention section; nothing of it for a
// single head node on SQLite.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { haAttention, renderStatus } from "../../src/cli/status";
import { bytes } from "../../src/lib/format";
import { parseCluster } from "../../src/protocol/patroni";
import type { StoreMember, Summary } from "../../src/protocol/views";

const plain = { color: false };
const color = { color: true };

const single: Summary = {
  version: "1.2.3",
  nodes: { total: 2, ready: 2, cordoned: 0, draining: 0, unreachable: 0 },
  gpus: [{ class: "H100-80GB", total: 16, used: 8, unhealthy: 0 }],
  fabrics: [],
  replicas: { ready: 1, starting: 0, draining: 0, failed: 0 },
  models: { total: 1, satisfied: 1, short: 0 },
  unplaceable: [],
  unplaceable_reasons: {},
  parked: [],
  idle_replicas: [],
  evictions: [],
  store: [],
  control_planes: {},
};

const store: StoreMember[] = [
  { name: "pg1", host: "10.0.0.11:5432", role: "leader", state: "running", lag: 0 },
  { name: "pg2", host: "10.0.0.12:5432", role: "replica", state: "running", lag: 0 },
  { name: "pg3", host: "10.0.0.13:5432", role: "sync_standby", state: "streaming", lag: 1234 },
];
const planes: Summary["control_planes"] = {
  members: [
    { name: "head1", address: "http://10.0.0.1:8001", state: "leading", this: true },
    { name: "head2", address: "http://10.0.0.2:8001", state: "standing by" },
    { name: "head3", address: "http://10.0.0.3:8001", state: "standing by" },
  ],
  floating: "10.0.0.161",
  floating_up: true,
};
const ha: Summary = { ...single, store, control_planes: planes };

function lines(out: string) {
  return out.split("\n");
}

describe("status: control planes and store", () => {
  test("a single head node on SQLite prints neither line nor an attention section", () => {
    const out = renderStatus(single, plain);
    expect(out).not.toContain("Control planes");
    expect(out).not.toContain("Store");
    expect(out).not.toContain("Attention");
    expect(lines(out)[1]).toStartWith("Nodes     2 nodes");
  });

  test("all well: who leads, who stands by, the floating address up; the store leader and replicas with lag; no attention", () => {
    const out = renderStatus(ha, plain);
    const l = lines(out);
    expect(l[0]).toBe("llmgw 1.2.3");
    expect(l[1]).toBe("Control planes  head1 (this one) leads · 2 standing by (head2, head3) · floating 10.0.0.161 up");
    expect(l[2]).toBe("Store           pg1 leads · pg2 replica running, 0 B behind · pg3 sync standby streaming, 1.2 KiB behind");
    expect(l[3]).toStartWith("Nodes     ");
    expect(out).not.toContain("Attention");
    expect(out).not.toContain("\x1b[");
  });

  test("a silent control plane, the floating address down, a stopped replica and a lagging one go to Attention", () => {
    const s: Summary = {
      ...ha,
      control_planes: { ...planes, members: [planes.members![0]!, { ...planes.members![1]!, state: "not answering" }, planes.members![2]!], floating_up: false },
      store: [store[0]!, { ...store[1]!, state: "stopped", lag: -1 }, { ...store[2]!, lag: 50 * 1024 * 1024 }],
    };
    const out = renderStatus(s, plain);
    expect(out).toContain("Control planes  head1 (this one) leads · 1 standing by (head3) · 1 not answering (head2) · floating 10.0.0.161 down");
    expect(out).toContain("Store           pg1 leads · pg2 replica stopped, lag unknown · pg3 sync standby streaming, 50 MiB behind");
    const att = out.slice(out.indexOf("Attention"));
    expect(att).toContain("  control plane head2 (http://10.0.0.2:8001) is not answering");
    expect(att).toContain("  the floating address 10.0.0.161 does not answer as the leader");
    expect(att).toContain("  store member pg2 is stopped, not replicating");
    expect(att).toContain("  store member pg3 is 50 MiB behind the leader");
    // Above the model lists, which come after it.
    expect(out.indexOf("Attention")).toBeGreaterThan(out.indexOf("Models"));
  });

  test("no store leader and no control-plane leader are said plainly", () => {
    const s: Summary = {
      ...ha,
      control_planes: { members: planes.members!.map((m) => ({ ...m, state: "standing by" })) },
      store: [{ ...store[0]!, role: "replica", state: "stopped", lag: -1 }, store[1]!],
    };
    const out = renderStatus(s, plain);
    expect(out).toContain("Control planes  none leads · 3 standing by");
    expect(out).toContain("Store           no leader · pg1 replica stopped, lag unknown · pg2 replica running, 0 B behind");
    const a = haAttention(s);
    expect(a[0]).toStartWith("no control plane leads");
    expect(a).toContain("the store has no running leader (pg1 replica stopped, pg2 replica running): writes wait until Patroni promotes one");
  });

  test("store_error: its own line and in Attention; the members line is absent", () => {
    const s: Summary = { ...single, store_error: "no Patroni member answered GET /cluster: http://db1:8008 (Unable to connect)" };
    const out = renderStatus(s, plain);
    expect(out).toContain("Store           no Patroni member answered GET /cluster: http://db1:8008 (Unable to connect)");
    expect(out).toContain("Attention\n  cannot read the store's members: no Patroni member answered");
  });

  test("colour on a terminal: what is wrong is red, NO_COLOR (plain) has no escapes", () => {
    const s: Summary = { ...ha, control_planes: { ...planes, floating_up: false } };
    expect(renderStatus(s, color)).toContain("\x1b[31mfloating 10.0.0.161 down\x1b[0m");
    expect(renderStatus(s, plain)).not.toContain("\x1b");
  });

  test("hostile text in member names reaches the terminal escaped", () => {
    const s: Summary = { ...ha, store: [{ ...store[0]!, name: "pg1\x1b]0;pwned\x07" }], control_planes: { members: [{ ...planes.members![0]!, name: "h\x1b[2J" }] } };
    const out = renderStatus(s, plain);
    expect(out).not.toContain("\x1b");
    expect(out).toContain("pg1\\x1b]0;pwned\\x07 leads");
  });

  test("the real Patroni 3.0.2 answers render: the moment with no leader goes to Attention", () => {
    const seq = JSON.parse(readFileSync(join(import.meta.dir, "../fixtures/patroni/cluster-3.0.2-failover-switchover.json"), "utf8")) as unknown[];
    const outs = seq.map((raw) => {
      const r = parseCluster(raw);
      if ("error" in r) throw new Error(r.error);
      return renderStatus({ ...single, store: r.members }, plain);
    });
    expect(outs[0]).toContain("Store           pg1 leads · pg2 replica running, 0 B behind · pg3 replica running, 0 B behind");
    expect(outs.some((o) => o.includes("the store has no running leader"))).toBe(true);
    expect(outs.some((o) => o.includes("store member pg1 is stopped, not replicating"))).toBe(true);
  });
});

test("bytes", () => {
  expect([0, 812, 1024, 1234, 10 * 1024, 50 * 1024 * 1024, 3.4 * 2 ** 30].map(bytes)).toEqual(["0 B", "812 B", "1 KiB", "1.2 KiB", "10 KiB", "50 MiB", "3.4 GiB"]);
});
