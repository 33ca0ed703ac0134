// Client API keys as the operator manages them: created (the key itself returned once and never
// stored, only its SHA-256), listed, revoked; each change handed to the router at once.

import { randomBytes } from "node:crypto";
import { sha256hex } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import { ConflictError, NotFoundError } from "./errors";
import type { EventLog } from "./event-log";
import type { Projector } from "./projector";
import type { KeysPort } from "./store-port";

export class ApiKeys {
  constructor(private readonly o: { store: KeysPort; events: Pick<EventLog, "event">; projector: Pick<Projector, "publishKeys">; scheduler: Pick<Scheduler, "now"> }) {}

  /** Creates a client API key; the key itself is returned this once and never stored. */
  async createApiKey(name: string, pool?: string): Promise<{ name: string; key: string; pool: string | null }> {
    const key = `sk-llmgw-${randomBytes(24).toString("base64url")}`;
    if (!(await this.o.store.createApiKey({ name, hash: sha256hex(key), pool: pool ?? null, createdAt: this.o.scheduler.now() })))
      throw new ConflictError(`an API key named "${name}" already exists; revoke it first or pick another name`, ["name"]);
    await this.o.events.event("key.created", `key/${name}`, `API key ${name} created${pool ? ` for pool ${pool}` : ""}`);
    await this.o.projector.publishKeys();
    return { name, key, pool: pool ?? null };
  }

  async listApiKeys(): Promise<{ name: string; pool: string | null; created_at: string }[]> {
    return (await this.o.store.listApiKeys()).map((k) => ({ name: k.name, pool: k.pool, created_at: new Date(k.createdAt).toISOString() }));
  }

  async revokeApiKey(name: string): Promise<void> {
    if (!(await this.o.store.revokeApiKey(name))) throw new NotFoundError(`API key "${name}" not found`);
    await this.o.events.event("key.revoked", `key/${name}`, `API key ${name} revoked`);
    await this.o.projector.publishKeys();
  }
}
