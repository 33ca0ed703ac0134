// The shared tokens' digests in the store's meta table, kept alike by both dialects: one row per
// token, `digest:admin_token` and `digest:join_token`, holding {"sha256", "retired"} as JSON.
// Older versions kept the generated tokens themselves under `secret:admin_token` and
// `secret:join_token`; clearTokenMigration() turns such a row into its digest (unless a digest is
// stored already) and deletes it, so the store never holds a token in clear once a control plane
// of this version opened it, nor for long after an older one wrote one again.

import { sha256hex } from "../lib/digest";
import type { SharedTokenKind, TokenDigest, TokenDigests } from "../control/types";

export const DIGEST_KEYS: Record<SharedTokenKind, string> = { admin: "digest:admin_token", join: "digest:join_token" };
const CLEAR_KEYS: Record<SharedTokenKind, string> = { admin: "secret:admin_token", join: "secret:join_token" };
/** Every meta key the shared tokens live under, digests and clear ones. */
export const TOKEN_KEYS: string[] = [...Object.values(DIGEST_KEYS), ...Object.values(CLEAR_KEYS)];
/** Rotated-away digests kept per token: enough that no restart with an old copy brings one back. */
export const RETIRED_KEPT = 32;

const KINDS: SharedTokenKind[] = ["admin", "join"];

export { sha256hex };

interface MetaRow {
  key: string;
  value: string;
}

function parseDigest(value: string): TokenDigest | undefined {
  try {
    const v = JSON.parse(value) as Partial<TokenDigest>;
    if (typeof v.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(v.sha256)) return undefined;
    const retired = Array.isArray(v.retired) ? v.retired.filter((r): r is string => typeof r === "string") : [];
    return { sha256: v.sha256, retired };
  } catch {
    return undefined;
  }
}

/** The digests the rows hold (a row that does not parse counts as none). */
export function digestsOf(rows: readonly MetaRow[]): TokenDigests {
  const out: TokenDigests = {};
  for (const kind of KINDS) {
    const row = rows.find((r) => r.key === DIGEST_KEYS[kind]);
    const d = row && parseDigest(row.value);
    if (d) out[kind] = d;
  }
  return out;
}

/** The writes that replace tokens kept in clear by their digests: rows to insert (where no digest is stored) and keys to delete. */
export function clearTokenMigration(rows: readonly MetaRow[]): { put: MetaRow[]; remove: string[] } {
  const put: MetaRow[] = [];
  const remove: string[] = [];
  const held = digestsOf(rows);
  for (const kind of KINDS) {
    const clear = rows.find((r) => r.key === CLEAR_KEYS[kind]);
    if (!clear) continue;
    remove.push(clear.key);
    if (!held[kind]) put.push({ key: DIGEST_KEYS[kind], value: JSON.stringify({ sha256: sha256hex(clear.value), retired: [] } satisfies TokenDigest) });
  }
  return { put, remove };
}

/** What a token's digest becomes by putTokenDigest (see the StorePort); undefined when nothing changes. */
export function nextDigest(stored: TokenDigest | undefined, sha256: string, mode: "claim" | "replace"): TokenDigest | undefined {
  if (stored && (mode === "claim" || stored.sha256 === sha256)) return undefined;
  const retired = stored ? [...stored.retired, stored.sha256].filter((r) => r !== sha256).slice(-RETIRED_KEPT) : [];
  return { sha256, retired };
}
