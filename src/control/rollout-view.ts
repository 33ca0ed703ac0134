// How far a model's rolling restart has got (reconcile/rollout.ts), as `llmgw models NAME`,
// describe and the dashboard say it: replicas replaced of those wanted, new ones starting, old
// ones draining with their requests in flight and time left, and why the roll waits when it does.
// A pure function of the snapshot, so the view cannot disagree with what the reconciler sees.

import { plural } from "../lib/format";
import type { RolloutView } from "../protocol/views";
import { launchOf, RESTART_MARK } from "./launch";
import { ROLL_WAITS } from "./reconcile/rollout";
import type { ModelRow, ModelStateRow, ReplicaRow } from "./types";

/** The model's roll, or undefined when every replica runs its current launch and none is draining for a roll. */
export function rolloutView(m: ModelRow, st: ModelStateRow | undefined, reps: readonly ReplicaRow[], desired: number, now: number, inflight?: ReadonlyMap<string, number>): RolloutView | undefined {
  const current = (r: ReplicaRow) => r.launch == null || (r.launch !== RESTART_MARK && r.launch === launchOf(m.spec, r.profile));
  const active = reps.filter((r) => r.state === "starting" || r.state === "ready");
  const old = active.filter((r) => !current(r));
  const draining = reps.filter((r) => r.state === "draining" && r.drainUntil != null);
  if (old.length === 0 && draining.length === 0) return undefined;
  const replaced = Math.min(desired, active.filter((r) => current(r) && r.state === "ready").length);
  const starting = active.filter((r) => current(r) && r.state === "starting").length;
  const drains = draining.map((r) => ({ id: r.id, inflight: inflight ? (inflight.get(r.id) ?? 0) : null, seconds_left: Math.max(0, Math.ceil((r.drainUntil! - now) / 1000)) }));
  let waiting: string | null = null;
  if (st?.parked) waiting = "the model is parked; nothing new of it starts until it is unparked";
  // The reconciler's own word, from the last step that could not place the surge replica.
  else if (old.length > 0 && starting === 0 && draining.length === 0 && st?.unplaceableReason?.startsWith(ROLL_WAITS)) waiting = st.unplaceableReason.slice(ROLL_WAITS.length);
  const parts = [`${replaced} of ${desired} replaced`];
  if (starting > 0) parts.push(`${starting} starting (new)`);
  for (const d of drains) parts.push(`old replica ${d.id} draining (${d.inflight === null ? "requests in flight unknown" : `${plural(d.inflight, "request")} in flight`}, ${d.seconds_left} s left)`);
  if (waiting) parts.push(`waiting: ${waiting}`);
  return { replaced, of: desired, starting, old: old.length, draining: drains, waiting, text: parts.join(", ") };
}
