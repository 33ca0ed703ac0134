// The address of one file a node serves to the peers of its fabric, written by the head node
// into a FetchOrder (with the grant for it) and read by the serving agent: one place for both
// sides, as every wire format is.

import { z } from "zod";
import { SnapshotPath, sourceProblem } from "./weights";

/** Where the agent's listener serves weights. */
export const WEIGHTS_PEER_PREFIX = "/weights/v1/";

const Revision = z.string().regex(/^[0-9a-f]{40}$/);

/** The path and query of a file's URL on a peer: /weights/v1/ORG/NAME/REVISION/PATH?expires=MS, each path segment percent-encoded. */
export function peerWeightsPath(repo: string, revision: string, path: string, expiresAt: number): string {
  const enc = (s: string) => s.split("/").map(encodeURIComponent).join("/");
  return `${WEIGHTS_PEER_PREFIX}${enc(repo)}/${revision}/${enc(path)}?expires=${expiresAt}`;
}

/** A file's URL on a peer whose listener is at `base` (http://ADDR:PORT). */
export function peerWeightsUrl(base: string, repo: string, revision: string, path: string, expiresAt: number): string {
  return `${base.replace(/\/+$/, "")}${peerWeightsPath(repo, revision, path, expiresAt)}`;
}

export interface PeerWeightsRequest {
  repo: string;
  revision: string;
  path: string;
  expiresAt: number;
}

/**
 * The file a request names, or undefined when its path or query is not one (a repository that is
 * not ORG/NAME, a revision that is not a commit, a path with "..", "." or empty segments or an
 * absolute one, an expiry that is not a whole number of milliseconds).
 */
export function parsePeerWeightsRequest(pathname: string, expires: string | null): PeerWeightsRequest | undefined {
  if (!pathname.startsWith(WEIGHTS_PEER_PREFIX) || expires === null || !/^\d{1,16}$/.test(expires)) return undefined;
  let parts: string[];
  try {
    // Each segment decoded on its own: an encoded "/" inside one makes more segments, which the
    // checks below see (a "..", an empty one) rather than the file system.
    parts = pathname.slice(WEIGHTS_PEER_PREFIX.length).split("/").map(decodeURIComponent);
  } catch {
    return undefined;
  }
  if (parts.length < 4) return undefined;
  const [org, name, revision, ...rest] = parts as [string, string, string, ...string[]];
  const repo = `${org}/${name}`;
  const path = rest.join("/");
  if (org.includes("/") || name.includes("/") || sourceProblem(`hf://${repo}`) !== undefined) return undefined;
  if (!Revision.safeParse(revision).success || !SnapshotPath.safeParse(path).success) return undefined;
  return { repo, revision, path, expiresAt: Number(expires) };
}
