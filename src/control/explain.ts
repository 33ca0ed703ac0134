// `llmgw explain MODEL`: why a model has (or has not) the replicas it wants, Nomad-style. Per
// profile, in the order placement tries them, every node is put in one bucket by the first rule
// that rules it out (class, GPU count, an engine version that cannot serve it, state, engine
// missing, unhealthy cards, GPUs in use, and for a multi-node profile a fabric with enough such
// nodes), then what would make it fit: evicting named idle replicas, uncordoning or approving a
// node, waiting for one to come back, or upgrading an engine.
//
// A pure function of the same inputs the reconcile step takes. It reuses the fit rules rather
// than copying them: whether a node or the fleet can take a replica is asked of place() itself
// (placement.ts), "never" of capacity.ts, which replicas may be evicted of room.ts (known idle
// only: unknown is not idle), and the fleet as placement sees it of reconcile/placements.ts.

import { rolloutView } from "./rollout-view";
import { plural } from "../lib/format";
import type { ModelSpec, Profile } from "../protocol/catalog";
import { ENGINE_NAMES, lackPhrase, versionLack } from "../protocol/engine-features";
import type { Explanation, NodeOutcome, OutcomeCount, ProfileExplanation, Suggestion } from "../protocol/views";
import { type FleetCapacity, fleetCapacity, modelNeverFits, neverText, profileNeverFits, versionNeverText } from "./capacity";
import { type PlacementNode, type PlacementRequest, type Shard, place } from "./placement";
import { type ReconcileContext, type ReconcileInput, contextOf, gpuKey, onDrainingNode } from "./reconcile/context";
import { backoffNote, parkedAfter } from "./reconcile/crashes";
import type { ModelRequest } from "./reconcile/desired";
import { heldGpus, placementNodes } from "./reconcile/placements";
import { PlanBuilder } from "./reconcile/plan";
import { evictionCandidates } from "./reconcile/room";
import { explainWeights } from "./weights-placement";
import type { ModelRow, ReplicaRow } from "./types";
import { desiredReplicas, holdsGpus } from "./views";

export type ExplainInput = Omit<ReconcileInput, "newId">;

/** Nodes named per bucket; the count says how many there are in all. */
const NAMED = 5;
/** Eviction candidates tried, longest idle first. */
const MAX_CANDIDATES = 32;
/** The engine every node can run (placement.ts's ALWAYS_AVAILABLE). */
const BUILT_IN = "fake";

const ORDER: readonly NodeOutcome[] = ["class", "gpus", "unreachable", "pending", "cordoned", "draining", "engine", "unhealthy", "disk", "exhausted", "fabric", "fits"];
const NOT_READY: readonly NodeOutcome[] = ["unreachable", "pending", "cordoned", "draining"];

/** What explain works on, computed once per call. */
interface World {
  ctx: ReconcileContext;
  pnodes: PlacementNode[];
  cap: FleetCapacity;
  /** gpuKey → the replica holding that GPU */
  holder: Map<string, ReplicaRow>;
  model: ModelRow;
  /** the model's active replicas' nodes (spread avoids them) */
  nodesInUse: Set<string>;
  /** whether some node has a standing for the model's Hub weights: then placement ranks by it */
  hubModel: boolean;
}

interface NodeVerdict {
  outcome: NodeOutcome;
  /** what it has, for people: `8/8 H100-80GB used by r-1 (llama)` */
  detail: string;
  /** the same without who holds the GPUs, for the one-line summary */
  short: string;
}

/** The explanation of one model, or undefined when the catalog has no such model. */
export function explainModel(input: ExplainInput, name: string): Explanation | undefined {
  const ctx = contextOf({ ...input, newId: () => "" });
  const model = ctx.models.get(name);
  if (!model) return undefined;
  const held = heldGpus(ctx, new PlanBuilder());
  const holder = new Map<string, ReplicaRow>();
  for (const r of ctx.snapshot.replicas) if (holdsGpus(r.state)) for (const s of r.shards) for (const g of s.gpus) holder.set(gpuKey(s.node, g), r);
  const mine = ctx.snapshot.replicas.filter((r) => r.model === name);
  const active = mine.filter((r) => r.state === "starting" || r.state === "ready");
  const w: World = {
    ctx,
    pnodes: placementNodes(ctx, held),
    cap: fleetCapacity(ctx.snapshot, ctx.engines),
    holder,
    model,
    nodesInUse: new Set(active.flatMap((r) => r.shards.map((s) => s.node))),
    hubModel: false,
  };
  w.hubModel = w.pnodes.some((n) => n.hubWeights?.has(name) === true);
  const profiles = [...model.spec.profiles].sort((a, b) => a.priority - b.priority).map((p) => explainProfile(w, p));
  return verdictOf(w, mine, profiles);
}

/** The model's status and summary from its profiles, and what would help. */
function verdictOf(w: World, mine: readonly ReplicaRow[], profiles: ProfileExplanation[]): Explanation {
  const { model, ctx } = w;
  const spec = model.spec;
  const st = ctx.modelState.get(model.name);
  const desired = desiredReplicas(spec, st, ctx.now);
  const ready = mine.filter((r) => r.state === "ready").length;
  const staying = mine.filter((r) => (r.state === "starting" || r.state === "ready") && !onDrainingNode(ctx, r)).length;
  const need = Math.max(0, desired - staying);
  const replicas = mine.map((r) => ({ id: r.id, profile: r.profile, state: r.state, shards: r.shards.map((s) => ({ node: s.node, gpus: [...s.gpus] })) }));
  const base = { model: model.name, desired, ready, on_demand: spec.on_demand, replicas, profiles };
  const where = wherePlaced(mine);
  if (st?.parked) {
    const why = st.reason ? `: ${st.reason}` : "";
    return { ...base, status: "parked", summary: `${model.name} is parked after ${parkedAfter(st)}${why}`, suggestions: [{ kind: "unpark", message: `fix the cause, then \`llmgw models unpark ${model.name}\` tries again (a new revision from apply does too)` }] };
  }
  if (need === 0 && (desired > 0 || staying > 0)) {
    const starting = staying - ready;
    const roll = rolloutView(model, st, mine, desired, ctx.now, ctx.inflight);
    const summary = `${model.name} has what it wants: ${ready} of ${desired} ready${starting > 0 ? `, ${starting} starting` : ""}${where ? ` (${where})` : ""}; ${roll ? `rollout: ${roll.text}` : "nothing is needed"}`;
    const wait = roll?.waiting ? { kind: "wait" as const, message: `the rollout waits: ${roll.waiting}` } : { kind: "none" as const, message: roll ? "nothing is needed: the rollout goes on by itself" : "nothing is needed" };
    return { ...base, status: "running", summary, suggestions: [wait] };
  }
  const never = modelNeverFits(w.cap, spec);
  if (never !== undefined) return { ...base, status: "never", summary: `${model.name} ${neverText(never)}`, suggestions: [neverSuggestion(w, spec)] };
  const fit = profiles.find((p) => p.verdict === "fits");
  const lead = desired === 0 ? `${model.name} is on demand with no replica now` : `${model.name} wants ${plural(need, "more replica")}`;
  if (fit) {
    const leader = fit.would_place![0]!.node;
    const cost = w.hubModel ? `; ${leader}: ${explainWeights(w.pnodes.find((n) => n.name === leader)?.hubWeights?.get(model.name))}` : "";
    const at = fit.would_place!.map(shardText).join(" + ") + cost;
    const held = backoffNote(st, ctx.now, ctx.cfg);
    const then = desired === 0 ? "a request would start one" : held ? `it ${held}, then a reconcile places one` : "the next reconcile places one";
    return { ...base, status: "fits", summary: `${lead}; ${then} with profile ${fit.name} on ${at}`, suggestions: [{ kind: "none", message: "nothing is needed: it fits now" }] };
  }
  const first = profiles.find((p) => p.verdict === "not_now") ?? profiles[0];
  const summary = `${lead}; not now: ${first ? `${first.name}: ${first.reason}` : "it has no profile"}`;
  return { ...base, status: "not_now", summary, suggestions: suggest(w, desired) };
}

/** What changes a "never": an engine upgrade where versions rule the nodes out, else other nodes or profiles. */
function neverSuggestion(w: World, spec: ModelSpec): Suggestion {
  const old = spec.profiles.map((p) => versionNeverText(w.cap, p)).find((t) => t !== undefined);
  if (old !== undefined)
    return { kind: "change", message: `${old}: upgrade it there (each agent asks for its engines' versions every 10 minutes), or change the model's profiles (nodes, engine) to what the fleet can serve` };
  return { kind: "change", message: "add nodes with such GPUs, or change the model's profiles (gpu_class, gpus, nodes) to what the fleet has" };
}

function wherePlaced(mine: readonly ReplicaRow[]): string {
  const live = mine.filter((r) => holdsGpus(r.state));
  return live.map((r) => `${r.id} on ${r.shards.map(shardText).join(" + ")}`).join(", ");
}

export function shardText(s: { node: string; gpus: readonly number[] }): string {
  return `${s.node} GPU ${s.gpus.join(",")}`;
}

function requestFor(w: World, profiles: Profile[]): PlacementRequest {
  return { model: w.model.name, count: 1, profiles, placement: w.model.spec.placement, nodesInUse: w.nodesInUse };
}

/** Where one replica would go on these nodes, by placement's own rules; null when nowhere. */
function trial(w: World, nodes: readonly PlacementNode[], profiles: Profile[]): Shard[] | null {
  return place(nodes, [requestFor(w, profiles)]).placed[0]?.shards ?? null;
}

function explainProfile(w: World, p: Profile): ProfileExplanation {
  const verdicts = new Map<string, NodeVerdict>();
  for (const n of w.pnodes) verdicts.set(n.name, nodeVerdict(w, n, p));
  if (p.nodes > 1) fabricRule(w, p, verdicts);
  const outcomes = bucket(verdicts);
  const res = place(w.pnodes, [requestFor(w, [p])]);
  const shards = res.placed[0]?.shards ?? null;
  const never = w.cap.nodes > 0 ? profileNeverFits(w.cap, p) : undefined;
  const weightsOn = w.pnodes.filter((n) => holdsWeights(w, n)).map((n) => n.name).sort();
  return {
    name: p.name,
    engine: p.engine,
    gpu_class: p.gpu_class,
    gpus: p.gpus,
    nodes: p.nodes,
    priority: p.priority,
    verdict: shards ? "fits" : never !== undefined ? "never" : "not_now",
    line: outcomeLine(outcomes, p),
    reason: shards ? null : never !== undefined ? neverText(never) : (res.unplaceable.get(w.model.name) ?? "no node fits"),
    would_place: shards ? shards.map((s) => ({ node: s.node, gpus: [...s.gpus] })) : null,
    outcomes,
    weights_on: weightsOn,
  };
}

/** The first rule that rules node n out for profile p, or "fits" (for a multi-node profile: as one of its nodes). */
function nodeVerdict(w: World, n: PlacementNode, p: Profile): NodeVerdict {
  const cls = p.gpu_class;
  const mine = n.gpus.filter((g) => g.class === cls);
  const v = (outcome: NodeOutcome, detail: string, short = detail): NodeVerdict => ({ outcome, detail, short });
  if (mine.length === 0) return v("class", classesOf(n));
  if (mine.length < p.gpus) return v("gpus", `has ${mine.length} ${cls}, needs ${p.gpus}`);
  // Capability before capacity: a version that cannot serve p rules the node out whatever its state.
  const version = n.engineVersions?.get(p.engine);
  const lacks = versionLack(p.engine, version, p);
  if (lacks) return v("engine", `${ENGINE_NAMES[p.engine]} ${version} has ${lackPhrase(lacks)}`);
  if (n.state !== "ready") return v(n.state, n.state);
  const lack = p.engine === BUILT_IN ? undefined : n.missingEngines?.get(p.engine);
  if (lack !== undefined) return v("engine", `no ${p.engine}${lack ? `: ${lack}` : ""}`);
  const sick = mine.filter((g) => !g.healthy).length;
  if (mine.length - sick < p.gpus) return v("unhealthy", `${sick}/${mine.length} ${cls} unhealthy`);
  const hub = n.hubWeights?.get(w.model.name);
  if (hub?.noRoom !== undefined) return v("disk", hub.noRoom);
  // Whether it fits here is placement's answer for this node alone.
  const alone = place([n], [{ ...requestFor(w, [{ ...p, nodes: 1 }]), nodesInUse: new Set() }]).placed.length > 0;
  // A node of a multi-node replica must be whole (placement's pickMulti): no GPU of it used or unhealthy.
  const whole = n.gpus.every((g) => g.healthy && !g.used);
  if (alone && (p.nodes <= 1 || whole)) return v("fits", `${mine.filter((g) => g.healthy && !g.used).length} ${cls} free${weightsNote(w, n)}`);
  const used = mine.filter((g) => g.used).length;
  const other = n.gpus.filter((g) => g.class !== cls && (g.used || !g.healthy)).length;
  let what = `${used}/${mine.length} ${cls} used`;
  if (!alone && used === 0) what = `${mine.length} ${cls}, none free to take (they share memory with GPUs in use)`;
  if (alone && other > 0) what += `, ${plural(other, "other GPU")} used or unhealthy`;
  const note = alone && !whole ? "; a multi-node replica needs the whole node" : "";
  const by = holdersOn(w, n.name);
  return v("exhausted", `${what}${by ? ` by ${by}` : ""}${note}`, what + note);
}

/** Whether node n holds the model's weights: all of a Hub revision's files, else what its heartbeat lists. */
function holdsWeights(w: World, n: PlacementNode): boolean {
  return w.hubModel ? n.hubWeights?.get(w.model.name)?.rank === 2 : n.weights.has(w.model.name);
}

/** Which weights preference applies to node n, and what getting them there costs (explainWeights). */
function weightsNote(w: World, n: PlacementNode): string {
  if (!w.hubModel) return n.weights.has(w.model.name) ? ", has the weights" : "";
  return `; ${explainWeights(n.hubWeights?.get(w.model.name))}`;
}

/** Classes named in a node's detail: a node may report up to 256, one line must stay one line. */
const CLASSES_NAMED = 8;

function classesOf(n: PlacementNode): string {
  if (n.gpus.length === 0) return "has no GPUs";
  const counts = new Map<string, number>();
  for (const g of n.gpus) counts.set(g.class, (counts.get(g.class) ?? 0) + 1);
  const named = [...counts].slice(0, CLASSES_NAMED).map(([c, k]) => `${k}× ${c}`);
  const more = counts.size - named.length;
  return `has ${named.join(", ")}${more > 0 ? `, and ${plural(more, "more class", "more classes")} (llmgw nodes ${n.name})` : ""}`;
}

/** "r-1 (llama), r-2 (qwen)": the replicas holding GPUs on the node. */
function holdersOn(w: World, node: string): string {
  const seen = new Map<string, ReplicaRow>();
  for (const [key, r] of w.holder) if (key.startsWith(`${node}\u0000`)) seen.set(r.id, r);
  const list = [...seen.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
  const named = list.slice(0, NAMED).map((r) => `${r.id} (${r.model}${r.state === "ready" ? "" : `, ${r.state}`})`);
  return named.join(", ") + (list.length > NAMED ? `, and ${list.length - NAMED} more` : "");
}

/** A multi-node profile needs p.nodes fitting nodes in one fabric: the fitting nodes of no such fabric are ruled out. */
function fabricRule(w: World, p: Profile, verdicts: Map<string, NodeVerdict>): void {
  const perFabric = new Map<string, number>();
  const fits = w.pnodes.filter((n) => verdicts.get(n.name)!.outcome === "fits");
  for (const n of fits) for (const f of new Set(n.fabrics)) perFabric.set(f, (perFabric.get(f) ?? 0) + 1);
  for (const n of fits) {
    const best = Math.max(0, ...n.fabrics.map((f) => perFabric.get(f) ?? 0));
    if (best >= p.nodes) continue;
    const detail = n.fabrics.length === 0 ? "in no fabric" : `its fabric${n.fabrics.length > 1 ? "s have" : ` ${n.fabrics[0]} has`} ${best} such ${best === 1 ? "node" : "nodes"}, needs ${p.nodes}`;
    verdicts.set(n.name, { outcome: "fabric", detail, short: detail });
  }
}

function bucket(verdicts: ReadonlyMap<string, NodeVerdict>): OutcomeCount[] {
  const by = new Map<NodeOutcome, { name: string; v: NodeVerdict }[]>();
  for (const [name, v] of [...verdicts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    let l = by.get(v.outcome);
    if (!l) by.set(v.outcome, (l = []));
    l.push({ name, v });
  }
  return ORDER.filter((o) => by.has(o)).map((o) => {
    const l = by.get(o)!;
    return { outcome: o, count: l.length, nodes: l.slice(0, NAMED).map((x) => ({ name: x.name, detail: x.v.detail })) };
  });
}

/** "2 nodes filtered by class; 1 exhausted: 8/8 H100-80GB used; 1 not ready: cordoned; 0 fit". */
export function outcomeLine(outcomes: readonly OutcomeCount[], p: Pick<Profile, "nodes" | "engine">): string {
  const parts: string[] = [];
  const add = (count: number, text: string) => parts.push(`${parts.length === 0 ? plural(count, "node") : String(count)} ${text}`);
  const get = (o: NodeOutcome) => outcomes.find((x) => x.outcome === o);
  const firstDetails = (o: OutcomeCount) => {
    const short = [...new Set(o.nodes.map((n) => n.detail.replace(/ by [^;]*/, "")))];
    return short.slice(0, 2).join(", ") + (short.length > 2 || o.count > o.nodes.length ? ", …" : "");
  };
  for (const o of ["class", "gpus"] as const) {
    const x = get(o);
    if (x) add(x.count, o === "class" ? "filtered by class" : "filtered by GPU count");
  }
  const notReady = outcomes.filter((x) => NOT_READY.includes(x.outcome));
  if (notReady.length > 0) {
    const total = notReady.reduce((s, x) => s + x.count, 0);
    add(total, `not ready: ${notReady.length === 1 ? notReady[0]!.outcome : notReady.map((x) => `${x.count} ${x.outcome}`).join(", ")}`);
  }
  const rest: [NodeOutcome, (x: OutcomeCount) => string][] = [
    ["engine", (x) => (x.nodes.every((n) => n.detail.startsWith("no ")) ? `without ${p.engine}` : `whose ${p.engine} cannot serve it: ${firstDetails(x)}`)],
    ["unhealthy", (x) => `with unhealthy cards: ${firstDetails(x)}`],
    ["exhausted", (x) => `exhausted: ${firstDetails(x)}`],
    ["fabric", () => `not in a fabric with ${p.nodes} such nodes`],
  ];
  for (const [o, text] of rest) {
    const x = get(o);
    if (x) add(x.count, text(x));
  }
  const fit = get("fits")?.count ?? 0;
  add(fit, fit === 1 ? "fits" : "fit");
  return parts.join("; ");
}

// ---- what would make it fit ---------------------------------------------------------------

function suggest(w: World, desired: number): Suggestion[] {
  const out = [...stopping(w), ...evictions(w, desired), ...nodeActions(w)];
  if (out.length > 0) return out;
  return [{ kind: "none", message: `nothing an operator can do now makes room: no idle replica may be evicted and no node held back would take it; wait for GPUs to free up, or add nodes${unknownIdle(w)}` }];
}

/** " (3 replicas' idleness is unknown …)" for the replicas no router has reported: never counted as idle. */
function unknownIdle(w: World): string {
  const n = w.ctx.snapshot.replicas.filter((r) => r.state === "ready" && r.model !== w.model.name && !w.ctx.lastUsed.has(r.id)).length;
  return n > 0 ? ` (${plural(n, "replica")} ${n === 1 ? "is" : "are"} of unknown idleness, not reported by any router, so not counted as idle)` : "";
}

/** Replicas being stopped (drained, evicted) still hold their GPUs: whether waiting for them makes room. */
function stopping(w: World): Suggestion[] {
  const going = w.ctx.snapshot.replicas.filter((r) => r.state === "draining" && r.model !== w.model.name);
  if (going.length === 0) return [];
  const freed = new Set(going.flatMap((r) => r.shards.flatMap((s) => s.gpus.map((g) => gpuKey(s.node, g)))));
  const at = trial(w, w.pnodes.map((n) => ({ ...n, gpus: n.gpus.map((g) => (g.used && freed.has(gpuKey(n.name, g.index)) ? { ...g, used: false } : g)) })), w.model.spec.profiles);
  if (!at) return [];
  const ids = going.map((r) => r.id).sort();
  const named = ids.slice(0, NAMED).join(", ") + (ids.length > NAMED ? `, and ${ids.length - NAMED} more` : "");
  return [{ kind: "wait", message: `wait: ${ids.length === 1 ? "replica" : "replicas"} ${named} ${ids.length === 1 ? "is" : "are"} stopping; once stopped it would go to ${at.map(shardText).join(" + ")}`, replicas: ids }];
}

/** The fewest idle replicas (longest idle first) whose GPUs would make room, as room.ts would choose them. */
function evictions(w: World, desired: number): Suggestion[] {
  const { ctx, model } = w;
  const req: ModelRequest = { ...requestFor(w, model.spec.profiles), ready: 0, desired: Math.max(desired, 1) };
  const byModel = new Map<string, ReplicaRow[]>();
  for (const r of ctx.snapshot.replicas) byModel.set(r.model, [...(byModel.get(r.model) ?? []), r]);
  const cands = evictionCandidates(ctx, new PlanBuilder(), req, model.spec, byModel, new Map()).slice(0, MAX_CANDIDATES);
  const fitsFreeing = (chosen: readonly ReplicaRow[]) => {
    const freed = new Set(chosen.flatMap((r) => r.shards.flatMap((s) => s.gpus.map((g) => gpuKey(s.node, g)))));
    return trial(w, w.pnodes.map((n) => ({ ...n, gpus: n.gpus.map((g) => (g.used && freed.has(gpuKey(n.name, g.index)) ? { ...g, used: false } : g)) })), model.spec.profiles);
  };
  let chosen: ReplicaRow[] | undefined;
  for (const c of cands) if (!chosen && fitsFreeing([c.r])) chosen = [c.r];
  if (!chosen) {
    const prefix: ReplicaRow[] = [];
    for (const c of cands) {
      prefix.push(c.r);
      if (fitsFreeing(prefix)) {
        // Keep only those it needs.
        chosen = [...prefix];
        for (const r of prefix) if (chosen.length > 1 && fitsFreeing(chosen.filter((x) => x !== r))) chosen = chosen.filter((x) => x !== r);
        break;
      }
    }
  }
  if (!chosen) return [];
  const at = fitsFreeing(chosen)!.map(shardText).join(" + ");
  const idle = new Map(cands.map((c) => [c.r.id, Math.floor((ctx.now - c.used) / 60_000)]));
  const names = chosen.map((r) => `${r.id} of ${r.model} (idle ${idle.get(r.id)}m)`).join(", ");
  const owners = [...new Set(chosen.map((r) => r.model))].join(", ");
  const who = model.spec.on_demand ? "llmgw does this by itself when a request for it arrives" : `llmgw evicts only for on-demand models: lower the replicas of ${owners} to free them`;
  return [{ kind: "evict", message: `evicting idle ${chosen.length === 1 ? "replica" : "replicas"} ${names} would make room on ${at}; ${who}`, replicas: chosen.map((r) => r.id) }];
}

/** Nodes held back (cordoned, draining, pending, unreachable) that would take it if ready. */
function nodeActions(w: World): Suggestion[] {
  const out: Suggestion[] = [];
  const profiles = w.model.spec.profiles;
  const back = w.pnodes.filter((n) => n.state !== "ready" && profiles.some((p) => n.gpus.filter((g) => g.class === p.gpu_class).length >= p.gpus));
  const asReady = (names: ReadonlySet<string>) => w.pnodes.map((n) => (names.has(n.name) ? { ...n, state: "ready" as const } : n));
  const helped: string[] = [];
  for (const n of back.slice(0, 4 * NAMED)) {
    const at = trial(w, asReady(new Set([n.name])), profiles);
    if (!at) continue;
    helped.push(n.name);
    out.push(nodeAction(n, at.map(shardText).join(" + ")));
  }
  // A multi-node replica may need several of them back at once.
  const acting = back.filter((n) => n.state !== "unreachable");
  if (helped.length === 0 && acting.length > 1) {
    const at = trial(w, asReady(new Set(acting.map((n) => n.name))), profiles);
    if (at) {
      const names = acting.map((n) => n.name);
      out.push({ kind: "uncordon", message: `making ${names.join(", ")} ready again (uncordon, or approve a pending one) would make room on ${at.map(shardText).join(" + ")}`, nodes: names });
    }
  }
  return out;
}

function nodeAction(n: PlacementNode, at: string): Suggestion {
  const there = `it would go to ${at}`;
  if (n.state === "cordoned") return { kind: "uncordon", message: `uncordon ${n.name} (\`llmgw uncordon ${n.name}\`): ${there}`, nodes: [n.name] };
  if (n.state === "draining") return { kind: "uncordon", message: `${n.name} is draining: \`llmgw uncordon ${n.name}\` stops the drain; ${there}`, nodes: [n.name] };
  if (n.state === "pending") return { kind: "approve", message: `approve ${n.name} (\`llmgw nodes approve ${n.name}\`): ${there}`, nodes: [n.name] };
  return { kind: "wait", message: `wait for ${n.name} to come back (unreachable): ${there}`, nodes: [n.name] };
}
