// A simulated engine prefix cache: an LRU of chained hashes of fixed-size prompt blocks, so the
// fake engine can reward prompt-prefix affinity the way vLLM's automatic prefix caching does.

export interface PrefixLookup {
  /** Full blocks in the prompt (the partial tail block is never cached, as in vLLM). */
  queried: number;
  /** Leading blocks found in the cache; a miss ends the run even if later blocks are present. */
  hit: number;
  /** Share of the prompt's characters covered by the hit blocks, 0..1. */
  hitFraction: number;
}

const NO_BLOCKS: PrefixLookup = { queried: 0, hit: 0, hitFraction: 0 };

export class PrefixCache {
  // Map iteration order is insertion order, so delete+set makes it an LRU with O(1) eviction.
  private readonly lru = new Map<bigint, true>();
  private readonly keys: bigint[] = [];

  constructor(
    readonly capacity: number,
    readonly blockChars: number,
  ) {
    if (!Number.isInteger(blockChars) || blockChars < 1) throw new Error(`blockChars must be a positive integer, got ${blockChars}`);
  }

  get size(): number {
    return this.lru.size;
  }

  /** Counts the leading hits of `prompt`, then caches all its full blocks. */
  lookup(prompt: string): PrefixLookup {
    const n = Math.floor(prompt.length / this.blockChars);
    if (n === 0 || this.capacity <= 0) return n === 0 ? NO_BLOCKS : { queried: n, hit: 0, hitFraction: 0 };
    const keys = this.keys;
    keys.length = n;
    // Seeding each block's hash with the previous one makes block k's key stand for blocks 0..k,
    // so equal text after a different beginning does not count as a hit.
    let h = 0n;
    let hit = 0;
    let leading = true;
    for (let k = 0; k < n; k++) {
      h = Bun.hash.wyhash(prompt.slice(k * this.blockChars, (k + 1) * this.blockChars), h);
      keys[k] = h;
      if (leading && this.lru.has(h)) hit++;
      else leading = false;
    }
    // Touch from the tail to the head so the head ends up most recent: eviction then drops
    // tails first and shared prefixes survive longest, like vLLM freeing blocks in reverse.
    for (let k = n - 1; k >= 0; k--) {
      const key = keys[k]!;
      this.lru.delete(key);
      this.lru.set(key, true);
    }
    while (this.lru.size > this.capacity) {
      const oldest = this.lru.keys().next().value;
      if (oldest === undefined) break;
      this.lru.delete(oldest);
    }
    return { queried: n, hit, hitFraction: Math.min(1, (hit * this.blockChars) / prompt.length) };
  }

  clear(): void {
    this.lru.clear();
  }
}

/** Time to first token after prefix-cache hits: hits skip that share of the prefill. */
export function ttftWithHits(ttftMs: number, hitSpeedup: number, hitFraction: number): number {
  const speedup = Math.min(1, Math.max(0, hitSpeedup));
  return Math.max(0, ttftMs * (1 - speedup * hitFraction));
}
