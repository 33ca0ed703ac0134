// Room on the models disk before a revision's first transfer: the fetcher asks once per wanted
// revision, and the agent's answer (weights-disk.ts makeRoom: the least recently used weights
// llmgw fetched and nothing uses are removed, or nothing when that would not be enough) decides
// whether its transfers may start. A revision that does not fit waits, with the reason the
// operator sees on its replica, and is asked about again after a while (a replica elsewhere on
// the node may have gone meanwhile). One question at a time: two revisions never count on the
// same free bytes.

import { errorText } from "../lib/format";
import type { Scheduler } from "../lib/scheduler";

/** Makes room for `need` more bytes of a revision; `reason` says what is short when it cannot. */
export type MakeRoom = (need: number, repo: string, revision: string) => Promise<{ fits: boolean; reason: string | null }>;

/** How long a revision that did not fit waits before it is asked about again. */
export const ROOM_RETRY_MS = 15_000;

type State = { kind: "checking" } | { kind: "ok" } | { kind: "short"; reason: string; at: number };

/** Bytes still to arrive for these files: each one's size less what its partial copy already has. */
export function bytesToCome(files: readonly { size: number; have: number }[]): number {
  let n = 0;
  for (const f of files) n += Math.max(0, f.size - Math.min(f.have, f.size));
  return n;
}

export class RoomGate {
  private readonly state = new Map<string, State>();
  private chain: Promise<void> = Promise.resolve();

  constructor(
    private readonly o: {
      makeRoom: MakeRoom;
      scheduler: Pick<Scheduler, "now">;
      /** A check ended (room made or not): transfers may start, or the reason be reported. */
      onSettled: () => void;
    },
  ) {}

  /**
   * Whether the revision's transfers may start: yes once room was made for it; otherwise a
   * check is started (or one under way, or a recent refusal, is waited out) and the answer is no.
   */
  allowed(repo: string, revision: string, need: () => number): boolean {
    const k = `${repo}@${revision}`;
    const s = this.state.get(k);
    if (s?.kind === "ok") return true;
    if (s?.kind === "checking") return false;
    if (s?.kind === "short" && this.o.scheduler.now() - s.at < ROOM_RETRY_MS) return false;
    this.state.set(k, { kind: "checking" });
    this.chain = this.chain.then(async () => {
      if (this.state.get(k)?.kind !== "checking") return;
      let next: State;
      try {
        const n = need();
        const r = n === 0 ? { fits: true, reason: null } : await this.o.makeRoom(n, repo, revision);
        next = r.fits ? { kind: "ok" } : { kind: "short", reason: `disk: ${r.reason ?? "no room for these weights"}`, at: this.o.scheduler.now() };
      } catch (e) {
        next = { kind: "short", reason: `disk: room could not be made (${errorText(e)})`, at: this.o.scheduler.now() };
      }
      // Forgotten meanwhile (no longer wanted): nothing to say.
      if (this.state.get(k)?.kind === "checking") this.state.set(k, next);
      this.o.onSettled();
    });
    return false;
  }

  /** Whether room was made for a revision (its transfers run or may). */
  made(repo: string, revision: string): boolean {
    return this.state.get(`${repo}@${revision}`)?.kind === "ok";
  }

  /** Why a revision's transfers do not start, when its disk is short. */
  reason(repo: string, revision: string): string | undefined {
    const s = this.state.get(`${repo}@${revision}`);
    return s?.kind === "short" ? s.reason : undefined;
  }

  /** Forgets every revision but these (no longer wanted, or whole: the next want asks afresh). */
  keep(keys: ReadonlySet<string>): void {
    for (const k of this.state.keys()) if (!keys.has(k)) this.state.delete(k);
  }
}
