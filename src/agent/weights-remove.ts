// Removals the head node asks for (`llmgw weights rm`, `remove` in its heartbeat answer): each
// revision is removed once, and what became of it (removed, or why not: weights llmgw did not
// fetch are refused by the disk) is reported in every heartbeat until the head node stops asking.

import type { Logger } from "pino";
import { errorText } from "../lib/format";
import type { WeightsRemoval, WeightsRemoved } from "../protocol/weights-admin";

const key = (r: WeightsRemoval) => `${r.repo}@${r.revision}`;

export interface WeightsRemoverOptions {
  disk: { remove(repo: string, revision: string): Promise<number> };
  /** Told after each removal (the fetcher forgets the revision, the stock scans again, the head node hears soon). */
  removed: (repo: string, revision: string) => void;
  log: Logger;
}

export class WeightsRemover {
  /** repo@revision → the answer, or null while the removal runs. */
  private readonly done = new Map<string, WeightsRemoved | null>();

  constructor(private readonly o: WeightsRemoverOptions) {}

  /** The answer's removals: new ones start, answers of ones no longer asked for are dropped. */
  apply(asked: readonly WeightsRemoval[]): void {
    const keys = new Set(asked.map(key));
    for (const k of this.done.keys()) if (!keys.has(k)) this.done.delete(k);
    for (const r of asked) if (!this.done.has(key(r))) void this.run(r);
  }

  /** For the heartbeat: the removals that ended. */
  report(): { weights_removed?: WeightsRemoved[] } {
    const out = [...this.done.values()].filter((r): r is WeightsRemoved => r !== null);
    return out.length > 0 ? { weights_removed: out } : {};
  }

  private async run(r: WeightsRemoval): Promise<void> {
    const k = key(r);
    this.done.set(k, null);
    let error: string | null = null;
    try {
      const freed = await this.o.disk.remove(r.repo, r.revision);
      this.o.log.info({ repo: r.repo, revision: r.revision, freed }, "weights removed as the head node asked (llmgw weights rm)");
    } catch (e) {
      error = errorText(e);
      this.o.log.warn({ repo: r.repo, revision: r.revision, err: error }, "weights not removed");
    }
    if (this.done.get(k) === null) this.done.set(k, { ...r, error });
    this.o.removed(r.repo, r.revision);
  }
}
