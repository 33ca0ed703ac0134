// The HA bench's router part: two control planes (lib/ha-pair.ts) on one store, pinned to core
// 1 with the agent and its fake engine (`llmgw agent --simulate`, engine auth off); the model
// "chat" placed by the leader; then wrk (one thread, 64 keep-alive connections, core 0) sends
// small non-streamed chat requests through the leader's router and the standby's in turns
// (ROUNDS slices each, so a slow spell of the shared machine falls on both), after a warm-up.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { controlPlane, JOIN_TOKEN, oneLeader, startPair } from "./ha-pair";
import { type Child, spawnChild } from "./procs";
import { BIN } from "./scale-head";

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
    return r.status === 200 && t.includes('"finish_reason":"stop"');
  } catch {
    return false;
  }
}

export async function routerBench(o: { store: (dir: string) => string; seconds: number; rounds: number; log?: (s: string) => void }): Promise<RouterFigures> {
  const say = o.log ?? (() => {});
  const dir = mkdtempSync(join(tmpdir(), "llmgw-bench-ha-router-"));
  const store = o.store(dir);
  const cps = [0, 1].map((i) => controlPlane(i, { dir, store, leaseTtl: "15s", leaseRenew: "5s", cpus: "1", logLevel: "warn" }));
  let agent: Child | undefined;
  try {
    const leader = await startPair(cps, 5000);
    const standby = cps.find((c) => c !== leader)!;
    const tokenFile = join(dir, "join.token");
    await Bun.write(tokenFile, JOIN_TOKEN);
    agent = await spawnChild(
      "agent",
      [BIN, "agent", "--server", leader.admin, "--token-file", tokenFile, "--name", "chat-node", "--address", "127.0.0.1", "--engine-host", "127.0.0.1", "--simulate", `${CHAT_CLASS}:1`, "--simulate-models", "chat", "--state-dir", join(dir, "agent"), "--logs-listen", "off", "--engine-auth", "off", "--log-level", "warn"],
      { waitUrl: false, cpus: "1" },
    );
    await leader.api("/models/chat", { method: "PUT", body: JSON.stringify({ profiles: [{ name: "p", engine: "fake", gpu_class: CHAT_CLASS }] }) });
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
    await agent?.kill();
    await Promise.all(cps.map((c) => c.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}
