// The admin and join tokens on several control planes: what a start does with its own token
// against the store's digest, and how a running one follows the store's join token.

import { describe, expect, test } from "bun:test";
import pino from "pino";
import { TokenFollower, type TokenSource, tokenAtStart } from "../../src/control/shared-tokens";
import type { SharedTokenKind, TokenDigest } from "../../src/control/types";
import { ManualScheduler } from "../../src/lib/scheduler";

const A = "a".repeat(64);
const B = "b".repeat(64);
const C = "c".repeat(64);
const at = (kind: SharedTokenKind, source: TokenSource, sha256: string) => ({ kind, source, sha256, from: source === "given" ? `--${kind}-token` : `/data/${kind}.token` });
const stored: TokenDigest = { sha256: A, retired: [C] };

describe("tokenAtStart", () => {
  test("nothing stored: claim; the stored one: go on, whatever the source", () => {
    for (const kind of ["admin", "join"] as const)
      for (const source of ["given", "stored", "generated"] as const) {
        expect(tokenAtStart(at(kind, source, B), undefined, ["other"])).toEqual({ act: "claim" });
        expect(tokenAtStart(at(kind, source, A), stored, ["other"])).toEqual({ act: "same" });
      }
  });

  test("the join token of a data dir that differs (made just now, or rotated away since) follows the store's", () => {
    expect(tokenAtStart(at("join", "generated", B), stored, [])).toEqual({ act: "follow" });
    expect(tokenAtStart(at("join", "stored", C), stored, ["other"])).toEqual({ act: "follow" });
  });

  test("an admin token of a data dir that differs refuses the start, saying what to copy where", () => {
    const problem = (v: ReturnType<typeof tokenAtStart>) => (v.act === "refuse" ? v.problem : `not refused: ${v.act}`);
    const made = problem(tokenAtStart(at("admin", "generated", B), stored, []));
    expect(made).toContain("copy admin.token from the data dir of a control plane that has it to /data/admin.token");
    expect(made).toContain("--admin-token");
    expect(problem(tokenAtStart(at("admin", "stored", B), stored, []))).toContain("/data/admin.token holds an admin token that is not the one");
  });

  test("a given token that differs replaces the store's only while no other control plane runs, and never when it was rotated away", () => {
    for (const kind of ["admin", "join"] as const) {
      expect(tokenAtStart(at(kind, "given", B), stored, [])).toEqual({ act: "replace" });
      const others = tokenAtStart(at(kind, "given", B), stored, ["cp-b", "cp-c"]);
      expect(others.act === "refuse" && others.problem).toContain(`--${kind}-token: not the ${kind} token the control planes running on this store share (cp-b, cp-c)`);
      const retired = tokenAtStart(at(kind, "given", C), stored, []);
      expect(retired.act === "refuse" && retired.problem).toContain("rotated away");
    }
  });
});

/** A store whose join digest a test sets, each read answered when the test says. */
function store() {
  const reads: ((join: string | Error) => void)[] = [];
  return {
    reads,
    tokenDigests: () =>
      new Promise<{ join?: TokenDigest }>((resolve, reject) => reads.push((j) => (j instanceof Error ? reject(j) : resolve({ join: { sha256: j, retired: [] } })))),
  };
}

describe("TokenFollower", () => {
  test("pokes read at most once a gap, never two at once; a new digest is told once", async () => {
    const clock = new ManualScheduler();
    const s = store();
    const told: string[] = [];
    const f = new TokenFollower({ store: s, scheduler: clock, log: pino({ level: "silent" }), join: A, onJoin: (d) => told.push(d), gapMs: 250 });
    f.poke();
    f.poke();
    f.poke();
    expect(s.reads.length).toBe(1);
    s.reads[0]!(A);
    await clock.run(0);
    expect(told).toEqual([]);
    // The pokes during the read: one more read, at the end of the gap.
    expect(s.reads.length).toBe(1);
    await clock.run(250);
    expect(s.reads.length).toBe(2);
    s.reads[1]!(B);
    await clock.run(0);
    expect(told).toEqual([B]);
    f.poke();
    await clock.run(250);
    s.reads[2]!(B);
    await clock.run(0);
    expect(told).toEqual([B]);
    // A failed read keeps the digest in force; the next poke reads again.
    f.poke();
    await clock.run(250);
    s.reads[3]!(new Error("connection refused"));
    await clock.run(0);
    f.poke();
    await clock.run(250);
    expect(s.reads.length).toBe(5);
    f.stop();
  });

  test("a read that began before a rotation here is thrown away: it may hold the digest just replaced", async () => {
    const clock = new ManualScheduler();
    const s = store();
    const told: string[] = [];
    const f = new TokenFollower({ store: s, scheduler: clock, log: pino({ level: "silent" }), join: A, onJoin: (d) => told.push(d) });
    f.poke();
    f.know(B);
    s.reads[0]!(A);
    await clock.run(0);
    expect(told).toEqual([]);
    // Read again after it, and the store's digest is the rotation's: nothing to tell.
    await clock.run(250);
    expect(s.reads.length).toBe(2);
    s.reads[1]!(B);
    await clock.run(0);
    expect(told).toEqual([]);
    f.stop();
  });
});
