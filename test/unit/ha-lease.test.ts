// One leader per epoch: LeaseKeepers on one store, driven by a ManualScheduler. The lease store
// here keeps the SQLite dialect's rules (renewed by its holder while unexpired, taken when free or
// lapsed with the epoch + 1, refused otherwise) on the manual clock, so a lapse takes no real
// time; each keeper reaches it through its own connection, which a test can cut (calls hang or
// fail). The last tests run two keepers on one real SQLite file.

import { afterEach, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { FencedError } from "../../src/control/errors";
import { LeaseKeeper, type LeasePort, type Leadership, controlPlanesView } from "../../src/control/ha";
import type { Lease, NewEvent } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Store } from "../../src/store";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";
import { SQLITE_DEFAULTS } from "../helpers/control-settings";

const silent = pino({ level: "silent" });
const TTL = 3000;
const RENEW = 1000;

/** The lease row, on the manual clock. */
class ClockLeases {
  row: { holder: string; epoch: number; expiresAt: number } | undefined;
  readonly events: (NewEvent & { at: number })[] = [];
  /** Every (epoch, holder) the store ever granted. */
  readonly granted = new Map<number, Set<string>>();
  constructor(readonly clock: ManualScheduler) {}

  acquire(holder: string, ttl: number, take = false): Lease {
    const now = this.clock.mono();
    const r = this.row;
    if (!r) this.row = { holder, epoch: 1, expiresAt: now + ttl };
    else if (r.holder === holder && r.expiresAt > now && !take) r.expiresAt = now + ttl;
    else if (r.holder === holder || r.expiresAt <= now) this.row = { holder, epoch: r.epoch + 1, expiresAt: now + ttl };
    const row = this.row!;
    if (row.holder === holder) (this.granted.get(row.epoch) ?? this.granted.set(row.epoch, new Set()).get(row.epoch)!).add(holder);
    return { holder: row.holder, epoch: row.epoch, expiresInMs: row.expiresAt - now };
  }
  /** What applyPlan's fence checks, in the same transaction as the write. */
  holds(holder: string, epoch: number): boolean {
    return !!this.row && this.row.holder === holder && this.row.epoch === epoch && this.row.expiresAt > this.clock.mono();
  }

  /** One control plane's connection: `mode` cuts it (calls hang, or fail at once), `latencyMs` delays answers. */
  connection(): LeasePort & { mode: "up" | "hang" | "fail"; latencyMs: number } {
    const leases = this;
    const answer = <T>(fn: () => T): Promise<T> => {
      if (conn.mode === "fail") return Promise.reject(new Error("connection refused"));
      if (conn.mode === "hang") return new Promise<T>(() => {});
      if (conn.latencyMs === 0) return Promise.resolve(fn());
      // The store acts when the request arrives, the answer comes back later.
      return new Promise<T>((resolve) => leases.clock.after(conn.latencyMs / 2, () => {
        const v = fn();
        leases.clock.after(conn.latencyMs / 2, () => resolve(v));
      }));
    };
    const conn = {
      mode: "up" as "up" | "hang" | "fail",
      latencyMs: 0,
      acquireLease: (holder: string, ttl: number, take?: boolean) => answer(() => leases.acquire(holder, ttl, take)),
      releaseLease: (holder: string) =>
        answer(() => {
          if (leases.row?.holder === holder) leases.row.expiresAt = leases.clock.mono() - 1;
        }),
      appendEvent: (e: NewEvent & { at: number }) => answer(() => leases.events.push(e)),
    };
    return conn;
  }
}

interface Member {
  keeper: LeaseKeeper;
  conn: ReturnType<ClockLeases["connection"]>;
  changes: Leadership[];
}

/** Connections back up, then every keeper stopped (a release over a cut connection would wait for the manual clock). */
async function stopAll(members: Member[]): Promise<void> {
  for (const m of members) {
    m.conn.mode = "up";
    m.conn.latencyMs = 0;
    await m.keeper.stop();
  }
}

function member(leases: ClockLeases, name: string, o: { timeoutMs?: number; instance?: string; mayLead?: () => Promise<string | undefined> } = {}): Member {
  const conn = leases.connection();
  const changes: Leadership[] = [];
  const keeper = new LeaseKeeper({ store: conn, scheduler: leases.clock, log: silent, name, ttlMs: TTL, renewMs: RENEW, onChange: (l) => changes.push(l), ...o });
  return { keeper, conn, changes };
}

/** Moves time in small steps, checking after each that at most one leads and that it holds the lease. */
async function watchedRun(leases: ClockLeases, members: Member[], ms: number, step = 50): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    await leases.clock.run(step);
    const leading = members.filter((m) => m.keeper.leadership().leading);
    expect(leading.length).toBeLessThanOrEqual(1);
    // A control plane that believes it leads holds the lease by the store's own clock.
    for (const m of leading) expect(leases.holds(m.keeper.holder, m.keeper.leadership().epoch)).toBe(true);
  }
}

function oneHolderPerEpoch(leases: ClockLeases, members: Member[]): void {
  for (const [epoch, holders] of leases.granted) expect({ epoch, holders: [...holders] }).toEqual({ epoch, holders: [...holders].slice(0, 1) });
  // What the keepers said matches: no epoch claimed by two.
  const claimed = new Map<number, Set<string>>();
  for (const m of members) for (const c of m.changes) if (c.leading) (claimed.get(c.epoch) ?? claimed.set(c.epoch, new Set()).get(c.epoch)!).add(c.name!);
  for (const [, names] of claimed) expect(names.size).toBe(1);
}

describe("LeaseKeeper on one store", () => {
  test("barred from leading (the store's schema is newer than it knows): the leader steps down and gives the lease up, the barred standby never takes it, both say why; unbarred, one leads", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    let why: string | undefined;
    const mayLead = async () => why;
    const a = member(leases, "a", { mayLead });
    const b = member(leases, "b", { mayLead });
    await a.keeper.start();
    await b.keeper.start();
    expect(a.keeper.leadership().leading).toBe(true);
    why = "the store's schema is newer than this release knows";
    await watchedRun(leases, [a, b], 10 * TTL);
    for (const m of [a, b]) {
      expect(m.keeper.leadership()).toMatchObject({ leading: false, barred: why });
      expect(m.keeper.barred()).toBe(why);
    }
    // Given up at once, not left to lapse: nobody holds it.
    expect(leases.row!.expiresAt).toBeLessThan(leases.clock.mono());
    why = undefined;
    await watchedRun(leases, [a, b], 2 * RENEW);
    expect([a, b].filter((m) => m.keeper.leadership().leading).length).toBe(1);
    expect([a, b].map((m) => m.keeper.leadership().barred)).toEqual([undefined, undefined]);
    await stopAll([a, b]);
  });

  test("the first takes the lease (epoch 1), the second stands by knowing that epoch; renewals keep it", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    const b = member(leases, "b");
    await a.keeper.start();
    await b.keeper.start();
    expect(a.keeper.leadership()).toEqual({ leading: true, epoch: 1, name: "a" });
    expect(b.keeper.leadership()).toEqual({ leading: false, epoch: 1, name: "b" });
    // Ten TTLs: a renews every second, its lease never lapses, b never takes it.
    await watchedRun(leases, [a, b], 10 * TTL);
    expect(a.keeper.leadership()).toEqual({ leading: true, epoch: 1, name: "a" });
    expect(b.changes.filter((c) => c.leading)).toEqual([]);
    expect(a.changes).toEqual([{ leading: true, epoch: 1, name: "a" }]);
    expect(leases.events.map((e) => [e.kind, e.subject])).toEqual([["control_plane.leading", "control_plane/a"]]);
    await a.keeper.stop();
    await b.keeper.stop();
  });

  test("a leader that dies silently: the standby takes over once the lease lapsed, with a higher epoch", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    const b = member(leases, "b");
    await a.keeper.start();
    await b.keeper.start();
    await leases.clock.run(2 * RENEW);
    const lastRenewal = leases.row!.expiresAt - TTL;
    // a is gone: no renewal, no step-down event (a kill -9 writes nothing). Its timers go with it.
    a.conn.mode = "hang";
    void a.keeper.stop();
    let tookAt: number | undefined;
    for (let t = 0; t < 2 * TTL && tookAt === undefined; t += 10) {
      await leases.clock.run(10);
      if (b.keeper.leadership().leading) tookAt = leases.clock.mono();
    }
    expect(b.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "b" });
    // Not before the lease lapsed, and (the takeover timer) within a few ms of it, not a whole renewal later.
    expect(tookAt! - lastRenewal).toBeGreaterThanOrEqual(TTL);
    expect(tookAt! - lastRenewal).toBeLessThanOrEqual(TTL + 50);
    oneHolderPerEpoch(leases, [a, b]);
    await b.keeper.stop();
  });

  test("a partitioned leader (renewals hang) steps down before its lease ends; the standby's epoch wins and fences the old one", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    const b = member(leases, "b");
    await a.keeper.start();
    await b.keeper.start();
    await leases.clock.run(RENEW / 2);
    a.conn.mode = "hang";
    const leaseEnd = leases.row!.expiresAt;
    let downAt: number | undefined;
    for (let t = 0; t < 3 * TTL; t += 10) {
      await leases.clock.run(10);
      if (downAt === undefined && !a.keeper.leadership().leading) downAt = leases.clock.mono();
      const leading = [a, b].filter((m) => m.keeper.leadership().leading);
      expect(leading.length).toBeLessThanOrEqual(1);
    }
    expect(downAt).toBeDefined();
    expect(downAt!).toBeLessThan(leaseEnd);
    expect(b.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "b" });
    // A plan a wrote under its epoch now is refused by the store, and b's is taken.
    expect(leases.holds("a", 1)).toBe(false);
    expect(leases.holds("b", 2)).toBe(true);
    expect(a.changes.at(-1)).toEqual({ leading: false, epoch: 1, name: "a" });
    // Its connection back, a finds b leading and stands by under b's epoch.
    a.conn.mode = "up";
    await watchedRun(leases, [a, b], 3 * RENEW);
    expect(a.keeper.leadership()).toEqual({ leading: false, epoch: 2, name: "a" });
    oneHolderPerEpoch(leases, [a, b]);
    await a.keeper.stop();
    await b.keeper.stop();
  });

  test("a renewal that fails steps down at once, not at the deadline", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    await a.keeper.start();
    await leases.clock.run(RENEW - 1);
    a.conn.mode = "fail";
    await leases.clock.run(1);
    expect(a.keeper.leadership().leading).toBe(false);
    // The event is best effort: this connection cannot write it.
    expect(leases.events.map((e) => e.kind)).toEqual(["control_plane.leading"]);
    // Back: it takes its own unexpired lease again as a new term, one epoch higher.
    a.conn.mode = "up";
    await leases.clock.run(RENEW);
    expect(a.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "a" });
    await a.keeper.stop();
  });

  test("renewals answered slowly: it leads only until start of the last good renewal + TTL − margin", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    // Renewals may take up to 2.5 s before they count as failed.
    const a = member(leases, "a", { timeoutMs: 2500 });
    await a.keeper.start();
    const began = leases.clock.mono();
    a.conn.mode = "hang";
    for (let t = 0; t < TTL; t += 10) {
      await leases.clock.run(10);
      if (!a.keeper.leadership().leading) break;
    }
    // Renewals at +1 s and +2 s hang; the one at +3 s never starts in time: the deadline ends it.
    expect(leases.clock.mono() - began).toBeLessThanOrEqual(TTL - a.keeper.marginMs);
    expect(leases.clock.mono() - began).toBeGreaterThan(TTL - a.keeper.marginMs - 20);
    expect(a.keeper.leadership().leading).toBe(false);
    await stopAll([a]);
  });

  test("an answer that comes back after its deadline does not make it lead", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a", { timeoutMs: 10_000 });
    a.conn.latencyMs = TTL;
    const started = a.keeper.start();
    await leases.clock.run(TTL + 10);
    await started;
    expect(a.keeper.leadership().leading).toBe(false);
    expect(a.changes.filter((c) => c.leading)).toEqual([]);
    await stopAll([a]);
  });

  test("a fenced plan write steps the leader down at once", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    await a.keeper.start();
    a.keeper.fenced(new FencedError(1));
    expect(a.keeper.leadership()).toEqual({ leading: false, epoch: 1, name: "a" });
    await leases.clock.run(0);
    expect(leases.events.map((e) => e.kind)).toEqual(["control_plane.leading", "control_plane.stepped_down"]);
    await a.keeper.stop();
  });

  test("a plan write of an earlier term, fenced after it took the lease again, does not step it down", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    await a.keeper.start();
    a.conn.mode = "fail";
    await leases.clock.run(RENEW);
    a.conn.mode = "up";
    await leases.clock.run(RENEW);
    expect(a.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "a" });
    a.keeper.fenced(new FencedError(1));
    expect(a.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "a" });
    await a.keeper.stop();
  });

  test("two processes under one name are two holders: one leads, the other stands by, then takes over with a higher epoch", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const first = member(leases, "head", { instance: "p1" });
    const conn = leases.connection();
    const changes: Leadership[] = [];
    const second = { conn, changes, keeper: new LeaseKeeper({ store: conn, scheduler: leases.clock, log: silent, name: "head", instance: "p2", ttlMs: TTL, renewMs: RENEW, onChange: (l) => changes.push(l) }) };
    await first.keeper.start();
    await second.keeper.start();
    expect(first.keeper.leadership()).toEqual({ leading: true, epoch: 1, name: "head", holder: "head@p1" });
    expect(second.keeper.leadership()).toEqual({ leading: false, epoch: 1, name: "head", holder: "head@p2" });
    expect(leases.row!.holder).toBe("head@p1");
    await watchedRun(leases, [first, second], 5 * TTL);
    expect(second.changes.filter((c) => c.leading)).toEqual([]);
    // The first dies silently (a kill -9): the second takes the lease only once it lapsed, as a new term.
    first.conn.mode = "hang";
    await watchedRun(leases, [first, second], 2 * TTL);
    expect(second.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "head", holder: "head@p2" });
    oneHolderPerEpoch(leases, [first, second]);
    const view = controlPlanesView({ rows: [{ name: "head", adminUrl: "http://h:1", routerUrl: "http://h:2", startedAt: 0, seenAgoMs: 0 }], lease: { holder: "head@p2", epoch: 2, expiresInMs: 1000 }, self: "head", ttlMs: TTL });
    expect(view?.members?.map((m) => m.state)).toEqual(["leading"]);
    await stopAll([first, second]);
  });

  test("a clean stop releases the lease: the standby leads on its next round, epoch + 1", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const a = member(leases, "a");
    const b = member(leases, "b");
    await a.keeper.start();
    await b.keeper.start();
    await a.keeper.stop();
    expect(a.keeper.leadership().leading).toBe(false);
    await leases.clock.run(RENEW);
    expect(b.keeper.leadership()).toEqual({ leading: true, epoch: 2, name: "b" });
    expect(leases.events.map((e) => e.kind)).toEqual(["control_plane.leading", "control_plane.stepped_down", "control_plane.leading"]);
    await b.keeper.stop();
  });

  test("many rounds of random cuts among three: never two leaders, never one epoch for two", async () => {
    const leases = new ClockLeases(new ManualScheduler());
    const ms = ["a", "b", "c"].map((n) => member(leases, n));
    for (const m of ms) await m.keeper.start();
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (let i = 0; i < 60; i++) {
      const m = ms[Math.floor(rnd() * 3)]!;
      m.conn.mode = rnd() < 0.5 ? "up" : rnd() < 0.5 ? "hang" : "fail";
      m.conn.latencyMs = rnd() < 0.3 ? Math.floor(rnd() * 2000) : 0;
      await watchedRun(leases, ms, 700);
    }
    oneHolderPerEpoch(leases, ms);
    expect(leases.granted.size).toBeGreaterThan(3);
    await stopAll(ms);
  });
});

describe("two LeaseKeepers on one SQLite file", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  test("one leads, the other stands by; a stop hands over with the epoch + 1 and the old fence is refused", async () => {
    const dir = scratchDir("llmgw-ha-");
    dirs.push(dir);
    const path = join(dir, "llmgw.db");
    const [sa, sb] = [new Store({ path, ...SQLITE_DEFAULTS }), new Store({ path, ...SQLITE_DEFAULTS })];
    const clock = new ManualScheduler();
    const mk = (store: Store, name: string) => new LeaseKeeper({ store, scheduler: clock, log: silent, name, ttlMs: 60_000, renewMs: RENEW, onChange: () => {} });
    const a = mk(sa, "a");
    const b = mk(sb, "b");
    await a.start();
    await b.start();
    expect(a.leadership()).toEqual({ leading: true, epoch: 1, name: "a" });
    expect(b.leadership()).toEqual({ leading: false, epoch: 1, name: "b" });
    const plan = { create: [], update: [], remove: [], modelState: new Map(), nodeAdmin: [], events: [{ kind: "t", subject: "t", message: "by a" }] };
    await sa.applyPlan(plan, 0, { holder: "a", epoch: 1 });
    await expect(sb.applyPlan(plan, 0, { holder: "b", epoch: 1 })).rejects.toBeInstanceOf(FencedError);
    await a.stop();
    await clock.run(RENEW);
    expect(b.leadership()).toEqual({ leading: true, epoch: 2, name: "b" });
    await expect(sa.applyPlan(plan, 0, { holder: "a", epoch: 1 })).rejects.toBeInstanceOf(FencedError);
    await sb.applyPlan(plan, 0, { holder: "b", epoch: 2 });
    const kinds = (await sb.listEvents({ limit: 10 })).map((e) => e.kind);
    expect(kinds).toEqual(["control_plane.leading", "t", "control_plane.stepped_down", "control_plane.leading", "t"]);
    await b.stop();
    sa.close();
    sb.close();
  });

  test("by the database's clock: a lease of 300 ms that nobody renews is taken by the other", async () => {
    const dir = scratchDir("llmgw-ha-");
    dirs.push(dir);
    const path = join(dir, "llmgw.db");
    const [sa, sb] = [new Store({ path, ...SQLITE_DEFAULTS }), new Store({ path, ...SQLITE_DEFAULTS })];
    const clock = new ManualScheduler();
    // Renewals only when the test says (the clock does not move): a takes it once, then falls silent.
    const a = new LeaseKeeper({ store: sa, scheduler: clock, log: silent, name: "a", ttlMs: 300, renewMs: 100_000, onChange: () => {} });
    const b = new LeaseKeeper({ store: sb, scheduler: clock, log: silent, name: "b", ttlMs: 300, renewMs: 100_000, onChange: () => {} });
    await a.renew();
    await b.renew();
    expect([a.leadership().leading, b.leadership().leading]).toEqual([true, false]);
    // The lapse is the database's real clock: the one wait no manual clock can shorten.
    await until("b takes the lapsed lease", async () => {
      await b.renew();
      return b.leadership().leading;
    }, { timeoutMs: 5000, everyMs: 50 });
    expect(b.leadership().epoch).toBe(2);
    sa.close();
    sb.close();
  });
});

describe("controlPlanesView", () => {
  const rows = [
    { name: "a", adminUrl: "http://10.0.0.1:8001", routerUrl: "", startedAt: 0, seenAgoMs: 100 },
    { name: "b", adminUrl: "http://10.0.0.2:8001", routerUrl: "", startedAt: 0, seenAgoMs: 2000 },
    { name: "c", adminUrl: "http://10.0.0.3:8001", routerUrl: "", startedAt: 0, seenAgoMs: 20_000 },
  ];
  test("leading, standing by, not answering; this; the floating address", () => {
    expect(controlPlanesView({ rows, lease: { holder: "a", epoch: 3, expiresInMs: 5000 }, self: "b", ttlMs: 15_000, floating: { address: "10.0.0.100", up: true } })).toEqual({
      members: [
        { name: "a", address: "http://10.0.0.1:8001", state: "leading" },
        { name: "b", address: "http://10.0.0.2:8001", state: "standing by", this: true },
        { name: "c", address: "http://10.0.0.3:8001", state: "not answering" },
      ],
      floating: "10.0.0.100",
      floating_up: true,
    });
  });
  test("an expired lease leads nobody; no floating address, no floating fields", () => {
    const v = controlPlanesView({ rows, lease: { holder: "a", epoch: 3, expiresInMs: 0 }, self: "a", ttlMs: 15_000 });
    expect(v.members!.map((m) => m.state)).toEqual(["standing by", "standing by", "not answering"]);
    expect("floating" in v || "floating_up" in v).toBe(false);
  });
});
