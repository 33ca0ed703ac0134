// The control plane's assembly: every part built once, each handed what it uses at construction
// (no part is wired after it is built). The head node (head.ts) builds one around its store and
// router; tests build one around a store of their own. What changes at run time is a small object
// the parts read: the leadership (the lease keeper sets it among several control planes), and
// the wake-ups the control loop listens to.

import type { Logger } from "pino";
import { ApiKeys } from "../control/api-keys";
import { BudgetSpend } from "../control/budget-spend";
import { CatalogAdmin } from "../control/catalog-admin";
import { ModelRestart } from "../control/model-restart";
import { ClockWatch } from "../control/clock-watch";
import { ControlLoop } from "../control/control-loop";
import { EngineKeys } from "../control/engine-keys";
import { EventLog } from "../control/event-log";
import { FleetViews, type SummarySources } from "../control/fleet-views";
import type { Leadership } from "../control/ha";
import type { EndpointSink, UsageSource } from "../control/interfaces";
import { NodeIntake } from "../control/intake";
import { JoinToken } from "../control/join-token";
import { LeadershipCell } from "../control/leadership";
import { LedgerWriter } from "../control/ledger-writer";
import { LimitShareExchange } from "../control/limit-share-exchange";
import { LoadMonitor } from "../control/load";
import { Backups, LogSources } from "../control/log-sources";
import { NodeAdmin } from "../control/node-admin";
import { NodeIdentity } from "../control/node-identity";
import { NodeMemory } from "../control/node-memory";
import { Projector } from "../control/projector";
import type { RevisionResolver } from "../control/revision-pins";
import { type ManifestSource, Manifests } from "../control/manifests";
import type { HubOrders } from "../control/weights-orders";
import { WeightsPlanner } from "../control/weights-planner";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import { LocalManifests, withLocal } from "../control/local-weights";
import { WeightsAdmin } from "../control/weights-admin";
import type { StorePort, UnchangedHeartbeats } from "../control/store-port";
import { Teams } from "../control/teams";
import { UsageExchange } from "../control/usage-exchange";
import { UsageViews } from "../control/usage-views";
import { Wakeups } from "../control/wake";
import { WriteLock } from "../control/write-lock";
import type { Scheduler } from "../lib/scheduler";
import type { ControlSettings } from "./settings";

export interface ControlPlaneOptions {
  store: StorePort;
  /** The in-memory image's fast path for unchanged heartbeats (the image itself, when the store is one). */
  fast?: UnchangedHeartbeats;
  /** Time: wall-clock readings, the long poll's and the loop's timers. */
  scheduler: Scheduler;
  log: Logger;
  version: string;
  /** Where temporary files (backups) go. */
  dataDir: string;
  settings: ControlSettings;
  /** The head node's secret each replica's engine key is derived from (engine-keys.ts); without it engines get no key. */
  engineSecret?: string;
  /** The router's sides; without a router the control plane works all the same, publishes to no one and knows nothing idle. */
  sink?: EndpointSink;
  usage?: UsageSource;
  /**
   * Several control planes on one store: this one's name, which names its router in usage
   * reports, and how long a router's report keeps it limiting idleness. Without it the control
   * plane leads alone.
   */
  shared?: { name: string; liveWithinMs: number };
  /** Leadership at start (default: leading alone under epoch 0, or standing by among several until the lease says otherwise). */
  leadership?: Leadership;
  /** What the summary says of the store's members and of the control planes. */
  summary?: SummarySources;
  /** How a new replica's id is made (default random). */
  newId?: () => string;
  /** The join token in force, which it changes when rotated (without one no agent can join). */
  joinToken?: JoinToken;
  /** The Hub that hf:// sources are resolved against and fetched from (app/hub.ts); without it only commits are accepted there, and nothing is fetched. */
  hub?: RevisionResolver & ManifestSource & HubOrders;
}

/** The parts of one control plane. */
export interface ControlPlane {
  identity: NodeIdentity;
  intake: NodeIntake;
  loop: ControlLoop;
  projector: Projector;
  memory: NodeMemory;
  catalog: CatalogAdmin;
  /** `models restart`: a model's replicas rolled onto the same spec. */
  restarts: ModelRestart;
  nodes: NodeAdmin;
  keys: ApiKeys;
  teams: Teams;
  events: EventLog;
  views: FleetViews;
  logs: LogSources;
  backups: Backups;
  leadership: LeadershipCell;
  wakeups: Wakeups;
  load: LoadMonitor;
  usage: UsageExchange;
  /** The usage ledger's rows, for the admin API. */
  ledger: UsageViews;
  /** `weights ls|pull|rm` (absent without a Hub: nothing is fetched). */
  weights?: WeightsAdmin;
}

export function buildControlPlane(o: ControlPlaneOptions): ControlPlane {
  const { store, scheduler, log, settings } = o;
  const config = settings.reconcile;
  const wakeups = new Wakeups(scheduler);
  // Among several control planes nobody leads before the lease says so: the listeners open (and
  // heartbeats are answered) before this one has asked for it, and it may wait a while to ask.
  const leadership = new LeadershipCell(o.leadership ?? { leading: o.shared === undefined, epoch: 0 }, () => wakeups.wake(true));
  const lock = new WriteLock(scheduler);
  const clock = new ClockWatch(scheduler, config);
  const load = new LoadMonitor(scheduler, settings.heartbeatIntervalMs, config.nodeTimeoutMs);
  const memory = new NodeMemory({ store, log });
  const events = new EventLog({ store, scheduler });
  const usage = new UsageExchange({ ...(o.usage ? { source: o.usage } : {}), ...(o.shared ? { shared: o.shared } : {}), store, log });
  const hubManifests = o.hub ? new Manifests({ hub: o.hub, scheduler, log }) : undefined;
  const wlog = log.child({ component: "weights" });
  // Weights placed at file:// sources, as nodes report them: manifests beside the Hub's.
  const local = new LocalManifests({ log: wlog, changed: () => void planner?.remake() });
  const manifests = hubManifests ? withLocal(hubManifests, local) : undefined;
  const planner: WeightsPlanner | undefined =
    o.hub && manifests
      ? new WeightsPlanner({ manifests, hub: o.hub, local, memory, store, assignments: (n) => projector.assignmentsOf(n), scheduler, log: wlog, seeds: () => admin?.allSeeds() ?? [], observe: (hb, b, a) => admin?.observe(hb, b, a), ordersChanged: (nodes) => nodes.forEach((n) => projector.ordersChanged(n)) })
      : undefined;
  const admin: WeightsAdmin | undefined = planner && manifests ? new WeightsAdmin({ planner, manifests, local, memory, assignments: (n) => projector.assignmentsOf(n), events, store, scheduler, log: wlog }) : undefined;
  const weights = o.hub && manifests ? { weights: { manifests, hub: o.hub, local, ...(planner ? { planner } : {}), ...(admin ? { admin } : {}) } } : {};
  const projector: Projector = new Projector({ ...(o.sink ? { sink: o.sink } : {}), config, engineKeys: new EngineKeys(o.engineSecret), memory, store, leadership, interval: load, scheduler, log, ...weights });
  const writer = new LedgerWriter({ ...(o.usage ? { source: o.usage } : {}), store, retentionMs: settings.usageRetentionMs, log });
  // The budgets' spend is read once the tick's rows are written, so the figure holds them.
  const spend = new BudgetSpend({ ...(o.sink ? { sink: o.sink } : {}), store, writer, scheduler, log });
  const ledger = {
    write: async (now: number, leading: boolean) => {
      await writer.write(now, leading);
      await spend.publish();
    },
  };
  // Several routers on one store share each key's and team's rate limits (limit-shares.ts).
  const limits = o.shared && o.sink && o.usage ? new LimitShareExchange({ ...o.shared, source: o.usage, sink: o.sink, store, scheduler, log }) : undefined;
  const loop = new ControlLoop({ store, memory, projector, usage, ...(limits ? { limits } : {}), ledger, leadership, lock, clock, load, events, wake: wakeups, config, scaleDownDelayMs: settings.scaleDownDelayMs, ...(o.newId ? { newId: o.newId } : {}), ...(planner ? { weights: planner } : {}), scheduler, log });
  const intake = new NodeIntake({ store, ...(o.fast ? { fast: o.fast } : {}), memory, projector, lock, clock, load, wake: wakeups, policy: settings.policy, config, scheduler, log, ...(planner ? { weights: { note: (hb: HeartbeatRequest) => {
          local.note(hb);
          planner.note(hb);
        } } } : {}) });
  return {
    identity: new NodeIdentity({ store, joinToken: o.joinToken ?? new JoinToken() }),
    intake,
    loop,
    projector,
    memory,
    catalog: new CatalogAdmin({ store, events, lock, wake: wakeups, scheduler, log, ...(o.hub ? { hub: o.hub } : {}) }),
    restarts: new ModelRestart({ store, events, lock, wake: wakeups, scheduler, log }),
    nodes: new NodeAdmin({ store, memory, projector, events, lock, wake: wakeups, scheduler, log, ...(planner && admin ? { weights: { forget: (n: string) => [planner, admin].forEach((p) => p.forget(n)) } } : {}) }),
    keys: new ApiKeys({ store, events, projector, scheduler, usage }),
    teams: new Teams({ store, events, projector, scheduler, usage }),
    events,
    views: new FleetViews({ store, memory, usage, clock, load, config, version: o.version, ...(o.summary ? { sources: o.summary } : {}), ...(planner ? { weights: planner } : {}), inFlight: () => admin?.inFlight() ?? null, scheduler }),
    logs: new LogSources({ store, memory }),
    backups: new Backups({ store, dataDir: o.dataDir, scheduler, log }),
    leadership,
    wakeups,
    load,
    usage,
    ledger: new UsageViews({ store, scheduler }),
    ...(admin ? { weights: admin } : {}),
  };
}
