// The HA bench's heartbeat load, in its own process so its CPU is not the head node's: N
// simulated nodes (the scale fleet's bodies: 8 GPUs, four classes, MIG on every tenth) join
// with the join token (spread over the servers given, in turn), then for SECONDS the nodes
// heartbeat back to back, CONCURRENCY in flight, node after node (each node's own rate stays
// near rate/N), each to the server it joined. Mode `steady`: every heartbeat repeats the
// node's last one (what a settled fleet sends); `changing`: every heartbeat reports other
// weights than the one before, so each one is a store write. Prints one JSON line:
// {"mode", "joined", "joinSeconds", "seconds", "answered", "errors", "rate", "p50", "p99"} per mode, in order.
//   bun test/bench/lib/ha-hbload.ts SERVER[,SERVER…] JOIN_TOKEN NODES SECONDS CONCURRENCY steady[,changing]

import { simAddress, simGpuReports } from "./fleet";

const [serversArg, joinToken, nodesArg, secondsArg, concArg, modes] = process.argv.slice(2);
const servers = serversArg!.split(",");
const N = Number(nodesArg);
const SECONDS = Number(secondsArg);
const CONCURRENCY = Number(concArg);
let CHANGING = false;

interface SimNode {
  name: string;
  server: string;
  credential?: string;
  body: Record<string, unknown>;
  flip: boolean;
}

function nodeBody(i: number): Record<string, unknown> {
  const gpus = simGpuReports(i);
  return { node: `sim-${i}`, address: simAddress(i), agent_version: "bench", fabrics: [`ib-${i % 4}`], gpus, models: [`m${i % 500}`], replicas: [] };
}

const nodes: SimNode[] = Array.from({ length: N }, (_, i) => ({ name: `sim-${i}`, server: servers[i % servers.length]!, body: nodeBody(i), flip: false }));
let errors = 0;

async function beat(n: SimNode): Promise<number | undefined> {
  if (CHANGING && n.credential) {
    n.flip = !n.flip;
    n.body.models = n.flip ? [`m${Number(n.name.slice(4)) % 500}`, "extra-weights"] : [`m${Number(n.name.slice(4)) % 500}`];
  }
  const t = performance.now();
  try {
    const r = await fetch(`${n.server}/agent/v1/heartbeat`, {
      method: "POST",
      headers: { authorization: `Bearer ${n.credential ?? joinToken}`, "content-type": "application/json" },
      body: JSON.stringify(n.body),
      signal: AbortSignal.timeout(30_000),
    });
    const text = await r.text();
    if (!r.ok) {
      if (++errors <= 5) console.error(`${n.name}: ${r.status} ${text.slice(0, 200)}`);
      return undefined;
    }
    const a = JSON.parse(text) as { credential?: string };
    if (a.credential) n.credential = a.credential;
    return performance.now() - t;
  } catch (e) {
    if (++errors <= 5) console.error(`${n.name}: ${(e as Error).message}`);
    return undefined;
  }
}

const started = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: 64 }, async () => {
    while (next < N) {
      const n = nodes[next++]!;
      for (let tries = 0; tries < 20 && (await beat(n)) === undefined; tries++) await Bun.sleep(250);
    }
  }),
);
const joined = nodes.filter((n) => n.credential).length;
const joinSeconds = (performance.now() - started) / 1000;
errors = 0;
// One unmeasured round first (10 s at most): every node's first heartbeat after joining may still write.
next = 0;
const warmUntil = performance.now() + 10_000;
await Promise.all(Array.from({ length: CONCURRENCY }, async () => { while (next < N && performance.now() < warmUntil) await beat(nodes[next++]!); }));
for (const mode of modes!.split(",")) {
  CHANGING = mode === "changing";
  errors = 0;
  const lat: number[] = [];
  let i = 0;
  const t0 = performance.now();
  const until = t0 + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < until) {
        const ms = await beat(nodes[i++ % N]!);
        if (ms !== undefined) lat.push(ms);
      }
    }),
  );
  const secs = (performance.now() - t0) / 1000;
  lat.sort((a, b) => a - b);
  const q = (p: number) => lat[Math.min(lat.length - 1, Math.floor((p / 100) * lat.length))] ?? NaN;
  console.log(JSON.stringify({ mode, joined, joinSeconds, seconds: secs, answered: lat.length, errors, rate: lat.length / secs, p50: q(50), p99: q(99) }));
}
process.exit(0);
