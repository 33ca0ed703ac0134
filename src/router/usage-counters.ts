// The usage ledger as Prometheus counters per team, key and model (llmgw_usage_*), on the
// router's /metrics. Nothing on the request path: the ledger already keeps a row per key and
// model; the rows it hands to the control plane are added here to running totals, and a scrape
// renders those totals plus the rows not yet handed over. Keys are shown by name, never by
// their secret or its digest.

import type { UsageRow } from "../protocol/routing";
import { labelText } from "./prom";

/** One team × key × model's totals since the router started. */
interface Totals {
  team: string;
  key: string;
  model: string;
  requests: number;
  prompt: number;
  completion: number;
  cached: number;
  errors4xx: number;
  errors5xx: number;
  refused: number;
  aborted: number;
  gpuSeconds: number;
}

const LABELS = ["team", "key", "model"];
const KIND = ["team", "key", "model", "kind"];

function add(into: Map<string, Totals>, r: UsageRow): void {
  const id = `${r.team}\u0000${r.key}\u0000${r.model}`;
  let t = into.get(id);
  if (t === undefined) {
    t = { team: r.team, key: r.key, model: r.model, requests: 0, prompt: 0, completion: 0, cached: 0, errors4xx: 0, errors5xx: 0, refused: 0, aborted: 0, gpuSeconds: 0 };
    into.set(id, t);
  }
  t.requests += r.requests;
  t.prompt += r.prompt_tokens;
  t.completion += r.completion_tokens;
  t.cached += r.cached_tokens;
  t.errors4xx += r.errors_4xx;
  t.errors5xx += r.errors_5xx;
  t.refused += r.refused;
  t.aborted += r.aborted;
  t.gpuSeconds += r.gpu_seconds;
}

export class UsageCounters {
  private readonly totals = new Map<string, Totals>();

  /** `pending`: the ledger's rows not yet handed over (Ledger.pending). */
  constructor(private readonly pending: () => Iterable<UsageRow>) {}

  /** Rows the ledger handed over (Ledger.take): from now on counted here. */
  taken(rows: readonly UsageRow[]): void {
    for (const r of rows) add(this.totals, r);
  }

  /** The counters' exposition text. */
  render(): string {
    const all = new Map<string, Totals>();
    for (const [id, t] of this.totals) all.set(id, { ...t });
    for (const r of this.pending()) add(all, r);
    const rows = [...all.values()];
    const out: string[] = [];
    const family = (name: string, help: string, lines: (t: Totals) => [string, number][]) => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
      for (const t of rows) for (const [labels, v] of lines(t)) out.push(`${name}${labels} ${v}`);
    };
    const of = (t: Totals) => labelText(LABELS, [t.team, t.key, t.model]);
    const kind = (t: Totals, k: string) => labelText(KIND, [t.team, t.key, t.model, k]);
    family("llmgw_usage_requests_total", "Requests per team, key (its name) and model, as the usage ledger counts them.", (t) => [[of(t), t.requests]]);
    family("llmgw_usage_tokens_total", "Tokens per team, key and model from the engines' usage: prompt, completion, and cached (the prompt's tokens served from the prefix cache).", (t) => [
      [kind(t, "prompt"), t.prompt],
      [kind(t, "completion"), t.completion],
      [kind(t, "cached"), t.cached],
    ]);
    family("llmgw_usage_errors_total", "Requests that failed per team, key and model: 4xx, 5xx, or refused by a key's or team's limits.", (t) => [
      [kind(t, "4xx"), t.errors4xx],
      [kind(t, "5xx"), t.errors5xx],
      [kind(t, "refused"), t.refused],
    ]);
    family("llmgw_usage_aborted_total", "Streams cut before their end (by the client or the engine) per team, key and model.", (t) => [[of(t), t.aborted]]);
    family("llmgw_usage_gpu_seconds_total", "GPU-seconds per team, key and model: each request's share of its replica's GPUs while it held a slot.", (t) => [[of(t), t.gpuSeconds]]);
    return `${out.join("\n")}\n`;
  }
}
