// The store failing under the server: a full disk (a size-limited database file) and a lock
// held by another process. Writes fail with a clear 503 and a log line, nothing crashes,
// reads keep working, and writes resume by themselves when the cause goes away. And a backup
// taken while the server runs restores to the same state.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Writable } from "node:stream";
import pino from "pino";
import type { Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { type TestServer, testServer } from "../helpers/server";
import { scratchDir } from "../helpers/tmp";

const logs: string[] = [];
let s: TestServer;
const model = (extra: Record<string, unknown> = {}) => JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB" }], ...extra });

beforeAll(async () => {
  s = await testServer({ db_busy_timeout: "100ms" }, pino({ level: "info" }, new Writable({ write: (c, _e, cb) => (logs.push(String(c)), cb()) })));
  for (let i = 0; i < 5; i++) await s.agent(heartbeat({ name: `gpu-${i}`, gpus: ["H100-80GB", "H100-80GB"], fabrics: ["f"] }));
  await s.admin("/api/v1/models/m", { method: "PUT", body: model() });
});
afterAll(() => s.stop());

describe("disk full", () => {
  test("writes fail with 503 store_full and a log line; reads work; the process stays up; writes resume when space returns", async () => {
    const pages = (s.db.query("PRAGMA page_count").get() as { page_count: number }).page_count;
    s.db.exec(`PRAGMA max_page_count = ${pages}`);
    const big = model({ profiles: [{ name: "p", engine: "fake", gpu_class: "H100-80GB", args: Array(200).fill("x".repeat(4000)) }] });
    const res = await s.admin("/api/v1/models/huge", { method: "PUT", body: big });
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("store_full");
    expect(body.error.message).toContain("disk is full");
    expect(logs.some((l) => l.includes("store write failed") && l.includes("store_full"))).toBe(true);
    // Nothing half-written, reads fine, still up.
    expect((await s.admin("/api/v1/models/huge")).status).toBe(404);
    expect(((await (await s.admin("/api/v1/summary")).json()) as Summary).nodes.total).toBe(5);
    expect((await fetch(`${s.adminUrl}/healthz`)).status).toBe(200);
    // Space returns.
    s.db.exec("PRAGMA max_page_count = 1073741823");
    expect((await s.admin("/api/v1/models/huge", { method: "PUT", body: big })).status).toBe(201);
  });
});

describe("database locked", () => {
  test("a lock held elsewhere turns writes into 503 store_busy, heartbeats too; reads go on; released, all is well", async () => {
    const other = new Database(join(s.dataDir, "llmgw.db"));
    other.exec("BEGIN EXCLUSIVE");
    try {
      const put = await s.admin("/api/v1/models/m2", { method: "PUT", body: model() });
      expect(put.status).toBe(503);
      expect(((await put.json()) as { error: { code: string } }).error.code).toBe("store_busy");
      // Its own address: no allowance to write first, so the heartbeat itself meets the lock.
      const hb = await s.agent({ ...heartbeat({ name: "gpu-9", gpus: ["H100-80GB"] }), address: "127.0.0.1" });
      expect(hb.status).toBe(503);
      expect((await s.admin("/api/v1/nodes")).status).toBe(200);
      await expect(s.tick()).rejects.toMatchObject({ code: "store_busy" });
    } finally {
      other.exec("ROLLBACK");
      other.close();
    }
    expect((await s.admin("/api/v1/models/m2", { method: "PUT", body: model() })).status).toBe(201);
    expect((await s.agent({ ...heartbeat({ name: "gpu-9", gpus: ["H100-80GB"] }), address: "127.0.0.1" })).status).toBe(200);
    await s.tick();
  });
});

describe("backup", () => {
  test("a copy taken while the server runs restores to the same state", async () => {
    const res = await s.admin("/api/v1/backup");
    expect(res.status).toBe(200);
    const bytes = new Uint8Array(await res.arrayBuffer());
    expect(new TextDecoder().decode(bytes.slice(0, 15))).toBe("SQLite format 3");
    const dir = scratchDir("llmgw-restore-");
    writeFileSync(join(dir, "llmgw.db"), bytes);
    const restored = await testServer({ data_dir: dir });
    try {
      restored.clock.set(s.clock.now());
      // The fleet, not the listeners: each server's router and admin listener has its own port.
      const { router: _ra, node_admission: _na, ...a } = (await (await s.admin("/api/v1/summary")).json()) as Summary;
      const { router: _rb, node_admission: _nb, ...b } = (await (await restored.admin("/api/v1/summary")).json()) as Summary;
      expect(b).toEqual(a);
      expect(restored.peek.counts()).toEqual({ ...s.peek.counts(), events: restored.peek.counts().events! });
      const models = async (t: TestServer) => (await (await t.admin("/api/v1/models")).json()) as unknown;
      expect(await models(restored)).toEqual(await models(s));
    } finally {
      await restored.stop();
    }
  });
});
