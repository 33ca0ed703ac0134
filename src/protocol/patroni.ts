// Patroni's `GET /cluster` answer (the REST API every Patroni member serves) and its mapping to
// the summary's `store[]` members. The shape is Patroni 3.0.2's (Debian 12), checked against a
// real cluster (test/fixtures/patroni/): members[] with name, role, state, api_url, host, port,
// timeline, and `lag` (bytes behind the leader, or "unknown") on every member but the leader.
// Later Patroni versions report a streaming replica's state as "streaming" where 3.0.2 says
// "running"; both, and any other state, are kept as text. Fields we do not read are allowed.
// Everything here reaches an operator's terminal, so text is refused when it is not printable.

import { z } from "zod";
import { Printable } from "./common";
import type { StoreMember } from "./views";

export const PatroniMemberSchema = z.looseObject({
  name: Printable(256).min(1, "must not be empty"),
  /** "leader", "replica", "sync_standby", "standby_leader" (standby cluster); kept as text. */
  role: Printable(64),
  /** "running" (3.0.2), "streaming" (later), "stopped", "starting", "crashed", … or "" when unknown. */
  state: Printable(64),
  api_url: Printable(1024).optional(),
  host: Printable(256).optional(),
  port: z.number().int().min(0).max(65_535).optional(),
  timeline: z.number().int().nonnegative().optional(),
  /** Bytes behind the leader; "unknown" when the member never said where it is. */
  lag: z.union([z.number().int().nonnegative(), Printable(64)]).optional(),
});
export type PatroniMember = z.infer<typeof PatroniMemberSchema>;

export const PatroniClusterSchema = z.looseObject({
  members: z.array(PatroniMemberSchema).max(64, "more than 64 members"),
  pause: z.boolean().optional(),
});
export type PatroniCluster = z.infer<typeof PatroniClusterSchema>;

const LEADER_ROLES = new Set(["leader", "standby_leader", "master", "primary"]);

/** Whether this role is the one others replicate from (the leader's lag is 0 by definition). */
export function isLeaderRole(role: string): boolean {
  return LEADER_ROLES.has(role);
}

/** One member as the summary shows it: lag 0 for the leader, -1 when unknown. */
export function storeMember(m: PatroniMember): StoreMember {
  const host = m.host === undefined ? "" : m.port === undefined ? m.host : `${m.host.includes(":") ? `[${m.host}]` : m.host}:${m.port}`;
  const lag = isLeaderRole(m.role) ? 0 : typeof m.lag === "number" ? m.lag : -1;
  return { name: m.name, host, role: m.role, state: m.state, lag };
}

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.map((p) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("").replace(/^\./, "");
  return `${path || "answer"}: ${issue.message}`;
}

/**
 * Parses a `GET /cluster` body (already JSON-decoded) into the summary's members, sorted by
 * name; or an error that names the field that was wrong (never throws).
 */
export function parseCluster(raw: unknown): { members: StoreMember[] } | { error: string } {
  const r = PatroniClusterSchema.safeParse(raw);
  if (!r.success) {
    const issues = r.error.issues.slice(0, 3).map(describeIssue);
    return { error: `unexpected answer from Patroni's /cluster: ${issues.join("; ")}${r.error.issues.length > 3 ? ` (and ${r.error.issues.length - 3} more)` : ""}` };
  }
  return { members: r.data.members.map(storeMember).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)) };
}
