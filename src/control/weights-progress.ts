// What the head node says of a replica waiting for its weights: the agent reports `fetching`
// with the bytes present, the total, the rate and the sources, and the replica, still starting
// for the control loop, keeps that line as its note (its `error` field, which views and cold
// start progress already show). Its start deadline slides while it fetches: the start timeout
// is the engine's, counted from when its weights are whole.

import { bytes as formatBytes } from "../lib/format";
import type { ReplicaReport } from "../protocol/heartbeat";

/** Every fetching note starts so: views show such a starting replica as `fetching`. */
export const FETCHING_NOTE = "fetching weights";

/** How often a fetching replica's start clock is moved on: a store write per replica at most this often. */
export const FETCHING_SLIDE_MS = 10_000;

/** "fetching weights: 42 % (56 GB/134 GB) from h100-3, 120 MB/s, about 11m left". */
export function fetchingNote(f: NonNullable<ReplicaReport["fetch"]>): string {
  const pct = f.total > 0 ? Math.floor((100 * f.done) / f.total) : 0;
  const left = f.rate > 0 && f.total > f.done ? `, about ${eta((f.total - f.done) / f.rate)} left` : "";
  const rate = f.rate > 0 ? `, ${formatBytes(f.rate)}/s` : "";
  const failed = f.error !== undefined ? `; ${f.error.split("\n")[0]}` : "";
  const from = f.from !== "" ? ` from ${f.from}` : ", waiting for a source";
  return `${FETCHING_NOTE}: ${pct} % (${formatBytes(f.done)}/${formatBytes(f.total)})${from}${rate}${left}${failed}`;
}

function eta(s: number): string {
  if (s < 60) return `${Math.ceil(s)}s`;
  if (s < 3600) return `${Math.ceil(s / 60)}m`;
  return `${Math.floor(s / 3600)}h${Math.ceil((s % 3600) / 60)}m`;
}

/** Whether a replica row is waiting for its weights (views say `fetching`). */
export function isFetching(r: { state: string; error: string | null }): boolean {
  return r.state === "starting" && r.error !== null && r.error.startsWith(FETCHING_NOTE);
}
