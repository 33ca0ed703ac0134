// The HA bench's router part: two control planes (lib/ha-pair.ts) on one store, pinned to core
// 1 with a fake engine (no delays, 4,096 slots) that this bench starts for the replica of "chat"
// the leader placed on the node this bench plays; then wrk (one thread, 64 keep-alive connections, core 0) sends
// small non-streamed chat requests through the leader's router and the standby's in turns
// (ROUNDS slices each, so a slow spell of the shared machine falls on both), after a warm-up.

import { rmSync } from "node:fs";
import { join } from "node:path";
import { controlPlane, JOIN_TOKEN, oneLeader, startPair } from "./ha-pair";
import { BUN, type Child, spawnChild } from "./procs";
import { scratchDir } from "../../helpers/tmp";

export interface RouterFigures {
  leaderRps: number;
  standbyRps: number;
  leaderPerRound: number[];
  standbyPerRound: number[];
  non2xx: number;
}

const CHAT_CLASS = "L4-24GB";
const BODY = { model: "chat", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 4 };

async function wrk(url: string, script: string, seconds: number): Promise<{ rps: number; requests: number; non2xx: number }> {
  const c = await spawnChild("wrk", ["wrk", "-t1", "-c64", `-d${seconds}s`, "-s", script, `${url}/v1/chat/completions`], { cpus: "0", waitUrl: false });
  await c.proc.exited;
  await c.outputDone;
  const out = c.lines.join("\n");
  if (c.proc.exitCode !== 0) throw new Error(`wrk failed (${c.proc.exitCode}): ${out}\n${c.stderr()}`);
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN),
    requests: Number(/(\d+) requests in/.exec(out)?.[1] ?? NaN),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(out)?.[1] ?? 0),
  };
}

async function chatOk(url: string): Promise<boolean> {
  try {
    const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(BODY), signal: AbortSignal.timeout(5000) });
    const t = await r.text();
    return r.status === 200 && /"finish_reason":"(stop|length)"/.test(t);
  } catch {
    return false;
  }
}

export async function routerBench(o: { store: (dir: string) => string; seconds: number; rounds: number; log?: (s: string) => void }): Promise<RouterFigures> {
  const say = o.log ?? (() => {});
  const dir = scratchDir("llmgw-bench-ha-router-");
  const store = o.store(dir);
  const cps = [0, 1].map((i) => controlPlane(i, { dir, store, leaseTtl: "15s", leaseRenew: "5s", cpus: "1", logLevel: "warn" }));
  let engine: Child | undefined;
  let keepBeating: ReturnType<typeof setInterval> | undefined;
  try {
    const leader = await startPair(cps, 5000);
    const standby = cps.find((c) => c !== leader)!;
    // The node is this bench: it heartbeats to the leader, starts a fake engine with no delays
    // and thousands of slots (an agent's fake engine answers in 35 ms on 8 slots, and would be
    // the bottleneck measured) on the port its assignment names, and reports it ready.
    const gpu = { index: 0, uuid: "GPU-chat-0", name: "NVIDIA L4", class: CHAT_CLASS, memory_mib: 23034, healthy: true, parent: null };
    let credential: string | undefined;
    let replicas: { id: string; state: "ready"; port: number; error: null }[] = [];
    const beat = async () => {
      const r = await fetch(`${leader.admin}/agent/v1/heartbeat`, {
        method: "POST",
        headers: { authorization: `Bearer ${credential ?? JOIN_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ node: "chat-node", address: "127.0.0.1", agent_version: "bench", fabrics: [], gpus: [gpu], models: ["chat"], replicas }),
        signal: AbortSignal.timeout(5000),
      });
      const t = await r.text();
      if (!r.ok) throw new Error(`heartbeat: ${r.status} ${t.slice(0, 200)}`);
      const a = JSON.parse(t) as { credential?: string; assignments: { id: string; port: number }[] };
      credential = a.credential ?? credential;
      return a.assignments;
    };
    await beat();
    await leader.api("/models/chat", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: CHAT_CLASS }] }) });
    let assigned: { id: string; port: number } | undefined;
    for (let i = 0; i < 300 && !assigned; i++) {
      assigned = (await beat())[0];
      if (!assigned) await Bun.sleep(100);
    }
    if (!assigned) throw new Error("the leader placed no replica of \"chat\"");
    engine = await spawnChild("engine", [BUN, "src/sim/fake-engine.ts", "--port", String(assigned.port), "--host", "127.0.0.1", "--model", "chat", "--ttft-ms", "0", "--token-delay-ms", "0", "--tokens", "4", "--slots", "4096"], { cpus: "1" });
    replicas = [{ id: assigned.id, state: "ready", port: assigned.port, error: null }];
    await beat();
    keepBeating = setInterval(() => void beat().catch(() => undefined), 1000);
    for (const cp of [leader, standby]) {
      let ok = false;
      for (let i = 0; i < 600 && !ok; i++) if (!(ok = await chatOk(cp.router))) await Bun.sleep(100);
      if (!ok) throw new Error(`${cp.name}'s router never served the model "chat"`);
    }
    say(`  both routers serve "chat" (${leader.name} leads, ${standby.name} stands by)`);
    const script = join(dir, "small.lua");
    await Bun.write(script, `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = ${JSON.stringify(JSON.stringify(BODY))}\n`);
    for (const cp of [leader, standby]) await wrk(cp.router, script, 2);
    const acc = { leader: { req: 0, s: 0, per: [] as number[] }, standby: { req: 0, s: 0, per: [] as number[] } };
    let non2xx = 0;
    const slice = Math.max(1, Math.round(o.seconds / o.rounds));
    for (let r = 0; r < o.rounds; r++)
      for (const [k, cp] of (r % 2 === 0 ? [["leader", leader], ["standby", standby]] : [["standby", standby], ["leader", leader]]) as ["leader" | "standby", typeof leader][]) {
        const w = await wrk(cp.router, script, slice);
        acc[k].req += w.requests;
        acc[k].s += w.requests / w.rps;
        acc[k].per.push(w.rps);
        non2xx += w.non2xx;
      }
    if (!(await oneLeader(cps, 5000) === leader)) throw new Error("the lead changed during the router measurement");
    return { leaderRps: acc.leader.req / acc.leader.s, standbyRps: acc.standby.req / acc.standby.s, leaderPerRound: acc.leader.per, standbyPerRound: acc.standby.per, non2xx };
  } finally {
    clearInterval(keepBeating);
    await engine?.kill();
    await Promise.all(cps.map((c) => c.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}
