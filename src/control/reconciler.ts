// One reconcile step as a pure function: from a store snapshot, the router's last-used map and
// the time, decide what to change — replicas to place, fail, drain or forget, model state to
// record, nodes whose drain finished — and the events that explain it. The controller applies
// the plan in one transaction; nothing here reads a clock or touches the store.

import type { ModelSpec, Profile } from "../protocol/catalog";
import type { EngineReport, ReplicaReport } from "../protocol/heartbeat";
import type { ModelStateRow, ReplicaRow, Snapshot } from "./types";
import { type PlacementNode, type PlacementRequest, place } from "./placement";
import { desiredReplicas, holdsGpus, nodeState, observedFrom } from "./views";

export { observedFrom };

export interface ReconcileConfig {
  nodeTimeoutMs: number;
  /** How long an engine has to become healthy when its profile sets no start_timeout (`serve --start-timeout`). */
  startTimeoutMs: number;
  /**
   * What the head node waits beyond a replica's start timeout before it fails it: its clock starts
   * at placement, the agent's only once the assignment arrives and the engine is launched, and the
   * agent's verdict needs a heartbeat to come back. The agent must always be the one that decides.
   */
  startMarginMs: number;
  maxFailures: number;
  backoffMs: number;
  backoffMaxMs: number;
  /** How long a node stays unreachable before its replicas are replaced elsewhere. */
  replaceAfterMs: number;
  /** A replica the agent has not reported this long after placement is taken as lost. */
  reportGraceMs: number;
  /**
   * Engines get ports basePort … basePort + portCount - 1 on each node address; the portCount
   * after them are rendezvous blocks of RENDEZVOUS_STRIDE ports, one per multi-node replica (see
   * rendezvousPort). The two ranges never meet, so no engine port is ever inside a block.
   */
  basePort: number;
  portCount: number;
}

/**
 * Ports a multi-node replica's engines may bind from its rendezvous port up. SGLang with
 * --nnodes > 1 binds --dist-init-addr's port and port+1 … port+6 on the leader
 * (PortArgs.init_new: port_base = dist_init_port + 1, then port_base … port_base + 5), and with
 * DP attention port_base + 5 + dp_rank; vLLM's and torch's rendezvous take the port itself. 16
 * leaves room for DP attention up to 10 ranks.
 */
export const RENDEZVOUS_STRIDE = 16;

/** Rendezvous blocks per node address. */
export function rendezvousBlocks(cfg: Pick<ReconcileConfig, "portCount">): number {
  return Math.floor(cfg.portCount / RENDEZVOUS_STRIDE);
}

/**
 * The first port of the rendezvous block that goes with engine port `port` (Assignment.shard.
 * leader_port): derived, not stored, so it needs no column. Placement gives a multi-node replica
 * only an engine port whose block is free on every address it spans; a single-node replica's
 * engines never use theirs, which is why it is not reserved for them.
 */
export function rendezvousPort(port: number, cfg: Pick<ReconcileConfig, "basePort" | "portCount">): number {
  const blocks = Math.max(1, rendezvousBlocks(cfg));
  return cfg.basePort + cfg.portCount + RENDEZVOUS_STRIDE * ((((port - cfg.basePort) % blocks) + blocks) % blocks);
}

function blockOf(port: number, cfg: Pick<ReconcileConfig, "basePort" | "portCount">): number {
  return (rendezvousPort(port, cfg) - cfg.basePort - cfg.portCount) / RENDEZVOUS_STRIDE;
}

export const DEFAULT_RECONCILE: ReconcileConfig = {
  nodeTimeoutMs: 15_000,
  // 30 minutes: a 70B model on TP=8 takes ~3.5 min with a warm page cache (vLLM #19824), over
  // 10 min from a cold disk (#10702), and a first torch.compile has been seen to take 37 min
  // (#34399); a profile that needs more, or wants a failure noticed sooner, sets start_timeout.
  startTimeoutMs: 1_800_000,
  // The Controller replaces this with 2 heartbeat intervals + 1 min.
  startMarginMs: 70_000,
  maxFailures: 5,
  backoffMs: 2_000,
  backoffMaxMs: 300_000,
  replaceAfterMs: 30_000,
  reportGraceMs: 15_000,
  basePort: 8100,
  portCount: 900,
};

export interface NewReplica {
  id: string;
  model: string;
  profile: string;
  shards: { node: string; gpus: number[] }[];
  port: number;
  endpoint: string;
}

export interface PlanEvent {
  kind: string;
  subject: string;
  message: string;
  data?: unknown;
}

export interface Plan {
  create: NewReplica[];
  update: { id: string; patch: Partial<Pick<ReplicaRow, "state" | "error" | "readyAt" | "failures">> }[];
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

export interface ReconcileInput {
  snapshot: Snapshot;
  now: number;
  lastUsed: ReadonlyMap<string, number>;
  config: ReconcileConfig;
  newId: () => string;
  /** Since when the control plane has watched without a gap (its start, or its clock's last jump). */
  watchedSince?: number;
  /** When the clock last jumped (forward past any plausible gap, or backward). */
  jumpedAt?: number;
  /** Per node, the engines its last heartbeat reported; a node absent here has not said (unknown). */
  engines?: ReadonlyMap<string, readonly EngineReport[]>;
}

/** The engines a node's reports say it cannot run (no version found), with why. */
export function missingEngines(reports: readonly EngineReport[] | undefined): Map<string, string> | undefined {
  if (!reports) return undefined;
  let out: Map<string, string> | undefined;
  for (const e of reports) {
    if (e.version !== null) continue;
    (out ??= new Map()).set(e.engine, e.error ?? "");
  }
  return out;
}


/** How long the agent gives a replica of this profile to become healthy (Assignment.start_timeout_ms). */
export function agentStartTimeout(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs">): number {
  return profile?.start_timeout ?? cfg.startTimeoutMs;
}

/** How long after placement the head node fails a replica still starting: always after the agent's deadline. */
export function serverStartDeadline(profile: Pick<Profile, "start_timeout"> | undefined, cfg: Pick<ReconcileConfig, "startTimeoutMs" | "startMarginMs">): number {
  return agentStartTimeout(profile, cfg) + cfg.startMarginMs;
}

/** How long to wait before retrying a model after `failures` consecutive failures. */
export function backoffDelay(failures: number, cfg: Pick<ReconcileConfig, "backoffMs" | "backoffMaxMs">): number {
  if (failures <= 0) return 0;
  return Math.min(cfg.backoffMaxMs, cfg.backoffMs * 2 ** Math.min(failures - 1, 30));
}

/** True while a model must wait before its next start. A clock that went backwards does not extend the wait. */
export function inBackoff(st: ModelStateRow | undefined, now: number, cfg: ReconcileConfig): boolean {
  if (!st || st.failures <= 0 || st.lastFailureAt == null) return false;
  const elapsed = now - st.lastFailureAt;
  return elapsed >= 0 && elapsed < backoffDelay(st.failures, cfg);
}

/** Records a failed start: counts it, and parks the model once it has failed too often in a row. */
export function recordFailure(
  plan: Plan,
  model: string,
  st: ModelStateRow | undefined,
  error: string,
  now: number,
  cfg: Pick<ReconcileConfig, "maxFailures">,
): void {
  const pending = plan.modelState.get(model) ?? {};
  const failures = (pending.failures ?? st?.failures ?? 0) + 1;
  const parked = failures >= cfg.maxFailures;
  plan.modelState.set(model, { ...pending, failures, lastFailureAt: now, reason: error, ...(parked ? { parked: true } : {}) });
  if (parked && !(st?.parked ?? false))
    plan.events.push({
      kind: "model.parked",
      subject: `model/${model}`,
      message: `model ${model} parked after ${failures} failed starts; not retried until unparked or changed. Last error: ${oneLine(error)}`,
    });
}

export function oneLine(s: string, max = 300): string {
  const flat = s.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

const key = (node: string, idx: number) => `${node}\u0000${idx}`;

export function reconcile({ snapshot, now, lastUsed, config: cfg, newId, watchedSince = Number.NEGATIVE_INFINITY, jumpedAt = Number.NEGATIVE_INFINITY, engines }: ReconcileInput): Plan {
  const plan = emptyPlan();
  const nodes = new Map(snapshot.nodes.map((n) => [n.name, n]));
  const hb = (n: { lastHeartbeat: number }) => observedFrom(n.lastHeartbeat, now, watchedSince);
  const state = new Map(snapshot.nodes.map((n) => [n.name, nodeState(n.adminState, hb(n), now, cfg.nodeTimeoutMs)]));
  const models = new Map(snapshot.models.map((m) => [m.name, m]));
  const mstate = new Map(snapshot.modelState.map((s) => [s.model, s]));
  const removed = new Set<string>();
  const newState = new Map<string, ReplicaRow["state"]>();
  const stateOf = (r: ReplicaRow) => newState.get(r.id) ?? r.state;
  const setState = (r: ReplicaRow, s: ReplicaRow["state"], extra: Partial<ReplicaRow> = {}) => {
    newState.set(r.id, s);
    plan.update.push({ id: r.id, patch: { state: s, ...extra } });
  };
  const remove = (r: ReplicaRow) => {
    removed.add(r.id);
    plan.remove.push(r.id);
  };

  // 1. Replicas whose nodes are gone for good, or that never became ready in time.
  for (const r of snapshot.replicas) {
    const lost = r.shards.find((s) => {
      const n = nodes.get(s.node);
      return !n || (state.get(s.node) === "unreachable" && now - hb(n) > cfg.nodeTimeoutMs + cfg.replaceAfterMs);
    });
    if (lost) {
      // Not the model's fault: no failure is counted, the replica is simply replaced.
      if (r.state !== "failed")
        plan.events.push({
          kind: "replica.lost",
          subject: `replica/${r.id}`,
          message: `replica ${r.id} of ${r.model} lost: node ${lost.node} unreachable for over ${Math.round((cfg.nodeTimeoutMs + cfg.replaceAfterMs) / 1000)}s; replacing it`,
        });
      remove(r);
      continue;
    }
    const profile = (models.get(r.model)?.spec as ModelSpec | undefined)?.profiles.find((p) => p.name === r.profile);
    const deadline = serverStartDeadline(profile, cfg);
    if (r.state === "starting" && now - observedFrom(r.createdAt, now, watchedSince) > deadline) {
      const limit = agentStartTimeout(profile, cfg);
      const error = `not ready ${Math.round(deadline / 1000)}s after it was placed (start timeout ${Math.round(limit / 1000)}s + ${Math.round(cfg.startMarginMs / 1000)}s for the agent to launch it and report)${r.error ? `: ${r.error}` : ""}`;
      setState(r, "failed", { error });
      plan.events.push({ kind: "replica.failed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} failed: ${oneLine(error)}` });
      recordFailure(plan, r.model, mstate.get(r.model), error, now, cfg);
    }
  }

  // 2. Replicas of models that left the catalog stop; failed ones are forgotten.
  for (const r of snapshot.replicas) {
    if (removed.has(r.id) || models.has(r.model)) continue;
    if (stateOf(r) === "failed") remove(r);
    else if (stateOf(r) !== "draining") {
      setState(r, "draining");
      plan.events.push({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id}: model ${r.model} is no longer in the catalog` });
    }
  }

  const live = snapshot.replicas.filter((r) => !removed.has(r.id));
  const byModel = new Map<string, ReplicaRow[]>();
  for (const r of live) {
    let l = byModel.get(r.model);
    if (!l) byModel.set(r.model, (l = []));
    l.push(r);
  }
  const onDrainingNode = (r: ReplicaRow) => r.shards.some((s) => nodes.get(s.node)?.adminState === "draining");

  // An on-demand model is wanted while it is used, not only while it is asked for cold: the
  // router's last-used stamps of its replicas count as asking.
  const usedAt = new Map<string, number>();
  for (const r of snapshot.replicas) {
    const t = lastUsed.get(r.id);
    if (t !== undefined && t > (usedAt.get(r.model) ?? 0)) usedAt.set(r.model, t);
  }
  for (const m of snapshot.models) {
    if (!(m.spec as ModelSpec).on_demand) continue;
    const t = usedAt.get(m.name);
    const st = mstate.get(m.name);
    if (t === undefined || t > now || (st?.lastRequestedAt != null && st.lastRequestedAt >= t - 1000)) continue;
    plan.modelState.set(m.name, { ...plan.modelState.get(m.name), lastRequestedAt: t });
    mstate.set(m.name, { ...(st ?? emptyState(m.name)), lastRequestedAt: t });
  }

  // 3. Per model: drain moves, surplus, and what is short.
  const requests: (PlacementRequest & { ready: number; desired: number })[] = [];
  const satisfiedModels: string[] = [];
  for (const m of snapshot.models) {
    const spec = m.spec as ModelSpec;
    const st = mstate.get(m.name);
    const pending = plan.modelState.get(m.name);
    const parked = pending?.parked ?? st?.parked ?? false;
    const desired = desiredReplicas(spec, st, now);
    const reps = byModel.get(m.name) ?? [];
    const active = reps.filter((r) => stateOf(r) === "starting" || stateOf(r) === "ready");
    const staying = active.filter((r) => !onDrainingNode(r));
    const moving = active.filter((r) => onDrainingNode(r));
    let readyStaying = staying.filter((r) => stateOf(r) === "ready").length;

    // Drain: a replica on a draining node stops only once the replicas elsewhere cover what is
    // wanted, so the model never has fewer ready than before the drain began. Starting ones
    // have served nothing yet and stop at once.
    for (const r of moving) {
      if (stateOf(r) === "starting" || readyStaying >= desired) {
        setState(r, "draining");
        plan.events.push({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${m.name}: its node ${r.shards[0]!.node} is draining and ${readyStaying} ready elsewhere cover it` });
      }
    }

    // Surplus: starting ones first (they serve nothing yet), then the longest idle; a replica
    // whose idleness is unknown counts as busy, never as idle.
    if (staying.length > desired) {
      const order = [...staying].sort((a, b) => {
        const sa = stateOf(a) === "starting" ? 0 : 1;
        const sb = stateOf(b) === "starting" ? 0 : 1;
        if (sa !== sb) return sa - sb;
        const ua = lastUsed.get(a.id) ?? Number.POSITIVE_INFINITY;
        const ub = lastUsed.get(b.id) ?? Number.POSITIVE_INFINITY;
        return ua - ub || (a.id < b.id ? -1 : 1);
      });
      for (const r of order.slice(0, staying.length - desired)) {
        if (stateOf(r) === "ready") readyStaying--;
        setState(r, "draining");
        plan.events.push({ kind: "replica.stopping", subject: `replica/${r.id}`, message: `stopping replica ${r.id} of ${m.name}: it wants ${desired}, has ${staying.length}` });
      }
    }

    // Failed records: keep only the newest for display; none once the model is satisfied.
    const failed = reps.filter((r) => stateOf(r) === "failed").sort((a, b) => b.updatedAt - a.updatedAt);
    const keepFailed = readyStaying >= desired && !parked ? 0 : 1;
    for (const r of failed.slice(keepFailed)) remove(r);

    const need = desired - Math.min(staying.filter((r) => stateOf(r) !== "draining").length, desired);
    if (need <= 0 || parked) {
      if (!parked) satisfiedModels.push(m.name);
      continue;
    }
    if (inBackoff(pending && pending.failures !== undefined ? ({ ...st, ...pending } as ModelStateRow) : st, now, cfg)) continue;
    requests.push({
      model: m.name,
      count: need,
      profiles: spec.profiles as Profile[],
      placement: spec.placement,
      nodesInUse: new Set(active.flatMap((r) => r.shards.map((s) => s.node))),
      ready: readyStaying,
      desired,
    });
  }

  // 4. Placement, over GPUs as they are once this step's removals are done.
  const held = new Set<string>();
  // By address: simulated nodes may share one, and so may nodes behind one NAT.
  const usedPorts = new Map<string, Set<number>>();
  /** Rendezvous blocks (by number) taken on each address by multi-node replicas. */
  const usedBlocks = new Map<string, Set<number>>();
  const addressOf = (node: string) => nodes.get(node)?.address ?? node;
  const take = (sets: Map<string, Set<number>>, address: string, v: number) => {
    let set = sets.get(address);
    if (!set) sets.set(address, (set = new Set()));
    set.add(v);
  };
  for (const r of snapshot.replicas) {
    if (!removed.has(r.id) && holdsGpus(stateOf(r))) for (const s of r.shards) for (const g of s.gpus) held.add(key(s.node, g));
    // A replica lost with its node may still have an engine on that port (the node is only
    // silent), so its port stays taken in this step even though the replica is gone.
    if (r.port !== null && r.state !== "failed")
      for (const s of r.shards) {
        take(usedPorts, addressOf(s.node), r.port);
        if (r.shards.length > 1) take(usedBlocks, addressOf(s.node), blockOf(r.port, cfg));
      }
  }
  const gpusByNode = new Map<string, PlacementNode["gpus"]>();
  for (const g of snapshot.gpus) {
    let l = gpusByNode.get(g.node);
    if (!l) gpusByNode.set(g.node, (l = []));
    l.push({ index: g.index, uuid: g.uuid, class: g.class, healthy: g.healthy, used: held.has(key(g.node, g.index)), parent: g.parent });
  }
  const weightsByNode = new Map<string, Set<string>>();
  for (const w of snapshot.weights) {
    let s = weightsByNode.get(w.node);
    if (!s) weightsByNode.set(w.node, (s = new Set()));
    s.add(w.model);
  }
  const pnodes: PlacementNode[] = snapshot.nodes.map((n) => {
    const missing = missingEngines(engines?.get(n.name));
    return {
      name: n.name,
      state: state.get(n.name)!,
      fabrics: n.fabrics,
      gpus: gpusByNode.get(n.name) ?? [],
      weights: weightsByNode.get(n.name) ?? new Set(),
      ...(missing ? { missingEngines: missing } : {}),
    };
  });
  // Every model gets its first replica before any gets its next.
  requests.sort((a, b) => (a.ready === 0 ? 0 : 1) - (b.ready === 0 ? 0 : 1) || a.ready / a.desired - b.ready / b.desired || (a.model < b.model ? -1 : 1));
  const result = requests.length > 0 ? place(pnodes, requests) : { placed: [], unplaceable: new Map<string, string>() };

  // Make room: an on-demand model asked for and placed nowhere may take the GPUs of the
  // longest-idle replica that frees enough of them. Never a replica whose idleness is unknown
  // (a restarted router would otherwise offer up the whole fleet), never one idle for less than
  // its own model's idle_timeout, never taking a model below its min, never one of a model of
  // higher priority (a lower profile priority number) than the one asking.
  const placedCount = new Map<string, number>();
  for (const p of result.placed) placedCount.set(p.model, (placedCount.get(p.model) ?? 0) + 1);
  const evictedFrom = new Map<string, number>();
  for (const req of requests) {
    const spec = models.get(req.model)?.spec as ModelSpec | undefined;
    if (!spec?.on_demand || (placedCount.get(req.model) ?? 0) > 0 || !result.unplaceable.has(req.model)) continue;
    const taken = new Set(held);
    for (const p of result.placed) for (const sh of p.shards) for (const g of sh.gpus) taken.add(key(sh.node, g));
    const myPriority = Math.min(...spec.profiles.map((p) => p.priority));
    const candidates = live
      .filter((r) => !removed.has(r.id) && stateOf(r) === "ready" && !onDrainingNode(r))
      .map((r) => {
        const u = lastUsed.get(r.id);
        return { r, used: u === undefined ? u : observedFrom(u, now, jumpedAt), m: models.get(r.model)?.spec as ModelSpec | undefined };
      })
      .filter((c): c is { r: ReplicaRow; used: number; m: ModelSpec } => {
        if (c.used === undefined || !c.m || c.r.model === req.model) return false;
        if (now - c.used < c.m.idle_timeout) return false;
        if (Math.min(...c.m.profiles.map((p) => p.priority)) < myPriority) return false;
        const active = (byModel.get(c.r.model) ?? []).filter((x) => stateOf(x) === "ready" || stateOf(x) === "starting").length;
        return active - (evictedFrom.get(c.r.model) ?? 0) - 1 >= c.m.replicas.min;
      })
      .sort((a, b) => a.used - b.used || (a.r.id < b.r.id ? -1 : 1));
    for (const c of candidates) {
      const freed = new Set(c.r.shards.flatMap((sh) => sh.gpus.map((g) => key(sh.node, g))));
      const trial = pnodes.map((n) => ({ ...n, gpus: n.gpus.map((g) => ({ ...g, used: taken.has(key(n.name, g.index)) && !freed.has(key(n.name, g.index)) })) }));
      const attempt = place(trial, [{ ...req, count: 1 }]);
      const got = attempt.placed[0];
      if (!got) continue;
      setState(c.r, "draining");
      evictedFrom.set(c.r.model, (evictedFrom.get(c.r.model) ?? 0) + 1);
      const idleMin = Math.floor((now - c.used) / 60_000);
      plan.events.push({
        kind: "replica.evicted",
        subject: `replica/${c.r.id}`,
        message: `evicted replica ${c.r.id} of ${c.r.model} (idle ${idleMin}m) to make room for ${req.model}`,
        data: { replica: c.r.id, model: c.r.model, for_model: req.model, idle_seconds: Math.floor((now - c.used) / 1000) },
      });
      result.placed.push(got);
      result.unplaceable.delete(req.model);
      break;
    }
  }

  for (const p of result.placed) {
    const leader = p.shards[0]!.node;
    const addresses = [...new Set(p.shards.map((s) => addressOf(s.node)))];
    const id = newId();
    const multi = p.shards.length > 1;
    const portSets = addresses.map((a) => usedPorts.get(a));
    const port = freePort(portSets, multi ? addresses.map((a) => usedBlocks.get(a)) : undefined, cfg, id);
    if (port === undefined) {
      const anyPort = multi && freePort(portSets, undefined, cfg, id) !== undefined;
      result.unplaceable.set(
        p.model,
        anyPort
          ? `no free rendezvous port block on ${addresses.join(", ")} (all ${rendezvousBlocks(cfg)} blocks of ${RENDEZVOUS_STRIDE} ports after the engine ports are held by multi-node replicas)`
          : `no free engine port on ${addresses.join(", ")} (${cfg.portCount} in use)`,
      );
      continue;
    }
    for (const a of addresses) {
      take(usedPorts, a, port);
      if (multi) take(usedBlocks, a, blockOf(port, cfg));
    }
    plan.create.push({ id, model: p.model, profile: p.profile, shards: p.shards, port, endpoint: `http://${urlHost(addressOf(leader))}:${port}` });
    const where = p.shards.map((s) => `${s.node}:${s.gpus.join(",")}`).join(" ");
    plan.events.push({ kind: "replica.placed", subject: `replica/${id}`, message: `placed replica ${id} of ${p.model} on ${where} (profile ${p.profile})` });
  }

  // 5. Placement reasons: recorded when they change, cleared when the model gets what it wants.
  for (const [model, reason] of result.unplaceable) {
    const st = mstate.get(model);
    if (st?.unplaceableReason === reason) continue;
    plan.modelState.set(model, { ...plan.modelState.get(model), unplaceableReason: reason });
    plan.events.push({ kind: "model.unplaceable", subject: `model/${model}`, message: `cannot place ${model}: ${reason}` });
  }
  for (const r of requests) {
    if (result.unplaceable.has(r.model)) continue;
    if (mstate.get(r.model)?.unplaceableReason) plan.modelState.set(r.model, { ...plan.modelState.get(r.model), unplaceableReason: null });
  }
  for (const model of satisfiedModels) {
    if (mstate.get(model)?.unplaceableReason) plan.modelState.set(model, { ...plan.modelState.get(model), unplaceableReason: null });
  }

  // 6. A draining node with nothing left on it is drained: cordoned and empty.
  for (const n of snapshot.nodes) {
    if (n.adminState !== "draining") continue;
    const still = live.some((r) => !removed.has(r.id) && stateOf(r) !== "failed" && r.shards.some((s) => s.node === n.name));
    if (!still) {
      plan.nodeAdmin.push({ node: n.name, state: "cordoned" });
      plan.events.push({ kind: "node.drained", subject: `node/${n.name}`, message: `node ${n.name} drained: cordoned and empty` });
    }
  }
  return plan;
}

/**
 * A port free on every address the replica spans. The search starts at a point derived from the
 * replica's id rather than at the lowest port, so a port that was just given up — whose engine
 * may not have exited yet — is unlikely to be handed out again at once.
 */
function emptyState(model: string): ModelStateRow {
  return { model, failures: 0, parked: false, reason: null, lastFailureAt: null, lastRequestedAt: null, scaleTarget: null, unplaceableReason: null };
}

/** Blocks given: the replica is multi-node, and its engine port's rendezvous block must be free too. */
function freePort(sets: (Set<number> | undefined)[], blocks: (Set<number> | undefined)[] | undefined, cfg: ReconcileConfig, id: string): number | undefined {
  if (blocks && rendezvousBlocks(cfg) === 0) return undefined;
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619) >>> 0;
  const start = h % cfg.portCount;
  for (let k = 0; k < cfg.portCount; k++) {
    const p = cfg.basePort + ((start + k) % cfg.portCount);
    if (!sets.every((s) => !s?.has(p))) continue;
    if (blocks) {
      const b = blockOf(p, cfg);
      if (!blocks.every((s) => !s?.has(b))) continue;
    }
    return p;
  }
  return undefined;
}

function urlHost(address: string): string {
  return address.includes(":") && !address.startsWith("[") ? `[${address}]` : address;
}

export interface ReportsInput {
  snapshot: Pick<Snapshot, "replicas" | "modelState">;
  node: string;
  reports: readonly ReplicaReport[];
  now: number;
  config: ReconcileConfig;
  watchedSince?: number;
}

/**
 * What one heartbeat's replica reports change. The leader's "ready" makes a replica ready;
 * any shard's "failed" fails it; a replica the node should run but does not report, once past
 * the grace period, is lost with the node's word for it.
 */
export function processReports({ snapshot, node, reports, now, config: cfg, watchedSince = Number.NEGATIVE_INFINITY }: ReportsInput): Plan {
  const plan = emptyPlan();
  const byId = new Map(reports.map((r) => [r.id, r]));
  const mstate = new Map(snapshot.modelState.map((s) => [s.model, s]));
  for (const r of snapshot.replicas) {
    if (!r.shards.some((s) => s.node === node)) continue;
    const rep = byId.get(r.id);
    const leader = r.shards[0]!.node === node;
    const fail = (error: string) => {
      plan.update.push({ id: r.id, patch: { state: "failed", error, failures: r.failures + 1 } });
      plan.events.push({ kind: "replica.failed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} failed on ${node}: ${oneLine(error)}` });
      recordFailure(plan, r.model, mstate.get(r.model), error, now, cfg);
    };
    switch (r.state) {
      case "starting":
        if (rep?.state === "failed") fail(rep.error ?? `engine failed on ${node}`);
        else if (rep?.state === "ready" && leader) {
          plan.update.push({ id: r.id, patch: { state: "ready", readyAt: now, error: null } });
          plan.events.push({ kind: "replica.ready", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} ready at ${r.endpoint ?? "?"}` });
          const st = mstate.get(r.model);
          if (st && st.failures > 0) plan.modelState.set(r.model, { failures: 0, lastFailureAt: null, reason: st.parked ? st.reason : null });
        } else if ((!rep || rep.state === "stopped") && now - observedFrom(r.createdAt, now, watchedSince) > cfg.reportGraceMs)
          fail(`the agent on ${node} does not run it (${rep ? "stopped" : "not reported"} ${Math.round((now - r.createdAt) / 1000)}s after placement)`);
        break;
      case "ready":
        if (!rep || rep.state === "failed" || rep.state === "stopped")
          fail(rep?.error ?? `engine on ${node} ${rep ? "stopped" : "is no longer running"}`);
        break;
      case "draining":
        if (!rep || rep.state === "stopped" || rep.state === "failed") {
          plan.remove.push(r.id);
          plan.events.push({ kind: "replica.stopped", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} stopped on ${node}` });
        }
        break;
      case "failed":
        break;
    }
  }
  return plan;
}
