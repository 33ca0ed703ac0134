// The SQLite dialect's reads of the fleet, its plans (fenced by the lease in the same
// transaction) and its change feed (the changes table the triggers fill, read alone).

import { asc, eq, gt, inArray, sql } from "drizzle-orm";
import { FencedError } from "../../control/errors";
import type { ChangeFeed, FleetRead, PlanWriter, ReplicaRead } from "../../control/store-port";
import { type ChangeRead, type Fence, type PlanWrite, type Snapshot, CHANGES_KEPT, PRUNE_EVERY, changedKeys } from "../../control/types";
import { guarded } from "../errors";
import { toKeyRow, toTeamRow } from "../key-rows";
import { DB_NOW, type Sqlite, eventRecord, nodeColumns, schema, toModel } from "./db";

export class SqliteFleet implements FleetRead, PlanWriter, Pick<ChangeFeed, "changeCursor" | "changesSince"> {
  /** Plans written since the changes table was last pruned. */
  private plansUnpruned = PRUNE_EVERY - 1;

  constructor(private readonly s: Sqlite) {}

  snapshot(): Promise<Snapshot> {
    return guarded(() =>
      this.s.db.transaction(
        (tx) => ({
          nodes: tx.select(nodeColumns).from(schema.nodes).orderBy(asc(schema.nodes.name)).all(),
          gpus: tx.select().from(schema.gpus).orderBy(asc(schema.gpus.node), asc(schema.gpus.index)).all(),
          weights: tx.select().from(schema.weights).orderBy(asc(schema.weights.node), asc(schema.weights.model)).all(),
          models: tx.select().from(schema.models).orderBy(asc(schema.models.name)).all().map(toModel),
          replicas: tx.select().from(schema.replicas).orderBy(asc(schema.replicas.id)).all(),
          modelState: tx.select().from(schema.modelState).all(),
        }),
        { behavior: "deferred" },
      ),
    );
  }

  replicaSnapshot(): Promise<ReplicaRead> {
    return guarded(() =>
      this.s.db.transaction((tx) => ({ replicas: tx.select().from(schema.replicas).all(), modelState: tx.select().from(schema.modelState).all() }), { behavior: "deferred" }),
    );
  }

  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        if (fence) {
          const held = tx.all<{ n: number }>(sql`SELECT count(*) AS n FROM leases WHERE name = 'leader' AND holder = ${fence.holder} AND epoch = ${fence.epoch} AND expires_at > ${DB_NOW}`)[0];
          if (!held || held.n !== 1) throw new FencedError(fence.epoch);
        }
        for (const r of plan.create)
          tx.insert(schema.replicas)
            .values({ id: r.id, model: r.model, profile: r.profile, state: "starting", shards: r.shards, port: r.port, endpoint: r.endpoint, createdAt: now, updatedAt: now, launch: r.launch ?? null })
            .run();
        for (const u of plan.update) tx.update(schema.replicas).set({ ...u.patch, updatedAt: now }).where(eq(schema.replicas.id, u.id)).run();
        if (plan.remove.length > 0) tx.delete(schema.replicas).where(inArray(schema.replicas.id, plan.remove)).run();
        for (const [model, patch] of plan.modelState) {
          if (Object.keys(patch).length === 0) continue;
          tx.insert(schema.modelState).values({ model, ...patch }).onConflictDoUpdate({ target: schema.modelState.model, set: patch }).run();
        }
        for (const n of plan.nodeAdmin) tx.update(schema.nodes).set({ adminState: n.state }).where(eq(schema.nodes.name, n.node)).run();
        for (const e of plan.events) tx.insert(schema.events).values(eventRecord(e, now)).run();
        // The leader's plans keep the changes table short (every PRUNE_EVERY-th): the oldest rows go (a reader that far behind loads everything).
        if (++this.plansUnpruned >= PRUNE_EVERY) {
          this.plansUnpruned = 0;
          tx.run(sql`DELETE FROM changes WHERE seq <= (SELECT seq FROM change_counter WHERE id = 1) - ${CHANGES_KEPT}`);
        }
      }),
    );
  }

  changeCursor(): Promise<number> {
    return guarded(() => this.s.db.select({ seq: schema.changeCounter.seq }).from(schema.changeCounter).where(eq(schema.changeCounter.id, 1)).get()?.seq ?? 0);
  }

  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return guarded(() =>
      this.s.db.transaction(
        (tx) => {
          const changes = tx.select().from(schema.changes).where(gt(schema.changes.seq, after)).orderBy(asc(schema.changes.seq)).limit(limit).all();
          const k = changedKeys(changes);
          const some = <T>(keys: string[], read: () => T[]): T[] => (keys.length > 0 ? read() : []);
          return {
            changes,
            nodes: some(k.node, () => tx.select(nodeColumns).from(schema.nodes).where(inArray(schema.nodes.name, k.node)).all()),
            gpus: some(k.node, () => tx.select().from(schema.gpus).where(inArray(schema.gpus.node, k.node)).orderBy(asc(schema.gpus.node), asc(schema.gpus.index)).all()),
            weights: some(k.node, () => tx.select().from(schema.weights).where(inArray(schema.weights.node, k.node)).orderBy(asc(schema.weights.node), asc(schema.weights.model)).all()),
            credentials: some(k.node, () =>
              tx
                .select({ node: schema.nodes.name, hash: schema.nodes.credentialHash })
                .from(schema.nodes)
                .where(inArray(schema.nodes.name, k.node))
                .all()
                .flatMap((r) => (r.hash === null ? [] : [{ node: r.node, hash: r.hash }])),
            ),
            addresses: some(k.node, () => tx.select({ node: schema.nodeAddresses.node, address: schema.nodeAddresses.address }).from(schema.nodeAddresses).where(inArray(schema.nodeAddresses.node, k.node)).all()),
            models: some(k.model, () => tx.select().from(schema.models).where(inArray(schema.models.name, k.model)).all().map(toModel)),
            modelState: some(k.model, () => tx.select().from(schema.modelState).where(inArray(schema.modelState.model, k.model)).all()),
            replicas: some(k.replica, () => tx.select().from(schema.replicas).where(inArray(schema.replicas.id, k.replica)).all()),
            apiKeys: some(k.key, () => tx.select().from(schema.apiKeys).where(inArray(schema.apiKeys.name, k.key)).all().map(toKeyRow)),
            teams: some(k.team, () => tx.select().from(schema.teams).where(inArray(schema.teams.name, k.team)).all().map(toTeamRow)),
          };
        },
        { behavior: "deferred" },
      ),
    );
  }
}
