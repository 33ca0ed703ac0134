// The HA bench's heartbeat part: `dist/llmgw serve` (pinned to CPU 0) on the store given
// (`--store` argument list: none for SQLite in its data dir), 1,000 simulated nodes joined
// through its agent API by lib/ha-hbload.ts (pinned to CPU 1), then heartbeats back to back for
// a few seconds, unchanged (`steady`) and with news each time (`changing`: a store write each).

import { rmSync } from "node:fs";
import { BUN, spawnChild } from "./procs";
import { allowAddresses, startScaleHead } from "./scale-head";
import { scratchDir } from "../../helpers/tmp";

export interface HeartbeatFigures {
  steady: { rate: number; p50: number; p99: number; errors: number };
  changing: { rate: number; p50: number; p99: number; errors: number };
  joined: number;
  joinSeconds: number;
}

export async function heartbeatBench(o: { nodes: number; seconds: number; concurrency: number; storeArgs: string[] }): Promise<HeartbeatFigures> {
  const dir = scratchDir("llmgw-bench-ha-hb-");
  const head = await startScaleHead(dir, o.nodes, { cpus: "0", extraArgs: ["--max-connections", "1024", ...o.storeArgs] });
  try {
    await allowAddresses(head, o.nodes);
    const gen = await spawnChild("ha-hbload", [BUN, "test/bench/lib/ha-hbload.ts", head.admin, head.joinToken, String(o.nodes), String(o.seconds), String(o.concurrency), "steady,changing"], {
      waitUrl: false,
      cpus: "1",
      nofile: 20000,
      env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" },
    });
    // Joining 1,000 nodes one write each may take minutes on a slow store: bounded, not short.
    const wait = 300_000 + 4 * o.seconds * 1000;
    const steady = JSON.parse(await gen.waitLine(/"mode":"steady"/, wait)) as HeartbeatFigures["steady"] & { joined: number; joinSeconds: number };
    const changing = JSON.parse(await gen.waitLine(/"mode":"changing"/, wait)) as HeartbeatFigures["changing"];
    await gen.kill();
    return { steady, changing, joined: steady.joined, joinSeconds: steady.joinSeconds };
  } finally {
    await head.serve.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}
