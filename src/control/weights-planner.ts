// The head node's weights plan, kept current: what each node last said of its weights (held per
// file, transfers, disk; from its heartbeats, in memory), which revisions each node's replicas
// need, and transfers.ts's pure plan of who fetches which file from where (the Hub once per
// fabric, then peers). A heartbeat's answer reads the latest plan and never waits for one: the
// plan is made again off the answer path when it is older than PLAN_EVERY_MS (the Hub's file
// lists and the nodes' credential digests it needs are read asynchronously).

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import { bracketHost } from "../lib/net";
import type { Scheduler } from "../lib/scheduler";
import type { Assignment, HeartbeatRequest } from "../protocol/heartbeat";
import type { DiskReport, FetchOrder, TransferReport, WeightsHeld, WeightsManifest } from "../protocol/weights";
import type { Manifests } from "./manifests";
import type { NodeMemory } from "./node-memory";
import type { NodeRow } from "./types";
import { type TransferNode, type TransferPlan, type WeightsWant, planTransfers } from "./transfers";
import { type HubOrders, hubRepoOf } from "./weights-orders";

/** How often the plan is made again at most (a heartbeat's answer may be this much behind). */
export const PLAN_EVERY_MS = 250;

export interface NodeWeights {
  held: WeightsHeld[];
  transfers: TransferReport[];
  disk: DiskReport | undefined;
}

export interface WeightsPlannerOptions {
  manifests: Pick<Manifests, "get" | "needsToken">;
  hub: HubOrders & { readonly endpoint: string };
  memory: Pick<NodeMemory, "snapshot" | "logsPort" | "logsCert" | "unreachable">;
  store: { credentialHashOf(node: string): Promise<string | undefined> };
  /** Each node's assignments now (the projector's). */
  assignments: (node: string) => readonly Assignment[];
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
  /** Revisions wanted on nodes with no replica there (`weights pull`, weights-admin.ts). */
  seeds?: () => readonly WeightsWant[];
  /** Told of each node's weights report with the one it replaces (the transfer events, weights-admin.ts). */
  observe?: (hb: HeartbeatRequest, before: NodeWeights | undefined, after: NodeWeights) => void;
}

export class WeightsPlanner {
  private readonly reports = new Map<string, NodeWeights>();
  private readonly digests = new Map<string, string>();
  private plan: TransferPlan | undefined;
  private madeAt = Number.NEGATIVE_INFINITY;
  private making: Promise<void> | null = null;

  constructor(private readonly o: WeightsPlannerOptions) {}

  /** What a heartbeat said of the node's weights (older agents say nothing: unknown, kept empty). */
  note(hb: HeartbeatRequest): void {
    if (hb.weights_held === undefined && hb.transfers === undefined && hb.disk === undefined) return;
    const before = this.reports.get(hb.node);
    const after = { held: hb.weights_held ?? [], transfers: hb.transfers ?? [], disk: hb.disk };
    this.reports.set(hb.node, after);
    this.o.observe?.(hb, before, after);
  }

  /** What the node last said of its weights (undefined: nothing since this head node started). */
  reportOf(node: string): Readonly<NodeWeights> | undefined {
    return this.reports.get(node);
  }

  forget(node: string): void {
    this.reports.delete(node);
    this.digests.delete(node);
  }

  /** The orders of the latest plan for a node; asks for a newer plan when this one is old. */
  orders(node: string): FetchOrder[] | undefined {
    if (this.o.scheduler.now() - this.madeAt >= PLAN_EVERY_MS) void this.remake();
    return this.plan?.orders.get(node);
  }

  /** The latest plan, for views (undefined before the first). */
  latest(): TransferPlan | undefined {
    return this.plan;
  }

  /** Makes the plan again (one at a time). */
  remake(): Promise<void> {
    this.making ??= this.make()
      .catch((e) => this.o.log.warn({ err: errorText(e) }, "weights plan not made: the last one stands"))
      .finally(() => {
        this.making = null;
      });
    return this.making;
  }

  private async make(): Promise<void> {
    const now = this.o.scheduler.now();
    this.madeAt = now;
    const snap = await this.o.memory.snapshot();
    const wants: WeightsWant[] = [];
    const manifests = new Map<string, WeightsManifest>();
    for (const n of snap.nodes)
      for (const a of this.o.assignments(n.name)) {
        const repo = hubRepoOf(a);
        if (repo === undefined) continue;
        const m = this.o.manifests.get(repo, a.revision!);
        if (m === undefined) continue;
        manifests.set(`${repo}@${a.revision}`, m);
        wants.push({ node: n.name, repo, revision: a.revision! });
      }
    const known = new Set(snap.nodes.map((n) => n.name));
    const wanted = new Set(wants.map((w) => `${w.node}\u0000${w.repo}@${w.revision}`));
    for (const s of this.o.seeds?.() ?? []) {
      const m = this.o.manifests.get(s.repo, s.revision);
      if (m === undefined || !known.has(s.node) || wanted.has(`${s.node}\u0000${s.repo}@${s.revision}`)) continue;
      manifests.set(`${s.repo}@${s.revision}`, m);
      wants.push(s);
    }
    const nodes: TransferNode[] = [];
    for (const n of snap.nodes) nodes.push(await this.node(n));
    const needs = new Map<string, boolean>();
    for (const m of manifests.values()) if (this.o.manifests.needsToken(m.repo, m.revision)) needs.set(m.repo, true);
    this.plan = planTransfers({
      manifests: [...manifests.values()],
      nodes,
      wants,
      hub: { endpoint: this.o.hub.endpoint, token: this.o.hub.token, needsToken: (repo) => needs.get(repo) === true },
      now,
    });
  }

  private async node(n: NodeRow): Promise<TransferNode> {
    const r = this.reports.get(n.name);
    const port = this.o.memory.logsPort(n.name);
    let digest = this.digests.get(n.name);
    if (digest === undefined && port !== undefined) {
      digest = await this.o.store.credentialHashOf(n.name);
      if (digest !== undefined) this.digests.set(n.name, digest);
    }
    // A listener serving HTTPS has a certificate of its own that the fetching node would have to
    // trust: such a node does not serve weights to its peers yet.
    const serves = port !== undefined && digest !== undefined && this.o.memory.logsCert(n.name) === undefined;
    const unusable = this.o.memory.unreachable.has(n.name) ? "unreachable" : n.adminState === "draining" ? "draining" : n.adminState === "pending" ? "pending approval" : undefined;
    return {
      name: n.name,
      fabrics: n.fabrics,
      ...(unusable !== undefined ? { unusable } : {}),
      peerUrl: serves ? `http://${bracketHost(n.address)}:${port}` : undefined,
      credentialSha256: digest ?? "",
      held: r?.held ?? [],
      transfers: r?.transfers ?? [],
      disk: r?.disk,
    };
  }
}
