// Routers are active-active and share no state: for the same replica list, consistent hashing
// with bounded loads must send a key to the same replica on every router, so a conversation that
// reaches another router lands on the engine that caches it. Only the sticky table (what a router
// remembers of keys it moved) and each router's own in-flight counts can make them differ.

import { describe, expect, test } from "bun:test";
import { Balancer } from "../../src/router/balancer";
import type { EndpointInfo } from "../../src/protocol/routing";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";

/** A router's balancer as `llmgw serve` builds it; no cooldown or stamp is read here, so its clock stands still. */
const router = () => new Balancer({ ...BALANCER_DEFAULTS, now: () => 0 });

const ep = (id: string, extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id, url: `http://10.0.0.1:${8000 + Number(id.slice(2))}`, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });
const list = (n: number, extra: (i: number) => Partial<EndpointInfo> = () => ({})) => Array.from({ length: n }, (_, i) => ep(`r-${i}`, extra(i)));
const KEYS = Array.from({ length: 5_000 }, (_, i) => Math.imul(i + 1, 0x9e3779b1) >>> 0);

/** Each key's first pick on an idle router, released at once. */
function picks(b: Balancer): string[] {
  return KEYS.map((k) => {
    const lease = b.acquire("m", k)!;
    lease.release();
    return lease.endpoint.id;
  });
}

function shuffled<T>(xs: T[], seed: number): T[] {
  const out = [...xs];
  let s = seed;
  for (let i = out.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    const j = s % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe("CHWBL across routers", () => {
  test("the same replica list gives every router the same answer for every key, whatever the list's order", () => {
    const eps = list(8);
    const routers = [router(), router(), router()];
    routers[0]!.setEndpoints(eps);
    routers[1]!.setEndpoints(shuffled(eps, 1));
    routers[2]!.setEndpoints(shuffled(eps, 2));
    const [a, b, c] = routers.map(picks) as [string[], string[], string[]];
    expect(b).toEqual(a);
    expect(c).toEqual(a);
    // Not a constant answer: the keys spread over all eight.
    expect(new Set(a).size).toBe(8);
  });

  test("weights and priority tiers too; and after a replica leaves, the routers agree again and only its keys moved", () => {
    const eps = list(6, (i) => ({ weight: i % 2 === 0 ? 2 : 1, priority: i < 4 ? 0 : 1 }));
    const x = router();
    const y = router();
    x.setEndpoints(eps);
    y.setEndpoints(shuffled(eps, 3));
    const before = picks(x);
    expect(picks(y)).toEqual(before);
    const rest = eps.filter((e) => e.id !== "r-1");
    // A fresh router started after the change (a restarted one) and the two that saw it.
    const z = router();
    z.setEndpoints(shuffled(rest, 4));
    x.setEndpoints(rest);
    y.setEndpoints(shuffled(rest, 5));
    const after = picks(z);
    expect(picks(x)).toEqual(after);
    expect(picks(y)).toEqual(after);
    KEYS.forEach((_, i) => {
      if (before[i] !== "r-1") expect(after[i]).toBe(before[i]!);
    });
  });
});
