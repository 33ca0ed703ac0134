// Rate and concurrency limits of client keys and their teams, on one router: requests per
// minute, tokens per minute and requests in flight, checked when a request arrives, before its
// body goes anywhere. A key is held to its own limits and to its team's; a team's are shared by
// all its keys (counters by team name). The check is O(1) and allocates nothing when it admits:
// each key's and team's state is made when the control plane publishes the keys, kept across
// publications for the keys (and teams) that stay, so an update never resets a window, and
// dropped with the key. Time is the injected scheduler's monotonic clock.
//
// The window: a token bucket per limit, refilled continuously (limit / 60,000 per ms) up to the
// limit, so a full minute's allowance is also the largest burst. Worst case over-admission: in
// any 60 s, at most twice the limit (a full bucket spent at once, then a minute of refill); in
// any aligned minute after an idle one, at most the limit plus what refills meanwhile. For
// tokens, the completion is counted as it streams and the usage settled when the answer ends,
// after admission: a key's tokens in a minute may also pass by the completions of the requests
// already in flight when its allowance ran out (the bucket goes below zero, and refill pays the
// debt before anything more is admitted).
//
// Several routers (head nodes on one store): each holds a share of every per-minute allowance,
// which its control plane recomputes once a tick from every router's demand (control/
// limit-shares.ts) and sends here (setShares). A bucket's size and refill are then limit × share;
// a share that shrinks caps the level at once (what this router did not use goes back to the
// others), one that grows only refills faster (nothing is handed out twice). The shares of the
// live routers sum to at most 1, so together they admit no more than one router would with the
// whole limit. The check stays local and O(1); a new share touches only the buckets' sizes.
// Requests in flight (max-concurrent) are shared in whole slots: each router may have its slots
// in flight, the slots of all summing to at most the limit.

import type { Scheduler } from "../lib/scheduler";
import { type ApiKeyEntry, type KeyTier, type LimitShares, type LimitUseEntry, type UsageLimits, limitItem } from "../protocol/routing";
import { type Reply, openAIError } from "./errors";

const MINUTE_MS = 60_000;

/**
 * A request's prompt tokens before the engine counts them: its body's bytes / 4 (about four
 * characters a token for English text and JSON; the JSON around the messages makes it an
 * overestimate, never much under). Replaced by the engine's prompt_tokens once its usage comes.
 */
export function promptEstimate(bodyBytes: number): number {
  return Math.ceil(bodyBytes / 4);
}

/**
 * One per-minute limit: a token bucket holding up to `cap` (the limit × this router's share of
 * it), refilled at cap / 60,000 per ms. The level may go below zero: tokens counted after
 * admission (a streamed completion, a usage larger than the estimate) are a debt refill pays
 * before anything more is admitted.
 */
export class Bucket {
  level: number;
  last: number;
  cap: number;
  perMs: number;
  /** The limit as set (what x-ratelimit-limit-* says). */
  limit: number;
  /** This router's share of it (1 alone). */
  share: number;
  /** Made while shares were awaited (empty): filled to its first share when that comes. */
  unfilled: boolean;

  constructor(limit: number, now: number, share = 1, unfilled = false) {
    this.limit = limit;
    this.share = share;
    this.cap = limit * share;
    this.perMs = this.cap / MINUTE_MS;
    this.level = unfilled ? 0 : this.cap;
    this.unfilled = unfilled;
    this.last = now;
  }

  refill(now: number): void {
    if (now <= this.last) return;
    const l = this.level + (now - this.last) * this.perMs;
    this.level = l > this.cap ? this.cap : l;
    this.last = now;
  }

  /** A new limit keeps what was used: the level is only capped by it. */
  setLimit(limit: number): void {
    this.limit = limit;
    this.resize();
  }

  /**
   * A new share (refill to now first): smaller, the level is capped (the rest goes back to the
   * other routers); larger, only the refill is faster. A bucket made while shares were awaited
   * starts full at its first share, as a bucket made then would.
   */
  setShare(share: number): void {
    this.share = share;
    this.resize();
    if (this.unfilled) {
      this.level = this.cap;
      this.unfilled = false;
    }
  }

  private resize(): void {
    this.cap = this.limit * this.share;
    this.perMs = this.cap / MINUTE_MS;
    if (this.level > this.cap) this.level = this.cap;
  }

  /** Milliseconds until `need` is available (with no share here, until the next share may come). */
  waitMs(need: number): number {
    return need <= this.level ? 0 : this.perMs > 0 ? (need - this.level) / this.perMs : 1000;
  }

  /** Milliseconds until the bucket is full again (OpenAI's x-ratelimit-reset-*). */
  resetMs(): number {
    return this.level >= this.cap ? 0 : this.perMs > 0 ? (this.cap - this.level) / this.perMs : 1000;
  }
}

/** The counters of one key or one team. */
export class Counters {
  rpm: Bucket | undefined = undefined;
  tpm: Bucket | undefined = undefined;
  /** This router's slots of the max-concurrent (all of it alone). */
  maxConcurrent = Infinity;
  /** The max-concurrent as set. */
  concurrentLimit = Infinity;
  inflight = 0;
  /** Requests and tokens asked since the router started, admitted or refused: the demand several routers share a limit by. */
  askedRequests = 0;
  askedTokens = 0;
  /** Of those, the ones admitted (and the tokens they spent): a router using its share keeps it. */
  usedRequests = 0;
  usedTokens = 0;
  /** The names of its allowances in limit shares. */
  readonly rpmItem: string;
  readonly tpmItem: string;
  readonly conItem: string;

  constructor(
    readonly kind: "key" | "team",
    readonly name: string,
  ) {
    this.rpmItem = limitItem(kind, "rpm", name);
    this.tpmItem = limitItem(kind, "tpm", name);
    this.conItem = limitItem(kind, "con", name);
  }

  /** Takes the limits published now; the buckets of the limits that stay keep their level. */
  apply(l: UsageLimits | undefined, now: number, shares: ShareBook): void {
    this.rpm = bucketFor(this.rpm, l?.rpm, now, shares, this.rpmItem);
    this.tpm = bucketFor(this.tpm, l?.tpm, now, shares, this.tpmItem);
    this.concurrentLimit = l?.maxConcurrent !== undefined && l.maxConcurrent > 0 ? l.maxConcurrent : Infinity;
    this.maxConcurrent = shares.slotsOf(this.conItem, this.concurrentLimit);
  }

  /** Takes this router's shares now. */
  share(now: number, shares: ShareBook): void {
    for (const [b, item] of [
      [this.rpm, this.rpmItem],
      [this.tpm, this.tpmItem],
    ] as const) {
      if (b === undefined) continue;
      b.refill(now);
      b.setShare(shares.of(item));
    }
    this.maxConcurrent = shares.slotsOf(this.conItem, this.concurrentLimit);
  }
}

/** This router's shares of the allowances, as its control plane last sent them (1 each alone). */
class ShareBook {
  private byItem: ReadonlyMap<string, number> = new Map();
  private slots: ReadonlyMap<string, number> = new Map();
  private fallback = 1;
  /** Shares are coming but not computed yet: buckets made meanwhile wait for theirs, empty. */
  awaiting = false;

  set(s: LimitShares): void {
    this.byItem = new Map(s.shares);
    this.slots = new Map(s.slots ?? []);
    this.fallback = s.fallback;
    this.awaiting = s.awaiting === true;
  }

  of(item: string): number {
    return this.byItem.get(item) ?? this.fallback;
  }

  /** This router's slots of a max-concurrent of `limit` (Infinity: none). */
  slotsOf(item: string, limit: number): number {
    if (limit === Infinity) return Infinity;
    const s = this.slots.get(item);
    return s !== undefined ? Math.min(s, limit) : Math.floor(limit * this.fallback + 1e-9);
  }
}

function bucketFor(b: Bucket | undefined, limit: number | undefined, now: number, shares: ShareBook, item: string): Bucket | undefined {
  if (limit === undefined || !(limit > 0)) return undefined;
  if (b === undefined) return new Bucket(limit, now, shares.of(item), shares.awaiting);
  b.refill(now);
  b.setLimit(limit);
  return b;
}

/**
 * What a limited key's request holds while it is in flight: the key's counters and its team's
 * as they were when it was admitted. Made anew at each publication (a key may change team), so
 * a request releases the very counters it took; the counters themselves are kept.
 */
export class KeyState {
  constructor(
    readonly name: string,
    readonly key: Counters,
    readonly team: Counters | undefined,
    readonly tier: KeyTier,
  ) {}

  /** The key or its team has a per-minute limit: its answers carry OpenAI's x-ratelimit-* headers. */
  get rated(): boolean {
    return this.key.rpm !== undefined || this.key.tpm !== undefined || this.team?.rpm !== undefined || this.team?.tpm !== undefined;
  }

  /** The key or its team counts tokens. */
  get metered(): boolean {
    return this.key.tpm !== undefined || this.team?.tpm !== undefined;
  }

  /** The request's end, whatever it was (the exchange calls this once): its in-flight slot goes back. */
  release(): void {
    this.key.inflight--;
    if (this.team !== undefined) this.team.inflight--;
  }
}

/** Why a request was refused: which limit, of the key or of its team, and when to retry. */
export interface Refusal {
  readonly of: Counters;
  readonly limit: "requests" | "tokens" | "concurrent";
  readonly retryAfterMs: number;
  readonly message: string;
}

/** A key's current use, for tests and for showing each limit with its use. */
export interface KeyUse {
  key: string;
  team: string | undefined;
  inflight: number;
  teamInflight: number | undefined;
  requestsLeft: number | undefined;
  tokensLeft: number | undefined;
}

export class Admission {
  /** By the key's SHA-256: only keys with a limit of their own or of their team. */
  private byKey = new Map<string, KeyState>();
  private teams = new Map<string, Counters>();
  private readonly shares = new ShareBook();

  constructor(private readonly time: Pick<Scheduler, "mono">) {}

  /** This router's shares of the allowances (several routers): every bucket is resized to its share. */
  setShares(s: LimitShares): void {
    const now = this.time.mono();
    this.shares.set(s);
    if (s.awaiting === true) return;
    for (const k of this.byKey.values()) k.key.share(now, this.shares);
    for (const t of this.teams.values()) t.share(now, this.shares);
  }

  /** The keys the control plane published: state for the limited ones, kept for those that stay. */
  setKeys(entries: readonly ApiKeyEntry[]): void {
    const now = this.time.mono();
    const teams = new Map<string, Counters>();
    const byKey = new Map<string, KeyState>();
    for (const e of entries) {
      if (!limited(e.limits) && !limited(e.teamLimits)) continue;
      let team: Counters | undefined;
      if (e.team !== undefined) {
        team = teams.get(e.team);
        if (team === undefined) {
          team = this.teams.get(e.team) ?? new Counters("team", e.team);
          team.apply(e.teamLimits, now, this.shares);
          teams.set(e.team, team);
        }
      }
      const key = this.byKey.get(e.sha256)?.key ?? new Counters("key", e.name);
      key.apply(e.limits, now, this.shares);
      byKey.set(e.sha256, new KeyState(e.name, key, team, e.tier ?? "interactive"));
    }
    this.teams = teams;
    this.byKey = byKey;
  }

  /** The state of a limited key (by its SHA-256), or undefined for a key without limits. */
  of(sha256: string): KeyState | undefined {
    return this.byKey.size === 0 ? undefined : this.byKey.get(sha256);
  }

  /**
   * Admits a request of `prompt` estimated tokens (promptEstimate) or says why not. Admitted,
   * it holds an in-flight slot (KeyState.release gives it back) and its requests and prompt
   * tokens are counted against the key and its team. Refused, nothing is counted.
   */
  admit(s: KeyState, prompt: number): Refusal | undefined {
    const now = this.time.mono();
    const t = s.team;
    asked(s.key, prompt);
    if (t !== undefined) asked(t, prompt);
    const no = refusedBy(s.key, prompt, now) ?? (t !== undefined ? refusedBy(t, prompt, now) : undefined);
    if (no !== undefined) return no;
    take(s.key, prompt);
    if (t !== undefined) take(t, prompt);
    return undefined;
  }

  /** Tokens counted after admission (streamed, or the usage's difference from the estimate; negative gives back). */
  tokens(s: KeyState, n: number): void {
    if (n === 0) return;
    if (n > 0) {
      s.key.askedTokens += n;
      s.key.usedTokens += n;
      if (s.team !== undefined) {
        s.team.askedTokens += n;
        s.team.usedTokens += n;
      }
    }
    spend(s.key.tpm, n);
    if (s.team !== undefined) spend(s.team.tpm, n);
  }

  /**
   * OpenAI's x-ratelimit-* header lines for an answer to a rated key: of each kind, the tighter
   * of the key's and its team's limits (the one with less left).
   */
  headers(s: KeyState): string {
    const now = this.time.mono();
    let out = "";
    const r = tighter(s.key.rpm, s.team?.rpm, now);
    if (r !== undefined) out += `x-ratelimit-limit-requests: ${r.limit}\r\nx-ratelimit-remaining-requests: ${left(r)}\r\nx-ratelimit-reset-requests: ${duration(r.resetMs())}\r\n`;
    const k = tighter(s.key.tpm, s.team?.tpm, now);
    if (k !== undefined) out += `x-ratelimit-limit-tokens: ${k.limit}\r\nx-ratelimit-remaining-tokens: ${left(k)}\r\nx-ratelimit-reset-tokens: ${duration(k.resetMs())}\r\n`;
    return out;
  }

  /** Each limited key's and team's own use of its limits now (not the tighter of the two). */
  limitUse(): LimitUseEntry[] {
    const now = this.time.mono();
    const out: LimitUseEntry[] = [];
    const spent = (b: Bucket | undefined) => {
      if (b === undefined) return undefined;
      b.refill(now);
      // Past the limit too (a debt of tokens streamed after it ran out), as it is.
      return Math.max(0, Math.round(b.cap - b.level));
    };
    const one = (c: Counters) => {
      const rpm = spent(c.rpm);
      const tpm = spent(c.tpm);
      out.push({ of: c.kind, name: c.name, concurrent: c.inflight, ...(rpm !== undefined ? { rpm } : {}), ...(tpm !== undefined ? { tpm } : {}), askedRequests: c.askedRequests, askedTokens: c.askedTokens, usedRequests: c.usedRequests, usedTokens: c.usedTokens, ...(c.concurrentLimit !== Infinity ? { maxConcurrent: c.concurrentLimit } : {}), ...(c.rpm ? { rpmLimit: c.rpm.limit } : {}), ...(c.tpm ? { tpmLimit: c.tpm.limit } : {}) });
    };
    for (const s of this.byKey.values()) one(s.key);
    for (const t of this.teams.values()) one(t);
    return out;
  }

  /** Every limited key's use now. */
  use(): KeyUse[] {
    const now = this.time.mono();
    const out: KeyUse[] = [];
    for (const s of this.byKey.values()) {
      const r = tighter(s.key.rpm, s.team?.rpm, now);
      const k = tighter(s.key.tpm, s.team?.tpm, now);
      out.push({
        key: s.name,
        team: s.team?.name,
        inflight: s.key.inflight,
        teamInflight: s.team?.inflight,
        requestsLeft: r === undefined ? undefined : left(r),
        tokensLeft: k === undefined ? undefined : left(k),
      });
    }
    return out;
  }
}

/**
 * The 429 of a refusal, as OpenAI answers one: rate_limit_exceeded, Retry-After in seconds,
 * x-should-retry (its SDKs retry on it), and the x-ratelimit-* `lines` of a rated key.
 */
export function refusalReply(no: Refusal, lines: string): Reply {
  const headers = { "retry-after": String(Math.ceil(no.retryAfterMs / 1000)), "x-should-retry": "true", ...headerRecord(lines) };
  return openAIError(429, no.message, { type: "rate_limit_exceeded", code: "rate_limit_exceeded", headers });
}

/** A whole reply of the router's own (an error) to a request of a rated key: with its x-ratelimit-* headers, as every answer to it. */
export function withRateHeaders(r: Reply, adm: KeyState | undefined, admission: Pick<Admission, "headers"> | undefined): Reply {
  if (adm === undefined || admission === undefined || !adm.rated) return r;
  return { ...r, headers: { ...r.headers, ...headerRecord(admission.headers(adm)) } };
}

/** Header lines (`name: value\r\n`…) as a record, for the router's own whole answers. */
export function headerRecord(lines: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of lines.split("\r\n")) {
    const colon = line.indexOf(": ");
    if (colon > 0) out[line.slice(0, colon)] = line.slice(colon + 2);
  }
  return out;
}

function limited(l: UsageLimits | undefined): boolean {
  return l !== undefined && ((l.rpm ?? 0) > 0 || (l.tpm ?? 0) > 0 || (l.maxConcurrent ?? 0) > 0);
}

/** The refusal of `c`'s limits for a request of `prompt` tokens, or undefined when they admit it. Refusals alone allocate. */
function refusedBy(c: Counters, prompt: number, now: number): Refusal | undefined {
  if (c.inflight >= c.maxConcurrent) {
    const what = c.maxConcurrent < c.concurrentLimit ? `${c.inflight} requests in flight on this router, its share of the ${c.concurrentLimit} it may have at once across the routers` : `${c.maxConcurrent} requests in flight, the most it may have at once`;
    return refusal(c, "concurrent", 1000, what);
  }
  const r = c.rpm;
  if (r !== undefined) {
    r.refill(now);
    if (r.level < 1) return refusal(c, "requests", r.waitMs(1), `requests per minute (RPM): limit ${r.limit}${ofShare(r)}, 0 left`);
  }
  const t = c.tpm;
  if (t !== undefined) {
    t.refill(now);
    // A prompt larger than the whole limit waits for a full minute's allowance, not forever.
    const most = prompt > t.cap ? t.cap : prompt;
    const need = most < 1 ? 1 : most;
    if (t.level < need) return refusal(c, "tokens", t.waitMs(need), `tokens per minute (TPM): limit ${t.limit}${ofShare(t)}, ${left(t)} left, this request's prompt counts about ${prompt}`);
  }
  return undefined;
}

function refusal(c: Counters, limit: Refusal["limit"], waitMs: number, what: string): Refusal {
  // Rounded to the ms first: a rate of limit / 60,000 per ms is not exact in binary.
  const retryAfterMs = Math.max(1000, Math.ceil(Math.round(waitMs) / 1000) * 1000);
  const whose = c.kind === "key" ? `key '${c.name}'` : `team '${c.name}' (shared by its keys)`;
  const when = limit === "concurrent" ? "try again when one of them has ended" : `try again in ${retryAfterMs / 1000}s`;
  return { of: c, limit, retryAfterMs, message: `Rate limit reached for ${whose} on ${what}; ${when}.` };
}

/** With several routers, what of the limit is this one's. */
function ofShare(b: Bucket): string {
  return b.share < 1 ? ` (shared by the routers; this one's share is ${Math.floor(b.cap)})` : "";
}

function asked(c: Counters, prompt: number): void {
  c.askedRequests++;
  c.askedTokens += prompt;
}

function take(c: Counters, prompt: number): void {
  c.inflight++;
  c.usedRequests++;
  c.usedTokens += prompt;
  if (c.rpm !== undefined) c.rpm.level -= 1;
  if (c.tpm !== undefined) c.tpm.level -= prompt;
}

function spend(b: Bucket | undefined, n: number): void {
  if (b === undefined) return;
  const l = b.level - n;
  b.level = l > b.cap ? b.cap : l;
}

function tighter(a: Bucket | undefined, b: Bucket | undefined, now: number): Bucket | undefined {
  a?.refill(now);
  b?.refill(now);
  if (a === undefined) return b;
  if (b === undefined) return a;
  return b.level < a.level ? b : a;
}

function left(b: Bucket): number {
  return b.level <= 0 ? 0 : Math.floor(b.level);
}

/** A duration as OpenAI writes it in x-ratelimit-reset-*: `0s`, `120ms`, `1.5s`, `6m0s`, `1h2m3s`. */
export function duration(exact: number): string {
  const ms = Math.round(exact);
  if (ms <= 0) return "0s";
  if (ms < 1000) return `${ms}ms`;
  if (ms < MINUTE_MS) return `${Math.ceil(ms / 100) / 10}s`;
  const s = Math.ceil(ms / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return `${h > 0 ? `${h}h` : ""}${m}m${s % 60}s`;
}
