// A key's rate limit across three routers, end to end with the compiled binary: three `serve --ha`
// on one SQLite file, each with its own router thread, one engine behind them all. Hit at once on
// all three, the routers together admit what one router alone would (the limit's burst plus its
// refill), not three times that: each holds a share of the key's allowance, recomputed every tick
// from every router's demand through the store. Then only one router is hit: once the shares have
// moved, it admits nearly the whole limit, not a third of it. A key's max-concurrent is split the
// same way, in whole slots: the three together never have more in flight than it.

import { Database } from "bun:sqlite";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { CreatedApiKey, NodeView, ReplicaView } from "../../src/protocol/views";
import { HaCluster } from "../helpers/ha-cluster";
import { until } from "../helpers/until";

// Small enough that the clients outrun the buckets on a busy machine (about 20 requests a second in all).
const RPM = 120;
const NAMES = ["cp-a", "cp-b", "cp-c"] as const;
/** Clients per router, and how long one waits after a 429 before it asks again. */
const CLIENTS = 4;
const AFTER_REFUSAL_MS = 20;
const ITEM = "key:rpm:shared";

let c: HaCluster;
let key = "";

beforeAll(async () => {
  // A lease TTL of 15 s (the default): a router whose control plane is slow a moment on this busy machine still counts.
  c = new HaCluster(["--lease-ttl", "15s", "--lease-renew", "3s"]);
  await c.startServe("cp-a");
  await until("cp-a leads", async () => (await c.health("cp-a"))?.status === 200);
  await c.startServe("cp-b");
  await c.startServe("cp-c");
  c.startAgent("n1", c.serve("cp-a").adminUrl);
  await until("the agent registered", async () => (await c.api<NodeView[]>("cp-a", "/api/v1/nodes")).some((n) => n.state === "ready"), 30_000);
  await c.api("cp-a", "/api/v1/models/m", { method: "PUT", body: JSON.stringify({ replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] }) });
  await until("a ready replica of m", async () => (await c.api<ReplicaView[]>("cp-a", "/api/v1/replicas")).some((r) => r.state === "ready"), 30_000);
  // The key made once the three hold a third each of whatever they do not list yet: each router
  // makes its bucket full at its share. (A key made while a router that just joined still held
  // nothing starts empty there and fills at its share's rate.)
  await until("each control plane to hold a third of new keys' limits", () => {
    const s = storedShares("*");
    return s.length === 3 && s.every((r) => Math.abs(r.share - 1 / 3) < 0.01) ? s : undefined;
  }, { timeoutMs: 20_000, everyMs: 200 });
  key = (await c.api<CreatedApiKey>("cp-b", "/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "shared", rpm: RPM }) })).key;
  for (const n of NAMES) await until(`the router of ${n} to serve m to the key`, async () => (await chat(n)) === 200, 20_000);
}, 80_000);
afterAll(() => c?.cleanup(), 30_000);

async function chat(name: string, k = key, o: { maxTokens?: number; signal?: AbortSignal; keepOpen?: boolean } = {}): Promise<number> {
  const r = await fetch(`${c.serve(name).routerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${k}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: o.maxTokens ?? 1, stream: o.keepOpen === true }),
    ...(o.signal ? { signal: o.signal } : {}),
  });
  if (o.keepOpen !== true) await r.arrayBuffer();
  return r.status;
}

/** CLIENTS clients on each of `names` for `ms`: when each 200 came (ms from the start), per router. */
async function hammer(names: readonly string[], ms: number): Promise<Map<string, number[]>> {
  const from = Date.now();
  const ok = new Map(names.map((n) => [n, [] as number[]]));
  let other = 0;
  const client = async (n: string) => {
    while (Date.now() - from < ms) {
      const status = await chat(n);
      if (status === 200) ok.get(n)!.push(Date.now() - from);
      else if (status === 429) await Bun.sleep(AFTER_REFUSAL_MS);
      else other++;
    }
  };
  await Promise.all(names.flatMap((n) => Array.from({ length: CLIENTS }, () => client(n))));
  expect(other).toBe(0);
  return ok;
}

/** Each router's stored share of an item (the key's rpm; "*": of what it does not list) and its demand, as the control planes last wrote them. */
function storedShares(item = ITEM): { router: string; share: number; demand: number }[] {
  const db = new Database(c.storeOf("cp-a"), { readonly: true });
  try {
    return db
      .query<{ router: string; shares: string; demand: string }, []>("SELECT router, shares, demand FROM limit_shares ORDER BY router")
      .all()
      .map((r) => ({ router: r.router, share: (JSON.parse(r.shares) as Record<string, number>)[item] ?? -1, demand: (JSON.parse(r.demand) as Record<string, number>)[item] ?? -1 }));
  } finally {
    db.close();
  }
}

describe("a key's rpm shared by three routers", () => {
  test(`hit at once on all three: together at most what one router admits; then one router alone gets nearly the whole ${RPM} rpm`, async () => {
    // Quiet a while: nothing asked anywhere lately, each router holds a third, its bucket full.
    await until("the shares to settle at a third each", () => {
      const s = storedShares();
      return s.length === 3 && s.every((r) => r.demand === 0 && Math.abs(r.share - 1 / 3) < 0.01) ? s : undefined;
    }, { timeoutMs: 20_000, everyMs: 200 });

    // Three routers hit at once. One router alone would admit its full bucket (RPM) plus what
    // refills meanwhile (RPM per minute): the reference the three together are held to.
    const burstMs = 6_000;
    const hit = await hammer(NAMES, burstMs);
    const perRouter = NAMES.map((n) => hit.get(n)!.length);
    const total = perRouter.reduce((a, b) => a + b, 0);
    const reference = RPM * (1 + burstMs / 60_000);
    // Once the buckets' burst is spent, what comes in is refill: the rate of one router.
    const steady = NAMES.reduce((t, n) => t + hit.get(n)!.filter((at) => at >= 2_000).length, 0);
    console.log(
      `three routers hit at once for ${burstMs / 1000} s, rpm ${RPM}: ${total} admitted (${perRouter.join(" + ")}), one router alone would admit ${reference}: ` +
        `${(((total - reference) / reference) * 100).toFixed(1)}% over; from 2 s to 6 s ${steady} (the limit's rate: ${(RPM / 60) * 4})`,
    );
    expect(total).toBeLessThanOrEqual(reference * 1.1);
    // Sharing does not starve: the three get about what one router would, and each router its part.
    expect(total).toBeGreaterThanOrEqual(reference * 0.8);
    for (const n of perRouter) expect(n).toBeGreaterThanOrEqual(RPM / 6);

    // Then only cp-a is hit: the others' demand fades within the demand window (5 s) and its share
    // grows to nearly all. Counted once it has: from 7 s to 16 s, what one router with the whole
    // limit would refill (RPM / 60 a second), not a third of it.
    const alone = await hammer(["cp-a"], 16_000);
    const late = alone.get("cp-a")!.filter((at) => at >= 7_000).length;
    const whole = (RPM / 60) * 9;
    console.log(`cp-a alone, 7 s to 16 s: ${late} admitted; the whole limit refills ${whole} in 9 s, a third ${(whole / 3).toFixed(1)}; shares now ${JSON.stringify(storedShares())}`);
    expect(late).toBeGreaterThanOrEqual(whole * 0.75);
    expect(late).toBeLessThanOrEqual(whole * 1.1);
  }, 60_000);

  test("max-concurrent 3 across three routers: twelve long requests at once, four on each, and no more than three in flight", async () => {
    const slots = (await c.api<CreatedApiKey>("cp-a", "/api/v1/keys", { method: "POST", body: JSON.stringify({ name: "slots", max_concurrent: 3 }) })).key;
    for (const n of NAMES) await until(`the router of ${n} to serve m to the key`, async () => (await chat(n, slots)) === 200, 20_000);
    // Quiet a while: one slot each, as apportioned from nothing asked.
    await until("the slots to settle at one each", () => {
      const s = storedShares("key:con:slots");
      return s.length === 3 && s.every((r) => r.share === 1 && r.demand === 0) ? s : undefined;
    }, { timeoutMs: 20_000, everyMs: 200 });
    const stop = new AbortController();
    try {
      // Streams of 400 tokens (5 ms each at the fake engine): all twelve are asked while the first still run.
      const statuses = await Promise.all(NAMES.flatMap((n) => Array.from({ length: 4 }, () => chat(n, slots, { maxTokens: 400, keepOpen: true, signal: stop.signal }))));
      const ok = statuses.filter((st) => st === 200).length;
      console.log(`max-concurrent 3, twelve at once on three routers: ${ok} admitted, ${statuses.filter((st) => st === 429).length} refused`);
      expect(ok).toBeLessThanOrEqual(3);
      expect(ok).toBeGreaterThanOrEqual(3);
      expect(statuses.filter((st) => st !== 200 && st !== 429)).toEqual([]);
    } finally {
      stop.abort();
    }
  }, 40_000);
});
