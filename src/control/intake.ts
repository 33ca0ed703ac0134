// Heartbeats and joins from node agents, and the long poll. Who may send one is decided first
// (receive(): admission.ts). A heartbeat that says what the store holds (the common case) takes the fast
// path: answered at once, without the write lock, its node's last-seen time touched in the
// in-memory image. One with news waits for the next group: the heartbeats that arrive while a
// group is being written are written after it, together, in one transaction, then each one's
// plan (its news and its replicas' verdicts, reconcile/reports.ts) in arrival order. A node's
// heartbeats take their turns in the order they came, so the store ends as its last one says.
// Joins go the same way in groups of their own. A node is never answered before it is projected.

import type { Logger } from "pino";
import { sha256hex } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import { type HeartbeatRequest, type HeartbeatResponse, newNodeCredential } from "../protocol/heartbeat";
import { type NodePolicy, type Principal, admit, needsCount, nodeExists } from "./admission";
import type { ClockWatch, Watched } from "./clock-watch";
import { StoreUnavailableError } from "./errors";
import { type HealthBefore, keepLastKnownGpus, nextHealth, storedHealth } from "./gpu-health";
import type { LoadMonitor } from "./load";
import type { WeightsPlanner } from "./weights-planner";
import type { NodeMemory } from "./node-memory";
import type { Projector } from "./projector";
import { type NodeNews, newsPlan, unparkInto } from "./reconcile/news";
import { type Plan, type ReconcileConfig, emptyPlan, isEmpty, processReports } from "./reconciler";
import type { CatalogPort, FleetRead, InventoryWrites, JoinWrite, NodeRegistry, PlanWriter, ReplicaRead, UnchangedHeartbeats } from "./store-port";
import type { NodeTrust } from "./types";
import type { Waker } from "./wake";
import type { WriteLock } from "./write-lock";

/** Heartbeats with news written in one transaction at most (the rest wait for the next). */
const MAX_GROUP = 256;

/** A heartbeat's plan decided on the fast path, with the read it was decided on: still good while that read's version holds. */
interface Decided {
  read: ReplicaRead;
  plan: Plan;
}

/** A heartbeat (or join) waiting for its group's write, and how to answer it. */
interface Waiting {
  hb: HeartbeatRequest;
  /** The node's discovery failed with no GPUs: hb carries its last known ones (gpu-health.ts). */
  kept: boolean;
  decided?: Decided;
  resolve: (a: HeartbeatResponse) => void;
  reject: (e: unknown) => void;
  at: number;
}

/** What a group leaves to write together after it: its events (and news, for joins), and the nodes that registered. */
interface Batch {
  plan: Plan;
  created: string[];
}

export interface NodeIntakeOptions {
  store: FleetRead & InventoryWrites & NodeRegistry & PlanWriter & Pick<CatalogPort, "parkedModels">;
  /** The in-memory image's fast path; without it every heartbeat takes the lock's path. */
  fast?: UnchangedHeartbeats;
  memory: NodeMemory;
  projector: Projector;
  lock: WriteLock;
  clock: ClockWatch;
  load: Pick<LoadMonitor, "queueWait" | "deafSpans">;
  wake: Waker;
  policy: Pick<NodePolicy, "approveNodes" | "maxNodes">;
  config: ReconcileConfig;
  scheduler: Scheduler;
  log: Logger;
  /** What heartbeats say of weights goes to the weights plan (weights-planner.ts). */
  weights?: Pick<WeightsPlanner, "note">;
}

export class NodeIntake {
  /** Per node, the turn of its latest heartbeat (see heartbeat()). */
  private readonly nodeTurn = new Map<string, Promise<void>>();
  /** Heartbeats waiting for the next group write, in arrival order. */
  private grouped: Waiting[] = [];
  private groupArmed = false;
  /** Per node, how many of its heartbeats wait or are being written: a later one never overtakes them. */
  private readonly inGroup = new Map<string, number>();
  /** Joins waiting for the next group write, in arrival order (see writeJoins). */
  private joining: Waiting[] = [];
  private joinsArmed = false;

  constructor(private readonly o: NodeIntakeOptions) {}

  // ---- who may speak ------------------------------------------------------------------

  /**
   * A heartbeat from the agent API, as who sent it (node-identity.ts): admitted or refused
   * (AdmissionRefused), then taken as a node's heartbeat or as a join.
   */
  async receive(principal: Principal, hb: HeartbeatRequest): Promise<HeartbeatResponse> {
    await this.admission(principal, hb);
    return principal.kind === "join" ? this.join(hb) : this.heartbeat(hb);
  }

  /** Reads what admission decides on, then decides (admission.ts); throws the refusal. */
  private async admission(principal: Principal, hb: HeartbeatRequest): Promise<void> {
    const trust = await this.o.store.nodeTrust(hb.node);
    const credentialHolder = principal.kind === "join" && hb.join_credential !== undefined ? await this.o.store.nodeByCredentialHash(sha256hex(hb.join_credential)) : undefined;
    const counts = needsCount(principal, trust) ? { nodes: await this.o.store.countNodes() } : undefined;
    const verdict = admit(principal, hb, { ...trust, ...(credentialHolder !== undefined ? { credentialHolder } : {}) }, this.o.policy, counts);
    if (!verdict.accepted) throw verdict.refusal;
  }

  // ---- heartbeats ---------------------------------------------------------------------

  /**
   * A heartbeat from a node already known (by its credential, or from inside the process). One
   * that says what the store holds is answered at once (answerUnchanged); one with news waits for
   * the next group (writeGroup).
   */
  async heartbeat(hb: HeartbeatRequest): Promise<HeartbeatResponse> {
    // A node's heartbeats take their turns in the order they came: each is answered or queued
    // before the node's next one is looked at, so the store ends as its last one says.
    this.o.weights?.note(hb);
    const before = this.nodeTurn.get(hb.node);
    let done = () => {};
    const mine = new Promise<void>((r) => (done = r));
    this.nodeTurn.set(hb.node, mine);
    try {
      if (before) await before;
      const taken = await this.lastKnown(hb);
      const quick = await this.answerUnchanged(taken.hb, taken.kept);
      if ("answer" in quick) return quick.answer;
      return new Promise<HeartbeatResponse>((resolve, reject) => {
        this.grouped.push({ ...taken, ...(quick.decided ? { decided: quick.decided } : {}), resolve, reject, at: this.o.scheduler.mono() });
        this.inGroup.set(hb.node, (this.inGroup.get(hb.node) ?? 0) + 1);
        this.armGroup();
      });
    } finally {
      done();
      if (this.nodeTurn.get(hb.node) === mine) this.nodeTurn.delete(hb.node);
    }
  }

  /**
   * Without the lock, for a leader whose store keeps an image in memory: a heartbeat that says
   * what is stored (a last-seen touch, batched to the store), whose reports change nothing and
   * whose node report is held already, changes nothing another writer could be deciding on. Else
   * the heartbeat takes the lock's path, with the plan decided here when there is one.
   */
  private async answerUnchanged(hb: HeartbeatRequest, kept: boolean): Promise<{ answer: HeartbeatResponse } | { decided?: Decided }> {
    const { fast, memory, projector } = this.o;
    // A node not projected yet (the first heartbeats after a start) takes the lock's path, which projects first.
    const skip = () => projector.answersFromStore(hb.node) || this.inGroup.has(hb.node) || memory.unreachable.has(hb.node);
    if (!fast || skip()) return {};
    const report = memory.held(hb, kept);
    if (!report) return {};
    const now = this.o.scheduler.now();
    const seen = this.o.clock.observe(now);
    const read = await this.o.store.replicaSnapshot(hb.node);
    const decided = { read, plan: this.verdicts(read, hb, now, seen) };
    if (!isEmpty(decided.plan) || skip() || !(await fast.touchIfUnchanged(hb, now))) return { decided };
    if (memory.takeHeld(hb.node, report)) this.o.wake.wake();
    // A tick may have found the node silent meanwhile: then the lock's path writes that it is back.
    if (memory.unreachable.has(hb.node)) return { decided };
    return { answer: projector.response(hb.node) };
  }

  private verdicts(read: ReplicaRead, hb: HeartbeatRequest, now: number, seen: Watched, news?: NodeNews): Plan {
    return processReports({ snapshot: read, node: hb.node, reports: hb.replicas, now, config: this.o.config, watchedSince: seen.watchedSince, deaf: this.o.load.deafSpans(), ...(news ? { news } : {}) });
  }

  private armGroup(): void {
    if (this.groupArmed || this.grouped.length === 0) return;
    this.groupArmed = true;
    const go = () => void this.o.lock.exclusive(() => this.writeGroup()).catch((e: unknown) => this.o.log.error({ err: (e as Error).message }, "a group of heartbeats was not handled"));
    // After the requests read together with this one: a synchronous store (SQLite) would
    // otherwise write each heartbeat alone, before the next is even read.
    if (this.o.scheduler.soon) this.o.scheduler.soon(go);
    else go();
  }

  /**
   * One group of heartbeats with news: their inventory in one transaction, then each one's plan
   * in arrival order. A failure fails only the heartbeat it belongs to.
   */
  private async writeGroup(): Promise<void> {
    this.groupArmed = false;
    const group = this.grouped.splice(0, MAX_GROUP);
    // More than a group waited: the rest go next.
    this.armGroup();
    const mono = this.o.scheduler.mono();
    this.o.load.queueWait(Math.max(...group.map((g) => mono - g.at)));
    const health = await this.healthBefore(group.map((g) => g.hb));
    const now = this.o.scheduler.now();
    const seen = this.o.clock.observe(now);
    const applied = await this.applyGroup(
      group.map((g) => g.hb),
      now,
    );
    const batch: Batch = { plan: emptyPlan(), created: [] };
    try {
      for (const [i, g] of group.entries()) {
        const r = applied[i]!;
        try {
          if ("error" in r) throw r.error;
          this.noteHealth(g, r.created, health, batch);
          g.resolve(await this.received(g, now, seen, r.created));
        } catch (e) {
          g.reject(e);
        } finally {
          const left = (this.inGroup.get(g.hb.node) ?? 1) - 1;
          if (left > 0) this.inGroup.set(g.hb.node, left);
          else this.inGroup.delete(g.hb.node);
        }
      }
    } finally {
      this.o.projector.flushEndpoints();
    }
    if (!isEmpty(batch.plan)) await this.writeBatch(batch, now);
  }

  /**
   * The group's inventory in one transaction; when that fails, one transaction per heartbeat, so
   * that a heartbeat the store refuses fails alone. A store that does not answer fails them all
   * at once (each was tried again already where that is safe): their agents send them again.
   */
  private async applyGroup(hbs: HeartbeatRequest[], now: number): Promise<({ created: boolean } | { error: unknown })[]> {
    const { store } = this.o;
    try {
      return await store.applyHeartbeats(hbs, now);
    } catch (e) {
      if (hbs.length === 1 || e instanceof StoreUnavailableError) return hbs.map(() => ({ error: e }));
      const out: ({ created: boolean } | { error: unknown })[] = [];
      for (const hb of hbs)
        out.push(
          await store.applyHeartbeat(hb, now).then(
            (r) => ({ created: r.created }),
            (error: unknown) => ({ error }),
          ),
        );
      return out;
    }
  }

  /**
   * The rest of a heartbeat once the store took its inventory: its report, then its plan (its
   * news and its replicas' verdicts, decided once: on the fast path's read while that still
   * holds, else on a read here), written in one transaction, and the answer. With a batch (a
   * group of joins) the news go into the batch, written once after the group.
   */
  private async received(w: Waiting, now: number, seen: Watched, created: boolean, batch?: Batch): Promise<HeartbeatResponse> {
    const { hb } = w;
    const { memory, projector, store, log } = this.o;
    if (await memory.noteReported(hb, now, w.kept)) this.o.wake.wake();
    const reachableAgain = memory.reachableAgain(hb.node);
    if (created) log.info({ node: hb.node, address: hb.address, gpus: hb.gpus.length, fabrics: hb.fabrics }, "node registered");
    const news: NodeNews = { ...(created ? { registered: { address: hb.address, gpus: hb.gpus.length } } : {}), ...(reachableAgain ? { reachableAgain } : {}) };
    if (batch) {
      newsPlan(hb.node, news, batch.plan);
      if (created) batch.created.push(hb.node);
    } else if (created) {
      // New hardware is a reason to try parked models again.
      const parked = await store.parkedModels();
      if (parked.length > 0) news.unpark = { models: parked, why: `new node ${hb.node}` };
    }
    const own = batch ? {} : news;
    const reuse = w.decided && Object.keys(own).length === 0 && w.decided.read.version !== undefined && this.o.fast?.replicaVersion() === w.decided.read.version;
    const read = reuse ? w.decided!.read : await store.replicaSnapshot(hb.node);
    const plan = reuse ? w.decided!.plan : this.verdicts(read, hb, now, seen, own);
    if (!isEmpty(plan)) await this.apply(plan, now, own, read, hb.node);
    else if (created) this.o.wake.wake();
    // A standby answers from what the store holds now, not from its last tick: an agent that
    // failed over to it must not be handed a set older than the leader's (same epoch, fewer
    // replicas), or it would stop engines the leader placed. Only after a change: once per change.
    if (projector.answersFromStore(hb.node)) await projector.catchUp();
    return projector.response(hb.node);
  }

  /** Writes one heartbeat's plan; replicas it changed are projected again, for their nodes only. */
  private async apply(plan: Plan, now: number, news: NodeNews, read: ReplicaRead, node: string): Promise<void> {
    const { store, memory, projector, log } = this.o;
    await store.applyPlan(plan, now);
    const unparked = news.unpark?.models ?? [];
    for (const m of unparked) log.info({ model: m, why: news.unpark!.why }, "model unparked");
    // The news is logged where it was noted; the verdicts here.
    const said = (news.registered ? 1 : 0) + unparked.length + (news.reachableAgain ? 1 : 0);
    for (const e of plan.events.slice(said)) log.info({ kind: e.kind, subject: e.subject }, e.message);
    if (plan.update.length + plan.remove.length > 0) {
      // Heartbeats are the busiest path: only the nodes the changed replicas run on can see their assignments change.
      const touched = new Set([node]);
      for (const r of read.replicas) for (const sh of r.shards) touched.add(sh.node);
      const after = await memory.snapshot();
      projector.refreshNodes(after, touched);
      projector.endpointsChanged(after);
    }
    if (unparked.length > 0) this.o.wake.wake(true);
    else if (plan.update.length + plan.remove.length > 0 || news.registered) this.o.wake.wake();
  }

  /**
   * What a group left to write: its events (and for joins the news) in one transaction, with the
   * parked models tried again once when nodes registered. The nodes are written already: a
   * failure here is logged, and their answers still go out.
   */
  private async writeBatch(batch: Batch, now: number): Promise<void> {
    const { store, log } = this.o;
    try {
      let unparked: string[] = [];
      let why = "";
      if (batch.created.length > 0) {
        why = batch.created.length === 1 ? `new node ${batch.created[0]}` : `${batch.created.length} new nodes`;
        unparked = await store.parkedModels();
        unparkInto(batch.plan, unparked, why);
      }
      if (!isEmpty(batch.plan)) await store.applyPlan(batch.plan, now);
      for (const m of unparked) log.info({ model: m, why }, "model unparked");
      if (unparked.length > 0) this.o.wake.wake(true);
    } catch (e) {
      log.warn({ err: (e as Error).message, events: batch.plan.events.length }, "the events of a group of heartbeats were not written");
    }
  }

  /**
   * The heartbeat as taken (gpu-health.ts): with a discovery error and no GPUs, the node's stored
   * GPUs, kept unhealthy. The store is read only then.
   */
  private async lastKnown(hb: HeartbeatRequest): Promise<{ hb: HeartbeatRequest; kept: boolean }> {
    if (!hb.discovery_error || hb.gpus.length > 0) return { hb, kept: false };
    return keepLastKnownGpus(hb, await this.o.store.nodeGpus([hb.node]));
  }

  /**
   * What is stored of the group's nodes before it is written (gpu-health.ts). Undefined when the
   * store cannot say: then the group's health changes go without events, its heartbeats are still handled.
   */
  private async healthBefore(hbs: readonly HeartbeatRequest[]): Promise<Map<string, HealthBefore> | undefined> {
    const nodes = [...new Set(hbs.map((h) => h.node))];
    try {
      return storedHealth(nodes, await this.o.store.nodeGpus(nodes), (n) => this.o.memory.discoveryError(n));
    } catch (e) {
      this.o.log.warn({ err: (e as Error).message, nodes: nodes.length }, "stored GPUs not read: this group's GPU health changes are written without events");
      return undefined;
    }
  }

  /** The health events of one heartbeat the store took, into the group's batch, and logged. */
  private noteHealth(w: Waiting, created: boolean, health: Map<string, HealthBefore> | undefined, batch: Batch): void {
    if (!health) return;
    for (const e of nextHealth(health, w.hb, w.kept, created)) {
      batch.plan.events.push(e);
      this.o.log[/failed|unhealthy/.test(e.kind) ? "warn" : "info"]({ node: w.hb.node, kind: e.kind, ...(e.data as object) }, e.message);
    }
  }

  // ---- joins --------------------------------------------------------------------------

  /**
   * A heartbeat that carried the join token: admits a new node (pending under approve_nodes)
   * and answers with its credential. A name that holds a credential is refused (the join token
   * must not speak for a node that has joined), unless the join carries that very credential:
   * the agent's own choice, sent again because the first answer was lost.
   */
  async join(hb: HeartbeatRequest): Promise<HeartbeatResponse> {
    // What it holds from its first word: a transfer ordered on its long poll before its next
    // heartbeat is then seen to begin (the weights events compare each report with the last).
    this.o.weights?.note(hb);
    // A node joining again (its answer was lost) with a failing driver keeps its GPUs too.
    const taken = await this.lastKnown(hb);
    return new Promise<HeartbeatResponse>((resolve, reject) => {
      this.joining.push({ ...taken, resolve, reject, at: this.o.scheduler.mono() });
      this.armJoins();
    });
  }

  private armJoins(): void {
    if (this.joinsArmed || this.joining.length === 0) return;
    this.joinsArmed = true;
    const go = () => void this.o.lock.exclusive(() => this.writeJoins()).catch((e: unknown) => this.o.log.error({ err: (e as Error).message }, "a group of joins was not handled"));
    if (this.o.scheduler.soon) this.o.scheduler.soon(go);
    else go();
  }

  /**
   * The joins that arrived together, in one transaction (a cold start of the whole cluster is a
   * few commits, not one per node) and their events in one more. A node named twice waits for
   * the next group, so that its second join sees what the first wrote. A join the store refuses
   * fails alone.
   */
  private async writeJoins(): Promise<void> {
    this.joinsArmed = false;
    const group: Waiting[] = [];
    const later: Waiting[] = [];
    const names = new Set<string>();
    for (const w of this.joining) {
      if (group.length < MAX_GROUP && !names.has(w.hb.node)) {
        names.add(w.hb.node);
        group.push(w);
      } else later.push(w);
    }
    this.joining = later;
    this.armJoins();
    const mono = this.o.scheduler.mono();
    this.o.load.queueWait(Math.max(...group.map((g) => mono - g.at)));
    const health = await this.healthBefore(group.map((g) => g.hb));
    const now = this.o.scheduler.now();
    const seen = this.o.clock.observe(now);
    // The credential the agent chose (the same on every try of its join), else a new one.
    const credentials = group.map((g) => g.hb.join_credential ?? newNodeCredential());
    const trusts: NodeTrust[] = [];
    for (const g of group) trusts.push(await this.o.store.nodeTrust(g.hb.node));
    const writes: JoinWrite[] = group.map((g, i) => ({ hb: g.hb, join: { credentialHash: sha256hex(credentials[i]!), pending: this.o.policy.approveNodes && !trusts[i]!.exists } }));
    const applied = await this.applyJoinGroup(writes, now);
    const batch: Batch = { plan: emptyPlan(), created: [] };
    const answers: ({ ok: HeartbeatResponse } | { error: unknown })[] = [];
    for (const [i, g] of group.entries()) {
      try {
        answers.push({ ok: { ...(await this.joined(g, applied[i]!, writes[i]!, trusts[i]!, { now, seen, health, batch })), credential: credentials[i]! } });
      } catch (e) {
        answers.push({ error: e });
      }
    }
    this.o.projector.flushEndpoints();
    await this.writeBatch(batch, now);
    for (const [i, g] of group.entries()) {
      const a = answers[i]!;
      if ("ok" in a) g.resolve(a.ok);
      else g.reject(a.error);
    }
  }

  /** One join of a group, once the store answered it: its health, news and verdicts; the answer without its credential. */
  private async joined(
    g: Waiting,
    r: { created: boolean; taken: boolean } | { error: unknown },
    write: JoinWrite,
    trust: NodeTrust,
    at: { now: number; seen: Watched; health: Map<string, HealthBefore> | undefined; batch: Batch },
  ): Promise<HeartbeatResponse> {
    const node = g.hb.node;
    if ("error" in r) throw r.error;
    // The store found the name taken inside its transaction: the same refusal admission gives.
    if (r.taken) throw nodeExists(node);
    this.noteHealth(g, r.created, at.health, at.batch);
    const answer = await this.received(g, at.now, at.seen, r.created, at.batch);
    if (write.join.pending) {
      at.batch.plan.events.push({ kind: "node.pending", subject: `node/${node}`, message: `node ${node} joined and waits for approval: llmgw nodes approve ${node}` });
      this.o.log.warn({ node, address: g.hb.address }, "node joined and waits for approval");
    }
    if (trust.hasCredential) this.o.log.info({ node }, "the same join sent again (its answer was lost): answered with the credential the agent chose");
    else this.o.log.info({ node }, "node credential issued");
    return answer;
  }

  /** The joins in one transaction; when that fails, one at a time, so that a join the store refuses fails alone. */
  private async applyJoinGroup(writes: JoinWrite[], now: number): Promise<({ created: boolean; taken: boolean } | { error: unknown })[]> {
    const { store } = this.o;
    try {
      return await store.applyJoins(writes, now);
    } catch (e) {
      if (writes.length === 1 || e instanceof StoreUnavailableError) return writes.map(() => ({ error: e }));
      const out: ({ created: boolean; taken: boolean } | { error: unknown })[] = [];
      for (const w of writes)
        out.push(
          await store.applyHeartbeat(w.hb, now, w.join).then(
            (r) => r,
            (error: unknown) => ({ error }),
          ),
        );
      return out;
    }
  }

  // ---- the long poll ------------------------------------------------------------------

  /** Resolves when the node's assignments change, or after waitMs. */
  async waitForAssignments(node: string, generation: number, waitMs: number, signal?: AbortSignal): Promise<HeartbeatResponse> {
    const { projector } = this.o;
    // A standby, as for a heartbeat, answers from what the store holds now: an agent that fails
    // over asks its long poll first (at once), and a set from the standby's last tick may lack a
    // replica the leader placed since, which would stop that engine until the next heartbeat. A
    // leader that has not projected this node since it started projects first, as for a heartbeat
    // (once: the polls queued behind the first projection find it done).
    if (projector.answersFromStore(node))
      await this.o.lock.exclusive(async () => {
        if (projector.answersFromStore(node)) await projector.catchUp();
      });
    await projector.wait(node, generation, waitMs, signal);
    return projector.response(node);
  }
}
