// The order in which requests waiting for a saturated model (every replica at its max_inflight)
// get the slots that free up: interactive before batch, then weighted fair queueing across
// teams, then across the keys of a team, so a team sending 100 times more requests gets its fair
// share of slots, not 100 times the light team's. Bounded (past `max` a push is refused) and
// timed (a waiter not served within `timeoutMs` is taken out and handed to onTimeout); a waiter
// whose client left is removed at once. Time comes only from the injected scheduler.
//
// Fairness is self-clocked fair queueing with every request costing one slot: each active flow
// (a team in its tier, a key in its team) carries the virtual finish tag of its next request,
// and the least tag is served. A flow that becomes active starts at the current virtual time
// (the tag last served) plus its cost, never earlier, so idle time banks no credit and a team
// that has just arrived is served within a round, ahead of a flood already queued. Flows are in
// indexed binary heaps, so push, shift and remove are O(log n) in the active flows. A key without
// a team is a team of its own (its SHA-256 is its team's name): a teamless key is never worse
// off than a team, and teamless keys do not crowd each other into one shared share.

import type { Scheduler, Timer } from "../lib/scheduler";
import type { KeyTier } from "../protocol/routing";

/** One waiting request: what a caller keeps to remove it (its client left). */
export interface Waiter<T> {
  readonly item: T;
  readonly tier: KeyTier;
  /** @internal */ flow: KeyFlow<T> | undefined;
  /** @internal */ prev: Waiter<T> | undefined;
  /** @internal */ next: Waiter<T> | undefined;
  /** @internal */ timer: Timer | undefined;
}

export interface FairQueueOptions {
  readonly scheduler: Pick<Scheduler, "after">;
  /** Waiters at most; a push past it is refused. */
  readonly max: number;
  /** A waiter not served within this is taken out and given to onTimeout. */
  readonly timeoutMs: number;
}

interface Flow {
  tag: number;
  /** Tie-break between equal tags: the flow activated first goes first. */
  seq: number;
  /** Index in its heap; -1 when not in one. */
  at: number;
}

interface KeyFlow<T> extends Flow {
  readonly id: string;
  readonly team: TeamFlow<T>;
  head: Waiter<T> | undefined;
  tail: Waiter<T> | undefined;
}

interface TeamFlow<T> extends Flow {
  readonly id: string;
  readonly tier: TierQueue<T>;
  readonly cost: number;
  /** Virtual time among its keys: the tag of its key served last. */
  vtime: number;
  readonly keys: Heap<KeyFlow<T>>;
  readonly byKey: Map<string, KeyFlow<T>>;
}

interface TierQueue<T> {
  /** Virtual time among its teams. */
  vtime: number;
  readonly teams: Heap<TeamFlow<T>>;
  readonly byTeam: Map<string, TeamFlow<T>>;
}

export class FairQueue<T> {
  private readonly tiers: Record<KeyTier, TierQueue<T>> = { interactive: newTier(), batch: newTier() };
  private count = 0;
  private seq = 0;

  constructor(
    private readonly o: FairQueueOptions,
    private readonly onTimeout: (item: T) => void,
  ) {}

  get size(): number {
    return this.count;
  }

  /**
   * Queues `item` for `key` of `team` in `tier`; `weight` is the team's share (2: twice the
   * slots of a team of weight 1 while both wait). undefined when the queue is full.
   */
  push(item: T, tier: KeyTier, team: string, key: string, weight = 1): Waiter<T> | undefined {
    if (this.count >= this.o.max) return undefined;
    const tq = this.tiers[tier];
    let tf = tq.byTeam.get(team);
    if (tf === undefined) {
      tf = { id: team, tier: tq, cost: 1 / (weight > 0 ? weight : 1), tag: 0, seq: 0, at: -1, vtime: 0, keys: new Heap(), byKey: new Map() };
      tq.byTeam.set(team, tf);
    }
    let kf = tf.byKey.get(key);
    if (kf === undefined) {
      kf = { id: key, team: tf, tag: 0, seq: 0, at: -1, head: undefined, tail: undefined };
      tf.byKey.set(key, kf);
    }
    const w: Waiter<T> = { item, tier, flow: kf, prev: kf.tail, next: undefined, timer: undefined };
    if (kf.tail !== undefined) kf.tail.next = w;
    else kf.head = w;
    kf.tail = w;
    if (kf.at < 0) {
      kf.tag = tf.vtime + 1;
      kf.seq = this.seq++;
      tf.keys.push(kf);
    }
    if (tf.at < 0) {
      tf.tag = tq.vtime + tf.cost;
      tf.seq = this.seq++;
      tq.teams.push(tf);
    }
    this.count++;
    w.timer = this.o.scheduler.after(this.o.timeoutMs, () => {
      if (this.remove(w)) this.onTimeout(item);
    });
    return w;
  }

  /** The waiter served next, without taking it out. */
  peek(): Waiter<T> | undefined {
    const tq = this.tiers.interactive.teams.size > 0 ? this.tiers.interactive : this.tiers.batch;
    return tq.teams.min()?.keys.min()?.head;
  }

  /** Takes out the waiter served next, advancing its team's and its key's virtual time. */
  shift(): T | undefined {
    const w = this.peek();
    if (w === undefined) return undefined;
    const kf = w.flow!;
    const tf = kf.team;
    const tq = tf.tier;
    tq.vtime = tf.tag;
    tf.vtime = kf.tag;
    this.unlink(w);
    // The flows still waiting pay for the slot just given: their next request's tag is one
    // cost later. Flows emptied were dropped by unlink.
    if (kf.at >= 0) {
      kf.tag += 1;
      tf.keys.update(kf);
    }
    if (tf.at >= 0) {
      tf.tag += tf.cost;
      tq.teams.update(tf);
    }
    return w.item;
  }

  /** Takes a waiter out (its client left, or its time is up); false if it was no longer queued. */
  remove(w: Waiter<T>): boolean {
    if (w.flow === undefined) return false;
    this.unlink(w);
    return true;
  }

  private unlink(w: Waiter<T>): void {
    const kf = w.flow!;
    w.flow = undefined;
    w.timer?.cancel();
    w.timer = undefined;
    if (w.prev !== undefined) w.prev.next = w.next;
    else kf.head = w.next;
    if (w.next !== undefined) w.next.prev = w.prev;
    else kf.tail = w.prev;
    w.prev = w.next = undefined;
    this.count--;
    if (kf.head !== undefined) return;
    // An empty flow is forgotten: the next push starts it at the virtual time then, which is
    // never below the tag it was last served at.
    const tf = kf.team;
    tf.keys.remove(kf);
    tf.byKey.delete(kf.id);
    if (tf.keys.size > 0) return;
    tf.tier.teams.remove(tf);
    tf.tier.byTeam.delete(tf.id);
  }
}

function newTier<T>(): TierQueue<T> {
  return { vtime: 0, teams: new Heap(), byTeam: new Map() };
}

/** A binary min-heap of flows by (tag, seq) that keeps each flow's index, for O(log n) update and removal. */
class Heap<F extends Flow> {
  private readonly a: F[] = [];

  get size(): number {
    return this.a.length;
  }

  min(): F | undefined {
    return this.a[0];
  }

  push(f: F): void {
    f.at = this.a.length;
    this.a.push(f);
    this.up(f.at);
  }

  /** Restores the order after f's tag grew or shrank. */
  update(f: F): void {
    this.down(f.at);
    this.up(f.at);
  }

  remove(f: F): void {
    const i = f.at;
    if (i < 0) return;
    const last = this.a.pop()!;
    f.at = -1;
    if (last === f) return;
    this.a[i] = last;
    last.at = i;
    this.update(last);
  }

  private less(x: F, y: F): boolean {
    return x.tag < y.tag || (x.tag === y.tag && x.seq < y.seq);
  }

  private up(i: number): void {
    const a = this.a;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(a[i]!, a[p]!)) return;
      this.swap(i, p);
      i = p;
    }
  }

  private down(i: number): void {
    const a = this.a;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= a.length) return;
      const r = l + 1;
      const c = r < a.length && this.less(a[r]!, a[l]!) ? r : l;
      if (!this.less(a[c]!, a[i]!)) return;
      this.swap(i, c);
      i = c;
    }
  }

  private swap(i: number, j: number): void {
    const a = this.a;
    const x = a[i]!;
    const y = a[j]!;
    a[i] = y;
    a[j] = x;
    y.at = i;
    x.at = j;
  }
}
