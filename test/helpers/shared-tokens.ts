// The shared-tokens scenario, run on each store dialect by its own e2e file: two `serve` on one
// store, the admin token given to both, the join token kept in the first one's data dir (the
// second holds no copy). The store keeps digests only; the join token rotated on one is followed
// by the other within seconds; no restart brings the rotated-away token back, whether from an old
// copy in a data dir or given on the command line.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { heartbeat } from "./fleet";
import { ADMIN_TOKEN, HaCluster } from "./ha-cluster";
import { until } from "./until";

/** Within this a control plane must follow a rotation made on another. */
const FOLLOW_MS = 3_000;

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

export interface TokensScenario {
  /** The cluster (both serve with `--lease-ttl 3s --lease-renew 1s`, join token by file). */
  cluster(): Promise<HaCluster>;
  /** Every row of the store's meta table, read past llmgw. */
  meta(): Promise<{ key: string; value: string }[]>;
  /** Called after the cluster is cleaned up. */
  after?(): Promise<void>;
}

let probes = 0;
/** A first heartbeat of a new node with this join token: 200 admitted, 401 refused. */
async function joinStatus(adminUrl: string, token: string): Promise<number> {
  const r = await fetch(`${adminUrl}/agent/v1/heartbeat`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ ...heartbeat({ name: `probe-${++probes}` }), address: "127.0.0.1" }),
  });
  await r.arrayBuffer();
  return r.status;
}

export function sharedTokensScenario(dialect: string, s: TokensScenario): void {
  let c: HaCluster;
  const fileOf = (name: string) => join(c.serve(name).dataDir, "join.token");
  const read = (name: string) => readFileSync(fileOf(name), "utf8").trim();
  const noClear = async (...tokens: string[]) => {
    const rows = await s.meta();
    for (const t of tokens) expect(rows.filter((r) => r.value.includes(t)).map((r) => r.key)).toEqual([]);
    expect(rows.map((r) => r.key).filter((k) => k === "secret:admin_token" || k === "secret:join_token")).toEqual([]);
    return Object.fromEntries(rows.map((r) => [r.key, r.value]));
  };

  beforeAll(async () => {
    c = await s.cluster();
    await c.startServe("cp-a");
    await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
    await c.startServe("cp-b");
    await until("cp-b answers", async () => (await c.health("cp-b")) !== undefined);
  }, 60_000);
  afterAll(async () => {
    await c?.cleanup();
    await s.after?.();
  }, 60_000);

  describe(`admin and join tokens on two control planes (${dialect})`, () => {
    let first: string;
    let second: string;

    test("the store holds their digests, never the tokens; both control planes check them; the second holds no copy of the join token", async () => {
      first = read("cp-a");
      expect(existsSync(fileOf("cp-b"))).toBe(false);
      const meta = await noClear(ADMIN_TOKEN, first);
      expect(JSON.parse(meta["digest:admin_token"]!)).toEqual({ sha256: sha256(ADMIN_TOKEN), retired: [] });
      expect(JSON.parse(meta["digest:join_token"]!)).toEqual({ sha256: sha256(first), retired: [] });
      for (const cp of ["cp-a", "cp-b"]) {
        expect(await joinStatus(c.serve(cp).adminUrl, first)).toBe(200);
        expect(await joinStatus(c.serve(cp).adminUrl, "llmgw_join_not_the_token_0123456789")).toBe(401);
        expect((await c.api<{ nodes: unknown }>(cp, "/api/v1/summary")).nodes).toBeDefined();
      }
      expect(c.serveLog("cp-b").some((l) => String(l.msg).includes("holds no copy of the join token"))).toBe(true);
      // join-command there says why it has no token to point at, and where one is.
      const cmd = Bun.spawnSync([c.bin, "join-command", "--data-dir", c.serve("cp-b").dataDir], { stdout: "pipe", stderr: "pipe" });
      expect(cmd.exitCode).not.toBe(0);
      expect(cmd.stderr.toString()).toContain(`no join token in ${fileOf("cp-b")}: this serve holds no copy of it`);
    }, 30_000);

    test(`rotated on one, the other refuses the old join token and admits the new within ${FOLLOW_MS} ms; the store holds the new digest`, async () => {
      await c.api("cp-a", "/api/v1/join-token/rotate", { method: "POST" });
      second = read("cp-a");
      expect(second).not.toBe(first);
      const from = Date.now();
      expect(await joinStatus(c.serve("cp-a").adminUrl, first)).toBe(401);
      await until("cp-b to refuse the old join token", async () => (await joinStatus(c.serve("cp-b").adminUrl, first)) === 401, { timeoutMs: FOLLOW_MS, everyMs: 50 });
      console.log(`${dialect}: join token rotated on cp-a, refused at cp-b after ${Date.now() - from} ms`);
      for (const cp of ["cp-a", "cp-b"]) expect(await joinStatus(c.serve(cp).adminUrl, second)).toBe(200);
      const meta = await noClear(ADMIN_TOKEN, first, second);
      expect(JSON.parse(meta["digest:join_token"]!)).toEqual({ sha256: sha256(second), retired: [sha256(first)] });
    }, 30_000);

    test("no restart brings the rotated-away token back: not an old copy in a data dir, not one given with --join-token", async () => {
      // An old copy on cp-b (an operator copied join.token before the rotation): a restart follows the store and removes it.
      writeFileSync(fileOf("cp-b"), `${first}\n`, { mode: 0o600 });
      await c.stop("cp-b");
      await c.startServe("cp-b");
      expect(existsSync(fileOf("cp-b"))).toBe(false);
      await c.stop("cp-a");
      await c.startServe("cp-a");
      expect(read("cp-a")).toBe(second);
      for (const cp of ["cp-a", "cp-b"]) {
        expect(await joinStatus(c.serve(cp).adminUrl, first)).toBe(401);
        expect(await joinStatus(c.serve(cp).adminUrl, second)).toBe(200);
      }
      await noClear(ADMIN_TOKEN, first, second);
      // Given on the command line, even to a control plane started alone: refused, it was rotated away.
      await c.stop("cp-b");
      await c.stop("cp-a");
      const refused = await c.startServe("cp-a", ["--join-token", first]).then(
        () => "started",
        (e: Error) => e.message,
      );
      expect(refused).toContain("exited with 1");
      const stderr = readFileSync(join(c.dir, readdirLast(c.dir, "serve-cp-a-")), "utf8");
      expect(stderr).toContain("--join-token");
      expect(stderr).toContain("rotated away");
    }, 60_000);
  });
}

/** The newest stderr file of a serve (by its start number). */
function readdirLast(dir: string, prefix: string): string {
  const files = readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith(".stderr"));
  return files.sort((a, b) => Number(/-(\d+)\.stderr$/.exec(a)![1]) - Number(/-(\d+)\.stderr$/.exec(b)![1])).at(-1)!;
}
