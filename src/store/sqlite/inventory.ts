// The SQLite dialect's inventory writes: heartbeats (in bun:sqlite statements prepared once: at
// thousands a second, drizzle building each query anew would be most of their cost), joins, and
// nodes' last-seen times.

import type { Database } from "bun:sqlite";
import { asc, eq, inArray, sql } from "drizzle-orm";
import { joinRefused } from "../../control/admission";
import type { InventoryWrites, JoinWrite } from "../../control/store-port";
import type { GpuRow } from "../../control/types";
import type { HeartbeatRequest } from "../../protocol/heartbeat";
import { guarded } from "../errors";
import { type Sqlite, type Tx, schema } from "./db";
import { joinedNodeRow } from "../rows";

type Statement = ReturnType<Database["prepare"]>;
interface HeartbeatStatements {
  exists: Statement;
  update: Statement;
  insert: Statement;
  deleteGpus: Statement;
  insertGpu: Statement;
  deleteWeights: Statement;
  insertWeight: Statement;
}

export class SqliteInventory implements InventoryWrites {
  private touchStatement: { run(values: { at: number; name: string }): unknown } | undefined;
  private hbStatements: HeartbeatStatements | undefined;

  constructor(private readonly s: Sqlite) {}

  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    if (!join) return this.applyHeartbeats([hb], now).then(([r]) => ({ created: r!.created, taken: false }));
    return this.applyJoins([{ hb, join }], now).then(([r]) => r!);
  }

  applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    if (joins.length === 0) return Promise.resolve([]);
    return guarded(() => this.s.db.transaction((tx) => joins.map(({ hb, join }) => joinOne(tx, hb, now, join))));
  }

  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    if (nodes.length === 0) return Promise.resolve([]);
    return guarded(() =>
      this.s.db
        .select()
        .from(schema.gpus)
        .where(inArray(schema.gpus.node, [...nodes]))
        .orderBy(asc(schema.gpus.node), asc(schema.gpus.index))
        .all(),
    );
  }

  /** The heartbeat's hot path, in statements prepared once. */
  private heartbeatStatements(): HeartbeatStatements {
    const q = (text: string) => this.s.sqlite.prepare(text);
    this.hbStatements ??= {
      exists: q("SELECT 1 AS x FROM nodes WHERE name = ?"),
      update: q("UPDATE nodes SET address = ?, labels = ?, fabrics = ?, last_heartbeat = ?, agent_version = ?, agent_protocol = ? WHERE name = ?"),
      insert: q("INSERT INTO nodes (name, address, labels, fabrics, admin_state, last_heartbeat, agent_version, agent_protocol, registered_at, credential_hash) VALUES (?, ?, ?, ?, 'none', ?, ?, ?, ?, NULL)"),
      deleteGpus: q("DELETE FROM gpus WHERE node = ?"),
      insertGpu: q("INSERT INTO gpus (node, idx, uuid, name, class, memory_mib, healthy, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
      deleteWeights: q("DELETE FROM weights WHERE node = ?"),
      insertWeight: q("INSERT INTO weights (node, model) VALUES (?, ?)"),
    };
    return this.hbStatements;
  }

  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    if (hbs.length === 0) return Promise.resolve([]);
    return guarded(() => {
      const st = this.heartbeatStatements();
      return this.s.sqlite
        .transaction(() =>
          hbs.map((hb) => {
            const labels = JSON.stringify(hb.labels);
            const fabrics = JSON.stringify(hb.fabrics);
            const existed = st.exists.get(hb.node) !== null;
            if (existed) st.update.run(hb.address, labels, fabrics, now, hb.agent_version, hb.protocol ?? null, hb.node);
            else st.insert.run(hb.node, hb.address, labels, fabrics, now, hb.agent_version, hb.protocol ?? null, now);
            st.deleteGpus.run(hb.node);
            for (const g of hb.gpus) st.insertGpu.run(hb.node, g.index, g.uuid, g.name, g.class, g.memory_mib, g.healthy ? 1 : 0, g.parent ?? null);
            st.deleteWeights.run(hb.node);
            for (const m of new Set(hb.models)) st.insertWeight.run(hb.node, m);
            return { created: !existed };
          }),
        )
        .immediate();
    });
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    if (seen.length === 0) return Promise.resolve();
    return guarded(() =>
      // One prepared statement for every row: a second's heartbeats of a large fleet (hundreds
      // of rows) cost a loop of binds, not a query built per row.
      this.s.sqlite.transaction(() => {
        this.touchStatement ??= this.s.db.update(schema.nodes).set({ lastHeartbeat: sql`${sql.placeholder("at")}` }).where(eq(schema.nodes.name, sql.placeholder("name"))).prepare();
        for (const s of seen) this.touchStatement.run({ at: s.at, name: s.name });
      })(),
    );
  }

  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return guarded(() => this.s.db.select({ name: schema.nodes.name, at: schema.nodes.lastHeartbeat }).from(schema.nodes).all());
  }
}

/** One join inside a transaction: applyJoins' step. */
function joinOne(tx: Tx, hb: HeartbeatRequest, now: number, join: { credentialHash: string; pending: boolean }): { created: boolean; taken: boolean } {
  const existing = tx
    .select({ name: schema.nodes.name, credentialHash: schema.nodes.credentialHash })
    .from(schema.nodes)
    .where(eq(schema.nodes.name, hb.node))
    .get();
  if (existing) {
    if (joinRefused(existing.credentialHash, join.credentialHash)) return { created: false, taken: true };
    tx.update(schema.nodes)
      .set({ address: hb.address, labels: hb.labels, fabrics: hb.fabrics, lastHeartbeat: now, agentVersion: hb.agent_version, agentProtocol: hb.protocol ?? null, ...(existing.credentialHash !== join.credentialHash ? { credentialHash: join.credentialHash, registeredAt: now } : {}) })
      .where(eq(schema.nodes.name, hb.node))
      .run();
  } else {
    tx.insert(schema.nodes)
      .values(joinedNodeRow(hb, now, join))
      .run();
  }
  tx.delete(schema.gpus).where(eq(schema.gpus.node, hb.node)).run();
  if (hb.gpus.length > 0)
    tx.insert(schema.gpus)
      .values(hb.gpus.map((g) => ({ node: hb.node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent })))
      .run();
  tx.delete(schema.weights).where(eq(schema.weights.node, hb.node)).run();
  const models = [...new Set(hb.models)];
  if (models.length > 0) tx.insert(schema.weights).values(models.map((m) => ({ node: hb.node, model: m }))).run();
  return { created: !existing, taken: false };
}
