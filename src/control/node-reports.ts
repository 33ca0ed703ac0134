// A node's heartbeat facts that the control plane keeps in memory (engines, discovery errors and
// GPU reasons, model revisions, log listener) as one document, so that with several control
// planes on one store a heartbeat that reached any of them reaches all: the receiver writes the
// document when it changed (the common unchanged heartbeat writes nothing), and the others load
// the rows whose time moved. This file holds the document's making and the bookkeeping of what
// was written and loaded; NodeMemory (node-memory.ts) keeps the maps.

import type { HeartbeatRequest } from "../protocol/heartbeat";
import { NodeReport } from "../protocol/node-report";
import type { NodeReportRow } from "./types";

export type { NodeReport };

/**
 * The document of one heartbeat, its fields in one order, so equal facts serialize equal. `kept`:
 * its GPUs are the node's last known ones, kept while discovery fails (gpu-health.ts).
 */
export function reportOf(hb: HeartbeatRequest, kept = false): NodeReport {
  const reasons: [number, string][] = [];
  for (const g of hb.gpus) if (!g.healthy && g.reason) reasons.push([g.index, g.reason]);
  return {
    ...(hb.engines !== undefined ? { engines: hb.engines } : {}),
    discovery_error: hb.discovery_error || null,
    gpu_reasons: reasons,
    ...(kept ? { gpus_kept: true } : {}),
    ...(hb.model_revisions !== undefined ? { model_revisions: hb.model_revisions } : {}),
    logs_port: hb.logs_port,
    logs_tls_cert: hb.logs_tls_cert || null,
  };
}

/** A row that did not parse: which node, and the first problem, named by its field. */
export interface BadReport {
  node: string;
  problem: string;
}

/** What this control plane last wrote or loaded per node, to write only changes and load only news. */
export class ReportLedger {
  /** node → the serialized document this control plane holds (written or loaded). */
  private readonly held = new Map<string, string>();
  /** node → the `at` of the row as last seen (written or loaded). */
  private readonly seenAt = new Map<string, number>();

  /** The serialized document when it differs from what is held (then it is to be written), else undefined. */
  toWrite(node: string, report: NodeReport): string | undefined {
    const json = JSON.stringify(report);
    return json === this.held.get(node) ? undefined : json;
  }

  /** The store took the write. */
  written(node: string, json: string, at: number): void {
    this.held.set(node, json);
    this.seenAt.set(node, at);
  }

  /**
   * The rows another writer changed since they were last seen (their `at` moved), parsed; a row
   * that does not parse is skipped (and reported once per `at`), and never held.
   */
  news(rows: readonly NodeReportRow[]): { fresh: { node: string; report: NodeReport }[]; bad: BadReport[] } {
    const fresh: { node: string; report: NodeReport }[] = [];
    const bad: BadReport[] = [];
    for (const row of rows) {
      if (this.seenAt.get(row.node) === row.at) continue;
      this.seenAt.set(row.node, row.at);
      if (row.report === this.held.get(row.node)) continue;
      const parsed = parseReport(row.report);
      if (!parsed.ok) {
        bad.push({ node: row.node, problem: parsed.problem });
        continue;
      }
      this.held.set(row.node, row.report);
      fresh.push({ node: row.node, report: parsed.report });
    }
    return { fresh, bad };
  }

  forget(node: string): void {
    this.held.delete(node);
    this.seenAt.delete(node);
  }
}

function parseReport(text: string): { ok: true; report: NodeReport } | { ok: false; problem: string } {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    return { ok: false, problem: `not JSON (${(e as Error).message})` };
  }
  const r = NodeReport.safeParse(json);
  if (r.success) return { ok: true, report: r.data };
  const issue = r.error.issues[0]!;
  return { ok: false, problem: `${issue.path.length > 0 ? issue.path.join(".") : "(document)"}: ${issue.message}` };
}
