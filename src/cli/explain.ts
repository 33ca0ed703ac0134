// `llmgw explain MODEL`: why a model has (or has not) the replicas it wants, Nomad-style: per
// profile in priority order, how many nodes each rule ruled out and which, the nodes that fit,
// whether it fits now, not now or never, and what would make it fit. The server works it out
// (GET /api/v1/models/{name}/explain, src/control/explain.ts); this renders it.

import { UsageError } from "../config/flags";
import { safeDeep } from "../lib/text";
import type { Explanation, NodeOutcome, ProfileExplanation } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { type Paint, type Style, clip, detectStyle, paint, width } from "./render";

const LABEL: Record<NodeOutcome, string> = {
  class: "filtered by class",
  gpus: "filtered by GPU count",
  unreachable: "not ready: unreachable",
  pending: "not ready: pending",
  cordoned: "not ready: cordoned",
  draining: "not ready: draining",
  engine: "engine missing or too old",
  unhealthy: "unhealthy cards",
  disk: "no room for the weights",
  exhausted: "exhausted",
  fabric: "fabric too small",
  fits: "fit",
};

const STATUS: Record<Explanation["status"], [string, Paint]> = {
  running: ["running", "green"],
  fits: ["fits now", "green"],
  not_now: ["not now", "yellow"],
  never: ["never on this fleet", "red"],
  parked: ["parked", "red"],
};

const VERDICT: Record<ProfileExplanation["verdict"], [string, Paint]> = { fits: ["fits now", "green"], not_now: ["not now", "yellow"], never: ["never", "red"] };

/** Widest a node's detail is shown: what a node reports (its classes, an engine's error) is unbounded in older servers' answers. */
const DETAIL_MAX = 300;

const shard = (s: { node: string; gpus: readonly number[] }) => `${s.node} GPU ${s.gpus.join(",")}`;

function renderProfile(p: ProfileExplanation, style: Style): string {
  const [word, color] = VERDICT[p.verdict];
  const shape = `${p.engine}, ${p.gpus}× ${p.gpu_class}${p.nodes > 1 ? ` on each of ${p.nodes} nodes in one fabric` : ""}, priority ${p.priority}`;
  const lines = [`Profile ${paint(style, "bold", p.name)} (${shape}): ${paint(style, color, word)}`, `  ${p.line}`];
  const w = Math.max(...p.outcomes.map((o) => LABEL[o.outcome].length));
  for (const o of p.outcomes) {
    const label = `${LABEL[o.outcome].padEnd(w)}  ${String(o.count).padStart(3)}`;
    const tint = o.outcome === "fits" ? "green" : "gray";
    o.nodes.forEach((n, i) => lines.push(`    ${i === 0 ? paint(style, tint, label) : " ".repeat(width(label))}  ${n.name}: ${clip(n.detail, DETAIL_MAX)}`));
    if (o.count > o.nodes.length) lines.push(`    ${" ".repeat(width(label))}  … and ${o.count - o.nodes.length} more`);
  }
  if (p.would_place) lines.push(`  Would go to: ${p.would_place.map(shard).join(" + ")}`);
  else if (p.reason) lines.push(`  Reason: ${p.reason}`);
  if (p.weights_on.length > 0) lines.push(`  Weights on: ${p.weights_on.slice(0, 8).join(", ")}${p.weights_on.length > 8 ? `, and ${p.weights_on.length - 8} more` : ""}`);
  return lines.join("\n") + "\n";
}

export function renderExplanation(explanation: Explanation, style: Style): string {
  const e = safeDeep(explanation);
  const [word, color] = STATUS[e.status];
  const replicas = e.replicas.length === 0 ? "none" : e.replicas.map((r) => `${r.id} ${r.state} on ${r.shards.map(shard).join(" + ")}`).join("; ");
  let out = [
    `Model:     ${paint(style, "bold", e.model)}: ${paint(style, color, word)}`,
    `Summary:   ${e.summary}`,
    `Replicas:  ${e.desired} wanted, ${e.ready} ready${e.on_demand ? " (on demand)" : ""}: ${replicas}`,
  ].join("\n");
  out += "\n\n" + e.profiles.map((p) => renderProfile(p, style)).join("\n");
  const help = e.suggestions.filter((s) => s.kind !== "none");
  if (help.length > 0) out += `\nWhat would make it fit:\n${help.map((s) => `  - ${s.message}\n`).join("")}`;
  else out += `\n${e.suggestions[0]?.message ?? "nothing is needed"}\n`;
  return out;
}

export const command: Command = {
  name: "explain",
  summary: "Explain a model's placement: per profile, the nodes ruled out and why, and what would make it fit.",
  usage: "llmgw explain MODEL [-o table|json]",
  flags: { ...OUTPUT_FLAG, output: { ...OUTPUT_FLAG.output!, help: "table (default) or json", choices: ["table", "json"] }, ...CLIENT_FLAGS },
  details: `Per profile, in priority order: how many nodes were filtered by class, by GPU count, not ready (unreachable, pending, cordoned, draining), without the engine, with unhealthy cards, exhausted (their GPUs held: by which replicas), or outside a fabric with enough such nodes; the nodes that fit, and where a replica would go now. The model is "never" when no node or fabric of this fleet could host it even all free, "not now" when it could. Then what would make it fit: evicting named idle replicas (only known idle ones: a replica no router has reported is not idle), uncordoning or approving a node, waiting for an unreachable one. Nothing is changed.`,
  examples: ["llmgw explain llama-3.1-70b", "llmgw explain deepseek-v3 -o json"],
  async run({ flags, positionals }) {
    const [name, ...extra] = positionals;
    if (!name || extra.length > 0) throw new UsageError("explain takes exactly one model name (or alias)");
    const format = outputFormat(flags, ["table", "json"]);
    const client = resolveClient(flags);
    const e = await client.get<Explanation>(`/api/v1/models/${encodeURIComponent(name)}/explain`);
    process.stdout.write(format === "json" ? `${JSON.stringify(e, null, 2)}\n` : renderExplanation(e, detectStyle()));
  },
};
