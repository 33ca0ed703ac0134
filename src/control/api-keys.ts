// Client API keys as the operator manages them: created (the key itself returned once and never
// stored, only its SHA-256) with its team, models, expiry, tier and limits, listed, changed,
// revoked; each change handed to the router at once.

import { randomBytes } from "node:crypto";
import { sha256hex } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";
import type { CreateKeyBody, UpdateKeyBody } from "../protocol/admin";
import type { ApiKeyView } from "../protocol/views";
import { ConflictError, InvalidRequestError, NotFoundError } from "./errors";
import type { EventLog } from "./event-log";
import { describeLimits, keyView, limitsOf, limitsPatchOf, withUse } from "./key-views";
import type { Projector } from "./projector";
import type { KeysPort } from "./store-port";
import type { ApiKeyRow, KeyPatch } from "./types";
import type { UsageExchange } from "./usage-exchange";

/** What a key is created with besides its name and pool. */
export type NewKeyOptions = Omit<CreateKeyBody, "name" | "pool">;
type Expires = NonNullable<CreateKeyBody["expires"]>;

/** What the operator's key and team operations use (ApiKeys here, Teams in teams.ts). */
export interface KeyAdminOptions {
  store: KeysPort;
  events: Pick<EventLog, "event">;
  projector: Pick<Projector, "publishKeys">;
  scheduler: Pick<Scheduler, "now">;
  /** This control plane's router's count of each limit's use, shown beside the limits. */
  usage?: Pick<UsageExchange, "limitUse">;
}

export class ApiKeys {
  constructor(private readonly o: KeyAdminOptions) {}

  /** Creates a client API key; the key itself is returned this once and never stored. */
  async createApiKey(name: string, pool?: string, opts: NewKeyOptions = {}): Promise<ApiKeyView & { key: string }> {
    const now = this.o.scheduler.now();
    if (opts.team !== undefined) await this.teamMustExist(opts.team);
    const key = `sk-llmgw-${randomBytes(24).toString("base64url")}`;
    const { limits, tier } = limitsOf(opts);
    const row: ApiKeyRow = {
      name,
      hash: sha256hex(key),
      pool: pool ?? null,
      createdAt: now,
      ...(opts.team !== undefined ? { team: opts.team } : {}),
      ...(opts.models ? { models: [...new Set(opts.models)] } : {}),
      ...(opts.expires ? { expiresAt: this.expiresAt(opts.expires, now) } : {}),
      ...(tier ? { tier } : {}),
      ...(limits ? { limits } : {}),
    };
    if (!(await this.o.store.createApiKey(row))) throw new ConflictError(`an API key named "${name}" already exists; revoke it first or pick another name`, ["name"]);
    const more = [pool ? `for pool ${pool}` : "", opts.team ? `in team ${opts.team}` : "", describeLimits(limits, tier)].filter(Boolean).join(", ");
    await this.o.events.event("key.created", `key/${name}`, `API key ${name} created${more ? ` ${more}` : ""}`);
    await this.o.projector.publishKeys();
    return { ...keyView(row), key };
  }

  async listApiKeys(): Promise<ApiKeyView[]> {
    const use = this.o.usage?.limitUse() ?? [];
    return (await this.o.store.listApiKeys()).map((k) => withUse(keyView(k), "key", use));
  }

  /** Changes what the body names (null clears it); the key as it now stands. */
  async updateApiKey(name: string, body: UpdateKeyBody): Promise<ApiKeyView> {
    const now = this.o.scheduler.now();
    if (body.team) await this.teamMustExist(body.team);
    const { limits, tier } = limitsPatchOf(body);
    const patch: KeyPatch = {
      limits,
      ...(tier !== undefined ? { tier } : {}),
      ...(body.pool !== undefined ? { pool: body.pool } : {}),
      ...(body.team !== undefined ? { team: body.team } : {}),
      ...(body.models !== undefined ? { models: body.models === null ? null : [...new Set(body.models)] } : {}),
      ...(body.expires !== undefined ? { expiresAt: body.expires === null ? null : this.expiresAt(body.expires, now) } : {}),
    };
    const row = await this.o.store.updateApiKey(name, patch, now);
    if (!row) throw new NotFoundError(`API key "${name}" not found`);
    const fields = { pool: "pool", team: "team", models: "models", expiresAt: "expiry" } as const;
    const named = (Object.keys(fields) as (keyof typeof fields)[]).filter((f) => patch[f] !== undefined).map((f) => (patch[f] === null ? `no ${fields[f]}` : `new ${fields[f]}`));
    const what = [...named, describeLimits(limits, tier)].filter(Boolean).join(", ");
    await this.o.events.event("key.updated", `key/${name}`, `API key ${name} changed${what ? `: ${what}` : ""}`);
    await this.o.projector.publishKeys();
    return keyView(row);
  }

  async revokeApiKey(name: string): Promise<void> {
    if (!(await this.o.store.revokeApiKey(name))) throw new NotFoundError(`API key "${name}" not found`);
    await this.o.events.event("key.revoked", `key/${name}`, `API key ${name} revoked`);
    await this.o.projector.publishKeys();
  }

  private async teamMustExist(team: string): Promise<void> {
    if (!(await this.o.store.listTeams()).some((t) => t.name === team)) throw new NotFoundError(`team "${team}" not found; create it first with \`llmgw teams create ${team}\``);
  }

  private expiresAt(e: Expires, now: number): number {
    if ("inMs" in e) return now + e.inMs;
    if (e.at <= now) throw new InvalidRequestError(`expires: ${new Date(e.at).toISOString()} is already past; give a later time or a duration such as 30d`, ["expires"]);
    return e.at;
  }
}
