// Keys' and teams' fields between the admin API's wire shapes (snake_case, null for "not set")
// and the control plane's rows: limits out of a body, a patch out of a PATCH body, a row as
// listed, and a short account of limits for the event log. Pure.

import type { CreateKeyBody, CreateTeamBody, UpdateKeyBody, UpdateTeamBody } from "../protocol/admin";
import type { KeyTier, LimitUseEntry, UsageLimits } from "../protocol/routing";
import type { ApiKeyView, TeamView } from "../protocol/views";
import type { ApiKeyRow, LimitsPatch, TeamRow } from "./types";

type LimitBody = Pick<CreateKeyBody & CreateTeamBody, "rpm" | "tpm" | "max_concurrent" | "budget_tokens" | "budget_gpu_hours" | "budget_period" | "priority">;
type LimitPatchBody = Pick<UpdateKeyBody & UpdateTeamBody, keyof LimitBody>;

/** Wire name → UsageLimits field. */
const FIELDS = [
  ["rpm", "rpm"],
  ["tpm", "tpm"],
  ["max_concurrent", "maxConcurrent"],
  ["budget_tokens", "budgetTokens"],
  ["budget_gpu_hours", "budgetGpuHours"],
  ["budget_period", "budgetPeriod"],
] as const;

/** The limits and tier a create body sets (limits undefined when it sets none). */
export function limitsOf(b: Partial<LimitBody>): { limits?: UsageLimits; tier?: KeyTier } {
  const limits: Record<string, unknown> = {};
  for (const [wire, field] of FIELDS) if (b[wire] !== undefined) limits[field] = b[wire];
  return { ...(Object.keys(limits).length > 0 ? { limits: limits as UsageLimits } : {}), ...(b.priority ? { tier: b.priority } : {}) };
}

/** The limits and tier a PATCH body changes: undefined keeps, null clears. */
export function limitsPatchOf(b: Partial<LimitPatchBody>): { limits: LimitsPatch; tier?: KeyTier | null } {
  const limits: Record<string, unknown> = {};
  for (const [wire, field] of FIELDS) if (b[wire] !== undefined) limits[field] = b[wire];
  return { limits: limits as LimitsPatch, ...(b.priority !== undefined ? { tier: b.priority } : {}) };
}

function limitView(l: UsageLimits | undefined, tier: KeyTier | undefined) {
  return {
    rpm: l?.rpm ?? null,
    tpm: l?.tpm ?? null,
    max_concurrent: l?.maxConcurrent ?? null,
    budget_tokens: l?.budgetTokens ?? null,
    budget_gpu_hours: l?.budgetGpuHours ?? null,
    budget_period: l?.budgetPeriod ?? null,
    priority: tier ?? null,
  };
}

const iso = (ms: number) => new Date(ms).toISOString();

export function keyView(k: ApiKeyRow): ApiKeyView {
  return {
    name: k.name,
    pool: k.pool,
    team: k.team ?? null,
    models: k.models ?? null,
    expires_at: k.expiresAt === undefined ? null : iso(k.expiresAt),
    ...limitView(k.limits, k.tier),
    created_at: iso(k.createdAt),
    updated_at: k.updatedAt === undefined ? null : iso(k.updatedAt),
  };
}

/** A view with its limits' use on this control plane's router (usage-exchange.ts), when it counts any. */
export function withUse<V extends ApiKeyView | TeamView>(v: V, of: "key" | "team", use: readonly LimitUseEntry[]): V {
  const u = use.find((e) => e.of === of && e.name === v.name);
  if (u === undefined) return v;
  const budget = { ...(u.budget_tokens !== undefined ? { budget_tokens: u.budget_tokens } : {}), ...(u.budget_gpu_hours !== undefined ? { budget_gpu_hours: u.budget_gpu_hours } : {}) };
  return { ...v, use: { ...(u.rpm !== undefined ? { rpm: u.rpm } : {}), ...(u.tpm !== undefined ? { tpm: u.tpm } : {}), concurrent: u.concurrent, ...budget } };
}

export function teamView(t: TeamRow, keys: string[]): TeamView {
  return { name: t.name, ...limitView(t.limits, t.tier), keys, created_at: iso(t.createdAt), updated_at: iso(t.updatedAt) };
}

/** "rpm 60, budget 2 GPU-hours/week, batch": what the event log says of limits set. */
export function describeLimits(l: UsageLimits | LimitsPatch | undefined, tier?: KeyTier | null): string {
  const parts: string[] = [];
  for (const [wire, field] of FIELDS) {
    const v = l?.[field];
    if (v === undefined || wire === "budget_period") continue;
    parts.push(v === null ? `no ${wire}` : `${wire} ${v}`);
  }
  if (l?.budgetPeriod !== undefined) parts.push(l.budgetPeriod === null ? "budget per month" : `budget per ${l.budgetPeriod}`);
  if (tier !== undefined) parts.push(tier === null ? "default priority" : `priority ${tier}`);
  return parts.join(", ");
}
