// Why a drain is or is not getting anywhere. A replica on a draining node stops only once
// replicas elsewhere cover what its model wants (reconcile/desired.ts), so a drain waits on
// each model's replacements: starting elsewhere is progress; placement unable to find room now
// is blocked (it may clear when GPUs free up); no node outside the draining ones able to hold the
// model even with every card free, or the model parked, is never: waiting will not help. A pure
// function of the snapshot, beside the tables (views.ts), so `nodes`, `status` and `drain --wait`
// read the same answer.

import { plural } from "../lib/format";
import type { NodeDrain } from "../protocol/views";
import { fleetCapacity, profileNeverFits } from "./capacity";
import { parkedAfter } from "./reconcile/crashes";
import { type PlacementNode, place } from "./placement";
import type { ModelRow, ModelStateRow, Snapshot } from "./types";

/** The model state and desired count the drain judgement reads, per model. */
export interface DrainModelFacts {
  state: ModelStateRow | undefined;
  desired: number;
}

const list = (names: readonly string[]) => (names.length <= 1 ? (names[0] ?? "") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`);

/**
 * Why no node outside the draining ones could ever hold `desired` replicas of the model, judged
 * as if every other node were ready and every card free; undefined when they could.
 */
export function drainNeverFits(snapshot: Pick<Snapshot, "nodes" | "gpus">, draining: ReadonlySet<string>, m: ModelRow, desired: number): string | undefined {
  const others = snapshot.nodes.filter((n) => !draining.has(n.name));
  const without = `without ${list([...draining].sort())}`;
  if (others.length === 0) return `no other node is in the fleet`;
  const cap = fleetCapacity({ nodes: others, gpus: snapshot.gpus });
  const reasons: string[] = [];
  for (const p of m.spec.profiles) {
    const found = cap.byClass.has(p.gpu_class) ? profileNeverFits(cap, p)?.replace(/^no node /, "no other node ") : `no other node has ${p.gpu_class} GPUs`;
    if (found === undefined) {
      reasons.length = 0;
      break;
    }
    const r = found.startsWith("no other node ") ? found : `${without}, ${found}`;
    reasons.push(m.spec.profiles.length > 1 ? `${p.name}: ${r}` : r);
  }
  if (reasons.length > 0) return reasons.join("; ");
  if (desired <= 1) return undefined;
  // One fits; all it wants may not (binpacked or spread, the other nodes all free).
  const byNode = new Map<string, PlacementNode>();
  for (const n of others) byNode.set(n.name, { name: n.name, state: "ready", fabrics: n.fabrics, gpus: [], weights: new Set() });
  for (const g of snapshot.gpus) byNode.get(g.node)?.gpus.push({ index: g.index, uuid: g.uuid, class: g.class, healthy: true, used: false, parent: g.parent });
  const got = place([...byNode.values()], [{ model: m.name, count: desired, profiles: m.spec.profiles, placement: m.spec.placement, nodesInUse: new Set() }]).placed.length;
  if (got >= desired) return undefined;
  return `${without}, the other nodes could hold ${got} of its ${plural(desired, "replica")} even with every GPU free`;
}

/**
 * For each draining node: the replicas still on it (failed ones are gone and do not count) and,
 * per replica, whether it is stopping, waiting on a replacement, blocked now, or never going to
 * move; the node's `blocked` is the first replica's cause that keeps the drain from finishing.
 */
export function drainProgress(snapshot: Snapshot, facts: ReadonlyMap<string, DrainModelFacts>): Map<string, NodeDrain> {
  const out = new Map<string, NodeDrain>();
  const draining = new Set(snapshot.nodes.filter((n) => n.adminState === "draining").map((n) => n.name));
  if (draining.size === 0) return out;
  const models = new Map(snapshot.models.map((m) => [m.name, m]));
  const onDraining = (r: Snapshot["replicas"][number]) => r.shards.some((s) => draining.has(s.node));
  // Per model, its replicas elsewhere: ready ones cover it, starting ones are on their way.
  const elsewhere = new Map<string, { ready: number; starting: number }>();
  for (const r of snapshot.replicas) {
    if (onDraining(r) || (r.state !== "ready" && r.state !== "starting")) continue;
    let c = elsewhere.get(r.model);
    if (!c) elsewhere.set(r.model, (c = { ready: 0, starting: 0 }));
    c[r.state]++;
  }
  const neverCache = new Map<string, string | undefined>();
  for (const node of [...draining].sort()) {
    const d: NodeDrain = { remaining: 0, replicas: [], blocked: null, never: false };
    for (const r of snapshot.replicas) {
      if (r.state === "failed" || !r.shards.some((s) => s.node === node)) continue;
      d.remaining++;
      const v = replicaDrain(r, models.get(r.model), facts.get(r.model), elsewhere.get(r.model) ?? { ready: 0, starting: 0 }, (m, desired) => {
        if (!neverCache.has(m.name)) neverCache.set(m.name, drainNeverFits(snapshot, draining, m, desired));
        return neverCache.get(m.name);
      });
      d.replicas.push({ id: r.id, model: r.model, state: r.state, status: v.status, reason: v.reason });
    }
    const stuck = d.replicas.find((x) => x.status === "never") ?? d.replicas.find((x) => x.status === "blocked");
    if (stuck) {
      d.never = stuck.status === "never";
      d.blocked = `${stuck.model} has nowhere else to go${d.never ? "" : " now"}: ${stuck.reason}`;
      if (stuck.reason?.startsWith("parked")) d.blocked = `${stuck.model} is ${stuck.reason}`;
      else if (d.never) d.blocked += ` (\`llmgw uncordon ${node}\` calls the drain off; or add such nodes)`;
    }
    out.set(node, d);
  }
  return out;
}

type DrainStatus = NodeDrain["replicas"][number]["status"];

function replicaDrain(
  r: Snapshot["replicas"][number],
  m: ModelRow | undefined,
  f: DrainModelFacts | undefined,
  other: { ready: number; starting: number },
  never: (m: ModelRow, desired: number) => string | undefined,
): { status: DrainStatus; reason: string | null } {
  if (r.state === "draining") return { status: "stopping", reason: null };
  // Starting ones have served nothing and stop at once; a model gone from the catalog stops too.
  if (r.state === "starting" || !m) return { status: "stopping", reason: "stops at the next reconcile" };
  const desired = f?.desired ?? m.spec.replicas.min;
  if (other.ready >= desired) return { status: "stopping", reason: `${other.ready} ready elsewhere cover it` };
  const st = f?.state;
  if (st?.parked) return { status: "never", reason: `parked after ${parkedAfter(st)} (${st.reason ?? "no error given"}); llmgw models unpark ${m.name} to retry` };
  const cannot = never(m, desired);
  if (cannot !== undefined) return { status: "never", reason: `${cannot}; waiting will not help` };
  if (other.ready + other.starting >= desired) return { status: "waiting", reason: `its replacement is starting elsewhere (${other.ready}/${desired} ready)` };
  if (st?.unplaceableReason) return { status: "blocked", reason: st.unplaceableReason };
  if (st && st.failures > 0 && st.reason) return { status: "blocked", reason: `its replacement failed to start (${plural(st.failures, "failure")}, retrying): ${st.reason}` };
  return { status: "waiting", reason: "waiting for a place for its replacement" };
}
