// The catalog's rules, as a pure function of the models stored and the specs applied: a name
// is one model's name or one model's alias, never both nor two models'; a changed spec gets a
// new revision, an unchanged one is left alone. A batch is judged as if applied one spec after
// another, and refused whole if any conflicts (each conflict with the request-body path it concerns).

import type { CatalogIssue, ModelSpec } from "../protocol/catalog";
import type { ModelRow, ModelWrite } from "./types";

export type PutResult = { name: string; result: "created" | "configured" | "unchanged"; revision: number };

/**
 * Every conflict of the specs with the stored catalog and with each other, in one pass; a
 * conflicting spec is left out of the state the next ones are judged against. `specs` may have
 * holes (models refused for other reasons); `inFile` gives paths into a catalog file
 * (models.3.aliases.0), else into one model's body (aliases.0).
 */
export function catalogChanges(
  specs: readonly (ModelSpec | undefined)[],
  stored: readonly ModelRow[],
  inFile = false,
): { results: PutResult[]; writes: ModelWrite[]; conflicts: CatalogIssue[] } {
  const models = new Map(stored.map((m) => [m.name, { spec: m.spec, revision: m.revision }]));
  const aliasOf = new Map<string, string>();
  for (const m of stored) for (const a of m.spec.aliases) aliasOf.set(a, m.name);
  const results: PutResult[] = [];
  const writes: ModelWrite[] = [];
  const conflicts: CatalogIssue[] = [];
  const path = (i: number, rest: (string | number)[]) => (inFile ? ["models", i, ...rest] : rest);
  for (const [i, spec] of specs.entries()) {
    if (!spec) continue;
    const before = conflicts.length;
    for (const [j, n] of [spec.name, ...spec.aliases].entries()) {
      const at = j === 0 ? ["name"] : ["aliases", j - 1];
      if (j > 0 && models.has(n)) {
        conflicts.push({ path: path(i, at), message: `alias "${n}" of model "${spec.name}" is the name of model "${n}"` });
        continue;
      }
      const owner = aliasOf.get(n);
      if (owner !== undefined && owner !== spec.name)
        conflicts.push({
          path: path(i, at),
          message: j === 0 ? `name "${n}" is already an alias of model "${owner}"` : `alias "${n}" of model "${spec.name}" is already an alias of model "${owner}"`,
        });
    }
    if (conflicts.length > before) continue;
    const existing = models.get(spec.name);
    if (existing && canonical(existing.spec) === canonical(spec)) {
      results.push({ name: spec.name, result: "unchanged", revision: existing.revision });
      continue;
    }
    const revision = existing ? existing.revision + 1 : 1;
    if (existing) for (const a of existing.spec.aliases) aliasOf.delete(a);
    for (const a of spec.aliases) aliasOf.set(a, spec.name);
    models.set(spec.name, { spec, revision });
    writes.push({ spec, revision, created: !existing });
    results.push({ name: spec.name, result: existing ? "configured" : "created", revision });
  }
  return { results, writes, conflicts };
}

/** JSON with every object's keys sorted: two specs that say the same compare equal whatever order their fields were filled in. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x !== null && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x,
  );
}
