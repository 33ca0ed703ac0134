// The pure parts of node trust: address spellings compared as one, and the per-node token
// bucket driven by a hand-held clock.

import { describe, expect, test } from "bun:test";
import { canonicalAddress } from "../../src/lib/net";
import { TokenBuckets } from "../../src/api/ratelimit";

describe("canonicalAddress", () => {
  test("one spelling per address", () => {
    expect(canonicalAddress("::ffff:10.0.0.1")).toBe("10.0.0.1");
    expect(canonicalAddress("::FFFF:10.0.0.1")).toBe("10.0.0.1");
    expect(canonicalAddress("::ffff:a00:1")).toBe("10.0.0.1");
    expect(canonicalAddress("[::1]")).toBe("::1");
    expect(canonicalAddress("0:0:0:0:0:0:0:1")).toBe("::1");
    expect(canonicalAddress("FE80:0:0:0:0:0:0:1")).toBe("fe80::1");
    expect(canonicalAddress("GPU-01.Example")).toBe("gpu-01.example");
    expect(canonicalAddress("10.0.0.1")).toBe("10.0.0.1");
  });
});

describe("TokenBuckets", () => {
  test("a burst, then one per 1/rate seconds; keys apart; a clock going back takes nothing", () => {
    let now = 1_000_000;
    const b = new TokenBuckets(() => now);
    expect([0, 1, 2].map(() => b.take("a", 2, 3))).toEqual([0, 0, 0]);
    expect(b.take("a", 2, 3)).toBe(500);
    expect(b.take("b", 2, 3)).toBe(0);
    now += 500;
    expect(b.take("a", 2, 3)).toBe(0);
    expect(b.take("a", 2, 3)).toBe(500);
    now -= 10_000;
    expect(b.take("a", 2, 3)).toBeGreaterThan(0);
    now += 60_000;
    expect([0, 1, 2].map(() => b.take("a", 2, 3))).toEqual([0, 0, 0]);
  });

  test("bounded: a flood of names forgets the oldest", () => {
    const b = new TokenBuckets(() => 0, 2);
    b.take("x", 1, 1);
    b.take("y", 1, 1);
    b.take("z", 1, 1);
    expect(b.take("x", 1, 1)).toBe(0);
  });
});
