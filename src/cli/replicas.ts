// `llmgw replicas [--model NAME]`: every replica with where it runs and how long it has gone
// unasked-for ("-" when the router has never reported it: unknown is not idle).

import type { ReplicaView } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { WATCH_FLAGS, runWatched, watchSettings } from "./watch";
import { safeDeep } from "../lib/text";
import { human, oneLine } from "../lib/format";
import { LIST_CELL_MAX, type Style, detectStyle, listCell, paint, table } from "./render";

/** "gpu-01:0,1 gpu-02:0,1": each shard's node and GPUs, within max characters (a table cell's by default). */
export function placementText(r: ReplicaView, max = LIST_CELL_MAX): string {
  return listCell(r.shards.map((s) => `${s.node}:${s.gpus.join(",")}`), max, " ");
}

export function renderReplicas(list: ReplicaView[], style: Style, wide: boolean): string {
  // Errors are engines' stderr; ids and endpoints are what nodes reported.
  const replicas = safeDeep(list);
  if (replicas.length === 0) return "No replicas.\n";
  const headers = ["ID", "MODEL", "PROFILE", "STATE", "GPUS", "IDLE", "FAILURES"];
  if (wide) headers.push("ENDPOINT", "ERROR");
  const rows = replicas.map((r) => {
    const color = r.state === "ready" ? "green" : r.state === "failed" ? "red" : "yellow";
    const row = [r.id, r.model, r.profile, paint(style, color, r.state), placementText(r), human(r.idle_seconds), String(r.failures)];
    if (wide) row.push(r.endpoint ?? "-", r.error ? oneLine(r.error, 80) : "-");
    return row;
  });
  return table(headers, rows, { right: [5, 6] }) + "\n";
}

export const command: Command = {
  name: "replicas",
  summary: "List replicas: model, state, GPUs, and how long each has gone unasked-for.",
  usage: "llmgw replicas [--model NAME] [-o table|wide|json]",
  flags: { model: { kind: "string", short: "m", value: "NAME", complete: "models", help: "only this model (name or alias)" }, ...OUTPUT_FLAG, ...WATCH_FLAGS, ...CLIENT_FLAGS },
  details: "IDLE is '-' when the router has not reported the replica yet (unknown is never idle).",
  examples: ["llmgw replicas", "llmgw replicas --model llama-3.1-8b -o wide"],
  async run({ flags }) {
    const format = outputFormat(flags);
    const client = resolveClient(flags);
    const q = flags.model ? `?model=${encodeURIComponent(flags.model as string)}` : "";
    const w = watchSettings(flags, format);
    await runWatched(async () => {
      const list = await client.get<ReplicaView[]>(`/api/v1/replicas${q}`);
      return format === "json" ? `${JSON.stringify(list, null, 2)}\n` : renderReplicas(list, detectStyle(), format === "wide");
    }, { ...w, title: "replicas" });
  },
};
