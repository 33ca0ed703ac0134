// API keys' and teams' rows as both dialects store them (flat limit columns, the models list as
// JSON text, null for "not set") mapped to and from the domain rows (control/types.ts), where what
// is not set is absent: one mapping, so both stores and their change feeds answer the same rows.

import type { ApiKeyRow, KeyPatch, LimitsPatch, TeamPatch, TeamRow } from "../control/types";
import type { KeyTier, UsageLimits } from "../protocol/routing";

/** The limit columns, as both tables hold them. */
export interface LimitColumns {
  rpm: number | null;
  tpm: number | null;
  maxConcurrent: number | null;
  budgetTokens: number | null;
  budgetGpuHours: number | null;
  budgetPeriod: string | null;
  tier: string | null;
}

export interface KeyColumns extends LimitColumns {
  name: string;
  hash: string;
  pool: string | null;
  createdAt: number;
  team: string | null;
  models: string | null;
  expiresAt: number | null;
  updatedAt: number | null;
}

export interface TeamColumns extends LimitColumns {
  name: string;
  createdAt: number;
  updatedAt: number;
}

const LIMITS = ["rpm", "tpm", "maxConcurrent", "budgetTokens", "budgetGpuHours", "budgetPeriod"] as const;

// postgres-js may hand a bigint back as a string when a query is raw SQL.
const num = (v: unknown): number | undefined => (v === null || v === undefined ? undefined : Number(v));

function limitsOf(r: LimitColumns): UsageLimits | undefined {
  const out: Record<string, unknown> = {};
  for (const k of LIMITS) {
    const v = r[k];
    if (v !== null && v !== undefined) out[k] = k === "budgetPeriod" ? v : Number(v);
  }
  return Object.keys(out).length > 0 ? (out as UsageLimits) : undefined;
}

function limitColumns(l: UsageLimits | undefined, tier: KeyTier | undefined): LimitColumns {
  return {
    rpm: l?.rpm ?? null,
    tpm: l?.tpm ?? null,
    maxConcurrent: l?.maxConcurrent ?? null,
    budgetTokens: l?.budgetTokens ?? null,
    budgetGpuHours: l?.budgetGpuHours ?? null,
    budgetPeriod: l?.budgetPeriod ?? null,
    tier: tier ?? null,
  };
}

/** A patch's limit columns: only those it changes (null clears). */
function limitPatchColumns(l: LimitsPatch | undefined, tier: KeyTier | null | undefined): Partial<LimitColumns> {
  const out: Partial<LimitColumns> = {};
  for (const k of LIMITS) if (l && l[k] !== undefined) (out as Record<string, unknown>)[k] = l[k];
  if (tier !== undefined) out.tier = tier;
  return out;
}

export function toKeyRow(r: KeyColumns): ApiKeyRow {
  const row: ApiKeyRow = { name: r.name, hash: r.hash, pool: r.pool, createdAt: Number(r.createdAt) };
  if (r.team !== null && r.team !== undefined) row.team = r.team;
  if (r.models !== null && r.models !== undefined) row.models = JSON.parse(r.models) as string[];
  const expires = num(r.expiresAt);
  if (expires !== undefined) row.expiresAt = expires;
  if (r.tier !== null && r.tier !== undefined) row.tier = r.tier as KeyTier;
  const limits = limitsOf(r);
  if (limits) row.limits = limits;
  const updated = num(r.updatedAt);
  if (updated !== undefined) row.updatedAt = updated;
  return row;
}

export function keyColumns(k: ApiKeyRow): KeyColumns {
  return {
    name: k.name,
    hash: k.hash,
    pool: k.pool,
    createdAt: k.createdAt,
    team: k.team ?? null,
    models: k.models ? JSON.stringify(k.models) : null,
    expiresAt: k.expiresAt ?? null,
    updatedAt: k.updatedAt ?? null,
    ...limitColumns(k.limits, k.tier),
  };
}

export function keyPatchColumns(p: KeyPatch, updatedAt: number): Partial<KeyColumns> {
  const out: Partial<KeyColumns> = { ...limitPatchColumns(p.limits, p.tier), updatedAt };
  if (p.pool !== undefined) out.pool = p.pool;
  if (p.team !== undefined) out.team = p.team;
  if (p.models !== undefined) out.models = p.models === null ? null : JSON.stringify(p.models);
  if (p.expiresAt !== undefined) out.expiresAt = p.expiresAt;
  return out;
}

export function toTeamRow(r: TeamColumns): TeamRow {
  const row: TeamRow = { name: r.name, createdAt: Number(r.createdAt), updatedAt: Number(r.updatedAt) };
  const limits = limitsOf(r);
  if (limits) row.limits = limits;
  if (r.tier !== null && r.tier !== undefined) row.tier = r.tier as KeyTier;
  return row;
}

export function teamColumns(t: TeamRow): TeamColumns {
  return { name: t.name, createdAt: t.createdAt, updatedAt: t.updatedAt, ...limitColumns(t.limits, t.tier) };
}

export function teamPatchColumns(p: TeamPatch, updatedAt: number): Partial<TeamColumns> {
  return { ...limitPatchColumns(p.limits, p.tier), updatedAt };
}
