// The SQLite dialect's catalog (models, their aliases and control state), and its records: the
// event log (the client API keys and teams are keys.ts).

import { and, asc, desc, eq, gt, gte } from "drizzle-orm";
import type { CatalogPort, EventsPort } from "../../control/store-port";
import type { EventRow, ModelRow, ModelStateRow, ModelWrite, NewEvent } from "../../control/types";
import { guarded } from "../errors";
import { type Sqlite, eventRecord, schema, toEvent, toModel } from "./db";

export class SqliteCatalog implements CatalogPort {
  constructor(private readonly s: Sqlite) {}

  models(): Promise<ModelRow[]> {
    return guarded(() => this.s.db.select().from(schema.models).orderBy(asc(schema.models.name)).all().map(toModel));
  }

  modelByName(name: string): Promise<ModelRow | undefined> {
    return guarded(() => {
      const r = this.s.db.select().from(schema.models).where(eq(schema.models.name, name)).get();
      return r && toModel(r);
    });
  }

  modelByAlias(alias: string): Promise<ModelRow | undefined> {
    return guarded(() => {
      const a = this.s.db.select().from(schema.modelAliases).where(eq(schema.modelAliases.alias, alias)).get();
      const r = a && this.s.db.select().from(schema.models).where(eq(schema.models.name, a.model)).get();
      return r ? toModel(r) : undefined;
    });
  }

  saveModels(models: ModelWrite[], now: number): Promise<void> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        for (const { spec, revision, created } of models) {
          if (created) tx.insert(schema.models).values({ name: spec.name, spec, revision, createdAt: now, updatedAt: now }).run();
          else {
            tx.update(schema.models).set({ spec, revision, updatedAt: now }).where(eq(schema.models.name, spec.name)).run();
            tx.delete(schema.modelAliases).where(eq(schema.modelAliases.model, spec.name)).run();
          }
          if (spec.aliases.length > 0) tx.insert(schema.modelAliases).values(spec.aliases.map((a) => ({ alias: a, model: spec.name }))).run();
          tx.insert(schema.modelState)
            .values({ model: spec.name })
            .onConflictDoUpdate({ target: schema.modelState.model, set: { failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null } })
            .run();
        }
      }),
    );
  }

  deleteModel(name: string): Promise<boolean> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        const row = tx.select({ n: schema.models.name }).from(schema.models).where(eq(schema.models.name, name)).get();
        if (!row) return false;
        tx.delete(schema.models).where(eq(schema.models.name, name)).run();
        tx.delete(schema.modelState).where(eq(schema.modelState.model, name)).run();
        return true;
      }),
    );
  }

  updateModelState(model: string, patch: Partial<Omit<ModelStateRow, "model">>): Promise<void> {
    return guarded(() => {
      this.s.db.insert(schema.modelState).values({ model, ...patch }).onConflictDoUpdate({ target: schema.modelState.model, set: patch }).run();
    });
  }

  unpark(model: string): Promise<boolean> {
    return guarded(() =>
      this.s.db.transaction((tx) => {
        const st = tx.select().from(schema.modelState).where(eq(schema.modelState.model, model)).get();
        if (!st?.parked) return false;
        tx.update(schema.modelState).set({ parked: false, failures: 0, crashes: 0, reason: null, lastFailureAt: null }).where(eq(schema.modelState.model, model)).run();
        return true;
      }),
    );
  }

  parkedModels(): Promise<string[]> {
    return guarded(() =>
      this.s.db
        .select({ m: schema.modelState.model })
        .from(schema.modelState)
        .where(eq(schema.modelState.parked, true))
        .all()
        .map((r) => r.m),
    );
  }
}

export class SqliteRecords implements EventsPort {
  constructor(private readonly s: Sqlite) {}

  appendEvent(e: NewEvent & { at: number }): Promise<number> {
    return guarded(() => this.s.db.insert(schema.events).values(eventRecord(e, e.at)).returning({ id: schema.events.id }).get().id);
  }

  listEvents(opts: { afterId?: number; limit: number; subject?: string; kind?: string; since?: number }): Promise<EventRow[]> {
    return guarded(() => {
      const where = and(
        opts.afterId !== undefined ? gt(schema.events.id, opts.afterId) : undefined,
        opts.subject !== undefined ? eq(schema.events.subject, opts.subject) : undefined,
        opts.kind !== undefined ? eq(schema.events.kind, opts.kind) : undefined,
        opts.since !== undefined ? gte(schema.events.at, opts.since) : undefined,
      );
      if (opts.afterId !== undefined) return this.s.db.select().from(schema.events).where(where).orderBy(asc(schema.events.id)).limit(opts.limit).all().map(toEvent);
      return this.s.db.select().from(schema.events).where(where).orderBy(desc(schema.events.id)).limit(opts.limit).all().reverse().map(toEvent);
    });
  }
}
