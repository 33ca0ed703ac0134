// A client key's own rules at the router: refused once expired (401 invalid_api_key saying when),
// and held to the models it names, by name or by alias (any other is model_not_found, as OpenAI
// answers a model the caller may not see).

import { describe, expect, test } from "bun:test";
import type { ApiKeyEntry } from "../../src/protocol/routing";
import { Catalog } from "../../src/router/catalog";
import { expiredKey, mayUse, modelNotFound } from "../../src/router/key-rules";

const catalog = new Catalog();
catalog.set([
  { name: "llama", aliases: ["chat", "big"], on_demand: false, pool: "default", created: 1 },
  { name: "qwen", aliases: ["small"], on_demand: false, pool: "default", created: 1 },
]);
const key = (over: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name: "k", sha256: "h", pool: null, ...over });

describe("key rules", () => {
  test("a key is refused from its expiry on, saying when it expired", () => {
    const at = Date.UTC(2027, 0, 31);
    expect(expiredKey(key(), at)).toBeUndefined();
    expect(expiredKey(key({ expiresAt: at }), at - 1)).toBeUndefined();
    const r = expiredKey(key({ expiresAt: at }), at)!;
    expect(r.status).toBe(401);
    const body = JSON.parse(r.body as string) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("invalid_api_key");
    expect(body.error.message).toContain("expired at 2027-01-31T00:00:00.000Z");
  });

  test("a key naming models may use those, by their names or any alias, and nothing else", () => {
    expect(mayUse(key(), "anything", catalog)).toBe(true);
    expect(mayUse(undefined, "qwen", catalog)).toBe(true);
    const k = key({ models: ["chat"] });
    expect(mayUse(k, "chat", catalog)).toBe(true);
    expect(mayUse(k, "llama", catalog)).toBe(true);
    expect(mayUse(k, "big", catalog)).toBe(true);
    expect(mayUse(k, "qwen", catalog)).toBe(false);
    expect(mayUse(k, "small", catalog)).toBe(false);
    expect(mayUse(k, "nope", catalog)).toBe(false);
    expect(mayUse(key({ models: ["not-yet-in-catalog"] }), "not-yet-in-catalog", catalog)).toBe(true);
  });

  test("a model the key may not use is answered as OpenAI answers a missing one", () => {
    const r = modelNotFound("qwen");
    expect(r.status).toBe(404);
    expect(JSON.parse(r.body as string)).toEqual({
      error: { message: "The model 'qwen' does not exist or you do not have access to it", type: "invalid_request_error", param: "model", code: "model_not_found" },
    });
  });
});
