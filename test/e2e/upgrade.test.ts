// An upgrade through the binaries, under a steady client (test/helpers/steady-client.ts: streamed
// and plain requests, a few a second, retried only before the first byte of an answer):
//   1. `serve` on SQLite, the previous release's binary (helpers/previous-binary.ts), restarted
//      as this one; then this one restarted again (the next upgrade's stop, with streams in flight);
//   2. both agents, the previous release's, upgraded one at a time with --keep-replicas: their
//      engines adopted, none restarted (the same pids throughout), and `status` showing the mixed
//      versions meanwhile;
//   3. a model's args changed: its replicas rolled one at a time with surge (never fewer than its
//      min ready, the old engines ending one by one), and no other model's engine restarted.
// Every request succeeds, except what the previous release's own stop cut (it did not drain; the
// test says how many); the counts per step are printed.

import { afterAll, describe, expect, test } from "bun:test";
import type { NodeView, Summary } from "../../src/protocol/views";
import { run } from "../helpers/binary";
import { Cluster, running } from "../helpers/cluster";
import { previousBinary } from "../helpers/previous-binary";
import { SteadyClient } from "../helpers/steady-client";
import { until } from "../helpers/until";

const NODES = ["a", "b"];
/** One replica on each node: an agent's upgrade leaves its replica serving from the engine it adopts. */
const CHAT = { replicas: { min: 2 }, placement: "spread", profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] };
/** A model no step changes: its engine runs from the first step to the last. */
const OTHER = { replicas: { min: 1 }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 1 }] };

describe("upgrade from the previous build: serve, then each agent with --keep-replicas, under a steady client", () => {
  let c: Cluster | undefined;
  afterAll(() => c?.cleanup(), 30_000);

  test("every request succeeds (retries only before the first byte); every engine keeps its pid; status shows the mixed versions", async () => {
    const previous = previousBinary();
    c = new Cluster(["--node-timeout", "15s"]);
    const cl = c;
    const old = cl.addBinary(previous.bin, "llmgw-previous");
    const current = run(cl.bin, ["version"], { cwd: cl.dir }).stdout.trim().split(/\s+/)[1] ?? "";
    await cl.startServe(old);
    for (const n of NODES) cl.startAgent(n, ["--keep-replicas"], old);
    await until("2 nodes ready", async () => (await cl.nodes()).filter((n) => n.state === "ready").length === NODES.length, 30_000);
    expect(await cl.putModel("chat", CHAT)).toBe(201);
    expect(await cl.putModel("other", OTHER)).toBe(201);
    await until("2 ready replicas", async () => (await cl.readyOf("chat")).length === 2 && (await cl.readyOf("other")).length === 1, 30_000);
    /** Replica id → engine pid, from the agents' own state files. */
    const engines = () => new Map(NODES.flatMap((n) => [...cl.stateFiles(n)].map(([id, s]) => [id, s.pid] as const)));
    const before = engines();
    expect(before.size).toBe(3);

    const steady = new SteadyClient({ url: () => cl.serve.routerUrl, model: "chat" });
    const served = (phase: string, n = 8) => until(`${n} answers in "${phase}"`, () => steady.of(phase).succeeded >= n, 30_000);
    const heard = (since: number) =>
      until("both agents heard by the new serve", async () => (await cl.nodes().catch(() => [] as NodeView[])).filter((n) => n.state === "ready" && Date.parse(n.last_heartbeat) > since + 1000).length === 2, 30_000);
    steady.mark("previous serve, previous agents");
    steady.start();
    await served("previous serve, previous agents");

    // 1. serve: the previous release stopped (as it stops: it did not drain), this one started.
    steady.mark("serve previous → new");
    await until("a request under way", () => steady.active > 0, 10_000);
    const oldStop = Date.now();
    cl.serve.proc.kill("SIGTERM");
    await cl.serve.proc.exited;
    const oldGone = Date.now();
    await cl.startServe();
    await heard(Date.now());
    await served("serve previous → new");

    // This release's stop: the router drains what is in flight (streams of about a second).
    steady.mark("serve new → new (drains)");
    await until("streams under way", () => steady.active >= 2, 10_000);
    const inFlightAtStop = steady.active;
    cl.serve.proc.kill("SIGTERM");
    await cl.serve.proc.exited;
    await cl.startServe();
    await heard(Date.now());
    await served("serve new → new (drains)");

    // 2. each agent in turn: stopped with its engines left running, this release adopting them.
    for (const [i, name] of NODES.entries()) {
      const phase = `agent ${name} previous → new`;
      steady.mark(phase);
      const agent = cl.agents.get(name)!;
      agent.kill("SIGTERM");
      await agent.exited;
      cl.startAgent(name, ["--keep-replicas"], cl.bin);
      await until(`${name} heartbeats as ${current}`, async () => (await cl.nodes()).find((n) => n.name === name && n.agent_version === current && n.agent_protocol === 2 && n.state === "ready"), 30_000);
      await served(phase);
      if (i === 0) {
        // Half way: status names the two versions, with counts, in JSON and in text; nodes -o wide each node's.
        const json = run(cl.bin, ["status", "-o", "json"], { cwd: cl.dir });
        expect(json.code).toBe(0);
        const s = JSON.parse(json.stdout) as Summary;
        expect(s.agent_versions).toEqual([
          { version: current, protocol: 2, nodes: 1 },
          { version: previous.version, protocol: previous.protocol, nodes: 1 },
        ]);
        // Wrapped to the terminal's width: read as one line.
        const text = run(cl.bin, ["status"], { cwd: cl.dir }).stdout.replace(/\s+/g, " ");
        expect(text).toContain(`agents on 2 versions: ${current} (protocol 2) ×1, ${previous.version} (protocol ${previous.protocol}) ×1`);
        const wide = run(cl.bin, ["nodes", "-o", "wide"], { cwd: cl.dir }).stdout;
        expect(wide).toContain("PROTOCOL");
        expect(wide).toMatch(new RegExp(`\\n${name} .*${current.replace(/\./g, "\\.")} +2 `));
      }
    }
    const after = engines();

    // 3. chat's args changed: rolled one at a time, every other engine left alone.
    const rollPhase = "chat's args changed (rolled)";
    steady.mark(rollPhase);
    const oldChat = (await cl.readyOf("chat")).map((r) => r.id);
    const oldChatPids = oldChat.map((id) => after.get(id)!);
    expect(await cl.putModel("chat", { ...CHAT, profiles: [{ ...CHAT.profiles[0]!, args: ["--max-model-len", "8192"] }] })).toBe(200);
    let fewestReady = Infinity;
    const aliveSeen: number[] = [];
    await until("chat rolled onto two new replicas", async () => {
      const mine = (await cl.replicas()).filter((r) => r.model === "chat");
      fewestReady = Math.min(fewestReady, mine.filter((r) => r.state === "ready").length);
      const alive = oldChatPids.filter((p) => running(p)).length;
      if (aliveSeen.at(-1) !== alive) aliveSeen.push(alive);
      return mine.length === 2 && mine.every((r) => r.state === "ready" && !oldChat.includes(r.id)) && alive === 0;
    }, 60_000);
    await served(rollPhase);
    const rolled = engines();
    await steady.stop();

    // In flight when the previous release's serve was stopped, and ended as it went.
    const cutByPrevious = steady.failures.filter((f) => f.startedAt <= oldStop && f.endedAt >= oldStop && f.endedAt <= oldGone + 1000 && f.why.startsWith("cut after the first byte"));
    console.log(
      `upgrade from ${previous.commit.slice(0, 7)} (${previous.version}) to ${current}; ${inFlightAtStop} requests in flight when this release's serve was stopped\n${steady.report()}\n` +
        `cut by the previous release's stop (it did not drain): ${cutByPrevious.length}`,
    );
    // Nothing failed but what the previous release's stop cut while it was in flight.
    expect(steady.failures.filter((f) => !cutByPrevious.includes(f)).map((f) => `${f.phase}: ${f.why}`)).toEqual([]);
    expect(steady.of("serve new → new (drains)").failures).toBe(0);
    // Every engine adopted: the same replicas, the same processes, alive.
    expect([...after]).toEqual([...before]);
    // The roll: chat's two engines replaced one at a time, never below its min of 2 ready; the
    // other model's engine untouched by the whole upgrade.
    console.log(`chat rolled: fewest ready ${fewestReady}; old engines alive ${aliveSeen.join(" → ")}`);
    expect(fewestReady).toBe(2);
    expect(aliveSeen).toEqual([2, 1, 0]);
    const otherId = (await cl.readyOf("other"))[0]!.id;
    expect(rolled.get(otherId)).toBe(before.get(otherId));
    expect(running(rolled.get(otherId)!)).toBe(true);
    expect(rolled.size).toBe(3);
    for (const id of oldChat) expect(rolled.has(id)).toBe(false);
    const status = JSON.parse(run(cl.bin, ["status", "-o", "json"], { cwd: cl.dir }).stdout) as Summary;
    expect(status.agent_versions).toEqual([{ version: current, protocol: 2, nodes: 2 }]);
  }, 180_000);
});
