// The /health probe timeout is per replica (per engine: SGLang's /health generates a token), so
// a ProcessSet hands each replica the timeout its engine needs instead of one for all.

import { afterEach, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { ProcessSet } from "../../src/agent/runner";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Assignment } from "../../src/protocol/heartbeat";
import { scratchDir } from "../helpers/tmp";

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function assignment(id: string, engine: Assignment["engine"], port: number): Assignment {
  return Assignment.parse({
    id, model: "m", served_names: ["m"], profile: "p", engine, port, gpus: [], gpu_uuids: [],
    shard: { rank: 0, size: 1, leader_address: "", leader_port: 29500 },
  });
}

test("each replica's health probe is cut off at its own engine's timeout", async () => {
  const dir = scratchDir("llmgw-health-timeout-");
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const clock = new ManualScheduler();
  // A /health that never answers: each probe ends only when its timeout aborts it.
  const cutOff = new Map<number, number[]>();
  const fetch = (url: string, init?: RequestInit) =>
    new Promise<Response>((_, reject) => {
      const began = clock.mono();
      const port = Number(new URL(url).port);
      init?.signal?.addEventListener("abort", () => {
        cutOff.set(port, [...(cutOff.get(port) ?? []), clock.mono() - began]);
        reject(init.signal!.reason);
      });
    });
  const set = new ProcessSet({
    render: () => ({ cmd: ["sleep", "30"], env: {} }),
    logDir: join(dir, "logs"),
    healthInterval: 20,
    startTimeout: 30_000,
    healthTimeout: 5_000,
    healthTimeoutFor: (a) => (a.engine === "vllm" ? 100 : undefined),
    fetch,
    scheduler: clock,
  });
  // `sleep` ends at the SIGTERM: stopping waits for no timer.
  cleanup.push(() => set.stopAll(0));
  await set.reconcile([assignment("quick", "vllm", 41001), assignment("default", "sglang", 41002)]);
  // The first probes go out at once; vLLM's is cut off 100 ms later, and the next one 20 ms after that.
  await clock.run(0);
  expect(cutOff.get(41001)).toBeUndefined();
  await clock.run(100);
  expect(cutOff.get(41001)).toEqual([100]);
  await clock.run(120);
  expect(cutOff.get(41001)).toEqual([100, 100]);
  // The replica without its own timeout has the set's 5 s: not cut off yet, then cut off at it.
  expect(cutOff.get(41002) ?? []).toEqual([]);
  await clock.run(5_000 - 220);
  expect(cutOff.get(41002)).toEqual([5_000]);
});
