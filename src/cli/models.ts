// `llmgw models`: the catalog with what each model has against what it wants, and why not.

import { UsageError } from "../config/flags";
import type { ModelView } from "../protocol/views";
import { CLIENT_FLAGS, OUTPUT_FLAG, outputFormat, resolveClient } from "./client";
import type { Command } from "./command";
import { WATCH_FLAGS, runWatched, watchSettings } from "./watch";
import { safeDeep, safeText } from "../lib/text";
import { oneLine } from "../lib/format";
import { type Cell, type Style, detectStyle, paint, table, terminalWidth } from "./render";

export function modelStatus(m: ModelView): "parked" | "unplaceable" | "short" | "ok" {
  if (m.parked) return "parked";
  if (m.unplaceable) return "unplaceable";
  return m.ready < m.desired ? "short" : "ok";
}

/**
 * The models table; its reasons cut to fit `width` columns (the terminal's), whole with `wide`.
 * A model being rolled with no other reason says how far the roll has got, or on a line of its own (`single`).
 */
export function renderModels(list: ModelView[], style: Style, wide: boolean, width = Number.POSITIVE_INFINITY, single = false): string {
  // Reasons quote engines' errors; names and classes come from catalog files.
  const models = safeDeep(list);
  if (models.length === 0) return "No models in the catalog. Add some with `llmgw apply -f catalog.yaml`.\n";
  const headers = ["NAME", "READY", "MIN", "MAX", "ON DEMAND", "STATUS", "REASON"];
  // CATALOG REV: the catalog's count of the model's changes, not the weights' Hugging Face revision.
  if (wide) headers.splice(6, 0, "ALIASES", "TOTAL", "FAILURES", "CRASHES", "CATALOG REV");
  const rows = models.map((m) => {
    const st = modelStatus(m);
    const color = st === "ok" ? "green" : st === "short" ? "yellow" : "red";
    const row: Cell[] = [m.name, `${m.ready}/${m.desired}`, String(m.min), String(m.max), m.on_demand ? "yes" : "no", paint(style, color, st)];
    // An older server sends no crashes.
    if (wide) row.push({ items: m.aliases }, String(m.total), String(m.failures), String(m.crashes ?? 0), String(m.revision));
    const reason = m.reason ?? (m.rollout && !single ? `rollout: ${m.rollout.text}` : null);
    row.push(reason ? { text: oneLine(reason, Number.POSITIVE_INFINITY) } : "-");
    return row;
  });
  return table(headers, rows, { right: [1, 2, 3], width: wide ? Number.POSITIVE_INFINITY : width }) + "\n";
}

export const command: Command = {
  name: "models",
  summary: "List the catalog's models: ready against desired, parked or unplaceable, and why.",
  usage: "llmgw models [NAME] [-o table|wide|json]\n  llmgw models unpark NAME\n  llmgw models restart NAME\n  llmgw models delete NAME",
  flags: { ...OUTPUT_FLAG, ...WATCH_FLAGS, ...CLIENT_FLAGS },
  details:
    "`unpark` clears a parked model's failures so it is tried again (a catalog change or a new node does too). `restart` replaces the model's replicas one at a time, as a catalog change to their args, env, revision or profile does: a new replica becomes ready before an old one stops, and an old one gets no new requests and stops once its requests in flight finish (or after serve's --drain-timeout); for after an engine upgrade on the nodes. `models NAME` shows the roll's progress. `delete` removes a model from the catalog: its replicas are stopped and their GPUs freed; its aliases go with it. The table fits the terminal's width (COLUMNS, else the terminal's, else 80 when piped), a long reason cut with \"…\"; -o wide shows every reason whole, with each model's aliases, counts and catalog revision.",
  examples: ["llmgw models", "llmgw models -o wide", "llmgw models llama-3.1-8b -o json", "llmgw models unpark llama-3.1-8b", "llmgw models restart llama-3.1-8b", "llmgw models delete qwen2.5-7b"],
  async run({ flags, positionals }) {
    const format = outputFormat(flags);
    const client = resolveClient(flags);
    if (positionals[0] === "unpark" || positionals[0] === "restart" || positionals[0] === "delete") {
      const verb = positionals[0];
      if (positionals.length !== 2) throw new UsageError(`models ${verb} takes exactly one model name`);
      const path = `/api/v1/models/${encodeURIComponent(positionals[1]!)}`;
      const res = verb === "delete" ? await client.send<{ message: string }>("DELETE", path) : await client.send<{ message: string }>("POST", `${path}/${verb}`);
      if (format === "json") process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
      else process.stdout.write(`${safeText(res.message)}\n`);
      return;
    }
    const style = detectStyle();
    if (positionals.length > 0) {
      const m = await client.get<ModelView & { spec: unknown }>(`/api/v1/models/${encodeURIComponent(positionals[0]!)}`);
      process.stdout.write(format === "json" ? `${JSON.stringify(m, null, 2)}\n` : renderModels([m], style, true, Number.POSITIVE_INFINITY, true) + (m.rollout ? `rollout: ${safeText(m.rollout.text)}\n` : ""));
      return;
    }
    const w = watchSettings(flags, format);
    await runWatched(async () => {
      const models = await client.get<ModelView[]>("/api/v1/models");
      return format === "json" ? `${JSON.stringify(models, null, 2)}\n` : renderModels(models, style, format === "wide", terminalWidth());
    }, { ...w, title: "models" });
  },
};
