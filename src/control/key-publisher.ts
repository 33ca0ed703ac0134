// What the router is told of the client API keys: the list the store holds, each key with its
// team's limits, handed to the router whenever it differs from the list handed last, however the
// store came to differ (this control plane's own create, update or revoke, a team's change,
// another control plane's write read from the change feed, a backstop reload, a restart). With
// several control planes a key revoked (or a team's limit changed) on one must hold on every
// router, so the control loop offers the list after each projection too, and an unchanged list
// costs a comparison, not a message to the router thread.

import type { ApiKeyEntry, EndpointSink } from "../protocol/routing";
import type { ApiKeyRow, TeamRow } from "./types";

/** The keys and teams as one read sees them. */
export interface KeyRead {
  keys: readonly ApiKeyRow[];
  teams: readonly TeamRow[];
}

export class KeyPublisher {
  /** What the router was last handed (as JSON, to compare); undefined until the first hand-over (or after reset()). */
  private sent: string | undefined;
  /** Publications started: one overtaken by a later one sends nothing (the later read is the newer). */
  private started = 0;

  constructor(private readonly read: () => Promise<KeyRead>) {}

  /** A new router holds no keys yet: the next publish() hands it the list whatever it is. */
  reset(): void {
    this.sent = undefined;
  }

  /** Reads the keys and hands them to the sink when they differ from what it holds; true when sent. */
  async publish(sink: Pick<EndpointSink, "setApiKeys"> | undefined): Promise<boolean> {
    if (!sink) return false;
    const mine = ++this.started;
    const read = await this.read();
    // A write that began after this read started reads (and sends) a list at least as new.
    if (mine !== this.started) return false;
    const entries = keyEntries(read);
    const text = JSON.stringify(entries);
    if (this.sent === text) return false;
    this.sent = text;
    sink.setApiKeys(entries);
    return true;
  }
}

/**
 * The router's entries: each key with what it sets (nothing it leaves unset, so a router of the
 * previous version reads the same entry) and its team's limits; a key that names no tier takes
 * its team's.
 */
export function keyEntries(read: KeyRead): ApiKeyEntry[] {
  const teams = new Map(read.teams.map((t) => [t.name, t]));
  return read.keys.map((k) => {
    const e: ApiKeyEntry = { name: k.name, sha256: k.hash, pool: k.pool };
    const team = k.team === undefined ? undefined : teams.get(k.team);
    if (k.team !== undefined) e.team = k.team;
    if (k.models) e.models = k.models;
    if (k.expiresAt !== undefined) e.expiresAt = k.expiresAt;
    const tier = k.tier ?? team?.tier;
    if (tier) e.tier = tier;
    if (k.limits) e.limits = k.limits;
    if (team?.limits) e.teamLimits = team.limits;
    return e;
  });
}
