// Benchmark: what engine auth costs the router. Two fake engines (ttft 0, no token delay, 4
// tokens), one started with a key (LLMGW_FAKE_ENGINE_API_KEY, as the agent starts it) and one
// without, each behind its own router process (lib/router-main.ts, the same code; the keyed
// one's endpoint carries the key, which the router presents as `Authorization: Bearer <key>`).
// Engines and routers share core 1; the client is this program on core 0: C keep-alive
// connections over Bun.connect, each sending a pre-serialised small chat request as soon as the
// last answer is complete (closed loop), so client cost is the same for both. The two targets
// take turns in rounds, so a slow spell of the shared machine hits both alike. Prints req/s and
// p50/p99 latency of each, the share of core 1 other processes took, and keyed/open overall
// and as the median of the per-round ratios (target ≥ 0.97). Refuses to measure when the keyed router's answer is not a 200 (a router that does
// not present the key gets 401 from the engine, which would look fast). About 30 s:
//   bun test/bench/engine-auth.ts [seconds-per-target, default 10] [connections, default 64]

import type { Socket } from "bun";
import { othersMeter } from "./lib/cpu";
import { BUN, cleanupOnExit, fakeEngineProc, killAll, pct, routerProc, spawnChild, table } from "./lib/procs";

const DURATION_S = Number(process.argv[2] ?? 10);
const CONNECTIONS = Number(process.argv[3] ?? 64);
const ROUNDS = 10;
const WARMUP_S = 1;
const MODEL = "m";
const KEY = "bench-engine-key-0123456789abcdef0123456789abcdef0123456789abcdef";
const ENGINE = { model: MODEL, ttftMs: 0, tokenDelayMs: 0, tokens: 4, slots: 4096 };

const BODY = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 4 });

interface Run {
  requests: number;
  non200: number;
  seconds: number;
  latenciesMs: number[];
}

/** Closed-loop load over raw keep-alive sockets; every answer must carry Content-Length. */
async function load(url: string, seconds: number, connections: number): Promise<Run> {
  const u = new URL(url);
  const req = new TextEncoder().encode(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(BODY)}\r\n\r\n${BODY}`,
  );
  const run: Run = { requests: 0, non200: 0, seconds, latenciesMs: [] };
  const endAt = performance.now() + seconds * 1000;
  let failure: Error | undefined;
  await Promise.all(
    Array.from(
      { length: connections },
      () =>
        new Promise<void>((resolve) => {
          let buf = Buffer.alloc(0);
          let sentAt = 0;
          const send = (s: Socket<undefined>) => {
            if (performance.now() >= endAt || failure) {
              s.end();
              resolve();
              return;
            }
            sentAt = performance.now();
            s.write(req);
          };
          void Bun.connect({
            hostname: u.hostname,
            port: Number(u.port),
            socket: {
              open: (s) => {
                s.setNoDelay(true);
                send(s);
              },
              data: (s, chunk) => {
                buf = buf.length === 0 ? Buffer.from(chunk) : Buffer.concat([buf, chunk]);
                const headEnd = buf.indexOf("\r\n\r\n");
                if (headEnd < 0) return;
                const head = buf.subarray(0, headEnd).toString("latin1");
                const len = /\r\ncontent-length:\s*(\d+)/i.exec(head);
                if (!len) {
                  failure ??= new Error(`an answer without Content-Length from ${url}: ${head.slice(0, 200)}`);
                  s.end();
                  resolve();
                  return;
                }
                const total = headEnd + 4 + Number(len[1]);
                if (buf.length < total) return;
                if (!head.startsWith("HTTP/1.1 200")) run.non200++;
                run.requests++;
                run.latenciesMs.push(performance.now() - sentAt);
                buf = buf.subarray(total);
                send(s);
              },
              close: () => resolve(),
              error: (_s, e) => {
                failure ??= e;
                resolve();
              },
            },
          }).catch((e: Error) => {
            failure ??= e;
            resolve();
          });
        }),
    ),
  );
  if (failure) throw failure;
  return run;
}

async function answer(url: string, headers: Record<string, string> = {}): Promise<{ status: number; text: string }> {
  const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: BODY });
  return { status: r.status, text: await r.text() };
}

cleanupOnExit();
try {
  await Bun.$`taskset -a -cp 0 ${process.pid}`.quiet();
  const open = await fakeEngineProc("engine (no key)", ENGINE, { cpus: "1" });
  const keyed = await fakeEngineProc("engine (keyed)", ENGINE, { cpus: "1", env: { LLMGW_FAKE_ENGINE_API_KEY: KEY } });
  const routerOpen = await routerProc("router (engine auth off)", MODEL, [open.url], { cpus: "1" });
  const endpoints = [{ id: "e0", url: keyed.url, models: [MODEL], engine: "vllm", pool: "default", weight: 1, priority: 0, key: KEY }];
  const routerKeyed = await spawnChild("router (engine auth on)", [BUN, "test/bench/lib/router-main.ts", "--port", "0", "--model", MODEL, "--metrics-ms", "1000"], {
    cpus: "1",
    env: { LLMGW_BENCH_ENDPOINTS: JSON.stringify(endpoints) },
  });
  const core1 = [open, keyed, routerOpen, routerKeyed];

  // The keyed engine really refuses a request without its key, and takes one with it.
  const bare = await answer(keyed.url);
  if (bare.status !== 401) throw new Error(`the keyed engine answered ${bare.status} without its key: ${bare.text.slice(0, 200)}`);
  if ((await answer(keyed.url, { authorization: `Bearer ${KEY}` })).status !== 200) throw new Error("the keyed engine refused its own key");
  for (const [name, r] of [["engine auth off", routerOpen], ["engine auth on", routerKeyed]] as const) {
    const a = await answer(r.url);
    if (a.status !== 200 || !/"finish_reason":"(stop|length)"/.test(a.text))
      throw new Error(
        `router (${name}) answered ${a.status}: ${a.text.slice(0, 300)}${a.status === 401 ? "\n(the router does not present EndpointInfo.key to the engine as Authorization: Bearer <key>)" : ""}`,
      );
  }

  const targets: [string, string][] = [
    ["engine auth off", routerOpen.url],
    ["engine auth on", routerKeyed.url],
  ];
  console.log(`engine auth: ${CONNECTIONS} keep-alive connections, closed loop, ${DURATION_S} s per target in ${ROUNDS} interleaved rounds; client on core 0, engines and routers on core 1; Bun ${Bun.version}`);
  for (const [, url] of targets) await load(url, WARMUP_S, CONNECTIONS);
  const acc = new Map(targets.map(([n]) => [n, { requests: 0, non200: 0, seconds: 0, lat: [] as number[], perRound: [] as number[], others: [] as number[] }]));
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate who goes first, so neither always follows the other's tail.
    const order = round % 2 === 0 ? targets : [...targets].reverse();
    for (const [name, url] of order) {
      const others = othersMeter(() => core1.map((c) => c.pid), 1);
      const r = await load(url, DURATION_S / ROUNDS, CONNECTIONS);
      const a = acc.get(name)!;
      a.others.push(others());
      a.requests += r.requests;
      a.non200 += r.non200;
      a.seconds += r.seconds;
      a.perRound.push(r.requests / r.seconds);
      for (const l of r.latenciesMs) a.lat.push(l);
    }
  }
  const rows: (string | number)[][] = [["target", "req/s", "per round", "p50 ms", "p99 ms", "non-200", "others on core 1"]];
  const rps = new Map<string, number>();
  for (const [name] of targets) {
    const a = acc.get(name)!;
    a.lat.sort((x, y) => x - y);
    const mean = a.requests / a.seconds;
    rps.set(name, mean);
    rows.push([
      name,
      Math.round(mean),
      a.perRound.map((x) => `${(x / 1000).toFixed(1)}k`).join(" "),
      pct(a.lat, 50).toFixed(2),
      pct(a.lat, 99).toFixed(2),
      a.non200,
      a.others.map((o) => `${(o * 100).toFixed(0)}%`).join(" "),
    ]);
  }
  console.log(table(rows));
  // Round by round the two ran back to back, so their ratio within a round is less exposed to
  // the machine's slow spells than the ratio of the totals.
  const on = acc.get("engine auth on")!.perRound;
  const off = acc.get("engine auth off")!.perRound;
  const paired = on.map((x, i) => x / off[i]!).sort((a, b) => a - b);
  console.log(
    `engine auth on / off = ${(rps.get("engine auth on")! / rps.get("engine auth off")!).toFixed(3)} overall, ${pct(paired, 50).toFixed(3)} median of the ${ROUNDS} rounds (target ≥ 0.97)`,
  );
} catch (e) {
  console.error(e instanceof Error ? e.message : e);
  process.exitCode = 1;
} finally {
  await killAll();
}
// Nothing of ours may outlive the bench, and no stray timer may hold it open.
process.exit();
