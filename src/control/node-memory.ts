// What this control plane keeps in memory about nodes beyond the store's rows: what their
// heartbeats said besides inventory (log listener and its certificate, engines with their
// versions, discovery errors and GPU reasons, model revisions), and which nodes it last found
// unreachable. Every heartbeat carries the reports again; they are also written to the store as
// one document per node when they changed (node-reports.ts), so a restart and the other control
// planes know them, and loaded from it at start and when another control plane wrote some.
// snapshot() is the store's snapshot with these beside it: what every decision and view reads.

import type { Logger } from "pino";
import type { EngineReport, HeartbeatRequest } from "../protocol/heartbeat";
import { type NodeReport, ReportLedger, reportOf } from "./node-reports";
import type { FleetRead, NodeReportsPort } from "./store-port";
import type { NodeDiscovery, Snapshot } from "./types";

export class NodeMemory {
  /** The node reports this control plane wrote or loaded: a change is told from a repeat against them. */
  private readonly reports = new ReportLedger();
  /** Nodes whose report (and so whose discovery error) is known here, from a heartbeat or the store. */
  private readonly reportKnown = new Set<string>();
  /** Each node's engine-log port, as its last heartbeat said. */
  private readonly logsPorts = new Map<string, number>();
  /** Each node's log-listener certificate (PEM), when it serves HTTPS. */
  private readonly logsCerts = new Map<string, string>();
  /**
   * The engines each node's last report named, with their versions. A node absent here has not
   * said (an older agent, a simulated node, or none since this process started): unknown, not none.
   */
  private readonly engineMap = new Map<string, EngineReport[]>();
  /** Discovery errors and GPU reasons (the health they explain, gpus.healthy, is stored). */
  private readonly discovery = new Map<string, NodeDiscovery>();
  /** Each node's reported revisions: until a node's next report the head node only holds back from settling a revision. */
  private readonly revisions = new Map<string, ReadonlyMap<string, readonly string[]>>();
  /** Each node's last reported revisions, as sent, to tell a change from a repeat. */
  private readonly revisionsSaid = new Map<string, string>();
  /** Rises whenever a node's reported revisions change (they feed the assignments). */
  private revisionCount = 0;
  /** Nodes last found unreachable, so the event is written once per outage. */
  private unreachableSet: ReadonlySet<string> = new Set();

  constructor(private readonly o: { store: FleetRead & NodeReportsPort; log: Logger }) {}

  /** The store's snapshot with what the latest heartbeats said that is kept in memory only. */
  async snapshot(): Promise<Snapshot> {
    return { ...(await this.o.store.snapshot()), discovery: new Map(this.discovery), revisions: new Map(this.revisions) };
  }

  /** Every node's engines as last reported. */
  get engines(): ReadonlyMap<string, readonly EngineReport[]> {
    return this.engineMap;
  }

  /** Rises whenever a node's reported revisions change: assignments projected before are out of date. */
  get reported(): number {
    return this.revisionCount;
  }

  logsPort(node: string): number | undefined {
    return this.logsPorts.get(node);
  }

  logsCert(node: string): string | undefined {
    return this.logsCerts.get(node);
  }

  /** A node's discovery error as last reported (null: none), or undefined when no report of it is known here. */
  discoveryError(node: string): string | null | undefined {
    return this.reportKnown.has(node) ? (this.discovery.get(node)?.error ?? null) : undefined;
  }

  /** This heartbeat's report when it says what is held already (nothing to write), else undefined. */
  held(hb: HeartbeatRequest, kept: boolean): NodeReport | undefined {
    const report = reportOf(hb, kept);
    return this.reports.toWrite(hb.node, report) === undefined ? report : undefined;
  }

  get unreachable(): ReadonlySet<string> {
    return this.unreachableSet;
  }

  /** The unreachable nodes as the latest tick found them. */
  setUnreachable(nodes: ReadonlySet<string>): void {
    this.unreachableSet = nodes;
  }

  /** A node heard from again: true when it was unreachable (its return is news). */
  reachableAgain(node: string): boolean {
    if (!this.unreachableSet.has(node)) return false;
    const rest = new Set(this.unreachableSet);
    rest.delete(node);
    this.unreachableSet = rest;
    return true;
  }

  /**
   * What a heartbeat says that is kept in memory, and in the store when it changed; a failed
   * write is retried by the next heartbeat. True when the node's engines changed (placement may
   * change with them).
   */
  async noteReported(hb: HeartbeatRequest, now: number, kept: boolean): Promise<boolean> {
    const report = reportOf(hb, kept);
    const engines = this.apply(hb.node, report);
    const json = this.reports.toWrite(hb.node, report);
    if (json === undefined) return engines;
    try {
      await this.o.store.saveNodeReport(hb.node, json, now);
      this.reports.written(hb.node, json, now);
    } catch (e) {
      this.o.log.warn({ node: hb.node, err: (e as Error).message }, "node report not written to the store: the next heartbeat tries again");
    }
    return engines;
  }

  /** A report held already (the fast path, held()): memory takes it, nothing is written. True when the engines changed. */
  takeHeld(node: string, report: NodeReport): boolean {
    return this.apply(node, report);
  }

  /**
   * The node reports written since this one last looked (at start: all of them, this head node's
   * earlier run's or other control planes'); a bad row is skipped with a warning. True when some
   * node's engines changed.
   */
  async loadReports(): Promise<boolean> {
    let rows;
    try {
      rows = await this.o.store.nodeReports();
    } catch (e) {
      this.o.log.warn({ err: (e as Error).message }, "node reports not read from the store: the next change tries again");
      return false;
    }
    const { fresh, bad } = this.reports.news(rows);
    for (const b of bad) this.o.log.warn({ node: b.node, problem: b.problem }, `ignored the stored report of node ${b.node}: ${b.problem}`);
    let engines = false;
    for (const f of fresh) engines = this.apply(f.node, f.report) || engines;
    return engines;
  }

  /** Drops what is kept about a deleted node. */
  forget(name: string): void {
    this.logsPorts.delete(name);
    this.logsCerts.delete(name);
    this.engineMap.delete(name);
    this.discovery.delete(name);
    this.reportKnown.delete(name);
    this.revisions.delete(name);
    this.revisionsSaid.delete(name);
    this.reports.forget(name);
    this.revisionCount++;
    this.reachableAgain(name);
  }

  /** One node's report into memory; true when its engines changed from a known list to another. */
  private apply(node: string, r: NodeReport): boolean {
    const reasons = new Map<number, string>(r.gpu_reasons);
    this.reportKnown.add(node);
    if (r.discovery_error || reasons.size > 0) this.discovery.set(node, { error: r.discovery_error || null, reasons, ...(r.gpus_kept ? { kept: true } : {}) });
    else this.discovery.delete(node);
    // A Map, not the parsed record: a model named like an Object.prototype key stays a plain entry.
    const said = r.model_revisions === undefined ? undefined : JSON.stringify(r.model_revisions);
    if (said !== this.revisionsSaid.get(node)) {
      this.revisionCount++;
      if (r.model_revisions !== undefined && said !== undefined) {
        this.revisions.set(node, new Map(Object.entries(r.model_revisions)));
        this.revisionsSaid.set(node, said);
      } else {
        this.revisions.delete(node);
        this.revisionsSaid.delete(node);
      }
    }
    if (r.logs_port !== null) this.logsPorts.set(node, r.logs_port);
    else this.logsPorts.delete(node);
    if (r.logs_tls_cert) this.logsCerts.set(node, r.logs_tls_cert);
    else this.logsCerts.delete(node);
    const engines = this.engineMap.get(node);
    if (r.engines) this.engineMap.set(node, r.engines);
    else this.engineMap.delete(node);
    return engines !== undefined && r.engines !== undefined && JSON.stringify(engines) !== JSON.stringify(r.engines);
  }
}
