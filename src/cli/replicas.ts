// `llmgw replicas [--model NAME]`: every replica with where it runs and how long it has gone
// unasked-for ("-" when the router has never reported it: unknown is not idle).

import type { ReplicaView } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { WATCH_FLAGS, runWatched, watchSettings } from "./watch";
import { safeDeep } from "../lib/text";
import { human, oneLine } from "../lib/format";
import { type Cell, LIST_CELL_MAX, type Style, detectStyle, listCell, paint, table, terminalWidth } from "./render";

/**
 * "gpu-01:0,1 gpu-02:0,1": each shard's node and GPUs. A failed replica's process is gone and its
 * cards went back to the pool (another replica may hold them now): "released gpu-01:0".
 */
function placementItems(r: ReplicaView): string[] {
  const shards = r.shards.map((s) => `${s.node}:${s.gpus.join(",")}`);
  return r.state === "failed" ? ["released", ...shards] : shards;
}

/** The placement within max characters (a table cell's by default). */
export function placementText(r: ReplicaView, max = LIST_CELL_MAX): string {
  return listCell(placementItems(r), max, " ");
}

/** The placement as a table cell that narrows to fit. */
function placementCell(r: ReplicaView): Cell {
  return { items: placementItems(r), sep: " " };
}

/** The replicas table, fit to `width` columns (the terminal's); with `wide` its errors whole. */
export function renderReplicas(list: ReplicaView[], style: Style, wide: boolean, width = Number.POSITIVE_INFINITY): string {
  // Errors are engines' stderr; ids and endpoints are what nodes reported.
  const replicas = safeDeep(list);
  if (replicas.length === 0) return "No replicas.\n";
  const headers = ["ID", "MODEL", "PROFILE", "STATE", "GPUS", "IDLE", "FAILURES"];
  if (wide) headers.push("ENDPOINT", "ERROR");
  const rows = replicas.map((r) => {
    const color = r.state === "ready" ? "green" : r.state === "failed" ? "red" : "yellow";
    const row: Cell[] = [r.id, r.model, r.profile, paint(style, color, r.state), placementCell(r), human(r.idle_seconds), String(r.failures)];
    if (wide) row.push(r.endpoint ?? "-", r.error ? oneLine(r.error, Number.POSITIVE_INFINITY) : "-");
    return row;
  });
  return table(headers, rows, { right: [5, 6], width: wide ? Number.POSITIVE_INFINITY : width }) + "\n";
}

export const command: Command = {
  name: "replicas",
  summary: "List replicas: model, state, GPUs, and how long each has gone unasked-for.",
  usage: "llmgw replicas [--model NAME] [-o table|wide|json]",
  flags: { model: { kind: "string", short: "m", value: "NAME", complete: "models", help: "only this model (name or alias)" }, ...OUTPUT_FLAG, ...WATCH_FLAGS, ...CLIENT_FLAGS },
  details:
    "IDLE is '-' when the router has not reported the replica yet (unknown is never idle). A failed replica's GPUS say `released`: its cards went back to the pool, and another replica may hold them now. The table fits the terminal's width (COLUMNS, else the terminal's, else 80 when piped); -o wide adds each replica's endpoint and error, whole.",
  examples: ["llmgw replicas", "llmgw replicas --model llama-3.1-8b -o wide"],
  async run({ flags }) {
    const format = outputFormat(flags);
    const client = resolveClient(flags);
    const q = flags.model ? `?model=${encodeURIComponent(flags.model as string)}` : "";
    const w = watchSettings(flags, format);
    await runWatched(async () => {
      const list = await client.get<ReplicaView[]>(`/api/v1/replicas${q}`);
      return format === "json" ? `${JSON.stringify(list, null, 2)}\n` : renderReplicas(list, detectStyle(), format === "wide", terminalWidth());
    }, { ...w, title: "replicas" });
  },
};
