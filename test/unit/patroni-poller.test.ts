// The poller behind the summary's store[] / store_error: first member that answers wins, an
// error naming every URL tried (never a password) when none does, cleared once one answers,
// timeouts on the injected clock, a summary never waiting on Patroni. The answers served are
// real Patroni 3.0.2 ones (test/fixtures/patroni/); the real cluster is in test/e2e/patroni.test.ts.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { PatroniPoller, shownUrl } from "../../src/app/patroni";
import { ManualScheduler } from "../../src/lib/scheduler";

const healthy = readFileSync(join(import.meta.dir, "../fixtures/patroni/cluster-3.0.2-healthy.json"), "utf8");
const log = pino({ level: "silent" });

type Answer = string | Error | "hang" | { status: number; body?: string };
function fakeFetch(answers: Record<string, Answer>) {
  const asked: string[] = [];
  const fn = (url: string, init: RequestInit): Promise<Response> => {
    asked.push(url);
    const a = answers[url] ?? new Error("Unable to connect. Is the computer able to access the url?");
    if (a === "hang")
      return new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal!.reason)));
    if (a instanceof Error) return Promise.reject(a);
    if (typeof a === "string") return Promise.resolve(new Response(a, { status: 200 }));
    return Promise.resolve(new Response(a.body ?? "", { status: a.status }));
  };
  return { fn, asked, answers };
}

describe("PatroniPoller", () => {
  test("before the first answer it says so; the first member that answers gives the members", async () => {
    const f = fakeFetch({ "http://db2:8008/cluster": healthy });
    const p = new PatroniPoller({ urls: ["http://db1:8008", "http://db2:8008/"], scheduler: new ManualScheduler(), log, fetch: f.fn });
    expect(p.snapshot()).toEqual({ members: [], error: "Patroni not asked yet (http://db1:8008, http://db2:8008)" });
    await p.poll();
    const s = p.snapshot();
    expect(s.error).toBeUndefined();
    expect(s.members.map((m) => [m.name, m.role, m.lag])).toEqual([["pg1", "leader", 0], ["pg2", "replica", 0], ["pg3", "replica", 0]]);
    // The one that answered is asked first next time.
    f.asked.length = 0;
    await p.poll();
    expect(f.asked).toEqual(["http://db2:8008/cluster"]);
  });

  test("none answers: store_error names each URL and why, without passwords; one answering again clears it", async () => {
    const f = fakeFetch({
      "http://admin:hunter2@db1:8008/cluster": { status: 503, body: "{}" },
      "http://db2:8008/cluster": "<html>",
      "http://db3:8008/cluster": JSON.stringify({ members: [{ name: 5, role: "leader", state: "running" }] }),
    });
    const p = new PatroniPoller({ urls: ["http://admin:hunter2@db1:8008", "http://db2:8008", "http://db3:8008", "http://db4:8008"], scheduler: new ManualScheduler(), log, fetch: f.fn });
    await p.poll();
    const e = p.snapshot().error!;
    expect(e).toStartWith("no Patroni member answered GET /cluster: ");
    expect(e).toContain("http://db1:8008 (HTTP 503)");
    expect(e).toContain("http://db2:8008 (answer is not JSON)");
    expect(e).toContain("http://db3:8008 (unexpected answer from Patroni's /cluster: members[0].name:");
    expect(e).toContain("http://db4:8008 (Unable to connect");
    expect(e).not.toContain("hunter2");
    expect(p.snapshot().members).toEqual([]);
    f.answers["http://db4:8008/cluster"] = healthy;
    await p.poll();
    expect(p.snapshot().error).toBeUndefined();
    expect(p.snapshot().members).toHaveLength(3);
  });

  test("a member that hangs times out on the scheduler's clock and the next one is asked", async () => {
    const clock = new ManualScheduler();
    const f = fakeFetch({ "http://db1:8008/cluster": "hang", "http://db2:8008/cluster": healthy });
    const p = new PatroniPoller({ urls: ["http://db1:8008", "http://db2:8008"], scheduler: clock, log, fetch: f.fn, timeoutMs: 1500 });
    let done = false;
    const round = p.poll().then(() => (done = true));
    await clock.run(1499);
    expect(done).toBe(false);
    expect(f.asked).toEqual(["http://db1:8008/cluster"]);
    await clock.run(2);
    await round;
    expect(f.asked).toEqual(["http://db1:8008/cluster", "http://db2:8008/cluster"]);
    expect(p.snapshot().members).toHaveLength(3);
  });

  test("all hang: the error says how long it waited; polls never overlap; the summary's read never waits", async () => {
    const clock = new ManualScheduler();
    const f = fakeFetch({ "http://db1:8008/cluster": "hang" });
    const p = new PatroniPoller({ urls: ["http://db1:8008"], scheduler: clock, log, fetch: f.fn, timeoutMs: 1000, intervalMs: 300 });
    p.start();
    await clock.run(900);
    // Three intervals passed while the first ask hung: still one ask.
    expect(f.asked).toHaveLength(1);
    expect(p.snapshot().error).toStartWith("Patroni not asked yet");
    await clock.run(200);
    expect(p.snapshot().error).toBe("no Patroni member answered GET /cluster: http://db1:8008 (no answer within 1000 ms)");
    await clock.run(300);
    expect(f.asked).toHaveLength(2);
    p.stop();
    await clock.run(3000);
    expect(f.asked).toHaveLength(2);
  });

  test("shownUrl drops credentials and control characters", () => {
    expect(shownUrl("http://u:p@db1:8008/")).toBe("http://db1:8008");
    expect(shownUrl("not a url u:p@x")).toBe("not a url u:p@x");
    expect(shownUrl("http://db1:8008/\x1b[2J")).not.toContain("\x1b");
  });
});
