import { describe, expect, test } from "bun:test";
import { ManualScheduler, realScheduler } from "../../src/lib/scheduler";

describe("ManualScheduler", () => {
  test("fires timers in due order, each at its own time, and not before", () => {
    const s = new ManualScheduler(1_000);
    const seen: string[] = [];
    s.after(300, () => seen.push(`b@${s.now()}`));
    s.after(100, () => seen.push(`a@${s.now()}`));
    s.advance(99);
    expect(seen).toEqual([]);
    s.advance(300);
    expect(seen).toEqual(["a@1100", "b@1300"]);
    expect(s.now()).toBe(1_399);
    expect(s.mono()).toBe(399);
  });

  test("every() re-arms; cancel() stops it; a cancelled after() never fires", () => {
    const s = new ManualScheduler(0);
    let n = 0;
    const t = s.every(10, () => n++);
    const never = s.after(5, () => {
      throw new Error("cancelled timer fired");
    });
    never.cancel();
    s.advance(35);
    expect(n).toBe(3);
    t.cancel();
    s.advance(100);
    expect(n).toBe(3);
    expect(s.pending).toBe(0);
  });

  test("a timer scheduled from a timer, within the advanced span, fires too", () => {
    const s = new ManualScheduler(0);
    const at: number[] = [];
    s.after(10, () => s.after(10, () => at.push(s.now())));
    s.advance(25);
    expect(at).toEqual([20]);
  });

  test("run() lets awaited work between timers settle", async () => {
    const s = new ManualScheduler(0);
    const log: string[] = [];
    const wait = (ms: number) => new Promise<void>((r) => s.after(ms, r));
    (async () => {
      await wait(10);
      log.push("first");
      await wait(10);
      log.push("second");
    })();
    await s.run(25);
    expect(log).toEqual(["first", "second"]);
  });
});

test("realScheduler: now is wall time, mono is monotonic, after fires", async () => {
  expect(Math.abs(realScheduler.now() - Date.now())).toBeLessThan(1_000);
  const a = realScheduler.mono();
  await new Promise<void>((r) => realScheduler.after(1, r));
  expect(realScheduler.mono()).toBeGreaterThan(a);
});

test("ManualScheduler.set() jumps the wall clock only: monotonic time and timers stay put", () => {
  const s = new ManualScheduler(1_000_000);
  let fired = 0;
  s.after(100, () => fired++);
  s.set(5_000_000);
  expect(s.now()).toBe(5_000_000);
  expect(s.mono()).toBe(0);
  expect(fired).toBe(0);
  s.set(0); // and backwards
  s.advance(100);
  expect(fired).toBe(1);
  expect(s.now()).toBe(100);
  expect(s.mono()).toBe(100);
});
