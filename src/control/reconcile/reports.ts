// What one heartbeat changes: not a reconcile step (it runs per heartbeat, not per tick) but the
// same kind of pure function from a snapshot to a plan. The plan holds the heartbeat's news first
// (news.ts: registered, parked models tried again, reachable again), then its replica reports'
// verdicts, decided on the model state as the news leaves it.

import { ENGINE_ERROR_MAX, oneLine } from "../../lib/format";
import type { ReplicaReport } from "../../protocol/heartbeat";
import { type Stall, deafTime } from "../load";
import { observedFrom } from "../views";
import type { ReconcileConfig } from "./config";
import { crashNote, recordCrash } from "./crashes";
import { causeOf, failureText } from "./engine-failure";
import { recordFailure } from "./failures";
import { type NodeNews, UNPARKED, newsPlan } from "./news";
import type { Plan } from "./plan";
import type { Snapshot } from "../types";
import { FETCHING_NOTE, FETCHING_SLIDE_MS, fetchingNote } from "../weights-progress";

export interface ReportsInput {
  snapshot: Pick<Snapshot, "replicas" | "modelState">;
  node: string;
  reports: readonly ReplicaReport[];
  now: number;
  config: ReconcileConfig;
  watchedSince?: number;
  /** When the head node was not listening (load.ts): the report grace discounts it. */
  deaf?: readonly Stall[];
  /** What the heartbeat's arrival itself means (news.ts). */
  news?: NodeNews;
}

/**
 * The leader's "ready" makes a replica ready; any shard's "failed" fails it; a replica the node
 * should run but does not report, once past the grace period, is lost with the node's word for it.
 */
export function processReports({ snapshot, node, reports, now, config: cfg, watchedSince = Number.NEGATIVE_INFINITY, deaf = [], news }: ReportsInput): Plan {
  const plan = newsPlan(node, news ?? {});
  const byId = new Map(reports.map((r) => [r.id, r]));
  const mstate = new Map(snapshot.modelState.map((s) => [s.model, s]));
  // The reports are judged on the models as the news leaves them (a model tried again starts its count afresh).
  for (const m of news?.unpark?.models ?? []) {
    const st = mstate.get(m);
    if (st) mstate.set(m, { ...st, ...UNPARKED });
  }
  for (const r of snapshot.replicas) {
    if (!r.shards.some((s) => s.node === node)) continue;
    const rep = byId.get(r.id);
    const leader = r.shards[0]!.node === node;
    /**
     * `said` is what the model's reason and the event say; the replica keeps `error` whole. An
     * engine that ran says its cause once and where its log is (failureText).
     */
    const fail = (error: string, crashed = false, said = oneLine(error, ENGINE_ERROR_MAX)) => {
      plan.update.push({ id: r.id, patch: { state: "failed", error, failures: r.failures + 1 } });
      // A crash after ready counts towards the model's crash loop; a failed start towards its failures.
      let note = "";
      if (crashed) note = crashNote(recordCrash(plan, r, mstate.get(r.model), said, now, cfg), cfg);
      else recordFailure(plan, r.model, mstate.get(r.model), said, now, cfg);
      plan.events.push({ kind: "replica.failed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} failed on ${node}: ${said}${note}` });
    };
    /** The engine's own end, as its agent reported it. */
    const engineFailed = (crashed: boolean) =>
      rep?.error ? fail(causeOf(rep.error), crashed, failureText(rep.error, r.id)) : fail(`engine failed on ${node}`, crashed);
    switch (r.state) {
      case "starting":
        // Failed while fetching its weights (a file failed its checksum from every source): no engine ran, no log to point at.
        if (rep?.state === "failed" && rep.fetch !== undefined && rep.error) fail(rep.error);
        else if (rep?.state === "failed") engineFailed(false);
        else if (rep?.state === "fetching") {
          // Waiting for its weights: its note says how far, and its start clock moves on (weights-progress.ts).
          const note = rep.fetch !== undefined ? fetchingNote(rep.fetch) : FETCHING_NOTE;
          const slide = now - r.createdAt >= FETCHING_SLIDE_MS;
          if (note !== r.error || slide) plan.update.push({ id: r.id, patch: { error: note, ...(slide ? { createdAt: now } : {}) } });
        }
        else if (rep?.state === "ready" && leader) {
          plan.update.push({ id: r.id, patch: { state: "ready", readyAt: now, error: null } });
          plan.events.push({ kind: "replica.ready", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} ready at ${r.endpoint ?? "?"}` });
          const st = mstate.get(r.model);
          if (st && st.failures > 0) {
            // A crash loop's last crash stays: the backoff and the window still count from it.
            const pending = plan.modelState.get(r.model) ?? {};
            const keep = (pending.crashes ?? st.crashes) > 0 || pending.lastFailureAt !== undefined;
            plan.modelState.set(r.model, { ...pending, failures: 0, ...(keep ? {} : { lastFailureAt: null, reason: st.parked ? st.reason : null }) });
          }
        } else if ((!rep || rep.state === "stopped") && now - placedAt(r.createdAt, now, watchedSince, deaf) > cfg.reportGraceMs)
          fail(`the agent on ${node} does not run it (${rep ? "stopped" : "not reported"} ${Math.round((now - r.createdAt) / 1000)}s after placement)`);
        break;
      case "ready":
        // Only the engine's own end is a crash. One the agent stopped or no longer runs (an agent
        // restarted without it) says nothing about the engine: a failure, which the next ready clears.
        if (rep?.state === "failed") engineFailed(true);
        else if (!rep || rep.state === "stopped") fail(rep?.error ?? `engine on ${node} ${rep ? "stopped" : "is no longer running"}`);
        break;
      case "draining":
        if (!rep || rep.state === "stopped" || rep.state === "failed") {
          plan.remove.push(r.id);
          plan.events.push({ kind: "replica.stopped", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} stopped on ${node}` });
        }
        break;
      case "failed":
        break;
    }
  }
  return plan;
}

/** When a replica's report grace started, moved later by the time the head node was deaf since. */
function placedAt(createdAt: number, now: number, watchedSince: number, deaf: readonly Stall[]): number {
  const from = observedFrom(createdAt, now, watchedSince);
  return deaf.length === 0 ? from : from + deafTime(deaf, from, now);
}
