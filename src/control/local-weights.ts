// Weights an operator placed on some node, named by the catalog as `source: file:///PATH`: the
// head node lists those sources to every agent (`local_sources`); an agent that has PATH reports
// its files with their sizes and sha256 (`local_weights`), and the first report of a source makes
// its manifest, under fileSourceRepo(PATH) at the revision that report names. From then on the
// weights move as the Hub's do (transfers.ts), except that nothing is ever fetched from the Hub:
// a node copies them from a peer of its fabric that holds them, else from any node holding them.

import type { Logger } from "pino";
import type { HeartbeatRequest } from "../protocol/heartbeat";
import { type WeightsManifest, fileSourceRepo } from "../protocol/weights";

/** The repositories of weights found at file:// sources: never asked of the Hub. */
export const LOCAL_REPO_PREFIX = "llmgw-file/";

export const isLocalRepo = (repo: string) => repo.startsWith(LOCAL_REPO_PREFIX);

export class LocalManifests {
  /** source → its manifest and the node whose report made it. */
  private readonly bySource = new Map<string, { manifest: WeightsManifest; node: string }>();
  private readonly byRepo = new Map<string, string>();
  private v = 0;

  constructor(private readonly o: { log: Logger; changed?: () => void }) {}

  /** A heartbeat's report of what the node found at file:// sources; the first report of a source makes its manifest. */
  note(hb: Pick<HeartbeatRequest, "node" | "local_weights">): void {
    for (const lw of hb.local_weights ?? []) {
      if (this.bySource.has(lw.source)) continue;
      const repo = fileSourceRepo(lw.source.slice("file://".length));
      this.bySource.set(lw.source, { manifest: { repo, revision: lw.revision, files: lw.files }, node: hb.node });
      this.byRepo.set(repo, lw.source);
      this.v++;
      this.o.log.info({ source: lw.source, node: hb.node, repo, revision: lw.revision, files: lw.files.length }, "weights placed at a file:// source found on a node: its report is the manifest the copies are checked against");
      this.o.changed?.();
    }
  }

  /** The revision a source's weights were found at, undefined while no node reported them. */
  revisionOf(source: string): string | undefined {
    return this.bySource.get(source)?.manifest.revision;
  }

  /** The node whose report made a source's manifest. */
  foundOn(source: string): string | undefined {
    return this.bySource.get(source)?.node;
  }

  /** The source a repository's weights come from, when it is a file:// source's. */
  sourceOf(repo: string): string | undefined {
    return this.byRepo.get(repo);
  }

  get(repo: string, revision: string): WeightsManifest | undefined {
    const s = this.byRepo.get(repo);
    const m = s === undefined ? undefined : this.bySource.get(s)?.manifest;
    return m?.revision === revision ? m : undefined;
  }

  /** Rises with every manifest made: the projection of assignments is made again. */
  version(): number {
    return this.v;
  }
}

/** The Hub's manifests and the file:// sources' as one (a file:// source's repository is never asked of the Hub). */
export function withLocal<M extends { get(repo: string, revision: string): WeightsManifest | undefined; known(repo: string, revision: string): WeightsManifest | undefined; needsToken(repo: string, revision: string): boolean }>(
  hub: M,
  local: LocalManifests,
): Pick<M, "get" | "known" | "needsToken"> {
  return {
    get: (repo, revision) => (isLocalRepo(repo) ? local.get(repo, revision) : hub.get(repo, revision)),
    known: (repo, revision) => (isLocalRepo(repo) ? local.get(repo, revision) : hub.known(repo, revision)),
    needsToken: (repo, revision) => (isLocalRepo(repo) ? false : hub.needsToken(repo, revision)),
  };
}
