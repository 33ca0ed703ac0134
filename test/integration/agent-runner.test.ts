// The process runner against real child processes: a tiny HTTP server script run with bun that
// answers /health (at once, after a delay, never), exits with an error, or ignores SIGTERM.
//
// Where a test is about the runner's own timers (the start deadline, the stop grace, the health
// poll interval) it drives them with a ManualScheduler. The waits that remain (`until`) are on
// the real child processes: starting up, answering, writing output, exiting after a signal.

import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LaunchError } from "../../src/agent/engines";
import { isAlive, lastLines, ProcessSet, readTail, ReplicaProcess, type LaunchSpec, type ReplicaProcessOptions } from "../../src/agent/runner";
import { ManualScheduler } from "../../src/lib/scheduler";
import { Assignment, type ReplicaReport } from "../../src/protocol/heartbeat";
import { readFixture } from "../fixtures/read";
import { until } from "../helpers/until";
import { scratchDir } from "../helpers/tmp";

const SERVER = `
const [port, mode = "ok", delay = "0"] = process.argv.slice(2);
if (mode === "fail") {
  console.log("loading weights from /models/x");
  console.error("RuntimeError: CUDA out of memory");
  process.exit(1);
}
if (mode === "ignore-term") process.on("SIGTERM", () => console.log("got SIGTERM, ignoring it"));
const readyAt = Date.now() + Number(delay);
Bun.serve({
  hostname: "127.0.0.1",
  port: Number(port),
  fetch(req) {
    const path = new URL(req.url).pathname;
    if (path === "/health") {
      // "keyed": an engine stricter than any real one, whose /health wants its key too.
      if (mode === "keyed" && req.headers.get("authorization") !== "Bearer " + process.env.LLMGW_FAKE_ENGINE_API_KEY)
        return new Response("no key", { status: 401 });
      const ok = mode !== "never" && Date.now() >= readyAt;
      return new Response(ok ? "ok" : "loading", { status: ok ? 200 : 503 });
    }
    if (path === "/crash") {
      setTimeout(() => { console.error("fatal: engine crashed"); process.exit(7); }, 5);
      return new Response("bye");
    }
    return new Response("not found", { status: 404 });
  },
});
console.log("fake server listening on " + port);
`;

const FAST = { healthInterval: 20, startTimeout: 15_000, healthTimeout: 500 } as const;

let dir: string;
let script: string;
const cleanup: Array<() => Promise<void>> = [];

beforeEach(() => {
  dir = scratchDir("llmgw-runner-");
  script = join(dir, "server.ts");
  writeFileSync(script, SERVER);
});

afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
  rmSync(dir, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  const s = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response() });
  const port = s.port!;
  await s.stop(true);
  return port;
}

function assignment(id: string, port: number, args: string[] = [], over: Partial<Assignment> = {}): Assignment {
  return Assignment.parse({
    id,
    model: "m",
    served_names: ["m"],
    profile: "p",
    engine: "fake",
    port,
    gpus: [],
    gpu_uuids: [],
    args,
    shard: { rank: 0, size: 1, leader_address: "", leader_port: 29500 },
    ...over,
  });
}

/** Runs the test server; the assignment's args carry its mode and delay. */
function serverLaunch(a: Assignment): LaunchSpec {
  return { cmd: [process.execPath, script, String(a.port), ...a.args], env: {} };
}

function replica(a: Assignment, over: Partial<ReplicaProcessOptions> = {}): { rp: ReplicaProcess; events: ReplicaReport[] } {
  const events: ReplicaReport[] = [];
  const rp = new ReplicaProcess({
    assignment: a,
    launch: serverLaunch(a),
    logDir: join(dir, "logs"),
    ...FAST,
    onChange: (r) => events.push(r),
    ...over,
  });
  cleanup.push(() => rp.stop(0));
  return { rp, events };
}

function processSet(over: Partial<ConstructorParameters<typeof ProcessSet>[0]> = {}): ProcessSet {
  const set = new ProcessSet({ render: serverLaunch, logDir: join(dir, "logs"), stopGrace: 2_000, ...FAST, ...over });
  cleanup.push(() => set.stopAll(0));
  return set;
}

/**
 * Until a replica on a manual clock is ready: the clock moves one health interval per look, and
 * the wait between looks is for the real child to start serving.
 */
function readyOn(clock: ManualScheduler, rp: ReplicaProcess): Promise<true> {
  return until(`${rp.id} ready`, async () => {
    await clock.run(FAST.healthInterval);
    return rp.currentState === "ready";
  });
}

describe("ReplicaProcess", () => {
  test("becomes ready once /health answers 200, and reports it", async () => {
    const port = await freePort();
    const { rp, events } = replica(assignment("r-ready", port));
    expect(rp.report()).toEqual({ id: "r-ready", state: "starting", port, error: null });
    rp.start();
    expect(rp.pid).toBeGreaterThan(0);
    await until("ready", () => rp.currentState === "ready");
    expect(rp.report()).toEqual({ id: "r-ready", state: "ready", port, error: null });
    expect(events.map((e) => e.state)).toEqual(["ready"]);
    await rp.stop(2_000);
    expect(rp.report().state).toBe("stopped");
    expect(events.map((e) => e.state)).toEqual(["ready", "stopped"]);
    expect(isAlive(rp.pid!)).toBe(false);
  });

  test("stays starting while /health says 503, then becomes ready", async () => {
    // Real time: the 400 ms delay is the child's own, before its /health says 200.
    const port = await freePort();
    const { rp } = replica(assignment("r-slow", port, ["ok", "400"]));
    const t0 = Date.now();
    rp.start();
    await until("the server to answer", () => readLog(rp).includes("listening"));
    expect(rp.currentState).toBe("starting");
    await until("ready", () => rp.currentState === "ready");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(400);
  });

  test("an engine that exits at start fails with its exit code and the line of its output that says why", async () => {
    const port = await freePort();
    const { rp, events } = replica(assignment("r-fail", port, ["fail"]));
    rp.start();
    await until("failed", () => rp.currentState === "failed");
    const err = rp.report().error!;
    // The other line ("loading weights from /models/x") is in its log, for `llmgw logs --previous`.
    expect(err).toBe("exited with code 1: RuntimeError: CUDA out of memory");
    expect(events).toEqual([{ id: "r-fail", state: "failed", port, error: err }]);
  });

  test("an engine never healthy fails after the start timeout and is killed", async () => {
    const port = await freePort();
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-never", port, ["never"]), { startTimeout: 300, scheduler: clock });
    rp.start();
    // The child's banner must be in the log for the reason to quote it.
    await until("the server to answer", () => readLog(rp).includes("listening"));
    clock.advance(299);
    expect(rp.currentState).toBe("starting");
    clock.advance(1);
    expect(rp.currentState).toBe("failed");
    const err = rp.report().error!;
    expect(err).toStartWith("not healthy after 300ms: ");
    expect(err).toContain("fake server listening on");
    await until("the process to be gone", () => !isAlive(rp.pid!));
    // The kill that followed does not replace the reason.
    expect(rp.report().error).toBe(err);
  });

  test("the assignment's start_timeout_ms, when set, is how long the engine has to become healthy", async () => {
    const port = await freePort();
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-own-timeout", port, ["never"], { start_timeout_ms: 300 }), { startTimeout: 15_000, scheduler: clock });
    rp.start();
    clock.advance(299);
    expect(rp.currentState).toBe("starting");
    clock.advance(1);
    expect(rp.currentState).toBe("failed");
    expect(rp.report().error).toStartWith("not healthy after 300ms");
    await until("the process to be gone", () => !isAlive(rp.pid!));
  });

  test("a vLLM that dies with its cause screens above the last lines is reported by that cause first", async () => {
    const port = await freePort();
    const body = join(dir, "vllm-oom.txt");
    writeFileSync(body, readFixture("engine-logs/vllm/root-cause-above-oom.log"));
    const engine = join(dir, "vllm-oom.ts");
    writeFileSync(engine, `process.stderr.write(await Bun.file(${JSON.stringify(body)}).text()); process.exit(1);`);
    const a = assignment("r-vllm-oom", port, [], { engine: "vllm" });
    const { rp } = replica(a, { launch: { cmd: [process.execPath, engine], env: {} } });
    rp.start();
    await until("failed", () => rp.currentState === "failed");
    const err = rp.report().error!;
    expect(err).toStartWith("exited with code 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of 79.19 GiB");
    // Said once: the last lines (which end "Engine core initialization failed. See root cause above") are the log's.
    expect(err).not.toContain("\n");
    expect(err).not.toContain("Engine core initialization failed");
    expect(err.split("torch.OutOfMemoryError").length).toBe(2);
  });

  test("a ready engine that exits becomes failed with its output", async () => {
    const port = await freePort();
    const { rp, events } = replica(assignment("r-crash", port));
    rp.start();
    await until("ready", () => rp.currentState === "ready");
    await fetch(`http://127.0.0.1:${port}/crash`).then((r) => r.text());
    await until("failed", () => rp.currentState === "failed");
    expect(rp.report().error).toStartWith("exited with code 7: ");
    expect(rp.report().error).toContain("fatal: engine crashed");
    expect(events.map((e) => e.state)).toEqual(["ready", "failed"]);
  });

  test("stop() sends SIGTERM, then SIGKILL to an engine that ignores it", async () => {
    const port = await freePort();
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-stubborn", port, ["ignore-term"]), { scheduler: clock });
    rp.start();
    await readyOn(clock, rp);
    const first = rp.stop(300);
    expect(rp.stop(300)).toBe(first); // idempotent: the same stop
    await until("the child to ignore its SIGTERM", () => readLog(rp).includes("got SIGTERM, ignoring it"));
    clock.advance(299);
    expect(isAlive(rp.pid!)).toBe(true);
    clock.advance(1); // the grace is over: SIGKILL
    await first;
    expect(isAlive(rp.pid!)).toBe(false);
    expect(readLog(rp)).toContain("got SIGTERM, ignoring it");
    expect(rp.currentState).toBe("stopped");
    await rp.stop(300); // and again after it finished
  });

  test("stop() of an engine that honours SIGTERM does not wait out the grace period", async () => {
    const port = await freePort();
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-polite", port), { scheduler: clock });
    rp.start();
    await readyOn(clock, rp);
    // The clock stands still: the stop ends with the child's exit, not with the grace period.
    await rp.stop(10_000);
    expect(isAlive(rp.pid!)).toBe(false);
  });

  test("stop() before start() means it never starts", async () => {
    const { rp } = replica(assignment("r-never-started", await freePort()));
    await rp.stop(100);
    rp.start();
    expect(rp.pid).toBeNull();
    expect(rp.currentState).toBe("stopped");
  });

  test("the log file gets stdout and stderr; a new run moves the last one to <id>.previous.log; a failure quotes only its own run", async () => {
    const port = await freePort();
    const a = assignment("r/log", port, ["fail"]);
    const first = replica(a).rp;
    first.start();
    await until("failed", () => first.currentState === "failed");
    const b = replica(assignment("r/log", port)).rp;
    b.start();
    await until("ready", () => b.currentState === "ready");
    await fetch(`http://127.0.0.1:${port}/crash`).then((r) => r.text());
    await until("failed", () => b.currentState === "failed");

    // The id's slash does not escape the log directory.
    expect(b.logPath).toBe(join(dir, "logs", "r_log.log"));
    const log = readFileSync(b.logPath, "utf8");
    const previous = readFileSync(join(dir, "logs", "r_log.previous.log"), "utf8");
    expect(previous).toContain("RuntimeError: CUDA out of memory");
    expect(log).not.toContain("CUDA out of memory");
    expect(log).toContain("fake server listening on");
    expect(log).toContain("fatal: engine crashed");
    expect(log.match(/=== llmgw: starting replica r\/log/g)?.length).toBe(1);
    expect(previous.match(/=== llmgw: starting replica r\/log/g)?.length).toBe(1);
    expect(b.report().error).not.toContain("CUDA out of memory");
  });

  test("a command that cannot be spawned, or rendered, is a failed replica", async () => {
    const missing = replica(assignment("r-enoent", await freePort()), { launch: { cmd: [join(dir, "no-such-engine")], env: {} } }).rp;
    missing.start();
    expect(missing.currentState).toBe("failed");
    expect(missing.report().error).toMatch(/^could not start: .*no-such-engine/);

    const bad = replica(assignment("r-render", await freePort()), {
      launch: () => {
        throw new LaunchError("replica r-render: llama.cpp cannot run one replica across 2 nodes");
      },
    }).rp;
    bad.start();
    expect(bad.report().error).toBe("could not start: replica r-render: llama.cpp cannot run one replica across 2 nodes");
  });

  test("env is merged over the agent's environment", async () => {
    const port = await freePort();
    const probe = join(dir, "env.ts");
    writeFileSync(probe, `console.log("X=" + process.env.LLMGW_TEST_X + " PATH=" + (process.env.PATH ? "set" : "unset")); process.exit(3);`);
    const { rp } = replica(assignment("r-env", port), { launch: { cmd: [process.execPath, probe], env: { LLMGW_TEST_X: "42" } } });
    rp.start();
    await until("failed", () => rp.currentState === "failed");
    expect(rp.report().error).toContain("X=42 PATH=set");
  });

  test("an engine's colours and title sequences are made printable in the failure reason", async () => {
    const port = await freePort();
    const probe = join(dir, "ansi.ts");
    writeFileSync(probe, `console.log("\\u001b[31mRuntimeError: CUDA out of memory\\u001b[0m\\u001b]0;pwned\\u0007"); process.exit(3);`);
    const { rp } = replica(assignment("r-ansi", port), { launch: { cmd: [process.execPath, probe], env: {} } });
    rp.start();
    await until("failed", () => rp.currentState === "failed");
    const reason = rp.report().error!;
    expect(reason).toContain("RuntimeError: CUDA out of memory");
    expect(reason).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  });

  test("health is polled with the injected fetch at the engine's port", async () => {
    const port = await freePort();
    const urls: string[] = [];
    const fakeFetch = async (url: string) => {
      urls.push(url);
      return new Response(null, { status: urls.length >= 3 ? 200 : 503 });
    };
    const sleeper = join(dir, "sleep.ts");
    writeFileSync(sleeper, "setInterval(() => {}, 1000);");
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-fetch", port), { fetch: fakeFetch, launch: { cmd: [process.execPath, sleeper], env: {} }, scheduler: clock });
    rp.start();
    // The first probe at once, then one per health interval until one answers 200.
    await clock.run(0);
    expect([urls.length, rp.currentState]).toEqual([1, "starting"]);
    await clock.run(FAST.healthInterval);
    expect([urls.length, rp.currentState]).toEqual([2, "starting"]);
    await clock.run(FAST.healthInterval);
    expect([urls.length, rp.currentState]).toEqual([3, "ready"]);
    expect(new Set(urls)).toEqual(new Set([`http://127.0.0.1:${port}/health`]));
  });

  test("a shard without HTTP (headless worker) is ready while alive and failed when it exits", async () => {
    const port = await freePort();
    const clock = new ManualScheduler();
    const { rp } = replica(assignment("r-headless", port, ["ok"]), {
      launch: { cmd: [process.execPath, script, String(port), "never"], env: {}, servesHttp: false },
      startTimeout: 100,
      scheduler: clock,
    });
    rp.start();
    expect(rp.currentState).toBe("ready");
    await clock.run(200); // past the start timeout, which does not apply to it
    expect(rp.currentState).toBe("ready");
    process.kill(rp.pid!, "SIGKILL");
    await until("failed", () => rp.currentState === "failed");
    expect(rp.report().error).toStartWith("killed by signal SIGKILL");
  });
});

describe("ProcessSet", () => {
  test("reconcile starts missing replicas, stops unassigned ones and keeps the rest", async () => {
    const set = processSet();
    const [pa, pb, pc] = [await freePort(), await freePort(), await freePort()];
    await set.reconcile([assignment("a", pa), assignment("b", pb)]);
    expect(set.ids().sort()).toEqual(["a", "b"]);
    await until("both ready", () => set.reports().every((r) => r.state === "ready"));
    const a = set.get("a")!;
    const b = set.get("b")!;

    await set.reconcile([assignment("b", pb), assignment("c", pc)]);
    expect(isAlive(a.pid!)).toBe(false);
    expect(a.currentState).toBe("stopped");
    expect(set.get("b")).toBe(b);
    expect(isAlive(b.pid!)).toBe(true);
    expect(set.ids().sort()).toEqual(["b", "c"]);
    await until("c ready", () => set.get("c")?.currentState === "ready");
    expect(set.reports().sort((x, y) => x.id.localeCompare(y.id))).toEqual([
      { id: "b", state: "ready", port: pb, error: null },
      { id: "c", state: "ready", port: pc, error: null },
    ]);
  });

  test("a failed replica that stays assigned is kept failed, not restarted", async () => {
    const set = processSet();
    const a = assignment("f", await freePort(), ["fail"]);
    await set.reconcile([a]);
    await until("failed", () => set.get("f")?.currentState === "failed");
    const rp = set.get("f")!;
    await set.reconcile([a]);
    expect(set.get("f")).toBe(rp);
    expect(set.reports()[0]!.state).toBe("failed");
  });

  test("a render error shows up as a failed replica in the reports", async () => {
    const set = processSet({
      render: () => {
        throw new LaunchError("replica x: llama.cpp cannot run one replica across 2 nodes");
      },
    });
    await set.reconcile([assignment("x", await freePort())]);
    expect(set.reports()).toEqual([
      { id: "x", state: "failed", port: expect.any(Number), error: "could not start: replica x: llama.cpp cannot run one replica across 2 nodes" },
    ]);
  });

  test("onChange sees every replica's transitions", async () => {
    const seen: string[] = [];
    const set = processSet({ onChange: (r) => seen.push(`${r.id}:${r.state}`) });
    await set.reconcile([assignment("o", await freePort())]);
    await until("ready", () => seen.includes("o:ready"));
    await set.reconcile([]);
    expect(seen).toEqual(["o:ready", "o:stopped"]);
  });

  test("stopAll leaves no process alive, including one that ignores SIGTERM", async () => {
    const clock = new ManualScheduler();
    const set = processSet({ scheduler: clock });
    await set.reconcile([assignment("s1", await freePort()), assignment("s2", await freePort(), ["ignore-term"]), assignment("s3", await freePort(), ["ok", "60000"])]);
    await readyOn(clock, set.get("s1")!);
    await readyOn(clock, set.get("s2")!);
    const pids = set.ids().map((id) => set.get(id)!.pid!);
    expect(pids.every((p) => isAlive(p))).toBe(true);
    const s2 = set.get("s2")!;
    const stopped = set.stopAll(200);
    await until("s2 to ignore its SIGTERM", () => readLog(s2).includes("got SIGTERM, ignoring it"));
    clock.advance(200); // s2's grace is over: SIGKILL
    await stopped;
    for (const p of pids) expect(isAlive(p)).toBe(false);
    expect(set.reports()).toEqual([]);
  });

  test("concurrent reconciles do not start a replica twice", async () => {
    const set = processSet();
    const a = assignment("once", await freePort());
    await Promise.all([set.reconcile([a]), set.reconcile([a]), set.reconcile([a])]);
    await until("ready", () => set.get("once")?.currentState === "ready");
    const log = readFileSync(set.get("once")!.logPath, "utf8");
    expect(log.match(/=== llmgw: starting replica once/g)?.length).toBe(1);
  });
});

describe("adoption across agent restarts", () => {
  test("a kept engine is adopted by the next agent, health-polled, and watched for exit", async () => {
    const stateDir = join(dir, "state");
    const port = await freePort();
    const first = processSet({ stateDir, keepAcrossRestarts: true });
    await first.reconcile([assignment("keep/me", port)]);
    await until("ready", () => first.get("keep/me")?.currentState === "ready");
    const pid = first.get("keep/me")!.pid!;
    const statePath = ReplicaProcess.statePath(stateDir, "keep/me");
    expect(JSON.parse(readFileSync(statePath, "utf8"))).toMatchObject({ pid, port, assignment: { id: "keep/me" } });

    first.detachAll(); // the agent exits, keeping its engines
    expect(isAlive(pid)).toBe(true);

    const seen: string[] = [];
    const second = processSet({ stateDir, keepAcrossRestarts: true, onChange: (r) => seen.push(r.state) });
    expect(await second.recover()).toEqual(["keep/me"]);
    const adopted = second.get("keep/me")!;
    expect(adopted.pid).toBe(pid);
    await until("ready again", () => adopted.currentState === "ready");

    // Same id assigned again: the adopted engine is kept, not restarted.
    await second.reconcile([assignment("keep/me", port)]);
    expect(second.get("keep/me")).toBe(adopted);

    await fetch(`http://127.0.0.1:${port}/crash`).then((r) => r.text());
    await until("failed", () => adopted.currentState === "failed");
    expect(adopted.report().error).toStartWith("exited (adopted process; exit code unknown): ");
    expect(adopted.report().error).toContain("fatal: engine crashed");
    expect(seen).toEqual(["ready", "failed"]);
    expect(existsSync(statePath)).toBe(false);
  });

  test("without keepAcrossRestarts, engines left behind are stopped on recovery", async () => {
    const stateDir = join(dir, "state");
    const first = processSet({ stateDir, keepAcrossRestarts: true });
    await first.reconcile([assignment("stray", await freePort(), ["ignore-term"])]);
    await until("ready", () => first.get("stray")?.currentState === "ready");
    const pid = first.get("stray")!.pid!;
    first.detachAll(); // e.g. the previous agent crashed

    const second = processSet({ stateDir, keepAcrossRestarts: false, stopGrace: 200 });
    expect(await second.recover()).toEqual([]);
    expect(isAlive(pid)).toBe(false);
    expect(second.reports()).toEqual([]);
    expect(existsSync(ReplicaProcess.statePath(stateDir, "stray"))).toBe(false);
  });

  test("state files of dead or reused pids, and unreadable ones, are dropped", async () => {
    const stateDir = join(dir, "state");
    const a = assignment("gone", 8100);
    // A pid that exited: spawn something short-lived and wait for it.
    const p = Bun.spawn({ cmd: [process.execPath, "-e", "0"] });
    await p.exited;
    ReplicaProcess.writeState(stateDir, { pid: p.pid, port: 8100, assignment: a, log_offset: 0, serves_http: true, proc_start: null });
    // Our own pid, but recorded with another start time: a reused pid, not our engine.
    ReplicaProcess.writeState(stateDir, {
      pid: process.pid,
      port: 8101,
      assignment: assignment("reused", 8101),
      log_offset: 0,
      serves_http: true,
      proc_start: "1",
    });
    writeFileSync(join(stateDir, "junk.json"), "{not json");

    const set = processSet({ stateDir, keepAcrossRestarts: true });
    expect(await set.recover()).toEqual([]);
    expect(set.reports()).toEqual([]);
    expect(ReplicaProcess.readStates(stateDir)).toEqual([]);
  });
});

describe("secrets and file modes", () => {
  const KEY = "ek-0123456789abcdef0123456789abcdef0123456789abcdef";
  const HF = "hf_SeCrEtToKeNvAlUe0123456789";

  function keyedAssignment(id: string, port: number): Assignment {
    return Assignment.parse({ ...assignment(id, port), env: { HF_TOKEN: HF, OTHER: "plain-but-private-value" }, engine_key: KEY });
  }
  /** As renderLaunch does for SGLang (key on the command line) and the others (key in the env). */
  const keyedLaunch = (a: Assignment): LaunchSpec => ({
    cmd: [process.execPath, script, String(a.port), "keyed", "0", "--api-key", a.engine_key!],
    env: { ...a.env, LLMGW_FAKE_ENGINE_API_KEY: a.engine_key! },
    apiKey: a.engine_key,
  });

  /** Every file and directory under root with its permission bits. */
  function walk(root: string): { path: string; dir: boolean; mode: number }[] {
    const out: { path: string; dir: boolean; mode: number }[] = [];
    for (const name of readdirSync(root)) {
      const path = join(root, name);
      const st = statSync(path);
      out.push({ path, dir: st.isDirectory(), mode: st.mode & 0o777 });
      if (st.isDirectory()) out.push(...walk(path));
    }
    return out;
  }

  test("logs and state files are 0600 in 0700 directories and hold no env value or key; adoption still works", async () => {
    const root = join(dir, "agent");
    const logDir = join(root, "logs");
    const stateDir = join(root, "replicas");
    // What an older agent left: a world-readable directory and log.
    mkdirSync(logDir, { recursive: true, mode: 0o755 });
    chmodSync(logDir, 0o755);
    writeFileSync(join(logDir, "r-secret.log"), "old output\n", { mode: 0o644 });
    chmodSync(join(logDir, "r-secret.log"), 0o644);

    const port = await freePort();
    const a = keyedAssignment("r-secret", port);
    const first = processSet({ logDir, stateDir, keepAcrossRestarts: true, render: keyedLaunch });
    await first.reconcile([a]);
    // Ready means the probe presented the key: this engine's /health answers 401 without it.
    await until("ready", () => first.get("r-secret")?.currentState === "ready");
    const pid = first.get("r-secret")!.pid!;

    const check = () => {
      const entries = walk(root);
      expect(entries.filter((e) => !e.dir).map((e) => e.path).sort()).toEqual([join(logDir, "r-secret.log"), join(logDir, "r-secret.previous.log"), ReplicaProcess.statePath(stateDir, "r-secret")]);
      for (const e of entries) expect([e.path, e.mode.toString(8)]).toEqual([e.path, e.dir ? "700" : "600"]);
      for (const e of entries.filter((x) => !x.dir)) {
        const bytes = readFileSync(e.path);
        for (const secret of [KEY, HF, "plain-but-private-value"]) expect([e.path, bytes.includes(Buffer.from(secret))]).toEqual([e.path, false]);
      }
    };
    check();
    expect(readFileSync(join(logDir, "r-secret.log"), "utf8")).toContain('"--api-key","<engine key>"');

    first.detachAll();
    const probes: (string | null)[] = [];
    const recordingFetch = (url: string, init?: RequestInit) => {
      probes.push(new Headers(init?.headers).get("authorization"));
      return fetch(url, init);
    };
    const second = processSet({ logDir, stateDir, keepAcrossRestarts: true, render: keyedLaunch, fetch: recordingFetch });
    expect(await second.recover()).toEqual(["r-secret"]);
    const adopted = second.get("r-secret")!;
    expect(adopted.pid).toBe(pid);
    // The state file kept no key: the probe has none until the head node's next assignment.
    await until("three probes", () => probes.length >= 3);
    expect(adopted.currentState).toBe("starting");
    expect(new Set(probes)).toEqual(new Set([null]));
    await second.reconcile([a]);
    expect(second.get("r-secret")).toBe(adopted);
    await until("ready after the assignment said the key", () => adopted.currentState === "ready");
    expect(probes.at(-1)).toBe(`Bearer ${KEY}`);
    check();
  });

  test("a state file from an older agent that held env and key is read, and rewritten without them", () => {
    const stateDir = join(dir, "state");
    const a = keyedAssignment("old", 8100);
    mkdirSync(stateDir, { recursive: true });
    writeFileSync(ReplicaProcess.statePath(stateDir, "old"), JSON.stringify({ pid: process.pid, port: 8100, assignment: a, log_offset: 0, serves_http: true, proc_start: null }));
    expect(ReplicaProcess.readStates(stateDir)[0]!.assignment.id).toBe("old");
    ReplicaProcess.writeState(stateDir, { pid: process.pid, port: 8100, assignment: a, log_offset: 0, serves_http: true, proc_start: null });
    const text = readFileSync(ReplicaProcess.statePath(stateDir, "old"), "utf8");
    expect(text).not.toContain(KEY);
    expect(text).not.toContain(HF);
    expect(ReplicaProcess.readStates(stateDir)[0]!.assignment).toMatchObject({ env: {}, engine_key: null });
    expect((statSync(stateDir).mode & 0o777).toString(8)).toBe("700");
    expect((statSync(ReplicaProcess.statePath(stateDir, "old")).mode & 0o777).toString(8)).toBe("600");
  });
});

describe("lastLines", () => {
  test("returns the last n non-empty lines after the offset", () => {
    const f = join(dir, "x.log");
    writeFileSync(f, "old 1\nold 2\n");
    const offset = readFileSync(f).length;
    writeFileSync(f, "old 1\nold 2\nnew 1\n\nnew 2\r\nnew 3\n");
    expect(lastLines(f, offset, 2)).toBe("new 2\nnew 3");
    expect(lastLines(f, offset, 30)).toBe("new 1\nnew 2\nnew 3");
    expect(lastLines(f, 10_000, 30)).toBe("");
    expect(lastLines(join(dir, "missing.log"), 0, 30)).toBe("");
  });
});

describe("readTail", () => {
  test("this run's output only, its last 64 KiB, without the line the window cuts", () => {
    const f = join(dir, "big.log");
    const before = "torch.OutOfMemoryError: CUDA out of memory (an earlier run)\n";
    writeFileSync(f, before);
    expect(readTail(f, before.length)).toBe("");
    const lines = Array.from({ length: 2_000 }, (_, i) => `line ${String(i).padStart(4, "0")} ${"z".repeat(40)}`);
    writeFileSync(f, `${before}${lines.join("\n")}\n`);
    const tail = readTail(f, before.length);
    expect(Buffer.byteLength(tail)).toBeLessThanOrEqual(64 * 1024);
    expect(tail).not.toContain("earlier run");
    const first = tail.split("\n")[0]!;
    expect(lines).toContain(first); // a whole line, not the end of one
    expect(tail.endsWith(`${lines.at(-1)}\n`)).toBe(true);
    // Short enough: everything after the offset, the first line included.
    writeFileSync(f, `${before}one\ntwo\n`);
    expect(readTail(f, before.length)).toBe("one\ntwo\n");
  });
});

function readLog(rp: ReplicaProcess): string {
  try {
    return readFileSync(rp.logPath, "utf8");
  } catch {
    return "";
  }
}
