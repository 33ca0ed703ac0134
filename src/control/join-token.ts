// The join token agents present to be admitted, held by its SHA-256 only: this control plane's
// own token, or with several control planes on one store the store's digest, followed as the
// store changes it (shared-tokens.ts). It changes at run time (`llmgw join-token rotate`, here
// or on another control plane): the agent API reads it on every request.

import { matchesDigest, sha256 } from "../lib/digest";

export class JoinToken {
  private digest: Buffer | undefined;

  /** With no token yet, nothing matches. */
  constructor(initial?: { token: string } | { sha256: string }) {
    if (initial && "token" in initial) this.useToken(initial.token);
    else if (initial) this.useDigest(initial.sha256);
  }

  /** The token in force from now on (the one in this data dir). */
  useToken(token: string): void {
    this.digest = sha256(token);
  }

  /** The token in force from now on, by its SHA-256 (hex) alone: with several control planes, the store's. */
  useDigest(hex: string): void {
    this.digest = Buffer.from(hex, "hex");
  }

  /** Whether a presented bearer token is the join token; constant time over digests, so neither content nor length leaks. */
  matches(presented: string): boolean {
    if (!this.digest) return false;
    return matchesDigest(presented, this.digest);
  }
}
