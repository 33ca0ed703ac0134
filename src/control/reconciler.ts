// The reconciler: one reconcile step as a pure function. From a store snapshot, the router's
// last-used map and the time it decides what to change — replicas to place, fail, drain or
// forget, model state to record, nodes whose drain finished — and the events that explain it.
// The control loop applies the plan in one transaction; nothing here reads a clock or touches the
// store.
//
// The step is a list of named steps in the manner of Nomad's reconciler (reconcile/*.ts), each
// a pure function over the snapshot (ReconcileContext) that writes its part into one
// PlanBuilder, which also tells later steps what earlier ones decided about a replica. What
// reconcile/ may import: protocol types, src/lib, and control's pure modules (views, placement);
// never the router, the API, the store or a clock. The domain types come from types.ts.

import { contextOf, type ReconcileInput } from "./reconcile/context";
import { settleCrashes } from "./reconcile/crashes";
import { recordUse } from "./reconcile/demand";
import { decideModels, replicasByModel } from "./reconcile/desired";
import { finishDrains } from "./reconcile/drains";
import { retireLostAndOverdue } from "./reconcile/lost";
import { type Plan, PlanBuilder } from "./reconcile/plan";
import { byNeed, heldGpus, placeShort, placementNodes } from "./reconcile/placements";
import { assignPorts, portFullNodes, portsInUse, withPortNote } from "./reconcile/ports";
import { recordReasons } from "./reconcile/reasons";
import { releaseDrained, rollWithoutSurge } from "./reconcile/rollout";
import { makeRoom } from "./reconcile/room";
import { stopUncatalogued } from "./reconcile/uncatalogued";
import { runPaced, runSteps } from "../lib/steps";
import { observedFrom } from "./views";

export { observedFrom };
export { type ReconcileConfig, agentStartTimeout, serverStartDeadline, startMargin } from "./reconcile/config";
export type { ReconcileInput } from "./reconcile/context";
export { parkedAfter } from "./reconcile/crashes";
export { backoffDelay, inBackoff, recordFailure } from "./reconcile/failures";
export { type NewReplica, type Plan, type PlanEvent, emptyPlan, isEmpty } from "./reconcile/plan";
export { missingEngines } from "./reconcile/placements";
export { RENDEZVOUS_STRIDE, rendezvousBlocks, rendezvousPort } from "./reconcile/ports";
export { type ReportsInput, processReports } from "./reconcile/reports";

export function reconcile(input: ReconcileInput): Plan {
  return runSteps(reconcileSteps(input));
}

/**
 * The same step, paced: `pause` runs between the named steps, so a caller on a busy event loop
 * (the control loop's tick) lets waiting I/O in between them instead of holding it for the whole
 * step. The plan is the one reconcile() returns for the same input: the snapshot is a value.
 */
export function reconcilePaced(input: ReconcileInput, pause: () => Promise<void>): Promise<Plan> {
  return runPaced(reconcileSteps(input), pause);
}

/** The named steps in order; each `yield` is a point where a caller may pause. */
function* reconcileSteps(input: ReconcileInput): Generator<void, Plan> {
  const ctx = contextOf(input);
  const b = new PlanBuilder();
  yield;
  // What is gone: lost with their nodes, overdue starts, models no longer in the catalog; and
  // crash loops that a replica ready for the whole window has ended.
  retireLostAndOverdue(ctx, b);
  stopUncatalogued(ctx, b);
  settleCrashes(ctx, b);
  releaseDrained(ctx, b);
  const byModel = replicasByModel(ctx.snapshot.replicas, b);
  yield;
  // What each model wants against what it has.
  const mstate = recordUse(ctx, b);
  const { requests, satisfied } = decideModels(ctx, b, mstate, byModel);
  yield;
  // Placing what is short, over the GPUs as they are once the removals above are done.
  const held = heldGpus(ctx, b);
  const ports = portsInUse(ctx);
  yield;
  // The fleet as placement sees it costs O(GPUs): built only when something is to be placed.
  const portFull = portFullNodes(ctx, ports);
  const pnodes = requests.length > 0 ? placementNodes(ctx, held, portFull) : [];
  if (requests.length > 0) yield;
  byNeed(requests);
  const result = placeShort(pnodes, requests);
  for (const [model, why] of result.unplaceable) result.unplaceable.set(model, withPortNote(why, portFull));
  if (requests.length > 0) yield;
  rollWithoutSurge(ctx, b, requests, result, byModel);
  makeRoom(ctx, b, { requests, result, held, pnodes, byModel });
  assignPorts(ctx, b, result.placed, result.unplaceable, ports, input.newId);
  recordReasons(b, mstate, result.unplaceable, requests, satisfied);
  finishDrains(ctx, b);
  return b.plan;
}
