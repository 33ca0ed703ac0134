// The control loop's step, a tick: collect the router's usage and one snapshot; decide scaling,
// reachability and the reconcile plan from them (pure functions); write all of it in one
// transaction, fenced by the lease's epoch when several control planes share the store; then
// project (projector.ts). A standby decides and writes nothing: it follows which nodes are
// unreachable and projects what the leader wrote, for its own agents and router. The pure steps
// are generators (lib/steps.ts): a tick lets the I/O already due run between them, so heartbeats
// are answered during a tick at a few thousand nodes instead of queueing behind all of it. Also
// here: what another control plane's write to the store means for this one (storeChanged).

import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { letIoIn, type Scheduler } from "../lib/scheduler";
import type { ClockWatch, Watched } from "./clock-watch";
import { FencedError } from "./errors";
import type { EventLog } from "./event-log";
import type { LeadershipCell } from "./leadership";
import type { LedgerWriter } from "./ledger-writer";
import type { LimitShareExchange } from "./limit-share-exchange";
import type { LoadMonitor } from "./load";
import type { NodeMemory } from "./node-memory";
import type { Projector } from "./projector";
import { reachability } from "./reachability";
import { type Plan, type ReconcileConfig, emptyPlan, isEmpty, reconcilePaced } from "./reconciler";
import { type ScaleChange, scale, scaleEvent, withTargets } from "./scaling";
import type { PlanWriter } from "./store-port";
import type { NewEvent, Snapshot, StoreChange } from "./types";
import type { UsageExchange } from "./usage-exchange";
import type { Waker } from "./wake";
import type { WeightsPlanner } from "./weights-planner";
import type { WeightsStanding } from "./weights-placement";
import type { WriteLock } from "./write-lock";

export interface ControlLoopOptions {
  store: PlanWriter;
  memory: NodeMemory;
  projector: Pick<Projector, "project">;
  usage: UsageExchange;
  /** Several control planes: the routers' shares of the rate limits (limit-share-exchange.ts); absent: a router holds them whole. */
  limits?: Pick<LimitShareExchange, "exchange">;
  /** The usage ledger's writes (ledger-writer.ts); absent: none. */
  ledger?: Pick<LedgerWriter, "write">;
  leadership: LeadershipCell;
  lock: WriteLock;
  clock: ClockWatch;
  load: LoadMonitor;
  events: Pick<EventLog, "event">;
  wake: Waker;
  config: ReconcileConfig;
  /** Load must stay low this long before a model scales down. */
  scaleDownDelayMs: number;
  /** How a new replica's id is made (default random: r- and 8 hex digits). */
  newId?: () => string;
  /** Each node's standing for the Hub weights of each model (weights-planner.ts); absent: none known. */
  weights?: Pick<WeightsPlanner, "placement">;
  scheduler: Scheduler;
  log: Logger;
}

export class ControlLoop {
  /** Per model, since when its load has been low enough to scale down (scaling.ts). */
  private lowSince: ReadonlyMap<string, number> = new Map();
  /** Of the tick under way, the time spent in pause(): listening, not working. */
  private pausedMs = 0;

  constructor(private readonly o: ControlLoopOptions) {}

  /**
   * One control-plane step: collect the router's usage and one snapshot; decide scaling,
   * reachability and the reconcile plan from them; apply all of it in one transaction; project.
   * Returns the reconciler's plan.
   */
  tick(): Promise<Plan> {
    return this.o.lock.exclusive(async () => {
      const { scheduler, load, usage, memory } = this.o;
      const began = scheduler.mono();
      this.pausedMs = 0;
      // Before any silence is judged: a stall that ended just now counts already.
      load.sample();
      // Usage first, so idleness is as fresh as what is published beside it.
      await usage.refresh();
      usage.collect();
      // The snapshot before the clock is read: unchanged heartbeats are answered without the
      // lock, so they may stamp nodes while this tick waits (the usage exchange, the store). A
      // stamp later than `now` would read as a clock that went back (observedFrom): the node
      // heard last at the start of the watch, and declared unreachable a moment after its heartbeat.
      const read = await memory.snapshot();
      const now = scheduler.now();
      const seen = this.o.clock.observe(now);
      await usage.exchange(now, seen.watchedSince);
      await this.o.limits?.exchange();
      const leading = this.o.leadership.get().leading;
      const decided = leading ? await this.decide(read, now, seen) : this.standBy(read, now);
      // Unchanged state projects to unchanged assignments and endpoints: the projector skips the O(fleet) work.
      await this.o.projector.project(decided.after, () => this.tickPause());
      // The tick's own work: the pauses that let heartbeats in between its steps were listening time.
      load.tickTook(scheduler.mono() - began - this.pausedMs);
      await this.writeEpisodes(this.o.leadership.get().leading);
      // The router's rows came with its usage (refresh above); written last, off the decisions' path.
      await this.o.ledger?.write(now, this.o.leadership.get().leading);
      return decided.plan;
    });
  }

  /**
   * Another control plane wrote to the store (its watch, or the periodic backstop): load what
   * its heartbeats said (node reports whose time moved), then look again soon: the leader
   * reconciles (demand may have arrived there), a standby projects what the leader wrote for
   * its own agents and router.
   */
  async storeChanged(change: StoreChange = "any"): Promise<void> {
    // The lease and usage reports are read on their own rounds and ticks: nothing to do now.
    if (change === "meta") return;
    if (change === "any" || change === "reports") if (await this.o.memory.loadReports()) this.o.wake.wake();
    this.o.wake.wake();
  }

  /**
   * Between the steps of a tick: lets the I/O already due run (heartbeats above all), so none
   * waits for the whole of them, which at a few thousand nodes is tens of milliseconds of work.
   * What runs meanwhile cannot change what a tick decides on: the snapshot is a value, heartbeats
   * that change state wait for the lock the tick holds, and unchanged ones only stamp a node
   * (into rows the snapshot does not hold). Counted as the tick's listening time.
   */
  private async tickPause(): Promise<void> {
    const from = this.o.scheduler.mono();
    await letIoIn(this.o.scheduler);
    this.pausedMs += this.o.scheduler.mono() - from;
  }

  /** The leader's part of a tick: scaling, reachability and the reconcile plan, written in one fenced transaction. */
  private async decide(read: Snapshot, now: number, seen: Watched): Promise<{ plan: Plan; after: Snapshot }> {
    const { usage, load, memory } = this.o;
    const inflight = usage.inflightByModel();
    const scaled = inflight
      ? scale({ models: read.models, modelState: read.modelState, inflight, now, delayMs: this.o.scaleDownDelayMs, lowSince: this.lowSince })
      : { changes: [], lowSince: this.lowSince };
    // The reconcile step sees the targets as they will be written.
    const snapshot = scaled.changes.length > 0 ? { ...read, modelState: withTargets(read.modelState, scaled.changes) } : read;
    // Deadlines discount the time this head node was not listening, and cover the interval announced.
    const deaf = load.deafSpans();
    const config = { ...this.o.config, nodeTimeoutMs: load.nodeTimeoutInForce() };
    const reach = reachability({ nodes: snapshot.nodes, now, watchedSince: seen.watchedSince, nodeTimeoutMs: config.nodeTimeoutMs, unreachable: memory.unreachable, deaf });
    await this.tickPause();
    // With several routers, nothing is known idle for longer than every live one has watched.
    const plan = await reconcilePaced(
      { snapshot, now, lastUsed: usage.lastUsed, config, newId: this.o.newId ?? newId, engines: memory.engines, deaf, ...this.weightsOf(snapshot), ...this.inflightOf(), ...seen, jumpedAt: Math.max(seen.jumpedAt, usage.since) },
      () => this.tickPause(),
    );
    const write = combined(plan, scaled.changes, reach.events);
    let after = snapshot;
    if (!isEmpty(write)) {
      const { name, holder = name, epoch } = this.o.leadership.get();
      try {
        // Several control planes: only under the lease this one holds (the store checks it in the transaction).
        await this.o.store.applyPlan(write, now, holder !== undefined ? { holder, epoch } : undefined);
      } catch (e) {
        if (!(e instanceof FencedError)) throw e;
        this.o.log.warn({ epoch: e.epoch, name: this.o.leadership.get().name }, e.message);
        this.o.leadership.fenced(e);
        return { plan: emptyPlan(), after: await memory.snapshot() };
      }
      for (const e of reach.events) this.o.log.warn({ kind: e.kind, subject: e.subject }, e.message);
      for (const e of plan.events) this.o.log.info({ kind: e.kind, subject: e.subject }, e.message);
      after = await memory.snapshot();
    }
    this.lowSince = scaled.lowSince;
    memory.setUnreachable(reach.unreachable);
    return { plan, after };
  }

  /** The router's requests in flight per replica, for a roll's drains (usage-exchange.ts: when it is known). */
  private inflightOf(): { inflight?: ReadonlyMap<string, number> } {
    const inflight = this.o.usage.inflightByReplica();
    return inflight ? { inflight } : {};
  }

  private weightsOf(snapshot: Snapshot): { weights?: WeightsStanding } {
    return this.o.weights ? { weights: this.o.weights.placement(snapshot.models) } : {};
  }

  /**
   * A standby's tick: nothing decided or written. Which nodes are unreachable is still followed
   * (silently: the leader writes the events), so one that takes over does not announce again an
   * outage the old leader already did.
   */
  private standBy(read: Snapshot, now: number): { plan: Plan; after: Snapshot } {
    const { load, memory } = this.o;
    const nodeTimeoutMs = load.nodeTimeoutInForce();
    memory.setUnreachable(reachability({ nodes: read.nodes, now, watchedSince: this.o.clock.watchedSince, nodeTimeoutMs, unreachable: memory.unreachable, deaf: load.deafSpans() }).unreachable);
    return { plan: emptyPlan(), after: read };
  }

  /** head.behind / head.caught_up, once per episode, as events and in the log. */
  private async writeEpisodes(write = true): Promise<void> {
    const { log } = this.o;
    for (const e of this.o.load.takeEpisodes()) {
      const by = Number((e.behindMs / 1000).toFixed(1));
      const every = Number((e.intervalMs / 1000).toFixed(1));
      const message = e.kind === "head.behind" ? `head node behind by ${by} s: heartbeats slowed to ${every} s` : `head node caught up (it was behind by up to ${by} s): heartbeats every ${every} s`;
      // A standby writes nothing in its tick: its episodes go to its log only.
      if (write) await this.o.events.event(e.kind, "head", message, { behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: Math.round(e.intervalMs) });
      if (e.kind === "head.behind") log.warn({ kind: e.kind, behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: e.intervalMs }, message);
      else log.info({ kind: e.kind, behind_ms: Math.round(e.behindMs), heartbeat_interval_ms: e.intervalMs }, message);
    }
  }
}

/** A new replica's id. */
const newId = (): string => `r-${randomBytes(4).toString("hex")}`;

/** The tick's one write: scaling targets, then reachability, then the reconcile plan, with their events in that order. */
function combined(plan: Plan, changes: readonly ScaleChange[], reached: readonly NewEvent[]): Plan {
  if (changes.length === 0 && reached.length === 0) return plan;
  const modelState = new Map(plan.modelState);
  for (const c of changes) modelState.set(c.model, { scaleTarget: c.to, ...modelState.get(c.model) });
  return { ...plan, modelState, events: [...changes.map(scaleEvent), ...reached, ...plan.events] };
}
