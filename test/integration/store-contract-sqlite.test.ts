// The StorePort contract (test/contract/store.ts) on the SQLite store: a fresh file per test;
// "another instance" is a second Store on the same file, as a second control plane on one
// machine would open it.

import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Store } from "../../src/store";
import { storeContract } from "../contract/store";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const root = scratchDir("llmgw-contract-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

storeContract("SQLite", async () => {
  const path = join(root, `s${++n}.db`);
  const store = new Store({ path, ...SQLITE_DEFAULTS });
  const others: Store[] = [];
  return {
    store,
    other: async () => {
      const o = new Store({ path, ...SQLITE_DEFAULTS });
      others.push(o);
      return o;
    },
    close: async () => {
      for (const o of others) o.close();
      store.close();
    },
  };
});

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

describe("SQLite only", () => {
  test("tokens an older version kept in clear in meta are digests from the first open on, and again when one writes them while this version runs", async () => {
    const path = join(root, "clear.db");
    const old = new Store({ path, ...SQLITE_DEFAULTS });
    old.setMeta("secret:admin_token", "llmgw_admin_kept_in_clear_0123");
    old.setMeta("secret:join_token", "llmgw_join_kept_in_clear_0123");
    old.setMeta("secret:engine_secret", "llmgw_engine_stays_usable");
    old.close();
    const s = new Store({ path, ...SQLITE_DEFAULTS });
    const values = () => (s.sqlite.query("SELECT key, value FROM meta").all() as { key: string; value: string }[]).map((r) => `${r.key}=${r.value}`).join("\n");
    expect(values()).not.toContain("kept_in_clear");
    expect(await s.tokenDigests()).toEqual({
      admin: { sha256: sha256("llmgw_admin_kept_in_clear_0123"), retired: [] },
      join: { sha256: sha256("llmgw_join_kept_in_clear_0123"), retired: [] },
    });
    expect(s.getMeta("secret:engine_secret")).toBe("llmgw_engine_stays_usable");
    // An older control plane on the same file writes its own again: removed at the next read, the digest stays.
    s.setMeta("secret:join_token", "llmgw_join_written_again_0123");
    expect((await s.tokenDigests()).join).toEqual({ sha256: sha256("llmgw_join_kept_in_clear_0123"), retired: [] });
    expect(values()).not.toContain("written_again");
    s.close();
  });


  test("backupTo writes a consistent copy", async () => {
    const store = new Store({ path: join(root, "b.db"), ...SQLITE_DEFAULTS });
    await store.createApiKey({ name: "k", hash: "h", pool: null, createdAt: 1 });
    await store.backupTo(join(root, "copy.db"));
    store.close();
    expect(existsSync(join(root, "copy.db"))).toBe(true);
    const copy = new Store({ path: join(root, "copy.db"), ...SQLITE_DEFAULTS });
    expect((await copy.listApiKeys()).map((k) => k.name)).toEqual(["k"]);
    copy.close();
  });
});
