// Rolling a model's replicas through the compiled binary: serve and two simulated agents, a model
// of two replicas under a steady client (streamed and not). A catalog apply that changes the
// profile's args, and then `llmgw models restart`, each replace the replicas one at a time: a new
// one ready before an old one stops, never fewer than two ready, the old engines' processes ending
// one by one, and every request answered (retries before the first byte allowed, counted).

import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ModelView, ReplicaView } from "../../src/protocol/views";
import { run, until } from "../helpers/binary";
import { type Cluster, running, withCluster } from "../helpers/cluster";
import { steadyLoad } from "../helpers/steady-load";

const MODEL = "rolled";
/** Tokens come 15 ms apart, so a request is in flight for a while when its replica is drained. */
const catalog = (args: string[]) =>
  `models:\n  - name: ${MODEL}\n    replicas: { min: 2 }\n    profiles:\n      - { name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1, args: ${JSON.stringify(args)}, env: { LLMGW_FAKE_TOKEN_DELAY_MS: "15" } }\n`;

/** What a watcher saw while a roll went on: the fewest ready, each sample's live engine pids of the model, the roll's lines. */
interface Watch {
  minReady: number;
  samples: Set<number>[];
  rolloutTexts: Set<string>;
}

/** Samples the model's replicas and their engines every 100 ms until `done` says so. */
async function watchRoll(c: Cluster, done: (list: ReplicaView[]) => boolean): Promise<Watch> {
  const w: Watch = { minReady: Infinity, samples: [], rolloutTexts: new Set() };
  const deadline = Date.now() + 60_000;
  for (;;) {
    const { byId, list } = await c.enginesByReplica();
    const mine = list.filter((r) => r.model === MODEL);
    w.minReady = Math.min(w.minReady, mine.filter((r) => r.state === "ready").length);
    w.samples.push(new Set(mine.flatMap((r) => byId.get(r.id) ?? [])));
    const m = await c.api<ModelView>(`/api/v1/models/${MODEL}`);
    if (m.rollout) w.rolloutTexts.add(m.rollout.text);
    if (done(mine)) return w;
    if (Date.now() > deadline) throw new Error(`the roll did not finish in 60 s: ${JSON.stringify(mine.map((r) => [r.id, r.state]))}`);
    await Bun.sleep(100);
  }
}

/** The old engine pids still alive in each sample: they must go 2 → 1 → 0, never both at once. */
function oldAlive(w: Watch, old: readonly number[]): number[] {
  const counts = w.samples.map((s) => old.filter((p) => s.has(p)).length);
  return counts.filter((n, i) => i === 0 || n !== counts[i - 1]);
}

describe("rolling a model's replicas", () => {
  const c = withCluster(["--drain-timeout", "20s"]);
  const cli = (...args: string[]) => run(c().bin, args, { cwd: c().dir });

  async function readyPids(): Promise<{ ids: string[]; pids: number[] }> {
    const { byId, list } = await c().enginesByReplica();
    const ready = list.filter((r) => r.model === MODEL && r.state === "ready");
    return { ids: ready.map((r) => r.id).sort(), pids: ready.flatMap((r) => byId.get(r.id) ?? []) };
  }

  async function roll(start: () => void, label: string): Promise<void> {
    const before = await readyPids();
    expect(before.ids.length).toBe(2);
    expect(before.pids.length).toBe(2);
    const load = steadyLoad({ routerUrl: c().serve.routerUrl, model: MODEL, concurrency: 3, maxTokens: 12 });
    await until("the steady client answered", () => load.now().ok >= 6);
    start();
    const w = await watchRoll(c(), (mine) => mine.length === 2 && mine.every((r) => r.state === "ready" && !before.ids.includes(r.id)));
    const report = await load.stop();
    const after = await readyPids();
    console.log(
      `${label}: ${report.ok} requests answered (${report.streamed} streamed, ${report.plain} not), ${report.retries} retried before the first byte, ${report.failures.length} failed; ` +
        `fewest ready ${w.minReady}; old engines alive ${oldAlive(w, before.pids).join(" → ")}; progress seen: ${[...w.rolloutTexts].join(" | ")}`,
    );
    expect(report.failures).toEqual([]);
    expect(report.ok).toBeGreaterThan(10);
    expect(w.minReady).toBe(2);
    // Replaced one at a time: the old engines end one by one, and are gone.
    expect(oldAlive(w, before.pids)).toEqual([2, 1, 0]);
    for (const pid of before.pids) expect(running(pid)).toBe(false);
    expect(after.pids.some((p) => before.pids.includes(p))).toBe(false);
    expect([...w.rolloutTexts].some((t) => /^\d of 2 replaced/.test(t))).toBe(true);
    // The roll is over: the model says nothing of one.
    expect((await c().api<ModelView>(`/api/v1/models/${MODEL}`)).rollout).toBeUndefined();
  }

  test("a catalog apply that changes args, then models restart: replaced one at a time under load, nothing dropped", async () => {
    const file = join(c().dir, "catalog.yaml");
    writeFileSync(file, catalog(["--max-model-len", "4096"]));
    expect(cli("apply", "-f", file).code).toBe(0);
    await until("two replicas ready", async () => (await c().readyOf(MODEL)).length === 2, 30_000);

    // Applying the same file again changes nothing: nothing rolls.
    const same = await readyPids();
    expect(cli("apply", "-f", file).code).toBe(0);
    await Bun.sleep(1000);
    expect((await readyPids()).pids.sort()).toEqual(same.pids.sort());

    writeFileSync(file, catalog(["--max-model-len", "8192"]));
    await roll(() => expect(cli("apply", "-f", file).code).toBe(0), "apply with new args");
    expect((await c().events("replica.replaced")).length).toBe(2);

    await roll(() => {
      const r = cli("models", "restart", MODEL);
      expect(r.code).toBe(0);
      expect(r.stdout).toContain(`model/${MODEL} restarting: 2 replicas`);
    }, "models restart");
    expect((await c().events("replica.replaced")).length).toBe(4);

    const unknown = cli("models", "restart", "no-such-model");
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain(`model "no-such-model" not found`);
  }, 150_000);

  test("a roll goes on where it stopped after serve restarts mid-way: it is kept in the store", async () => {
    const before = await readyPids();
    expect(before.ids.length).toBe(2);
    expect(cli("models", "restart", MODEL).code).toBe(0);
    // One old replica replaced, the other not yet: serve is killed there.
    await until("one old replica replaced", async () => {
      const mine = (await c().replicas()).filter((r) => r.model === MODEL);
      return mine.filter((r) => before.ids.includes(r.id)).length === 1 && mine.filter((r) => r.state === "ready").length === 2;
    }, 30_000);
    process.kill(c().serve.pid, "SIGKILL");
    await c().serve.proc.exited;
    await c().startServe();
    const w = await watchRoll(c(), (mine) => mine.length === 2 && mine.every((r) => r.state === "ready" && !before.ids.includes(r.id)));
    expect(w.minReady).toBe(2);
    for (const pid of before.pids) expect(running(pid)).toBe(false);
    expect(cli("models", MODEL).stdout).not.toContain("rollout:");
  }, 90_000);
});
