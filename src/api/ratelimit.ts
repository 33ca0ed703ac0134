// Per-key token buckets for the agent API: each node may make `rate` requests a second with
// bursts up to `burst`. Time comes from the injected clock, so tests drive it by hand.

export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly now: () => number, private readonly maxKeys = 100_000) {}

  /** Takes one token: 0 when there was one, else the milliseconds until there will be. */
  take(key: string, rate: number, burst: number): number {
    const now = this.now();
    let b = this.buckets.get(key);
    if (!b) {
      // Bounded: a flood of made-up names must not grow this without end; a forgotten bucket is full again.
      if (this.buckets.size >= this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
      this.buckets.set(key, (b = { tokens: burst, at: now }));
    }
    // A clock that went backwards refills nothing and takes nothing away.
    const elapsed = Math.max(0, now - b.at);
    b.tokens = Math.min(burst, b.tokens + (elapsed * rate) / 1000);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - b.tokens) * 1000) / rate);
  }
}
