// A control plane's name is what the others, `status` and the store's rows know it by (its row
// in control_planes, its router's usage report, the lease's holder): two processes under one name
// write over each other's rows. So a control plane looks, before it registers, for a live member
// of its name on the store, and refuses to start while one exists. A row seen lately may also be
// this control plane's own earlier run, killed a moment ago: a live member refreshes its row every
// lease renewal, a dead one never again, so such a row is watched until it either moves (live) or
// stays still for two renewals (an earlier run: go on). A row whose admin URL is on this machine
// and refuses connections needs no watch: its writer no longer listens there.

import type { Scheduler } from "../lib/scheduler";
import type { MembershipPort } from "./store-port";
import type { ControlPlaneRow } from "./types";

export interface NamesakeOptions {
  store: Pick<MembershipPort, "controlPlanes">;
  scheduler: Scheduler;
  name: string;
  ttlMs: number;
  renewMs: number;
  /** Told once when a recent row must be watched, with how long at most. */
  onWatch?: (row: ControlPlaneRow, upToMs: number) => void;
  /**
   * Whether the row's writer is known to be gone without watching it (nothing listens at its
   * admin URL on this very machine: an earlier run of this one, stopped or killed); asked once,
   * before the watch. Without it, or answering false, the row is watched.
   */
  goneAlready?: (row: ControlPlaneRow) => Promise<boolean>;
}

/** What one more look at a namesake's row says: it refreshed (live), it is past refreshing (gone), or not yet known. */
export type NamesakeVerdict = "live" | "gone" | "watch";

/** How long a row may stay unrefreshed before its writer counts as gone: two renewals and a margin, never past the TTL. */
export function stillAfterMs(ttlMs: number, renewMs: number): number {
  return Math.min(ttlMs, 2 * renewMs + 500);
}

/** A row as read, and when (this process's monotonic clock). */
export interface RowRead {
  row: ControlPlaneRow;
  at: number;
}

/**
 * `first` and `now` as read: a row written meanwhile (nobody but a namesake writes it before this
 * control plane registers) was last seen later than it was at the first read, by more than what
 * two reads' latencies can explain; a row gone, or older than stillAfterMs, has no live writer.
 */
export function namesakeVerdict(first: RowRead, now: RowRead | undefined, o: { ttlMs: number; renewMs: number }): NamesakeVerdict {
  if (!now) return "gone";
  const moved = now.at - now.row.seenAgoMs - (first.at - first.row.seenAgoMs);
  if (moved > Math.min(250, o.renewMs / 2) || now.row.startedAt !== first.row.startedAt || now.row.adminUrl !== first.row.adminUrl) return "live";
  return now.row.seenAgoMs > stillAfterMs(o.ttlMs, o.renewMs) ? "gone" : "watch";
}

/** How often the row is read while watched. */
const LOOK_EVERY_MS = 250;

/** The live control plane that goes by this name on the store, if any (see the file's head). */
export async function liveNamesake(o: NamesakeOptions): Promise<ControlPlaneRow | undefined> {
  const read = async (): Promise<RowRead | undefined> => {
    const row = (await o.store.controlPlanes()).find((r) => r.name === o.name);
    return row && { row, at: o.scheduler.mono() };
  };
  const first = await read();
  if (!first || first.row.seenAgoMs > o.ttlMs) return undefined;
  if (await o.goneAlready?.(first.row)) return undefined;
  o.onWatch?.(first.row, Math.max(0, stillAfterMs(o.ttlMs, o.renewMs) - first.row.seenAgoMs));
  for (;;) {
    await new Promise<void>((resolve) => o.scheduler.after(LOOK_EVERY_MS, resolve));
    const now = await read();
    const verdict = namesakeVerdict(first, now, o);
    if (verdict === "live") return now!.row;
    if (verdict === "gone") return undefined;
  }
}
