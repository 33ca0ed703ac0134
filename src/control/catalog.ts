// The catalog's rules, as a pure function of the models stored and the specs applied: a name
// is one model's name or one model's alias, never both nor two models'; a changed spec gets a
// new revision, an unchanged one is left alone. A batch is judged as if applied one spec after
// another, and refused whole at its first conflict (with the request-body path it concerns).

import type { ModelSpec } from "../protocol/catalog";
import { ConflictError } from "./errors";
import type { ModelRow, ModelWrite } from "./types";

export type PutResult = { name: string; result: "created" | "configured" | "unchanged"; revision: number };

export function catalogChanges(specs: readonly ModelSpec[], stored: readonly ModelRow[]): { results: PutResult[]; writes: ModelWrite[] } {
  const models = new Map(stored.map((m) => [m.name, { spec: m.spec, revision: m.revision }]));
  const aliasOf = new Map<string, string>();
  for (const m of stored) for (const a of m.spec.aliases) aliasOf.set(a, m.name);
  const results: PutResult[] = [];
  const writes: ModelWrite[] = [];
  const path = (i: number, field: "name" | "aliases") => (specs.length > 1 ? ["models", i, field] : [field]);
  for (const [i, spec] of specs.entries()) {
    for (const [j, n] of [spec.name, ...spec.aliases].entries()) {
      if (j > 0 && models.has(n)) throw new ConflictError(`alias "${n}" of model "${spec.name}" is the name of model "${n}"`, path(i, "aliases"));
      const owner = aliasOf.get(n);
      if (owner !== undefined && owner !== spec.name)
        throw new ConflictError(
          j === 0 ? `name "${n}" is already an alias of model "${owner}"` : `alias "${n}" of model "${spec.name}" is already an alias of model "${owner}"`,
          path(i, j === 0 ? "name" : "aliases"),
        );
    }
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
  return { results, writes };
}

/** JSON with every object's keys sorted: two specs that say the same compare equal whatever order their fields were filled in. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) =>
    x !== null && typeof x === "object" && !Array.isArray(x) ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) : x,
  );
}
