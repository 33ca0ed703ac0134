// `llmgw weights ls|pull|rm`: the weights llmgw fetches from the Hub, per model and revision on
// which nodes and fabrics (present, fetching how far, absent), seeding a model onto nodes ahead
// of need, and removing a model's weights from a node no replica of it runs on. Plain text
// (no colour, so NO_COLOR changes nothing).

import { UsageError } from "../config/flags";
import { bytes, human } from "../lib/format";
import { safeDeep, safeText } from "../lib/text";
import type { WeightsInFlight, WeightsNodeView, WeightsPullResult, WeightsRemoveResult, WeightsRowView } from "../protocol/weights-admin";
import { CLIENT_FLAGS, outputFlag, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { table, terminalWidth } from "./render";

const USAGE = ["llmgw weights ls [-o table|wide|json]", "  llmgw weights pull MODEL (--fabric F | --nodes a,b)", "  llmgw weights rm MODEL --node N"].join("\n");

export const command: Command = {
  name: "weights",
  summary: "List, pull ahead of need and remove the model weights llmgw fetches from the Hub.",
  usage: USAGE,
  flags: {
    fabric: { kind: "string", value: "FABRIC", help: "pull: onto every node of this fabric" },
    nodes: { kind: "string", value: "A,B", help: "pull: onto these nodes (comma-separated)" },
    node: { kind: "string", value: "NODE", help: "rm: the node to remove the weights from" },
    ...outputFlag(["table", "wide", "json"]),
    ...CLIENT_FLAGS,
  },
  details: [
    "ls shows, per model and revision, each node's copy: present, fetching (percent, rate, source), waiting or blocked (with why, in -o wide), partial, or absent; the fabrics where a node holds it whole, its size and when a replica last used it.",
    "pull fetches a model's pinned revision onto nodes with no replica of it, as for a replica (from the Hub once per fabric, then from peers). A pull is kept in the store until every node it names holds the revision, so a restarted head node (or the control plane that leads after it) carries it on.",
    "rm asks the node to remove the model's revision; MODEL may also be a repository ORG/NAME[@COMMIT], for weights no catalog model names any more. It is refused while a replica on that node uses them, and for weights llmgw did not fetch (an operator's files are left alone). The node removes them at its next heartbeat: `llmgw events` says when, or why not.",
  ].join("\n\n"),
  examples: ["llmgw weights ls", "llmgw weights pull llama-3.1-8b --fabric ib-a", "llmgw weights pull llama-3.1-8b --nodes h100-2,h100-3", "llmgw weights rm llama-3.1-8b --node h100-2"],
  async run({ flags, positionals }) {
    const [verb, model, ...extra] = positionals;
    if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
    const format = outputFormat(flags, ["table", "wide", "json"]);
    const has = (f: string) => flags[f] !== undefined;
    switch (verb) {
      case "ls":
      case "list": {
        if (model !== undefined) throw new UsageError(`unexpected argument "${model}"`);
        for (const f of ["fabric", "nodes", "node"]) if (has(f)) throw new UsageError(`--${f} is for pull or rm, not ls`);
        const rows = await resolveClient(flags).get<WeightsRowView[]>("/api/v1/weights");
        if (format === "json") process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
        else process.stdout.write(rows.length > 0 ? renderWeights(safeDeep(rows), format === "wide", terminalWidth()) : "No weights from the Hub: no model has a source hf://ORG/NAME and no node holds any.\n");
        return;
      }
      case "pull": {
        if (model === undefined) throw new UsageError("weights pull needs a MODEL");
        if (has("node")) throw new UsageError("--node is for rm; pull takes --fabric or --nodes");
        if (has("fabric") === has("nodes")) throw new UsageError("weights pull needs either --fabric F or --nodes a,b (one of the two)");
        const nodes = has("nodes") ? String(flags.nodes).split(",").map((s) => s.trim()).filter((s) => s !== "") : undefined;
        if (nodes !== undefined && nodes.length === 0) throw new UsageError("--nodes needs at least one node name");
        const res = await resolveClient(flags).send<WeightsPullResult>("POST", "/api/v1/weights/pull", { model, ...(nodes !== undefined ? { nodes } : { fabric: String(flags.fabric) }) });
        process.stdout.write(format === "json" ? `${JSON.stringify(res, null, 2)}\n` : `${safeText(res.message)}\n`);
        return;
      }
      case "rm":
      case "remove": {
        if (model === undefined) throw new UsageError("weights rm needs a MODEL");
        if (!has("node")) throw new UsageError("weights rm needs --node N: the node to remove the weights from");
        if (has("fabric") || has("nodes")) throw new UsageError("--fabric and --nodes are for pull; rm takes --node");
        const res = await resolveClient(flags).send<WeightsRemoveResult>("POST", "/api/v1/weights/remove", { model, node: String(flags.node) });
        process.stdout.write(format === "json" ? `${JSON.stringify(res, null, 2)}\n` : `${safeText(res.message)}\n`);
        return;
      }
      default:
        throw new UsageError(verb ? `unknown weights action "${verb}" (ls, pull or rm)` : "weights needs an action: ls, pull or rm");
    }
  },
};

/** One node's copy in a few words: "w1 fetching 42 % from hub". */
export function copyCell(v: WeightsNodeView, wide: boolean): string {
  const pct = v.percent !== null ? ` ${v.percent} %` : "";
  switch (v.state) {
    case "present":
      return `${v.node} present`;
    case "fetching": {
      const rate = v.rate !== null && v.rate > 0 ? ` ${bytes(v.rate)}/s` : "";
      const eta = wide && v.estimate_seconds !== null ? ` ~${human(v.estimate_seconds)}` : "";
      return `${v.node} fetching${pct}${rate}${v.from.length > 0 ? ` from ${v.from.join("+")}` : ""}${eta}`;
    }
    case "absent":
      return `${v.node} absent`;
    default:
      return `${v.node} ${v.state}${pct}${wide && v.reason !== null ? ` (${v.reason})` : ""}`;
  }
}

/** MODEL REVISION SIZE NODES FABRICS LAST-USED, fit to `width`; -o wide whole, with why a copy waits. */
export function renderWeights(rows: readonly WeightsRowView[], wide: boolean, width: number): string {
  const lines = table(
    ["MODEL", "REVISION", "SIZE", "FABRICS", "LAST USED", "NODES"],
    rows.map((r) => [
      r.models.length > 0 ? r.models.join(",") : "-",
      `${r.repo}@${r.revision.slice(0, 12)}`,
      r.size === null ? "?" : bytes(r.size),
      r.fabrics.length > 0 ? r.fabrics.join(",") : "-",
      r.last_used === null ? "never" : r.last_used.slice(0, 16).replace("T", " "),
      // Whole with -o wide; else a list that gives way to the terminal's width ("+N more").
      wide ? r.nodes.map((v) => copyCell(v, true)).join(", ") : { items: r.nodes.map((v) => copyCell(v, false)), sep: ", " },
    ]),
    { right: [2], width: wide ? Number.POSITIVE_INFINITY : width },
  );
  return `${lines}\n`;
}

/** The status line while weights move: "Weights   2 files in flight · 1.5 MiB of 8.0 MiB · 1.0 MiB/s · slowest: w2 org/x ~6s". */
export function weightsLine(w: WeightsInFlight | undefined): string | undefined {
  if (w === undefined) return undefined;
  const files = `${w.files} ${w.files === 1 ? "file" : "files"} in flight`;
  const slowest = w.slowest === null ? "" : ` · slowest: ${w.slowest.node} ${w.slowest.repo} ${w.slowest_seconds === null ? "stalled" : `~${human(w.slowest_seconds)}`}`;
  return `Weights   ${files} · ${bytes(w.bytes_done)} of ${bytes(w.bytes_total)} · ${bytes(w.rate)}/s${slowest}`;
}

/** Per node a model's copy: NODE STATE PROGRESS RATE FROM (describe model). */
export function weightsTable(nodes: readonly WeightsNodeView[]): string {
  return table(
    ["NODE", "STATE", "PROGRESS", "RATE", "FROM"],
    nodes.map((v) => [
      v.node,
      v.state,
      v.percent === null ? "-" : `${v.percent} %`,
      v.rate === null ? "-" : `${bytes(v.rate)}/s`,
      v.from.length > 0 ? v.from.join(",") : v.reason !== null ? { text: v.reason } : "-",
    ]),
    { right: [2], indent: "  " },
  );
}
