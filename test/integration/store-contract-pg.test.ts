// The StorePort contract (test/contract/store.ts) on the PostgreSQL store, against a real
// PostgreSQL 15 (test/helpers/postgres.ts): a fresh database per test, migrated by the store
// as it opens; "another instance" is a second PgStore on the same database (another control plane).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { StoreImage } from "../../src/control/image";
import { PgStore } from "../../src/store/pg";
import { heartbeat } from "../helpers/fleet";
import { until } from "../helpers/until";
import { openStore } from "../../src/store/open";
import { storeContract } from "../contract/store";
import { type Postgres, startPostgres } from "../helpers/postgres";
import { PG_DEFAULTS, STORE_DEFAULTS } from "../helpers/control-settings";

let pg: Postgres;
beforeAll(async () => {
  pg = await startPostgres();
}, 60_000);
afterAll(async () => {
  await pg?.stop();
}, 30_000);

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");
let n = 0;
const freshUrl = async () => {
  const db = `contract_${++n}`;
  await pg.sql(`CREATE DATABASE ${db}`, "postgres");
  return pg.url.replace(/\/llmgw$/, `/${db}`);
};

storeContract("PostgreSQL", async () => {
  const url = await freshUrl();
  const store = await PgStore.open({ ...PG_DEFAULTS, url });
  const others: PgStore[] = [];
  return {
    store,
    other: async () => {
      const o = await PgStore.open({ ...PG_DEFAULTS, url });
      others.push(o);
      return o;
    },
    close: async () => {
      await Promise.all([store.close(), ...others.map((o) => o.close())]);
    },
  };
});

describe("PostgreSQL only", () => {
  test("tokens an older version kept in clear in meta are digests from the first open on, and again when one writes them while this version runs", async () => {
    const url = await freshUrl();
    const db = url.slice(url.lastIndexOf("/") + 1);
    await (await PgStore.open({ ...PG_DEFAULTS, url })).close();
    await pg.sql("INSERT INTO meta (key, value) VALUES ('secret:admin_token', 'llmgw_admin_kept_in_clear_0123'), ('secret:join_token', 'llmgw_join_kept_in_clear_0123'), ('secret:engine_secret', 'llmgw_engine_stays_usable')", db);
    const s = await PgStore.open({ ...PG_DEFAULTS, url });
    const values = async () => (await pg.sql("SELECT key, value FROM meta", db)).map((r) => `${r.key}=${r.value}`).join("\n");
    try {
      expect(await values()).not.toContain("kept_in_clear");
      expect(await s.tokenDigests()).toEqual({
        admin: { sha256: sha256("llmgw_admin_kept_in_clear_0123"), retired: [] },
        join: { sha256: sha256("llmgw_join_kept_in_clear_0123"), retired: [] },
      });
      expect(await values()).toContain("secret:engine_secret=llmgw_engine_stays_usable");
      await pg.sql("INSERT INTO meta (key, value) VALUES ('secret:join_token', 'llmgw_join_written_again_0123')", db);
      expect((await s.tokenDigests()).join).toEqual({ sha256: sha256("llmgw_join_kept_in_clear_0123"), retired: [] });
      expect(await values()).not.toContain("written_again");
    } finally {
      await s.close();
    }
  }, 30_000);

  test("backupTo refuses, pointing at pg_dump", async () => {
    const store = await PgStore.open({ ...PG_DEFAULTS, url: await freshUrl() });
    try {
      await expect(store.backupTo("/tmp/x")).rejects.toThrow(/pg_dump/);
    } finally {
      await store.close();
    }
  }, 30_000);

  test("openStore opens a postgres:// URL as the PostgreSQL dialect, describing it without its password", async () => {
    const url = (await freshUrl()).replace("postgres@", "postgres:s3cret@");
    const opened = await openStore({ ...STORE_DEFAULTS, target: url, dataDir: "/nonexistent" });
    try {
      expect(opened.dialect).toBe("postgres");
      expect(opened.describe).not.toContain("s3cret");
      expect(opened.describe).toContain(":***@");
      expect(await opened.store.countNodes()).toBe(0);
    } finally {
      await opened.close();
    }
  }, 30_000);

  test("another control plane's last-seen flush reaches the in-memory image without a reload; its catalog write reloads it", async () => {
    const url = await freshUrl();
    const [a, b] = [await PgStore.open({ ...PG_DEFAULTS, url }), await PgStore.open({ ...PG_DEFAULTS, url })];
    const model = new StoreImage(a);
    try {
      await b.applyHeartbeat(heartbeat({ name: "n1", gpus: ["H100-80GB"] }), 1_000);
      const first = await model.snapshot();
      expect(first.nodes.map((n) => n.lastHeartbeat)).toEqual([1_000]);
      const heard: string[] = [];
      const stop = model.watch((c) => heard.push(c));
      await until("the watch to stand", async () => {
        if (heard.includes("seen")) return true;
        await b.touchNodes([{ name: "n1", at: 5_000 }]);
        return undefined;
      }, { timeoutMs: 10_000, everyMs: 100 });
      const after = await model.snapshot();
      expect(after.nodes[0]!.lastHeartbeat).toBe(5_000);
      // Last-seen times do not count as a change: the tick's skip still holds.
      expect(after.version).toBe(first.version);
      await b.saveModels([{ spec: (await import("../helpers/fleet")).model({ name: "m" }), revision: 1, created: true }], 6_000);
      await until("the catalog write heard", () => heard.includes("any"), { timeoutMs: 10_000 });
      const reloaded = await model.snapshot();
      expect(reloaded.models.map((m) => m.name)).toEqual(["m"]);
      expect(reloaded.version).toBeGreaterThan(first.version!);
      stop();
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  }, 30_000);
});
