// The control plane's front door: the admin and agent APIs call it; it reads and writes the
// store and derives every view from one snapshot. Placement and reconciliation hang off its
// tick (next issue); the router meets it only through the interfaces in interfaces.ts.

import type { Logger } from "pino";
import type { ModelSpec } from "../protocol/catalog";
import type { HeartbeatRequest, HeartbeatResponse } from "../protocol/heartbeat";
import type { AdminState, EventView, ModelView, NodeView, ReplicaView, Summary, Tables } from "../protocol/views";
import { NotFoundError, type Store } from "../store";
import type { Clock } from "./clock";
import type { UsageSource } from "./interfaces";
import { summarize } from "./summary";
import { buildTables } from "./views";

export interface ControllerOptions {
  store: Store;
  clock: Clock;
  log: Logger;
  version: string;
  nodeTimeoutMs: number;
  heartbeatIntervalMs: number;
}

export class Controller {
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly log: Logger;
  private usage: UsageSource | undefined;
  /** The router's last-used map as collected on the latest tick. */
  private lastUsed: ReadonlyMap<string, number> = new Map();

  constructor(readonly opts: ControllerOptions) {
    this.store = opts.store;
    this.clock = opts.clock;
    this.log = opts.log;
  }

  /**
   * A setter, not a constructor argument: a control plane without a router is fully working,
   * it just cannot tell idle from busy, and says "unknown".
   */
  setUsageSource(u: UsageSource): void {
    this.usage = u;
  }

  /** One control-plane step. Usage first, so idleness is as fresh as what is published. */
  tick(): void {
    if (this.usage) this.lastUsed = new Map(this.usage.lastUsed());
  }

  // ---- agents -------------------------------------------------------------------------

  heartbeat(hb: HeartbeatRequest): HeartbeatResponse {
    const now = this.clock.now();
    const { created } = this.store.applyHeartbeat(hb, now);
    if (created) {
      const gpus = hb.gpus.length;
      this.event("node.registered", `node/${hb.node}`, `node ${hb.node} registered with ${gpus} GPU${gpus === 1 ? "" : "s"} (${hb.address})`);
      this.log.info({ node: hb.node, address: hb.address, gpus, fabrics: hb.fabrics }, "node registered");
    }
    return { assignments: [], heartbeat_interval_ms: this.opts.heartbeatIntervalMs, generation: 0 };
  }

  // ---- views --------------------------------------------------------------------------

  tables(): Tables {
    return buildTables({
      snapshot: this.store.snapshot(),
      now: this.clock.now(),
      lastUsed: this.lastUsed,
      nodeTimeoutMs: this.opts.nodeTimeoutMs,
    });
  }

  summary(): Summary {
    return summarize(this.tables(), { version: this.opts.version });
  }

  nodes(): NodeView[] {
    return this.tables().nodes;
  }

  node(name: string): NodeView {
    const n = this.tables().nodes.find((x) => x.name === name);
    if (!n) throw new NotFoundError(`node "${name}" not found`);
    return n;
  }

  replicas(model?: string): ReplicaView[] {
    const all = this.tables().replicas;
    if (model === undefined) return all;
    const resolved = this.store.resolveModel(model)?.name ?? model;
    return all.filter((r) => r.model === resolved);
  }

  models(): ModelView[] {
    return this.tables().models;
  }

  model(nameOrAlias: string): { view: ModelView; spec: ModelSpec } {
    const row = this.store.resolveModel(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    const view = this.tables().models.find((m) => m.name === row.name)!;
    return { view, spec: row.spec };
  }

  // ---- catalog ------------------------------------------------------------------------

  putModels(specs: ModelSpec[]) {
    const results = this.store.putModels(specs, this.clock.now());
    for (const r of results) {
      if (r.result === "unchanged") continue;
      this.event(`model.${r.result}`, `model/${r.name}`, `model ${r.name} ${r.result} (revision ${r.revision})`);
      this.log.info({ model: r.name, revision: r.revision, result: r.result }, "catalog changed");
    }
    return results;
  }

  deleteModel(nameOrAlias: string): string {
    const row = this.store.resolveModel(nameOrAlias);
    if (!row) throw new NotFoundError(`model "${nameOrAlias}" not found`);
    this.store.deleteModel(row.name);
    this.event("model.deleted", `model/${row.name}`, `model ${row.name} deleted`);
    this.log.info({ model: row.name }, "model deleted");
    return row.name;
  }

  // ---- node admin ---------------------------------------------------------------------

  setNodeAdminState(name: string, state: AdminState): { changed: boolean } {
    const { previous } = this.store.setAdminState(name, state);
    const verb = state === "none" ? "uncordoned" : state;
    if (previous !== state) {
      this.event(`node.${verb}`, `node/${name}`, `node ${name} ${verb}`);
      this.log.info({ node: name, from: previous, to: state }, `node ${verb}`);
    }
    return { changed: previous !== state };
  }

  // ---- events -------------------------------------------------------------------------

  event(kind: string, subject: string, message: string, data?: unknown): void {
    this.store.appendEvent({ at: this.clock.now(), kind, subject, message, data });
  }

  events(opts: { afterId?: number; limit: number; subject?: string }): EventView[] {
    return this.store.listEvents(opts).map((e) => ({
      id: e.id,
      at: new Date(e.at).toISOString(),
      kind: e.kind,
      subject: e.subject,
      message: e.message,
    }));
  }
}
