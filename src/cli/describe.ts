// `llmgw describe model|node|replica NAME`: one thing in full, the way an operator asks about it
// when something is off: what it is, where it runs, what happened to it lately, and why it is
// (not) what it should be. Built from the admin API's own answers (the model, the replica and
// node tables, the events about it), so it never says anything the other commands would not.

import { UsageError } from "../config/flags";
import { ago, human, oneLine } from "../lib/format";
import { safeDeep } from "../lib/text";
import type { EventView, ModelView, NodeView, ReplicaView } from "../protocol/views";
import type { WeightsNodeView } from "../protocol/weights-admin";
import { weightsTable } from "./weights";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { renderEvent } from "./events";
import { modelStatus } from "./models";
import { renderNode } from "./nodes";
import { placementText } from "./replicas";
import { type Style, detectStyle, paint, table } from "./render";

/** Events shown under a description. */
const RECENT_EVENTS = 10;

interface ProfileSpec {
  name: string;
  engine: string;
  gpu_class: string;
  gpus?: number;
  nodes?: number;
  priority?: number;
}
export type ModelDetail = ModelView & {
  weights?: WeightsNodeView[];
} & { spec?: { profiles?: ProfileSpec[]; pool?: string; placement?: string; idle_timeout?: string; revision?: string } };

function replicaRows(replicas: ReplicaView[], style: Style, now: number): string {
  if (replicas.length === 0) return "  none\n";
  const rows = replicas.map((r) => {
    const color = r.state === "ready" ? "green" : r.state === "failed" ? "red" : "yellow";
    return [r.id, r.model, r.profile, paint(style, color, r.state), placementText(r), human(r.idle_seconds), ago(r.created_at, now), r.error ? oneLine(r.error, 60) : "-"];
  });
  return table(["ID", "MODEL", "PROFILE", "STATE", "PLACEMENT", "IDLE", "AGE", "ERROR"], rows, { right: [5, 6], indent: "  " }) + "\n";
}

function eventLines(events: EventView[], style: Style, now: number): string {
  if (events.length === 0) return "  none\n";
  return events.map((e) => `  ${renderEvent(e, style, { now })}`).join("");
}

export function renderModelDetail(model: ModelDetail, replicas: ReplicaView[], events: EventView[], style: Style, now = Date.now()): string {
  const m = safeDeep(model);
  const st = modelStatus(m);
  const color = st === "ok" ? "green" : st === "short" ? "yellow" : "red";
  const lines = [
    `Name:       ${m.name}${m.aliases.length ? ` (aliases: ${m.aliases.join(", ")})` : ""}`,
    `Status:     ${paint(style, color, st)}: ${m.ready} of ${m.desired} wanted ready, ${m.total} in all (min ${m.min}, max ${m.max}${m.on_demand ? ", on demand" : ""})`,
    // The catalog's count of this model's changes, not the weights' Hugging Face revision (its own line).
    `Catalog:    revision ${m.revision}${m.spec?.pool ? `, pool ${m.spec.pool}` : ""}${m.spec?.placement ? `, ${m.spec.placement}` : ""}`,
  ];
  if (m.spec?.revision) lines.push(`Weights:    Hugging Face revision ${m.spec.revision}`);
  // An older server does not send crashes.
  const crashes = m.crashes ?? 0;
  const unpark = m.parked ? `, parked (\`llmgw models unpark ${m.name}\` tries again)` : "";
  if (m.failures > 0 || (m.parked && crashes <= m.failures)) lines.push(`Failures:   ${m.failures} failed starts in a row${crashes <= m.failures ? unpark : ""}`);
  if (crashes > 0) lines.push(`Crashes:    ${crashes} soon after becoming ready, in a row${crashes > m.failures ? unpark : ""}`);
  lines.push(`Reason:     ${m.reason ? oneLine(m.reason, 400) : "-"}`);
  if (m.rollout) lines.push(`Rollout:    ${oneLine(m.rollout.text, 400)}`);
  let out = lines.join("\n") + "\n";
  const profiles = m.spec?.profiles ?? [];
  if (profiles.length > 0) {
    out += "Profiles:\n";
    out += table(["NAME", "ENGINE", "GPU CLASS", "GPUS", "NODES", "PRIORITY"], profiles.map((p) => [p.name, p.engine, p.gpu_class, String(p.gpus ?? 1), String(p.nodes ?? 1), String(p.priority ?? 0)]), { right: [3, 4, 5], indent: "  " }) + "\n";
  }
  if (m.weights !== undefined && m.weights.length > 0) out += `Weights on nodes:\n${weightsTable(m.weights)}\n`;
  return out + `Replicas:\n${replicaRows(safeDeep(replicas), style, now)}Events:\n${eventLines(events, style, now)}`;
}

export function renderReplicaDetail(replica: ReplicaView, events: EventView[], style: Style, now = Date.now()): string {
  const r = safeDeep(replica);
  const color = r.state === "ready" ? "green" : r.state === "failed" ? "red" : "yellow";
  const lines = [
    `ID:         ${r.id}`,
    `Model:      ${r.model} (profile ${r.profile})`,
    `State:      ${paint(style, color, r.state)}${r.ready_at ? `, ready since ${ago(r.ready_at, now)}` : ""}`,
    `Placement:  ${placementText(r, Number.POSITIVE_INFINITY)}`,
    `Endpoint:   ${r.endpoint ?? "-"}`,
    `Created:    ${ago(r.created_at, now)} (${r.created_at})`,
    `Idle:       ${r.idle_seconds < 0 ? "unknown (the router has not reported it)" : human(r.idle_seconds)}`,
    `Failures:   ${r.failures}`,
    `Error:      ${r.error ? oneLine(r.error, 400) : "-"}`,
  ];
  return lines.join("\n") + `\nEvents:\n${eventLines(events, style, now)}`;
}

export function renderNodeDetail(node: NodeView, replicas: ReplicaView[], events: EventView[], style: Style, now = Date.now()): string {
  return renderNode(node, style, now) + `Replicas:\n${replicaRows(safeDeep(replicas), style, now)}Events:\n${eventLines(events, style, now)}`;
}

const KINDS = ["model", "node", "replica"] as const;

export const command: Command = {
  name: "describe",
  summary: "Describe one model, node or replica: what it is, where it runs, recent events and why it is not what it should be.",
  usage: "llmgw describe model|node|replica NAME [-o table|json]",
  flags: { ...outputFlag(["table", "json"]), ...CLIENT_FLAGS },
  details: `A model: its status and reason, profiles, replicas with placement, and its last ${RECENT_EVENTS} events. A node: its GPUs, the replicas on it and its events. A replica: its placement, endpoint, state, error and events.`,
  examples: ["llmgw describe model llama-3.1-8b", "llmgw describe node gpu-01", "llmgw describe replica r-1a2b3c4d", "llmgw describe model llama-3.1-8b -o json"],
  async run({ flags, positionals }) {
    const [kind, name, ...extra] = positionals;
    if (!kind || !(KINDS as readonly string[]).includes(kind)) throw new UsageError(`describe what? model, node or replica${kind ? `, not "${kind}"` : ""}`);
    if (!name || extra.length > 0) throw new UsageError(`describe ${kind} takes exactly one name`);
    const format = outputFormat(flags, ["table", "json"]);
    const client = resolveClient(flags);
    const style = detectStyle();
    const events = (subject: string) => client.get<EventView[]>(`/api/v1/events?limit=${RECENT_EVENTS}&subject=${encodeURIComponent(subject)}`);
    const print = (json: unknown, text: string): void => void process.stdout.write(format === "json" ? `${JSON.stringify(json, null, 2)}\n` : text);
    if (kind === "model") {
      const model = await client.get<ModelDetail>(`/api/v1/models/${encodeURIComponent(name)}`);
      const [replicas, evs] = await Promise.all([client.get<ReplicaView[]>(`/api/v1/replicas?model=${encodeURIComponent(model.name)}`), events(`model/${model.name}`)]);
      return print({ model, replicas, events: evs }, renderModelDetail(model, replicas, evs, style));
    }
    if (kind === "node") {
      const node = await client.get<NodeView>(`/api/v1/nodes/${encodeURIComponent(name)}`);
      const [all, evs] = await Promise.all([client.get<ReplicaView[]>("/api/v1/replicas"), events(`node/${node.name}`)]);
      const replicas = all.filter((r) => r.shards.some((s) => s.node === node.name));
      return print({ node, replicas, events: evs }, renderNodeDetail(node, replicas, evs, style));
    }
    const all = await client.get<ReplicaView[]>("/api/v1/replicas");
    const replica = all.find((r) => r.id === name);
    if (!replica) {
      throw Object.assign(new Error(`replica "${name}" not found (\`llmgw replicas\` lists them)`), { userFacing: true, exitCode: 1 });
    }
    const evs = await events(`replica/${replica.id}`);
    return print({ replica, events: evs }, renderReplicaDetail(replica, evs, style));
  },
};
