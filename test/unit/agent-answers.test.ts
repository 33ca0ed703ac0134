// What the agent checks of an answer before it obeys it (src/agent/answer-guard.ts), on a
// ManualScheduler against head nodes faked at the fetch: an empty set that comes with a new count
// (a restarted server, a new leader, another server) is held until a second answer says the same,
// and a leader epoch that jumps too far is followed only once another server confirms it. The
// engines are never spawned (the executable does not exist): what the agent keeps or stops shows
// in its process set, and in its log.

import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import pino from "pino";
import { EPOCH_FILE, type FetchLike, NodeAgent } from "../../src/agent/agent";
import { EPOCH_JUMP_MAX, EpochJumps, GENERATION_RESET_JUMP, emptySetHold } from "../../src/agent/answer-guard";
import { AgentConfig } from "../../src/config";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Assignment, AssignmentsQuery, EPOCH_MAX, HeartbeatResponse } from "../../src/protocol/heartbeat";
import { freePort } from "../helpers/ports";
import { scratchDir } from "../helpers/tmp";

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const INTERVAL = 1_000;

// ---- the pure decisions ---------------------------------------------------------------------

describe("emptySetHold", () => {
  const prev = { server: "http://a", generation: 5_001, base: 5_000, epoch: 2 };
  test("the first answer after the agent starts, and the same count moving on, are obeyed", () => {
    expect(emptySetHold(null, prev)).toBeUndefined();
    expect(emptySetHold(prev, { ...prev, generation: 5_002 })).toBeUndefined();
  });
  test("a new base, epoch or server is another count; so is a base appearing or going", () => {
    expect(emptySetHold(prev, { ...prev, base: 9_000, generation: 9_000 })).toContain("the server restarted");
    expect(emptySetHold(prev, { ...prev, epoch: 3 })).toBe("the leader epoch changed from 2 to 3");
    expect(emptySetHold(prev, { ...prev, server: "http://b" })).toContain("another server answers (http://b");
    expect(emptySetHold(prev, { ...prev, base: undefined })).toContain("the server restarted");
    expect(emptySetHold({ ...prev, base: undefined }, prev)).toContain("the server restarted");
  });
  test("without a base (older servers), a generation that goes back or leaps is a restart; one that steps is not", () => {
    const old = { ...prev, base: undefined };
    expect(emptySetHold(old, { ...old, generation: old.generation + 3 })).toBeUndefined();
    expect(emptySetHold(old, { ...old, generation: old.generation + GENERATION_RESET_JUMP })).toContain("jumped");
    expect(emptySetHold(old, { ...old, generation: 7 })).toContain("jumped");
  });
});

describe("EpochJumps", () => {
  test("up to EPOCH_JUMP_MAX above the highest is judged as before; beyond, one server's word is not enough, a second's is", () => {
    const j = new EpochJumps();
    expect(j.judge("a", 3 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "within" });
    expect(j.judge("a", 2, 3)).toEqual({ kind: "within" });
    expect(j.judge("a", 4 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "unconfirmed" });
    // The same server again confirms nothing; a lower claim elsewhere neither.
    expect(j.judge("a", 4 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "unconfirmed" });
    expect(j.judge("b", 5 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "unconfirmed" });
    expect(j.judge("c", 4 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "confirmed", by: "a" });
    j.followed();
    expect(j.judge("c", 4 + EPOCH_JUMP_MAX, 3)).toEqual({ kind: "unconfirmed" });
  });
});

// ---- the agent ------------------------------------------------------------------------------

type Said = Omit<HeartbeatResponse, "heartbeat_interval_ms">;

/** One head node at the fetch: answers heartbeats, and long polls once its generation moves (or wait_ms passes). */
class FakeServer {
  said: Said;
  /** Answers handed out once each, before `said`, to whichever request comes next (a forgery). */
  readonly once: unknown[] = [];
  heartbeats = 0;
  private readonly waiters = new Set<() => void>();

  constructor(
    readonly url: string,
    said: Said,
  ) {
    this.said = said;
  }

  /** What it says from now on; long polls waiting are answered. */
  say(s: Partial<Said>): void {
    this.said = { ...this.said, ...s };
    for (const w of [...this.waiters]) w();
  }

  async answer(path: string, query: URLSearchParams, signal: AbortSignal | undefined, clock: ManualScheduler): Promise<Response> {
    if (path === "/agent/v1/heartbeat") this.heartbeats++;
    else {
      const q = AssignmentsQuery.parse(Object.fromEntries(query));
      if (q.generation === this.said.generation && q.wait_ms > 0 && this.once.length === 0)
        await new Promise<void>((resolve, reject) => {
          const done = () => {
            timer.cancel();
            this.waiters.delete(done);
            resolve();
          };
          const timer = clock.after(q.wait_ms, done);
          this.waiters.add(done);
          signal?.addEventListener("abort", () => {
            done();
            reject(signal.reason);
          });
        });
    }
    const body = this.once.shift() ?? { ...this.said, heartbeat_interval_ms: INTERVAL };
    return Response.json(body);
  }
}

function assignment(id: string, port: number): Assignment {
  return Assignment.parse({
    id,
    model: "m",
    served_names: ["m"],
    profile: "h100",
    engine: "vllm",
    port,
    gpus: [0],
    gpu_uuids: ["GPU-0"],
    shard: { rank: 0, size: 1, leader_address: "127.0.0.1", leader_port: port + 1 },
  });
}

type Line = { level: number; msg: string; [k: string]: unknown };

async function startAgent(servers: FakeServer[], o: { stateDir?: string } = {}) {
  const stateDir = o.stateDir ?? scratchDir("llmgw-agent-answers-");
  cleanup.push(() => rmSync(stateDir, { recursive: true, force: true }));
  const clock = new ManualScheduler();
  const lines: Line[] = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) });
  const fetch: FetchLike = async (input, init) => {
    const url = new URL(String(input));
    const server = servers.find((s) => s.url === url.origin);
    if (!server) throw new TypeError("Unable to connect. Is the computer able to access the url?");
    return server.answer(url.pathname, url.searchParams, init?.signal ?? undefined, clock);
  };
  const config = AgentConfig.parse({
    server: servers.map((s) => s.url),
    token: "join-token-for-the-answer-tests",
    name: "n1",
    address: "127.0.0.1",
    engine_host: "127.0.0.1",
    state_dir: stateDir,
    simulate: "H100-80GB:1",
    logs_listen: "off",
  });
  // No such executable: an assigned replica is kept in the process set (failed to start), which is all these cases look at.
  const agent = new NodeAgent({ config, log, selfExe: ["/nonexistent/llmgw"], fetch, scheduler: clock });
  cleanup.push(() => agent.stop());
  await agent.start();
  await clock.run(0);
  const kept = () => agent.reports().map((r) => r.id);
  const said = (start: string) => lines.filter((l) => typeof l.msg === "string" && l.msg.startsWith(start));
  return { agent, clock, lines, kept, said, stateDir };
}

const stops = (lines: Line[]) => lines.filter((l) => l.msg === "replica no longer assigned; stopping");

describe("an empty set that comes with a new count waits for a second answer", () => {
  test("a restarted head node (a new generation base) answering nothing at first: held, then its projected set replaces it; nothing stopped", async () => {
    const r1 = assignment("r1", freePort());
    const head = new FakeServer("http://head.test:8001", { assignments: [r1], generation: 5_001, generation_base: 5_000 });
    const { clock, kept, said, lines } = await startAgent([head]);
    expect(kept()).toEqual(["r1"]);

    // The restart: a new count, and, before its first projection, nothing (the long poll has it at once).
    head.say({ assignments: [], generation: 9_000, generation_base: 9_000 });
    await clock.run(0);
    expect(kept()).toEqual(["r1"]);
    const held = said("holding back an empty assignment set");
    expect(held).toHaveLength(1);
    expect(held[0]).toMatchObject({ level: 40, replicas: ["r1"], generation: 9_000, previous_generation: 5_001 });
    expect(held[0]!.msg).toContain("the server restarted");

    // Its projection follows: the set is the one running.
    head.say({ assignments: [r1], generation: 9_001 });
    await clock.run(2 * INTERVAL);
    expect(kept()).toEqual(["r1"]);
    expect(stops(lines)).toEqual([]);
  });

  test("a second answer of the same count saying nothing confirms it: then the engines are stopped", async () => {
    const head = new FakeServer("http://head.test:8001", { assignments: [assignment("r1", freePort())], generation: 5_001, generation_base: 5_000 });
    const { clock, kept, said, lines } = await startAgent([head]);
    head.say({ assignments: [], generation: 9_000, generation_base: 9_000 });
    await clock.run(0);
    expect(kept()).toEqual(["r1"]);
    // The next heartbeat, an interval later, says the same.
    await clock.run(INTERVAL);
    expect(kept()).toEqual([]);
    expect(said("a second answer from http://head.test:8001 confirms the empty assignment set")).toHaveLength(1);
    expect(stops(lines).map((l) => l.replica)).toEqual(["r1"]);
  });

  test("a new leader epoch with nothing: the epoch is followed at once, the set held until confirmed", async () => {
    const head = new FakeServer("http://head.test:8001", { assignments: [assignment("r1", freePort())], generation: 11, generation_base: 10, epoch: 4 });
    const { agent, clock, kept, said } = await startAgent([head]);
    head.say({ assignments: [], generation: 12, epoch: 5 });
    await clock.run(0);
    expect(agent.highestEpoch).toBe(5);
    expect(kept()).toEqual(["r1"]);
    expect(said("holding back an empty assignment set")[0]!.msg).toContain("the leader epoch changed from 4 to 5");
    await clock.run(INTERVAL);
    expect(kept()).toEqual([]);
  });

  test("an older server (no generation base) that restarted: told by its generation's leap", async () => {
    const head = new FakeServer("http://head.test:8001", { assignments: [assignment("r1", freePort())], generation: 1_700_000_000_000_001 });
    const { clock, kept, said } = await startAgent([head]);
    head.say({ assignments: [], generation: 1_700_000_000_900_000 });
    await clock.run(0);
    expect(kept()).toEqual(["r1"]);
    expect(said("holding back an empty assignment set")[0]!.msg).toContain("jumped");
  });

  test("the same count taking everything away is obeyed at once, as before", async () => {
    const head = new FakeServer("http://head.test:8001", { assignments: [assignment("r1", freePort())], generation: 5_001, generation_base: 5_000 });
    const { clock, kept, said } = await startAgent([head]);
    head.say({ assignments: [], generation: 5_002 });
    await clock.run(0);
    expect(kept()).toEqual([]);
    expect(said("holding back")).toEqual([]);
  });
});

describe("a leader epoch that jumps too far is followed only when another server confirms it", () => {
  const r1 = () => assignment("r1", freePort());

  test("epoch 2^53 − 1 is refused by the schema; one 5,000 above is neither followed, kept nor applied; the real leader is followed on", async () => {
    const head = new FakeServer("http://head.test:8001", { assignments: [r1()], generation: 11, generation_base: 10, epoch: 3 });
    const { agent, clock, kept, said, stateDir } = await startAgent([head]);
    expect(agent.highestEpoch).toBe(3);
    const forged = { assignments: [], heartbeat_interval_ms: INTERVAL, generation: 99, generation_base: 99 };

    head.once.push({ ...forged, epoch: 2 ** 53 - 1 });
    await clock.run(INTERVAL);
    expect(HeartbeatResponse.safeParse({ ...forged, epoch: EPOCH_MAX + 1 }).success).toBe(false);
    expect(agent.highestEpoch).toBe(3);

    head.once.push({ ...forged, epoch: 3 + 5_000 });
    await clock.run(INTERVAL);
    expect(agent.highestEpoch).toBe(3);
    expect(JSON.parse(readFileSync(join(stateDir, EPOCH_FILE), "utf8")).epoch).toBe(3);
    expect(kept()).toEqual(["r1"]);
    const refused = said("refusing assignments from http://head.test:8001");
    expect(refused).toHaveLength(1);
    expect(refused[0]).toMatchObject({ level: 40, epoch: 5_003, highest_epoch: 3 });
    expect(refused[0]!.msg).toContain(`leader epoch 5003, more than ${EPOCH_JUMP_MAX} above epoch 3 seen before`);
    expect(refused[0]!.msg).toContain("--server-fingerprint");

    // The real leader goes on: its next epoch is followed, its set applied.
    const r2 = assignment("r2", freePort());
    head.say({ assignments: [head.said.assignments[0]!, r2], generation: 12, epoch: 4 });
    await clock.run(INTERVAL);
    expect(agent.highestEpoch).toBe(4);
    expect(kept().sort()).toEqual(["r1", "r2"]);
  });

  test("with two servers, a forged jump at the first sends the agent to the second, whose leader it follows", async () => {
    const a = new FakeServer("http://a.test:8001", { assignments: [r1()], generation: 11, generation_base: 10, epoch: 3 });
    const b = new FakeServer("http://b.test:8001", { assignments: a.said.assignments, generation: 21, generation_base: 20, epoch: 3 });
    const { agent, clock, kept } = await startAgent([a, b]);
    expect(agent.server).toBe(a.url);
    a.say({ assignments: [], generation: 12, epoch: 3 + 5_000 });
    await clock.run(INTERVAL);
    expect(agent.server).toBe(b.url);
    expect(agent.highestEpoch).toBe(3);
    expect(kept()).toEqual(["r1"]);
  });

  test("a jump both servers report is followed: kept in leader.epoch, its set applied", async () => {
    const a = new FakeServer("http://a.test:8001", { assignments: [r1()], generation: 11, generation_base: 10, epoch: 3 });
    const b = new FakeServer("http://b.test:8001", { assignments: a.said.assignments, generation: 21, generation_base: 20, epoch: 3 });
    const { agent, clock, kept, said, stateDir } = await startAgent([a, b]);
    const r2 = assignment("r2", freePort());
    b.say({ assignments: [r2], generation: 22, epoch: 3 + 5_000 });
    a.say({ assignments: [r2], generation: 12, epoch: 3 + 5_000 });
    await clock.run(INTERVAL);
    expect(agent.server).toBe(b.url);
    expect(agent.highestEpoch).toBe(5_003);
    expect(JSON.parse(readFileSync(join(stateDir, EPOCH_FILE), "utf8"))).toEqual({ epoch: 5_003, server: b.url });
    expect(kept()).toEqual(["r2"]);
    expect(said("leader epoch 5003 from http://b.test:8001 is more than")[0]!.msg).toContain("and http://a.test:8001 reports it too: following it");
  });

  test("an absurd epoch an older agent kept is ignored at start, with a warning", async () => {
    const stateDir = scratchDir("llmgw-agent-answers-");
    writeFileSync(join(stateDir, EPOCH_FILE), JSON.stringify({ epoch: 2 ** 53 - 1, server: "http://forged" }));
    const head = new FakeServer("http://head.test:8001", { assignments: [r1()], generation: 11, generation_base: 10, epoch: 3 });
    const { agent, kept, said } = await startAgent([head], { stateDir });
    expect(agent.highestEpoch).toBe(3);
    expect(kept()).toEqual(["r1"]);
    expect(said(`ignoring leader epoch ${2 ** 53 - 1}`)).toHaveLength(1);
    expect(existsSync(join(stateDir, EPOCH_FILE))).toBe(true);
  });
});
