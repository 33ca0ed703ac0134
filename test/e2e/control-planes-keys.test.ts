// Client API keys across control planes, end to end with the compiled binary: two `serve --ha`
// on one SQLite file, each with its own router thread and `--require-api-key`. A key created on
// one control plane opens the other's router within a couple of seconds, and a key revoked on
// one is refused by the other's router as fast: the change reaches every router through the
// store's change feed, not only the router of the control plane that made it.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { CreatedApiKey } from "../../src/protocol/views";
import { HaCluster } from "../helpers/ha-cluster";
import { until } from "../helpers/until";

/** Within this a router must follow a key change made on another control plane. */
const FOLLOW_MS = 3_000;

let c: HaCluster;

beforeAll(async () => {
  c = new HaCluster(["--lease-ttl", "3s", "--lease-renew", "1s", "--require-api-key"]);
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
  await until("cp-b answers", async () => (await c.health("cp-b")) !== undefined);
}, 60_000);
afterAll(() => c?.cleanup(), 30_000);

/** The status a router answers GET /v1/models with this key. */
async function models(name: string, key: string): Promise<number> {
  const r = await fetch(`${c.serve(name).routerUrl}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  await r.arrayBuffer();
  return r.status;
}

/** How long until the router of `name` answers `status` to this key. */
async function followed(name: string, key: string, status: number): Promise<number> {
  const from = Date.now();
  await until(`the router of ${name} to answer ${status}`, async () => (await models(name, key)) === status, { timeoutMs: FOLLOW_MS, everyMs: 50 });
  return Date.now() - from;
}

describe("API keys on two control planes", () => {
  for (const [on, other] of [
    ["cp-a", "cp-b"],
    ["cp-b", "cp-a"],
  ] as const) {
    test(`a key created on ${on} opens ${other}'s router, and revoked on ${on} is refused there, each within ${FOLLOW_MS} ms`, async () => {
      const name = `k-${on}`;
      const created = await c.api<CreatedApiKey>(on, "/api/v1/keys", { method: "POST", body: JSON.stringify({ name }) });
      expect(await models(on, created.key)).toBe(200);
      const opened = await followed(other, created.key, 200);
      await c.api(on, `/api/v1/keys/${name}`, { method: "DELETE" });
      expect(await models(on, created.key)).toBe(401);
      const closed = await followed(other, created.key, 401);
      console.log(`key made on ${on}: accepted by ${other}'s router after ${opened} ms; revoked, refused there after ${closed} ms`);
    }, 30_000);
  }
});
