// The admin and join tokens when several control planes share one store. The store keeps only
// their digests (SHA-256), never the tokens, so a database dump or backup admits no one. The
// admin token every control plane needs in clear (its CLI, dashboard and router's /metrics read
// it): each is given it, and one whose token differs from the store's refuses to start rather
// than run with another. The join token is checked against the store's digest on every control
// plane, followed as it changes: `llmgw join-token rotate` on any one replaces it everywhere
// within a second or so, and no restart with an old copy brings a rotated-away token back.

import type { Logger } from "pino";
import type { Scheduler, Timer } from "../lib/scheduler";
import type { SharedSecretsPort } from "./store-port";
import type { SharedTokenKind, TokenDigest } from "./types";

/** Where this control plane's token came from: a flag, env or config file; its data dir's file; or made just now. */
export type TokenSource = "given" | "stored" | "generated";

export interface TokenAtStart {
  kind: SharedTokenKind;
  source: TokenSource;
  sha256: string;
  /** Where the token came from, as a message names it (a file path, or the flag and its twins). */
  from: string;
}

/**
 * What a control plane does with its token at start: store its digest (the first on the store),
 * go on (the same token), replace the stored digest (a token given to one started alone),
 * follow the store's join token without a copy of it (its own was made just now, or is an old
 * copy), or refuse to start (with the problem to print).
 */
export type TokenVerdict = { act: "claim" | "same" | "replace" | "follow" } | { act: "refuse"; problem: string };

/** The start's decision for one token (see the file's head); `othersLive` names the other control planes running on the store. */
export function tokenAtStart(t: TokenAtStart, stored: TokenDigest | undefined, othersLive: readonly string[]): TokenVerdict {
  if (!stored) return { act: "claim" };
  if (stored.sha256 === t.sha256) return { act: "same" };
  const what = t.kind === "admin" ? "admin token" : "join token";
  if (t.source === "given") {
    if (stored.retired.includes(t.sha256))
      return { act: "refuse", problem: `${t.from}: this ${what} was replaced on this store (rotated away) and no longer works: give the current one${t.kind === "join" ? ", or leave it out and this control plane follows the store's" : ""}` };
    if (othersLive.length > 0)
      return {
        act: "refuse",
        problem: `${t.from}: not the ${what} the control planes running on this store share (${othersLive.join(", ")}): give every control plane the same one; to change it, stop them all and start one with the new token first`,
      };
    return { act: "replace" };
  }
  // The store's join token is checked on every control plane: a copy here is only for join-command.
  if (t.kind === "join") return { act: "follow" };
  if (t.source === "generated")
    return {
      act: "refuse",
      problem: `this data dir holds no admin token, and the control planes on this store share one, which the store keeps only as a digest: copy admin.token from the data dir of a control plane that has it to ${t.from} (mode 0600), or give it with --admin-token (or LLMGW_ADMIN_TOKEN, or the config file's admin_token)`,
    };
  return {
    act: "refuse",
    problem: `${t.from} holds an admin token that is not the one the control planes on this store share (the store keeps its digest): copy admin.token from a control plane that has the right one, or give it with --admin-token; a token given to a control plane that starts while no other runs replaces the shared one`,
  };
}

export interface TokenFollowerOptions {
  store: Pick<SharedSecretsPort, "tokenDigests">;
  scheduler: Scheduler;
  log: Logger;
  /** The join token's digest in force now. */
  join: string;
  /** Told each time the store's join digest differs from the one in force (after which it is the one in force). */
  onJoin: (sha256: string) => void;
  /** Least time between two reads of the store (default 250 ms). */
  gapMs?: number;
}

/**
 * Follows the store's join token digest: poke() asks for a read (another control plane wrote, a
 * lease round, the backstop); reads never overlap and come at most one per gap, the last poke of
 * a gap read at its end. A digest this control plane set itself (know()) is not news, and a read
 * that began before it is thrown away: it may hold the digest just replaced.
 */
export class TokenFollower {
  private current: string;
  private reading = false;
  private again = false;
  private lastRead = Number.NEGATIVE_INFINITY;
  private timer: Timer | undefined;
  private generation = 0;
  private stopped = false;
  private failing: string | undefined;

  constructor(private readonly o: TokenFollowerOptions) {
    this.current = o.join;
  }

  /** The join digest this control plane put in force itself (a rotation here). */
  know(sha256: string): void {
    this.current = sha256;
    this.generation++;
  }

  poke(): void {
    if (this.stopped) return;
    if (this.reading || this.timer) {
      this.again = true;
      return;
    }
    const wait = this.lastRead + (this.o.gapMs ?? 250) - this.o.scheduler.mono();
    if (wait > 0) {
      this.timer = this.o.scheduler
        .after(wait, () => {
          this.timer = undefined;
          void this.read();
        })
        .unref();
      return;
    }
    void this.read();
  }

  stop(): void {
    this.stopped = true;
    this.timer?.cancel();
  }

  private async read(): Promise<void> {
    this.reading = true;
    this.again = false;
    this.lastRead = this.o.scheduler.mono();
    const gen = this.generation;
    try {
      const join = (await this.o.store.tokenDigests()).join;
      if (this.failing) this.o.log.info({ was: this.failing }, "the join token is read from the store again");
      this.failing = undefined;
      if (!this.stopped && gen === this.generation && join && join.sha256 !== this.current) {
        this.current = join.sha256;
        this.o.onJoin(join.sha256);
      } else if (gen !== this.generation) this.again = true;
    } catch (e) {
      // The join token in force stays; the next poke reads again.
      const why = (e as Error).message;
      if (why !== this.failing) this.o.log.warn({ err: why }, "the join token could not be read from the store: the one in force stays");
      this.failing = why;
    } finally {
      this.reading = false;
      if (this.again) this.poke();
    }
  }
}
