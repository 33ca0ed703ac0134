// The fleet as Prometheus gauges, in the text exposition format: nodes by state, GPUs by class
// and use, each model's replicas desired and ready, whether it is unplaceable or parked, and
// how long each replica has gone unused where that is known. A pure function of the tables (the
// same ones `status`, `nodes`, `models` and `replicas` show); the head node hands its text to
// the router, which serves it on its /metrics beside its own series, so one scrape target has
// everything.

import type { NodeState, Tables } from "../protocol/views";
import { runPaced, runSteps } from "../lib/steps";

/** Every state a node can be in, in the order they are listed (each is exported, 0 included). */
const NODE_STATES: readonly NodeState[] = ["ready", "cordoned", "draining", "unreachable", "pending"];
/** Every GPU is exactly one of these. */
export const GPU_STATES = ["used", "free", "unhealthy"] as const;

/** The fleet series' names, as exported. */
export const FLEET_METRICS = [
  "llmgw_control_plane_leading",
  "llmgw_nodes",
  "llmgw_gpus",
  "llmgw_model_replicas_desired",
  "llmgw_model_replicas_ready",
  "llmgw_model_unplaceable",
  "llmgw_model_parked",
  "llmgw_replica_idle_seconds",
] as const;

/** A label value as the exposition format writes it. */
function esc(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function labels(pairs: [string, string][]): string {
  return pairs.length === 0 ? "" : `{${pairs.map(([k, v]) => `${k}="${esc(v)}"`).join(",")}}`;
}

class Out {
  readonly lines: string[] = [];
  gauge(name: string, help: string, samples: Iterable<[[string, string][], number]>): void {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`);
    for (const [l, v] of samples) this.lines.push(`${name}${labels(l)} ${v}`);
  }
}

const byName = <T extends { name: string }>(xs: readonly T[]): T[] => [...xs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));

/**
 * The fleet gauges' text. A control plane that stands by (several on one store) exports only
 * `llmgw_control_plane_leading 0`: the leader exports the fleet, so a sum over every scrape
 * target counts each node once, and the fleet is never shown twice.
 */
export function fleetMetrics(t: Tables, o: { leading: boolean }): string {
  return runSteps(fleetMetricSteps(t, o));
}

/**
 * The same text, paced: `pause` runs between the metric families (at a thousand models and a
 * few thousand nodes the whole is milliseconds of string building), so a busy head node answers
 * heartbeats in between.
 */
export function fleetMetricsPaced(t: Tables, o: { leading: boolean }, pause: () => Promise<void>): Promise<string> {
  return runPaced(fleetMetricSteps(t, o), pause);
}

function* fleetMetricSteps(t: Tables, o: { leading: boolean }): Generator<void, string> {
  const out = new Out();
  out.gauge("llmgw_control_plane_leading", "1 when this head node's control plane leads (and exports the fleet), 0 when it stands by.", [[[], o.leading ? 1 : 0]]);
  if (!o.leading) return out.lines.join("\n") + "\n";

  const nodes = new Map<string, number>(NODE_STATES.map((s) => [s, 0]));
  const gpus = new Map<string, { used: number; free: number; unhealthy: number }>();
  for (const n of t.nodes) {
    nodes.set(n.state, (nodes.get(n.state) ?? 0) + 1);
    for (const g of n.gpus) {
      let c = gpus.get(g.class);
      if (!c) gpus.set(g.class, (c = { used: 0, free: 0, unhealthy: 0 }));
      // As the summary counts them: unhealthy is neither used nor free, even under a replica.
      if (!g.healthy) c.unhealthy++;
      else if (g.in_use_by !== null) c.used++;
      else c.free++;
    }
  }
  out.gauge("llmgw_nodes", "Nodes by state (as `llmgw nodes` shows them).", [...nodes].map(([state, v]) => [[["state", state]], v]));
  const classes = [...gpus.keys()].sort();
  out.gauge(
    "llmgw_gpus",
    "GPUs (MIG instances counted each) by class and state: used by a replica, free, or unhealthy.",
    classes.flatMap((cls) => GPU_STATES.map((state) => [[["class", cls], ["state", state]], gpus.get(cls)![state]] as [[string, string][], number])),
  );
  yield;
  const models = byName(t.models);
  const per = (name: string, help: string, value: (m: Tables["models"][number]) => number) => out.gauge(name, help, models.map((m) => [[["model", m.name]], value(m)]));
  per("llmgw_model_replicas_desired", "Replicas the control plane wants of the model now.", (m) => m.desired);
  per("llmgw_model_replicas_ready", "Replicas of the model ready to serve.", (m) => m.ready);
  yield;
  per("llmgw_model_unplaceable", "1 when the model's wanted replicas cannot be placed (not now, or never on this fleet), else 0.", (m) => (m.unplaceable ? 1 : 0));
  per("llmgw_model_parked", "1 when the model is parked after failing every start or crashing again and again soon after ready (`llmgw models unpark` retries it), else 0.", (m) => (m.parked ? 1 : 0));
  yield;
  // Unknown is not idle: a replica whose last request the routers cannot vouch for has no sample.
  const idle = [...t.replicas].filter((r) => r.idle_seconds >= 0).sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  out.gauge(
    "llmgw_replica_idle_seconds",
    "Seconds since the router last sent the replica a request; only replicas whose idleness is known.",
    idle.map((r) => [[["replica", r.id], ["model", r.model]], r.idle_seconds]),
  );
  return out.lines.join("\n") + "\n";
}
