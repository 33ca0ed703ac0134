// Step 9: a draining node with nothing left on it is drained: cordoned and empty. A failed
// replica's process is gone, so it does not keep a node from being drained.

import type { ReconcileContext } from "./context";
import type { PlanBuilder } from "./plan";

export function finishDrains(ctx: Pick<ReconcileContext, "snapshot">, b: PlanBuilder): void {
  let busy: Set<string> | undefined;
  for (const n of ctx.snapshot.nodes) {
    if (n.adminState !== "draining") continue;
    // The nodes something still runs on, once for every draining node.
    busy ??= new Set(ctx.snapshot.replicas.filter((r) => !b.isRemoved(r) && b.stateOf(r) !== "failed").flatMap((r) => r.shards.map((s) => s.node)));
    if (busy.has(n.name)) continue;
    b.plan.nodeAdmin.push({ node: n.name, state: "cordoned" });
    b.event({ kind: "node.drained", subject: `node/${n.name}`, message: `node ${n.name} drained: cordoned and empty` });
  }
}
