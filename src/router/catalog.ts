// The catalog as the control plane last sent it (EndpointSink.setCatalog): every model by its
// name and by each of its aliases, and the list in the order sent. Dispatch answers the model
// list from it, cold-start holds a request for what it says may start, and a request's metrics
// are counted under the model's own name rather than the alias it was asked by.

import type { CatalogEntry } from "../protocol/routing";

export class Catalog {
  private byName = new Map<string, CatalogEntry>();
  private entries: readonly CatalogEntry[] = [];

  set(models: CatalogEntry[]): void {
    const map = new Map<string, CatalogEntry>();
    for (const m of models) {
      map.set(m.name, m);
      for (const a of m.aliases) map.set(a, m);
    }
    this.byName = map;
    this.entries = models;
  }

  /** The model named or aliased `name`. */
  get(name: string): CatalogEntry | undefined {
    return this.byName.get(name);
  }

  /** Every model, in the order the control plane sent them. */
  list(): readonly CatalogEntry[] {
    return this.entries;
  }

  /** The model's own name for a name or alias; the name itself when the catalog has neither. */
  nameOf(name: string): string {
    return this.byName.get(name)?.name ?? name;
  }
}
