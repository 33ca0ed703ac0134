// The PostgreSQL dialect's reads of the fleet (in one REPEATABLE READ transaction each), its
// plans (fenced by the lease row, locked in the same transaction) and its change feed (the
// changes table the triggers fill, read alone).

import { eq, inArray, sql } from "drizzle-orm";
import { FencedError } from "../../control/errors";
import type { ChangeFeed, FleetRead, PlanWriter } from "../../control/store-port";
import { type ChangeRead, type Fence, type GpuRow, type ModelRow, type ModelStateRow, type NodeRow, type PlanWrite, type ReplicaRow, type Snapshot, CHANGES_KEPT, PRUNE_EVERY, changedKeys } from "../../control/types";
import { type KeyColumns, type TeamColumns, toKeyRow, toTeamRow } from "../key-rows";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { CHANGE_SQL, DB_NOW, SNAPSHOT_SQL, insertEvents, recordset, updateReplicas, upsertModelState } from "./sql";

export class PgFleet implements FleetRead, PlanWriter, Pick<ChangeFeed, "changeCursor" | "changesSince"> {
  /** Plans written since the changes table was last pruned. */
  private plansUnpruned = PRUNE_EVERY - 1;

  constructor(private readonly c: PgConnection) {}

  // ---- reads of everything --------------------------------------------------------------

  snapshot(): Promise<Snapshot> {
    return this.c.call("read", () =>
      this.c.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const q = (text: string) => t.unsafe(text, [], { prepare: true });
        // Issued together: postgres-js pipelines them on the transaction's connection.
        const [nodes, gpus, weights, models, replicas, modelState] = await Promise.all([
          q(SNAPSHOT_SQL.nodes),
          q(SNAPSHOT_SQL.gpus),
          q(SNAPSHOT_SQL.weights),
          q(SNAPSHOT_SQL.models),
          q(SNAPSHOT_SQL.replicas),
          q(SNAPSHOT_SQL.modelState),
        ]);
        return {
          nodes: [...nodes] as unknown as NodeRow[],
          gpus: [...gpus] as unknown as GpuRow[],
          weights: [...weights] as unknown as { node: string; model: string }[],
          models: [...models] as unknown as ModelRow[],
          replicas: [...replicas] as unknown as ReplicaRow[],
          modelState: [...modelState] as unknown as ModelStateRow[],
        };
      }) as Promise<Snapshot>,
    );
  }

  changeCursor(): Promise<number> {
    return this.c.call("read", async () => Number((await this.c.db.select({ seq: schema.changeCounter.seq }).from(schema.changeCounter).where(eq(schema.changeCounter.id, 1)))[0]?.seq ?? 0));
  }

  changesSince(after: number, limit: number): Promise<ChangeRead> {
    return this.c.call("read", () =>
      this.c.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const rows = await t.unsafe(CHANGE_SQL.changes, [after, limit], { prepare: true });
        const changes = rows.map((r) => ({ seq: Number(r.seq), kind: String(r.kind), key: String(r.key) }));
        const k = changedKeys(changes);
        const q = (text: string, keys: string[]) => (keys.length > 0 ? t.unsafe(text, [keys], { prepare: true }).then((r) => [...r]) : Promise.resolve([]));
        const [nodes, gpus, weights, credentials, addresses, models, modelState, replicas, apiKeys, teams] = await Promise.all([
          q(CHANGE_SQL.nodes, k.node),
          q(CHANGE_SQL.gpus, k.node),
          q(CHANGE_SQL.weights, k.node),
          q(CHANGE_SQL.credentials, k.node),
          q(CHANGE_SQL.addresses, k.node),
          q(CHANGE_SQL.models, k.model),
          q(CHANGE_SQL.modelState, k.model),
          q(CHANGE_SQL.replicas, k.replica),
          q(CHANGE_SQL.apiKeys, k.key),
          q(CHANGE_SQL.teams, k.team),
        ]);
        return {
          ...({ changes, nodes, gpus, weights, credentials, addresses, models, modelState, replicas } as unknown as ChangeRead),
          apiKeys: apiKeys.map((r) => toKeyRow(r as unknown as KeyColumns)),
          teams: teams.map((r) => toTeamRow(r as unknown as TeamColumns)),
        };
      }) as Promise<ChangeRead>,
    );
  }

  replicaSnapshot(): Promise<Pick<Snapshot, "replicas" | "modelState">> {
    return this.c.call("read", () =>
      this.c.begin("ISOLATION LEVEL REPEATABLE READ READ ONLY", async (t) => {
        const [replicas, modelState] = await Promise.all([t.unsafe(SNAPSHOT_SQL.replicas, [], { prepare: true }), t.unsafe(SNAPSHOT_SQL.modelState, [], { prepare: true })]);
        return { replicas: [...replicas] as unknown as ReplicaRow[], modelState: [...modelState] as unknown as ModelStateRow[] };
      }) as Promise<Pick<Snapshot, "replicas" | "modelState">>,
    );
  }

  // ---- replicas -----------------------------------------------------------------------

  applyPlan(plan: PlanWrite, now: number, fence?: Fence): Promise<void> {
    // "once": a plan whose connection broke mid-way may have been committed; it is never sent twice.
    return this.c.write("once", "any", async (tx) => {
      if (fence) {
        // The lease row, locked until this transaction ends: no successor can take it meanwhile.
        const held = (await tx.execute(sql`SELECT holder, epoch, expires_at > ${DB_NOW} AS live FROM leases WHERE name = 'leader' FOR UPDATE`))[0] as
          | { holder: string; epoch: number; live: boolean }
          | undefined;
        if (!held || held.holder !== fence.holder || held.epoch !== fence.epoch || !held.live) throw new FencedError(fence.epoch);
      }
      // Each part in one statement, its rows handed over as one JSON document: a plan of
      // thousands of rows is a few round trips, not one per row.
      if (plan.create.length > 0) {
        const rows = plan.create.map((r) => ({ id: r.id, model: r.model, profile: r.profile, shards: r.shards, port: r.port, endpoint: r.endpoint, launch: r.launch ?? null }));
        await tx.execute(
          sql`INSERT INTO replicas (id, model, profile, state, shards, port, endpoint, created_at, updated_at, launch)
            SELECT v.id, v.model, v.profile, 'starting', v.shards, v.port, v.endpoint, ${now}::bigint, ${now}::bigint, v.launch
            FROM ${recordset(rows, "id text, model text, profile text, shards jsonb, port integer, endpoint text, launch text")}`,
        );
      }
      await updateReplicas(tx, plan.update, now);
      if (plan.remove.length > 0) await tx.delete(schema.replicas).where(inArray(schema.replicas.id, plan.remove));
      await upsertModelState(tx, plan.modelState);
      for (const n of plan.nodeAdmin) await tx.update(schema.nodes).set({ adminState: n.state }).where(eq(schema.nodes.name, n.node));
      await insertEvents(tx, plan.events, now);
      // The leader's plans keep the changes table short (every PRUNE_EVERY-th): the oldest rows go (a reader that far behind loads everything).
      if (++this.plansUnpruned >= PRUNE_EVERY) {
        this.plansUnpruned = 0;
        await tx.execute(sql`DELETE FROM changes WHERE seq <= (SELECT seq FROM change_counter WHERE id = 1) - ${CHANGES_KEPT}`);
      }
    });
  }
}
