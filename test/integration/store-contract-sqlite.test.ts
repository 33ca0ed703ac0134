// The StorePort contract (test/contract/store.ts) on the SQLite store: a fresh file per test;
// "another instance" is a second Store on the same file, as a second control plane on one
// machine would open it.

import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { Store } from "../../src/store";
import { storeContract } from "../contract/store";
import { scratchDir } from "../helpers/tmp";

const root = scratchDir("llmgw-contract-");
afterAll(() => rmSync(root, { recursive: true, force: true }));
let n = 0;

storeContract("SQLite", async () => {
  const path = join(root, `s${++n}.db`);
  const store = new Store({ path });
  const others: Store[] = [];
  return {
    store,
    other: async () => {
      const o = new Store({ path });
      others.push(o);
      return o;
    },
    close: async () => {
      for (const o of others) o.close();
      store.close();
    },
  };
});

describe("SQLite only", () => {
  test("backupTo writes a consistent copy", async () => {
    const store = new Store({ path: join(root, "b.db") });
    await store.createApiKey({ name: "k", hash: "h", pool: null, createdAt: 1 });
    await store.backupTo(join(root, "copy.db"));
    store.close();
    expect(existsSync(join(root, "copy.db"))).toBe(true);
    const copy = new Store({ path: join(root, "copy.db") });
    expect((await copy.listApiKeys()).map((k) => k.name)).toEqual(["k"]);
    copy.close();
  });
});
