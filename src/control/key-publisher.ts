// What the router is told of the client API keys: the list the store holds, handed to the
// router whenever it differs from the list handed last, however the store came to differ (this
// control plane's own create or revoke, another control plane's write read from the change feed,
// a backstop reload, a restart). With several control planes a key revoked on one must stop
// working on every router, so the control loop offers the list after each projection too, and
// an unchanged list costs a comparison, not a message to the router thread.

import type { ApiKeyEntry, EndpointSink } from "../protocol/routing";
import type { ApiKeyRow } from "./types";

export class KeyPublisher {
  /** What the router was last handed; undefined until the first hand-over (or after reset()). */
  private sent: readonly ApiKeyEntry[] | undefined;
  /** Publications started: one overtaken by a later one sends nothing (the later read is the newer). */
  private started = 0;

  constructor(private readonly read: () => Promise<readonly ApiKeyRow[]>) {}

  /** A new router holds no keys yet: the next publish() hands it the list whatever it is. */
  reset(): void {
    this.sent = undefined;
  }

  /** Reads the keys and hands them to the sink when they differ from what it holds; true when sent. */
  async publish(sink: Pick<EndpointSink, "setApiKeys"> | undefined): Promise<boolean> {
    if (!sink) return false;
    const mine = ++this.started;
    const rows = await this.read();
    // A create or revoke that began after this read started reads (and sends) a list at least as new.
    if (mine !== this.started) return false;
    if (this.sent && sameKeys(rows, this.sent)) return false;
    const entries = rows.map((k) => ({ name: k.name, sha256: k.hash, pool: k.pool }));
    this.sent = entries;
    sink.setApiKeys(entries);
    return true;
  }
}

function sameKeys(rows: readonly ApiKeyRow[], sent: readonly ApiKeyEntry[]): boolean {
  return rows.length === sent.length && rows.every((k, i) => k.name === sent[i]!.name && k.hash === sent[i]!.sha256 && k.pool === sent[i]!.pool);
}
