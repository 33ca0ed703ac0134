// The agent's loops on a ManualScheduler, against a head node faked at the fetch: heartbeats at
// the interval the server sets, a backoff that doubles to its cap while the server is down and
// gives way to the interval again once it answers, and a long poll that pauses instead of
// spinning when something in between answers at once. No real time passes.

import { afterEach, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { AGENT_TIMING, type FetchLike, NodeAgent } from "../../src/agent/agent";
import { AgentConfig } from "../../src/config";
import { ManualScheduler } from "../../src/lib/scheduler";
import { scratchDir } from "../helpers/tmp";

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const INTERVAL = 1_000;

/** A head node that answers heartbeats (or refuses connections while down) and long polls. */
class FakeHead {
  readonly heartbeats: number[] = [];
  readonly polls: number[] = [];
  down = false;
  /** Long polls answer at once (a proxy that does not hold requests) instead of after wait_ms. */
  pollAnswersAtOnce = false;

  constructor(private readonly clock: ManualScheduler) {}

  private answer(): Response {
    return Response.json({ assignments: [], heartbeat_interval_ms: INTERVAL, generation: 1 });
  }

  readonly fetch: FetchLike = async (input, init) => {
    const url = new URL(String(input));
    if (url.pathname === "/agent/v1/heartbeat") {
      this.heartbeats.push(this.clock.mono());
      if (this.down) throw new TypeError("Unable to connect. Is the computer able to access the url?");
      return this.answer();
    }
    this.polls.push(this.clock.mono());
    if (this.pollAnswersAtOnce) return this.answer();
    const wait = Number(url.searchParams.get("wait_ms"));
    return new Promise<Response>((resolve, reject) => {
      const timer = this.clock.after(wait, () => resolve(this.answer()));
      init?.signal?.addEventListener("abort", () => {
        timer.cancel();
        reject(init.signal!.reason);
      });
    });
  };
}

async function startAgent(): Promise<{ clock: ManualScheduler; head: FakeHead; agent: NodeAgent }> {
  const dir = scratchDir("llmgw-agent-loops-");
  cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
  const clock = new ManualScheduler();
  const head = new FakeHead(clock);
  const config = AgentConfig.parse({
    server: "http://head.test:8001",
    token: "join-token-for-the-loop-tests",
    name: "n1",
    address: "10.0.0.5",
    state_dir: dir,
    simulate: "H100-80GB:1",
    logs_listen: "off",
  });
  const agent = new NodeAgent({ config, log: pino({ level: "silent" }), selfExe: ["/nonexistent/llmgw"], fetch: head.fetch, scheduler: clock });
  cleanup.push(() => agent.stop());
  await agent.start();
  return { clock, head, agent };
}

const gaps = (times: number[]) => times.slice(1).map((t, i) => t - times[i]!);

test("heartbeats go out at the interval the server set, not before", async () => {
  const { clock, head } = await startAgent();
  expect(head.heartbeats).toEqual([0]);
  await clock.run(INTERVAL - 1);
  expect(head.heartbeats).toEqual([0]);
  await clock.run(1);
  expect(head.heartbeats).toEqual([0, INTERVAL]);
  await clock.run(2 * INTERVAL);
  expect(head.heartbeats).toEqual([0, INTERVAL, 2 * INTERVAL, 3 * INTERVAL]);
});

test("while the server is down heartbeats back off, doubling to the cap; once it answers the interval holds again", async () => {
  const { clock, head } = await startAgent();
  head.down = true;
  // From the first failure: 500 ms doubling, capped at 10 s.
  await clock.run(INTERVAL + 500 + 1_000 + 2_000 + 4_000 + 8_000 + 10_000 + 10_000);
  head.down = false;
  await clock.run(10_000 + INTERVAL);
  expect(AGENT_TIMING.backoffInitialMs).toBe(500);
  expect(gaps(head.heartbeats)).toEqual([INTERVAL, 500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000, INTERVAL]);
});

test("a long poll held for wait_ms is asked again at once; one answered at once pauses for the backoff", async () => {
  const { clock, head } = await startAgent();
  const wait = AGENT_TIMING.longPollWaitMs;
  await clock.run(2 * wait);
  expect(head.polls).toEqual([0, wait, 2 * wait]);

  head.pollAnswersAtOnce = true;
  await clock.run(wait + 3 * AGENT_TIMING.backoffInitialMs);
  // The poll held until 3 * wait answers then; from there each answer comes at once, and the next ask waits 500 ms.
  expect(gaps(head.polls.filter((t) => t >= 3 * wait))).toEqual([500, 500, 500]);
});
