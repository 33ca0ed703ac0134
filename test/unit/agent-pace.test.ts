// The agent's waits (src/agent/pace.ts) on a ManualScheduler: a sleep ends at its time, the
// heartbeat's sleep (wakeable) also ends early when a change should go out now while the other
// loops' sleeps do not, a burst of replica changes makes one early heartbeat, and stopping ends
// every sleep at once and lets no new one begin.

import { expect, test } from "bun:test";
import { Pace } from "../../src/agent/pace";
import { ManualScheduler } from "../../src/lib/scheduler";

const DEBOUNCE = 50;

function pace() {
  const clock = new ManualScheduler();
  return { clock, pace: new Pace(clock, DEBOUNCE) };
}

/** Whether a promise has settled, after the microtasks queued so far. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await Promise.resolve();
  await Promise.resolve();
  return done;
}

test("a sleep ends at its time, not before", async () => {
  const { clock, pace: p } = pace();
  const s = p.sleep(1_000, false);
  await clock.run(999);
  expect(await settled(s)).toBe(false);
  await clock.run(1);
  expect(await settled(s)).toBe(true);
});

test("heartbeatNow ends the heartbeat's (wakeable) sleep early and marks a heartbeat due; the other loops sleep on", async () => {
  const { clock, pace: p } = pace();
  const heartbeat = p.sleep(5_000, true);
  const inventory = p.sleep(30_000, false);
  expect(p.heartbeatDue).toBe(false);
  p.heartbeatNow();
  expect(p.heartbeatDue).toBe(true);
  expect(await settled(heartbeat)).toBe(true);
  expect(await settled(inventory)).toBe(false);
  await clock.run(30_000);
  expect(await settled(inventory)).toBe(true);
});

test("a burst of replica changes within the debounce wakes the heartbeat once, after the debounce", async () => {
  const { clock, pace: p } = pace();
  const first = p.sleep(5_000, true);
  p.heartbeatSoon();
  await clock.run(10);
  p.heartbeatSoon();
  p.heartbeatSoon();
  expect(await settled(first)).toBe(false);
  expect(clock.pending).toBe(2); // the sleep and one debounce timer, not three
  await clock.run(DEBOUNCE - 10);
  expect(await settled(first)).toBe(true);
  expect(p.heartbeatDue).toBe(true);
  // The next burst gets a debounce of its own.
  p.heartbeatDue = false;
  const second = p.sleep(5_000, true);
  p.heartbeatSoon();
  await clock.run(DEBOUNCE);
  expect(await settled(second)).toBe(true);
  expect(p.heartbeatDue).toBe(true);
});

test("stopping ends every sleep at once, cancels the debounce, and later sleeps and changes do nothing", async () => {
  const { clock, pace: p } = pace();
  const sleeps = [p.sleep(5_000, true), p.sleep(30_000, false), p.sleep(600_000, false)];
  p.heartbeatSoon();
  p.stop();
  expect(p.stopping).toBe(true);
  p.wakeAll();
  for (const s of sleeps) expect(await settled(s)).toBe(true);
  expect(clock.pending).toBe(0);
  expect(await settled(p.sleep(1_000, false))).toBe(true);
  p.heartbeatSoon();
  expect(clock.pending).toBe(0);
});
