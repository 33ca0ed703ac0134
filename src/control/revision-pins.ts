// A catalog model whose weights come from the Hub (source: hf://ORG/NAME) is pinned to one
// commit when it is applied: a branch or tag (main when none is given) is resolved to the
// commit it is at then, and that commit is what the catalog keeps, so every replica and every
// later copy loads the same bytes however the branch moves. A commit given as such is kept as
// it is, without asking the Hub. Resolving happens before the catalog's write lock is taken:
// the Hub may take seconds to answer.

import type { ModelSpec } from "../protocol/catalog";
import { parseSource } from "../protocol/weights";
import { InvalidRequestError } from "./errors";

/** The Hub's side of it (hub/client.ts HubClient.resolve). */
export interface RevisionResolver {
  /** The commit a branch, tag or commit of `repo` is at; throws with a message an operator can act on. */
  resolve(repo: string, revision: string): Promise<string>;
  /** Where the Hub is, for messages. */
  readonly endpoint: string;
}

const COMMIT = /^[0-9a-f]{40}$/;

/**
 * The specs with each hf:// source's revision resolved to a commit. Throws InvalidRequestError
 * at the model's revision (`models[i].revision` in a catalog file) when the Hub cannot resolve it.
 */
export async function pinRevisions(specs: ModelSpec[], hub: RevisionResolver | undefined, inFile: boolean): Promise<ModelSpec[]> {
  const out: ModelSpec[] = [];
  for (let i = 0; i < specs.length; i++) {
    const spec = specs[i]!;
    // A hole of a catalog file (a model with problems of its own) stays one.
    if (spec === undefined || spec.source === undefined || !spec.source.startsWith("hf://")) {
      out.push(spec);
      continue;
    }
    const wanted = spec.revision ?? "main";
    if (COMMIT.test(wanted)) {
      out.push(spec);
      continue;
    }
    const path = inFile ? ["models", i, "revision"] : ["revision"];
    if (hub === undefined) throw new InvalidRequestError(`${spec.name}: revision "${wanted}" cannot be resolved: this head node has no Hub to ask; give the commit hash`, path);
    const { repo } = parseSource(spec.source) as { repo: string };
    let commit: string;
    try {
      commit = await hub.resolve(repo, wanted);
    } catch (e) {
      throw new InvalidRequestError(`${spec.name}: ${(e as Error).message}`, path);
    }
    out.push({ ...spec, revision: commit });
  }
  return out;
}
