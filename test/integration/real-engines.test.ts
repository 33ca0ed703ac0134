// Real engines without GPUs: the agent's rendered command for every engine × version ×
// single/multi-node × whole-GPU/MIG case, run against the contract fake of that engine version
// (test/fakes), which parses it with the real flag list and fails the way the real engine does;
// and a real `llmgw agent` on a node whose PATH has the vLLM 0.10 fake (GPUs from a fake
// nvidia-smi, so the agent runs real engine templates, not its built-in fake engine).

import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { compareVersions, llamaBuild } from "../../src/agent/engine-versions";
import { ENGINE_RANGES, type Launch, LaunchError, renderLaunch } from "../../src/agent/engines";
import { Assignment } from "../../src/protocol/heartbeat";
import type { ModelView, ReplicaView } from "../../src/protocol/views";
import { run, scratchWithBinary, startServe } from "../helpers/binary";
import { type FakeDir, fakeBin, fakeEnv, probe, readRecords, recordFile, type Running, spawnFake, stop, untilHealthy } from "../helpers/contract";
import { freePort } from "../helpers/ports";
import { until } from "../helpers/until";

const running: Running[] = [];
const procs: Bun.Subprocess[] = [];
afterAll(async () => {
  for (const r of running) r.proc.kill("SIGKILL");
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.all([...running.map((r) => r.proc.exited), ...procs.map((p) => p.exited)]);
});

// ───────────────────────────────────────── the table ─────────────────────────────────────────

type Engine = "vllm" | "sglang" | "llama.cpp";
/**
 * One engine version as the agent would find it on a node. `version` is what the agent reports:
 * `vllm --version`'s line, SGLang's __version__, and for llama.cpp the build number of
 * `llama-server --version`'s "version: NNNN (hash)". `fake` is null for versions outside every
 * template's range, which must be refused before anything starts.
 */
type EngineVersion = { engine: Engine; version: string; fake: FakeDir | null; multiNode: boolean };
const VERSIONS: EngineVersion[] = [
  // vLLM's mp multi-node flags (--nnodes …) exist only after PR #23691; every release faked
  // here rejects UUIDs in CUDA_VISIBLE_DEVICES (vLLM #13815, #20939, #41848).
  { engine: "vllm", version: "0.10.2", fake: "vllm-0.10", multiNode: false },
  { engine: "vllm", version: "0.11.0", fake: "vllm-0.11", multiNode: false },
  { engine: "vllm", version: "0.12.0", fake: "vllm-0.12", multiNode: true },
  { engine: "vllm", version: "0.5.4", fake: null, multiNode: false },
  { engine: "sglang", version: "0.5.3", fake: "sglang-0.5", multiNode: true },
  { engine: "sglang", version: "0.2.9", fake: null, multiNode: false },
  // --alias: one literal name before PR #19926, a comma-separated set after it.
  { engine: "llama.cpp", version: "6000", fake: "llama-b6000", multiNode: false },
  { engine: "llama.cpp", version: "8500", fake: "llama-b8500", multiNode: false },
  { engine: "llama.cpp", version: "1200", fake: null, multiNode: false },
];

type Shape = { nodes: 1 | 2; mig: boolean; gpus: 1 | 2 };
const SHAPES: Shape[] = [
  { nodes: 1, mig: false, gpus: 1 },
  { nodes: 1, mig: false, gpus: 2 },
  { nodes: 1, mig: true, gpus: 1 },
  { nodes: 1, mig: true, gpus: 2 },
  { nodes: 2, mig: false, gpus: 2 },
  { nodes: 2, mig: true, gpus: 1 },
];

const GPU_UUIDS = ["GPU-3c1f6e0a-7b2d-4e59-9a61-0d2f5b8c4e11", "GPU-8a5d2b7e-1c94-4f03-b6e8-72a9d0c3f5a2"];
const MIG_UUIDS = ["MIG-377e0049-554c-540b-93c6-d0976f8426cb", "MIG-f39aa248-6f1b-5769-b119-8d650bb34b27"];
/**
 * nvidia-smi's indices of the placed devices: deliberately not the agent's own indices (0, 1),
 * so a template that must map UUIDs to indices shows whether it used the inventory. Both MIG
 * instances sit on card 2.
 */
const SMI_INDEX: Record<string, number> = { [GPU_UUIDS[0]!]: 2, [GPU_UUIDS[1]!]: 3, [MIG_UUIDS[0]!]: 2, [MIG_UUIDS[1]!]: 2 };
const KEY = "contract-engine-key-0123456789abcdef";
const NAMES = ["m", "m-alias"];

type Outcome = { refuse: RegExp; why: string } | { run: true };

/**
 * Whether the template gives this vLLM version GPU UUIDs; it gives indices (nvidia-smi's, under
 * PCI_BUS_ID) to every release before ENGINE_RANGES.vllm.uuids, which today is none.
 */
function vllmTakesUuids(version: string): boolean {
  const from = ENGINE_RANGES.vllm.uuids;
  return from !== null && (compareVersions(version, from) ?? -1) >= 0;
}

/**
 * The names the engine answers to: vLLM every served name; SGLang the first (its
 * --served-model-name takes one); llama-server every name from the build that reads --alias as a
 * list, the first before it.
 */
function servedNames(e: EngineVersion): string[] {
  if (e.engine === "vllm") return [...NAMES].sort();
  if (e.engine === "llama.cpp" && (llamaBuild(e.version) ?? 0) >= ENGINE_RANGES["llama.cpp"].aliasList) return [...NAMES].sort();
  return [NAMES[0]!];
}

/** Whether the engine is given GPUs by UUID (else by nvidia-smi index). */
function takesUuids(e: EngineVersion): boolean {
  return e.engine !== "vllm" || vllmTakesUuids(e.version);
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

function expected(e: EngineVersion, s: Shape): Outcome {
  const names = new RegExp(escape(e.version));
  if (e.fake === null) return { refuse: names, why: "the version is outside every template's range" };
  if (s.mig && s.gpus > 1) return { refuse: /MIG/, why: "one CUDA process can use only one MIG device" };
  if (s.nodes > 1 && e.engine === "llama.cpp") return { refuse: /node/, why: "llama.cpp runs a replica on one node" };
  if (s.nodes > 1 && !e.multiNode) return { refuse: names, why: `vLLM ${e.version} has no mp multi-node flags` };
  if (s.mig && !takesUuids(e)) return { refuse: names, why: `vLLM ${e.version} reads CUDA_VISIBLE_DEVICES as integers, and a MIG instance has only a UUID` };
  return { run: true };
}

function assignment(e: EngineVersion, s: Shape, rank: number, ports: { http: number[]; rendezvous: number }): Assignment {
  const uuids = (s.mig ? MIG_UUIDS : GPU_UUIDS).slice(0, s.gpus);
  return Assignment.parse({
    id: `r-${e.engine}-${e.version}`,
    model: "m",
    served_names: NAMES,
    profile: "p",
    engine: e.engine,
    // Every shard of a real replica listens on the same port of its own node; here all shards
    // share one machine, so each gets its own.
    port: ports.http[rank],
    gpus: uuids.map((_, i) => i),
    gpu_uuids: uuids,
    engine_key: KEY,
    shard: { rank, size: s.nodes, leader_address: "127.0.0.1", leader_port: ports.rendezvous },
  });
}

function render(e: EngineVersion, a: Assignment): Launch {
  return renderLaunch(a, {
    host: "127.0.0.1",
    modelPath: e.engine === "llama.cpp" ? "/models/m/m-Q4_K_M.gguf" : "/models/m",
    selfExe: ["/nonexistent/llmgw"],
    version: e.version,
    smiIndex: SMI_INDEX,
  });
}

/** The devices CUDA will show the engine, judged from its recorded environment. */
function expectDevices(e: EngineVersion, s: Shape, env: Record<string, string>) {
  const uuids = (s.mig ? MIG_UUIDS : GPU_UUIDS).slice(0, s.gpus);
  const visible = (env.CUDA_VISIBLE_DEVICES ?? "").split(",");
  if (s.mig) {
    // A MIG instance can only be named by its UUID; an index would give the whole card.
    expect(visible).toEqual(uuids);
    return;
  }
  // Indices mean nvidia-smi's numbering only under PCI_BUS_ID (CUDA's default is fastest first).
  const want = takesUuids(e) ? { order: undefined, visible: uuids } : { order: "PCI_BUS_ID", visible: uuids.map((u) => String(SMI_INDEX[u]!)) };
  expect({ order: env.CUDA_DEVICE_ORDER, visible }).toEqual(want);
}

async function expectServes(e: EngineVersion, port: number, key: string | null) {
  const base = `http://127.0.0.1:${port}`;
  // The replica's key reaches the engine: without it a completion is refused.
  expect(key).toBe(KEY);
  const anon = await fetch(`${base}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "m", messages: [] }) });
  expect(anon.status).toBe(401);
  const models = JSON.parse((await probe(`${base}/v1/models`, key)).body) as { data: { id: string; aliases?: string[] }[] };
  const ids = models.data.flatMap((d) => [d.id, ...(d.aliases ?? [])]);
  expect([...new Set(ids)].sort()).toEqual(servedNames(e));
  // An old llama-server takes "a,b" as one name, which no request would ever match.
  for (const id of ids) expect(id).not.toContain(",");
  const chat = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}` }, body: JSON.stringify({ model: "m", messages: [] }) });
  expect(chat.status).toBe(200);
}

async function runCase(e: EngineVersion, s: Shape, launches: Launch[], ports: number[]) {
  const rec = recordFile();
  const shards = launches.map((l) => {
    const r = spawnFake(e.fake!, l.cmd, l.env, { LLMGW_CONTRACT_RECORD: rec });
    running.push(r);
    return r;
  });
  try {
    for (const [rank, l] of launches.entries()) {
      const r = shards[rank]!;
      if (l.servesHttp || e.engine === "sglang") {
        // SGLang's ranks ≥ 1 serve /health too, whether or not the template counts on it.
        await untilHealthy(r, `http://127.0.0.1:${ports[rank]}/health`, null);
        if (rank === 0) await expectServes(e, ports[rank]!, l.apiKey);
      } else {
        // A headless shard serves nothing: it must get past argument parsing and stay up.
        await until(`rank ${rank} recorded its start`, () => readRecords(rec).length >= rank + 1 || undefined);
        // Real time: a crash in a real process would come this soon after its start.
        await Bun.sleep(800);
        if (r.proc.exitCode !== null) throw new Error(`rank ${rank} exited with ${r.proc.exitCode}:\n${await r.output()}`);
      }
    }
    const records = readRecords(rec);
    expect(records.length).toBe(launches.length);
    for (const r of records) expectDevices(e, s, r.env);
  } finally {
    await Promise.all(shards.map(stop));
  }
}

describe("rendered commands against the contract fakes", () => {
  for (const e of VERSIONS) {
    for (const s of e.fake === null ? SHAPES.slice(0, 1) : SHAPES) {
      const outcome = expected(e, s);
      const label = `${e.engine} ${e.version} · ${s.nodes}-node · ${s.mig ? "MIG" : "whole GPU"} ×${s.gpus}`;
      test(`${label}: ${"refuse" in outcome ? `refused (${outcome.why})` : "runs to /health 200"}`, async () => {
        // Two engine ports, then the rendezvous port and the six SGLang's leader takes after it.
        const first = freePort(10);
        const shape = { http: [first, first + 1], rendezvous: first + 2 };
        const launches: Launch[] = [];
        let refused: unknown = null;
        try {
          for (let rank = 0; rank < s.nodes; rank++) launches.push(render(e, assignment(e, s, rank, shape)));
        } catch (err) {
          refused = err;
        }
        if ("refuse" in outcome) {
          expect(refused).toBeInstanceOf(LaunchError);
          expect((refused as Error).message).toMatch(outcome.refuse);
          return;
        }
        if (refused !== null) throw refused;
        await runCase(e, s, launches, shape.http);
      }, 30_000);
    }
  }
});

test("SGLang 0.5.3 with DP attention on one node binds its rendezvous block, not --port + 233 where another engine listens", async () => {
  const e = VERSIONS.find((v) => v.engine === "sglang" && v.fake !== null)!;
  const s: Shape = { nodes: 1, mig: false, gpus: 2 };
  const first = freePort(10);
  const ports = { http: [first], rendezvous: first + 2 };
  // Another engine's port, where SGLang would put its dist-init port left to itself.
  let other: { stop(closeActive?: boolean): void } | undefined;
  try {
    other = Bun.listen({ hostname: "0.0.0.0", port: first + 233, socket: { data() {} } });
  } catch {
    // Taken already: as good for the test.
  }
  try {
    const a = Assignment.parse({ ...assignment(e, s, 0, ports), args: ["--enable-dp-attention", "--dp-size", "2"] });
    const l = render(e, a);
    expect(l.cmd.join(" ")).toContain(`--dist-init-addr 127.0.0.1:${first + 2}`);
    await runCase(e, s, [l], ports.http);
  } finally {
    other?.stop(true);
  }
}, 30_000);

// ───────────────────────────────────── the agent, end to end ─────────────────────────────────────

const json = <T>(bin: string, cwd: string, args: string[]): T => {
  const r = run(bin, [...args, "-o", "json"], { cwd });
  if (r.code !== 0) throw new Error(`llmgw ${args.join(" ")} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
};

test("an agent on a node with vLLM 0.10: multi-node refused naming the version, single-node on GPU indices, an OOM parked with the OOM line", async () => {
  const { dir: head, bin } = scratchWithBinary();
  const serve = await startServe(bin, head, ["--engine-base-port", String(freePort(900)), "--heartbeat-interval", "300ms", "--max-failures", "1", "--restart-backoff", "200ms"]);
  procs.push(serve.proc);
  const rec = recordFile();
  for (const [i, name] of ["gpu-a", "gpu-b"].entries()) {
    const node = join(head, "..", `${name}-${Date.now()}`);
    const models = join(node, "models");
    for (const m of ["tiny", "tiny-oom", "big"]) {
      mkdirSync(join(models, m), { recursive: true });
      writeFileSync(join(models, m, "config.json"), "{}");
      writeFileSync(join(models, m, "model.safetensors"), "");
    }
    const p = Bun.spawn(
      [bin, "agent", "--server", serve.adminUrl, "--token", serve.joinToken, "--name", name, "--address", "127.0.0.1", "--engine-host", "127.0.0.1", "--fabric", "ib-a",
        "--nvidia-smi", join(fakeBin("nvidia-smi-2xh100"), "nvidia-smi"), "--models-dir", models, "--state-dir", join(node, "state"), "--health-interval", "200ms", "--logs-listen", "127.0.0.1:0", "--stop-grace", "1s", "--log-level", "warn"],
      { cwd: node, env: fakeEnv("vllm-0.10", { LLMGW_CONTRACT_RECORD: rec, LLMGW_CONTRACT_SMI_NODE: String(i + 1) }), stdout: "ignore", stderr: "pipe" },
    );
    procs.push(p);
  }
  await until("both nodes ready with their H100s", () => {
    const s = json<{ nodes: { ready: number } }>(bin, head, ["status"]);
    return s.nodes.ready === 2 || undefined;
  }, 30_000);

  // 1. Multi-node on vLLM 0.10, first and alone, so both nodes are whole and free for it:
  // refused, and the reason says which version and why.
  const bigModel = `  - name: big
    profiles:
      - {name: h100x2x2, engine: vllm, gpu_class: H100-80GB, gpus: 2, nodes: 2}
`;
  writeFileSync(join(head, "big.yaml"), `models:\n${bigModel}`);
  expect(run(bin, ["apply", "-f", "big.yaml"], { cwd: head }).code).toBe(0);
  const big = await until("big refused", () => {
    const m = json<ModelView[]>(bin, head, ["models"]).find((x) => x.name === "big");
    return m && (m.parked || m.unplaceable) && m.reason ? m : undefined;
  }, 60_000);
  expect(big.reason).toContain("0.10.2");
  expect(big.ready).toBe(0);
  // Refused before anything started: no vLLM ever got as far as taking --nnodes.
  expect(readRecords(rec).some((r) => r.argv.includes("--nnodes"))).toBe(false);

  // 2. Single-node: ready, and the fake vLLM saw GPU indices in PCI bus order, never UUIDs.
  writeFileSync(join(head, "catalog.yaml"), `models:
${bigModel}  - name: tiny
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1}
  - name: tiny-oom
    profiles:
      - {name: h100, engine: vllm, gpu_class: H100-80GB, gpus: 1, env: {LLMGW_CONTRACT_FAIL: oom}}
`);
  expect(run(bin, ["apply", "-f", "catalog.yaml"], { cwd: head }).code).toBe(0);
  await until("tiny ready", () => {
    const m = json<ModelView[]>(bin, head, ["models"]).find((x) => x.name === "tiny");
    if (m?.parked) throw new Error(`tiny parked instead of starting: ${m.reason}`);
    return m && m.ready === 1 ? m : undefined;
  }, 60_000);
  const tiny = readRecords(rec).filter((r) => r.argv.some((a) => a.endsWith("/tiny")));
  expect(tiny.length).toBeGreaterThan(0);
  expect(tiny.at(-1)!.env.CUDA_DEVICE_ORDER).toBe("PCI_BUS_ID");
  expect(tiny.at(-1)!.env.CUDA_VISIBLE_DEVICES).toMatch(/^[01]$/);

  // 3. The OOM: parked, with the engine core's OOM line as the reason, not the RuntimeError after it.
  const oom = await until("tiny-oom parked", () => json<ModelView[]>(bin, head, ["models"]).find((m) => m.name === "tiny-oom" && m.parked), 60_000);
  expect(oom.reason!.split("\n")[0]).toContain("torch.OutOfMemoryError: CUDA out of memory");
  expect(oom.reason!.split("\n")[0]).not.toContain("Engine core initialization failed");
  const replicas = json<ReplicaView[]>(bin, head, ["replicas"]);
  expect(replicas.some((r) => r.model === "tiny" && r.state === "ready")).toBe(true);
}, 180_000);
