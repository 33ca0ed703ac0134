// What a client key's own entry allows beyond being known: it has not expired, and when it names
// models, only those (by name or alias, whichever the request uses). A model the key may not use
// is answered as one that does not exist, as OpenAI does, so a key cannot probe the catalog.

import type { ApiKeyEntry } from "../protocol/routing";
import type { Catalog } from "./catalog";
import { type Reply, openAIError } from "./errors";

/** The refusal of an expired key (`now`: the router's wall clock, ms), or undefined while it holds. */
export function expiredKey(key: ApiKeyEntry, now: number): Reply | undefined {
  if (key.expiresAt === undefined || now < key.expiresAt) return undefined;
  return openAIError(401, `API key ${key.name} expired at ${new Date(key.expiresAt).toISOString()}: ask for a new key or a later expiry (\`llmgw keys update ${key.name} --expires 30d\`)`, { code: "invalid_api_key" });
}

/** Whether the key may use the model (a name or an alias): any when it names none. */
export function mayUse(key: ApiKeyEntry | undefined, model: string, catalog: Pick<Catalog, "get">): boolean {
  const models = key?.models;
  if (models === undefined) return true;
  if (models.includes(model)) return true;
  const name = catalog.get(model)?.name;
  if (name === undefined) return false;
  for (const m of models) if (catalog.get(m)?.name === name) return true;
  return false;
}

/** A model the key may not use, or that does not exist: OpenAI's answer for both. */
export function modelNotFound(model: string): Reply {
  return openAIError(404, `The model '${model}' does not exist or you do not have access to it`, { code: "model_not_found", param: "model" });
}
