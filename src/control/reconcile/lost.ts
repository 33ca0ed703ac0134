// Step 1: replicas that are gone. Lost: a node of theirs is gone for good (deleted, or
// unreachable past the replacement delay), so they are forgotten and replaced, which is not the
// model's fault. Overdue: still starting long after the agent's own deadline, so they fail and
// the failure counts against the model.

import { ENGINE_ERROR_MAX, oneLine } from "../../lib/format";
import { observedFrom } from "../views";
import { agentStartTimeout, serverStartDeadline } from "./config";
import { type ReconcileContext, heartbeatAt } from "./context";
import { recordFailure } from "./failures";
import type { PlanBuilder } from "./plan";
import type { ReplicaRow } from "../types";

/** Nodes unreachable past the replacement delay, worked out once per step (a step asks for every replica's shards). */
const goneOf = new WeakMap<ReconcileContext, ReadonlySet<string>>();
function goneNodes(ctx: ReconcileContext): ReadonlySet<string> {
  let gone = goneOf.get(ctx);
  if (gone) return gone;
  const out = new Set<string>();
  for (const [name, state] of ctx.nodeState) {
    if (state !== "unreachable") continue;
    const n = ctx.nodes.get(name);
    if (n && ctx.now - heartbeatAt(ctx, n) > ctx.cfg.nodeTimeoutMs + ctx.cfg.replaceAfterMs) out.add(name);
  }
  goneOf.set(ctx, (gone = out));
  return gone;
}

/** The first shard of the replica whose node is gone for good (deleted, or unreachable past the replacement delay), if any. */
export function lostShard(ctx: ReconcileContext, r: ReplicaRow): ReplicaRow["shards"][number] | undefined {
  const gone = goneNodes(ctx);
  for (const s of r.shards) if (!ctx.nodes.has(s.node) || gone.has(s.node)) return s;
  return undefined;
}

/** Why a starting replica has been starting too long, or undefined while it is in time (or not starting). */
export function overdueError(ctx: ReconcileContext, r: ReplicaRow): string | undefined {
  if (r.state !== "starting") return undefined;
  const { cfg, now } = ctx;
  const profile = ctx.models.get(r.model)?.spec.profiles.find((p) => p.name === r.profile);
  const deadline = serverStartDeadline(profile, cfg);
  if (!(now - observedFrom(r.createdAt, now, ctx.watchedSince) > deadline)) return undefined;
  const limit = agentStartTimeout(profile, cfg);
  return `not ready ${Math.round(deadline / 1000)}s after it was placed (start timeout ${Math.round(limit / 1000)}s + ${Math.round(cfg.startMarginMs / 1000)}s for the agent to launch it and report)${r.error ? `: ${r.error}` : ""}`;
}

/** Removes lost replicas and fails overdue ones, in snapshot order. */
export function retireLostAndOverdue(ctx: ReconcileContext, b: PlanBuilder): void {
  const { cfg } = ctx;
  for (const r of ctx.snapshot.replicas) {
    const lost = lostShard(ctx, r);
    if (lost) {
      if (r.state !== "failed")
        b.event({
          kind: "replica.lost",
          subject: `replica/${r.id}`,
          message: `replica ${r.id} of ${r.model} lost: node ${lost.node} unreachable for over ${Math.round((cfg.nodeTimeoutMs + cfg.replaceAfterMs) / 1000)}s; replacing it`,
        });
      b.remove(r);
      continue;
    }
    const error = overdueError(ctx, r);
    if (error === undefined) continue;
    b.setState(r, "failed", { error });
    b.event({ kind: "replica.failed", subject: `replica/${r.id}`, message: `replica ${r.id} of ${r.model} failed: ${oneLine(error, ENGINE_ERROR_MAX)}` });
    recordFailure(b.plan, r.model, ctx.modelState.get(r.model), error, ctx.now, cfg);
  }
}
