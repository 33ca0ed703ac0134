// The plan a reconcile step returns, and the builder its steps write into. The builder also
// remembers what earlier steps decided (a replica's new state, its removal), so a later step
// sees the replica as it will be once the plan is applied, not as the snapshot had it.

import type { ModelStateRow, ReplicaRow } from "../types";

export interface NewReplica {
  id: string;
  model: string;
  profile: string;
  shards: { node: string; gpus: number[] }[];
  port: number;
  endpoint: string;
  /** How it is launched (launch.ts); absent: unknown, stamped on the next step. */
  launch?: string;
}

export interface PlanEvent {
  kind: string;
  subject: string;
  message: string;
  data?: unknown;
}

export interface Plan {
  create: NewReplica[];
  update: { id: string; patch: Partial<Pick<ReplicaRow, "state" | "error" | "readyAt" | "failures" | "createdAt" | "launch" | "drainUntil">> }[];
  remove: string[];
  modelState: Map<string, Partial<Omit<ModelStateRow, "model">>>;
  nodeAdmin: { node: string; state: "none" | "cordoned" | "draining" }[];
  events: PlanEvent[];
}

export function emptyPlan(): Plan {
  return { create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [] };
}

export function isEmpty(p: Plan): boolean {
  return p.create.length + p.update.length + p.remove.length + p.modelState.size + p.nodeAdmin.length + p.events.length === 0;
}

/** The plan being built, plus each replica's fate so far within this step. */
export class PlanBuilder {
  readonly plan: Plan = emptyPlan();
  private readonly removed = new Set<string>();
  private readonly newState = new Map<string, ReplicaRow["state"]>();

  /** The replica's state once the plan so far is applied. */
  stateOf(r: ReplicaRow): ReplicaRow["state"] {
    return this.newState.get(r.id) ?? r.state;
  }

  setState(r: ReplicaRow, s: ReplicaRow["state"], extra: Partial<ReplicaRow> = {}): void {
    this.newState.set(r.id, s);
    this.plan.update.push({ id: r.id, patch: { state: s, ...extra } });
  }

  remove(r: ReplicaRow): void {
    this.removed.add(r.id);
    this.plan.remove.push(r.id);
  }

  isRemoved(r: ReplicaRow): boolean {
    return this.removed.has(r.id);
  }

  event(e: PlanEvent): void {
    this.plan.events.push(e);
  }

  /** Merges into what the plan already records for the model. */
  setModel(model: string, patch: Partial<Omit<ModelStateRow, "model">>): void {
    this.plan.modelState.set(model, { ...this.plan.modelState.get(model), ...patch });
  }
}
