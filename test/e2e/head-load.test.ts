// The rule that must never break (issue 14): a loaded head node does not declare healthy nodes
// lost. Through the compiled binary: three nodes heartbeat every second against a 3 s node
// timeout, one of them runs a ready replica; serve is frozen (SIGSTOP) for 3× the node timeout
// and thawed. Nodes kept heartbeating all along, so none may be unreachable and no replica lost;
// the head node says it was behind, in `status -o json` and in head.behind / head.caught_up.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { EventView, Summary } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe, until } from "../helpers/binary";

const NODE_TIMEOUT_S = 3;
let serve: Awaited<ReturnType<typeof startServe>>;
let dir: string;
let bin: string;
let beating = true;
const loops: Promise<void>[] = [];

const nodes = [
  { name: "load-01", gpus: ["H100-80GB", "H100-80GB"] },
  { name: "load-02", gpus: ["H100-80GB", "H100-80GB"] },
  { name: "load-03", gpus: ["H100-80GB", "H100-80GB"] },
];

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  serve = await startServe(bin, dir, ["--node-timeout", `${NODE_TIMEOUT_S}s`, "--heartbeat-interval", "1s", "--reconcile-interval", "1s"]);
  const send = heartbeatSender(serve);
  // Each node heartbeats like an agent: at the interval the answer asks for, reporting its assigned replicas ready.
  for (const d of nodes)
    loops.push(
      (async () => {
        let ready: string[] = [];
        let interval = 1000;
        while (beating) {
          try {
            const res = await Promise.race([
              send({ ...heartbeat(d), replicas: ready.map((id) => ({ id, state: "ready", port: 8100 })) } as never),
              Bun.sleep(2_000).then(() => undefined),
            ]);
            if (res?.ok) {
              const a = (await res.json()) as { assignments: { id: string }[]; heartbeat_interval_ms: number };
              ready = a.assignments.map((x) => x.id);
              interval = Math.min(10_000, a.heartbeat_interval_ms);
            }
          } catch {
            // A frozen head node: try again at the interval, as the agent does.
          }
          await Bun.sleep(interval);
        }
      })(),
    );
}, 30_000);

afterAll(async () => {
  beating = false;
  try {
    process.kill(serve.servePid, "SIGCONT");
  } catch {}
  serve?.proc.kill("SIGTERM");
  await Promise.race([Promise.all(loops), Bun.sleep(5_000)]);
  await serve?.proc.exited;
});

const events = (): EventView[] => JSON.parse(run(bin, ["events", "-n", "1000", "-o", "json"], { cwd: dir }).stdout) as EventView[];
const summary = (): Summary => JSON.parse(run(bin, ["status", "-o", "json"], { cwd: dir }).stdout) as Summary;

test("a head node frozen for 3× the node timeout declares no node unreachable and replaces no replica", async () => {
  writeFileSync(join(dir, "catalog.yaml"), "models:\n  - name: m\n    replicas: {min: 1}\n    profiles:\n      - {name: h100, engine: vllm, gpu_class: H100-80GB}\n");
  expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: dir }).code).toBe(0);
  await until("a ready replica on the nodes", async () => (summary().replicas.ready >= 1 ? true : undefined), { timeoutMs: 15_000, everyMs: 300 });
  const calm = summary();
  expect(calm.nodes.ready).toBe(3);
  expect(calm.head).toEqual({ behind_ms: 0, heartbeat_interval_ms: 1000, configured_interval_ms: 1000, shedding: [] });

  process.kill(serve.servePid, "SIGSTOP");
  await Bun.sleep(3 * NODE_TIMEOUT_S * 1000);
  process.kill(serve.servePid, "SIGCONT");

  // Right after: it knows it was behind, and slowed the nodes down.
  const behind = await until("status after the thaw", async () => summary().head, { timeoutMs: 5_000, everyMs: 300 });
  expect(behind.behind_ms).toBeGreaterThan(2 * NODE_TIMEOUT_S * 1000);
  expect(behind.heartbeat_interval_ms).toBeGreaterThan(1000);
  expect(behind.shedding).toContain("summary");
  expect(run(bin, ["status"], { cwd: dir }).stdout).toMatch(/head node behind by \d+(\.\d)? s: heartbeats slowed to \d+(\.\d)? s/);
  // Nodes go on heartbeating; the head node calms down and says so.
  await until("head.caught_up", async () => (events().some((e) => e.kind === "head.caught_up") ? true : undefined), { timeoutMs: 20_000, everyMs: 300 });

  const all = events();
  const kinds = all.map((e) => e.kind);
  expect(kinds.filter((k) => k === "head.behind").length).toBe(1);
  expect(kinds.filter((k) => k === "head.caught_up").length).toBe(1);
  expect(all.find((e) => e.kind === "head.behind")!.message).toMatch(/^head node behind by \d+(\.\d)? s: heartbeats slowed to 2 s$/);
  expect(all.filter((e) => e.kind === "node.unreachable").map((e) => e.message)).toEqual([]);
  expect(all.filter((e) => e.kind === "replica.lost" || e.kind === "replica.failed").map((e) => e.message)).toEqual([]);
  const after = summary();
  expect(after.nodes.ready).toBe(3);
  expect(after.nodes.unreachable).toBe(0);
  expect(after.replicas.ready).toBe(calm.replicas.ready);
}, 60_000);
