// Several control planes on one store: which one leads. A LeaseKeeper renews (or tries to take)
// the leader lease every lease_renew, on the injected Scheduler, and tells the control plane whether
// it leads and under which epoch. It leads only while the store's answer names it with time left,
// and steps down at once when a renewal fails or takes too long, when its own monotonic deadline
// (start of the last good renewal + TTL − a margin) passes, or when a plan write was fenced: a
// leader cut off from the store stops before its lease can lapse, so no two ever act on one
// epoch. The lease is held by this process, not by its name (two processes under one name, or a
// restarted one while its predecessor's lease runs, are two holders), and every taking of it,
// even by the process that held it before stepping down, raises the epoch: one epoch, one term of
// one process. Also here: the summary's `control_planes`, as a pure function of what the store says.

import type { Logger } from "pino";
import type { Scheduler, Timer } from "../lib/scheduler";
import type { Summary } from "../protocol/views";
import type { FencedError } from "./errors";
import type { EventsPort, MembershipPort } from "./store-port";
import type { ControlPlaneRow, Lease } from "./types";

/** What the keeper needs of the store. */
export type LeasePort = Pick<MembershipPort, "acquireLease" | "releaseLease"> & Pick<EventsPort, "appendEvent">;

export interface Leadership {
  leading: boolean;
  /** The epoch it leads under; standing by, the lease row's (what the leader's assignments carry). */
  epoch: number;
  name?: string;
  /** The lease holder this process writes (leaseHolder()), when it is not the bare name: what its fenced writes carry. */
  holder?: string;
  /** Why it stands by whatever the lease says (the store's schema is newer than it knows); absent when it may lead. */
  barred?: string;
}

/** The lease holder of one process: its name and an id of its own, so two processes under one name are two holders. */
export function leaseHolder(name: string, instance: string): string {
  return `${name}@${instance}`;
}

/** The control plane's name in a lease holder (names never hold "@"). */
export function holderName(holder: string): string {
  const at = holder.indexOf("@");
  return at < 0 ? holder : holder.slice(0, at);
}

export interface LeaseKeeperOptions {
  store: LeasePort;
  scheduler: Scheduler;
  log: Logger;
  /** This control plane's name (`serve --name`). */
  name: string;
  /** This process's own id (random at each start): the lease is held as leaseHolder(name, instance). Without one, the name alone. */
  instance?: string;
  ttlMs: number;
  renewMs: number;
  /** A renewal taking longer than this counts as failed (default: the renewal interval, at most a third of the TTL). */
  timeoutMs?: number;
  /** Leadership ends this long before the local estimate of the lease's end (default: a tenth of the TTL, at most 1 s). */
  marginMs?: number;
  /** Every change of leading or epoch (the control plane's leadership cell, leadership.ts). */
  onChange: (l: Leadership) => void;
  /** After every attempt, with the lease as the store answered (undefined when it did not). */
  onRound?: (lease: Lease | undefined) => void;
  /**
   * Asked before every attempt: why this control plane must not lead now (the store's schema is
   * newer than it knows), or undefined. Barred, it stands by, gives up a lease it holds, and says why.
   */
  mayLead?: () => Promise<string | undefined>;
}

/** A standby tries again this long after the lease it saw should have lapsed. */
const TAKEOVER_SLACK_MS = 20;

export class LeaseKeeper {
  private state: Leadership;
  private last: Lease | undefined;
  /** Attempts made; an answer to an older one (timed out meanwhile) is ignored. */
  private round = 0;
  private inFlight = false;
  private every: Timer | undefined;
  private deadline: Timer | undefined;
  private takeover: Timer | undefined;
  private stopped = false;
  /** The cause of the failing renewals, logged once per episode. */
  private failing: string | undefined;
  /** Why it may not lead (mayLead), while it may not. */
  private barredWhy: string | undefined;
  readonly timeoutMs: number;
  readonly marginMs: number;
  /** What this keeper writes as the lease's holder. */
  readonly holder: string;

  constructor(private readonly o: LeaseKeeperOptions) {
    this.holder = o.instance === undefined ? o.name : leaseHolder(o.name, o.instance);
    this.state = { leading: false, epoch: 0, ...this.who() };
    this.timeoutMs = Math.max(1, o.timeoutMs ?? Math.min(o.renewMs, o.ttlMs / 3));
    this.marginMs = Math.max(0, o.marginMs ?? Math.min(1000, o.ttlMs / 10));
  }

  leadership(): Leadership {
    return this.state;
  }
  /** The lease as the store last answered. */
  lease(): Lease | undefined {
    return this.last;
  }
  /** Why this control plane stands by whatever the lease says (mayLead), or undefined. */
  barred(): string | undefined {
    return this.barredWhy;
  }

  /** The first attempt now (resolved once answered), then one every renewMs. */
  async start(): Promise<void> {
    this.every = this.o.scheduler.every(this.o.renewMs, () => void this.renew());
    await this.renew();
  }

  /** One attempt to renew or take the lease. */
  async renew(): Promise<void> {
    if (this.inFlight || this.stopped) return;
    this.inFlight = true;
    const round = ++this.round;
    const began = this.o.scheduler.mono();
    const timeout = this.o.scheduler.after(this.timeoutMs, () => {
      if (round !== this.round || this.stopped) return;
      // The next attempt may start; this one's answer, if it ever comes, is ignored.
      this.round++;
      this.inFlight = false;
      this.failed(`the lease renewal took longer than ${this.timeoutMs} ms`);
    });
    try {
      const barred = await this.bar();
      if (round !== this.round || this.stopped) return;
      if (barred !== undefined) return await this.standBy(barred);
      // Standing by, it asks to take the lease: a new term, a new epoch, even if the lease is still its own.
      const lease = await this.o.store.acquireLease(this.holder, this.o.ttlMs, !this.state.leading);
      if (round !== this.round || this.stopped) return;
      this.took(lease, began);
    } catch (e) {
      if (round !== this.round || this.stopped) return;
      this.failed(`the lease could not be renewed: ${(e as Error).message}`);
    } finally {
      timeout.cancel();
      if (round === this.round) this.inFlight = false;
    }
  }

  /** What mayLead says; a check that fails bars nothing (the lease's own round finds a store that does not answer). */
  private async bar(): Promise<string | undefined> {
    const why = this.o.mayLead ? await this.o.mayLead().catch(() => undefined) : undefined;
    if (why === this.barredWhy) return why;
    if (why !== undefined) this.o.log.error({ name: this.o.name, why }, `control plane ${this.o.name} stands by and will not lead: ${why}`);
    else this.o.log.info({ name: this.o.name }, `control plane ${this.o.name} may lead again`);
    this.barredWhy = why;
    const { barred: _, ...rest } = this.state;
    this.state = { ...rest, ...(why !== undefined ? { barred: why } : {}) };
    this.o.onChange(this.state);
    return why;
  }

  /** Barred from leading: steps down (giving the lease up so a standby takes over at once) and stays a standby. */
  private async standBy(why: string): Promise<void> {
    const was = this.state;
    this.deadline?.cancel();
    this.change({ leading: false, epoch: was.epoch }, why);
    if (was.leading) await this.o.store.releaseLease(this.holder).catch(() => undefined);
    // Not the lease last taken (it may name this one): whoever reads the view reads it afresh.
    this.o.onRound?.(undefined);
  }

  /** A plan write the store fenced: another leads now. */
  fenced(e: FencedError): void {
    if (this.stopped) return;
    // A write of an earlier term of this process, fenced by the term it leads now: nothing to step down from.
    if (this.state.leading && e.epoch < this.state.epoch) return;
    this.change({ leading: false, epoch: Math.max(e.epoch, this.state.epoch) }, `a plan write was fenced (epoch ${e.epoch} no longer holds the lease)`);
  }

  /** Stops renewing; a leader gives the lease up so a standby takes over at once. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    const was = this.state;
    if (was.leading) this.change({ leading: false, epoch: was.epoch }, "this control plane is stopping");
    this.stopped = true;
    for (const t of [this.every, this.deadline, this.takeover]) t?.cancel();
    try {
      // Bounded: a store that does not answer must not hold up the stop (the lease then lapses by itself).
      let timer: Timer | undefined;
      const late = new Promise<never>((_, reject) => (timer = this.o.scheduler.after(this.timeoutMs, () => reject(new Error(`no answer within ${this.timeoutMs} ms`)))));
      await Promise.race([this.o.store.releaseLease(this.holder), late]).finally(() => timer?.cancel());
      if (was.leading) this.o.log.info({ name: this.o.name, epoch: was.epoch }, "leader lease released: a standby takes over at once");
    } catch (e) {
      if (was.leading) this.o.log.warn({ name: this.o.name, epoch: was.epoch, err: (e as Error).message }, "leader lease not released: a standby takes over once it lapses");
    }
  }

  private took(lease: Lease, began: number): void {
    this.last = lease;
    if (this.failing !== undefined) this.o.log.info({ name: this.o.name, was: this.failing }, "the lease store answers again");
    this.failing = undefined;
    this.deadline?.cancel();
    this.takeover?.cancel();
    const mine = lease.holder === this.holder && lease.expiresInMs > 0;
    // Counted from before the request left: the store's lease cannot end earlier than this.
    const until = began + Math.min(this.o.ttlMs, lease.expiresInMs) - this.marginMs;
    const left = until - this.o.scheduler.mono();
    if (mine && left > 0) {
      this.deadline = this.o.scheduler.after(left, () => this.change({ leading: false, epoch: this.state.epoch }, "no renewal succeeded before the lease's deadline"));
      this.change({ leading: true, epoch: lease.epoch }, "it holds the lease");
    } else {
      this.change({ leading: false, epoch: lease.epoch }, mine ? "the renewal came back too late" : this.heldBy(lease.holder));
      // Try again the moment the holder's lease should lapse, if that is before the next round.
      const lapse = Math.max(0, lease.expiresInMs) + TAKEOVER_SLACK_MS;
      if (!mine && lapse < this.o.renewMs) this.takeover = this.o.scheduler.after(lapse, () => void this.renew());
    }
    this.o.onRound?.(lease);
  }

  private failed(why: string): void {
    this.deadline?.cancel();
    if (this.failing === undefined && !this.state.leading) this.o.log.warn({ name: this.o.name, err: why }, "standing by: the lease store does not answer");
    this.failing = why;
    this.change({ leading: false, epoch: this.state.epoch }, why);
    this.o.onRound?.(undefined);
  }

  /** Who holds the lease, as a log line says it: another process under this one's name is named as such. */
  private heldBy(holder: string): string {
    const name = holderName(holder);
    return name === this.o.name && holder !== this.holder ? `another process named ${name} (${holder}) holds the lease` : `${name} holds the lease`;
  }

  private who(): { name: string; holder?: string } {
    return this.holder === this.o.name ? { name: this.o.name } : { name: this.o.name, holder: this.holder };
  }

  private change(next: { leading: boolean; epoch: number }, why: string): void {
    const prev = this.state;
    if (prev.leading === next.leading && prev.epoch === next.epoch) return;
    if (!next.leading) this.deadline?.cancel();
    this.state = { ...next, ...this.who(), ...(this.barredWhy !== undefined ? { barred: this.barredWhy } : {}) };
    this.o.onChange(this.state);
    if (prev.leading === next.leading) return;
    const { name } = this.o;
    const kind = next.leading ? "control_plane.leading" : "control_plane.stepped_down";
    const epoch = next.leading ? next.epoch : prev.epoch;
    const message = next.leading ? `control plane ${name} leads (epoch ${epoch})` : `control plane ${name} stepped down (epoch ${epoch}): ${why}`;
    const holder = this.holder;
    if (next.leading) this.o.log.info({ kind, name, holder, epoch }, message);
    else this.o.log.warn({ kind, name, holder, epoch, why }, message);
    // Best effort: a leader stepping down because the store is gone cannot write this either.
    void this.o.store.appendEvent({ at: this.o.scheduler.now(), kind, subject: `control_plane/${name}`, message, data: { epoch, name, holder } }).catch(() => undefined);
  }
}

export interface ControlPlanesInput {
  rows: readonly ControlPlaneRow[];
  lease: Lease | undefined;
  /** The answering control plane's name. */
  self: string;
  ttlMs: number;
  floating?: { address: string; up: boolean };
  /** Why the answering control plane stands by whatever the lease says (LeaseKeeper.barred()). */
  barred?: string;
}

/**
 * The summary's `control_planes`: leading (the lease's unexpired holder), standing by (seen
 * within the TTL), not answering (else). Every control plane builds the same list from the same
 * rows; only `this` differs.
 */
export function controlPlanesView(i: ControlPlanesInput): Summary["control_planes"] {
  const holder = i.lease && i.lease.expiresInMs > 0 ? holderName(i.lease.holder) : undefined;
  const members = i.rows.map((r) => ({
    name: r.name,
    address: r.adminUrl,
    state: r.name === holder ? "leading" : r.seenAgoMs <= i.ttlMs ? "standing by" : "not answering",
    ...(r.version !== undefined ? { version: r.version } : {}),
    ...(r.protocol !== undefined ? { protocol: r.protocol } : {}),
    ...(r.name === i.self ? { this: true, ...(i.barred !== undefined ? { barred: i.barred } : {}) } : {}),
  }));
  return { members, ...(i.floating ? { floating: i.floating.address, floating_up: i.floating.up } : {}) };
}
