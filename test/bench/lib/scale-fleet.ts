// The scale bench's load generator, in its own process so its CPU is not the head node's: N
// simulated nodes (8 GPUs each, four classes, MIG on every tenth, GPU 3 unhealthy on every
// 17th, 2–4 fabrics) join with the join token, keep the credential the first answer carries,
// then heartbeat at the interval the head node's answer gives (times --speed, so --speed 5 is
// five times too fast), spread evenly in time, reporting every assigned replica `ready` on its
// port. Like a real agent, each node holds a long poll for its assignments and sends an early
// heartbeat (after 250 ms) when its set changes, so new replicas are reported ready at once
// (--no-long-poll: heartbeats alone). Prints `registered <ms>` once all joined, then once a second one JSON line:
// {"t": ms since start, "n": heartbeats answered, "err": failed, "ms": [latencies], "interval": ms}.
//   bun test/bench/lib/scale-fleet.ts SERVER JOIN_TOKEN NODES MODELS [--speed X] [--fabrics F]

import { simAddress, simGpuReports } from "./fleet";

const [server, joinToken, nodesArg, modelsArg] = process.argv.slice(2);
const flag = (name: string, dflt: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const N = Number(nodesArg);
const MODELS = Math.max(1, Number(modelsArg));
const SPEED = flag("--speed", 1);
const FABRICS = flag("--fabrics", Math.min(4, Math.max(2, Math.round(N / 500))));
const JOIN_CONCURRENCY = 64;
const LONG_POLL = !process.argv.includes("--no-long-poll");

interface SimNode {
  i: number;
  name: string;
  credential?: string;
  body: Record<string, unknown>;
  replicas: { id: string; state: "ready"; port: number }[];
  generation: number;
  early?: ReturnType<typeof setTimeout>;
  /** The heartbeat in flight: as an agent's one loop, a node never has two (a later one would race it). */
  inflight?: Promise<boolean>;
  /** Another heartbeat was asked for while one was in flight: sent as soon as it is answered. */
  again?: boolean;
}

type Answer = { assignments: { id: string; port: number; shard: { rank: number } }[]; heartbeat_interval_ms: number; generation: number; credential?: string };

/**
 * Takes an answer's assignments; a changed set is reported ready in an early heartbeat, as an
 * agent does. An answer older than the set held (a heartbeat's and the long poll's answers
 * race) is dropped, as the agent drops it: taken, it would report replicas as gone.
 */
function accept(n: SimNode, a: Answer): void {
  if (a.generation < n.generation) return;
  const before = n.replicas.map((r) => r.id).join(",");
  n.replicas = a.assignments.map((x) => ({ id: x.id, state: "ready" as const, port: x.port }));
  n.generation = a.generation;
  if (n.replicas.map((r) => r.id).join(",") !== before && n.credential && !n.early)
    n.early = setTimeout(() => {
      n.early = undefined;
      void beat(n, true);
    }, 250);
}

/** The node's long poll: answered when its assignments change, or after 25 s. */
async function poll(n: SimNode): Promise<void> {
  for (;;) {
    try {
      const r = await fetch(`${server}/agent/v1/assignments?node=${n.name}&generation=${n.generation}&wait_ms=25000`, {
        headers: { authorization: `Bearer ${n.credential}` },
        signal: AbortSignal.timeout(40_000),
      });
      if (r.ok) accept(n, (await r.json()) as Answer);
      else await Bun.sleep(1000);
    } catch {
      await Bun.sleep(1000);
    }
  }
}

function nodeBody(i: number): Record<string, unknown> {
  const gpus = simGpuReports(i);
  return {
    node: `sim-${i}`,
    address: simAddress(i),
    agent_version: "bench",
    fabrics: [`ib-${i % FABRICS}`],
    gpus,
    models: [`m${i % MODELS}`, `m${(i * 7 + 1) % MODELS}`],
  };
}

const nodes: SimNode[] = Array.from({ length: N }, (_, i) => ({ i, name: `sim-${i}`, body: nodeBody(i), replicas: [], generation: 0 }));
let interval = 5000;
let window: number[] = [];
let answered = 0;
let errors = 0;
const t0 = performance.now();

/**
 * One heartbeat of the node's. With one in flight (see SimNode.inflight): the periodic one is
 * that one; an early one (news since it was sent) goes right after it.
 */
function beat(n: SimNode, early = false): Promise<boolean> {
  if (n.inflight) {
    if (early) n.again = true;
    return n.inflight;
  }
  const run = (async () => {
    let ok: boolean;
    do {
      n.again = false;
      ok = await beatOnce(n);
    } while (n.again && n.credential);
    return ok;
  })().finally(() => (n.inflight = undefined));
  n.inflight = run;
  return run;
}

async function beatOnce(n: SimNode): Promise<boolean> {
  const started = performance.now();
  try {
    const r = await fetch(`${server}/agent/v1/heartbeat`, {
      method: "POST",
      headers: { authorization: `Bearer ${n.credential ?? joinToken}`, "content-type": "application/json" },
      body: JSON.stringify({ ...n.body, replicas: n.replicas }),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await r.text();
    const ms = performance.now() - started;
    if (!r.ok) {
      errors++;
      if (errors <= 5) console.error(`${n.name}: ${r.status} ${text.slice(0, 200)}`);
      return false;
    }
    const a = JSON.parse(text) as Answer;
    if (a.credential) n.credential = a.credential;
    interval = a.heartbeat_interval_ms;
    accept(n, a);
    window.push(ms);
    answered++;
    return true;
  } catch (e) {
    errors++;
    if (errors <= 5) console.error(`${n.name}: ${(e as Error).message}`);
    return false;
  }
}

async function main(): Promise<void> {
  // Cold start of the whole cluster: every node joins at once (JOIN_CONCURRENCY in flight).
  let next = 0;
  await Promise.all(
    Array.from({ length: JOIN_CONCURRENCY }, async () => {
      while (next < N) {
        const n = nodes[next++]!;
        for (let tries = 0; tries < 20 && !(await beat(n)); tries++) await Bun.sleep(500);
      }
    }),
  );
  console.log(`registered ${Math.round(performance.now() - t0)} ${nodes.filter((n) => n.credential).length}`);
  if (LONG_POLL) for (const n of nodes) if (n.credential) void poll(n);
  // Steady heartbeats: node i's first one at i/N of an interval, then every interval.
  for (const n of nodes) {
    const loop = async () => {
      const due = performance.now() + interval / SPEED;
      await beat(n);
      setTimeout(loop, Math.max(0, due - performance.now()));
    };
    setTimeout(loop, (n.i / N) * (interval / SPEED));
  }
  setInterval(() => {
    console.log(JSON.stringify({ t: Math.round(performance.now() - t0), n: answered, err: errors, interval, ms: window.map((x) => Math.round(x * 100) / 100) }));
    window = [];
  }, 1000);
}

void main();
