// The fleet summary: how full, what is broken, what holds cards nobody uses. A pure function
// of the tables the admin API serves, so the summary and the tables cannot disagree; it is a
// different question asked of the same facts.

import type { ClassUse, DiscoveryProblem, FabricUse, IdleReplica, ParkedModel, Summary, Tables, UnhealthyGpus } from "../protocol/views";
import { UNSTATED_PROTOCOL } from "../protocol/skew";

/** Nodes named per state that needs a person (the summary's node_names), bounded at any fleet size. */
const NAMED_NODES = 20;

/** Nodes named per unhealthy reason: enough to start looking, bounded at any fleet size. */
const REASON_NODES = 5;

/**
 * How long a ready replica must go unasked-for to be named idle. Minutes, not seconds: a
 * replica flapping in and out of the list is noise, and unloading one throws away the KV
 * cache prefix routing worked to fill.
 */
export const IDLE_THRESHOLD_SECONDS = 600;

export interface SummaryExtras {
  version: string;
  evictions?: Summary["evictions"];
  store?: Summary["store"];
  storeError?: string;
  controlPlanes?: Summary["control_planes"];
}

/** The first nodes by name in each state that needs a person. */
function nodeNames(t: Tables): NonNullable<Summary["node_names"]> {
  const named: NonNullable<Summary["node_names"]> = { unreachable: [], cordoned: [], draining: [], pending: [] };
  for (const n of [...t.nodes].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)))
    if (n.state !== "ready" && named[n.state].length < NAMED_NODES) named[n.state].push(n.name);
  return named;
}

/** Classes and fabrics in name order. */
const byName = (a: { class?: string; fabric?: string }, b: { class?: string; fabric?: string }) => {
  const x = a.class ?? a.fabric ?? "";
  const y = b.class ?? b.fabric ?? "";
  return x < y ? -1 : x > y ? 1 : 0;
};

/** Drains that cannot finish, by node, with why (views' drain progress); one that only takes time is not one. */
function stuckDrains(t: Tables): Pick<Summary, "stuck_drains"> {
  const stuck = t.nodes
    .filter((n) => n.drain?.blocked)
    .map((n) => ({ node: n.name, remaining: n.drain!.remaining, never: n.drain!.never, reason: n.drain!.blocked! }))
    .sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0));
  return stuck.length > 0 ? { stuck_drains: stuck } : {};
}

/** Nodes per agent release and protocol, most first (then by version): two entries or more is mixed versions. */
export function agentVersions(t: Pick<Tables, "nodes">): NonNullable<Summary["agent_versions"]> {
  const by = new Map<string, { version: string; protocol: number; nodes: number }>();
  for (const n of t.nodes) {
    const protocol = n.agent_protocol ?? UNSTATED_PROTOCOL;
    const key = `${n.agent_version}\u0000${protocol}`;
    const e = by.get(key);
    if (e) e.nodes++;
    else by.set(key, { version: n.agent_version, protocol, nodes: 1 });
  }
  return [...by.values()].sort((a, b) => b.nodes - a.nodes || b.protocol - a.protocol || (a.version < b.version ? 1 : a.version > b.version ? -1 : 0));
}

export function summarize(t: Tables, extras: SummaryExtras): Summary {
  const nodes: Summary["nodes"] = { total: t.nodes.length, ready: 0, cordoned: 0, draining: 0, unreachable: 0 };
  const byClass = new Map<string, ClassUse>();
  const byFabric = new Map<string, FabricUse>();
  const modelsByFabric = new Map<string, Set<string>>();
  const byReason = new Map<string, UnhealthyGpus>();
  const discovery: DiscoveryProblem[] = [];

  for (const n of t.nodes) {
    // Pending appears only when a node waits for approval, so the seed's shape stays the same.
    nodes[n.state] = (nodes[n.state] ?? 0) + 1;
    if (n.discovery_error !== null) discovery.push({ node: n.name, gpus: n.gpus.length, error: n.discovery_error, ...(n.gpus_last_known ? { last_known: true as const } : {}) });
    // Per device, not per card: a card in MIG mode contributes its instances, each in its
    // own class, and whole cards beside them keep theirs.
    for (const g of n.gpus) {
      let u = byClass.get(g.class);
      if (!u) byClass.set(g.class, (u = { class: g.class, total: 0, used: 0, unhealthy: 0 }));
      u.total++;
      // Unhealthy is neither used nor free, even under a replica: counting it as either is
      // how a cluster looks like it has room, or load, that it does not.
      if (!g.healthy) {
        u.unhealthy++;
        const reason = g.reason ?? "no reason given";
        let r = byReason.get(reason);
        if (!r) byReason.set(reason, (r = { reason, gpus: 0, nodes: [] }));
        r.gpus++;
        if (r.nodes.length < REASON_NODES && r.nodes.at(-1) !== n.name) r.nodes.push(n.name);
      } else if (g.in_use_by !== null) u.used++;
    }
    // A whole free node is what a multi-node replica needs; one busy or broken card spoils it.
    const wholeFree = n.state === "ready" && n.gpu_total > 0 && n.gpu_free === n.gpu_total;
    for (const f of n.fabrics) {
      let fu = byFabric.get(f);
      if (!fu) {
        byFabric.set(f, (fu = { fabric: f, nodes: 0, nodes_with_weights: 0, models_present: 0, largest_free_block: 0 }));
        modelsByFabric.set(f, new Set());
      }
      fu.nodes++;
      if (n.models.length > 0) fu.nodes_with_weights++;
      if (wholeFree) fu.largest_free_block++;
      // Distinct models per fabric: weights in one fabric are not weights in another.
      const set = modelsByFabric.get(f)!;
      for (const m of n.models) set.add(m);
    }
  }
  for (const [f, fu] of byFabric) fu.models_present = modelsByFabric.get(f)!.size;

  const replicas = { ready: 0, starting: 0, draining: 0, failed: 0 };
  const idle: IdleReplica[] = [];
  for (const r of t.replicas) {
    switch (r.state) {
      case "ready":
        replicas.ready++;
        break;
      case "draining":
        replicas.draining++;
        break;
      case "failed":
        replicas.failed++;
        break;
      default:
        replicas.starting++;
    }
    // Negative idle_seconds is unknown, and unknown is never idle: a router that just
    // restarted would otherwise nominate the whole fleet for eviction.
    if (r.state === "ready" && r.idle_seconds >= IDLE_THRESHOLD_SECONDS) {
      let gpus = 0;
      for (const sh of r.shards) gpus += sh.gpus.length;
      idle.push({ id: r.id, model: r.model, idle_seconds: r.idle_seconds, gpus });
    }
  }
  idle.sort((a, b) => b.idle_seconds - a.idle_seconds || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));

  const models = { total: 0, satisfied: 0, short: 0 };
  const parked: ParkedModel[] = [];
  const unplaceable: string[] = [];
  const unplaceableReasons: Record<string, string> = {};
  for (const m of t.models) {
    models.total++;
    if (m.parked) parked.push({ model: m.name, failures: Math.max(m.failures, m.crashes), reason: m.reason ?? "" });
    if (m.ready >= m.desired && !m.parked) {
      models.satisfied++;
      continue;
    }
    models.short++;
    if (m.unplaceable) {
      unplaceable.push(m.name);
      if (m.reason !== null) unplaceableReasons[m.name] = m.reason;
    }
  }
  unplaceable.sort();
  parked.sort((a, b) => (a.model < b.model ? -1 : 1));

  const s: Summary = {
    version: extras.version,
    nodes,
    node_names: nodeNames(t),
    gpus: [...byClass.values()].sort(byName),
    fabrics: [...byFabric.values()].sort(byName),
    replicas,
    models,
    unplaceable,
    unplaceable_reasons: unplaceableReasons,
    parked,
    idle_replicas: idle,
    evictions: extras.evictions ?? [],
    store: extras.store ?? [],
    control_planes: extras.controlPlanes ?? {},
    unhealthy_gpus: [...byReason.values()].sort((a, b) => b.gpus - a.gpus || (a.reason < b.reason ? -1 : 1)),
    gpu_discovery: discovery.sort((a, b) => (a.node < b.node ? -1 : a.node > b.node ? 1 : 0)),
    ...stuckDrains(t),
    agent_versions: agentVersions(t),
  };
  if (extras.storeError) s.store_error = extras.storeError;
  return s;
}
