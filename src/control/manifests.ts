// The files of each pinned Hub revision the catalog uses, as the Hub lists them (with their
// sizes and checksums), and whether the repository needs the token: asked once per revision
// and kept in memory (a restarted head node asks again). Asked lazily, off the answer path: a
// heartbeat's answer reads what is known and never waits for the Hub; a revision not known yet
// starts its listing, and one that failed is asked again after a while.

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";
import type { WeightFile, WeightsManifest } from "../protocol/weights";

/** The Hub's side of it (hub/client.ts HubClient). */
export interface ManifestSource {
  files(repo: string, commit: string): Promise<WeightFile[]>;
  /** Whether fetching this repository's bytes needs the token (gated or private). */
  needsToken(repo: string, commit: string): Promise<boolean>;
}

/** How long a failed listing waits before it is asked again. */
export const MANIFEST_RETRY_MS = 30_000;

interface Entry {
  manifest?: WeightsManifest;
  needsToken?: boolean;
  error?: string;
  at: number;
  pending: boolean;
}

export class Manifests {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly o: { hub: ManifestSource; scheduler: Pick<Scheduler, "now">; log: Logger; onLoaded?: () => void },
  ) {}

  /** The revision's files if known; otherwise starts (or retries) the listing and says undefined. */
  get(repo: string, revision: string): WeightsManifest | undefined {
    const k = `${repo}@${revision}`;
    const e = this.entries.get(k);
    if (e?.manifest !== undefined) return e.manifest;
    const now = this.o.scheduler.now();
    if (e !== undefined && (e.pending || now - e.at < MANIFEST_RETRY_MS)) return undefined;
    const entry: Entry = { at: now, pending: true, ...(e?.error !== undefined ? { error: e.error } : {}) };
    this.entries.set(k, entry);
    void this.load(repo, revision, entry);
    return undefined;
  }

  /** The revision's files if already listed; never starts a listing (views ask about operators' folders too, which the Hub may not have). */
  known(repo: string, revision: string): WeightsManifest | undefined {
    return this.entries.get(`${repo}@${revision}`)?.manifest;
  }

  /** Whether the repository's bytes need the token (false until known). */
  needsToken(repo: string, revision: string): boolean {
    return this.entries.get(`${repo}@${revision}`)?.needsToken === true;
  }

  /** Why a revision's files are not known: the last listing's error, or that it is under way. */
  problem(repo: string, revision: string): string | undefined {
    const e = this.entries.get(`${repo}@${revision}`);
    if (e?.manifest !== undefined) return undefined;
    return e?.error ?? `listing the files of ${repo} at ${revision.slice(0, 12)} on the Hub`;
  }

  private async load(repo: string, revision: string, entry: Entry): Promise<void> {
    try {
      const [files, needsToken] = await Promise.all([this.o.hub.files(repo, revision), this.o.hub.needsToken(repo, revision)]);
      entry.manifest = { repo, revision, files };
      entry.needsToken = needsToken;
      delete entry.error;
      this.o.log.info({ repo, revision, files: files.length }, "weights listed on the Hub");
      this.o.onLoaded?.();
    } catch (e) {
      entry.error = errorText(e);
      entry.at = this.o.scheduler.now();
      this.o.log.warn({ repo, revision, err: entry.error }, "weights not listed on the Hub: asked again later");
    } finally {
      entry.pending = false;
    }
  }
}
