// Fitting the listeners' connection caps under the process's open-file limit. A listener that
// runs out of descriptors cannot even accept a connection to refuse it: the kernel completes
// the handshake, the client waits, and the other listener (agents' heartbeats) stalls with it.
// Kept below the limit, the caps shed connections while there is still a descriptor to do it.

import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";

export interface Caps {
  total: number;
  perAddress: number;
}

export interface ListenerCaps {
  router: Caps;
  admin: Caps;
}

/** Shed connections whose 503 is still going out, at most, per listener (src/http/server.ts MAX_LINGERING). */
const LINGERING = 16;

/**
 * Descriptors kept out of the caps: the store, log files, engine metrics polls, DNS, the
 * listeners themselves, and the shed connections still saying 503 on each listener.
 */
export function reserveFor(limit: number): number {
  return Math.max(64, Math.floor(limit / 20)) + 2 * LINGERING;
}

/**
 * The caps as given when they fit the limit, else lowered in proportion (each listener keeps a
 * share of its own, at least 1). A router connection counts twice: a request in flight holds
 * a socket to its engine as well. An unknown limit leaves the caps as they are. A lowered
 * per-address cap keeps its share of its listener's total (a quarter, by default): clamped to
 * the lowered total instead, it would equal it, and one address could take every connection.
 */
export function fitCaps(wanted: ListenerCaps, limit: number | undefined): ListenerCaps & { lowered: boolean } {
  const clampAddress = (c: Caps): Caps => ({ total: c.total, perAddress: Math.min(c.perAddress, c.total) });
  if (limit === undefined) return { router: clampAddress(wanted.router), admin: clampAddress(wanted.admin), lowered: false };
  const budget = Math.max(3, limit - reserveFor(limit));
  const need = 2 * wanted.router.total + wanted.admin.total;
  if (need <= budget) return { router: clampAddress(wanted.router), admin: clampAddress(wanted.admin), lowered: false };
  const f = budget / need;
  const lower = (c: Caps): Caps => {
    const total = Math.max(1, Math.floor(c.total * f));
    return clampAddress({ total, perAddress: Math.max(1, Math.floor((total * c.perAddress) / c.total)) });
  };
  return { router: lower(wanted.router), admin: lower(wanted.admin), lowered: true };
}

/** How long a connection that has not authenticated has for its next request head, at most. */
export const UNAUTHENTICATED_HEAD_MS = 5_000;

/**
 * The admin listener's room for connections that have not authenticated yet (a request with the
 * admin token, a node credential or the join token, or a dashboard session makes one
 * authenticated): half its cap, each with UNAUTHENTICATED_HEAD_MS (or the head timeout, if
 * shorter) for its next head. The other half is kept for connections that have authenticated
 * (agents' long polls, the operator's calls); a new connection that finds the room full closes
 * the oldest unauthenticated one instead (src/http/server.ts), so slow heads from a few
 * addresses cannot lock the operator or a joining agent out.
 */
export function unauthenticatedRoom(total: number, headTimeoutMs: number): { headTimeoutMs: number; maxConnections: number } {
  return { headTimeoutMs: Math.min(UNAUTHENTICATED_HEAD_MS, headTimeoutMs), maxConnections: Math.max(1, Math.floor(total / 2)) };
}

/**
 * The soft limit on open files (RLIMIT_NOFILE) this process runs with (Bun raises it to the
 * hard limit at start), or undefined when it cannot be read.
 */
export function openFileLimit(): number | undefined {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    if (m) return m[1] === "unlimited" ? undefined : Number(m[1]);
  } catch {
    // Not Linux: ask a shell, which inherits the limit.
  }
  try {
    const r = spawnSync("/bin/sh", ["-c", "ulimit -n"], { encoding: "utf8", timeout: 2000 });
    const v = r.stdout?.trim();
    return v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
  } catch {
    return undefined;
  }
}
