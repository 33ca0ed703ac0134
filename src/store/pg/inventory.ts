// The PostgreSQL dialect's inventory writes: a group of heartbeats as one statement (after the
// change counter's lock, its node rows in name order, so two control planes writing the same
// nodes never wait on each other in a circle), joins, and nodes' last-seen times.

import { eq, sql } from "drizzle-orm";
import { joinRefused } from "../../control/admission";
import type { InventoryWrites, JoinWrite } from "../../control/store-port";
import type { GpuRow } from "../../control/types";
import type { HeartbeatRequest } from "../../protocol/heartbeat";
import { CHANNEL, type PgConnection, type Tx } from "./connection";
import * as schema from "./schema";
import { CHANGE_SQL, HEARTBEATS_SQL, byteOrder, inventoryRows } from "./sql";
import { joinedNodeRow } from "../rows";

export class PgInventory implements InventoryWrites {
  constructor(private readonly c: PgConnection) {}

  // ---- nodes --------------------------------------------------------------------------

  applyHeartbeat(hb: HeartbeatRequest, now: number, join?: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
    // Without a join, as part of a group (doing it twice is doing it once); with one, a second try would find the credential it gave.
    if (!join) return this.applyHeartbeats([hb], now).then(([r]) => ({ created: r!.created, taken: false }));
    return this.c.write("once", "any", (tx) => joinOne(tx, hb, now, join));
  }

  nodeGpus(nodes: readonly string[]): Promise<GpuRow[]> {
    if (nodes.length === 0) return Promise.resolve([]);
    return this.c.call("read", async () => [...(await this.c.client.unsafe(CHANGE_SQL.gpus, [[...nodes]] as never[], { prepare: true }))] as unknown as GpuRow[]);
  }

  /**
   * The joins in one transaction of a few statements: their node rows locked (in name order),
   * the refused ones set aside, the inventory of the rest written as a group of heartbeats is
   * (HEARTBEATS_SQL), then their credentials. A row another control plane inserted meanwhile
   * (absent when locked, present when upserted) rolls the group back, and each join is then
   * written alone, as applyHeartbeat checks it.
   */
  async applyJoins(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    if (joins.length === 0) return [];
    if (joins.length === 1 || new Set(joins.map((j) => j.hb.node)).size < joins.length) {
      // A node named twice: one after the other, as each would be alone.
      return this.c.write("once", "any", async (tx) => {
        const out: { created: boolean; taken: boolean }[] = [];
        for (const { hb, join } of joins) out.push(await joinOne(tx, hb, now, join));
        return out;
      });
    }
    try {
      return await this.c.call("once", () => this.joinGroup(joins, now));
    } catch (e) {
      if (!(e instanceof RaceLost)) throw e;
      const out: { created: boolean; taken: boolean }[] = [];
      for (const { hb, join } of joins) out.push(await this.applyHeartbeat(hb, now, join));
      return out;
    }
  }

  private joinGroup(joins: readonly JoinWrite[], now: number): Promise<{ created: boolean; taken: boolean }[]> {
    const names = joins.map((j) => j.hb.node).sort(byteOrder);
    return this.c.begin("", async (t) => {
      await t.unsafe(`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`, [], { prepare: true });
      const held = await t.unsafe(`SELECT name, credential_hash AS hash FROM nodes WHERE name = ANY($1::text[]) ORDER BY name COLLATE "C" FOR UPDATE`, [names] as never[], { prepare: true });
      const stored = new Map<string, string | null>([...held].map((r) => [r.name as string, (r.hash as string | null) ?? null]));
      const taken = new Set(joins.filter((j) => stored.has(j.hb.node) && joinRefused(stored.get(j.hb.node) ?? null, j.join.credentialHash)).map((j) => j.hb.node));
      const go = joins.filter((j) => !taken.has(j.hb.node)).sort((a, b) => byteOrder(a.hb.node, b.hb.node));
      const inserted = new Set<string>();
      if (go.length > 0) {
        const { nodes, gpus, weights } = inventoryRows(go.map((j) => j.hb));
        const upserted = await t.unsafe(HEARTBEATS_SQL, [nodes, now, gpus, weights, CHANNEL, this.c.payload.any] as never[], { prepare: true });
        for (const r of upserted) if (r.inserted === true) inserted.add(r.name as string);
        // Absent when locked, yet not inserted by us: another control plane's join of that name.
        for (const j of go) if (!stored.has(j.hb.node) && !inserted.has(j.hb.node)) throw new RaceLost();
        const creds = JSON.stringify(go.map((j) => ({ name: j.hb.node, hash: j.join.credentialHash, pending: inserted.has(j.hb.node) && j.join.pending })));
        await t.unsafe(
          `UPDATE nodes SET credential_hash = v.hash,
             registered_at = CASE WHEN nodes.credential_hash IS DISTINCT FROM v.hash THEN $2::bigint ELSE nodes.registered_at END,
             admin_state = CASE WHEN v.pending THEN 'pending' ELSE nodes.admin_state END
           FROM jsonb_to_recordset($1::text::jsonb) AS v(name text, hash text, pending boolean) WHERE nodes.name = v.name`,
          [creds, now] as never[],
          { prepare: true },
        );
      }
      return joins.map((j) => (taken.has(j.hb.node) ? { created: false, taken: true } : { created: inserted.has(j.hb.node), taken: false }));
    }) as Promise<{ created: boolean; taken: boolean }[]>;
  }

  applyHeartbeats(hbs: readonly HeartbeatRequest[], now: number): Promise<{ created: boolean }[]> {
    if (hbs.length === 0) return Promise.resolve([]);
    // Written as each node's last heartbeat says (the earlier ones are overwritten in full), in
    // name order, so that two control planes writing the same nodes never wait on each other in a circle.
    const last = new Map<string, HeartbeatRequest>();
    for (const hb of hbs) last.set(hb.node, hb);
    // Byte order, as COLLATE "C" sorts (touchNodes locks in that order too).
    const names = [...last.keys()].sort(byteOrder);
    const { nodes, gpus, weights } = inventoryRows(names.map((n) => last.get(n)!));
    // Doing it twice is doing it once.
    return this.c.call("idempotent", async () => {
      // The change counter's row first, as every write of what the in-memory image holds takes
      // it (write()): the triggers of a node whose inventory changed take it too, and taken after
      // the node rows it could close a circle with a plan holding it and waiting for one of them.
      const upserted = await this.c.begin("", async (t) => {
        await t.unsafe(`SELECT seq FROM change_counter WHERE id = 1 FOR UPDATE`, [], { prepare: true });
        return t.unsafe(HEARTBEATS_SQL, [nodes, now, gpus, weights, CHANNEL, this.c.payload.any] as never[], { prepare: true });
      });
      const inserted = new Set([...upserted].filter((r) => r.inserted === true).map((r) => r.name as string));
      const first = new Set<string>();
      return hbs.map((hb) => {
        const created = inserted.has(hb.node) && !first.has(hb.node);
        first.add(hb.node);
        return { created };
      });
    });
  }

  touchNodes(seen: { name: string; at: number }[]): Promise<void> {
    if (seen.length === 0) return Promise.resolve();
    // One statement for the whole batch, its rows handed over as one JSON document. The rows are
    // locked first, in name order, as a group of heartbeats locks them (applyHeartbeats): two
    // writers of many node rows never wait on each other in a circle.
    const rows = JSON.stringify(seen);
    return this.c.write("idempotent", "seen", async (tx) => {
      await tx.execute(sql`SELECT 1 FROM nodes WHERE name IN (SELECT v.name FROM jsonb_to_recordset(${rows}::jsonb) AS v(name text)) ORDER BY name COLLATE "C" FOR UPDATE`);
      await tx.execute(sql`UPDATE nodes SET last_heartbeat = v.at FROM jsonb_to_recordset(${rows}::jsonb) AS v(name text, at bigint) WHERE nodes.name = v.name`);
    });
  }

  nodesSeen(): Promise<{ name: string; at: number }[]> {
    return this.c.call("read", () => this.c.db.select({ name: schema.nodes.name, at: schema.nodes.lastHeartbeat }).from(schema.nodes));
  }
}

/** A join that took its rows alone. */
class RaceLost extends Error {}

/** One join inside a transaction: applyHeartbeat's with a join, and applyJoins' step for a node named twice. */
async function joinOne(tx: Tx, hb: HeartbeatRequest, now: number, join: { credentialHash: string; pending: boolean }): Promise<{ created: boolean; taken: boolean }> {
  const select = () => tx.select({ credentialHash: schema.nodes.credentialHash }).from(schema.nodes).where(eq(schema.nodes.name, hb.node)).for("update");
  let existing = (await select())[0];
  let created = false;
  if (!existing) {
    const inserted = await tx
      .insert(schema.nodes)
      .values(joinedNodeRow(hb, now, join))
      .onConflictDoNothing({ target: schema.nodes.name })
      .returning({ n: schema.nodes.name });
    created = inserted.length === 1;
    // Another control plane inserted it just now: take it as existing.
    if (!created) existing = (await select())[0];
  }
  if (existing) {
    if (joinRefused(existing.credentialHash, join.credentialHash)) return { created: false, taken: true };
    await tx
      .update(schema.nodes)
      .set({ address: hb.address, labels: hb.labels, fabrics: hb.fabrics, lastHeartbeat: now, agentVersion: hb.agent_version, agentProtocol: hb.protocol ?? null, ...(existing.credentialHash !== join.credentialHash ? { credentialHash: join.credentialHash, registeredAt: now } : {}) })
      .where(eq(schema.nodes.name, hb.node));
  }
  await tx.delete(schema.gpus).where(eq(schema.gpus.node, hb.node));
  if (hb.gpus.length > 0)
    await tx
      .insert(schema.gpus)
      .values(hb.gpus.map((g) => ({ node: hb.node, index: g.index, uuid: g.uuid, name: g.name, class: g.class, memoryMib: g.memory_mib, healthy: g.healthy, parent: g.parent })));
  await tx.delete(schema.weights).where(eq(schema.weights.node, hb.node));
  const models = [...new Set(hb.models)];
  if (models.length > 0) await tx.insert(schema.weights).values(models.map((m) => ({ node: hb.node, model: m })));
  return { created, taken: false };
}
