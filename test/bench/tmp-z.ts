import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BUN, spawnChild, killAll, freePort } from "./lib/procs";
const dir = mkdtempSync(join(tmpdir(), "llmgw-bench-hbprof-"));
const ap = freePort(), rp = freePort();
const serve = await spawnChild("serve", [BUN, "--cpu-prof-md", "--cpu-prof-dir=/tmp/prof-bench-serve", "src/main.ts", "serve", "--data-dir", dir, "--listen", `127.0.0.1:${rp}`, "--admin-listen", `127.0.0.1:${ap}`, "--admin-token", "bench-admin-token-0123456789abcdef", "--join-token", "bench-join-token-0123456789abcdef", "--log-level", "warn", "--max-nodes", "1100", "--admin-max-connections", "8192", "--admin-max-connections-per-address", "8192", "--heartbeat-rate", "1000", "--heartbeat-burst", "1000"], { waitUrl: false, cpus: "0", nofile: 20000 });
const admin = `http://127.0.0.1:${ap}`;
for (let i = 0; i < 200; i++) { try { await fetch(`${admin}/healthz`); break; } catch { await Bun.sleep(100); } }
const { allowAddresses } = await import("./lib/scale-head");
await allowAddresses({ api: async (p: string, init: RequestInit) => { const r = await fetch(`${admin}/api/v1${p}`, { ...init, headers: { authorization: "Bearer bench-admin-token-0123456789abcdef", "content-type": "application/json" } }); return r.json(); } } as any, 1000);
const gen = await spawnChild("gen", [BUN, "test/bench/lib/ha-hbload.ts", admin, "bench-join-token-0123456789abcdef", "1000", "8", "64", process.argv[2] ?? "steady"], { waitUrl: false, cpus: "1", nofile: 20000, env: { BUN_CONFIG_MAX_HTTP_REQUESTS: "65535" } });
await gen.proc.exited; await gen.outputDone; console.log(gen.lines.join("\n"));
process.kill(serve.pid, "SIGTERM"); await serve.proc.exited;
await killAll();
