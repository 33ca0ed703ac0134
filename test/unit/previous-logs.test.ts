// Past runs' engine logs: a new run moves the old log aside; the keeper holds past logs to their
// time (the agent's Scheduler), count and size.

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { PastLogKeeper, pastLogsToDrop, previousPathOf, rotateForNewRun } from "../../src/agent/previous-logs";
import { ManualScheduler } from "../../src/lib/scheduler";
import { scratchDir } from "../helpers/tmp";

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const tmp = () => {
  const d = scratchDir("llmgw-prev-");
  dirs.push(d);
  return d;
};

describe("pastLogsToDrop", () => {
  const limits = { keepMs: 1000, maxFiles: 2 };
  test("drops what was seen over keepMs ago, then all but the newest maxFiles", () => {
    expect(pastLogsToDrop([{ name: "a", seenAt: 0 }, { name: "b", seenAt: 500 }], 999, limits)).toEqual([]);
    expect(pastLogsToDrop([{ name: "a", seenAt: 0 }, { name: "b", seenAt: 500 }], 1000, limits)).toEqual(["a"]);
    expect(pastLogsToDrop([{ name: "a", seenAt: 10 }, { name: "b", seenAt: 30 }, { name: "c", seenAt: 20 }], 100, limits)).toEqual(["a"]);
    expect(pastLogsToDrop([], 100, limits)).toEqual([]);
  });
});

describe("rotateForNewRun", () => {
  test("the old run becomes <id>.previous.log, cut to its last bytes at a line; the current log starts empty", () => {
    const d = tmp();
    const log = join(d, "r-1.log");
    expect(previousPathOf(log)).toBe(join(d, "r-1.previous.log"));
    rotateForNewRun(log, 10);
    expect(existsSync(previousPathOf(log))).toBe(false);
    writeFileSync(log, "first line\nsecond\nthird\n");
    rotateForNewRun(log, 12);
    expect(existsSync(log)).toBe(false);
    expect(readFileSync(previousPathOf(log), "utf8")).toBe("third\n");
    // An empty log leaves the previous one alone.
    writeFileSync(log, "");
    rotateForNewRun(log, 12);
    expect(readFileSync(previousPathOf(log), "utf8")).toBe("third\n");
  });
});

describe("PastLogKeeper", () => {
  test("keeps past logs an hour after it first saw them, never a running replica's own log; a replaced previous log starts again", () => {
    const d = tmp();
    const clock = new ManualScheduler();
    const running = new Set(["live"]);
    const keeper = new PastLogKeeper(d, () => running, () => clock.now(), { keepMs: 3_600_000, maxFiles: 20, maxBytes: 1 << 20 });
    writeFileSync(join(d, "live.log"), "running\n");
    writeFileSync(join(d, "live.previous.log"), "run before\n");
    writeFileSync(join(d, "gone.log"), "stopped\n");
    writeFileSync(join(d, "other.txt"), "not a log\n");
    expect(keeper.sweep()).toEqual([]);
    clock.advance(3_599_999);
    expect(keeper.sweep()).toEqual([]);
    // Replaced by a newer run (a new file, as rotateForNewRun writes it): its hour starts now.
    writeFileSync(join(d, "live.log"), "newer run\n");
    rotateForNewRun(join(d, "live.log"));
    writeFileSync(join(d, "live.log"), "running again\n");
    keeper.sweep();
    clock.advance(1);
    expect(keeper.sweep().sort()).toEqual(["gone.log"]);
    expect(existsSync(join(d, "live.log"))).toBe(true);
    expect(existsSync(join(d, "live.previous.log"))).toBe(true);
    expect(existsSync(join(d, "other.txt"))).toBe(true);
    // The replica stopped: its log is a past run from now on.
    running.clear();
    clock.advance(1);
    expect(keeper.sweep()).toEqual([]);
    clock.advance(3_599_998);
    expect(keeper.sweep()).toEqual(["live.previous.log"]);
    clock.advance(1);
    expect(keeper.sweep()).toEqual([]);
    clock.advance(1);
    expect(keeper.sweep()).toEqual(["live.log"]);
  });

  test("at most maxFiles past logs, the newest kept; each cut to maxBytes", () => {
    const d = tmp();
    const clock = new ManualScheduler();
    const keeper = new PastLogKeeper(d, () => new Set(), () => clock.now(), { keepMs: 3_600_000, maxFiles: 2, maxBytes: 8 });
    for (const id of ["a", "b", "c"]) {
      writeFileSync(join(d, `${id}.log`), `${id} 0123456789\nlast\n`);
      keeper.sweep();
      clock.advance(1000);
    }
    expect(existsSync(join(d, "a.log"))).toBe(false);
    expect(readFileSync(join(d, "b.log"), "utf8")).toBe("last\n");
    expect(readFileSync(join(d, "c.log"), "utf8")).toBe("last\n");
  });
});
