// Benchmark: issue 36's performance figures. A 2 GB model (four safetensors shards, an index and
// a config) is served by the stand-in Hub in a process of its own on 127.0.0.1; `dist/llmgw
// serve --hf-endpoint` and four simulated agents of one fabric, each with its own models
// directory, take a catalog model `source: hf://bench/model` with four replicas of two GPUs
// (a whole node each), and the clock runs from the apply to all four ready. Prints:
//   hub bytes   bytes the Hub served for the cluster ÷ the model's size (goal 1.0: each file
//               leaves the Hub once per fabric, the nodes copy the rest from each other);
//   time        time to have the model on all four ÷ the time of one plain `curl` of the same
//               files from the same Hub to the same disk (goal ≤ 1.5).
// Needs about 10 GB of free disk (the model, curl's copy, four nodes' copies) under the system's
// temporary directory; says so and stops when there is less. About 2–5 minutes on 2 cores.
//   bun build.ts && bun test/bench/weights.ts [--gb 2]

import { closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Cluster } from "../helpers/cluster";
import { type HubProcess, startHubProcess } from "../helpers/fake-hub";
import { freePort } from "../helpers/ports";
import { removeScratch, scratchDir } from "../helpers/tmp";
import { until } from "../helpers/until";

const arg = (name: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : undefined;
};
const GB = 1e9;
const SIZE = Math.round(Number(arg("--gb") ?? "2") * GB);
const SHARDS = 4;
const NODES = 4;
const REPO = "bench/model";
const BLOCK = 16 * 1024 * 1024;
/** The whole run gives up after this long (each wait has its own bound inside it too). */
const DEADLINE_MS = 20 * 60_000;

const log = (s: string) => console.log(s);
const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/** Free bytes of the file system holding `dir`, from df. */
function freeBytes(dir: string): number {
  const out = Bun.spawnSync(["df", "-B1", "--output=avail", dir], { stdout: "pipe" }).stdout.toString().trim().split("\n");
  return Number(out[out.length - 1]);
}

/**
 * The model's files, written fast: one random block repeated, each copy stamped with its shard
 * and index so no two blocks (and no two shards) are alike, as real weights are not.
 */
function writeModel(dir: string): { files: string[]; bytes: number } {
  const block = new Uint8Array(BLOCK);
  crypto.getRandomValues(block.subarray(0, 65536));
  for (let o = 65536; o < BLOCK; o += 65536) block.copyWithin(o, 0, 65536);
  const per = Math.floor(SIZE / SHARDS);
  const files: string[] = [];
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < SHARDS; s++) {
    const name = `model-${String(s + 1).padStart(5, "0")}-of-${String(SHARDS).padStart(5, "0")}.safetensors`;
    files.push(name);
    weightMap[`model.layers.${s}.weight`] = name;
    const fd = openSync(join(dir, name), "w");
    try {
      for (let o = 0, i = 0; o < per; o += BLOCK, i++) {
        const view = new DataView(block.buffer);
        view.setUint32(0, s);
        view.setUint32(4, i);
        writeSync(fd, block, 0, Math.min(BLOCK, per - o));
      }
    } finally {
      closeSync(fd);
    }
  }
  writeFileSync(join(dir, "model.safetensors.index.json"), JSON.stringify({ metadata: { total_size: per * SHARDS }, weight_map: weightMap }));
  writeFileSync(join(dir, "config.json"), JSON.stringify({ architectures: ["LlamaForCausalLM"], model_type: "llama" }));
  files.push("model.safetensors.index.json", "config.json");
  return { files, bytes: files.reduce((n, f) => n + statSync(join(dir, f)).size, 0) };
}

/** CPU seconds a live process has used (user + system), from /proc; 0 when it is gone. */
function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return 0;
  }
}

/** One plain curl of every file (following the Hub's redirects), to files on the same disk: its wall and CPU time. */
function curlAll(hubUrl: string, commit: string, files: string[], into: string): { ms: number; cpu: number } {
  const args = ["curl", "-sSfL"];
  for (const f of files) args.push("-o", join(into, f), `${hubUrl}/${REPO}/resolve/${commit}/${f}`);
  const t0 = performance.now();
  const p = Bun.spawnSync(args, { stdout: "ignore", stderr: "pipe" });
  const ms = performance.now() - t0;
  if (p.exitCode !== 0) throw new Error(`curl failed (${p.exitCode}): ${p.stderr.toString().slice(0, 300)}`);
  const cpu = p.resourceUsage ? (Number(p.resourceUsage.cpuTime.user) + Number(p.resourceUsage.cpuTime.system)) / 1e6 : 0;
  return { ms, cpu };
}

let hub: HubProcess | undefined;
let loadBefore = "?";
let cluster: Cluster | undefined;
let stopping = false;
async function cleanup(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await cluster?.cleanup().catch(() => undefined);
  hub?.stop();
  removeScratch();
}
process.on("SIGINT", () => void cleanup().then(() => process.exit(130)));
const watchdog = setTimeout(() => {
  log(`weights bench: not done within ${secs(DEADLINE_MS)}; stopping`);
  void cleanup().then(() => process.exit(2));
}, DEADLINE_MS);

async function main(): Promise<void> {
  loadBefore = readFileSync("/proc/loadavg", "utf8").split(" ")[0] ?? "?";
  const need = SIZE * (NODES + 2) * 1.05;
  const free = freeBytes(tmpdir());
  log(`weights bench: ${(SIZE / GB).toFixed(1)} GB model to ${NODES} nodes of one fabric; ${(free / GB).toFixed(1)} GB free under ${tmpdir()}, ${(need / GB).toFixed(1)} GB needed`);
  if (free < need) {
    log(`weights bench: not enough free disk under ${tmpdir()} (${(free / GB).toFixed(1)} GB free, ${(need / GB).toFixed(1)} GB needed); free some, or run with --gb 0.5`);
    process.exitCode = 1;
    return;
  }
  const src = scratchDir("llmgw-wbench-model-");
  let t0 = performance.now();
  const model = writeModel(src);
  log(`  model written: ${model.files.length} files, ${model.bytes} bytes in ${secs(performance.now() - t0)}`);

  t0 = performance.now();
  hub = await startHubProcess({ port: freePort(), repos: [{ repo: REPO, revisions: [{ dir: src, refs: ["main"] }] }] });
  const commit = await hub.commit(REPO, "main");
  log(`  stand-in Hub up (files hashed) in ${secs(performance.now() - t0)}`);

  const curlDir = scratchDir("llmgw-wbench-curl-");
  const hubCpu0 = cpuSeconds(hub.pid);
  const curl = curlAll(hub.url, commit, model.files, curlDir);
  const curlMs = curl.ms;
  const hubCpuCurl = cpuSeconds(hub.pid) - hubCpu0;
  rmSync(curlDir, { recursive: true, force: true });
  log(`  one curl of the model from the Hub: ${secs(curlMs)} (${(model.bytes / GB / (curlMs / 1000)).toFixed(2)} GB/s; CPU: curl ${curl.cpu.toFixed(1)} s, Hub ${hubCpuCurl.toFixed(1)} s)`);
  const servedBefore = (await hub.served()).total;

  cluster = new Cluster(["--hf-endpoint", hub.url]);
  const c = cluster;
  await c.startServe();
  const names = Array.from({ length: NODES }, (_, i) => `n${i + 1}`);
  for (const n of names) {
    const dir = join(c.dir, `models-${n}`);
    mkdirSync(dir);
    c.startAgent(n, ["--models-dir", dir]);
  }
  await until("the agents registered", async () => (await c.nodes()).filter((n) => n.state === "ready").length === NODES, { timeoutMs: 60_000, everyMs: 100 });

  const cpuBefore = { hub: cpuSeconds(hub.pid), serve: cpuSeconds(c.serve.pid), agents: names.map((n) => cpuSeconds(c.agents.get(n)!.pid)) };
  const applyAt = Date.now();
  t0 = performance.now();
  const status = await c.putModel("model", { source: `hf://${REPO}`, replicas: { min: NODES, max: NODES }, profiles: [{ name: "h100", engine: "vllm", gpu_class: "H100-80GB", gpus: 2 }] });
  if (status !== 201) throw new Error(`the catalog model was refused (${status})`);
  let lastNote = "";
  const ready = await until(
    () => `all ${NODES} replicas ready (last: ${lastNote})`,
    async () => {
      const rs = (await c.replicas()).filter((r) => r.model === "model");
      lastNote = rs.map((r) => `${r.shards[0]?.node ?? "?"} ${r.state}${r.error ? ` ${r.error}` : ""}`).join("; ");
      const up = rs.filter((r) => r.state === "ready");
      return up.length === NODES ? up : undefined;
    },
    { timeoutMs: DEADLINE_MS - 60_000, everyMs: 100 },
  );
  const clusterMs = performance.now() - t0;
  const cpu = {
    hub: cpuSeconds(hub.pid) - cpuBefore.hub,
    serve: cpuSeconds(c.serve.pid) - cpuBefore.serve,
    agents: names.map((n, i) => cpuSeconds(c.agents.get(n)!.pid) - cpuBefore.agents[i]!),
  };
  const nodesUsed = new Set(ready.map((r) => r.shards[0]!.node)).size;
  const hubBytes = (await hub.served()).total - servedBefore;

  // Where the time and the bytes went, from the agents' logs: transfers per source.
  const moves = { started: new Map<string, number>(), finished: new Map<string, number>(), failed: 0 };
  const at = { first: Number.POSITIVE_INFINITY, hubDone: 0, peerDone: 0 };
  for (const n of names)
    for (const l of c.agentLog(n) as { msg?: string; from?: string; repo?: string; time?: string }[]) {
      if (l.repo !== REPO) continue;
      const from = l.from === "hub" ? "hub" : "peer";
      const t = Date.parse(l.time ?? "");
      if (l.msg === "weights transfer started") {
        moves.started.set(from, (moves.started.get(from) ?? 0) + 1);
        at.first = Math.min(at.first, t);
      } else if (l.msg === "weights transfer finished") {
        moves.finished.set(from, (moves.finished.get(from) ?? 0) + 1);
        if (from === "hub") at.hubDone = Math.max(at.hubDone, t);
        else at.peerDone = Math.max(at.peerDone, t);
      } else if (l.msg === "weights transfer failed") moves.failed++;
    }
  const count = (m: Map<string, number>) => `${m.get("hub") ?? 0} from the Hub, ${m.get("peer") ?? 0} from peers`;
  log(`  transfers started: ${count(moves.started)}; finished: ${count(moves.finished)}; failed: ${moves.failed} (files: ${model.files.length} × ${NODES} nodes)`);
  log(`  first transfer ${secs(at.first - applyAt)} after the apply; from it, last Hub download done after ${secs(at.hubDone - at.first)}, last peer copy after ${secs(at.peerDone - at.first)}`);
  const agentsCpu = cpu.agents.reduce((a, b) => a + b, 0);
  // On one host every node's hashing, receiving, writing and serving share its cores: what a
  // cluster spreads over four machines is summed here.
  log(`  CPU seconds while moving it: agents ${agentsCpu.toFixed(1)} (${cpu.agents.map((x) => x.toFixed(1)).join(" + ")}), serve ${cpu.serve.toFixed(1)}, Hub ${cpu.hub.toFixed(1)}; ${navigator.hardwareConcurrency} cores; load average before ${loadBefore}`);
  const byteRatio = hubBytes / model.bytes;
  const timeRatio = clusterMs / curlMs;
  log(`  on all ${NODES} nodes (${nodesUsed} distinct): ${secs(clusterMs)} from the apply`);
  log("");
  log(`  hub bytes ÷ model size   ${byteRatio.toFixed(3)}   (goal 1.0)   ${byteRatio <= 1.0001 ? "met" : "missed"}`);
  log(`  time ÷ one curl          ${timeRatio.toFixed(2)}    (goal ≤ 1.5)  ${timeRatio <= 1.5 ? "met" : "missed"}`);
  log(JSON.stringify({ bench: "weights", model_bytes: model.bytes, nodes: NODES, hub_bytes: hubBytes, hub_ratio: byteRatio, curl_ms: Math.round(curlMs), cluster_ms: Math.round(clusterMs), time_ratio: timeRatio, agents_cpu_s: Number(agentsCpu.toFixed(1)), curl_cpu_s: Number(curl.cpu.toFixed(1)) }));
}

try {
  await main();
} catch (e) {
  log(`weights bench failed: ${(e as Error).message}`);
  process.exitCode = 1;
} finally {
  clearTimeout(watchdog);
  await cleanup();
}
