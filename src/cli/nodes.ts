// `llmgw nodes [NAME]`: the node table, or one node's GPUs in detail.

import type { NodeView } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { WATCH_FLAGS, runWatched, watchSettings } from "./watch";
import { safeDeep } from "../lib/text";
import { NODE_TRUST_FLAGS, NODE_VERBS, NODES_DETAILS, runNodeVerb } from "./node-trust";
import { ago, oneLine, plural } from "../lib/format";
import { type Cell, type FlexCell, LIST_CELL_MAX, type Style, detectStyle, fitText, paint, table, terminalWidth } from "./render";

function stateText(style: Style, s: string): string {
  return paint(style, s === "ready" ? "green" : s === "unreachable" ? "red" : "yellow", s);
}

function classes(n: NodeView): FlexCell {
  const counts = new Map<string, number>();
  for (const g of n.gpus) counts.set(g.class, (counts.get(g.class) ?? 0) + 1);
  return { items: [...counts].map(([c, k]) => `${k}x${c}`) };
}

/**
 * The node table, fit to `width` columns (the terminal's), and below it each node's GPU problems
 * with their reasons (cut to the width; whole with `wide`). A list cell (classes, fabrics,
 * labels) stops at LIST_CELL_MAX even with `wide` and counts what it leaves out: one node
 * reporting 256 classes would pad every row to kilobytes; `nodes NAME` and -o json list all.
 */
export function renderNodes(list: NodeView[], style: Style, wide: boolean, now = Date.now(), width = Number.POSITIVE_INFINITY): string {
  // What a node reports (GPU names, classes, labels, versions) is its own word: sanitised.
  const nodes = safeDeep(list);
  if (nodes.length === 0) return "No nodes yet. Start `llmgw agent` on a GPU node (see `llmgw agent --help`).\n";
  const headers = ["NAME", "STATE", "GPUS FREE", "UNHEALTHY", "CLASSES", "FABRICS", "MODELS", "HEARTBEAT"];
  if (wide) headers.push("ADDRESS", "AGENT", "PROTOCOL", "LABELS");
  const W = wide ? Number.POSITIVE_INFINITY : width;
  const rows = nodes.map((n) => {
    const row: Cell[] = [
      n.name,
      stateText(style, n.state),
      `${n.gpu_free}/${n.gpu_total}`,
      n.gpu_unhealthy ? paint(style, "red", String(n.gpu_unhealthy)) : "0",
      classes(n),
      { items: n.fabrics },
      String(n.models.length),
      ago(n.last_heartbeat, now),
    ];
    if (wide) row.push(n.address, n.agent_version, n.agent_protocol === undefined ? "-" : String(n.agent_protocol), { items: Object.entries(n.labels).map(([k, v]) => `${k}=${v}`) });
    return row;
  });
  return table(headers, rows, { right: [2, 3, 6], width: W }) + "\n" + problems(nodes, style, W);
}

/**
 * A node's discovery error; beside GPUs kept from before it failed, the agent's "reports no GPUs"
 * gives way to what the head node does with them.
 */
function discoveryText(n: NodeView): string {
  if (!n.gpus_last_known) return n.discovery_error ?? "";
  return `its ${plural(n.gpus.length, "GPU")} last reported are kept, counted unhealthy until it answers again (or llmgw nodes delete ${n.name}): ${(n.discovery_error ?? "").replace(/: this node reports no GPUs$/, "")}`;
}

/** Shown per node at most, so a fleet of broken cards still fits a screen. */
const PROBLEMS_PER_NODE = 3;

/** Below the table: why a node reports no (or fewer) GPUs, and each unhealthy GPU's reason, within `width`. */
function problems(nodes: NodeView[], style: Style, width: number): string {
  const lines: string[] = [];
  const reason = (lead: string, text: string, color: "red" | "yellow") => `${lead}${paint(style, color, fitText(oneLine(text, Number.POSITIVE_INFINITY), lead.length, width))}`;
  for (const n of nodes) {
    // Older servers send neither field.
    if (n.discovery_error) lines.push(reason(`${n.name}: `, discoveryText(n), "red"));
    // Kept GPUs give the discovery error as their reason: said once, on the line above.
    const bad = n.gpus_last_known ? [] : n.gpus.filter((g) => !g.healthy && g.reason);
    for (const g of bad.slice(0, PROBLEMS_PER_NODE)) lines.push(reason(`${n.name}: GPU ${g.index} `, g.reason!, "yellow"));
    if (bad.length > PROBLEMS_PER_NODE) lines.push(`${n.name}: … and ${bad.length - PROBLEMS_PER_NODE} more unhealthy GPUs (llmgw nodes ${n.name})`);
  }
  return lines.length > 0 ? `\n${lines.join("\n")}\n` : "";
}

/** "vllm 0.10.1.1, sglang - (not installed: python3 not found), llama.cpp b6869": launch templates are chosen by these. */
export function engineList(engines: NonNullable<NodeView["engines"]>, style: Style): string {
  if (engines.length === 0) return "-";
  return safeDeep(engines)
    .map((e) => (e.version !== null ? `${e.engine} ${e.version}` : `${e.engine} -${e.error ? ` ${paint(style, "dim", `(${oneLine(e.error, 160)})`)}` : ""}`))
    .join(", ");
}

/** A draining node's progress: what is left on it, what holds it up, and each replica's reason. */
function drainLines(d: NonNullable<NodeView["drain"]>, style: Style): string[] {
  const head = d.blocked ? paint(style, d.never ? "red" : "yellow", `${d.never ? "can never finish" : "cannot finish now"}: ${oneLine(d.blocked, 400)}`) : "in progress";
  const lines = [`Drain:      ${plural(d.remaining, "replica")} left, ${head}`];
  for (const r of d.replicas) lines.push(`            ${r.id} ${r.model} ${r.state}: ${r.status}${r.reason ? ` (${oneLine(r.reason, 200)})` : ""}`);
  return lines;
}

export function renderNode(node: NodeView, style: Style, now = Date.now()): string {
  const n = safeDeep(node);
  const lines = [
    `Name:       ${n.name}`,
    `State:      ${stateText(style, n.state)}${n.admin_state !== "none" && n.state === "unreachable" ? ` (${n.admin_state})` : ""}`,
    `Address:    ${n.address}`,
    `Fabrics:    ${n.fabrics.join(", ") || "-"}`,
    `Labels:     ${Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(", ") || "-"}`,
    `Agent:      ${n.agent_version}${n.agent_protocol === undefined ? "" : ` (protocol ${n.agent_protocol})`}, last heartbeat ${ago(n.last_heartbeat, now)}`,
    `Weights:    ${n.models.join(", ") || "-"}`,
    `GPUs:       ${n.gpu_free} free of ${n.gpu_total}${n.gpu_unhealthy ? `, ${n.gpu_unhealthy} unhealthy` : ""}${n.gpu_memory_mib ? `, ${Math.round(n.gpu_memory_mib / 1024)}GiB memory` : ""}`,
  ];
  if (n.discovery_error) lines.push(`Discovery:  ${paint(style, "red", oneLine(discoveryText(n), 1024))}`);
  if (n.engines.length > 0) lines.push(`Engines:    ${engineList(n.engines, style)}`);
  if (n.drain) lines.push(...drainLines(n.drain, style));
  const reasons = n.gpus.some((g) => !g.healthy && g.reason);
  if (n.gpus.length > 0)
    lines.push(
      table(
        ["INDEX", "CLASS", "NAME", "MEMORY", "HEALTH", "IN USE BY", "UUID", ...(reasons ? ["REASON"] : [])],
        n.gpus.map((g) => [
          String(g.index),
          g.class,
          g.name,
          `${Math.round(g.memory_mib / 1024)}GiB`,
          g.healthy ? "ok" : paint(style, "red", "unhealthy"),
          g.in_use_by ?? "-",
          g.uuid,
          ...(reasons ? [g.healthy ? "" : oneLine(g.reason ?? "-", 160)] : []),
        ]),
        { right: [0, 3], indent: "  " },
      ),
    );
  return lines.join("\n") + "\n";
}

export const command: Command = {
  name: "nodes",
  summary: "List nodes with their state, GPUs and weights, or show one node.",
  usage: "llmgw nodes [NAME] [-o table|wide|json] | llmgw nodes delete|approve|allow-address NAME …",
  flags: { ...OUTPUT_FLAG, ...WATCH_FLAGS, ...NODE_TRUST_FLAGS, ...CLIENT_FLAGS },
  details: `The table fits the terminal's width (COLUMNS, else the terminal's, else 80 when piped): lists of classes and fabrics shorten ("+3 more"), GPU problems below it are cut with "…". -o wide adds address, agent and labels and cuts no reason; a list still stops at ${LIST_CELL_MAX} characters (all of it in \`llmgw nodes NAME\` and -o json).\n\n${NODES_DETAILS}`,
  examples: ["llmgw nodes", "llmgw nodes -o wide", "llmgw nodes gpu-01", "llmgw nodes delete gpu-07 --force", "llmgw nodes approve gpu-08", "llmgw nodes allow-address gpu-09 192.168.40.9", "llmgw nodes -o json | jq '.[] | select(.state != \"ready\")'"],
  async run({ flags, positionals }) {
    const verb = NODE_VERBS.find((v) => v === positionals[0]);
    if (verb) return runNodeVerb(verb, positionals.slice(1), flags);
    const format = outputFormat(flags);
    const client = resolveClient(flags);
    const style = detectStyle();
    if (positionals.length > 0) {
      const n = await client.get<NodeView>(`/api/v1/nodes/${encodeURIComponent(positionals[0]!)}`);
      process.stdout.write(format === "json" ? `${JSON.stringify(n, null, 2)}\n` : renderNode(n, style));
      return;
    }
    const w = watchSettings(flags, format);
    await runWatched(async () => {
      const nodes = await client.get<NodeView[]>("/api/v1/nodes");
      return format === "json" ? `${JSON.stringify(nodes, null, 2)}\n` : renderNodes(nodes, style, format === "wide", Date.now(), terminalWidth());
    }, { ...w, title: "nodes" });
  },
};
