// `llmgw apply --dry-run`: what applying a catalog would change, and where each new replica
// would go (or why not), with nothing written. A pure function: the catalog's rules
// (catalog.ts) give created/configured/unchanged; the reconcile step runs on a copy of the
// snapshot holding the new catalog (as the store would after the write: a changed model's
// failures and parking cleared), and its plan says which replicas it would start where; each
// model's explanation (explain.ts) says whether what does not fit fits never or not now.

import type { ModelSpec } from "../protocol/catalog";
import type { ApplyDryRun } from "../protocol/views";
import { catalogChanges } from "./catalog";
import { ConflictError } from "./errors";
import { type ExplainInput, explainModel } from "./explain";
import { reconcile } from "./reconciler";
import { emptyModelState, type ModelRow, type Snapshot } from "./types";

export function dryRunApply(input: ExplainInput, specs: readonly ModelSpec[]): ApplyDryRun {
  const { results, writes, conflicts } = catalogChanges(specs, input.snapshot.models, true);
  // Refused as apply refuses it (409, every conflict named), before anything is judged.
  if (conflicts.length > 0) throw new ConflictError(conflicts[0]!.message, conflicts[0]!.path, conflicts);
  const snapshot = withCatalog(input.snapshot, writes, input.now);
  let n = 0;
  const plan = reconcile({ ...input, snapshot, newId: () => `new-${++n}` });
  return {
    dry_run: true,
    results: results.map((r) => {
      const ex = explainModel({ ...input, snapshot }, r.name)!;
      const placements = plan.create.filter((c) => c.model === r.name).map((c) => ({ profile: c.profile, shards: c.shards.map((s) => ({ node: s.node, gpus: [...s.gpus] })) }));
      const placed = plan.modelState.get(r.name)?.unplaceableReason;
      let reason: string | null = null;
      if (ex.status === "never" || ex.status === "parked") reason = ex.summary.slice(r.name.length + 1);
      else if (placed) reason = `not now: ${placed}`;
      else if (ex.status === "not_now" && placements.length === 0) reason = ex.summary.slice(ex.summary.indexOf("not now: "));
      const verdict = placements.length > 0 && ex.status !== "never" ? (placed ? "not_now" : "fits") : ex.status;
      return { ...r, message: `model/${r.name} ${r.result}${r.result === "unchanged" ? "" : " (dry run)"}`, placements, reason, verdict, summary: ex.summary };
    }),
  };
}

/** The snapshot as it would be once the writes are stored. */
function withCatalog(s: Snapshot, writes: ReturnType<typeof catalogChanges>["writes"], now: number): Snapshot {
  const models = new Map<string, ModelRow>(s.models.map((m) => [m.name, m]));
  const state = new Map(s.modelState.map((m) => [m.model, m]));
  for (const w of writes) {
    const was = models.get(w.spec.name);
    models.set(w.spec.name, { name: w.spec.name, spec: w.spec, revision: w.revision, createdAt: was?.createdAt ?? now, updatedAt: now });
    state.set(w.spec.name, { ...(state.get(w.spec.name) ?? emptyModelState(w.spec.name)), failures: 0, crashes: 0, parked: false, reason: null, unplaceableReason: null });
  }
  const { version: _v, ...rest } = s;
  return { ...rest, models: [...models.values()], modelState: [...state.values()] };
}
