// Where a request for a model with bounded replicas gets its slot (src/router/slot-gate.ts), on a
// real Balancer with a ManualScheduler: the least loaded replica with room, else the fair queue;
// a slot given back goes to the next in line; batch requests leave each replica's last slot to
// interactive ones, and an interactive request queued behind batch work takes it at once; models
// with a replica without a bound are not gated at all.

import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import type { ClientExchange } from "../../src/http/exchange";
import { ManualScheduler } from "../../src/lib/scheduler";
import type { ApiKeyEntry, EndpointInfo } from "../../src/protocol/routing";
import { Balancer, type Lease } from "../../src/router/balancer";
import { Catalog } from "../../src/router/catalog";
import type { ProxyRequest, SlotClaim } from "../../src/router/proxy";
import { SlotGate } from "../../src/router/slot-gate";
import { BALANCER_DEFAULTS } from "../helpers/router-settings";

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const ep = (id: string, extra: Partial<EndpointInfo> = {}): EndpointInfo => ({ id, url: `http://10.0.0.1/${id}`, models: ["m"], engine: "vllm", pool: "default", weight: 1, priority: 0, ...extra });

interface Client extends SlotClaim {
  name: string;
  lease: Lease | undefined | "wait";
  answered: { status: number; body: string } | undefined;
  ex: { aborted: boolean; answered: boolean; onAbort: (() => void) | undefined };
}

function setup(endpoints: EndpointInfo[], keys: ApiKeyEntry[], settings = { maxHeldPerModel: 100, coldStartTimeoutMs: 10_000 }) {
  const scheduler = new ManualScheduler();
  const balancer = new Balancer({ ...BALANCER_DEFAULTS, now: () => scheduler.now() });
  balancer.setEndpoints(endpoints);
  const statuses: number[] = [];
  /** Waiting requests in the order they were given a slot. */
  const granted: Client[] = [];
  const gate = new SlotGate({ settings, balancer, catalog: new Catalog(), scheduler, metrics: { answered: (_m, s) => statuses.push(s) } });
  gate.setKeys(keys);
  const ask = (name: string): Client => {
    const ex = {
      aborted: false,
      answered: false,
      onAbort: undefined as (() => void) | undefined,
      respond(status: number, _h: unknown, body: string) {
        c.answered = { status, body };
      },
    };
    const req = { ex: ex as unknown as ClientExchange, facts: { model: "m", stream: false, key: 0, modelStart: 0, modelEnd: 0 }, pool: undefined, owner: sha(name), pin: undefined, t0: 0 } as ProxyRequest;
    const c: Client = {
      name,
      req,
      ex,
      exclude: undefined,
      lease: "wait",
      answered: undefined,
      resume(lease) {
        c.lease = lease;
        granted.push(c);
      },
    };
    // A request may be given its slot while it is being queued (resume called within acquire).
    const r = gate.acquire(c);
    if (r !== "wait") c.lease = r;
    return c;
  };
  const leave = (c: Client) => {
    c.ex.aborted = true;
    c.ex.onAbort?.();
  };
  return { gate, balancer, scheduler, ask, leave, statuses, granted };
}
const key = (name: string, extra: Partial<ApiKeyEntry> = {}): ApiKeyEntry => ({ name, sha256: sha(name), pool: null, ...extra });
const held = (c: Client): Lease => {
  if (c.lease === undefined || c.lease === "wait") throw new Error(`no lease: ${String(c.lease)}`);
  return c.lease;
};

describe("SlotGate", () => {
  test("a slot on the least loaded replica with room; past every bound the request waits, and a slot given back goes to the next in line", () => {
    const { ask, balancer } = setup([ep("r1", { max_inflight: 2 }), ep("r2", { max_inflight: 2 })], [key("k")]);
    const leases = [ask("k"), ask("k"), ask("k"), ask("k")];
    expect(leases.map((c) => held(c).endpoint.id).sort()).toEqual(["r1", "r1", "r2", "r2"]);
    const fifth = ask("k");
    const sixth = ask("k");
    expect(fifth.lease).toBe("wait");
    expect(sixth.lease).toBe("wait");
    expect(balancer.endpoints().map((s) => s.inflight)).toEqual([2, 2]);
    held(leases[3]!).release();
    expect(held(fifth).endpoint.id).toBe(held(leases[3]!).endpoint.id);
    expect(sixth.lease).toBe("wait");
    expect(balancer.endpoints().map((s) => s.inflight)).toEqual([2, 2]);
    held(leases[0]!).release();
    expect(held(sixth).endpoint.id).toBe(held(leases[0]!).endpoint.id);
  });

  test("models with a replica without a bound are not gated: the balancer places them", () => {
    const { ask } = setup([ep("r1", { max_inflight: 1 }), ep("r2")], [key("k")]);
    expect(ask("k").lease).toBeUndefined();
  });

  test("a batch key never takes a replica's last slot; an interactive request queued behind batch work takes it at once", () => {
    const { ask, balancer } = setup([ep("r1", { max_inflight: 3 })], [key("bulk", { tier: "batch" }), key("chat"), key("team-batch", { team: "t", tier: "batch" })]);
    const b1 = ask("bulk");
    const b2 = ask("bulk");
    held(b1);
    held(b2);
    const b3 = ask("bulk");
    expect(b3.lease).toBe("wait");
    const i1 = ask("chat");
    expect(held(i1).endpoint.id).toBe("r1");
    expect(balancer.endpoints()[0]!.inflight).toBe(3);
    // The interactive request ends: its slot is again the interactive one, not b3's.
    held(i1).release();
    expect(b3.lease).toBe("wait");
    // A batch request ends: b3 takes its slot.
    held(b1).release();
    expect(held(b3).endpoint.id).toBe("r1");
  });

  test("slots freed go fairly across teams: a team with 20 waiting and one with 2 alternate", () => {
    const { ask, granted } = setup([ep("r1", { max_inflight: 1 })], [key("a", { team: "A" }), key("b", { team: "B" })]);
    const all = [ask("a")];
    for (let i = 0; i < 20; i++) all.push(ask("a"));
    all.push(ask("b"), ask("b"));
    // Each request, once it has its slot, ends: the slot goes to the next in line.
    let running = all[0]!;
    for (let i = 0; i < 6; i++) {
      held(running).release();
      expect(granted.length).toBe(i + 1);
      running = granted[i]!;
    }
    expect(granted.map((c) => c.name)).toEqual(["a", "b", "a", "b", "a", "a"]);
  });

  test("the queue is bounded by maxHeldPerModel (503 too_many_waiting) and the wait by the timeout (503 model_not_ready); a client that leaves is gone at once", () => {
    const { ask, leave, gate, scheduler, statuses } = setup([ep("r1", { max_inflight: 1 })], [key("k")], { maxHeldPerModel: 2, coldStartTimeoutMs: 1000 });
    const running = ask("k");
    held(running);
    const w1 = ask("k");
    const w2 = ask("k");
    const over = ask("k");
    expect(over.lease).toBe("wait");
    expect(over.answered?.status).toBe(503);
    expect(JSON.parse(over.answered!.body).error.code).toBe("too_many_waiting");
    leave(w2);
    expect(gate.waitingByModel().get("m")).toBe(1);
    scheduler.advance(1000);
    expect(w1.answered?.status).toBe(503);
    expect(JSON.parse(w1.answered!.body).error.code).toBe("model_not_ready");
    expect(gate.waitingByModel().size).toBe(0);
    expect(statuses).toEqual([503, 499, 503]);
    // The slot given back finds no one waiting: it simply stays free.
    held(running).release();
    expect(held(ask("k")).endpoint.id).toBe("r1");
  });
});
