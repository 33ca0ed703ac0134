// The operator's hold on weights: `weights pull` (a model's revision wanted on nodes with no
// replica there: the plan fetches it like a replica's), `weights rm` (a node told to remove a
// revision no replica of it uses, in its heartbeat answer, until it says what became of it),
// the transfer events written as nodes' reports change, and the views of weights-views.ts.
// Pulls and removals are kept in the store until done (weights-requests.ts): a restarted head
// node, or the control plane that leads after it, carries them on.

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import { type WeightsManifest, fileSourceRepo, sourceRepo } from "../protocol/weights";
import type { WeightsInFlight, WeightsNodeView, WeightsPullBody, WeightsPullResult, WeightsRemoval, WeightsRemoveBody, WeightsRemoveResult, WeightsRowView } from "../protocol/weights-admin";
import { ConflictError, InvalidRequestError, NotFoundError } from "./errors";
import type { EventLog } from "./event-log";
import type { NodeMemory } from "./node-memory";
import type { WeightsOrdersPort } from "./store-port";
import type { Snapshot } from "./types";
import type { WeightsWant } from "./transfers";
import { WeightsRequests } from "./weights-requests";
import type { NodeWeights, WeightsPlanner } from "./weights-planner";
import { transferEvents, weightsInFlight, weightsRows } from "./weights-views";

export interface WeightsAdminOptions {
  planner: Pick<WeightsPlanner, "latest" | "reportOf" | "remake">;
  manifests: { known(repo: string, revision: string): WeightsManifest | undefined };
  memory: Pick<NodeMemory, "snapshot">;
  /** Each node's assignments now (the projector's): a revision a replica uses is not removed. */
  assignments: (node: string) => readonly { id: string; source?: string | undefined; revision: string | null }[];
  events: Pick<EventLog, "event">;
  /** Weights placed at file:// sources, as nodes found them (local-weights.ts): listed, pulled and removed (copies only) as the Hub's. */
  local?: { revisionOf(source: string): string | undefined };
  /** Where pulls and removals are kept until done. */
  store: WeightsOrdersPort;
  scheduler: Pick<Scheduler, "now">;
  log: Logger;
}

/** The catalog models whose weights come from the Hub, pinned to a commit, and those placed at a file:// source some node found (`localRevision`). */
function hubModels(snap: Snapshot, localRevision: (source: string) => string | undefined = () => undefined): { name: string; repo: string; revision: string }[] {
  const out: { name: string; repo: string; revision: string }[] = [];
  for (const m of snap.models) {
    const { source, revision } = m.spec;
    if (source?.startsWith("hf://") === true && revision !== undefined && /^[0-9a-f]{40}$/.test(revision)) out.push({ name: m.name, repo: source.slice(5), revision });
    const found = source?.startsWith("file://") === true ? localRevision(source!) : undefined;
    if (found !== undefined) out.push({ name: m.name, repo: fileSourceRepo(source!.slice("file://".length)), revision: found });
  }
  return out;
}

export class WeightsAdmin {
  private readonly requests: WeightsRequests;
  private readonly localRevision = (source: string) => this.o.local?.revisionOf(source);

  constructor(private readonly o: WeightsAdminOptions) {
    this.requests = new WeightsRequests({ store: o.store, scheduler: o.scheduler, log: o.log, changed: () => void o.planner.remake() });
    void this.requests.reload();
  }

  seedsOf(node: string): WeightsWant[] {
    return this.requests.seedsOf(node);
  }

  allSeeds(): WeightsWant[] {
    return this.requests.allSeeds();
  }

  removalsOf(node: string): WeightsRemoval[] {
    return this.requests.removalsOf(node);
  }

  /** A node's new report (weights-planner.ts observe): removal answers and transfer events. */
  observe(hb: HeartbeatRequest, before: NodeWeights | undefined, after: NodeWeights): void {
    for (const r of hb.weights_removed ?? []) {
      if (!this.requests.answered(hb.node, r.repo, r.revision)) continue;
      const what = `${r.repo}@${r.revision.slice(0, 12)}`;
      if (r.error === null) this.event("weights.removed", hb.node, `${hb.node} removed ${what}`);
      else this.event("weights.remove_refused", hb.node, `${hb.node} did not remove ${what}: ${r.error}`);
    }
    for (const e of transferEvents(hb.node, before, after, (r, v) => this.o.manifests.known(r, v))) this.event(e.kind, hb.node, e.message);
    const held = (node: string) => (node === hb.node ? after.held : this.o.planner.reportOf(node)?.held);
    for (const d of this.requests.clearDone(held, (r, v) => this.o.manifests.known(r, v)?.files.map((f) => f.path)))
      this.o.log.info({ repo: d.repo, revision: d.revision, nodes: d.nodes }, "weights pull done: every node named holds the revision");
  }

  forget(node: string): void {
    this.requests.forget(node);
  }

  async list(): Promise<WeightsRowView[]> {
    const snap = await this.o.memory.snapshot();
    const held = new Map(snap.nodes.map((n) => [n.name, this.o.planner.reportOf(n.name)?.held ?? []] as const));
    const seeded = this.requests.seededKeys();
    return weightsRows({ nodes: snap.nodes, models: hubModels(snap, this.localRevision), status: this.o.planner.latest()?.status ?? [], held, manifest: (r, v) => this.o.manifests.known(r, v), seeded });
  }

  /** Each node's copy of a model's pinned revision; undefined when its weights do not come from the Hub. */
  async modelNodes(model: string): Promise<WeightsNodeView[] | undefined> {
    return (await this.list()).find((r) => r.models.includes(model))?.nodes;
  }

  /** The Weights line of the summary: what moves now. */
  inFlight(): WeightsInFlight | null {
    return weightsInFlight(this.o.planner.latest()?.status ?? []);
  }

  /** A model's weights onto a fabric's nodes or the nodes named, with no replica there. */
  async pull(body: WeightsPullBody): Promise<WeightsPullResult> {
    const snap = await this.o.memory.snapshot();
    const model = hubModels(snap, this.localRevision).find((m) => m.name === body.model);
    if (model === undefined) {
      const found = snap.models.find((m) => m.name === body.model);
      if (found === undefined) throw new NotFoundError(`model "${body.model}" not found`);
      if (found.spec.source?.startsWith("file://") === true) throw new InvalidRequestError(`model "${body.model}": no node holds ${found.spec.source} (no agent found the directory): there is nothing to copy yet`, ["model"]);
      throw new InvalidRequestError(`model "${body.model}" has no source: hf://ORG/NAME pinned to a commit: llmgw fetches only weights from the Hub`, ["model"]);
    }
    let nodes: string[];
    if (body.fabric !== undefined) {
      nodes = snap.nodes.filter((n) => n.fabrics.includes(body.fabric!)).map((n) => n.name);
      if (nodes.length === 0) throw new NotFoundError(`no node is in fabric "${body.fabric}"`);
    } else {
      const known = new Set(snap.nodes.map((n) => n.name));
      const unknown = body.nodes!.filter((n) => !known.has(n));
      if (unknown.length > 0) throw new NotFoundError(`no node named ${unknown.map((n) => `"${n}"`).join(", ")}`);
      nodes = [...new Set(body.nodes!)];
    }
    nodes.sort();
    const at = this.o.scheduler.now();
    await this.requests.put(nodes.map((node) => ({ node, repo: model.repo, revision: model.revision, kind: "pull" as const, at })));
    void this.o.planner.remake();
    this.event("weights.pulled", `model/${model.name}`, `weights of ${model.name} (${model.repo}@${model.revision.slice(0, 12)}) wanted on ${nodes.join(", ")}`);
    return { model: model.name, repo: model.repo, revision: model.revision, nodes, message: `fetching the weights of ${model.name} onto ${nodes.join(", ")}: see \`llmgw weights ls\`` };
  }

  /** A node told to remove a model's revision (or a repository's revisions it holds), refused while a replica there uses it. */
  async remove(body: WeightsRemoveBody): Promise<WeightsRemoveResult> {
    const snap = await this.o.memory.snapshot();
    if (!snap.nodes.some((n) => n.name === body.node)) throw new NotFoundError(`node "${body.node}" not found`);
    const held = this.o.planner.reportOf(body.node)?.held ?? [];
    const model = hubModels(snap, this.localRevision).find((m) => m.name === body.model);
    let repo: string;
    let revisions: string[];
    if (model !== undefined) {
      repo = model.repo;
      revisions = [model.revision];
    } else if (/^[^@\s]+\/[^@\s]+(@[0-9a-f]{40})?$/.test(body.model)) {
      const [r, rev] = body.model.split("@") as [string, string | undefined];
      repo = r;
      revisions = rev !== undefined ? [rev] : held.filter((h) => h.repo === r).map((h) => h.revision);
    } else if (snap.models.some((m) => m.name === body.model)) {
      throw new InvalidRequestError(`model "${body.model}" has no source: hf://ORG/NAME: llmgw removes only weights it fetched`, ["model"]);
    } else throw new NotFoundError(`"${body.model}" is neither a catalog model nor a repository ORG/NAME[@COMMIT] that ${body.node} holds`);
    const mine = held.filter((h) => h.repo === repo && revisions.includes(h.revision));
    if (mine.length === 0) throw new NotFoundError(`${body.node} holds no weights of ${repo}${revisions.length === 1 ? `@${revisions[0]!.slice(0, 12)}` : ""}`);
    const foreign = mine.filter((h) => !h.fetched);
    if (foreign.length > 0) throw new ConflictError(`${body.node} holds ${repo}@${foreign[0]!.revision.slice(0, 12)} but llmgw did not fetch it (an operator placed it): it is left alone; remove it on the node by hand`);
    for (const a of this.o.assignments(body.node))
      if (sourceRepo(a.source) === repo && a.revision !== null && revisions.includes(a.revision))
        throw new ConflictError(`replica ${a.id} on ${body.node} uses ${repo}@${a.revision.slice(0, 12)}: scale the model down or delete it first`);
    const at = this.o.scheduler.now();
    await this.requests.put(mine.map((h) => ({ node: body.node, repo, revision: h.revision, kind: "remove" as const, at })));
    const list = mine.map((h) => h.revision);
    this.event("weights.remove", `node/${body.node}`, `${body.node} asked to remove ${list.map((r) => `${repo}@${r.slice(0, 12)}`).join(", ")}`);
    return { node: body.node, repo, revisions: list, message: `${body.node} will remove ${repo} (${list.map((r) => r.slice(0, 12)).join(", ")}) at its next heartbeat: see \`llmgw events\`` };
  }

  private event(kind: string, subject: string, message: string): void {
    const s = subject.includes("/") ? subject : `node/${subject}`;
    this.o.events.event(kind, s, message).catch((e) => this.o.log.warn({ kind, err: errorText(e) }, "weights event not written"));
  }
}
