// `llmgw explain MODEL` and `llmgw apply -f FILE --dry-run` through the compiled binary, against
// `serve` with simulated agents (heartbeats over HTTP): a model that cannot fit now is explained
// node by node with what would make it fit; the dry run says where new replicas would go and
// why not, and changes nothing (the models, the replicas and the event log are as before).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ApplyDryRun, EventView, Explanation, ModelView, ReplicaView } from "../../src/protocol/views";
import { heartbeat } from "../helpers/fleet";
import { heartbeatSender, run, scratchWithBinary, startServe } from "../helpers/binary";

let dir: string;
let bin: string;
let serve: Awaited<ReturnType<typeof startServe>>;
let send: ReturnType<typeof heartbeatSender>;

const H = "H100-80GB";
const h100x8 = Array.from({ length: 8 }, () => H);
const cli = (...args: string[]) => run(bin, args, { cwd: dir });
const api = async <T>(path: string): Promise<T> => (await (await fetch(`${serve.adminUrl}${path}`, { headers: { authorization: `Bearer ${serve.adminToken}` } })).json()) as T;
const beat = async () => {
  for (const name of ["gpu-a", "gpu-b"]) expect((await send(heartbeat({ name, fabrics: ["ib-a"], gpus: h100x8 }))).status).toBe(200);
  expect((await send(heartbeat({ name: "gpu-c", fabrics: ["ib-a"], gpus: [H, H] }))).status).toBe(200);
};
const until = async (what: string, ok: () => Promise<boolean>) => {
  for (let i = 0; i < 100; i++) {
    if (await ok()) return;
    await Bun.sleep(50);
  }
  throw new Error(`timed out waiting for ${what}`);
};

beforeAll(async () => {
  ({ dir, bin } = scratchWithBinary());
  // Heartbeats stop once qwen is placed (one that did not report it would soon have it taken as
  // lost): the nodes must stay reachable for the whole test.
  serve = await startServe(bin, dir, ["--node-timeout", "5m"]);
  send = heartbeatSender(serve);
  await beat();
  writeFileSync(join(dir, "qwen.yaml"), "models:\n  - name: qwen\n    replicas: {min: 1, max: 1}\n    profiles:\n      - {name: h100x8, engine: vllm, gpu_class: H100-80GB, gpus: 8}\n");
  expect(cli("apply", "-f", "qwen.yaml").code).toBe(0);
  await until("qwen placed", async () => (await api<ReplicaView[]>("/api/v1/replicas")).length === 1);
});
afterAll(async () => {
  serve?.proc.kill("SIGTERM");
  await serve?.proc.exited;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("explain and apply --dry-run through the binary", () => {
  let qwenNode = "";
  let other = "";

  test("a model that cannot fit now: each node's bucket, and uncordoning the named node as the way out", async () => {
    qwenNode = (await api<ReplicaView[]>("/api/v1/replicas"))[0]!.shards[0]!.node;
    other = qwenNode === "gpu-a" ? "gpu-b" : "gpu-a";
    expect(cli("cordon", other).code).toBe(0);
    writeFileSync(join(dir, "big.yaml"), "models:\n  - name: big\n    replicas: {min: 1, max: 1}\n    profiles:\n      - {name: h100x8, engine: vllm, gpu_class: H100-80GB, gpus: 8}\n");
    expect(cli("apply", "-f", "big.yaml").code).toBe(0);

    const r = cli("explain", "big");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Model:     big: not now\n");
    expect(r.stdout).toContain("Profile h100x8 (vllm, 8× H100-80GB, priority 0): not now\n");
    expect(r.stdout).toContain("  1 node filtered by GPU count; 1 not ready: cordoned; 1 exhausted: 8/8 H100-80GB used; 0 fit\n");
    expect(r.stdout).toMatch(new RegExp(`not ready: cordoned\\s+1  ${other}: cordoned\\n`));
    expect(r.stdout).toMatch(new RegExp(`exhausted\\s+1  ${qwenNode}: 8/8 H100-80GB used by r-\\w+ \\(qwen, starting\\)\\n`));
    expect(r.stdout).toContain(`What would make it fit:\n  - uncordon ${other} (\`llmgw uncordon ${other}\`): it would go to ${other} GPU 0,1,2,3,4,5,6,7\n`);
    expect(r.stdout).not.toContain("\x1b[");

    const j = JSON.parse(cli("explain", "big", "-o", "json").stdout) as Explanation;
    expect(j.status).toBe("not_now");
    expect(j.suggestions.find((s) => s.kind === "uncordon")!.nodes).toEqual([other]);

    const missing = cli("explain", "nope");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('error: model "nope" not found\n');
    expect(cli("explain").code).toBe(2);
  });

  test("a model that runs: where, and that nothing is needed", () => {
    const r = cli("explain", "qwen");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Model:     qwen: running\n");
    expect(r.stdout).toMatch(new RegExp(`qwen has what it wants: 0 of 1 ready, 1 starting \\(r-\\w+ on ${qwenNode} GPU 0,1,2,3,4,5,6,7\\); nothing is needed`));
  });

  test("apply --dry-run says what would change and where, or why not, and changes nothing", async () => {
    const before = { models: await api<ModelView[]>("/api/v1/models"), replicas: await api<ReplicaView[]>("/api/v1/replicas"), events: await api<EventView[]>("/api/v1/events?limit=1000") };
    writeFileSync(
      join(dir, "next.yaml"),
      [
        "models:",
        "  - name: qwen",
        "    replicas: {min: 1, max: 1}",
        "    profiles:",
        "      - {name: h100x8, engine: vllm, gpu_class: H100-80GB, gpus: 8}",
        "  - name: small",
        "    profiles:",
        "      - {name: one, engine: vllm, gpu_class: H100-80GB, gpus: 1}",
        "  - name: huge",
        "    profiles:",
        "      - {name: p, engine: vllm, gpu_class: H100-80GB, gpus: 16}",
        "",
      ].join("\n"),
    );
    const r = cli("apply", "-f", "next.yaml", "--dry-run");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(
      [
        "model/qwen unchanged",
        "model/small created (dry run)",
        "  would start a replica (profile one) on gpu-c GPU 0",
        "model/huge created (dry run)",
        "  can never fit on this fleet: no node has 16 H100-80GB GPUs (the largest has 8); waiting will not help (add such nodes, or change the model's profiles)",
        "dry run: nothing was changed",
        "",
      ].join("\n"),
    );
    const j = JSON.parse(cli("apply", "-f", "next.yaml", "--dry-run", "-o", "json").stdout) as ApplyDryRun;
    expect(j.dry_run).toBe(true);
    expect(j.results.map((x) => [x.name, x.result, x.verdict])).toEqual([
      ["qwen", "unchanged", "running"],
      ["small", "created", "fits"],
      ["huge", "created", "never"],
    ]);

    // A tick or two later: no model created, nothing placed on gpu-c, no event about either model.
    await Bun.sleep(300);
    const names = (ms: ModelView[]) => ms.map((m) => `${m.name}@${m.revision}`);
    expect(names(await api<ModelView[]>("/api/v1/models"))).toEqual(names(before.models));
    expect(names(before.models)).toEqual(["big@1", "qwen@1"]);
    expect((await api<ReplicaView[]>("/api/v1/replicas")).map((x) => x.id)).toEqual(before.replicas.map((x) => x.id));
    const events = await api<EventView[]>("/api/v1/events?limit=1000");
    expect(events.length).toBe(before.events.length);
    expect(events.some((e) => e.subject === "model/small" || e.subject === "model/huge")).toBe(false);
  });

  test("--dry-run with --wait is a usage error, and -o without --dry-run too", () => {
    const both = cli("apply", "-f", "next.yaml", "--dry-run", "--wait");
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("--dry-run changes nothing");
    expect(cli("apply", "-f", "next.yaml", "-o", "json").code).toBe(2);
    expect(cli("apply", "--help").stdout).toContain("--dry-run");
    expect(cli("explain", "--help").stdout).toContain("llmgw explain MODEL");
  });
});
