// The operator's catalog operations (create, replace, delete a model; unpark one), and the
// router's demand signal (a client asked for a model nothing serves), each reconciled at once:
// what the operator or the client reads next must already reflect it. The rules of a catalog
// change are catalog.ts's; here is the I/O around them, under the write lock.

import type { Logger } from "pino";
import type { Scheduler } from "../lib/scheduler";
import type { CatalogIssue, ModelSpec } from "../protocol/catalog";
import { type PutResult, catalogChanges } from "./catalog";
import { type RevisionResolver, pinRevisions } from "./revision-pins";
import { ConflictError, NotFoundError } from "./errors";
import type { EventLog } from "./event-log";
import type { CatalogPort } from "./store-port";
import type { ModelRow } from "./types";
import type { Waker } from "./wake";
import type { WriteLock } from "./write-lock";

/** The model a name or alias refers to, or undefined. */
export async function resolveModel(store: Pick<CatalogPort, "modelByName" | "modelByAlias">, nameOrAlias: string): Promise<ModelRow | undefined> {
  return (await store.modelByName(nameOrAlias)) ?? (await store.modelByAlias(nameOrAlias));
}

/** The model a name or alias refers to; NotFoundError when none. */
export async function resolveModelOrThrow(store: Pick<CatalogPort, "modelByName" | "modelByAlias">, nameOrAlias: string): Promise<ModelRow> {
  const row = await resolveModel(store, nameOrAlias);
  if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
  return row;
}

export interface CatalogAdminOptions {
  store: CatalogPort;
  events: Pick<EventLog, "event">;
  lock: WriteLock;
  wake: Waker;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
  /** Resolves an hf:// source's branch or tag to the commit kept (revision-pins.ts); absent: only commits are accepted there. */
  hub?: RevisionResolver;
}

export class CatalogAdmin {
  private readonly demandWritten = new Map<string, number>();

  constructor(private readonly o: CatalogAdminOptions) {}

  /**
   * Creates or replaces models, all or none (catalog.ts has the rules). A changed spec gets a
   * new revision, and a new revision unparks the model: the operator changed something, so it
   * deserves another try.
   */
  async putModels(given: ModelSpec[], inFile = false): Promise<PutResult[]> {
    // Outside the lock: the Hub may take a while to answer.
    const specs = await pinRevisions(given, this.o.hub, inFile);
    return this.o.lock.exclusive(async () => {
      const { results, writes, conflicts } = catalogChanges(specs, await this.o.store.models(), inFile);
      if (conflicts.length > 0) throw new ConflictError(conflicts[0]!.message, conflicts[0]!.path, conflicts);
      if (writes.length > 0) await this.o.store.saveModels(writes, this.o.scheduler.now());
      for (const r of results) {
        if (r.result === "unchanged") continue;
        await this.o.events.event(`model.${r.result}`, `model/${r.name}`, `model ${r.name} ${r.result} (revision ${r.revision})`);
        this.o.log.info({ model: r.name, revision: r.revision, result: r.result }, "catalog changed");
      }
      this.o.wake.wake(true);
      return results;
    });
  }

  /** What putModels would refuse of these specs (holes skipped), changing nothing: paths into a catalog file. */
  catalogConflicts(specs: (ModelSpec | undefined)[]): Promise<CatalogIssue[]> {
    return this.o.lock.exclusive(async () => catalogChanges(specs, await this.o.store.models(), true).conflicts);
  }

  deleteModel(nameOrAlias: string): Promise<string> {
    return this.o.lock.exclusive(async () => {
      const row = await resolveModelOrThrow(this.o.store, nameOrAlias);
      if (!(await this.o.store.deleteModel(row.name))) throw new NotFoundError(`model "${row.name}" not found`);
      await this.o.events.event("model.deleted", `model/${row.name}`, `model ${row.name} deleted`);
      this.o.log.info({ model: row.name }, "model deleted");
      this.o.wake.wake(true);
      return row.name;
    });
  }

  /** Clears a parked model so it is tried again; false when it was not parked. */
  unpark(nameOrAlias: string, why = "unparked by an operator"): Promise<{ model: string; changed: boolean }> {
    return this.o.lock.exclusive(async () => {
      const row = await resolveModelOrThrow(this.o.store, nameOrAlias);
      const changed = await this.o.store.unpark(row.name);
      if (changed) {
        await this.o.events.event("model.unparked", `model/${row.name}`, `model ${row.name} unparked (${why}); it will be tried again`);
        this.o.log.info({ model: row.name, why }, "model unparked");
        this.o.wake.wake(true);
      }
      return { model: row.name, changed };
    });
  }

  /**
   * A client asked for a model nothing serves (the router's demand signal): an on-demand model
   * then wants a replica. Written at most once a second per model, however many ask.
   */
  async requestModel(nameOrAlias: string): Promise<boolean> {
    const now = this.o.scheduler.now();
    const last = this.demandWritten.get(nameOrAlias);
    if (last !== undefined && now - last >= 0 && now - last < 1000) return true;
    // Marked before the write, so requests arriving while it is under way do not write again.
    this.demandWritten.set(nameOrAlias, now);
    try {
      const row = await resolveModel(this.o.store, nameOrAlias);
      if (!row) {
        this.demandWritten.delete(nameOrAlias);
        return false;
      }
      await this.o.store.updateModelState(row.name, { lastRequestedAt: now });
    } catch (e) {
      // The router's request path must not fail because the store cannot take a write now.
      this.demandWritten.delete(nameOrAlias);
      this.o.log.warn({ model: nameOrAlias, err: (e as Error).message }, "could not record demand for a model");
      return false;
    }
    this.o.wake.wake(true);
    return true;
  }
}
