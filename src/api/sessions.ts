// The dashboard's sessions: random ids held server-side in memory, each with its own CSRF
// token, an idle expiry and an absolute one. Only a hash of the id is kept, so a heap dump or a
// log of the map reveals no usable cookie. A restart forgets every session (everyone signs in
// again), which is the price of keeping them out of the store.

import { randomBytes } from "node:crypto";
import { sameSecret, sha256base64url } from "../lib/digest";
import type { Scheduler } from "../lib/scheduler";

/** The wall clock a session or page reads (a Scheduler, or just its now()). */
type Clock = Pick<Scheduler, "now">;

/** A session lasts at most this long from sign-in, however busy. */
export const SESSION_ABSOLUTE_MS = 12 * 3600_000;
/** And ends after this long without a request (the open page refreshes every 2s). */
export const SESSION_IDLE_MS = 3600_000;
/** Sessions kept at most; signing in beyond this ends the oldest. Only the admin token signs in. */
export const SESSION_MAX = 1000;

export interface Session {
  /** The token every state-changing form of this session carries. */
  csrf: string;
  created: number;
  lastSeen: number;
}

const hash = sha256base64url;
const random = () => randomBytes(32).toString("base64url");

export interface SessionStoreOptions {
  clock: Clock;
  absoluteMs?: number;
  idleMs?: number;
  max?: number;
}

export class SessionStore {
  // Insertion order is sign-in order, so the first entry is the oldest.
  private readonly byHash = new Map<string, Session>();
  private readonly clock: Clock;
  readonly absoluteMs: number;
  readonly idleMs: number;
  private readonly max: number;

  constructor(o: SessionStoreOptions) {
    this.clock = o.clock;
    this.absoluteMs = o.absoluteMs ?? SESSION_ABSOLUTE_MS;
    this.idleMs = o.idleMs ?? SESSION_IDLE_MS;
    this.max = o.max ?? SESSION_MAX;
  }

  /** A new session: its id (for the cookie, shown once) and its CSRF token. */
  create(): { id: string; session: Session } {
    this.sweep();
    while (this.byHash.size >= this.max) this.byHash.delete(this.byHash.keys().next().value!);
    const id = random();
    const now = this.clock.now();
    const session: Session = { csrf: random(), created: now, lastSeen: now };
    this.byHash.set(hash(id), session);
    return { id, session };
  }

  /** The live session for a cookie value, its idle timer restarted; undefined if none or expired. */
  touch(id: string | undefined): Session | undefined {
    if (id === undefined || id.length === 0 || id.length > 200) return undefined;
    const key = hash(id);
    const s = this.byHash.get(key);
    if (!s) return undefined;
    const now = this.clock.now();
    if (this.expired(s, now)) {
      this.byHash.delete(key);
      return undefined;
    }
    s.lastSeen = now;
    return s;
  }

  revoke(id: string | undefined): void {
    if (id !== undefined && id.length <= 200) this.byHash.delete(hash(id));
  }

  get size(): number {
    return this.byHash.size;
  }

  private expired(s: Session, now: number): boolean {
    // A clock that went backwards does not extend a session: both bounds are checked both ways.
    return now - s.created >= this.absoluteMs || now - s.lastSeen >= this.idleMs || now < s.created - this.idleMs;
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [k, s] of this.byHash) if (this.expired(s, now)) this.byHash.delete(k);
  }
}

/** Whether a presented CSRF token is the session's, in constant time. */
export function csrfMatches(presented: unknown, s: Session): boolean {
  if (typeof presented !== "string" || presented.length === 0 || presented.length > 200) return false;
  return sameSecret(presented, s.csrf);
}
