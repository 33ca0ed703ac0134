// The head node's side of the router thread: a RouterLink is the EndpointSink and UsageSource
// the control plane is given, and it forwards demand to the control plane. It posts each table to
// the router thread (and keeps the latest, to re-send to a new thread); usage is the latest
// snapshot the thread reported, refreshed before each control-loop tick; traffic figures are
// asked for when someone reads them (the admin API, the dashboard). A router thread that
// dies unexpectedly is logged and replaced on the same port.

import { Worker } from "node:worker_threads";
import type { Logger } from "pino";
import type { Scheduler, Timer } from "../lib/scheduler";
import type { LedgerCheckSource, ReplicaDrift } from "../protocol/ledger-check";
import { FromRouter, type ToRouter } from "../protocol/router-link";
import type { ApiKeyEntry, BudgetSpent, CatalogEntry, DemandSink, EndpointInfo, EndpointSink, FleetMetricsSink, LimitShares, LimitUseEntry, ModelTraffic, TrafficSource, UsageRow, UsageSource } from "../protocol/routing";
import { mergeUsageRows } from "../protocol/usage-rows";
import type { RouterWorkerData } from "./router-worker";
import { ListReceived, ListSent } from "./list-delta";

/**
 * The worker's module. From source, the file beside this one; in the compiled binary (build.ts
 * lists it as an entrypoint) the bundle under the binary's embedded root, laid out as src/ is,
 * with .js: the bundler does not rewrite the path of a node:worker_threads Worker.
 */
function workerModule(): string {
  const here = import.meta.url;
  if (here.includes("$bunfs")) return new URL("./app/router-worker.js", here).pathname;
  return new URL("./router-worker.ts", here).pathname;
}

/**
 * How often the endpoint list and the catalog reach the router thread, each, once a burst has
 * used up TABLE_BURST posts: the latest of a burst is posted at the end of each such period.
 * While a large catalog comes up, every heartbeat that reports a replica ready changes the list,
 * and each copy costs the thread that serves prompts milliseconds to receive and index at a
 * thousand replicas. Changes at the everyday rate (an apply, a few replicas ready) go at once.
 */
export const TABLE_EVERY_MS = 200;
/** Posts of one table that go at once before TABLE_EVERY_MS paces them; one comes back per period. */
export const TABLE_BURST = 8;

/** How long a tick waits for the router thread's usage report. */
const USAGE_DEADLINE_MS = 1_000;
/** How long a reader of the traffic figures waits for the router thread's answer. */
const TRAFFIC_DEADLINE_MS = 1_000;

export class RouterLink implements EndpointSink, UsageSource, TrafficSource, FleetMetricsSink, LedgerCheckSource {
  private worker: Worker | undefined;
  private stopping = false;
  private endpoints: EndpointInfo[] | undefined;
  private catalog: CatalogEntry[] | undefined;
  private keys: ApiKeyEntry[] | undefined;
  private fleet: string | undefined;
  private shares: LimitShares | undefined;
  private used: ReadonlyMap<string, number> = new Map();
  private inflight: ReadonlyMap<string, number> = new Map();
  private replicaInflight: ReadonlyMap<string, number> | undefined;
  /** Each limited key's and team's use, as of the last usage report. */
  private limits: readonly LimitUseEntry[] = [];
  /** The ledger's rows the thread handed over, until the control loop takes them. */
  private ledgerIn: UsageRow[] = [];
  /** The number of the thread's latest ledger take received (UsageSource.ledgerGen). */
  private ledgerTake = 0;
  /** The budgets' spend last sent. */
  private spent: BudgetSpent | undefined;
  private nextId = 1;
  /** Answers awaited, by request id: called once the answer is in, or the thread is gone. */
  private pending = new Map<number, () => void>();
  /** The last traffic figures the thread reported, for a reader it did not answer in time. */
  private lastTraffic: ModelTraffic[] = [];
  /** The last reconciliation the thread reported, for a reader it did not answer in time. */
  private lastCheck: ReplicaDrift[] = [];
  /** The figures received so far, per model: the thread sends only what changed (list-delta.ts). */
  private readonly trafficIn = new ListReceived<ModelTraffic>((t) => t.model);
  /** What the current thread was sent of each table: the next post carries only what changed. */
  private readonly endpointsOut = new ListSent<EndpointInfo>((e) => e.id);
  private readonly catalogOut = new ListSent<CatalogEntry>((m) => m.name);
  private restarts = 0;
  /** When the current router thread started listening: its stamps go back no further. */
  private startedAt = Number.NEGATIVE_INFINITY;
  /** Per table: its posts left (a token bucket of TABLE_BURST, one back per TABLE_EVERY_MS), as of when, and the post held back. */
  private readonly tables = {
    endpoints: { tokens: TABLE_BURST, at: Number.NEGATIVE_INFINITY, timer: undefined as Timer | undefined },
    catalog: { tokens: TABLE_BURST, at: Number.NEGATIVE_INFINITY, timer: undefined as Timer | undefined },
  };

  constructor(private readonly o: { data: RouterWorkerData; demand: DemandSink; log: Logger; scheduler: Scheduler }) {}

  /** Starts the router thread; resolves once it listens, with its port, or rejects with the listener's error. */
  async start(): Promise<{ port: number }> {
    const port = await this.spawn();
    // A replacement thread listens where the first one did, even when the config said port 0.
    this.o.data.port = port;
    // Shares set before the thread ran (a head node among several) reach it before any key.
    if (this.shares) this.setLimitShares(this.shares);
    return { port };
  }

  private spawn(): Promise<number> {
    return new Promise((resolve, reject) => {
      const worker = new Worker(workerModule(), { workerData: this.o.data });
      this.worker = worker;
      let started = false;
      worker.on("message", (raw: unknown) => {
        const parsed = FromRouter.safeParse(raw);
        if (!parsed.success) {
          this.o.log.error({ issues: parsed.error.issues.slice(0, 3) }, "dropped a malformed message from the router thread");
          return;
        }
        const m = parsed.data;
        if (m.type === "started") {
          started = true;
          this.startedAt = this.o.scheduler.now();
          resolve(m.port);
        } else if (m.type === "failed") reject(new Error(m.error));
        else if (m.type === "demand") this.o.demand.requestModel(m.model);
        else if (m.type === "ledger_check") this.answered(m.id, () => (this.lastCheck = m.replicas));
        else if (m.type === "usage" || m.type === "traffic") {
          // A late answer still counts: it is the newest the thread gave.
          if (m.type === "usage") {
            this.used = new Map(m.lastUsed);
            this.inflight = new Map(m.inflightByModel);
            this.replicaInflight = m.inflightByReplica ? new Map(m.inflightByReplica) : undefined;
            this.limits = m.limitUse ?? [];
            // Every answer's rows are kept, a late one's too: the thread has forgotten them.
            if (m.ledger !== undefined && m.ledger.length > 0) this.ledgerIn = this.ledgerIn.length === 0 ? m.ledger : mergeUsageRows([...this.ledgerIn, ...m.ledger]);
            if (m.ledger_gen !== undefined) this.ledgerTake = m.ledger_gen;
          } else this.lastTraffic = this.trafficIn.take(m);
          const done = this.pending.get(m.id);
          this.pending.delete(m.id);
          done?.();
        }
      });
      worker.on("error", (err: Error) => {
        this.o.log.error({ err }, `router thread failed: ${err.message}`);
        if (!started) reject(err);
      });
      worker.on("exit", (code) => {
        this.flushPending();
        if (this.worker !== worker || this.stopping || !started) return;
        this.worker = undefined;
        // What it served since its last report is lost with it: idleness is unknown from now.
        this.startedAt = this.o.scheduler.now();
        this.o.log.error({ exit_code: code, restarts: this.restarts }, "router thread exited unexpectedly: starting a new one");
        void this.restart();
      });
    });
  }

  private async restart(): Promise<void> {
    this.restarts++;
    try {
      const port = await this.spawn();
      this.resend();
      this.o.log.warn({ port, restarts: this.restarts }, "router restarted: endpoints, catalog, API keys and fleet metrics sent again");
    } catch (e) {
      this.o.log.error({ err: e }, `router thread could not restart: ${(e as Error).message}`);
    }
  }

  private resend(): void {
    // A new thread has received nothing: the tables go whole.
    this.endpointsOut.reset();
    this.catalogOut.reset();
    this.sendTable("endpoints");
    this.sendTable("catalog");
    // The shares first: the keys' buckets are made at them.
    if (this.shares) this.setLimitShares(this.shares);
    if (this.keys) this.post({ type: "api_keys", keys: this.keys });
    if (this.fleet !== undefined) this.post({ type: "fleet_metrics", text: this.fleet });
    if (this.spent !== undefined) this.post({ type: "budget_spent", ...this.spent });
  }

  private post(m: ToRouter): void {
    this.worker?.postMessage(m);
  }

  private flushPending(): void {
    for (const done of this.pending.values()) done();
    this.pending.clear();
  }

  setEndpoints(endpoints: EndpointInfo[]): void {
    this.endpoints = endpoints;
    this.postTable("endpoints");
  }

  setCatalog(models: CatalogEntry[]): void {
    this.catalog = models;
    this.postTable("catalog");
  }

  /** Posts the latest of a table now while the table has posts left, else when the next one comes back. */
  private postTable(kind: "endpoints" | "catalog"): void {
    const t = this.tables[kind];
    if (t.timer !== undefined) return;
    const now = this.o.scheduler.mono();
    if (t.at === Number.NEGATIVE_INFINITY) t.at = now;
    const back = Math.floor((now - t.at) / TABLE_EVERY_MS);
    if (back > 0) {
      t.tokens = Math.min(TABLE_BURST, t.tokens + back);
      t.at = t.tokens === TABLE_BURST ? now : t.at + back * TABLE_EVERY_MS;
    }
    const send = () => this.sendTable(kind);
    if (t.tokens > 0) {
      t.tokens--;
      return send();
    }
    t.timer = this.o.scheduler.after(t.at + TABLE_EVERY_MS - now, () => {
      t.timer = undefined;
      t.tokens = 0;
      t.at += TABLE_EVERY_MS;
      send();
    });
  }

  /** Posts the latest of a table as the change from what this thread was last sent; nothing without a thread. */
  private sendTable(kind: "endpoints" | "catalog"): void {
    // Without a thread nothing is sent, so nothing counts as sent: the delta waits for one.
    if (!this.worker) return;
    if (kind === "endpoints" && this.endpoints) this.post({ type: "endpoints", ...this.endpointsOut.delta(this.endpoints) });
    if (kind === "catalog" && this.catalog) this.post({ type: "catalog", ...this.catalogOut.delta(this.catalog) });
  }

  setApiKeys(keys: ApiKeyEntry[]): void {
    this.keys = keys;
    this.post({ type: "api_keys", keys });
  }

  /** The budgets' stored spend, kept for a new thread: its takes are numbered after the figure's, so it counts them all (router/budget.ts). */
  setBudgetSpent(spent: BudgetSpent): void {
    this.spent = spent;
    this.post({ type: "budget_spent", ...spent });
  }

  ledgerGen(): number {
    return this.ledgerTake;
  }

  setLimitShares(s: LimitShares): void {
    this.shares = s;
    const pairs = (l: readonly (readonly [string, number])[]) => l.map(([x, n]) => [x, n] as [string, number]);
    this.post({ type: "limit_shares", shares: pairs(s.shares), fallback: s.fallback, ...(s.slots ? { slots: pairs(s.slots) } : {}), ...(s.awaiting ? { awaiting: true } : {}) });
  }

  setFleetMetrics(text: string): void {
    this.fleet = text;
    this.post({ type: "fleet_metrics", text });
  }

  lastUsed(): ReadonlyMap<string, number> {
    return this.used;
  }

  limitUse(): readonly LimitUseEntry[] {
    return this.limits;
  }

  inflightByModel(): ReadonlyMap<string, number> {
    return this.inflight;
  }

  /** Undefined until the thread first answered: nothing is known yet. */
  inflightByReplica(): ReadonlyMap<string, number> | undefined {
    return this.replicaInflight;
  }

  takeLedger(): UsageRow[] {
    const rows = this.ledgerIn;
    this.ledgerIn = [];
    return rows;
  }

  watchingSince(): number {
    return this.startedAt;
  }

  /** Asks the router thread for fresh usage; resolves when it answered (or is gone: the last snapshot stays). */
  refresh(): Promise<void> {
    if (!this.worker) return Promise.resolve();
    const id = this.nextId++;
    return new Promise((resolve) => {
      // A router thread that does not answer within a second (hung, or busy past reason) must
      // not hold the control loop: the tick goes on with the last usage it has.
      const deadline = this.o.scheduler.after(USAGE_DEADLINE_MS, () => {
        if (!this.pending.delete(id)) return;
        this.o.log.warn({ waited_ms: USAGE_DEADLINE_MS }, "router thread did not report usage in time: the tick uses the last report");
        resolve();
      });
      this.pending.set(id, () => {
        deadline.cancel();
        resolve();
      });
      this.post({ type: "usage_request", id });
    });
  }

  /**
   * TrafficSource: asks the router thread for its figures. A thread that does not answer in time
   * (or is gone) gets the last figures it reported: a reader is never held longer than that.
   */
  traffic(): Promise<ModelTraffic[]> {
    if (!this.worker) return Promise.resolve(this.lastTraffic);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const deadline = this.o.scheduler.after(TRAFFIC_DEADLINE_MS, () => {
        if (!this.pending.delete(id)) return;
        this.o.log.warn({ waited_ms: TRAFFIC_DEADLINE_MS }, "router thread did not report traffic in time: the last report is used");
        resolve(this.lastTraffic);
      });
      this.pending.set(id, () => {
        deadline.cancel();
        resolve(this.lastTraffic);
      });
      this.post({ type: "traffic_request", id });
    });
  }

  /** An answer of the thread's to request `id`: kept, and its reader let go. */
  private answered(id: number, keep: () => void): void {
    keep();
    const done = this.pending.get(id);
    this.pending.delete(id);
    done?.();
  }

  /** LedgerCheckSource: asks the router thread, as traffic() does; the last answer when it does not answer in time. */
  ledgerCheck(): Promise<ReplicaDrift[]> {
    if (!this.worker) return Promise.resolve(this.lastCheck);
    const id = this.nextId++;
    return new Promise((resolve) => {
      const deadline = this.o.scheduler.after(TRAFFIC_DEADLINE_MS, () => {
        if (!this.pending.delete(id)) return;
        this.o.log.warn({ waited_ms: TRAFFIC_DEADLINE_MS }, "router thread did not report the ledger check in time: the last report is used");
        resolve(this.lastCheck);
      });
      this.pending.set(id, () => {
        deadline.cancel();
        resolve(this.lastCheck);
      });
      this.post({ type: "ledger_check_request", id });
    });
  }

  /** Stops the router cleanly (its listener closes, requests under way end), then ends the thread. */
  async stop(): Promise<void> {
    this.stopping = true;
    for (const t of Object.values(this.tables)) {
      t.timer?.cancel();
      t.timer = undefined;
    }
    const worker = this.worker;
    if (!worker) return;
    this.worker = undefined;
    await new Promise<void>((resolve) => {
      worker.once("exit", () => resolve());
      worker.on("message", (m: unknown) => {
        if (FromRouter.safeParse(m).data?.type === "stopped") void worker.terminate();
      });
      worker.postMessage({ type: "stop" } satisfies ToRouter);
    });
    this.flushPending();
  }
}
