// The head node's weights plan, kept current: what each node last said of its weights (held per
// file, transfers, disk; from its heartbeats, in memory), which revisions each node's replicas
// need, and transfers.ts's pure plan of who fetches which file from where (the Hub once per
// fabric, then peers). A heartbeat's answer reads the latest plan and never waits for one: the
// plan is made again off the answer path when it is older than PLAN_EVERY_MS (the Hub's file
// lists and the nodes' credential digests it needs are read asynchronously).

import { UNSTATED_PROTOCOL } from "../protocol/skew";
import type { Logger } from "pino";
import { errorText } from "../lib/format";
import { bracketHost } from "../lib/net";
import type { Scheduler } from "../lib/scheduler";
import type { ModelSpec } from "../protocol/catalog";
import type { Assignment, HeartbeatRequest } from "../protocol/heartbeat";
import { type DiskReport, type FetchOrder, type TransferReport, type WeightsHeld, type WeightsManifest, fileSourceRepo } from "../protocol/weights";
import { isLocalRepo } from "./local-weights";
import type { Manifests } from "./manifests";
import type { NodeMemory } from "./node-memory";
import type { NodeRow } from "./types";
import { type TransferNode, type TransferPlan, type WeightsWant, planTransfers } from "./transfers";
import { type HubOrders, hubRepoOf } from "./weights-orders";
import { type WeightsStanding, weightsStanding } from "./weights-placement";

/** How often the plan is made again at most (a heartbeat's answer may be this much behind). */
export const PLAN_EVERY_MS = 250;

/**
 * How long an order handed to a node counts as running there before the node says so: a plan
 * made in between must not give the file to another node (and drop it from the first, which
 * would stop the transfer it just started).
 */
export const HANDED_GRACE_MS = 10_000;

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
  /** `after` makes a plan asked for too soon after the last one once that is old enough (without it, the next ask does). */
  scheduler: Pick<Scheduler, "now"> & Partial<Pick<Scheduler, "after">>;
  log: Logger;
  /** Revisions wanted on nodes with no replica there (`weights pull`, weights-admin.ts). */
  seeds?: () => readonly WeightsWant[];
  /** Weights placed at file:// sources, as nodes found them (local-weights.ts). */
  local?: { revisionOf(source: string): string | undefined };
  /** Told of each node's weights report with the one it replaces (the transfer events, weights-admin.ts). */
  observe?: (hb: HeartbeatRequest, before: NodeWeights | undefined, after: NodeWeights) => void;
  /**
   * Told of the nodes whose orders a new plan changed, so they hear of them now (their long poll
   * is answered) rather than at their next heartbeat: a copy waiting for a file that just arrived
   * in the fabric, or a link of a chain re-planned, starts within a round trip.
   */
  ordersChanged?: (nodes: readonly string[]) => void;
}

const fileKey = (o: FetchOrder) => `${o.repo}@${o.revision}/${o.file.path}`;
/** What a node's orders say, to tell a changed list from the same one given again. */
const ordersPrint = (orders: readonly FetchOrder[]) => orders.map((o) => `${fileKey(o)}<${o.from.url}`).join("\n");

export class WeightsPlanner {
  private readonly reports = new Map<string, NodeWeights>();
  private readonly digests = new Map<string, string>();
  /** Orders handed to each node, by file, with when: running there until its reports say otherwise. */
  private readonly handed = new Map<string, Map<string, { order: FetchOrder; at: number }>>();
  private plan: TransferPlan | undefined;
  private madeAt = Number.NEGATIVE_INFINITY;
  private making: Promise<void> | null = null;
  private due: { cancel(): void } | null = null;
  /** The nodes as the latest plan saw them (their reports are read fresh for placement). */
  private seen: TransferNode[] = [];
  private standing: { at: number; models: readonly unknown[]; value: WeightsStanding } | undefined;
  private gatheredAt = Number.NEGATIVE_INFINITY;
  private gathering: Promise<void> | null = null;

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
    this.handed.delete(node);
  }

  /** The orders of the latest plan for a node; asks for a newer plan when this one is old. */
  orders(node: string): FetchOrder[] | undefined {
    const now = this.o.scheduler.now();
    if (now - this.madeAt >= PLAN_EVERY_MS) void this.remake();
    else this.remakeSoon(PLAN_EVERY_MS - (now - this.madeAt));
    const orders = this.plan?.orders.get(node);
    if (orders !== undefined && orders.length > 0) {
      let mine = this.handed.get(node);
      if (mine === undefined) this.handed.set(node, (mine = new Map()));
      for (const o of orders) if (!mine.has(fileKey(o))) mine.set(fileKey(o), { order: o, at: now });
    }
    return orders;
  }

  /** The latest plan, for views (undefined before the first). */
  latest(): TransferPlan | undefined {
    return this.plan;
  }

  /**
   * Per node, per model whose weights come from the Hub and whose files are known, how good the
   * node is for them and whether its disk can take them (weights-placement.ts), for placement
   * and explain; the same answer for PLAN_EVERY_MS for the same models.
   */
  placement(models: readonly { name: string; spec: ModelSpec }[]): WeightsStanding {
    const now = this.o.scheduler.now();
    const c = this.standing;
    if (c !== undefined && c.models === models && now - c.at >= 0 && now - c.at < PLAN_EVERY_MS) return c.value;
    // Heartbeats ask for a plan only once a node has Hub weights to fetch: placement gathers the
    // nodes' addresses and digests itself meanwhile (ready by a later tick), without a plan.
    if (now - Math.max(this.madeAt, this.gatheredAt) >= PLAN_EVERY_MS) void this.gather();
    const nodes = this.seen.map((n) => {
      const r = this.reports.get(n.name);
      return r === undefined ? n : { ...n, held: r.held, transfers: r.transfers, disk: r.disk };
    });
    const inUse = (node: string) => {
      const out = new Set<string>();
      for (const a of this.o.assignments(node)) {
        const repo = hubRepoOf(a);
        if (repo !== undefined) out.add(`${repo}@${a.revision}`);
      }
      return out;
    };
    const value = weightsStanding(models, nodes, (repo, revision) => this.o.manifests.get(repo, revision), inUse, (source) => {
      const revision = this.o.local?.revisionOf(source);
      return revision === undefined ? undefined : { repo: fileSourceRepo(source.slice("file://".length)), revision };
    });
    this.standing = { at: now, models, value };
    return value;
  }

  /**
   * A plan asked for within PLAN_EVERY_MS of the last is made once that is old enough, not at the
   * next heartbeat: what was asked about (a replica just placed, a file just arrived) reaches its
   * nodes through ordersChanged within a fraction of a second.
   */
  private remakeSoon(ms: number): void {
    const after = this.o.scheduler.after;
    if (this.due !== null || after === undefined) return;
    this.due = after.call(this.o.scheduler, ms, () => {
      this.due = null;
      void this.remake();
    });
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

  /** Gathers the nodes as a plan would see them, for placement only (one at a time: the one under way, if any). */
  gather(): Promise<void> {
    this.gatheredAt = this.o.scheduler.now();
    this.gathering ??= (async () => {
      const snap = await this.o.memory.snapshot();
      const nodes: TransferNode[] = [];
      for (const n of snap.nodes) nodes.push(await this.node(n));
      this.seen = nodes;
    })()
      .catch((e) => this.o.log.warn({ err: errorText(e) }, "weights: nodes not gathered for placement"))
      .finally(() => {
        this.gathering = null;
      });
    return this.gathering;
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
    this.seen = nodes;
    const needs = new Map<string, boolean>();
    for (const m of manifests.values()) if (this.o.manifests.needsToken(m.repo, m.revision)) needs.set(m.repo, true);
    const before = this.plan;
    this.plan = planTransfers({
      manifests: [...manifests.values()],
      nodes,
      wants,
      hub: { endpoint: this.o.hub.endpoint, token: this.o.hub.token, needsToken: (repo) => needs.get(repo) === true, isLocal: isLocalRepo },
      now,
    });
    const changed: string[] = [];
    for (const [node, orders] of this.plan.orders) if (ordersPrint(orders) !== ordersPrint(before?.orders.get(node) ?? [])) changed.push(node);
    if (changed.length > 0) this.o.ordersChanged?.(changed);
  }

  private async node(n: NodeRow): Promise<TransferNode> {
    const r = this.reports.get(n.name);
    const port = this.o.memory.logsPort(n.name);
    let digest = this.digests.get(n.name);
    if (digest === undefined && port !== undefined) {
      digest = await this.o.store.credentialHashOf(n.name);
      if (digest !== undefined) this.digests.set(n.name, digest);
    }
    // A listener serving HTTPS sent its own certificate in its heartbeats (as for logs): the orders
    // to copy from it carry that certificate, the one the copying node trusts.
    const serves = port !== undefined && digest !== undefined;
    const cert = this.o.memory.logsCert(n.name);
    const unusable = this.o.memory.unreachable.has(n.name) ? "unreachable" : n.adminState === "draining" ? "draining" : n.adminState === "pending" ? "pending approval" : undefined;
    return {
      name: n.name,
      fabrics: n.fabrics,
      ...(unusable !== undefined ? { unusable } : {}),
      peerUrl: serves ? `${cert !== undefined ? "https" : "http"}://${bracketHost(n.address)}:${port}` : undefined,
      ...(serves && cert !== undefined ? { peerCert: cert } : {}),
      credentialSha256: digest ?? "",
      // Agents before protocol 2 serve whole files only (no copies from a file still arriving).
      ...((n.agentProtocol ?? UNSTATED_PROTOCOL) < 2 ? { wholeOnly: true } : {}),
      held: r?.held ?? [],
      transfers: this.running(n.name, r),
      disk: r?.disk,
    };
  }

  /**
   * What runs on a node: its reported transfers, and the orders handed to it that it has not
   * reported yet (for HANDED_GRACE_MS), so the plan gives them to nobody else meanwhile.
   */
  private running(node: string, r: NodeWeights | undefined): TransferReport[] {
    const reported = r?.transfers ?? [];
    const mine = this.handed.get(node);
    if (mine === undefined) return [...reported];
    const now = this.o.scheduler.now();
    const out = [...reported];
    const seen = new Set(reported.map((t) => `${t.repo}@${t.revision}/${t.path}`));
    const held = new Set((r?.held ?? []).flatMap((h) => h.files.map((f) => `${h.repo}@${h.revision}/${f}`)));
    for (const [k, h] of mine) {
      // Reported running or held, or past its grace: the node's own word counts from now on.
      if (seen.has(k) || held.has(k) || now - h.at > HANDED_GRACE_MS) {
        mine.delete(k);
        continue;
      }
      const o = h.order;
      out.push({ repo: o.repo, revision: o.revision, path: o.file.path, size: o.file.size, done: 0, rate: 0, from: o.from.kind === "hub" ? "hub" : o.from.node, error: null });
    }
    return out;
  }
}
