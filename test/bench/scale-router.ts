// Benchmark: the router while the control plane carries a large fleet (issue 14: added latency
// p50/p99 and throughput within 1.1× of idle while 2,000 nodes heartbeat and a 1,000-model
// catalog is applied). Through the compiled binary, 127.0.0.1 only: one serve; one agent
// (`llmgw agent --simulate`) whose fake engine serves the model "chat" on a GPU class no fleet
// model asks for; then the scale bench's load generator (lib/scale-fleet.ts, its own process)
// with N simulated nodes. Phases, each measured the same way (small non-streamed chat requests
// through the router and straight to the engine, interleaved on keep-alive connections, then a
// 3 s burst at 4 in flight through the router for throughput):
//   idle     the fleet not started;
//   apply    N nodes heartbeating, N/2 models applied at the phase's start (placement, starts);
//   steady   N nodes heartbeating, the catalog converged.
//   bun test/bench/scale-router.ts [nodes, default 2000] [requests per phase, default 1000: a p99 of its ten slowest, not its four]

import { join } from "node:path";
import { cleanupOnExit, killAll, pct, spawnChild, table } from "./lib/procs";
import { allowAddresses, applyModels, BIN, scaleModels, startScaleHead } from "./lib/scale-head";
import { scratchDir } from "../helpers/tmp";

const N = Number(process.argv[2] ?? 2000);
const REQUESTS = Number(process.argv[3] ?? 1000);
const BUN = process.execPath;
const CHAT_CLASS = "L4-24GB";

cleanupOnExit();

interface Phase {
  name: string;
  router: number[];
  direct: number[];
  rps: number;
}

const chatBody = JSON.stringify({ model: "chat", messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
async function chat(base: string): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody, signal: AbortSignal.timeout(10_000) });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`${base}: ${r.status}`);
  return performance.now() - t0;
}

async function measure(name: string, routerUrl: string, engineUrl: string): Promise<Phase> {
  const out: Phase = { name, router: [], direct: [], rps: 0 };
  for (let i = 0; i < REQUESTS; i++) {
    out.router.push(await chat(routerUrl));
    out.direct.push(await chat(engineUrl));
  }
  let done = 0;
  const until = performance.now() + 3000;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (performance.now() < until) {
        await chat(routerUrl);
        done++;
      }
    }),
  );
  out.rps = done / 3;
  return out;
}

async function main(): Promise<void> {
  const dir = scratchDir("llmgw-bench-scale-router-");
  // Both cores: the router thread must not share one core with the control plane it is
  // isolated from (on a 2-core machine the load generator and this client share them too).
  const head = await startScaleHead(dir, N, { cpus: "0,1" });
  const { admin, routerUrl, joinToken, api } = head;
  const tokenFile = join(dir, "join.token");
  await Bun.write(tokenFile, joinToken);
  await spawnChild(
    "agent",
    [BIN, "agent", "--server", admin, "--token-file", tokenFile, "--name", "chat-node", "--address", "127.0.0.1", "--engine-host", "127.0.0.1", "--simulate", `${CHAT_CLASS}:1`, "--simulate-models", "chat", "--state-dir", join(dir, "agent"), "--logs-listen", "off", "--engine-auth", "off", "--log-level", "warn"],
    { waitUrl: false, cpus: "1" },
  );
  await api("/models/chat", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: CHAT_CLASS }] }) });
  let engineUrl = "";
  for (let i = 0; i < 600 && !engineUrl; i++) {
    const list = await api<{ state: string; endpoint: string | null }[]>("/replicas");
    const ready = (Array.isArray(list) ? list : []).find((x) => x.state === "ready" && x.endpoint);
    if (ready) engineUrl = ready.endpoint!;
    else await Bun.sleep(100);
  }
  if (!engineUrl) throw new Error("the chat replica never became ready");
  for (let i = 0; i < 100; i++) {
    try {
      await chat(routerUrl);
      break;
    } catch {
      await Bun.sleep(100);
    }
  }
  await measure("warmup", routerUrl, engineUrl);
  const phases = [await measure("idle", routerUrl, engineUrl)];

  await allowAddresses(head, N);
  const gen = await spawnChild("fleet", [BUN, "test/bench/lib/scale-fleet.ts", admin, joinToken, String(N), String(Math.floor(N / 2))], {
    waitUrl: false,
    cpus: "1",
    nofile: 20000,
    env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
  });
  const reg = await gen.waitLine(/^registered /, 300_000);
  console.log(`${N} nodes ${reg}`);
  const applying = applyModels(head, scaleModels(Math.floor(N / 2)));
  phases.push(await measure("apply", routerUrl, engineUrl));
  await applying;
  await Bun.sleep(10_000);
  phases.push(await measure("steady", routerUrl, engineUrl));
  const summary = await api<{ models: { total: number; satisfied: number }; replicas: { ready: number } }>("/summary");

  const idle = phases[0]!;
  const added = (p: Phase, q: number) => pct([...p.router].sort((a, b) => a - b), q) - pct([...p.direct].sort((a, b) => a - b), q);
  const rows: (string | number)[][] = [["phase", "router p50", "router p99", "direct p50", "direct p99", "added p50", "added p99", "router req/s (4 in flight)", "router p50 / idle", "router p99 / idle", "req/s / idle"]];
  for (const p of phases) {
    const r = [...p.router].sort((a, b) => a - b);
    const d = [...p.direct].sort((a, b) => a - b);
    const ir = [...idle.router].sort((a, b) => a - b);
    rows.push([p.name, pct(r, 50).toFixed(2), pct(r, 99).toFixed(2), pct(d, 50).toFixed(2), pct(d, 99).toFixed(2), added(p, 50).toFixed(3), added(p, 99).toFixed(3), p.rps.toFixed(0), (pct(r, 50) / pct(ir, 50)).toFixed(2), (pct(r, 99) / pct(ir, 99)).toFixed(2), (p.rps / idle.rps).toFixed(2)]);
  }
  console.log(`times in ms; ${N} nodes, ${summary.models.satisfied}/${summary.models.total} models satisfied, ${summary.replicas.ready} replicas ready at the end`);
  console.log(table(rows));
  console.log(JSON.stringify({ bench: "scale-router", nodes: N, phases: phases.map((p) => ({ name: p.name, added_p50: added(p, 50), added_p99: added(p, 99), rps: p.rps })) }));
  await killAll();
}

void main().catch(async (e) => {
  console.error(e);
  await killAll();
  process.exit(1);
});
