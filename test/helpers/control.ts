// A control plane built in-process around a store a test holds, as app/control-plane.ts builds
// it for a head node, with the settings `serve` has by default (control-settings.ts) unless the
// test says otherwise, and a stand-in for the router: what it was told, and the usage it reports.

import pino, { type Logger } from "pino";
import { type ControlPlane, buildControlPlane } from "../../src/app/control-plane";
import type { NodePolicy } from "../../src/control/admission";
import type { Leadership } from "../../src/control/ha";
import type { ApiKeyEntry, CatalogEntry, EndpointInfo, EndpointSink, UsageSource } from "../../src/control/interfaces";
import { type ReconcileConfig, startMargin } from "../../src/control/reconciler";
import type { StorePort, UnchangedHeartbeats } from "../../src/control/store-port";
import type { Scheduler } from "../../src/lib/scheduler";
import type { ControlSettings } from "../../src/app/settings";
import { CONTROL_DEFAULTS } from "./control-settings";

/**
 * The router's side as a test sees it: every table it was handed, and the usage the test says it
 * reports. With a real router beside it, that router is told the same tables and its usage is
 * read, until a test says otherwise.
 */
export class RouterStandIn implements EndpointSink, UsageSource {
  readonly published: EndpointInfo[][] = [];
  readonly catalogs: CatalogEntry[][] = [];
  readonly keys: ApiKeyEntry[][] = [];
  private side: UsageSource;

  constructor(private readonly real?: EndpointSink & Partial<UsageSource>) {
    const r = real;
    this.side = r?.lastUsed && r.inflightByModel ? (r as UsageSource) : { lastUsed: () => new Map(), inflightByModel: () => new Map() };
  }

  /** What the router reports from now on, as if it had served requests (or restarted). */
  reports(side: UsageSource): void {
    this.side = side;
  }

  setEndpoints(e: EndpointInfo[]): void {
    this.published.push(e);
    this.real?.setEndpoints(e);
  }
  setCatalog(c: CatalogEntry[]): void {
    this.catalogs.push(c);
    this.real?.setCatalog(c);
  }
  setApiKeys(k: ApiKeyEntry[]): void {
    this.keys.push(k);
    this.real?.setApiKeys(k);
  }
  lastUsed(): ReadonlyMap<string, number> {
    return this.side.lastUsed();
  }
  inflightByModel(): ReadonlyMap<string, number> {
    return this.side.inflightByModel();
  }
  watchingSince(): number {
    return this.side.watchingSince?.() ?? Number.NEGATIVE_INFINITY;
  }
}

export interface TestControlOptions {
  store: StorePort;
  scheduler: Scheduler;
  log?: Logger;
  nodeTimeoutMs?: number;
  /** The heartbeat interval the head node announces (the start margin follows it, as in serve). */
  heartbeatIntervalMs?: number;
  reconcile?: Partial<ReconcileConfig>;
  scaleDownDelayMs?: number;
  policy?: Partial<NodePolicy>;
  engineSecret?: string;
  shared?: { name: string; liveWithinMs: number };
  leadership?: Leadership;
  /** Without a router stand-in (false) the control plane publishes to no one and knows nothing idle. */
  router?: boolean;
  /** How new replica ids are made (default random). */
  newId?: () => string;
  /** A real router beside the stand-in (see RouterStandIn). */
  alsoTell?: EndpointSink & Partial<UsageSource>;
}

export type TestControl = ControlPlane & {
  router: RouterStandIn;
  /** The settings it was built with. */
  settings: ControlSettings;
  /** Resolves once the router stand-in holds the API keys (the projector's start). */
  started: Promise<void>;
};

/** Whether the store is an in-memory image, whose fast path for unchanged heartbeats the control plane then takes. */
function fastPathOf(store: StorePort): UnchangedHeartbeats | undefined {
  const s = store as Partial<UnchangedHeartbeats>;
  return typeof s.touchIfUnchanged === "function" && typeof s.replicaVersion === "function" ? (store as StorePort & UnchangedHeartbeats) : undefined;
}

/** A control plane on `store`; with a router stand-in, started (await `started` for the stand-in to hold the API keys). */
export function testControl(o: TestControlOptions): TestControl {
  const hb = o.heartbeatIntervalMs ?? CONTROL_DEFAULTS.heartbeatIntervalMs;
  const router = new RouterStandIn(o.alsoTell);
  const fast = fastPathOf(o.store);
  const settings: ControlSettings = {
    reconcile: { ...CONTROL_DEFAULTS.reconcile, nodeTimeoutMs: o.nodeTimeoutMs ?? CONTROL_DEFAULTS.reconcile.nodeTimeoutMs, startMarginMs: startMargin(hb), ...o.reconcile },
    policy: { ...CONTROL_DEFAULTS.policy, ...o.policy },
    heartbeatIntervalMs: hb,
    scaleDownDelayMs: o.scaleDownDelayMs ?? CONTROL_DEFAULTS.scaleDownDelayMs,
    usageRetentionMs: CONTROL_DEFAULTS.usageRetentionMs,
  };
  const control = buildControlPlane({
    store: o.store,
    ...(fast ? { fast } : {}),
    scheduler: o.scheduler,
    log: o.log ?? pino({ level: "silent" }),
    version: "t",
    dataDir: ".",
    settings,
    ...(o.newId ? { newId: o.newId } : {}),
    ...(o.engineSecret !== undefined ? { engineSecret: o.engineSecret } : {}),
    ...(o.router !== false ? { sink: router, usage: router } : {}),
    ...(o.shared ? { shared: o.shared } : {}),
    ...(o.leadership ? { leadership: o.leadership } : {}),
  });
  const started = o.router !== false ? control.projector.start() : Promise.resolve();
  return { ...control, router, settings, started };
}
