// The PostgreSQL dialect's catalog (models, their aliases and control state; a whole catalog in a
// few statements), and its records: the event log (the client API keys and teams are keys.ts).

import { and, asc, desc, eq, gt, gte, sql } from "drizzle-orm";
import type { CatalogPort, EventsPort } from "../../control/store-port";
import type { EventRow, ModelRow, ModelStateRow, ModelWrite, NewEvent } from "../../control/types";
import type { PgConnection } from "./connection";
import * as schema from "./schema";
import { byBytes, eventRecord, recordset, toEvent, toModel } from "./sql";

export class PgCatalog implements CatalogPort {
  constructor(private readonly c: PgConnection) {}

  // ---- catalog ------------------------------------------------------------------------

  models(): Promise<ModelRow[]> {
    return this.c.call("read", async () => (await this.c.db.select().from(schema.models).orderBy(byBytes(schema.models.name))).map(toModel));
  }

  modelByName(name: string): Promise<ModelRow | undefined> {
    return this.c.call("read", async () => {
      const r = (await this.c.db.select().from(schema.models).where(eq(schema.models.name, name)))[0];
      return r && toModel(r);
    });
  }

  modelByAlias(alias: string): Promise<ModelRow | undefined> {
    return this.c.call("read", async () => {
      const r = (
        await this.c.db
          .select({ m: schema.models })
          .from(schema.modelAliases)
          .innerJoin(schema.models, eq(schema.models.name, schema.modelAliases.model))
          .where(eq(schema.modelAliases.alias, alias))
      )[0];
      return r ? toModel(r.m) : undefined;
    });
  }

  saveModels(models: ModelWrite[], now: number): Promise<void> {
    return this.c.write("once", "any", async (tx) => {
      if (models.length === 0) return;
      const fresh = models.filter((m) => m.created).map(({ spec, revision }) => ({ name: spec.name, spec, revision }));
      const changed = models.filter((m) => !m.created).map(({ spec, revision }) => ({ name: spec.name, spec, revision }));
      // A catalog entry's rows in a few statements for the whole catalog (see applyPlan).
      if (fresh.length > 0)
        await tx.execute(sql`INSERT INTO models (name, spec, revision, created_at, updated_at) SELECT v.name, v.spec, v.revision, ${now}::bigint, ${now}::bigint FROM ${recordset(fresh, "name text, spec jsonb, revision integer")}`);
      if (changed.length > 0) {
        await tx.execute(sql`UPDATE models SET spec = v.spec, revision = v.revision, updated_at = ${now}::bigint FROM ${recordset(changed, "name text, spec jsonb, revision integer")} WHERE models.name = v.name`);
        await tx.execute(sql`DELETE FROM model_aliases WHERE model IN (SELECT v.name FROM ${recordset(changed.map((m) => ({ name: m.name })), "name text")})`);
      }
      const aliases = models.flatMap(({ spec }) => spec.aliases.map((alias) => ({ alias, model: spec.name })));
      if (aliases.length > 0) await tx.execute(sql`INSERT INTO model_aliases (alias, model) SELECT v.alias, v.model FROM ${recordset(aliases, "alias text, model text")}`);
      const names = [...new Set(models.map((m) => m.spec.name))].map((name) => ({ name }));
      await tx.execute(
        sql`INSERT INTO model_state (model) SELECT v.name FROM ${recordset(names, "name text")}
          ON CONFLICT (model) DO UPDATE SET failures = 0, crashes = 0, parked = false, reason = NULL, unplaceable_reason = NULL`,
      );
    });
  }

  deleteModel(name: string): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => {
      const gone = await tx.delete(schema.models).where(eq(schema.models.name, name)).returning({ n: schema.models.name });
      if (gone.length === 0) return false;
      await tx.delete(schema.modelState).where(eq(schema.modelState.model, name));
      return true;
    });
  }

  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    // Setting the same values twice is setting them once.
    return this.c.write("idempotent", "any", async (tx) => {
      const insert = tx.insert(schema.modelState).values({ model, ...patch });
      await (Object.keys(patch).length === 0 ? insert.onConflictDoNothing() : insert.onConflictDoUpdate({ target: schema.modelState.model, set: patch }));
    });
  }

  unpark(model: string): Promise<boolean> {
    return this.c.write("once", "any", async (tx) => {
      const done = await tx
        .update(schema.modelState)
        .set({ parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null })
        .where(and(eq(schema.modelState.model, model), eq(schema.modelState.parked, true)))
        .returning({ m: schema.modelState.model });
      return done.length > 0;
    });
  }

  parkedModels(): Promise<string[]> {
    return this.c.call("read", async () =>
      (await this.c.db.select({ m: schema.modelState.model }).from(schema.modelState).where(eq(schema.modelState.parked, true)).orderBy(byBytes(schema.modelState.model))).map((r) => r.m),
    );
  }
}

export class PgRecords implements EventsPort {
  constructor(private readonly c: PgConnection) {}

  // ---- events -------------------------------------------------------------------------

  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return this.c.write("once", "meta", async (tx) => (await tx.insert(schema.events).values(eventRecord(e, e.at)).returning({ id: schema.events.id }))[0]!.id);
  }

  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return this.c.call("read", async () => {
      const where = and(
        opts.afterId !== undefined ? gt(schema.events.id, opts.afterId) : undefined,
        opts.subject !== undefined ? eq(schema.events.subject, opts.subject) : undefined,
        opts.kind !== undefined ? eq(schema.events.kind, opts.kind) : undefined,
        opts.since !== undefined ? gte(schema.events.at, opts.since) : undefined,
      );
      if (opts.afterId !== undefined) return (await this.c.db.select().from(schema.events).where(where).orderBy(asc(schema.events.id)).limit(opts.limit)).map(toEvent);
      return (await this.c.db.select().from(schema.events).where(where).orderBy(desc(schema.events.id)).limit(opts.limit)).reverse().map(toEvent);
    });
  }
}
