// What a node's answer says about weights: the revisions its replicas of hf:// models need (with
// their files, from manifests.ts) and the transfers to run for them. This first plan sends every
// file to the Hub (the agent skips what it holds whole); transfers.ts plans copies between the
// nodes of a fabric.

import type { Assignment } from "../protocol/heartbeat";
import { type FetchOrder, type WeightsManifest, sourceRepo } from "../protocol/weights";
import type { Manifests } from "./manifests";

export interface HubOrders {
  fileUrl(repo: string, revision: string, path: string): string;
  /** The Hub token, given only for repositories that need it. */
  readonly token: string | undefined;
}

/** The repository of an assignment's weights, when they come from a source (hf://, or file:// once a node found it) and are pinned. */
export function hubRepoOf(a: Pick<Assignment, "source" | "revision">): string | undefined {
  return a.revision !== null ? sourceRepo(a.source) : undefined;
}

/** The revisions a node is to hold (its replicas', then `seeds`: pulled ahead of need) with their files, and orders to fetch every file from the Hub. */
export function weightsFor(
  assignments: readonly Assignment[],
  manifests: Pick<Manifests, "get" | "needsToken">,
  hub: HubOrders,
  seeds: readonly { repo: string; revision: string }[] = [],
): { weights: WeightsManifest[]; fetches: FetchOrder[] } {
  const weights = new Map<string, WeightsManifest>();
  const revisions: { repo: string; revision: string }[] = [];
  for (const a of assignments) {
    const repo = hubRepoOf(a);
    if (repo !== undefined) revisions.push({ repo, revision: a.revision! });
  }
  for (const r of [...revisions, ...seeds]) {
    const m = manifests.get(r.repo, r.revision);
    if (m !== undefined) weights.set(`${r.repo}@${r.revision}`, m);
  }
  const fetches: FetchOrder[] = [];
  for (const m of weights.values()) {
    const token = hub.token !== undefined && manifests.needsToken(m.repo, m.revision) ? hub.token : undefined;
    for (const file of m.files) fetches.push({ repo: m.repo, revision: m.revision, file, from: { kind: "hub", url: hub.fileUrl(m.repo, m.revision, file.path), ...(token !== undefined ? { token } : {}) } });
  }
  return { weights: [...weights.values()], fetches };
}
