// Each replica's engine key: HMAC-SHA256 of its id under the head node's secret
// (`<data-dir>/engine.secret`, shared by every control plane on one store), so keys need no
// column of their own and survive a restart. Every shard and the published endpoint get the same
// one; another replica's key says nothing about it. Without a secret engines get no key.

import { hmacSha256hex } from "../lib/digest";

/** HMAC-SHA256 of the replica id under the head node's engine secret, hex (64 characters). */
export function deriveEngineKey(secret: string, replicaId: string): string {
  return hmacSha256hex(secret, `llmgw-engine-key\u0000${replicaId}`);
}

/** Keys derived once each: an HMAC per replica per tick adds up at thousands of replicas. */
export class EngineKeys {
  private readonly keys = new Map<string, string>();

  constructor(private readonly secret: string | undefined) {}

  /** The replica's key, or null without a secret. */
  readonly of = (replicaId: string): string | null => {
    if (this.secret === undefined) return null;
    let key = this.keys.get(replicaId);
    if (key === undefined) {
      if (this.keys.size >= 100_000) this.keys.clear();
      this.keys.set(replicaId, (key = deriveEngineKey(this.secret, replicaId)));
    }
    return key;
  };
}
