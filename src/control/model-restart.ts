// `llmgw models restart NAME`: the model's replicas rolled onto the same spec, as a catalog change
// to how they start would roll them (reconcile/rollout.ts), for when something outside the
// catalog changed (an engine upgraded on the nodes). The request is written into the replicas
// themselves (their launch fingerprint overwritten with a mark no spec has), so the roll is in the
// store: a restarted control plane, or another one taking the lead, carries it on.

import type { Logger } from "pino";
import { resolveModelOrThrow } from "./catalog-admin";
import type { EventLog } from "./event-log";
import { RESTART_MARK } from "./launch";
import type { CatalogPort, FleetRead, PlanWriter } from "./store-port";
import type { Waker } from "./wake";
import type { WriteLock } from "./write-lock";
import type { Scheduler } from "../lib/scheduler";

export interface ModelRestartOptions {
  store: Pick<CatalogPort, "modelByName" | "modelByAlias"> & Pick<FleetRead, "replicaSnapshot"> & PlanWriter;
  events: Pick<EventLog, "event">;
  lock: WriteLock;
  wake: Waker;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
}

export class ModelRestart {
  constructor(private readonly o: ModelRestartOptions) {}

  /** Marks the model's starting and ready replicas to be replaced; answers how many. */
  restart(nameOrAlias: string): Promise<{ model: string; replicas: number }> {
    return this.o.lock.exclusive(async () => {
      const row = await resolveModelOrThrow(this.o.store, nameOrAlias);
      const { replicas } = await this.o.store.replicaSnapshot();
      const mine = replicas.filter((r) => r.model === row.name && (r.state === "starting" || r.state === "ready"));
      if (mine.length > 0) {
        const update = mine.map((r) => ({ id: r.id, patch: { launch: RESTART_MARK } }));
        await this.o.store.applyPlan({ create: [], update, remove: [], modelState: new Map(), nodeAdmin: [], events: [] }, this.o.scheduler.now());
        this.o.wake.wake(true);
      }
      await this.o.events.event("model.restarting", `model/${row.name}`, `model ${row.name}: rolling restart of ${mine.length} replica${mine.length === 1 ? "" : "s"} requested`);
      this.o.log.info({ model: row.name, replicas: mine.length }, "rolling restart requested");
      return { model: row.name, replicas: mine.length };
    });
  }
}
