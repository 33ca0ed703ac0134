// How a replica is launched, as one fingerprint: what the agent's command line and environment
// are made of (engine, args, env, GPUs, served names, weights' source and pinned revision). A
// replica keeps the fingerprint it was placed with; when its model's changes (a catalog change),
// or an operator asks for a restart, the replica is outdated and rolled (reconcile/rollout.ts).
// Fields that change no process (priority, max_inflight, start_timeout, replicas) are left out,
// so changing them rolls nothing.

import type { ModelSpec } from "../protocol/catalog";
import { sha256hex } from "../lib/digest";

/** What `models restart` writes over a replica's fingerprint: it matches no model's, so the replica rolls. */
export const RESTART_MARK = "restart";

// Every reconcile step asks it of every replica: computed once per spec object (the in-memory
// image replaces a model's row when it changes, never edits it).
const known = new WeakMap<ModelSpec, Map<string, string | undefined>>();

/** The fingerprint of a replica of this model on this profile; undefined when the profile is gone. */
export function launchOf(spec: ModelSpec, profile: string): string | undefined {
  let byProfile = known.get(spec);
  if (byProfile === undefined) known.set(spec, (byProfile = new Map()));
  if (byProfile.has(profile)) return byProfile.get(profile);
  const p = spec.profiles.find((x) => x.name === profile);
  let out: string | undefined;
  if (p !== undefined) {
    const env = Object.entries(p.env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const facts = [p.engine, p.gpu_class, p.gpus, p.nodes, p.args, env, [spec.name, ...spec.aliases], spec.source ?? null, spec.revision ?? null];
    out = sha256hex(JSON.stringify(facts)).slice(0, 16);
  }
  byProfile.set(profile, out);
  return out;
}
